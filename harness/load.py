"""Load generators and profilers run beside a server under test: wrk (a C load generator
replaying one signed GET) and py-spy (sampling profiles of a running process).
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
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from harness.processes import cancel_on_exit, on_exit, terminate


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
