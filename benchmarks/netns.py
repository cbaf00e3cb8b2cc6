"""A shaped network for benchmarks: a network namespace of its own, with tc on its loopback.

D3N's testbed had a slow storage network (2x6 Gbit NICs to Ceph) and a fast cluster network
(2x40 Gbit between cache nodes). :class:`ShapedNetwork` reproduces that shape on one machine:

* ``ip netns add lakegate-bench-<pid>``; everything runs inside it on the namespace's own
  127.0.0.0/8 loopback (no address or port clash with the root namespace, where a developer's
  Ceph may be running), so the lake, the lakegate nodes and the clients must all run inside.
* one HTB qdisc on that namespace's ``lo`` with three classes, first filter that matches wins:

    1:10 lake      TCP to or from a lake port (RGW's)        rate R         (default 300 Mbit/s)
    1:20 cluster   packets from or to 127.0.0.2 (peer API)   rate ~6 R      (default 1800 Mbit/s)
    1:30 other     everything else: client <-> node, Ceph's own messengers   unshaped (100 Gbit/s)

  Nodes listen on 0.0.0.0:PORT, clients reach them at 127.0.0.1:PORT and peers at
  :data:`PEER_HOST` (127.0.0.2:PORT), so the address, not the port, tells peer traffic apart.
  Only IPv4 is classified: ``localhost`` resolving to ::1 would land in "other".
* :meth:`ShapedNetwork.counters` reads each class's bytes from ``tc -s class show dev lo``
  (both directions, headers and ACKs included: a little above the payload).

Loopback's 64 KiB MTU and its GSO/TSO super-packets are left as they are: HTB charges each
packet's full length against exact (not table-based) token arithmetic, so big packets only make
the shaping coarser, not wrong; ``burst`` is set to a few such packets. The self-check measures it:

    .venv/bin/python -m benchmarks.netns --selfcheck [--lake-mbit 300] [--ceph]

Processes get inside with :meth:`ShapedNetwork.command` / :meth:`popen` / :meth:`run`
(``ip netns exec NAME ...``), or the benchmark driver moves itself in with :meth:`enter`.
:class:`~harness.ceph.CephCluster` takes ``command_prefix=net.prefix``. Teardown (context
manager, and ``on_exit`` for Ctrl-C and signals) kills every process left in the namespace
(``ip netns pids``) and deletes it. Needs root, ``ip`` and ``tc`` (Debian's iproute2).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self, TypeVar

from harness.ceph import CephCluster
from harness.processes import REPO_ROOT, cancel_on_exit, exit_on_signals, log, on_exit
from harness.results import emit_result, machine_info
from harness.units import MiB

T = TypeVar("T")
NAME_PREFIX = "lakegate-bench-"
CLIENT_HOST = "127.0.0.1"
PEER_HOST = "127.0.0.2"
DEFAULT_LAKE_MBIT = 300.0
CLUSTER_RATIO = 6.0  # D3N: 40 Gbit cluster NICs against 6 Gbit storage NICs, rounded
UNSHAPED_MBIT = 100_000.0
GSO_PACKET = 64 * 1024 + 256  # the largest packet TCP hands loopback, with its headers

LAKE_CLASS = "1:10"
CLUSTER_CLASS = "1:20"
OTHER_CLASS = "1:30"
_CLASS_NAMES = {LAKE_CLASS: "lake", CLUSTER_CLASS: "cluster", OTHER_CLASS: "other"}
_CLONE_NEWNET = 0x40000000


def available() -> str | None:
    """Why a shaped network cannot be made here, or None when it can."""
    if os.geteuid() != 0:
        return "needs root (ip netns, tc)"
    missing = [b for b in ("ip", "tc") if shutil.which(b) is None]
    if missing:
        return f"missing {' '.join(missing)} (apt-get install iproute2)"
    return None


@dataclass(frozen=True)
class LinkCounters:
    """Bytes each class has sent (tc's ``Sent N bytes``), both directions of its traffic."""

    lake: int = 0
    cluster: int = 0
    other: int = 0

    def __sub__(self, earlier: LinkCounters) -> LinkCounters:
        return LinkCounters(self.lake - earlier.lake, self.cluster - earlier.cluster, self.other - earlier.other)

    def as_dict(self) -> dict[str, int]:
        return {"lake": self.lake, "cluster": self.cluster, "other": self.other}


def parse_class_bytes(tc_output: str) -> LinkCounters:
    """``tc -s class show dev lo`` -> bytes per class (iproute2 6.1 prints HTB classes as text
    even with ``-j``, so the text is parsed: a ``class htb 1:10 ...`` line, then `` Sent N bytes``)."""
    sent: dict[str, int] = {}
    current = None
    for line in tc_output.splitlines():
        header = re.match(r"class htb (\S+) ", line)
        if header:
            current = header.group(1)
            continue
        counted = re.match(r"\s*Sent (\d+) bytes", line)
        if counted and current is not None:
            sent[_CLASS_NAMES.get(current, current)] = int(counted.group(1))
            current = None
    return LinkCounters(sent.get("lake", 0), sent.get("cluster", 0), sent.get("other", 0))


def _burst_bytes(mbit: float) -> int:
    """A few GSO packets, or 2 ms at the rate, whichever is more: HTB then never idles a
    class for lack of tokens to send one whole super-packet."""
    return max(4 * GSO_PACKET, int(mbit * 1e6 / 8 * 0.002))


class ShapedNetwork:
    """A network namespace whose loopback carries a slow lake link and a fast cluster link.

    ``with ShapedNetwork(lake_ports=[rgw_port]) as net:`` creates and shapes it; leaving the
    block (or exiting, or Ctrl-C) kills what runs inside and deletes it."""

    def __init__(self, lake_ports: Iterable[int] = (), *, lake_mbit: float = DEFAULT_LAKE_MBIT,
                 cluster_mbit: float | None = None, name: str | None = None) -> None:
        self.name = name or f"{NAME_PREFIX}{os.getpid()}"
        self.lake_mbit = lake_mbit
        self.cluster_mbit = cluster_mbit if cluster_mbit is not None else lake_mbit * CLUSTER_RATIO
        self.lake_ports: list[int] = []
        self._initial_lake_ports = list(lake_ports)
        self._started = False

    # -- running things inside -------------------------------------------------------------------

    @property
    def prefix(self) -> tuple[str, ...]:
        """What runs a command inside: ``ip netns exec NAME`` (which execs, so a Popen's pid is
        the command's own)."""
        return ("ip", "netns", "exec", self.name)

    def command(self, argv: Sequence[str]) -> list[str]:
        return [*self.prefix, *argv]

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        """Start ``argv`` inside the namespace (in its own session, so a Ctrl-C on the terminal
        reaches only the benchmark, whose teardown stops it)."""
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        kwargs.setdefault("start_new_session", True)
        return subprocess.Popen(self.command(argv), **kwargs)

    def run(self, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        check = kwargs.pop("check", True)
        return subprocess.run(self.command(argv), check=check, **kwargs)

    def run_python(self, code: str, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[Any]:
        """Run a Python snippet inside with this interpreter, from the repo root (so
        ``import benchmarks...`` works); e.g. boto3 uploads to the namespace's RGW."""
        kwargs.setdefault("cwd", REPO_ROOT)
        return self.run([sys.executable, "-c", code, *args], **kwargs)

    def enter(self) -> None:
        """Move this process into the namespace (setns(2)): every socket it opens from now on and
        every child it starts are inside. Only for a single-threaded process (setns moves the
        calling thread alone), typically a benchmark driver right after :meth:`start`."""
        if threading.active_count() != 1:
            raise RuntimeError("enter() needs a single-threaded process: setns moves one thread only")
        libc = ctypes.CDLL(None, use_errno=True)
        with open(f"/run/netns/{self.name}", "rb") as ns:
            if libc.setns(ns.fileno(), _CLONE_NEWNET) != 0:
                errno = ctypes.get_errno()
                raise OSError(errno, f"setns({self.name}): {os.strerror(errno)}")

    def call(self, fn: Callable[[], T]) -> T:
        """``fn()`` in a new thread moved into the namespace (setns moves that thread alone): every
        socket it opens and every process it starts is inside, while the caller stays outside
        (a test runner). Returns what ``fn`` returns, or raises what it raised."""
        out: list[Any] = []

        def run() -> None:
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                with open(f"/run/netns/{self.name}", "rb") as ns:
                    if libc.setns(ns.fileno(), _CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), f"setns({self.name})")
                out.append((True, fn()))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                out.append((False, exc))

        thread = threading.Thread(target=run, name=f"in {self.name}")
        thread.start()
        thread.join()
        ok, value = out[0]
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]

    def set_rate(self, link: str, mbit: float) -> None:
        """Change the ``lake`` or ``cluster`` link's rate now (tc class change)."""
        classid = {"lake": LAKE_CLASS, "cluster": CLUSTER_CLASS}[link]
        burst = str(_burst_bytes(mbit))
        self._tc("class", "change", "dev", "lo", "parent", "1:", "classid", classid, "htb",
                 "rate", f"{mbit:.0f}mbit", "ceil", f"{mbit:.0f}mbit", "burst", burst, "cburst", burst,
                 "quantum", str(GSO_PACKET))
        if link == "lake":
            self.lake_mbit = mbit
        else:
            self.cluster_mbit = mbit

    def ceph(self, **kwargs: Any) -> CephCluster:
        """A :class:`CephCluster` whose daemons run inside; its RGW port is shaped as the lake.
        Defaults: a data folder of this process's own, and ports apart from the developer's."""
        kwargs.setdefault("ceph_dir", Path(f"/tmp/lakegate-netns-ceph-{os.getpid()}"))
        kwargs.setdefault("rgw_port", 7690)
        kwargs.setdefault("mon_port", 41090)
        kwargs.setdefault("ms_port_min", 47100)
        kwargs.setdefault("ms_port_max", 47199)
        cluster = CephCluster(command_prefix=self.prefix, **kwargs)
        self.shape_lake_port(cluster.rgw_port)
        return cluster

    # -- shaping and counting --------------------------------------------------------------------

    def _tc(self, *args: str) -> str:
        return self.run(["tc", *args], capture_output=True, text=True).stdout

    def shape_lake_port(self, port: int) -> None:
        """Classify TCP to or from ``port`` (inside the namespace) as lake traffic."""
        if port in self.lake_ports:
            return
        for direction in ("dport", "sport"):
            self._tc("filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
                     "match", "ip", "protocol", "6", "0xff", "match", "ip", direction, str(port), "0xffff",
                     "flowid", LAKE_CLASS)
        self.lake_ports.append(port)

    def _shape(self) -> None:
        self._tc("qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb", "default", OTHER_CLASS.split(":")[1])
        for classid, mbit in ((LAKE_CLASS, self.lake_mbit), (CLUSTER_CLASS, self.cluster_mbit),
                              (OTHER_CLASS, UNSHAPED_MBIT)):
            burst = str(_burst_bytes(mbit))
            # rate = ceil: no borrowing between the links; quantum only matters when borrowing,
            # set to one super-packet to silence HTB's "quantum is big" warning
            self._tc("class", "add", "dev", "lo", "parent", "1:", "classid", classid, "htb",
                     "rate", f"{mbit:.0f}mbit", "ceil", f"{mbit:.0f}mbit", "burst", burst, "cburst", burst,
                     "quantum", str(GSO_PACKET))
        for direction in ("src", "dst"):
            self._tc("filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio", "2", "u32",
                     "match", "ip", direction, f"{PEER_HOST}/32", "flowid", CLUSTER_CLASS)
        for port in self._initial_lake_ports:
            self.shape_lake_port(port)

    def counters(self) -> LinkCounters:
        return parse_class_bytes(self._tc("-s", "class", "show", "dev", "lo"))

    def describe(self) -> dict[str, Any]:
        return {"namespace": self.name, "lake_mbit": self.lake_mbit, "cluster_mbit": self.cluster_mbit,
                "lake_ports": list(self.lake_ports), "peer_host": PEER_HOST, "client_host": CLIENT_HOST}

    # -- life cycle ------------------------------------------------------------------------------

    def start(self) -> Self:
        why_not = available()
        if why_not:
            raise RuntimeError(f"shaped network: {why_not}")
        remove_stale_namespaces()
        if self.name in namespaces():  # not ours to shape, nor to delete at the end
            raise RuntimeError(f"network namespace {self.name} already exists")
        self._started = True
        on_exit(f"netns {self.name}", self.stop)  # before creating: a half-made one goes too
        subprocess.run(["ip", "netns", "add", self.name], check=True)
        self.run(["ip", "link", "set", "lo", "up"])
        self._shape()
        log(f"network namespace {self.name}: lake {self.lake_mbit:.0f} Mbit/s on port(s) {self.lake_ports}, "
            f"cluster {self.cluster_mbit:.0f} Mbit/s via {PEER_HOST}, other unshaped")
        return self

    def pids(self) -> list[int]:
        return _namespace_pids(self.name)

    def stop(self) -> None:
        """Kill what is left inside (TERM, then KILL), delete the namespace. Idempotent."""
        if not self._started:
            return
        self._started = False
        cancel_on_exit(self.stop)
        _kill_namespace_processes(self.name)
        subprocess.run(["ip", "netns", "del", self.name], stdin=subprocess.DEVNULL,
                       capture_output=True, check=False)
        log(f"network namespace {self.name} deleted")

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def enter_benchmark_namespace(name: str, *, lake_mbit: float, cluster_mbit: float | None = None
                              ) -> ShapedNetwork | None:
    """A benchmark's usual start: Ctrl-C and signals tear down (even when started in the
    background), a shaped namespace made and this process moved into it. None, after one line on
    stderr, when it cannot be made here."""
    exit_on_signals()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    why_not = available()
    if why_not:
        print(f"{name}: no shaped network ({why_not})", file=sys.stderr)
        return None
    net = ShapedNetwork(lake_mbit=lake_mbit, cluster_mbit=cluster_mbit).start()
    net.enter()
    return net


def namespaces() -> list[str]:
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    return [line.split()[0] for line in listing.splitlines() if line.strip()]


def _namespace_pids(name: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, check=False).stdout
    return [int(p) for p in out.split() if p.isdigit() and int(p) != os.getpid()]


def _kill_namespace_processes(name: str, grace: float = 10.0) -> None:
    """TERM, then KILL what is still there after ``grace``; a second round catches a process
    that was joining (``ip netns exec`` between its fork and its setns) during the first."""
    for _ in range(2):
        pids = _namespace_pids(name)
        if pids:
            _kill(pids, grace)


def _kill(pids: list[int], grace: float) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while pids and time.monotonic() < deadline:
            pids = [pid for pid in pids if _alive(pid)]
            time.sleep(0.1)
        if not pids:
            return


def _alive(pid: int) -> bool:
    """Running (a zombie is dead: our own killed children stay zombies until their Popen waits)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        return state != b"Z"
    except (FileNotFoundError, IndexError):
        return False


def remove_stale_namespaces() -> list[str]:
    """Delete lakegate-bench-<pid>... namespaces whose creating process is gone (a benchmark
    killed with SIGKILL cannot clean up); those of live processes are left alone."""
    removed = []
    for name in namespaces():
        owner = re.match(re.escape(NAME_PREFIX) + r"(\d+)", name)
        if owner and not _alive(int(owner.group(1))):
            _kill_namespace_processes(name)
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
            removed.append(name)
    if removed:
        log(f"removed stale network namespace(s): {', '.join(removed)}")
    return removed


# -- self-check: transfers over each class, timed and counted ------------------------------------
#
# A tiny TCP service (run inside with `python -m benchmarks.netns serve PORT...`): a client
# sends b"P" + 8-byte length and then that many bytes (upload; the server answers b"k" when it has
# them all), or b"G" + length and reads that many (download).

_HEADER = struct.Struct("!cQ")
_CHUNK = 1 * MiB


def _serve_one(conn: socket.socket) -> None:
    with conn:
        header = conn.recv(_HEADER.size, socket.MSG_WAITALL)
        mode, length = _HEADER.unpack(header)
        buffer = bytearray(_CHUNK)
        if mode == b"P":
            view = memoryview(buffer)
            while length > 0:
                got = conn.recv_into(view, min(length, _CHUNK))
                if not got:
                    return
                length -= got
            conn.sendall(b"k")
        else:
            view = memoryview(buffer)
            while length > 0:
                length -= conn.send(view[: min(length, _CHUNK)])


def serve(ports: Sequence[int]) -> None:
    def accept_loop(listener: socket.socket) -> None:
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=_serve_one, args=(conn,), daemon=True).start()

    for port in ports:
        listener = socket.create_server(("0.0.0.0", port), reuse_port=False)
        threading.Thread(target=accept_loop, args=(listener,), daemon=True).start()
    print("ready", flush=True)
    threading.Event().wait()


def transfer(host: str, port: int, mode: str, length: int) -> dict[str, Any]:
    """One upload (``P``) or download (``G``) of ``length`` bytes; prints what it took."""
    with socket.create_connection((host, port), timeout=120) as sock:
        started = time.monotonic()
        sock.sendall(_HEADER.pack(mode.encode(), length))
        buffer = bytearray(_CHUNK)
        view = memoryview(buffer)
        left = length
        if mode == "P":
            while left > 0:
                left -= sock.send(view[: min(left, _CHUNK)])
            sock.recv(1)
        else:
            while left > 0:
                got = sock.recv_into(view, min(left, _CHUNK))
                if not got:
                    raise ConnectionError(f"{host}:{port} closed with {left} bytes to go")
                left -= got
        seconds = time.monotonic() - started
    return {"bytes": length, "seconds": seconds}


def _wait_ready(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != b"ready":
        raise RuntimeError(f"self-check server did not start (exit {proc.poll()}, said {line!r})")


def measured_transfer(net: ShapedNetwork, host: str, port: int, mode: str, length: int) -> dict[str, Any]:
    """Run one :func:`transfer` inside ``net``; its timing plus each class's byte delta."""
    before = net.counters()
    out = net.run_python("import json, sys; from benchmarks.netns import transfer; "
                         "print(json.dumps(transfer(sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))))",
                         host, str(port), mode, str(length), capture_output=True, text=True)
    delta = net.counters() - before
    result = json.loads(out.stdout)
    result["mbit_per_s"] = round(result["bytes"] * 8 / result["seconds"] / 1e6, 1)
    result["counted"] = delta.as_dict()
    return result


def selfcheck(lake_mbit: float, cluster_mbit: float | None, seconds: float, with_ceph: bool) -> dict[str, Any]:
    lake_port, node_port, client_port = 7690, 9100, 9200
    with ShapedNetwork([lake_port], lake_mbit=lake_mbit, cluster_mbit=cluster_mbit) as net:
        server = net.popen([sys.executable, "-m", "benchmarks.netns", "serve", str(lake_port), str(node_port),
                            str(client_port)], cwd=REPO_ROOT, stdout=subprocess.PIPE)
        _wait_ready(server)
        mb_per_s = {"lake": net.lake_mbit / 8, "cluster": net.cluster_mbit / 8, "other": 4 * net.cluster_mbit / 8}
        cases = [  # (class, host, port, mode)
            ("lake", CLIENT_HOST, lake_port, "G"),  # RGW answering a GET: data leaves the lake port
            ("lake", CLIENT_HOST, lake_port, "P"),
            ("cluster", PEER_HOST, node_port, "G"),
            ("cluster", PEER_HOST, node_port, "P"),
            ("other", CLIENT_HOST, node_port, "G"),
        ]
        results = []
        for link, host, port, mode in cases:
            length = int(mb_per_s[link] * 1e6 * seconds)
            one = measured_transfer(net, host, port, mode, length)
            counted = one["counted"][link]
            target = {"lake": net.lake_mbit, "cluster": net.cluster_mbit}.get(link)
            one.update(link=link, to=f"{host}:{port}", mode={"G": "download", "P": "upload"}[mode],
                       counted_over_sent=round(counted / length, 4),
                       rate_over_target=round(one["mbit_per_s"] / target, 3) if target else None)
            log(f"{link:8s} {one['mode']:8s} {length / MiB:7.1f} MiB at {one['mbit_per_s']:8.1f} Mbit/s, "
                f"counted {counted / length:.4f} x sent")
            results.append(one)
        server.terminate()
        server.wait(timeout=10)
        assert server.stdout is not None
        server.stdout.close()
        result: dict[str, Any] = {"benchmark": "netns_selfcheck", "machine": machine_info(),
                                  "network": net.describe(), "transfers": results}
        if with_ceph:
            result["ceph"] = _ceph_check(net, seconds)
    result["namespace_removed"] = net.name not in namespaces()
    return result


_CEPH_GET = """
import json, sys, time, boto3
from botocore.config import Config
url, key, secret, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
s3 = boto3.client("s3", endpoint_url=url, aws_access_key_id=key, aws_secret_access_key=secret,
                  region_name="us-east-1", config=Config(s3={"addressing_style": "path"}))
s3.create_bucket(Bucket="netns")
body = bytes(size)
t0 = time.monotonic(); s3.put_object(Bucket="netns", Key="blob", Body=body); put = time.monotonic() - t0
t0 = time.monotonic(); got = len(s3.get_object(Bucket="netns", Key="blob")["Body"].read()); get = time.monotonic() - t0
print(json.dumps({"bytes": size, "got": got, "put_seconds": put, "get_seconds": get}))
"""


def _ceph_check(net: ShapedNetwork, seconds: float) -> dict[str, Any]:
    """A PUT and a GET through the namespace's own RGW: both should cross the lake link at ~R."""
    with net.ceph() as ceph:
        assert ceph.endpoint is not None
        size = int(net.lake_mbit / 8 * 1e6 * seconds)
        before = net.counters()
        out = net.run_python(_CEPH_GET, ceph.endpoint.url, ceph.endpoint.access_key, ceph.endpoint.secret_key,
                             str(size), capture_output=True, text=True)
        delta = net.counters() - before
    result: dict[str, Any] = json.loads(out.stdout)
    result["put_mbit_per_s"] = round(size * 8 / result.pop("put_seconds") / 1e6, 1)
    result["get_mbit_per_s"] = round(size * 8 / result.pop("get_seconds") / 1e6, 1)
    result["counted"] = delta.as_dict()
    result["lake_counted_over_put_plus_get"] = round(delta.lake / (2 * size), 4)
    log(f"ceph: PUT {result['put_mbit_per_s']} Mbit/s, GET {result['get_mbit_per_s']} Mbit/s, lake counted "
        f"{result['lake_counted_over_put_plus_get']} x (PUT + GET)")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    exit_on_signals()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    serve_parser = sub.add_parser("serve", help="(inside the namespace) the self-check's TCP service")
    serve_parser.add_argument("ports", nargs="+", type=int)
    parser.add_argument("--selfcheck", action="store_true", help="measure each link's rate and counters")
    parser.add_argument("--lake-mbit", type=float, default=DEFAULT_LAKE_MBIT)
    parser.add_argument("--cluster-mbit", type=float, default=None, help=f"default {CLUSTER_RATIO:g} x lake")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each transfer at its target rate")
    parser.add_argument("--ceph", action="store_true", help="also PUT and GET through a Ceph RGW inside")
    args = parser.parse_args(argv)
    if args.command == "serve":
        serve(args.ports)
        return 0
    if not args.selfcheck:
        parser.print_help()
        return 2
    result = selfcheck(args.lake_mbit, args.cluster_mbit, args.seconds, args.ceph)
    emit_result("netns_selfcheck", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
