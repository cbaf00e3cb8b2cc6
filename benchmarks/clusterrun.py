"""Several lakegate nodes for a benchmark, started and stopped with `lakegate cluster up|down`
(tools/localcluster.py), in a temp dir of their own, optionally inside a network namespace
(``command_prefix=("ip", "netns", "exec", NAME)``, see benchmarks/netns.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import BENCH_TENANT, REPO_ROOT, S3Endpoint, Tenant, cancel_on_exit, log, on_exit


@dataclass
class BenchCluster:
    lake: S3Endpoint
    nodes: int = 3
    standalone: bool = False  # every node alone (L1 only), no peers
    tenants: tuple[Tenant, ...] = (BENCH_TENANT,)
    host: str = "127.0.0.1"
    advertise_host: str | None = None  # peers reach each other here (a shaped address in a namespace)
    client_host: str | None = None  # clients reach the nodes here instead (default: advertise_host)
    cache_capacity: str | None = None
    l2_capacity: str | None = None
    serve_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=lambda: {"LAKEGATE_ACCESS_LOG": "false"})
    command_prefix: tuple[str, ...] = ()
    workdir: Path | None = None
    state: dict[str, Any] | None = None

    def _cli(self, *args: str, timeout: float = 120) -> str:
        assert self.workdir is not None
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_", "LAKEGATE_"))}
        env.update(self.env)
        env.update(LAKEGATE_LAKE_ACCESS_KEY=self.lake.access_key, LAKEGATE_LAKE_SECRET_KEY=self.lake.secret_key,
                   PYTHONPATH=str(REPO_ROOT), PYTHONUNBUFFERED="1")
        cmd = [*self.command_prefix, sys.executable, "-m", "gateway.cli", "cluster", *args,
               "--dir", str(self.workdir / "cluster")]
        done = subprocess.run(cmd, cwd=self.workdir, env=env, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"lakegate cluster {args[0]} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def start(self) -> list[S3Endpoint]:
        self.workdir = Path(tempfile.mkdtemp(prefix="lakegate-bench-cluster-"))
        tenants = self.workdir / "tenants.toml"
        tenants.write_text("\n".join(t.to_toml() for t in self.tenants))
        args = ["up", "--nodes", str(self.nodes), "--lake", self.lake.url, "--tenants", str(tenants),
                "--host", self.host, "--base-port", "0", "--json"]
        if self.advertise_host:
            args += ["--advertise-host", self.advertise_host]
        if self.standalone:
            args.append("--standalone")
        if self.cache_capacity:
            args += ["--cache-capacity", self.cache_capacity]
        if self.l2_capacity:
            args += ["--l2-capacity", self.l2_capacity]
        if self.serve_args:
            args += ["--", *self.serve_args]
        on_exit("lakegate cluster", self.stop)
        self.state = json.loads(self._cli(*args))
        clustered = not self.standalone and self.nodes > 1
        log(f"{self.nodes} lakegate nodes {'clustered' if clustered else 'standalone'}: "
            f"{', '.join(self.urls)} (dir {self.workdir})")
        if clustered:
            self._wait_for_members()
        return self.endpoints()

    @property
    def urls(self) -> list[str]:
        """The nodes' S3 endpoints as clients reach them."""
        assert self.state is not None
        urls = [node["url"] for node in self.state["nodes"]]
        if self.client_host and self.advertise_host:
            urls = [u.replace(f"//{self.advertise_host}:", f"//{self.client_host}:", 1) for u in urls]
        return urls

    def endpoints(self, tenant: Tenant = BENCH_TENANT) -> list[S3Endpoint]:
        return [S3Endpoint(url, tenant.access_key, tenant.secret_key, self.lake.region) for url in self.urls]

    def _get(self, url: str, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(url + path, timeout=10) as response:
            return json.loads(response.read())

    def _wait_for_members(self, timeout: float = 30.0) -> None:
        """Until every node has heard from all the others (heartbeats) and they agree on the ring."""
        deadline = time.monotonic() + timeout
        while True:
            views = [self._get(u, "/_lakegate/admin/cluster") for u in self.urls]
            if all(len(v["live"]) == self.nodes for v in views) and len({v["ring_version"] for v in views}) == 1:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the nodes did not converge on one ring in {timeout:.0f} s: {views}")
            time.sleep(0.1)

    def totals(self, tenants: tuple[Tenant, ...] | None = None) -> dict[str, int]:
        """Each per-tenant cache counter summed over the nodes and ``tenants`` (default: all of
        this cluster's), from one GET /_lakegate/admin/stats per node."""
        names = {t.name for t in (tenants if tenants is not None else self.tenants)}
        total: dict[str, int] = {}
        for url in self.urls:
            per_tenant = (self._get(url, "/_lakegate/admin/stats").get("cache") or {}).get("per_tenant") or {}
            for tenant, counters in per_tenant.items():
                if tenant in names:
                    for name, value in counters.items():
                        total[name] = total.get(name, 0) + value
        return total

    def stop(self) -> None:
        cancel_on_exit(self.stop)
        if self.workdir is None:
            return
        try:
            if self.state is not None:
                self._cli("down")
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir, self.state = None, None
