"""A local cluster for the cluster tier: real `lakegate serve` processes over the real Ceph RGW,
started and stopped with `lakegate cluster up|down`, looked at through DIR/cluster.json.

The tests get one `LocalCluster` from the `cluster` fixture (tests/cluster/conftest.py):

    cluster.node_ids                  ["node1", "node2", "node3"]
    cluster.urls / pids               node id -> its S3 endpoint / its current pid
    cluster.targets["node2"]          a helpers.Target (endpoint_url, ALICE's keys, log_path)
    cluster.client("node2")           boto3 S3 client through that node
    cluster.secret                    LAKEGATE_CLUSTER_SECRET of the nodes (for peer API tests)
    cluster.kill("node2", SIGKILL)    signal the node; waits until it is gone for a fatal signal
    cluster.restart("node2")          start it again with its first argv and environment
    cluster.admin_stats("node2")      GET /_lakegate/admin/stats, as JSON
    cluster.status()                  `lakegate cluster status --json`
    cluster.down()                    `lakegate cluster down`
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers import Target, Tenant, gateway_environment

from tools.localcluster import STATE_FILE, ClusterState, NodeState, is_node_process

CLI_TIMEOUT_S = 180
_FATAL = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)


@dataclass
class LocalCluster:
    workdir: Path  # the command's cwd: the tenants file, the cluster dir
    lake: Target  # the RGW itself
    tenant: Tenant
    nodes: int = 3
    up_args: tuple[str, ...] = ()  # more `cluster up` options, e.g. ("--standalone",) or ("--", "--meta-ttl", ...)
    state: ClusterState | None = None
    clients: list[Any] = field(default_factory=list)

    @property
    def dir(self) -> Path:
        return self.workdir / "cluster"

    # -- lifecycle --------------------------------------------------------------------------------

    def cli(self, command: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """`lakegate cluster COMMAND --dir DIR ARGS...`; the lake keys by environment only."""
        env = gateway_environment({
            "LAKEGATE_LAKE_ACCESS_KEY": self.lake.access_key,
            "LAKEGATE_LAKE_SECRET_KEY": self.lake.secret_key,
        })
        cmd = [sys.executable, "-m", "gateway.cli", "cluster", command, "--dir", str(self.dir), *args]
        done = subprocess.run(cmd, cwd=self.workdir, env=env, capture_output=True, text=True, check=False,
                              timeout=CLI_TIMEOUT_S, stdin=subprocess.DEVNULL)
        if check and done.returncode != 0:
            raise RuntimeError(f"lakegate cluster {command} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        return done

    def up(self) -> LocalCluster:
        tenants = self.workdir / "tenants.toml"
        tenants.write_text(self.tenant.to_toml())
        self.cli("up", "--nodes", str(self.nodes), "--lake", self.lake.endpoint_url, "--tenants", str(tenants),
                 "--base-port", "0", "--json", *self.up_args)
        self.reload()
        return self

    def down(self) -> None:
        for client in self.clients:
            client.close()  # no idle keep-alive connection holds a node's shutdown up
        self.clients.clear()
        if (self.dir / STATE_FILE).exists():
            self.cli("down")

    def reload(self) -> None:
        self.state = ClusterState.load(self.dir)
        if self.state is None:
            raise RuntimeError(f"no {STATE_FILE} in {self.dir}")

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
        return {n.id: n.url for n in self._nodes()}

    @property
    def pids(self) -> dict[str, int]:
        return {n.id: n.pid for n in self._nodes()}

    @property
    def secret(self) -> str:
        return self._state().secret

    @property
    def targets(self) -> dict[str, Target]:
        return {
            n.id: Target(name=n.id, endpoint_url=n.url, access_key=self.tenant.access_key,
                         secret_key=self.tenant.secret_key, lake="rgw", via_gateway=True, log_path=Path(n.log))
            for n in self._nodes()
        }

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

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.cli("status", "--json", check=False).stdout)
        return result

    def admin_stats(self, node_id: str) -> dict[str, Any]:
        with urllib.request.urlopen(self.urls[node_id] + "/_lakegate/admin/stats", timeout=10) as response:
            result: dict[str, Any] = json.load(response)
        return result

    def log_tails(self, lines: int = 20) -> dict[str, str]:
        return {node_id: target.log_tail(lines) for node_id, target in self.targets.items()}


# the `start_cluster` fixture: start_cluster(nodes=3, up_args=(...)) -> a cluster that is up
StartCluster = Callable[..., LocalCluster]
