"""Several lakegate nodes for a benchmark, started and stopped with `lakegate cluster up|down`
(gateway/localcluster.py), in a temp dir of their own, optionally inside a network namespace
(``command_prefix=("ip", "netns", "exec", NAME)``, see benchmarks/netns.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
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
        log(f"{self.nodes} lakegate nodes {'standalone' if self.standalone or self.nodes == 1 else 'clustered'}: "
            f"{', '.join(self.urls)} (dir {self.workdir})")
        return self.endpoints()

    @property
    def urls(self) -> list[str]:
        assert self.state is not None
        return [node["url"] for node in self.state["nodes"]]

    def endpoints(self, tenant: Tenant = BENCH_TENANT) -> list[S3Endpoint]:
        return [S3Endpoint(url, tenant.access_key, tenant.secret_key, self.lake.region) for url in self.urls]

    def admin_stats(self, url: str) -> dict[str, Any]:
        """GET /_lakegate/admin/stats of one node (from this process: the namespace's own
        loopback needs ``fetch_json`` in it instead)."""
        with urllib.request.urlopen(url + "/_lakegate/admin/stats", timeout=10) as response:
            return json.loads(response.read())

    def totals(self, tenant: Tenant = BENCH_TENANT, stats: list[dict[str, Any]] | None = None) -> dict[str, int]:
        """Each per-tenant cache counter summed over the nodes."""
        total: dict[str, int] = {}
        for node in stats if stats is not None else [self.admin_stats(u) for u in self.urls]:
            for name, value in ((node.get("cache") or {}).get("per_tenant") or {}).get(tenant.name, {}).items():
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
