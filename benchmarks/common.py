"""Reusable parts of the lakegate benchmarks.

* :class:`CephCluster` - a throwaway single-node Ceph RGW (deploy/ceph/start-ceph.sh) with its
  own data folder and ports, stopped at the end (also on failure: ``atexit`` + signals).
* :class:`Gateway` - a ``lakegate serve`` subprocess on a free port with a temp tenants file
  and cache dir, started once GET /_lakegate/health answers 200.
* :class:`RawS3Client` (default) and :class:`HttpxS3Client` - async S3 clients signing with
  botocore's SigV4 signer and ``UNSIGNED-PAYLOAD``, bodies read in 1 MiB chunks and discarded;
  :func:`run_async` runs them on uvloop when installed.
* Timing and CPU helpers (:func:`process_cpu_seconds` reads /proc/<pid>/stat), statistics,
  machine facts, and JSON output (stdout + benchmarks/results/<name>.json).

Progress goes to stderr (:func:`log`); stdout is kept for the one JSON result.
"""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import json
import math
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self, TypeVar
from urllib.parse import quote, urlsplit

import httpx2 as httpx  # the maintained continuation of httpx, same API
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = Path(__file__).resolve().parent / "results"
CEPH_SCRIPTS = REPO_ROOT / "deploy" / "ceph"
HEALTH_PATH = "/_lakegate/health"
ADMIN_STATS_PATH = "/_lakegate/admin/stats"
REGION = "us-east-1"
KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

_T0 = time.monotonic()
T = TypeVar("T")


# -- progress ------------------------------------------------------------------------------------


def log(message: str) -> None:
    """One progress line on stderr, with seconds since the benchmark started."""
    print(f"[bench {time.monotonic() - _T0:7.1f}s] {message}", file=sys.stderr, flush=True)


# -- cleanup on exit, failure and signals --------------------------------------------------------

_cleanups: list[tuple[str, Callable[[], None]]] = []


def on_exit(name: str, action: Callable[[], None]) -> None:
    """Run ``action`` at exit (newest first) unless :func:`cancel_on_exit` removed it first;
    actions must be idempotent (they also run from the owner's ``finally``)."""
    _cleanups.append((name, action))


def cancel_on_exit(action: Callable[[], None]) -> None:
    _cleanups[:] = [(n, a) for n, a in _cleanups if a is not action]


@atexit.register
def _run_cleanups() -> None:
    while _cleanups:
        name, action = _cleanups.pop()
        try:
            action()
        except Exception as exc:  # noqa: BLE001 - keep cleaning up the rest
            print(f"[bench] cleanup {name} failed: {exc!r}", file=sys.stderr, flush=True)


def exit_on_signals() -> None:
    """SIGTERM / SIGHUP raise SystemExit (SIGINT already raises KeyboardInterrupt), so
    ``finally`` blocks and ``atexit`` stop what the benchmark started."""

    def handler(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


# -- ports and processes -------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_busy(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


_CLK_TCK = os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    fields = stat[stat.rindex(b")") + 2 :].split()  # fields after "(comm)": state is field 3
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK  # fields 14 and 15 of proc(5)


def self_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


class CpuMeter:
    """CPU seconds used by a set of processes (by pid) over a span; :meth:`start` / :meth:`stop`
    may be called repeatedly and the spans add up."""

    def __init__(self, pids: Iterable[int] = (), include_self: bool = False) -> None:
        self.pids = list(pids)
        self.include_self = include_self
        self.seconds = 0.0
        self._started: float | None = None

    def _now(self) -> float:
        total = sum(process_cpu_seconds(pid) for pid in self.pids)
        return total + (self_cpu_seconds() if self.include_self else 0.0)

    def start(self) -> None:
        self._started = self._now()

    def stop(self) -> float:
        assert self._started is not None, "stop() without start()"
        span = self._now() - self._started
        self.seconds += span
        self._started = None
        return span


# -- endpoints and tenants -----------------------------------------------------------------------


@dataclass(frozen=True)
class S3Endpoint:
    url: str  # http(s)://host:port
    access_key: str
    secret_key: str
    region: str = REGION


@dataclass(frozen=True)
class Tenant:
    name: str
    access_key: str
    secret_key: str

    def to_toml(self) -> str:
        return f'[[tenant]]\nname = "{self.name}"\naccess_key = "{self.access_key}"\nsecret_key = "{self.secret_key}"\n'


BENCH_TENANT = Tenant("bench", "BENCHACCESSKEY000001", "bench-secret-0123456789")


# -- Ceph ----------------------------------------------------------------------------------------


@dataclass
class CephCluster:
    """A throwaway single-node Ceph RGW, started with deploy/ceph/start-ceph.sh in its own data
    folder and on its own ports (so it never touches a developer's cluster), stopped with
    stop-ceph.sh, which wipes the folder.

    ``command_prefix`` runs the daemons elsewhere, e.g. ``("ip", "netns", "exec", NAME)`` for a
    network namespace (benchmarks/netns.py): their 127.0.0.1 is then that namespace's, so the
    endpoint is reachable only from inside it. Stopping needs no prefix (it goes by pid)."""

    ceph_dir: Path = Path("/tmp/lakegate-bench-ceph")
    rgw_port: int = 7590
    mon_port: int = 40990
    ms_port_min: int = 47000
    ms_port_max: int = 47099
    osd_size_gb: int = 4
    osd_store: str = "memstore"
    start_timeout: float = 300.0
    command_prefix: tuple[str, ...] = ()
    endpoint: S3Endpoint | None = None
    _started: bool = False
    _rgw_proc: subprocess.Popen[bytes] | None = None

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CEPH_", "S3_ACCESS", "S3_SECRET"))}
        env.update(
            CEPH_DIR=str(self.ceph_dir),
            CEPH_RGW_PORT=str(self.rgw_port),
            CEPH_MON_PORT=str(self.mon_port),
            CEPH_MS_PORT_MIN=str(self.ms_port_min),
            CEPH_MS_PORT_MAX=str(self.ms_port_max),
            CEPH_OSD_SIZE_GB=str(self.osd_size_gb),
            CEPH_OSD_STORE=self.osd_store,
        )
        return env

    def start(self) -> S3Endpoint:
        log(f"starting Ceph in {self.ceph_dir} (RGW port {self.rgw_port}, mon {self.mon_port}, "
            f"msgr {self.ms_port_min}-{self.ms_port_max}, {self.osd_store} {self.osd_size_gb} GB)")
        # registered before the script runs: if we die while it runs, what it started (its pids
        # file) still gets stopped
        self._started = True
        on_exit("ceph", self.stop)
        try:
            result = subprocess.run(
                [*self.command_prefix, "bash", str(CEPH_SCRIPTS / "start-ceph.sh")],
                env=self._env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                timeout=self.start_timeout, start_new_session=True, check=False,
            )
        except BaseException:  # interrupted or timed out mid-start: stop what the script started
            self.stop()
            raise
        output = result.stdout.decode(errors="replace")
        for line in output.splitlines():
            print(f"    {line}", file=sys.stderr)
        if result.returncode != 0:
            # the script stops what it started when it fails; its pids file may be an older
            # run's (it refuses to start over live daemons), so it is not ours to stop
            self._started = False
            cancel_on_exit(self.stop)
            raise RuntimeError(f"start-ceph.sh failed (exit {result.returncode}); output above")
        env = _read_env_file(self.ceph_dir / "s3.env")
        self.endpoint = S3Endpoint(env["S3_ENDPOINT_URL"], env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"])
        return self.endpoint

    def pids(self) -> dict[str, int]:
        """Daemon name -> pid (mon.a, osd.0, rgw.gw), from the script's pids file."""
        path = self.ceph_dir / "pids"
        if not path.exists():
            return {}
        out = {}
        for line in path.read_text().splitlines():
            name, _, pid = line.partition(" ")
            if pid.strip().isdigit():
                out[name] = int(pid)
        return out

    def restart_rgw(self, frontend_options: str = "tcp_nodelay=1", timeout: float = 120.0) -> None:
        """Restart the cluster's radosgw with extra beast frontend options (command-line
        ``--rgw-frontends``, which wins over ceph.conf), keeping its pids-file entry current
        so stop-ceph.sh stops the new process.

        Why ``tcp_nodelay=1``: without it (start-ceph.sh's ceph.conf, Ceph's default) beast
        writes a GET's headers and body separately and Nagle holds the body until the client
        ACKs the headers, which Linux delays by 40 ms: every small GET takes ~44 ms whoever
        the client is, and a 4 KiB benchmark measures that stall instead of the gateway."""
        pids = self.pids()
        old = pids.get("rgw.gw")
        if old is None:
            raise RuntimeError(f"no rgw.gw in {self.ceph_dir / 'pids'}")
        log(f"restarting radosgw (pid {old}) with beast option(s) {frontend_options!r}")
        _terminate_pid(old)
        frontends = f"beast endpoint=127.0.0.1:{self.rgw_port} {frontend_options}"
        with open(self.ceph_dir / "log" / "rgw.out", "ab") as out:
            self._rgw_proc = subprocess.Popen(
                [*self.command_prefix, "radosgw", "-c", str(self.ceph_dir / "ceph.conf"), "-f", "-n", "client.rgw.gw",
                 f"--rgw-frontends={frontends}"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )
        lines = [f"{n} {self._rgw_proc.pid if n == 'rgw.gw' else pid}" for n, pid in pids.items()]
        (self.ceph_dir / "pids").write_text("\n".join(lines) + "\n")
        deadline = time.monotonic() + timeout
        while True:
            if self._rgw_proc.poll() is not None:
                raise RuntimeError(f"radosgw exited with code {self._rgw_proc.returncode}; see {self.ceph_dir}/log")
            if self._rgw_answers():
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"restarted radosgw not answering after {timeout:.0f} s")
            time.sleep(0.2)
        log(f"radosgw answers (pid {self._rgw_proc.pid}, frontends {frontends!r})")

    def _rgw_answers(self) -> bool:
        """Anonymous GET / answers a ListAllMyBucketsResult (asked from where the daemons run)."""
        url = f"http://127.0.0.1:{self.rgw_port}/"
        if self.command_prefix:
            probe = subprocess.run([*self.command_prefix, "curl", "-fsS", "--max-time", "2", url],
                                   stdin=subprocess.DEVNULL, capture_output=True, timeout=10, check=False)
            return b"ListAllMyBucketsResult" in probe.stdout
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return b"ListAllMyBucketsResult" in response.read()
        except (OSError, ValueError):
            return False

    def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        cancel_on_exit(self.stop)
        log(f"stopping Ceph in {self.ceph_dir}")
        if self._rgw_proc is not None and self._rgw_proc.poll() is None:
            # ours (restart_rgw): stop and reap it here, or stop-ceph.sh would wait on a zombie
            self._rgw_proc.terminate()
            try:
                self._rgw_proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self._rgw_proc.kill()
                self._rgw_proc.wait(timeout=20)
        subprocess.run(
            ["bash", str(CEPH_SCRIPTS / "stop-ceph.sh")], env=self._env(), stdin=subprocess.DEVNULL,
            stdout=sys.stderr, stderr=sys.stderr, timeout=120, check=False,
        )

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _terminate_pid(pid: int, timeout: float = 20.0) -> None:
    """SIGTERM a process that is not our child, wait for it to go, SIGKILL if it will not."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _read_env_file(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip().removeprefix("export ").strip()
        if "=" in line and not line.startswith("#"):
            name, _, value = line.partition("=")
            out[name.strip()] = value.strip().strip("'\"")
    return out


# -- lakegate ------------------------------------------------------------------------------------


def lakegate_command() -> list[str]:
    """The `lakegate` CLI of the environment the benchmark runs in."""
    script = shutil.which("lakegate", path=str(Path(sys.executable).parent))
    if script:
        return [sys.executable, script]  # run by this interpreter: the pid is the server's
    return [sys.executable, "-c", "import sys; from gateway.cli import main; sys.exit(main())"]


def terminate(proc: subprocess.Popen[bytes] | None, sig: int, grace: float) -> None:
    """Send ``sig`` to a running child, wait ``grace`` seconds, then kill it."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=15)


@dataclass
class Gateway:
    """A ``lakegate serve`` subprocess in front of ``lake``, with a temp tenants file and
    cache dir; its working directory is the temp dir (no stray .env is read) and its
    environment carries no AWS_/S3_/LAKEGATE_ variables except ``env``."""

    lake: S3Endpoint
    tenants: tuple[Tenant, ...] = (BENCH_TENANT,)
    env: dict[str, str] = field(default_factory=lambda: {"LAKEGATE_ACCESS_LOG": "false"})
    extra_args: tuple[str, ...] = ()
    command: tuple[str, ...] = ()  # instead of the lakegate CLI, e.g. a wrapper that patches or profiles it
    start_timeout: float = 30.0
    keep_dir: bool = False
    port: int = 0
    workdir: Path | None = None
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def log_path(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "lakegate.log"

    def endpoint(self, tenant: Tenant = BENCH_TENANT) -> S3Endpoint:
        return S3Endpoint(self.url, tenant.access_key, tenant.secret_key, self.lake.region)

    def start(self) -> S3Endpoint:
        self.workdir = Path(tempfile.mkdtemp(prefix="lakegate-bench-gw-"))
        tenants_file = self.workdir / "tenants.toml"
        tenants_file.write_text("\n".join(t.to_toml() for t in self.tenants))
        (self.workdir / "cache").mkdir()
        self.port = free_port()
        cmd = [
            *(self.command or lakegate_command()), "serve", "--listen", f"127.0.0.1:{self.port}", "--lake", self.lake.url,
            "--lake-access-key", self.lake.access_key, "--lake-secret-key", self.lake.secret_key,
            "--lake-region", self.lake.region, "--tenants", str(tenants_file),
            "--cache-dir", str(self.workdir / "cache"), *self.extra_args,
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_", "LAKEGATE_"))}
        env["PYTHONUNBUFFERED"] = "1"
        env.update(self.env)
        on_exit("lakegate", self.stop)
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                cmd, cwd=self.workdir, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._wait_healthy()
        log(f"lakegate serving at {self.url} (pid {self.pid}, lake {self.lake.url}, log {self.log_path})")
        return self.endpoint()

    def _wait_healthy(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + self.start_timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"lakegate serve exited with code {self.proc.returncode}:\n{self.output_tail()}")
            try:
                with urllib.request.urlopen(self.url + HEALTH_PATH, timeout=2) as response:
                    if response.status == 200:
                        return
                    last = f"HTTP {response.status}"
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}"
            except (OSError, ValueError) as exc:
                last = repr(exc)
            time.sleep(0.1)
        raise RuntimeError(f"lakegate not healthy after {self.start_timeout:.0f} s ({last}):\n{self.output_tail()}")

    def admin_stats(self) -> dict[str, Any]:
        """GET /_lakegate/admin/stats (cache counters per tenant, L1 store figures)."""
        with urllib.request.urlopen(self.url + ADMIN_STATS_PATH, timeout=10) as response:
            return json.loads(response.read())

    def tenant_cache_counters(self, tenant: Tenant = BENCH_TENANT) -> dict[str, int]:
        """The cache counters of one tenant (hits, misses, lake_gets, meta_misses...), 0 if absent."""
        cache = self.admin_stats().get("cache") or {}
        return dict((cache.get("per_tenant") or {}).get(tenant.name, {}))

    def output_tail(self, lines: int = 40) -> str:
        if self.workdir is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        cancel_on_exit(self.stop)
        terminate(self.proc, signal.SIGTERM, grace=15)
        if self.workdir is not None and not self.keep_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- signing S3 clients --------------------------------------------------------------------------
#
# Two clients with one interface (get / put / request and set-up helpers), both signing with
# botocore's S3SigV4Auth and UNSIGNED-PAYLOAD:
#
#   RawS3Client    HTTP/1.1 on plain non-blocking sockets: one recv_into a preallocated 1 MiB
#                  buffer per read, nothing copied in Python, keep-alive pool. The default: it
#                  keeps the client's CPU (which shares the machine's cores with the lake and the
#                  gateway) small. It speaks exactly what RGW and lakegate answer: Content-Length
#                  or chunked bodies, keep-alive.
#   HttpxS3Client  httpx.AsyncClient (what lakegate itself uses to reach the lake); for
#                  comparison. On a 2-core machine it costs ~1.2 CPU-s per GiB received
#                  (h11 buffer copies), about 5x RawS3Client, and measurably slows a local RGW.

_UNSIGNED_PAYLOAD = Config(s3={"payload_signing_enabled": False})
BODY_CHUNK = 1 * MiB  # bytes per socket read
Response = tuple[int, dict[str, str], bytes]  # status, headers (lower-case names), body


class S3ClientBase:
    """Path-style S3 on ``endpoint``. Subclasses implement :meth:`request`, :meth:`get`,
    :meth:`put` and :meth:`aclose`."""

    def __init__(self, endpoint: S3Endpoint, max_connections: int = 64, timeout: float = 120.0) -> None:
        self.endpoint = endpoint
        self.origin = endpoint.url.rstrip("/")
        parts = urlsplit(self.origin)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"benchmark clients speak plain http://host:port, not {endpoint.url!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.netloc = parts.netloc
        self.max_connections = max_connections
        self.timeout = timeout
        self._signer = S3SigV4Auth(Credentials(endpoint.access_key, endpoint.secret_key), "s3", endpoint.region)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        raise NotImplementedError

    def url(self, bucket: str | None = None, key: str | None = None, query: str = "") -> str:
        path = "/" if bucket is None else "/" + quote(bucket, safe="")
        if key is not None:
            path += "/" + quote(key, safe="/~")
        return self.origin + path + (("?" + query) if query else "")

    def sign(self, method: str, url: str, headers: dict[str, str] | None = None) -> dict[str, str]:
        """``headers`` plus Host, X-Amz-Date, X-Amz-Content-SHA256 (UNSIGNED-PAYLOAD), Authorization."""
        request = AWSRequest(method=method, url=url, headers={"host": self.netloc, **(headers or {})})
        request.context["client_config"] = _UNSIGNED_PAYLOAD
        self._signer.add_auth(request)
        return dict(request.headers.items())

    async def request(self, method: str, url: str, content: bytes | None = None,
                      headers: dict[str, str] | None = None) -> Response:
        """A small signed request, body read whole."""
        raise NotImplementedError

    async def get(self, bucket: str, key: str, *, sha256: bool = False,
                  keep_body: bool = False) -> tuple[int, int, str | None, bytes | None]:
        """(status, body bytes received, sha256 hex if asked, the body if asked); otherwise
        the body is read in large chunks and discarded."""
        raise NotImplementedError

    async def put(self, bucket: str, key: str, body: bytes) -> tuple[int, str]:
        """(status, ETag without quotes)."""
        raise NotImplementedError

    # -- set-up and clean-up (errors raise) --

    async def create_bucket(self, bucket: str) -> None:
        status, _, body = await self.request("PUT", self.url(bucket))
        if status != 200 and b"BucketAlreadyOwnedByYou" not in body:
            raise RuntimeError(f"CreateBucket {bucket}: HTTP {status} {body[:300]!r}")

    async def put_checked(self, bucket: str, key: str, body: bytes) -> None:
        status, etag = await self.put(bucket, key, body)
        if status != 200 or etag != hashlib.md5(body).hexdigest():
            raise RuntimeError(f"PUT {bucket}/{key}: HTTP {status}, ETag {etag!r}")

    async def list_keys(self, bucket: str) -> list[str]:
        import xml.etree.ElementTree as ET

        keys: list[str] = []
        token = ""
        while True:
            query = "list-type=2&max-keys=1000" + (f"&continuation-token={quote(token, safe='')}" if token else "")
            status, _, body = await self.request("GET", self.url(bucket, query=query))
            if status != 200:
                raise RuntimeError(f"ListObjectsV2 {bucket}: HTTP {status} {body[:300]!r}")
            root = ET.fromstring(body)
            ns = root.tag.partition("}")[0] + "}" if root.tag.startswith("{") else ""
            keys += [e.text or "" for e in root.iter(f"{ns}Key")]
            truncated = (root.findtext(f"{ns}IsTruncated") or "false").lower() == "true"
            token = root.findtext(f"{ns}NextContinuationToken") or ""
            if not truncated or not token:
                return keys

    async def delete_bucket_with_objects(self, bucket: str, concurrency: int = 16) -> None:
        keys = await self.list_keys(bucket)

        async def delete(key: str) -> None:
            await self.request("DELETE", self.url(bucket, key))

        await gather_limited((delete(k) for k in keys), concurrency)
        status, _, body = await self.request("DELETE", self.url(bucket))
        if status not in (204, 404):
            raise RuntimeError(f"DeleteBucket {bucket}: HTTP {status} {body[:300]!r}")


class HttpxS3Client(S3ClientBase):
    """The S3 client on one pooled ``httpx.AsyncClient``; socket reads raised to 1 MiB
    (httpcore2 reads 64 KiB by default) - a class attribute, so it applies to every httpx
    client of the benchmark process (never to the gateway's)."""

    def __init__(self, endpoint: S3Endpoint, max_connections: int = 64, timeout: float = 120.0) -> None:
        super().__init__(endpoint, max_connections, timeout)
        from httpcore2._async import http11

        http11.AsyncHTTP11Connection.READ_NUM_BYTES = BODY_CHUNK
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self.http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=10.0), limits=limits, trust_env=False,
            headers={"accept-encoding": "identity", "user-agent": "lakegate-bench"},
        )

    async def aclose(self) -> None:
        await self.http.aclose()

    async def request(self, method: str, url: str, content: bytes | None = None,
                      headers: dict[str, str] | None = None) -> Response:
        headers = dict(headers or {})
        if content is not None or method in ("PUT", "POST"):
            headers["content-length"] = str(len(content or b""))
        response = await self.http.request(method, url, content=content, headers=self.sign(method, url, headers))
        return response.status_code, {k.lower(): v for k, v in response.headers.items()}, response.content

    async def get(self, bucket: str, key: str, *, sha256: bool = False,
                  keep_body: bool = False) -> tuple[int, int, str | None, bytes | None]:
        url = self.url(bucket, key)
        digest = hashlib.sha256() if sha256 else None
        kept: list[bytes] | None = [] if keep_body else None
        received = 0
        async with self.http.stream("GET", url, headers=self.sign("GET", url)) as response:
            async for chunk in response.aiter_raw():
                received += len(chunk)
                if digest is not None:
                    digest.update(chunk)
                if kept is not None:
                    kept.append(chunk)
        body = b"".join(kept) if kept is not None else None
        return response.status_code, received, digest.hexdigest() if digest else None, body

    async def put(self, bucket: str, key: str, body: bytes) -> tuple[int, str]:
        url = self.url(bucket, key)
        headers = self.sign("PUT", url, {"content-length": str(len(body))})
        response = await self.http.put(url, content=body, headers=headers)
        return response.status_code, response.headers.get("etag", "").strip('"')


class _RawConnection:
    """One keep-alive HTTP/1.1 connection on a non-blocking socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.loop = asyncio.get_running_loop()
        self.pending = bytearray()  # received, not yet consumed
        self.scratch = memoryview(bytearray(BODY_CHUNK))
        self.reusable = True

    @classmethod
    async def open(cls, host: str, port: int) -> _RawConnection:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            await asyncio.get_running_loop().sock_connect(sock, (host, port))
        except BaseException:
            sock.close()
            raise
        return cls(sock)

    def close(self) -> None:
        self.reusable = False
        self.sock.close()

    async def _recv(self, limit: int) -> memoryview:
        n = await self.loop.sock_recv_into(self.sock, self.scratch[: min(limit, BODY_CHUNK)])
        if n == 0:
            raise ConnectionError("the server closed the connection mid-response")
        return self.scratch[:n]

    async def _read_until(self, separator: bytes, limit: int = 64 * KiB) -> bytes:
        while (at := self.pending.find(separator)) < 0:
            if len(self.pending) > limit:
                raise ConnectionError("response header section too large")
            self.pending += await self._recv(BODY_CHUNK)
        end = at + len(separator)
        out = bytes(self.pending[:end])
        del self.pending[:end]
        return out

    async def _read_exactly(self, n: int, sink: Callable[[memoryview], None] | None) -> None:
        if self.pending:
            take = min(n, len(self.pending))
            if sink is not None:
                sink(memoryview(bytes(self.pending[:take])))
            del self.pending[:take]
            n -= take
        while n > 0:
            view = await self._recv(n)
            if sink is not None:
                sink(view)
            n -= len(view)

    async def exchange(self, method: str, target: str, headers: dict[str, str], body: bytes | None,
                       sink: Callable[[memoryview], None] | None) -> tuple[int, dict[str, str], int]:
        """Send one request, read its response; the body goes to ``sink`` in pieces (views of
        a reused buffer: consume them before returning). (status, headers, body bytes)."""
        head = f"{method} {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        if body is not None and len(body) <= 64 * KiB:
            await self.loop.sock_sendall(self.sock, head.encode("latin-1") + body)
        else:
            await self.loop.sock_sendall(self.sock, head.encode("latin-1"))
            if body:
                await self.loop.sock_sendall(self.sock, body)
        lines = (await self._read_until(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        status = int(rest.split(" ", 1)[0])
        response_headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                name = name.strip().lower()
                value = value.strip()
                response_headers[name] = f"{response_headers[name]}, {value}" if name in response_headers else value
        if response_headers.get("connection", "").lower() == "close" or version == "HTTP/1.0":
            self.reusable = False
        received = 0
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return status, response_headers, 0
        if "chunked" in response_headers.get("transfer-encoding", "").lower():
            while True:
                size = int((await self._read_until(b"\r\n")).split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while await self._read_until(b"\r\n") != b"\r\n":  # trailers
                        pass
                    break
                await self._read_exactly(size, sink)
                received += size
                await self._read_until(b"\r\n")
        elif "content-length" in response_headers:
            received = int(response_headers["content-length"])
            await self._read_exactly(received, sink)
        else:  # read to close
            self.reusable = False
            while True:
                try:
                    view = await self._recv(BODY_CHUNK)
                except ConnectionError:
                    break
                received += len(view)
                if sink is not None:
                    sink(view)
        return status, response_headers, received


@dataclass(frozen=True)
class TimedGet:
    """A GET timed by :meth:`RawS3Client.timed_get` (seconds)."""

    status: int
    received: int
    ttfb: float  # request sent -> first body byte received (nan without a body)
    total: float  # request sent -> last body byte received
    sha256: str | None


class RawS3Client(S3ClientBase):
    """The S3 client on plain sockets (see the section comment); connections are pooled
    (at most ``max_connections`` idle ones kept)."""

    def __init__(self, endpoint: S3Endpoint, max_connections: int = 64, timeout: float = 120.0) -> None:
        super().__init__(endpoint, max_connections, timeout)
        self._idle: list[_RawConnection] = []

    async def aclose(self) -> None:
        while self._idle:
            self._idle.pop().close()

    async def _exchange(self, method: str, url: str, headers: dict[str, str], body: bytes | None,
                        sink: Callable[[memoryview], None] | None) -> tuple[int, dict[str, str], int]:
        parts = urlsplit(url)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        signed = self.sign(method, url, headers)
        signed.setdefault("User-Agent", "lakegate-bench")
        conn = self._idle.pop() if self._idle else await _RawConnection.open(self.host, self.port)
        try:
            async with asyncio.timeout(self.timeout):
                result = await conn.exchange(method, target, signed, body, sink)
        except BaseException:
            conn.close()
            raise
        if conn.reusable and len(self._idle) < self.max_connections:
            self._idle.append(conn)
        else:
            conn.close()
        return result

    async def request(self, method: str, url: str, content: bytes | None = None,
                      headers: dict[str, str] | None = None) -> Response:
        headers = dict(headers or {})
        if content is not None or method in ("PUT", "POST"):
            headers["content-length"] = str(len(content or b""))
        pieces: list[bytes] = []
        status, response_headers, _ = await self._exchange(method, url, headers, content, lambda v: pieces.append(bytes(v)))
        return status, response_headers, b"".join(pieces)

    async def get(self, bucket: str, key: str, *, sha256: bool = False,
                  keep_body: bool = False) -> tuple[int, int, str | None, bytes | None]:
        digest = hashlib.sha256() if sha256 else None
        kept: list[bytes] | None = [] if keep_body else None
        sink: Callable[[memoryview], None] | None = None
        if digest is not None and kept is not None:
            def sink(view: memoryview) -> None:
                digest.update(view)
                kept.append(bytes(view))
        elif digest is not None:
            sink = digest.update
        elif kept is not None:
            def sink(view: memoryview) -> None:
                kept.append(bytes(view))
        status, _, received = await self._exchange("GET", self.url(bucket, key), {}, None, sink)
        return status, received, digest.hexdigest() if digest else None, b"".join(kept) if kept is not None else None

    async def timed_get(self, bucket: str, key: str, *, sha256: bool = False,
                        headers: dict[str, str] | None = None) -> TimedGet:
        """One GET timed from just before its request bytes are sent to the first body byte
        received (TTFB) and to the last. Signing and connecting happen before the clock starts
        (a pooled keep-alive connection when there is one); the body is hashed or discarded."""
        url = self.url(bucket, key)
        parts = urlsplit(url)
        signed = self.sign("GET", url, dict(headers or {}))
        signed.setdefault("User-Agent", "lakegate-bench")
        digest = hashlib.sha256() if sha256 else None
        first: list[float] = []

        def sink(view: memoryview) -> None:
            if not first:
                first.append(time.perf_counter())
            if digest is not None:
                digest.update(view)

        conn = self._idle.pop() if self._idle else await _RawConnection.open(self.host, self.port)
        try:
            async with asyncio.timeout(self.timeout):
                started = time.perf_counter()
                status, _, received = await conn.exchange("GET", parts.path, signed, None, sink)
                ended = time.perf_counter()
        except BaseException:
            conn.close()
            raise
        if conn.reusable and len(self._idle) < self.max_connections:
            self._idle.append(conn)
        else:
            conn.close()
        ttfb = (first[0] - started) if first else float("nan")
        return TimedGet(status, received, ttfb, ended - started, digest.hexdigest() if digest else None)

    async def put(self, bucket: str, key: str, body: bytes) -> tuple[int, str]:
        pieces: list[bytes] = []
        status, headers, _ = await self._exchange(
            "PUT", self.url(bucket, key), {"content-length": str(len(body))}, body, lambda v: pieces.append(bytes(v))
        )
        return status, headers.get("etag", "").strip('"')


CLIENTS: dict[str, type[S3ClientBase]] = {"raw": RawS3Client, "httpx": HttpxS3Client}


def make_client(kind: str, endpoint: S3Endpoint, max_connections: int = 64) -> S3ClientBase:
    return CLIENTS[kind](endpoint, max_connections=max_connections)


async def gather_limited(coros: Iterable[Awaitable[T]], limit: int) -> list[T]:
    """Await ``coros`` with at most ``limit`` running at once; results in order."""
    semaphore = asyncio.Semaphore(limit)

    async def one(coro: Awaitable[T]) -> T:
        async with semaphore:
            return await coro

    return await asyncio.gather(*(one(c) for c in coros))


def run_async(main: Awaitable[T]) -> T:
    """Run a coroutine on uvloop when installed (less client overhead), else asyncio."""
    try:
        import uvloop

        factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
    except ImportError:
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)  # type: ignore[arg-type]


# -- wrk: a C load generator for many small requests --------------------------------------------
#
# A Python client that signs every request tops out near 1,000-2,000 small GETs/s on this 2-core
# machine, below what a server under test may answer. wrk (epoll, C) replays one request built
# once: a SigV4 header signature stays valid for the server's clock-skew window (15 min on S3,
# RGW and lakegate), so a GET signed once and replayed is a valid signed GET each time, and the
# server still verifies the signature on every request.

WRK_INSTALL = "apt-get install -y wrk   (Debian/Ubuntu package 'wrk'; or build github.com/wg/wrk)"

_WRK_SCRIPT = """\
wrk.method = "GET"
wrk.path = {path}
{headers}
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "WRK-RESULT {{\\"requests\\": %d, \\"duration_us\\": %d, \\"bytes\\": %d, "
    .. "\\"connect\\": %d, \\"read\\": %d, \\"write\\": %d, \\"status\\": %d, \\"timeout\\": %d, "
    .. "\\"p50_us\\": %d, \\"p90_us\\": %d, \\"p99_us\\": %d, \\"p999_us\\": %d, "
    .. "\\"max_us\\": %d, \\"mean_us\\": %.1f}}\\n",
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9),
    latency.max, latency.mean))
end
"""


def wrk_binary() -> str | None:
    return shutil.which("wrk")


def wrk_version(binary: str = "wrk") -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10, check=False)
    return (out.stdout or out.stderr).splitlines()[0].strip() if (out.stdout or out.stderr) else "wrk"


@dataclass
class WrkResult:
    """One wrk run: counts, wrk's latency percentiles (ms) and wrk's own CPU seconds."""

    requests: int
    seconds: float
    bytes: int
    errors: dict[str, int]
    latency_ms: dict[str, float]
    cpu_seconds: float

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else float("nan")


def run_wrk(url: str, headers: dict[str, str], *, connections: int, duration: float, threads: int = 1,
            timeout: float = 5.0, binary: str = "wrk") -> WrkResult:
    """Replay one GET of ``url`` with ``headers`` (e.g. from :meth:`S3ClientBase.sign`; they
    must include Host as signed) on ``connections`` keep-alive connections for ``duration``
    seconds. Raises RuntimeError when wrk fails or reports socket errors."""
    import resource

    parts = urlsplit(url)
    lua_header = "wrk.headers[{}] = {}"
    lines = []
    # wrk adds "Host: <url host:port>" unless a header named exactly "Host" is set; a second
    # Host header would break the signature (its canonical value would be "a,a")
    headers = {("Host" if name.lower() == "host" else name): value for name, value in headers.items()}
    for name, value in headers.items():
        if not (name + value).isascii() or any(c in name + value for c in "\\\"\r\n"):
            raise ValueError(f"header not replayable by the wrk script: {name!r}")
        lines.append(lua_header.format(json.dumps(name), json.dumps(value)))
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    script = _WRK_SCRIPT.format(path=json.dumps(target), headers="\n".join(lines))
    with tempfile.NamedTemporaryFile("w", suffix=".lua", prefix="lakegate-wrk-", delete=False) as f:
        f.write(script)
        script_path = f.name
    try:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run(
            [binary, "-t", str(threads), "-c", str(connections), "-d", f"{duration:g}s",
             "--timeout", f"{timeout:g}s", "-s", script_path, f"{parts.scheme}://{parts.netloc}{target}"],
            capture_output=True, text=True, timeout=duration + 60, check=False,
        )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    finally:
        os.unlink(script_path)
    line = next((x for x in out.stdout.splitlines() if x.startswith("WRK-RESULT ")), None)
    if out.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed (exit {out.returncode}): {out.stdout[-2000:]} {out.stderr[-2000:]}")
    raw = json.loads(line.removeprefix("WRK-RESULT "))
    errors = {k: int(raw[k]) for k in ("connect", "read", "write", "status", "timeout")}
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return WrkResult(
        requests=int(raw["requests"]), seconds=raw["duration_us"] / 1e6, bytes=int(raw["bytes"]), errors=errors,
        latency_ms={k.removesuffix("_us"): raw[k] / 1000 for k in ("p50_us", "p90_us", "p99_us", "p999_us",
                                                                     "max_us", "mean_us")},
        cpu_seconds=cpu,
    )


# -- py-spy: sampling profiles of a running server ------------------------------------------------


def py_spy_binary() -> str | None:
    return shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")


class PySpy:
    """``py-spy record`` attached to ``pid`` from :meth:`start` until :meth:`stop` (SIGINT: py-spy
    then writes its output). ``fmt`` "raw" gives collapsed stacks (one ``frame;frame;... count``
    line per stack, see :func:`collapsed_stacks`), "flamegraph" an SVG, "speedscope" JSON."""

    def __init__(self, pid: int, out: Path, *, fmt: str = "raw", rate: int = 200, native: bool = False,
                 threads: bool = True, binary: str | None = None) -> None:
        self.binary = binary or py_spy_binary() or "py-spy"
        self.cmd = [self.binary, "record", "--pid", str(pid), "--format", fmt, "--rate", str(rate),
                    "-o", str(out)] + (["--native"] if native else []) + (["--threads"] if threads else [])
        self.out = out
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        on_exit("py-spy", self.stop)
        time.sleep(1.0)  # attached and sampling
        if self.proc.poll() is not None:
            output = self.proc.stdout.read().decode(errors="replace") if self.proc.stdout else ""
            raise RuntimeError(f"py-spy exited with code {self.proc.returncode}: {output[-2000:]}")

    def stop(self) -> Path:
        cancel_on_exit(self.stop)
        terminate(self.proc, signal.SIGINT, grace=60)  # SIGINT: py-spy writes its output
        return self.out


def collapsed_stacks(path: Path) -> list[tuple[list[str], int]]:
    """py-spy's raw format: (frames root first, sample count) per line."""
    stacks = []
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks.append((stack.split(";"), int(count)))
    return stacks


# -- statistics, machine facts, output -----------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100), linear interpolation between closest ranks."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def rounded(value: float, digits: int = 3) -> float:
    return value if math.isnan(value) else round(value, digits)


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.partition(":")[2].strip()
                break
        mem = Path("/proc/meminfo").read_text().split("\n", 1)[0].split()
        info["mem_GiB"] = round(int(mem[1]) / 1024**2, 1)
    except OSError:
        pass
    return info


def filesystem_of(path: Path) -> dict[str, str]:
    """The mount holding ``path`` (device, mount point, type) from /proc/mounts: e.g. to show a
    cache directory is on a local disk, not tmpfs."""
    path = path.resolve()
    best = ("?", "/", "?")
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            device, mount, fstype = line.split()[:3]
            if (path == Path(mount) or Path(mount) in path.parents) and len(mount) >= len(best[1]):
                best = (device, mount, fstype)
    except OSError:
        pass
    return {"device": best[0], "mount": best[1], "type": best[2]}


def git_revision() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10, check=False)
        return out.stdout.strip() or None
    except OSError:
        return None


def emit_result(name: str, result: dict[str, Any], path: Path | None = None) -> Path:
    """Print ``result`` as one JSON object on stdout and write it to ``path`` (default
    benchmarks/results/<name>.json; that folder is git-ignored)."""
    path = path or RESULTS_DIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=2)
    path.write_text(text + "\n")
    print(text, flush=True)
    log(f"result written to {path}")
    return path
