"""Several lakegate nodes on this machine, started and stopped with `lakegate cluster up|down`
(tools/localcluster.py) and looked at through DIR/cluster.json; for the cluster test tier and
the cluster benchmarks. Optionally inside a network namespace
(``command_prefix=("ip", "netns", "exec", NAME)``, see benchmarks/netns.py).

    cluster = LocalCluster(lake, nodes=3, tenants=(ALICE,)).up()
    cluster.node_ids                  ["node1", "node2", "node3"]
    cluster.urls / pids               node id -> its S3 endpoint (as clients reach it) / its pid
    cluster.endpoints(tenant)         the nodes as S3Endpoints with a tenant's keys
    cluster.targets["node2"]          a conformance Target (the first tenant's keys, its log)
    cluster.client("node2")           boto3 S3 client through that node (closed by ``down``)
    cluster.secret                    LAKEGATE_CLUSTER_SECRET of the nodes (for peer API tests)
    cluster.kill("node2", SIGKILL)    signal the node; waits until it is gone for a fatal signal
    cluster.restart("node2")          start it again with its first argv and environment
    cluster.admin_stats("node2")      GET /_lakegate/admin/stats, as JSON (signed with the admin key)
    cluster.admin("node2", PATH)      any admin GET, signed (the nodes get endpoints.ADMIN_ENV)
    cluster.totals()                  per-tenant cache counters summed over the nodes
    cluster.status()                  `lakegate cluster status --json`
    cluster.down()                    `lakegate cluster down` (and the temp workdir removed)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.endpoints import ADMIN_ENV, BENCH_TENANT, REGION, S3Endpoint, Target, Tenant, admin_get_json, tenants_toml
from harness.gateway import lake_location
from harness.processes import cancel_on_exit, gateway_environment, log, on_exit

from tools.localcluster import STATE_FILE, ClusterState, NodeState, is_node_process

CLI_TIMEOUT_S = 180
_FATAL = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)


@dataclass
class LocalCluster:
    lake: S3Endpoint | str  # an S3 lake (keys passed by environment only) or "dir:PATH"
    nodes: int = 3
    tenants: Sequence[Tenant] = (BENCH_TENANT,)
    standalone: bool = False  # every node alone (L1 only), no peers
    host: str = "127.0.0.1"
    advertise_host: str | None = None  # peers reach each other here (a shaped address in a namespace)
    client_host: str | None = None  # clients reach the nodes here instead (default: advertise_host)
    cache_capacity: str | None = None
    l2_capacity: str | None = None
    up_args: tuple[str, ...] = ()  # more `cluster up` options
    serve_args: tuple[str, ...] = ()  # passed to every `lakegate serve`
    env: Mapping[str, str] = field(default_factory=lambda: {"LAKEGATE_ACCESS_LOG": "false"})
    command_prefix: tuple[str, ...] = ()
    converge: bool = True  # up() returns once every node sees the others and they agree on the ring
    workdir: Path | None = None  # the command's cwd (tenants file, cluster dir); None: a temp dir
    state: ClusterState | None = None
    clients: list[Any] = field(default_factory=list)
    _temp_dir: bool = False

    @property
    def dir(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "cluster"

    @property
    def tenant(self) -> Tenant:
        return self.tenants[0]

    # -- lifecycle --------------------------------------------------------------------------------

    def cli(self, command: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """`lakegate cluster COMMAND --dir DIR ARGS...`; the lake keys by environment only."""
        keys = {} if isinstance(self.lake, str) else {"LAKEGATE_LAKE_ACCESS_KEY": self.lake.access_key,
                                                      "LAKEGATE_LAKE_SECRET_KEY": self.lake.secret_key}
        env = gateway_environment({**ADMIN_ENV, **self.env, **keys})  # LAKEGATE_* reach the nodes
        cmd = [*self.command_prefix, sys.executable, "-m", "gateway.cli", "cluster", command,
               "--dir", str(self.dir), *args]
        done = subprocess.run(cmd, cwd=self.workdir, env=env, capture_output=True, text=True, check=False,
                              timeout=CLI_TIMEOUT_S, stdin=subprocess.DEVNULL)
        if check and done.returncode != 0:
            raise RuntimeError(f"lakegate cluster {command} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        return done

    def up(self) -> LocalCluster:
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="lakegate-cluster-"))
            self._temp_dir = True
        tenants = self.workdir / "tenants.toml"
        tenants.write_text(tenants_toml(self.tenants))
        on_exit("lakegate cluster", self.down)
        self.cli("up", "--nodes", str(self.nodes), "--lake", lake_location(self.lake), "--tenants", str(tenants),
                 "--host", self.host, "--base-port", "0", "--json", *self._up_options())
        self.reload()
        clustered = not self.standalone and "--standalone" not in self.up_args and self.nodes > 1
        log(f"{self.nodes} lakegate nodes {'clustered' if clustered else 'standalone'}: "
            f"{', '.join(self.urls.values())} (dir {self.workdir})")
        if clustered and self.converge:
            self._wait_for_members()
        return self

    def _up_options(self) -> list[str]:
        options = list(self.up_args)
        if self.advertise_host:
            options += ["--advertise-host", self.advertise_host]
        if self.standalone:
            options.append("--standalone")
        if self.cache_capacity:
            options += ["--cache-capacity", self.cache_capacity]
        if self.l2_capacity:
            options += ["--l2-capacity", self.l2_capacity]
        if self.serve_args:
            options += ["--", *self.serve_args]
        return options

    def down(self) -> None:
        cancel_on_exit(self.down)
        for client in self.clients:
            client.close()  # no idle keep-alive connection holds a node's shutdown up
        self.clients.clear()
        if self.workdir is None:
            return
        try:
            if (self.dir / STATE_FILE).exists():
                self.cli("down")
        finally:
            if self._temp_dir:
                shutil.rmtree(self.workdir, ignore_errors=True)
                self.workdir, self.state = None, None

    def reload(self) -> None:
        self.state = ClusterState.load(self.dir)
        if self.state is None:
            raise RuntimeError(f"no {STATE_FILE} in {self.dir}")

    def _wait_for_members(self, timeout: float = 30.0) -> None:
        """Until every worker of every node has heard from all the other nodes (heartbeats) and
        they agree on the ring. Each worker keeps its own view (a node's workers heartbeat on their
        own), so one answer per node is not enough: right after a start one worker may still miss
        a node the other has heard. Each request is a connection of its own, which the kernel
        hands to any worker (SO_REUSEPORT), so polling reaches them all."""
        deadline = time.monotonic() + timeout
        joined: dict[str, dict[int, int]] = {node: {} for node in self.urls}  # node -> worker pid -> ring version
        while True:
            views = {node: self._get(url, "/_lakegate/admin/cluster") for node, url in self.urls.items()}
            for node, view in views.items():
                if len(view["live"]) == self.nodes:
                    joined[node][view["worker_pid"]] = view["ring_version"]
                else:
                    joined[node].pop(view["worker_pid"], None)
            versions = {v for workers in joined.values() for v in workers.values()}
            if len(versions) == 1 and all(len(joined[n]) >= views[n]["workers"] for n in views):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the nodes' workers did not converge on one ring in {timeout:.0f} s: {joined} {views}")
            time.sleep(0.05)

    # -- nodes ------------------------------------------------------------------------------------

    def _state(self) -> ClusterState:
        if self.state is None:
            raise RuntimeError("the cluster is not up")
        return self.state

    def _nodes(self) -> list[NodeState]:
        return self._state().nodes

    def node(self, node_id: str) -> NodeState:
        return self._state().node(node_id)

    @property
    def node_ids(self) -> list[str]:
        return [n.id for n in self._nodes()]

    @property
    def urls(self) -> dict[str, str]:
        """Node id -> its S3 endpoint as clients reach it."""
        return {n.id: self._client_url(n.url) for n in self._nodes()}

    def _client_url(self, url: str) -> str:
        if self.client_host and self.advertise_host:
            return url.replace(f"//{self.advertise_host}:", f"//{self.client_host}:", 1)
        return url

    @property
    def pids(self) -> dict[str, int]:
        return {n.id: n.pid for n in self._nodes()}

    @property
    def secret(self) -> str:
        return self._state().secret

    def endpoints(self, tenant: Tenant | None = None) -> list[S3Endpoint]:
        tenant = tenant or self.tenant
        region = REGION if isinstance(self.lake, str) else self.lake.region
        return [S3Endpoint(url, tenant.access_key, tenant.secret_key, region) for url in self.urls.values()]

    @property
    def targets(self) -> dict[str, Target]:
        return {
            n.id: Target(name=n.id, endpoint_url=self._client_url(n.url), access_key=self.tenant.access_key,
                         secret_key=self.tenant.secret_key, lake=self._lake_kind(), via_gateway=True, log_path=Path(n.log))
            for n in self._nodes()
        }

    def _lake_kind(self) -> str:
        return "dir" if isinstance(self.lake, str) else "rgw"

    def client(self, node_id: str, **options: Any) -> Any:
        """A boto3 S3 client through ``node_id`` (closed by ``down``)."""
        client = self.targets[node_id].client(**options)
        self.clients.append(client)
        return client

    def alive(self, node_id: str) -> bool:
        return is_node_process(self.node(node_id))

    def kill(self, node_id: str, sig: int = signal.SIGKILL, timeout: float = 15.0) -> None:
        """Send ``sig`` to the node; for a fatal signal, return once the process is gone."""
        node = self.node(node_id)
        if not is_node_process(node):
            raise RuntimeError(f"{node_id} (pid {node.pid}) is not running")
        os.kill(node.pid, sig)
        if sig not in _FATAL:
            return
        deadline = time.monotonic() + timeout
        while is_node_process(node):
            if time.monotonic() >= deadline:
                raise RuntimeError(f"{node_id} (pid {node.pid}) still running {timeout:.0f} s after signal {sig}")
            time.sleep(0.02)

    def restart(self, node_id: str) -> None:
        """Start the node again with the argv and environment it was first started with (a node
        still running is killed first)."""
        if self.alive(node_id):
            self.kill(node_id, signal.SIGKILL)
        self.cli("start-node", node_id)
        self.reload()

    # -- looking at it ----------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.cli("status", "--json", check=False).stdout)
        return result

    def _get(self, url: str, path: str) -> dict[str, Any]:
        result: dict[str, Any] = admin_get_json(url + path)
        return result

    def admin(self, node_id: str, path: str) -> Any:
        """GET ``path`` (``/_lakegate/admin/...``, with its query) of a node, signed with the admin key."""
        return admin_get_json(self.urls[node_id] + path)

    def admin_stats(self, node_id: str) -> dict[str, Any]:
        return self._get(self.urls[node_id], "/_lakegate/admin/stats")

    def totals(self, tenants: Sequence[Tenant] | None = None) -> dict[str, int]:
        """Each per-tenant cache counter summed over the nodes and ``tenants`` (default: all of
        this cluster's), from one GET /_lakegate/admin/stats per node."""
        names = {t.name for t in (tenants if tenants is not None else self.tenants)}
        total: dict[str, int] = {}
        for node_id in self.node_ids:
            per_tenant = (self.admin_stats(node_id).get("cache") or {}).get("per_tenant") or {}
            for tenant, counters in per_tenant.items():
                if tenant in names:
                    for name, value in counters.items():
                        total[name] = total.get(name, 0) + value
        return total

    def log_tails(self, lines: int = 20) -> dict[str, str]:
        return {node_id: target.log_tail(lines) for node_id, target in self.targets.items()}


# the `start_cluster` fixture: start_cluster(nodes=3, up_args=(...)) -> a cluster that is up
StartCluster = Callable[..., LocalCluster]
