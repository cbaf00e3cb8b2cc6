"""Ceph RGW for the tests and benchmarks: a throwaway single-node cluster started with
deploy/ceph/start-ceph.sh (:class:`CephCluster`, used by the benchmarks; `make test` starts its
own with deploy/ceph/with-ceph.sh), and the RGW the environment names (:func:`rgw_endpoint`:
S3_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, as s3.env sets them), which the
integration and cluster test tiers run against. With ``rgw_instances`` > 1 the cluster has
several radosgw on consecutive ports (``endpoints``; :func:`rgw_endpoints`: S3_ENDPOINT_URLS),
several endpoints of one lake.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from harness.endpoints import S3Endpoint
from harness.processes import REPO_ROOT, cancel_on_exit, log, on_exit, terminate_pid

CEPH_SCRIPTS = REPO_ROOT / "deploy" / "ceph"
NO_RGW = ("S3_ENDPOINT_URL is not set: this tier needs a Ceph RGW (`make test` starts one; "
          "or source the s3.env that deploy/ceph/start-ceph.sh writes)")


def rgw_endpoint(environ: Mapping[str, str] = os.environ) -> S3Endpoint | None:
    """The RGW that S3_ENDPOINT_URL names with the AWS_ keys, None without S3_ENDPOINT_URL;
    KeyError naming the missing key when only some are set."""
    if not environ.get("S3_ENDPOINT_URL"):
        return None
    return S3Endpoint(environ["S3_ENDPOINT_URL"].rstrip("/"), environ["AWS_ACCESS_KEY_ID"],
                      environ["AWS_SECRET_ACCESS_KEY"])


def rgw_endpoints(environ: Mapping[str, str] = os.environ) -> list[S3Endpoint]:
    """Every RGW instance S3_ENDPOINT_URLS names (comma-separated), else S3_ENDPOINT_URL's one
    (or none), with the AWS_ keys."""
    urls = [url.strip().rstrip("/") for url in environ.get("S3_ENDPOINT_URLS", "").split(",") if url.strip()]
    if not urls:
        one = rgw_endpoint(environ)
        return [] if one is None else [one]
    return [S3Endpoint(url, environ["AWS_ACCESS_KEY_ID"], environ["AWS_SECRET_ACCESS_KEY"]) for url in urls]


@dataclass
class CephCluster:
    """A throwaway single-node Ceph RGW, started with deploy/ceph/start-ceph.sh in its own data
    folder and on its own ports (so it never touches a developer's cluster), stopped with
    stop-ceph.sh, which wipes the folder.

    ``command_prefix`` runs the daemons elsewhere, e.g. ``("ip", "netns", "exec", NAME)`` for a
    network namespace (benchmarks/netns.py): their 127.0.0.1 is then that namespace's, so the
    endpoint is reachable only from inside it. Stopping needs no prefix (it goes by pid).

    ``rgw_instances``: radosgw processes on ports ``rgw_port``, +1, ...; ``endpoint`` is the
    first, ``endpoints`` all of them (``restart_rgw`` restarts the first only)."""

    ceph_dir: Path = Path("/tmp/lakegate-bench-ceph")
    rgw_port: int = 7590
    rgw_instances: int = 1
    mon_port: int = 40990
    ms_port_min: int = 47000
    ms_port_max: int = 47099
    osd_size_gb: int = 4
    osd_store: str = "memstore"
    start_timeout: float = 300.0
    command_prefix: tuple[str, ...] = ()
    endpoint: S3Endpoint | None = None
    endpoints: list[S3Endpoint] = field(default_factory=list)
    _started: bool = False
    _rgw_proc: subprocess.Popen[bytes] | None = None

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CEPH_", "S3_ACCESS", "S3_SECRET"))}
        env.update(
            CEPH_DIR=str(self.ceph_dir),
            CEPH_RGW_PORT=str(self.rgw_port),
            CEPH_RGW_INSTANCES=str(self.rgw_instances),
            CEPH_MON_PORT=str(self.mon_port),
            CEPH_MS_PORT_MIN=str(self.ms_port_min),
            CEPH_MS_PORT_MAX=str(self.ms_port_max),
            CEPH_OSD_SIZE_GB=str(self.osd_size_gb),
            CEPH_OSD_STORE=self.osd_store,
        )
        return env

    def start(self) -> S3Endpoint:
        log(f"starting Ceph in {self.ceph_dir} (RGW port {self.rgw_port} x{self.rgw_instances}, mon {self.mon_port}, "
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
        written = read_env_file(self.ceph_dir / "s3.env")
        endpoint = rgw_endpoint(written)
        if endpoint is None:
            raise RuntimeError(f"start-ceph.sh wrote no S3_ENDPOINT_URL to {self.ceph_dir / 's3.env'}")
        self.endpoint = endpoint
        self.endpoints = rgw_endpoints(written)
        if len(self.endpoints) != self.rgw_instances:
            raise RuntimeError(f"start-ceph.sh wrote {len(self.endpoints)} S3_ENDPOINT_URLS for {self.rgw_instances} RGWs")
        return endpoint

    def pids(self) -> dict[str, int]:
        """Daemon name -> pid (mon.a, osd.0, rgw.gw, rgw.gw1, ...), from the script's pids file."""
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
        terminate_pid(old)
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


def read_env_file(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip().removeprefix("export ").strip()
        if "=" in line and not line.startswith("#"):
            name, _, value = line.partition("=")
            out[name.strip()] = value.strip().strip("'\"")
    return out
