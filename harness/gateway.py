"""One `lakegate serve` child process, the way the tests and the benchmarks start it.

    gateway = Gateway(lake, tenants=(ALICE,), env={"LAKEGATE_META_TTL": "1"})
    endpoint = gateway.start()      # returns once GET /_lakegate/health answers 200
    gateway.url, gateway.pid, gateway.log_path, gateway.cache_dir
    gateway.target("gw-rgw", "rgw") a conformance Target through it (the first tenant's keys)
    gateway.admin_stats()           GET /_lakegate/admin/stats, signed with the admin key
    gateway.stop()                  SIGTERM, then SIGKILL after ``stop_timeout``

The lake is an S3 endpoint (its keys go on the command line) or a ``dir:PATH`` folder lake.
The process runs in ``workdir`` (given, and kept; or a temp dir removed by :meth:`stop`), which
holds the tenants file, the log and by default the cache, so no stray .env is read; its
environment carries no AWS_/S3_/LAKEGATE_ variables but the harness's admin key pair
(endpoints.ADMIN_ENV, for :meth:`admin_stats`) and ``env`` (processes.gateway_environment). A gateway still running at exit is stopped
(processes.on_exit).
"""

from __future__ import annotations

import http.client
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self


from harness.endpoints import ADMIN_ENV, BENCH_TENANT, REGION, S3Endpoint, Target, Tenant, admin_get_json, tenants_toml
from harness.ports import free_port
from harness.processes import cancel_on_exit, gateway_environment, lakegate_command, listening_pids, log, on_exit, terminate
from tools.localcluster import listening

HEALTH_PATH = "/_lakegate/health"
ADMIN_STATS_PATH = "/_lakegate/admin/stats"


def lake_location(lake: S3Endpoint | str) -> str:
    """What --lake says: the endpoint's URL or ``dir:PATH``."""
    return lake if isinstance(lake, str) else lake.url


def lake_arguments(lake: S3Endpoint | str) -> list[str]:
    """`lakegate serve` options naming the lake: an S3 endpoint with its keys, or ``dir:PATH``."""
    if isinstance(lake, str):
        return ["--lake", lake]
    return ["--lake", lake.url, "--lake-access-key", lake.access_key, "--lake-secret-key", lake.secret_key,
            "--lake-region", lake.region]


@dataclass
class Gateway:
    lake: S3Endpoint | str
    tenants: Sequence[Tenant] = (BENCH_TENANT,)
    env: Mapping[str, str] = field(default_factory=lambda: {"LAKEGATE_ACCESS_LOG": "false"})
    extra_args: tuple[str, ...] = ()
    tls: Mapping[str, str] | None = None  # {"cert": PEM, "key": PEM, "ca": PEM clients trust}
    command: tuple[str, ...] = ()  # instead of the lakegate CLI, e.g. a wrapper that patches or profiles it
    workdir: Path | None = None
    cache_dir: Path | None = None  # default: WORKDIR/cache
    port: int = 0  # 0: a free port, chosen at start
    start_timeout: float = 30.0
    stop_timeout: float = 15.0
    keep_dir: bool = False  # keep a temp workdir after stop (to read the log)
    proc: subprocess.Popen[bytes] | None = None
    _temp_dir: bool = False

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def log_path(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "lakegate.log"

    @property
    def ca_bundle(self) -> str | None:
        return self.tls["ca"] if self.tls else None

    def endpoint(self, tenant: Tenant | None = None) -> S3Endpoint:
        tenant = tenant or self.tenants[0]
        region = self.lake.region if isinstance(self.lake, S3Endpoint) else REGION
        return S3Endpoint(self.url, tenant.access_key, tenant.secret_key, region)

    def target(self, name: str, lake: str, tenant: Tenant | None = None) -> Target:
        """This gateway as a conformance target, with ``tenant``'s keys (default: the first)."""
        tenant = tenant or self.tenants[0]
        return Target(name=name, endpoint_url=self.url, access_key=tenant.access_key,
                      secret_key=tenant.secret_key, lake=lake, via_gateway=True, ca_bundle=self.ca_bundle,
                      log_path=self.log_path)

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> S3Endpoint:
        self._prepare_dirs()
        self.port = self.port or free_port()
        cmd = [*(self.command or lakegate_command()), "serve", "--listen", f"127.0.0.1:{self.port}",
               *self.arguments()]
        on_exit("lakegate", self.stop)
        with open(self.log_path, "ab") as out:
            out.write(f"$ {' '.join(cmd)}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(cmd, cwd=self.workdir, env=gateway_environment({**ADMIN_ENV, **self.env}),
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        self._wait_healthy()
        self._wait_workers()
        log(f"lakegate serving at {self.url} (pid {self.pid}, lake {lake_location(self.lake)}, log {self.log_path})")
        return self.endpoint()

    @property
    def workers(self) -> int:
        return int(self.env.get("LAKEGATE_WORKERS", "1"))

    def listening_workers(self) -> list[int]:
        """The pids of this gateway's processes listening on its port (its workers)."""
        return listening_pids(self.pid, self.port)

    def _wait_workers(self) -> None:
        """With several workers, health answers once the first listens: wait for all of them,
        so that connections made next are spread over every worker."""
        if self.workers <= 1:
            return
        deadline = time.monotonic() + self.start_timeout
        while len(self.listening_workers()) < self.workers:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.workers} workers never listened: {self.listening_workers()}; see {self.log_path}")
            time.sleep(0.05)

    def arguments(self) -> list[str]:
        """The `serve` options after --listen: lake, tenants, cache dir, TLS, ``extra_args``."""
        assert self.workdir is not None and self.cache_dir is not None
        args = [*lake_arguments(self.lake), "--tenants", str(self.workdir / "tenants.toml"),
                "--cache-dir", str(self.cache_dir)]
        if self.tls:
            args += ["--tls-cert", self.tls["cert"], "--tls-key", self.tls["key"]]
        return [*args, *self.extra_args]

    def _prepare_dirs(self) -> None:
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="lakegate-gw-"))
            self._temp_dir = True
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "tenants.toml").write_text(tenants_toml(self.tenants))
        self.cache_dir = self.cache_dir or self.workdir / "cache"
        self.cache_dir.mkdir(parents=True, exist_ok=True)

    def _wait_healthy(self) -> None:
        assert self.proc is not None
        context = ssl.create_default_context(cafile=self.ca_bundle) if self.ca_bundle else None
        deadline = time.monotonic() + self.start_timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"lakegate serve exited with code {self.proc.returncode} before it was "
                                   f"healthy; its output ({self.log_path}):\n{self.output_tail()}")
            if listening(self.port) is False:  # no connection before it listens (localcluster.health says why)
                last = "not listening yet"
                time.sleep(0.1)
                continue
            try:
                with urllib.request.urlopen(self.url + HEALTH_PATH, timeout=2, context=context) as response:
                    if response.status == 200:
                        return
                    last = f"HTTP {response.status}"
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}"
            except (OSError, ValueError, http.client.HTTPException) as exc:
                last = repr(exc)
            time.sleep(0.1)
        message = (f"lakegate serve did not answer GET {HEALTH_PATH} with 200 within {self.start_timeout:.0f} s "
                   f"(last: {last}); its output ({self.log_path}):\n{self.output_tail()}")
        self.stop()
        raise RuntimeError(message)

    def stop(self) -> None:
        cancel_on_exit(self.stop)
        if terminate(self.proc, signal.SIGTERM, grace=self.stop_timeout) and self.workdir is not None:
            with open(self.log_path, "a") as out:
                out.write(f"(harness: no exit {self.stop_timeout:.0f} s after SIGTERM, killed)\n")
        if self._temp_dir and not self.keep_dir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- looking at it -----------------------------------------------------------------------------

    def admin_stats(self) -> dict[str, Any]:
        """GET /_lakegate/admin/stats (cache counters per tenant, L1 store figures)."""
        result: dict[str, Any] = admin_get_json(self.url + ADMIN_STATS_PATH, ca_bundle=self.ca_bundle)
        return result

    def tenant_cache_counters(self, tenant: Tenant = BENCH_TENANT) -> dict[str, int]:
        """The cache counters of one tenant (hits, misses, lake_gets, meta_misses...), 0 if absent."""
        cache = self.admin_stats().get("cache") or {}
        return dict((cache.get("per_tenant") or {}).get(tenant.name, {}))

    def output_tail(self, lines: int = 60) -> str:
        if self.workdir is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
