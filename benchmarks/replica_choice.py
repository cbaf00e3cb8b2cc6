"""Replica choice (issue 15: MicroMon, C3): the five policies of ``policies.selection``
(micromon, round_robin, least_outstanding, latency, c3 = micromon without anomaly reports) side
by side, in one run, against heterogeneity from real causes only.

Everything runs in a network namespace of its own (benchmarks/netns.py), with a Ceph of its
own there (3 RGW instances: 3 endpoints of one lake). Each scenario runs every policy on fresh
nodes (LAKEGATE_REPLICA_POLICY), the same keys and seeds, closed-loop clients on one node:
``warmup`` seconds, then ``nofault`` seconds measured, then the fault starts and ``fault``
seconds are measured; the candidates' request counts (GET /_lakegate/admin/replicas on the
client node) are sampled every second for the share per candidate over time.

1. lake_delay: one node, LAKEGATE_CACHE=false (every GET goes to the lake), its lake the 3
   RGW endpoints, the third through a delay relay (benchmarks/relay.py) that holds every
   response ``--lake-delay-ms`` during the fault window.
2. peer_cpu: 3 nodes, LAKEGATE_REPLICAS=2, keys chosen (GET /_lakegate/admin/locate) so that
   both owners of their block are peers of the client node (node1), their L2 warm (each key
   read once through each owner), node1's L1 small so most reads go to a peer; in the fault
   window node3 (an owner of every key) has its threads and ``--hogs`` busy loops pinned to one
   core, the loops at ``--hog-nice`` (default -10: a higher-priority job; at nice 0 this 2-core
   machine showed node3 no slower than node2); with ``--cpu-fault quota``, node3's processes go
   into a cgroup limited to ``--quota-percent`` of a core instead (a CPU limit's throttling:
   node3 slows alone, where the pinned hogs slow the reader's node as much on 2 cores).
3. peer_disk: the same, node3's cache folder under a dd loop of synced writes instead.

Reported per scenario and policy, for both windows: throughput, p50/p99/p99.9 latency,
errors, the share of requests per candidate per second, and the bytes disseminated by
heartbeats (anomaly reports vs the raw samples they stand for, /metrics). Targets: micromon
>= 1.5x round_robin's throughput, p99 <= 0.5x round_robin's, p99 below least_outstanding's
(fault windows), and micromon's fault p99 within 1.3x of its no-fault p99 when one of three
candidates is made ~10x slower (lake_delay; the slowdown measured is reported beside it).

    sudo .venv/bin/python -m benchmarks.replica_choice [--quick] [--scenarios lake_delay,peer_cpu]

Progress on stderr; one JSON object on stdout, also written to docs/benchmarks/replica_choice.json
(quick: benchmarks/results/replica_choice_quick.json); PNGs replica_latency.png, replica_share.png.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import random
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.endpoints import BENCH_TENANT, S3Endpoint, admin_get_json
from harness.processes import log
from harness.clients import run_async
from harness.results import RESULTS_DIR, emit_result, git_revision, machine_info, percentile, rounded
from harness.units import KiB, MiB

NAME = "replica_choice"
POLICIES = ("micromon", "round_robin", "least_outstanding", "latency", "c3")
SCENARIOS = ("lake_delay", "peer_cpu", "peer_disk")
BUCKET = "replicas"
OBJECT = 32 * KiB
CLIENT_NODE = "node1"
SLOW_NODE = "node3"
HOG_CORE = 1
WINDOWS = ("nofault", "fault")

TARGET_THROUGHPUT_MIN = 1.5  # micromon over round_robin
TARGET_P99_VS_RR_MAX = 0.5  # micromon over round_robin
TARGET_FAULT_P99_MAX = 1.3  # micromon's fault p99 over its no-fault p99


# -- pure: summaries, shares, key choice, targets --------------------------------------------------


@dataclass(frozen=True)
class Completion:
    end: float  # seconds since the drive started
    latency: float  # seconds
    ok: bool


def window_summary(completions: Sequence[Completion], start: float, end: float) -> dict[str, Any]:
    """Throughput and latency percentiles of the completions that ended in [start, end)."""
    inside = [c for c in completions if start <= c.end < end]
    ok = [c.latency for c in inside if c.ok]
    seconds = end - start
    return {"requests": len(ok), "errors": len(inside) - len(ok), "seconds": rounded(seconds),
            "rps": rounded(len(ok) / seconds if seconds > 0 else float("nan"), 1),
            "p50_ms": rounded(percentile(ok, 50) * 1e3), "p99_ms": rounded(percentile(ok, 99) * 1e3),
            "p999_ms": rounded(percentile(ok, 99.9) * 1e3)}


def shares_over_time(samples: Sequence[tuple[float, Mapping[str, int]]]) -> dict[str, Any]:
    """Cumulative request counts per candidate sampled over time -> each interval's share of the
    requests per candidate (an interval with no requests: every share 0)."""
    names = sorted({n for _, counts in samples for n in counts})
    out: dict[str, Any] = {"t": [], "share": {n: [] for n in names}, "requests": {n: [] for n in names}}
    for (_, before), (t, after) in zip(samples, samples[1:]):
        delta = {n: max(0, after.get(n, 0) - before.get(n, 0)) for n in names}
        total = sum(delta.values())
        out["t"].append(rounded(t, 2))
        for n in names:
            out["share"][n].append(rounded(delta[n] / total if total else 0.0))
            out["requests"][n].append(delta[n])
    return out


def window_shares(samples: Sequence[tuple[float, Mapping[str, int]]], start: float, end: float) -> dict[str, float]:
    """Each candidate's share of the requests counted between the samples nearest ``start`` and ``end``."""
    if len(samples) < 2:
        return {}
    first = min(samples, key=lambda s: abs(s[0] - start))[1]
    last = min(samples, key=lambda s: abs(s[0] - end))[1]
    delta = {n: max(0, last.get(n, 0) - first.get(n, 0)) for n in set(first) | set(last)}
    total = sum(delta.values())
    return {n: rounded(v / total if total else 0.0) for n, v in sorted(delta.items())}


def keys_owned_by_peers(located: Mapping[str, Sequence[str]], client: str, peers: Sequence[str]) -> list[str]:
    """The keys whose block's owners are exactly ``peers`` (so none is the client's node)."""
    want = set(peers)
    return [k for k, owners in located.items() if client not in owners and set(owners) == want]


_METRIC = re.compile(r"^(lakegate_telemetry_(?:report|raw)_bytes)(?:_total)?(?:\{[^}]*\})?\s+([0-9.eE+-]+)\s*$", re.M)


def disseminated(metrics_text: str) -> dict[str, float]:
    """``report_bytes`` and ``raw_bytes`` from a node's /metrics (Prometheus text)."""
    out = {"report_bytes": 0.0, "raw_bytes": 0.0}
    for name, value in _METRIC.findall(metrics_text):
        if name.endswith("_created"):
            continue
        out[name.removeprefix("lakegate_telemetry_")] += float(value)
    return out


@dataclass(frozen=True)
class Target:
    name: str
    value: float
    bound: float
    at_least: bool  # value >= bound (else value <= bound)
    strict: bool = False  # strictly better (<) than the bound

    @property
    def met(self) -> bool:
        if self.value != self.value:  # NaN: not measured
            return False
        if self.at_least:
            return self.value >= self.bound
        return self.value < self.bound if self.strict else self.value <= self.bound

    def as_dict(self) -> dict[str, Any]:
        op = ">=" if self.at_least else ("<" if self.strict else "<=")
        return {"value": rounded(self.value), "bound": f"{op} {self.bound:g}", "met": self.met}


def _ratio(a: float, b: float) -> float:
    return a / b if b and a == a and b == b else float("nan")


def scenario_targets(policies: Mapping[str, Mapping[str, Any]], *, fault_p99: bool) -> dict[str, Any]:
    """The issue's targets for one scenario, from each policy's summary (``windows``: nofault, fault)."""
    mm = policies["micromon"]["windows"]
    rr = policies["round_robin"]["windows"]["fault"]
    lo = policies["least_outstanding"]["windows"]["fault"]
    checks = [
        Target("throughput_micromon_over_round_robin", _ratio(mm["fault"]["rps"], rr["rps"]), TARGET_THROUGHPUT_MIN, True),
        Target("p99_micromon_over_round_robin", _ratio(mm["fault"]["p99_ms"], rr["p99_ms"]), TARGET_P99_VS_RR_MAX, False),
        Target("p99_micromon_over_least_outstanding", _ratio(mm["fault"]["p99_ms"], lo["p99_ms"]), 1.0, False, strict=True),
    ]
    if fault_p99:
        checks.append(Target("p99_micromon_fault_over_nofault", _ratio(mm["fault"]["p99_ms"], mm["nofault"]["p99_ms"]),
                             TARGET_FAULT_P99_MAX, False))
    out: dict[str, Any] = {t.name: t.as_dict() for t in checks}
    out["all_met"] = all(t.met for t in checks)
    return out


def slowdown(report: Mapping[str, Any], scenario: str, slow_lake: str) -> dict[str, Any]:
    """How much slower the faulted candidate answered than the others, by the client node's
    latency EWMAs at the end of round_robin's fault window (round_robin keeps sending to it)."""
    group, slow = ("lake", slow_lake) if scenario == "lake_delay" else ("peers", SLOW_NODE)
    latency = {n: c.get("latency_s") for n, c in report.get(group, {}).items()}
    others = [v for n, v in latency.items() if n != slow and v]
    slow_s = latency.get(slow)
    ratio = slow_s / (sum(others) / len(others)) if others and slow_s else float("nan")
    return {"candidate": slow, "latency_s": latency, "slow_over_others": rounded(ratio, 2)}


def spread(values: Sequence[float]) -> dict[str, float]:
    finite = sorted(v for v in values if v == v)
    if not finite:
        return {"median": float("nan"), "min": float("nan"), "max": float("nan"), "n": 0}
    return {"median": rounded(finite[len(finite) // 2] if len(finite) % 2 else
                              (finite[len(finite) // 2 - 1] + finite[len(finite) // 2]) / 2),
            "min": rounded(finite[0]), "max": rounded(finite[-1]), "n": len(finite)}


# -- load ------------------------------------------------------------------------------------------


@dataclass
class Drive:
    completions: list[Completion] = field(default_factory=list)
    samples: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    actions: dict[str, float] = field(default_factory=dict)  # what happened when (s since start)


async def _client(s3: Any, keys: Sequence[str], rng: random.Random, out: Drive, t0: float, stop: float) -> None:
    loop = asyncio.get_running_loop()
    while loop.time() - t0 < stop:
        key = keys[rng.randrange(len(keys))]
        started = loop.time()
        try:
            status, _, _ = await s3.get_with_prefix(BUCKET, key, keep=0)
            ok = status == 200
            if not ok:
                out.errors[str(status)] = out.errors.get(str(status), 0) + 1
        except (OSError, ConnectionError, TimeoutError) as exc:
            ok = False
            out.errors[type(exc).__name__] = out.errors.get(type(exc).__name__, 0) + 1
        ended = loop.time()
        out.completions.append(Completion(ended - t0, ended - started, ok))
        if not ok:
            await asyncio.sleep(0.05)


async def drive(url: str, keys: Sequence[str], clients: int, seconds: float, seed: int,
                counts: Callable[[], dict[str, int]], marks: Mapping[float, tuple[str, Callable[[], None]]]) -> Drive:
    """``clients`` closed-loop clients GETting random ``keys`` through ``url`` for ``seconds``;
    ``counts()`` (the candidates' cumulative requests) sampled every second; ``marks``: second ->
    (name, action), run in a thread on the way."""
    from harness.clients import RawS3Client

    out = Drive()
    loop = asyncio.get_running_loop()
    s3 = RawS3Client(S3Endpoint(url, BENCH_TENANT.access_key, BENCH_TENANT.secret_key), max_connections=clients)
    t0 = loop.time()

    async def sampler() -> None:
        while loop.time() - t0 < seconds + 0.5:
            try:
                got = await asyncio.to_thread(counts)
                out.samples.append((loop.time() - t0, got))
            except OSError as exc:
                out.errors[f"sample {type(exc).__name__}"] = out.errors.get(f"sample {type(exc).__name__}", 0) + 1
            await asyncio.sleep(max(0.0, 1.0 - (loop.time() - t0) % 1.0))

    async def marker() -> None:
        for at, (name, action) in sorted(marks.items()):
            await asyncio.sleep(max(0.0, t0 + at - loop.time()))
            await asyncio.to_thread(action)
            out.actions[name] = rounded(loop.time() - t0, 2)

    tasks = [asyncio.create_task(_client(s3, keys, random.Random(seed * 1000 + i), out, t0, seconds))
             for i in range(clients)]
    try:
        await asyncio.gather(sampler(), marker(), *tasks)
    finally:
        for task in tasks:
            task.cancel()
        await s3.aclose()
    return out


# -- faults ----------------------------------------------------------------------------------------


def _threads_of(pid: int) -> list[int]:
    import psutil

    process = psutil.Process(pid)
    ids = [t.id for t in process.threads()]
    for child in process.children(recursive=True):
        ids += [t.id for t in child.threads()]
    return ids


class CpuHog:
    """``hogs`` busy loops pinned to one core, and the node's threads pinned there beside them."""

    def __init__(self, pid: int, hogs: int, nice: int = 0, core: int = HOG_CORE) -> None:
        self.pid, self.hogs, self.nice, self.core = pid, hogs, nice, core
        self.procs: list[subprocess.Popen[bytes]] = []
        self.seen: dict[str, Any] = {}

    def start(self) -> None:
        for tid in _threads_of(self.pid):
            try:
                os.sched_setaffinity(tid, {self.core})
            except OSError:
                pass
        for _ in range(self.hogs):
            proc = subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
            os.sched_setaffinity(proc.pid, {self.core})
            os.setpriority(os.PRIO_PROCESS, proc.pid, self.nice)
            self.procs.append(proc)
        self.seen = {"node_threads_on": sorted({c for t in _threads_of(self.pid) for c in os.sched_getaffinity(t)}),
                     "hogs_on": sorted({c for p in self.procs for c in os.sched_getaffinity(p.pid)}),
                     "hogs": self.hogs, "hog_nice": self.nice}

    def stop(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()
        self.procs.clear()
        every = set(range(os.cpu_count() or 1))
        try:
            for tid in _threads_of(self.pid):
                try:
                    os.sched_setaffinity(tid, every)
                except OSError:
                    pass
        except Exception:  # noqa: BLE001 - the node may be gone already
            pass


class CpuQuota:
    """The node's processes in a cgroup (v1 ``cpu``) limited to ``percent`` of one core: a
    CPU limit's throttling, as a container's limit does, which slows that node alone (the hogs
    of ``CpuHog`` take the core from everything scheduled there, the reader's node too)."""

    ROOT = Path("/sys/fs/cgroup/cpu")

    def __init__(self, pid: int, percent: float) -> None:
        self.pid, self.percent = pid, percent
        self.group = self.ROOT / f"lakegate-bench-{os.getpid()}"
        self.seen: dict[str, Any] = {}

    def _pids(self) -> list[int]:
        import psutil

        process = psutil.Process(self.pid)
        return [self.pid, *(c.pid for c in process.children(recursive=True))]

    def start(self) -> None:
        self.group.mkdir(exist_ok=True)
        period = int((self.group / "cpu.cfs_period_us").read_text())
        (self.group / "cpu.cfs_quota_us").write_text(str(max(1000, int(period * self.percent / 100))))
        for pid in self._pids():
            (self.group / "cgroup.procs").write_text(str(pid))
        self.seen = {"cgroup": str(self.group), "quota_percent_of_a_core": self.percent,
                     "pids": [int(x) for x in (self.group / "cgroup.procs").read_text().split()]}

    def stop(self) -> None:
        if not self.group.exists():
            return
        for pid in (self.group / "cgroup.procs").read_text().split():
            try:
                (self.ROOT / "cgroup.procs").write_text(pid)
            except OSError:  # gone meanwhile
                pass
        try:
            self.group.rmdir()
        except OSError as exc:
            log(f"cgroup {self.group} not removed: {exc}")

    @classmethod
    def available(cls) -> bool:
        return (cls.ROOT / "cgroup.procs").exists() and os.access(cls.ROOT, os.W_OK)


class DiskHog:
    """A loop of synced 64 MiB writes in ``directory`` (the node's cache folder)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        target = self.directory / "disk-hog.bin"
        self.proc = subprocess.Popen(
            ["bash", "-c", f"while :; do dd if=/dev/zero of='{target}' bs=1M count=64 conv=fsync status=none; done"],
            stdin=subprocess.DEVNULL, start_new_session=True)

    def stop(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
            self.proc = None
        (self.directory / "disk-hog.bin").unlink(missing_ok=True)


# -- one run: fresh nodes, one policy, nofault then fault --------------------------------------------


def _metrics(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
        return disseminated(response.read().decode())


class Bench:
    def __init__(self, args: argparse.Namespace, ceph: Any, relay: Any, keys: list[str]) -> None:
        self.args, self.ceph, self.relay, self.all_keys = args, ceph, relay, keys
        self.peer_keys: list[str] | None = None
        self.peer_slowdown: dict[str, Any] = {}

    @property
    def windows(self) -> dict[str, tuple[float, float]]:
        a = self.args
        return {"nofault": (a.warmup, a.warmup + a.nofault), "fault": (a.warmup + a.nofault, a.warmup + a.nofault + a.fault)}

    def _env(self, policy: str, extra: Mapping[str, str]) -> dict[str, str]:
        return {"LAKEGATE_ACCESS_LOG": "false", "LAKEGATE_WORKERS": "1", "LAKEGATE_REPLICA_POLICY": policy, **extra}

    def run(self, scenario: str, policy: str, repeat: int) -> dict[str, Any]:
        from benchmarks.netns import CLIENT_HOST, PEER_HOST
        from harness.cluster import LocalCluster

        args = self.args
        lake_scenario = scenario == "lake_delay"
        if lake_scenario:
            urls = [e.url for e in self.ceph.endpoints[:2]] + [self.relay.url]
            lake = dataclasses.replace(self.ceph.endpoint, url=",".join(urls))
            nodes = LocalCluster(lake, nodes=1, standalone=True, env=self._env(policy, {"LAKEGATE_CACHE": "false"}),
                                 host="0.0.0.0", advertise_host=PEER_HOST, client_host=CLIENT_HOST)  # noqa: S104
        else:
            nodes = LocalCluster(self.ceph.endpoint, nodes=3, env=self._env(policy, {"LAKEGATE_REPLICAS": "2", "LAKEGATE_SIZING": "fixed"}),
                                 host="0.0.0.0", advertise_host=PEER_HOST, client_host=CLIENT_HOST,  # noqa: S104
                                 cache_capacity=args.l1, l2_capacity=args.l2)
        log(f"{scenario}[{policy}] #{repeat}: starting nodes")
        self.relay.set_delay(0.0)
        hog: CpuHog | CpuQuota | DiskHog | None = None
        try:
            nodes.up()
            client_url = nodes.urls[CLIENT_NODE]
            if lake_scenario:
                keys = self.all_keys
                group = "lake"
                fault: tuple[str, Callable[[], None]] = ("fault", lambda: self.relay.set_delay(args.lake_delay_ms / 1e3))
            else:
                keys = self.locate(nodes)
                self.warm(nodes, keys)
                group = "peers"
                if scenario == "peer_cpu" and args.cpu_fault == "quota":
                    hog = CpuQuota(nodes.pids[SLOW_NODE], args.quota_percent)
                elif scenario == "peer_cpu":
                    hog = CpuHog(nodes.pids[SLOW_NODE], args.hogs, args.hog_nice)
                else:
                    hog = DiskHog(Path(nodes.node(SLOW_NODE).cache_dir))
                fault = ("fault", hog.start)
            metrics0 = {n: _metrics(u) for n, u in nodes.urls.items()}

            def counts() -> dict[str, int]:
                report = admin_get_json(client_url + "/_lakegate/admin/replicas")
                return {name: int(c["requests"]) for name, c in report[group].items()}

            seconds = args.warmup + args.nofault + args.fault
            got = run_async(drive(client_url, keys, args.clients, seconds, args.seed + repeat, counts,
                                    {args.warmup + args.nofault: fault}))
            report = admin_get_json(client_url + "/_lakegate/admin/replicas")
            metrics1 = {n: _metrics(u) for n, u in nodes.urls.items()}
        finally:
            if hog is not None:
                hog.stop()
            self.relay.set_delay(0.0)
            nodes.down()
        windows = {w: window_summary(got.completions, *span) for w, span in self.windows.items()}
        for w, (start, end) in self.windows.items():
            windows[w]["share"] = window_shares(got.samples, start, end)
        seconds_run = got.samples[-1][0] - got.samples[0][0] if len(got.samples) > 1 else float("nan")
        bytes_ = {k: sum(metrics1[n][k] - metrics0[n][k] for n in metrics1) for k in ("report_bytes", "raw_bytes")}
        result = {
            "policy": policy, "scenario": scenario, "repeat": repeat, "windows": windows,
            "over_time": shares_over_time(got.samples), "actions": got.actions, "errors": got.errors,
            "final_report": report, "hog": getattr(hog, "seen", None),
            "disseminated": {**{k: int(v) for k, v in bytes_.items()},
                             "report_bytes_per_s": rounded(bytes_["report_bytes"] / seconds_run, 1),
                             "raw_bytes_per_s": rounded(bytes_["raw_bytes"] / seconds_run, 1),
                             "report_over_raw": rounded(_ratio(bytes_["report_bytes"], bytes_["raw_bytes"]))},
        }
        f, n = windows["fault"], windows["nofault"]
        log(f"{scenario}[{policy}]: nofault {n['rps']} req/s p99 {n['p99_ms']} ms | fault {f['rps']} req/s "
            f"p50 {f['p50_ms']} p99 {f['p99_ms']} p99.9 {f['p999_ms']} ms, share {f['share']}, errors {got.errors}")
        return result

    def locate(self, nodes: Any) -> list[str]:
        """The keys whose block both owners are node2 and node3 (so node1's reads go to a peer)."""
        if self.peer_keys is None:
            located = {}
            for key in self.all_keys:
                where = nodes.admin(CLIENT_NODE, f"/_lakegate/admin/locate?bucket={BUCKET}&key={key}")
                located[key] = list(where["owners"])
            peers = [n for n in nodes.node_ids if n != CLIENT_NODE]
            self.peer_keys = keys_owned_by_peers(located, CLIENT_NODE, peers)
            log(f"{len(self.peer_keys)} of {len(located)} keys owned by {peers}")
            if not self.peer_keys:
                raise RuntimeError("no key is owned by both peers of the client node")
        else:  # the ring is the same every run (same node ids): spot-check it
            for key in self.peer_keys[:5]:
                owners = nodes.admin(CLIENT_NODE, f"/_lakegate/admin/locate?bucket={BUCKET}&key={key}")["owners"]
                if CLIENT_NODE in owners:
                    raise RuntimeError(f"{key}: owners {owners} changed between runs")
        return self.peer_keys

    def warm(self, nodes: Any, keys: list[str]) -> None:
        """Each key read once through each of its owners (so their L2 holds it)."""
        from harness.clients import RawS3Client

        async def through(url: str) -> None:
            s3 = RawS3Client(S3Endpoint(url, BENCH_TENANT.access_key, BENCH_TENANT.secret_key), max_connections=8)
            sem = asyncio.Semaphore(8)

            async def one(key: str) -> None:
                async with sem:
                    await s3.get_with_prefix(BUCKET, key, keep=0)

            try:
                await asyncio.gather(*(one(k) for k in keys))
            finally:
                await s3.aclose()

        for node in nodes.node_ids:
            if node != CLIENT_NODE:
                run_async(through(nodes.urls[node]))


# -- aggregation, figures --------------------------------------------------------------------------


def aggregate(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One policy's repeats: the median of each window figure (and its spread)."""
    out: dict[str, Any] = {"windows": {}}
    for w in WINDOWS:
        out["windows"][w] = {}
        for k in ("rps", "p50_ms", "p99_ms", "p999_ms", "errors"):
            values = [float(r["windows"][w][k]) for r in runs]
            s = spread(values)
            out["windows"][w][k] = s["median"]
            if len(runs) > 1:
                out["windows"][w][f"{k}_spread"] = s
        out["windows"][w]["share"] = runs[0]["windows"][w]["share"]
    out["disseminated"] = runs[0]["disseminated"]
    return out


def plots(result: dict[str, Any], directory: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from harness.results import save_figure

    scenarios = [s for s in SCENARIOS if s in result["scenarios"]]
    written: list[Path] = []
    fig, axes = plt.subplots(1, len(scenarios), figsize=(5.2 * len(scenarios), 3.8), squeeze=False)
    for ax, s in zip(axes[0], scenarios):
        policies = result["scenarios"][s]["policies"]
        names = [p for p in POLICIES if p in policies]
        width = 0.27
        for i, (k, label) in enumerate((("p50_ms", "p50"), ("p99_ms", "p99"), ("p999_ms", "p99.9"))):
            ax.bar([j + (i - 1) * width for j in range(len(names))],
                   [policies[p]["windows"]["fault"][k] for p in names], width, label=label)
        ax.set_xticks(range(len(names)), names, rotation=20, fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("ms (fault window)")
        ax.set_title(f"{s}: " + ", ".join(f"{p[:2]} {policies[p]['windows']['fault']['rps']:.0f}/s" for p in names),
                     fontsize=8)
        ax.legend(fontsize=7)
    written.append(directory / "replica_latency.png")
    save_figure(fig, written[-1])

    fig, axes = plt.subplots(len(scenarios), 2, figsize=(10, 2.6 * len(scenarios)), squeeze=False, sharey=True)
    fault_start, fault_end = result["config"]["fault_window_s"]
    for row, s in zip(axes, scenarios):
        for ax, p in zip(row, ("micromon", "round_robin")):
            run = result["scenarios"][s]["runs"].get(p)
            if not run:
                continue
            over = run[0]["over_time"]
            for name, share in over["share"].items():
                ax.plot(over["t"], share, label=name.replace("http://", ""), linewidth=1.2)
            ax.axvspan(fault_start, fault_end, color="#f4c7c3", alpha=0.5, label="fault")
            ax.set_title(f"{s}: {p}", fontsize=9)
            ax.set_ylim(-0.02, 1.02)
            ax.set_ylabel("share of requests", fontsize=8)
            ax.legend(fontsize=6, loc="upper left")
    for ax in axes[-1]:
        ax.set_xlabel("seconds since the load started")
    written.append(directory / "replica_share.png")
    save_figure(fig, written[-1])
    return written


# -- main ----------------------------------------------------------------------------------------


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="benchmarks.replica_choice", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a smoke run: seconds per window, few objects")
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument("--policies", default=",".join(POLICIES))
    p.add_argument("--repeats", type=int, default=1, help="runs of every scenario and policy (spread reported)")
    p.add_argument("--warmup", type=float, default=3.0, help="seconds of load before the no-fault window")
    p.add_argument("--nofault", type=float, default=8.0, help="seconds measured before the fault")
    p.add_argument("--fault", type=float, default=12.0, help="seconds measured from the fault's start")
    p.add_argument("--clients", type=int, default=16, help="closed-loop clients on the client node")
    p.add_argument("--objects", type=int, default=900, help="32 KiB objects in the lake")
    p.add_argument("--lake-delay-ms", type=float, default=50.0, help="the delayed endpoint's hold, in the fault window")
    p.add_argument("--hogs", type=int, default=4, help="busy loops pinned beside the slow owner")
    p.add_argument("--hog-nice", type=int, default=-10,
                   help="the busy loops' nice (below 0: they take the core from the node, as a higher-priority job)")
    p.add_argument("--cpu-fault", choices=("hog", "quota"), default="hog",
                   help="peer_cpu's fault: busy loops pinned beside the owner (the issue's), or the owner "
                        "limited to --quota-percent of a core by a cgroup (slows it alone)")
    p.add_argument("--quota-percent", type=float, default=10.0, help="the owner's CPU limit, % of one core")
    p.add_argument("--l1", default="512KiB", help="each node's L1 capacity (peer scenarios)")
    p.add_argument("--l2", default="128MiB", help="each node's L2 capacity (peer scenarios)")
    p.add_argument("--seed", type=int, default=15)
    p.add_argument("--plot-dir", type=Path, default=None)
    p.add_argument("--output", type=Path, default=None)
    p.add_argument("--ceph-dir", type=Path, default=Path("/tmp/lakegate-bench-replica-ceph"))
    p.add_argument("--rgw-port", type=int, default=7796, help="the first of 3 RGW ports; the relay listens at +3")
    p.add_argument("--mon-port", type=int, default=41296)
    args = p.parse_args(argv)
    if args.quick:
        args.warmup, args.nofault, args.fault, args.objects, args.clients = 1.0, 3.0, 4.0, 240, 8
    root = Path(__file__).resolve().parents[1]
    if args.plot_dir is None:
        args.plot_dir = RESULTS_DIR if args.quick else root / "docs" / "benchmarks"
    if args.output is None:
        args.output = RESULTS_DIR / f"{NAME}_quick.json" if args.quick else root / "docs" / "benchmarks" / f"{NAME}.json"
    args.scenarios = [s for s in args.scenarios.split(",") if s]
    args.policies = [p for p in args.policies.split(",") if p]
    for s in args.scenarios:
        if s not in SCENARIOS:
            p.error(f"unknown scenario {s!r}")
    for name in ("micromon", "round_robin", "least_outstanding"):
        if name not in args.policies:
            p.error(f"--policies must include {name} (the targets compare it)")
    return args


async def _upload(lake: S3Endpoint, keys: Sequence[str]) -> None:
    from harness.clients import gather_limited, make_client

    rng = random.Random(15)
    async with make_client("httpx", lake) as s3:
        await s3.create_bucket(BUCKET)
        await gather_limited((s3.put_checked(BUCKET, k, rng.randbytes(OBJECT)) for k in keys), 16)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.netns import enter_benchmark_namespace
    from benchmarks.relay import TcpRelay
    from harness.ceph import CephCluster

    args = _arguments(argv)
    started = time.monotonic()
    # unshaped in effect: the delay is the relay's
    net = enter_benchmark_namespace("replica_choice", lake_mbit=10_000, cluster_mbit=10_000)
    if net is None:
        return 2
    ceph = CephCluster(ceph_dir=args.ceph_dir, rgw_port=args.rgw_port, mon_port=args.mon_port, rgw_instances=3,
                       ms_port_min=47700, ms_port_max=47799)
    keys = [f"obj-{i:05d}" for i in range(args.objects)]
    result: dict[str, Any] = {"benchmark": NAME, "revision": git_revision(), "machine": machine_info(),
                              "quick": args.quick, "scenarios": {}}
    delay_file = Path(f"/tmp/lakegate-bench-replica-delay-{os.getpid()}")
    relay: Any = None
    try:
        ceph.start()
        log(f"uploading {len(keys)} objects of {OBJECT // KiB} KiB ({len(keys) * OBJECT / MiB:.0f} MiB)")
        run_async(_upload(ceph.endpoint, keys))
        relay = TcpRelay(ceph.endpoints[2].url, port=args.rgw_port + 3, delay_file=delay_file)
        relay.set_delay(0.0)
        relay.start()
        bench = Bench(args, ceph, relay, keys)
        for scenario in args.scenarios:
            runs: dict[str, list[dict[str, Any]]] = {p: [] for p in args.policies}
            for repeat in range(args.repeats):
                for policy in args.policies:
                    runs[policy].append(bench.run(scenario, policy, repeat))
            policies = {p: aggregate(r) for p, r in runs.items()}
            result["scenarios"][scenario] = {
                "policies": policies, "runs": runs,
                "slowdown_measured": slowdown(runs["round_robin"][0]["final_report"], scenario, relay.url),
                "targets": scenario_targets(policies, fault_p99=scenario == "lake_delay"),
            }
    finally:
        if relay is not None:
            relay.stop()
        delay_file.unlink(missing_ok=True)
        ceph.stop()
        net.stop()
    done = result["scenarios"]
    result["targets"] = {s: v["targets"] for s, v in done.items()}
    result["targets"]["all_met"] = all(v["targets"]["all_met"] for v in done.values())
    warmup, nofault, fault = args.warmup, args.nofault, args.fault
    result |= {
        "config": {"scenarios": args.scenarios, "policies": args.policies, "repeats": args.repeats,
                   "clients": args.clients, "objects": args.objects, "object_bytes": OBJECT,
                   "peer_keys": len(bench.peer_keys or []), "lake_delay_ms": args.lake_delay_ms, "hogs": args.hogs, "hog_nice": args.hog_nice,
                   "cpu_fault": args.cpu_fault, "quota_percent": args.quota_percent,
                   "hog_core": HOG_CORE, "l1": args.l1, "l2": args.l2, "seed": args.seed,
                   "client_node": CLIENT_NODE, "slow_node": SLOW_NODE,
                   "lake_endpoints": [e.url for e in ceph.endpoints[:2]] + [relay.url if relay else ""],
                   "delayed_endpoint": relay.url if relay else None,
                   "nofault_window_s": [warmup, warmup + nofault], "fault_window_s": [warmup + nofault,
                                                                                      warmup + nofault + fault]},
        "wall_seconds": rounded(time.monotonic() - started),
    }
    emit_result(NAME, result, args.output)
    try:
        plots(result, args.plot_dir)
    except ImportError as exc:
        log(f"no plots: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
