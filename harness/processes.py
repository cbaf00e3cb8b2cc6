"""Child processes of the tests and benchmarks: the `lakegate` command and the clean
environment it runs in, stopping children and strangers, cleanup at exit and on signals,
CPU seconds of a set of processes, and progress lines on stderr.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]

_T0 = time.monotonic()


# -- progress ------------------------------------------------------------------------------------


def log(message: str) -> None:
    """One progress line on stderr, with seconds since the process started."""
    print(f"[harness {time.monotonic() - _T0:7.1f}s] {message}", file=sys.stderr, flush=True)


# -- the lakegate command ------------------------------------------------------------------------


def lakegate_command() -> list[str]:
    """The `lakegate` CLI of the environment we run in, run by this interpreter (so the pid
    of the child is the server's, not a wrapper's)."""
    script = shutil.which("lakegate", path=str(Path(sys.executable).parent))
    if script:
        return [sys.executable, script]
    return [sys.executable, "-c", "import sys; from gateway.cli import main; sys.exit(main())"]


def gateway_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Our environment without S3/AWS credentials, endpoints or LAKEGATE_ settings (but one
    worker), so a gateway reaches the lake only with the keys it is given; the checkout comes first on
    PYTHONPATH, so a child runs this checkout's code whatever the venv's install points at."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_", "LAKEGATE_"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env["LAKEGATE_WORKERS"] = "1"  # one process, whose counters a test reads; a test asks for more
    env.update(extra or {})
    return env


# -- stopping ------------------------------------------------------------------------------------


def terminate(proc: subprocess.Popen[bytes] | None, sig: int, grace: float) -> bool:
    """Send ``sig`` to a running child, wait ``grace`` seconds, then kill it. True when it
    had to be killed."""
    if proc is None or proc.poll() is not None:
        return False
    proc.send_signal(sig)
    try:
        proc.wait(timeout=grace)
        return False
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=15)
        return True


def terminate_pid(pid: int, timeout: float = 20.0) -> None:
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


def wait_listening(proc: subprocess.Popen[bytes], port: int, timeout: float) -> bool:
    """Wait until something accepts connections on 127.0.0.1:``port``; False when ``proc``
    exited first or ``timeout`` seconds passed."""
    from harness.ports import port_busy

    deadline = time.monotonic() + timeout
    while not port_busy(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# -- cleanup on exit, failure and signals --------------------------------------------------------

_cleanups: list[tuple[str, Callable[[], object]]] = []


def on_exit(name: str, action: Callable[[], object]) -> None:
    """Run ``action`` at exit (newest first) unless :func:`cancel_on_exit` removed it first;
    actions must be idempotent (they also run from the owner's ``finally``)."""
    _cleanups.append((name, action))


def cancel_on_exit(action: Callable[[], object]) -> None:
    _cleanups[:] = [(n, a) for n, a in _cleanups if a is not action]


@atexit.register
def _run_cleanups() -> None:
    while _cleanups:
        name, action = _cleanups.pop()
        try:
            action()
        except Exception as exc:  # noqa: BLE001 - keep cleaning up the rest
            print(f"[harness] cleanup {name} failed: {exc!r}", file=sys.stderr, flush=True)


def exit_on_signals() -> None:
    """SIGTERM / SIGHUP raise SystemExit (SIGINT already raises KeyboardInterrupt), so
    ``finally`` blocks and ``atexit`` stop what a benchmark started."""

    def handler(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


# -- CPU seconds ---------------------------------------------------------------------------------

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


def tree_cpu_seconds(pid: int) -> float:
    """utime + stime of a process and all its descendants alive now (e.g. a server's worker
    processes), plus what its exited children it waited for used (psutil)."""
    import psutil

    root = psutil.Process(pid)
    total = 0.0
    for proc in (root, *root.children(recursive=True)):
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


class CpuMeter:
    """CPU seconds used by a set of processes (by pid) over a span; :meth:`start` / :meth:`stop`
    may be called repeatedly and the spans add up. ``tree``: each pid with its descendants
    (:func:`tree_cpu_seconds`)."""

    def __init__(self, pids: Iterable[int] = (), include_self: bool = False, tree: bool = False) -> None:
        self.pids = list(pids)
        self.include_self = include_self
        self.tree = tree
        self.seconds = 0.0
        self._started: float | None = None

    def _now(self) -> float:
        measure = tree_cpu_seconds if self.tree else process_cpu_seconds
        total = sum(measure(pid) for pid in self.pids)
        return total + (self_cpu_seconds() if self.include_self else 0.0)

    def start(self) -> None:
        self._started = self._now()

    def stop(self) -> float:
        assert self._started is not None, "stop() without start()"
        span = self._now() - self._started
        self.seconds += span
        self._started = None
        return span


class LoopbackServer:
    """What a harness server child on 127.0.0.1 answers (the dataclass holds ``port`` and ``proc``)."""

    port: int
    proc: subprocess.Popen[bytes] | None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid


def listening_pids(pid: int, port: int) -> list[int]:
    """``pid`` and those of its children that listen on TCP ``port``: a `lakegate serve` with
    several workers is a supervisor whose children (the workers) listen."""
    import psutil

    found = []
    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children()]
    except psutil.NoSuchProcess:
        return []
    for proc in procs:
        try:
            if any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in proc.net_connections(kind="tcp")):
                found.append(proc.pid)
        except psutil.NoSuchProcess:
            continue
    return found
