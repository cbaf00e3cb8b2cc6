"""Tenant fairness (issue 12, Pisces OSDI'12): 3 nodes, 8 tenants, every tenant's demand above its
share, node capacities enforced by the gateway, the lake link shaped; the Pisces ablation and the
weighted, two-resource and protected-tenant cases, in one run.

Everything runs in a network namespace of its own (benchmarks/netns.py): Ceph's RGW is the lake,
its port shaped to a little above ``--lake-bandwidth`` (the gateway's own lake budget,
LAKEGATE_LAKE_BANDWIDTH, is then what binds), 3 lakegate nodes (`lakegate cluster up`), and this
process's closed-loop clients (one asyncio loop; a 503 SlowDown is counted and retried after a
short back-off). The nodes get LAKEGATE_NODE_REQUEST_RATE and LAKEGATE_NODE_SEND_RATE low enough
that the scheduler, not this machine's 2 cores, is the bottleneck (CPU busy is measured and
reported for every run). Every run starts fresh nodes (empty caches); clients run ``warmup``
seconds, then ``measure`` seconds are counted in 1 s bins.

1. ablation: LAKEGATE_FAIRNESS off, fq, fq+pp, fq+pp+wa, all; 8 tenants of equal weight, Zipf
   popularity over their own objects (the hottest objects of half of them in two ring
   partitions), clients spread unevenly over the nodes. Per-tenant requests/s and bytes/s per
   weight over time; the min-max ratio (min over tenants of throughput/weight over the max).
2. weighted classes (all): weights 100x / 10x / 1x; each class's share over its weighted share.
3. two resources (all): a request-bound tenant (4 KiB objects) and a bandwidth-bound one (1 MiB
   objects, cached): each one's share of its own bottleneck (request slots; bytes to clients).
4. protected tenant: its p99 alone, then while another tenant scans data larger than the
   caches; with fairness off and with all (each over its own solo p99).
5. overhead: total throughput of ablation's all over its off.

    .venv/bin/python -m benchmarks.fairness [--quick] [--plot-dir docs/benchmarks]

Progress on stderr; one JSON object on stdout, also written to benchmarks/results/fairness.json.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import signal
import sys
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.fairness_stats import (
    TARGET_CLASS_RATIO_MIN, TARGET_MMR_MIN, TARGET_P99_RATIO_MAX, TARGET_THROUGHPUT_RATIO_MIN, Completion,
    Target, Zipf, bin_completions, binned_min_max_ratios, class_share_ratios, drf_rates, keys_in_partitions,
    min_max_ratio, uneven_spread,
)
from benchmarks.netns import CLIENT_HOST, PEER_HOST, ShapedNetwork, available
from harness.ceph import CephCluster
from harness.cluster import LocalCluster
from harness.clients import RawS3Client, gather_limited, make_client, run_async
from harness.endpoints import S3Endpoint, Tenant
from harness.processes import exit_on_signals, log
from harness.results import RESULTS_DIR, emit_result, git_revision, machine_info, median, percentile, rounded
from harness.units import KiB, MiB

from cachetier.cluster.config import MembershipConfig

NAME = "fairness"
NODES = 3
BUCKET = "fairness"
MODES = ("off", "fq", "fq+pp", "fq+pp+wa", "all")
SMALL, TINY, BIG = 32 * KiB, 4 * KiB, 1 * MiB
HOT_RANKS = 4  # each hot-partition tenant's 4 most popular objects
HOT_PARTITIONS = frozenset({7, 500})
ZIPF_S = 1.0
MB = 1_000_000  # the byte rates given to the gateway are in MB/s (ByteSize: 10^6)


def tenant(name: str, index: int, weight: float = 1.0) -> Tenant:
    return Tenant(name, f"FAIRNESS{index:04d}KEY00000"[:20], f"fairness-secret-{index:04d}-0123456789", weight=weight)


# -- the data set ----------------------------------------------------------------------------------


@dataclass
class DataSet:
    """Object keys by purpose; sizes by key. Bodies are seeded bytes, made while uploading."""

    small: dict[int, list[str]] = field(default_factory=dict)  # tenant index -> keys, by popularity rank
    tiny: list[str] = field(default_factory=list)
    big: list[str] = field(default_factory=list)
    sizes: dict[str, int] = field(default_factory=dict)

    @classmethod
    def make(cls, tenants: int, per_tenant: int, tiny: int, big: int) -> DataSet:
        data = cls()
        partitions = MembershipConfig.partitions
        for t in range(tenants):
            hot = (keys_in_partitions(BUCKET, f"t{t}/hot", HOT_RANKS, HOT_PARTITIONS, partitions)
                   if t < tenants // 2 else [f"t{t}/hot-{r}" for r in range(HOT_RANKS)])
            data.small[t] = hot + [f"t{t}/obj-{r:04d}" for r in range(HOT_RANKS, per_tenant)]
            data.sizes.update({k: SMALL for k in data.small[t]})
        data.tiny = [f"tiny/{i:04d}" for i in range(tiny)]
        data.big = [f"big/{i:04d}" for i in range(big)]
        data.sizes.update({k: TINY for k in data.tiny} | {k: BIG for k in data.big})
        return data

    @property
    def total_bytes(self) -> int:
        return sum(self.sizes.values())


async def upload(lake: S3Endpoint, data: DataSet) -> None:
    rng = random.Random(12)
    async with make_client("httpx", lake) as s3:
        await s3.create_bucket(BUCKET)
        await gather_limited((s3.put_checked(BUCKET, k, rng.randbytes(n)) for k, n in data.sizes.items()), 16)


# -- load ------------------------------------------------------------------------------------------


@dataclass
class Load:
    """One tenant's closed-loop clients: ``spread[i]`` of them on node i, each drawing keys by
    Zipf popularity (``zipf_s``) or, ``zipf_s=None``, scanning ``keys`` in order (one cursor per
    node, starting a third of the way further on each node)."""

    tenant: Tenant
    keys: list[str]
    spread: list[int]
    zipf_s: float | None = ZIPF_S

    def picker(self, node: int, worker: int, seed: int, cursors: dict[int, Iterator[str]]) -> Callable[[], str]:
        if self.zipf_s is None:
            if node not in cursors:
                start = node * len(self.keys) // NODES
                cursors[node] = itertools.cycle(self.keys[start:] + self.keys[:start])
            cursor = cursors[node]
            return lambda: next(cursor)
        zipf = Zipf(len(self.keys), self.zipf_s, seed=zlib.crc32(f"{seed}/{self.tenant.name}/{node}/{worker}".encode()))
        return lambda: self.keys[zipf.draw()]


@dataclass
class Served:
    completions: list[Completion] = field(default_factory=list)
    slowdowns: int = 0
    errors: dict[str, int] = field(default_factory=dict)


async def _client(s3: RawS3Client, node: int, pick: Callable[[], str], served: Served, t0: float, stop: float,
                  rng: random.Random) -> None:
    loop = asyncio.get_running_loop()
    while loop.time() - t0 < stop:
        key = pick()
        started = loop.time()
        while loop.time() - t0 < stop:  # one request: retried after SlowDown until it succeeds
            try:
                status, received, prefix = await s3.get_with_prefix(BUCKET, key)
            except (OSError, ConnectionError, TimeoutError) as exc:
                served.errors[type(exc).__name__] = served.errors.get(type(exc).__name__, 0) + 1
                await asyncio.sleep(0.1)
                continue
            if status == 503 and b"SlowDown" in prefix:
                served.slowdowns += 1
                await asyncio.sleep(0.02 + 0.03 * rng.random())
                continue
            if status != 200:
                served.errors[str(status)] = served.errors.get(str(status), 0) + 1
                await asyncio.sleep(0.05)
                break
            ended = loop.time()
            served.completions.append(Completion(ended - t0, received, ended - started, node))
            break


async def drive(loads: Sequence[Load], urls: Sequence[str], seconds: float,
                marks: dict[float, Callable[[], None]], seed: int) -> dict[str, Served]:
    """Run every load's clients for ``seconds``; ``marks`` (second -> action) run on the way
    (e.g. counters read when the measured window opens and closes)."""
    served = {load.tenant.name: Served() for load in loads}
    clients: list[RawS3Client] = []
    tasks = []
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    rng = random.Random(seed)
    for load in loads:
        cursors: dict[int, Iterator[str]] = {}
        for node, count in enumerate(load.spread):
            if count == 0:
                continue
            endpoint = S3Endpoint(urls[node], load.tenant.access_key, load.tenant.secret_key)
            s3 = RawS3Client(endpoint, max_connections=count)
            clients.append(s3)
            for worker in range(count):
                pick = load.picker(node, worker, seed, cursors)
                tasks.append(asyncio.create_task(
                    _client(s3, node, pick, served[load.tenant.name], t0, seconds, random.Random(rng.random()))))

    async def marker() -> None:
        for at, action in sorted(marks.items()):
            await asyncio.sleep(max(0.0, t0 + at - loop.time()))
            action()

    try:
        await asyncio.gather(marker(), *tasks)
    finally:
        for task in tasks:
            task.cancel()
        for s3 in clients:
            await s3.aclose()
    return served


# -- one run: fresh nodes, a load, what it got -------------------------------------------------------


class CpuWindow:
    """CPU busy over a window: the whole machine (psutil, all cores; other users included) and
    the processes of this benchmark (this driver, the nodes, Ceph), in cores."""

    def __init__(self, pids: Callable[[], list[int]]) -> None:
        self.pids = pids
        self._machine: Any = None
        self._ours = 0.0
        self._at = 0.0
        self.result: dict[str, float] = {}

    @staticmethod
    def _busy(t: Any) -> float:
        return float(t.user + t.system + t.nice + getattr(t, "irq", 0) + getattr(t, "softirq", 0))

    @staticmethod
    def _ours_now(pids: list[int]) -> float:
        import psutil

        total = 0.0
        for pid in pids:
            try:
                t = psutil.Process(pid).cpu_times()
            except psutil.Error:
                continue
            total += t.user + t.system
        return total

    def start(self) -> None:
        import psutil

        self._pids = self.pids()
        self._machine, self._ours, self._at = psutil.cpu_times(), self._ours_now(self._pids), time.monotonic()
        self._driver = time.process_time()

    def stop(self) -> None:
        import psutil

        machine, seconds = psutil.cpu_times(), time.monotonic() - self._at
        total = sum(machine) - sum(self._machine)
        cores = psutil.cpu_count() or 1
        self.result = {
            "machine_busy_fraction": rounded((self._busy(machine) - self._busy(self._machine)) / total if total else float("nan")),
            "ours_cores": rounded((self._ours_now(self._pids) - self._ours) / seconds),
            "load_generator_cores": rounded((time.process_time() - self._driver) / seconds),
            "cores": cores,
            "loadavg_1m": rounded(os.getloadavg()[0], 2),
        }
        self.result["benchmark_cores"] = rounded(self.result["ours_cores"] + self.result["load_generator_cores"])


@dataclass(frozen=True)
class Settings:
    """The node capacities and bounds every run's nodes get (the contract's LAKEGATE_ names)."""

    request_rate: float  # requests/s per node
    send_rate: float  # bytes/s to clients per node
    lake_bandwidth: float  # bytes/s the whole cluster may pull from the lake
    tenant_queue: int
    cache_capacity: str
    l2_capacity: str

    def env(self, mode: str) -> dict[str, str]:
        return {"LAKEGATE_ACCESS_LOG": "false", "LAKEGATE_FAIRNESS": mode,
                "LAKEGATE_NODE_REQUEST_RATE": f"{self.request_rate:g}",
                "LAKEGATE_NODE_SEND_RATE": f"{self.send_rate / MB:g}MB/s",
                "LAKEGATE_LAKE_BANDWIDTH": f"{self.lake_bandwidth / MB:g}MB/s",
                "LAKEGATE_TENANT_QUEUE": str(self.tenant_queue),
                # one worker per node (3 nodes, Ceph and the clients share 2 cores); the leader's
                # loops at the pace a 30 s run can show: WA every second, PP every 8 s
                "LAKEGATE_WORKERS": "1", "LAKEGATE_ALLOCATION_INTERVAL": "1",
                "LAKEGATE_PLACEMENT_INTERVAL": "8"}


class Bench:
    def __init__(self, args: argparse.Namespace, lake: S3Endpoint, net: ShapedNetwork | None,
                 ceph: CephCluster, settings: Settings) -> None:
        self.args, self.lake, self.net, self.ceph, self.settings = args, lake, net, ceph, settings
        self.runs: dict[str, dict[str, Any]] = {}

    def run(self, name: str, mode: str, loads: Sequence[Load], *, warmup: float | None = None) -> dict[str, Any]:
        warmup = self.args.warmup if warmup is None else warmup
        measure = self.args.measure
        tenants = [load.tenant for load in loads]
        shaped = self.net is not None
        nodes = LocalCluster(self.lake, nodes=NODES, tenants=tenants, env=self.settings.env(mode),
                             host="0.0.0.0" if shaped else "127.0.0.1",  # noqa: S104 - inside the namespace
                             advertise_host=PEER_HOST if shaped else None,
                             client_host=CLIENT_HOST if shaped else None,
                             cache_capacity=self.settings.cache_capacity, l2_capacity=self.settings.l2_capacity)
        cpu = CpuWindow(lambda: [*nodes.pids.values(), *self.ceph.pids().values()])
        lake_link: list[int] = []

        def opened() -> None:
            cpu.start()
            if self.net is not None:
                lake_link.append(self.net.counters().lake)

        def closed() -> None:
            cpu.stop()
            if self.net is not None:
                lake_link.append(self.net.counters().lake)

        try:
            nodes.up()
            served = run_async(drive(loads, list(nodes.urls.values()), warmup + measure,
                                     {warmup: opened, warmup + measure: closed}, seed=self.args.seed))
            gateway_view = admin_tenants(nodes)
            cache = cache_per_tenant(nodes)
            placement = placement_counts(nodes)
        finally:
            nodes.down()
        result = summarise(loads, served, warmup, warmup + measure)
        result |= {"mode": mode, "cpu": cpu.result, "cache_per_tenant": cache, "placement": placement,
                   "gateway_min_max_ratio": {n: v.get("min_max_ratio") if isinstance(v, dict) else None
                                             for n, v in gateway_view.items()},
                   "gateway_tenants": gateway_view}
        for node in result["per_node"].values():
            node["rps_over_capacity"] = rounded(node["rps"] / self.settings.request_rate)
            node["MBps_over_capacity"] = rounded(node["MBps"] * MB / self.settings.send_rate)
        if len(lake_link) == 2:
            result["lake_link_bytes"] = lake_link[1] - lake_link[0]
            result["lake_link_MBps"] = rounded((lake_link[1] - lake_link[0]) / measure / MB)
        log(f"{name} ({mode}): {result['total']['rps']} req/s, {result['total']['MBps']} MB/s, "
            f"MMR {result['mmr_requests']}, CPU {cpu.result}")
        self.runs[name] = result
        return result


def admin_tenants(nodes: LocalCluster) -> dict[str, Any]:
    """GET /_lakegate/admin/tenants of every node (None where a node has no such endpoint yet)."""
    out: dict[str, Any] = {}
    for node_id in nodes.node_ids:
        try:
            out[node_id] = nodes.admin(node_id, "/_lakegate/admin/tenants")
        except Exception as exc:  # noqa: BLE001 - today's gateway answers 404: report, go on
            out[node_id] = {"unavailable": repr(exc)[:200]}
    return out


def placement_counts(nodes: LocalCluster) -> dict[str, Any]:
    """What partition placement did over the whole run, from /_lakegate/admin/stats: partitions
    moved and tables applied, summed over the nodes (each node counts the moves it applied, so a
    move is counted once per node). What the moves cost, the blocks new owners fetched again, is
    in the run's lake bytes next to the same run without placement (fq against fq+pp)."""
    moved = applied = 0
    for node_id in nodes.node_ids:
        counters = ((nodes.admin_stats(node_id).get("cache") or {}).get("cluster") or {}).get("counters") or {}
        moved += int(counters.get("partitions_moved", 0))
        applied += int(counters.get("partition_tables_applied", 0))
    return {"partitions_moved_total_over_nodes": moved, "tables_applied_total_over_nodes": applied}


def cache_per_tenant(nodes: LocalCluster) -> dict[str, dict[str, float]]:
    """Each tenant's cache counters (hits, misses, lake bytes, ...) summed over the nodes."""
    total: dict[str, dict[str, float]] = {}
    for node_id in nodes.node_ids:
        per_tenant = (nodes.admin_stats(node_id).get("cache") or {}).get("per_tenant") or {}
        for name, counters in per_tenant.items():
            mine = total.setdefault(name, {})
            for counter, value in counters.items():
                if isinstance(value, (int, float)):
                    mine[counter] = mine.get(counter, 0) + value
    return total


def summarise(loads: Sequence[Load], served: dict[str, Served], start: float, end: float) -> dict[str, Any]:
    seconds = end - start
    weights = {load.tenant.name: load.tenant.weight for load in loads}
    per_tenant: dict[str, Any] = {}
    bins = {}
    for load in loads:
        name = load.tenant.name
        got = served[name]
        window = [c for c in got.completions if start <= c.at < end]
        bins[name] = bin_completions(window, start, end)
        latencies = [c.latency for c in window]
        served_rps, served_bps = len(window) / seconds, sum(c.bytes for c in window) / seconds
        per_tenant[name] = {
            "weight": load.tenant.weight, "clients_per_node": load.spread, "requests": len(window),
            "rps": rounded(served_rps), "MBps": rounded(served_bps / MB),
            "rps_per_weight": rounded(served_rps / load.tenant.weight),
            "MBps_per_weight": rounded(served_bps / MB / load.tenant.weight),
            "p50_ms": rounded(percentile(latencies, 50) * 1000), "p99_ms": rounded(percentile(latencies, 99) * 1000),
            "slowdowns": got.slowdowns, "errors": got.errors,
            "bins_rps": list(bins[name].requests), "bins_MBps": [rounded(b / MB) for b in bins[name].bytes],
        }
    in_window = [c for got in served.values() for c in got.completions if start <= c.at < end]
    per_node = {f"node{i + 1}": {"rps": rounded(sum(1 for c in in_window if c.node == i) / seconds),
                                 "MBps": rounded(sum(c.bytes for c in in_window if c.node == i) / seconds / MB)}
                for i in range(NODES)}
    rps = {n: t["rps"] for n, t in per_tenant.items()}
    mbps = {n: t["MBps"] for n, t in per_tenant.items()}
    per_bin = binned_min_max_ratios(bins, weights)
    return {
        "per_tenant": per_tenant,
        "total": {"rps": rounded(sum(rps.values())), "MBps": rounded(sum(mbps.values())),
                  "slowdowns": sum(t["slowdowns"] for t in per_tenant.values()),
                  "errors": sum(sum(t["errors"].values()) for t in per_tenant.values())},
        "per_node": per_node,
        "mmr_requests": rounded(min_max_ratio(rps, weights)),
        "mmr_bytes": rounded(min_max_ratio(mbps, weights)),
        "mmr_per_second": {"median": rounded(median(per_bin)), "min": rounded(min(per_bin, default=float("nan")))},
        "measured_s": seconds,
    }


# -- the phases ----------------------------------------------------------------------------------


def ablation(bench: Bench, data: DataSet) -> dict[str, Any]:
    """Phase 1: 8 equal tenants, clients spread unevenly, every LAKEGATE_FAIRNESS mode."""
    args = bench.args
    spread = uneven_spread(len(data.small), NODES, per_tenant=args.clients, seed=args.seed)
    loads = [Load(tenant(f"t{i}", i), data.small[i], spread[i]) for i in range(len(data.small))]
    modes = {mode: bench.run(f"ablation[{mode}]", mode, loads) for mode in MODES}
    return {"clients_per_node": spread, "hot_partitions": sorted(HOT_PARTITIONS),
            "hot_partition_tenants": [f"t{i}" for i in range(len(data.small) // 2)],
            "mmr_requests": {m: r["mmr_requests"] for m, r in modes.items()},
            "mmr_bytes": {m: r["mmr_bytes"] for m, r in modes.items()},
            "mmr_gain_over_previous_mode": {m: rounded(modes[m]["mmr_requests"] - modes[p]["mmr_requests"])
                                            for p, m in itertools.pairwise(MODES)},
            "total_rps": {m: r["total"]["rps"] for m, r in modes.items()},
            "modes": modes}


WEIGHT_CLASSES = {"100x": (100.0,), "10x": (10.0, 10.0, 10.0), "1x": (1.0, 1.0, 1.0, 1.0)}


def weighted(bench: Bench, data: DataSet) -> dict[str, Any]:
    """Phase 2: weights 100 / 10 / 1 (8 tenants), fairness all; clients on every node."""
    loads: list[Load] = []
    classes: dict[str, list[str]] = {}
    index = 0
    for cls, class_weights in WEIGHT_CLASSES.items():
        classes[cls] = []
        for w in class_weights:
            per_node = max(2, bench.args.clients // 2) if w < 100 else bench.args.clients
            t = tenant(f"w{index}-{cls}", 100 + index, weight=w)
            loads.append(Load(t, data.small[index], [per_node] * NODES))
            classes[cls].append(t.name)
            index += 1
    run = bench.run("weighted[all]", "all", loads)
    rps = {n: t["rps"] for n, t in run["per_tenant"].items()}
    weights = {n: t["weight"] for n, t in run["per_tenant"].items()}
    ratios = class_share_ratios(rps, weights, classes)
    return {"classes": classes, "share_over_weighted_share": {c: rounded(r) for c, r in ratios.items()}, "run": run}


def two_resources(bench: Bench, data: DataSet) -> dict[str, Any]:
    """Phase 3: a request-bound tenant (4 KiB objects) and a bandwidth-bound one (1 MiB objects,
    a set small enough to stay cached), equal weights, fairness all."""
    per_node = max(2, bench.args.clients // 2)
    request_bound = Load(tenant("requests", 200), data.tiny, [per_node] * NODES)
    bandwidth_bound = Load(tenant("bandwidth", 201), data.big[: bench.args.pair_big_objects], [per_node] * NODES)
    run = bench.run("two_resources[all]", "all", [request_bound, bandwidth_bound])
    s = bench.settings
    capacity = {"requests": NODES * s.request_rate, "bytes": NODES * s.send_rate}
    ideal = drf_rates(capacity, {"requests": {"requests": 1, "bytes": TINY}, "bandwidth": {"requests": 1, "bytes": BIG}},
                      {"requests": 1.0, "bandwidth": 1.0})
    got = run["per_tenant"]
    share = {"requests": got["requests"]["rps"] / capacity["requests"],
             "bandwidth": got["bandwidth"]["MBps"] * MB / capacity["bytes"]}
    return {
        "bottleneck": {"requests": "request slots", "bandwidth": "bytes sent to clients"},
        "capacity": {"requests_per_s": capacity["requests"], "MBps": capacity["bytes"] / MB},
        "share_of_own_bottleneck": {k: rounded(v) for k, v in share.items()},
        "weighted_share": 0.5,
        "drf_ideal_share": {"requests": rounded(ideal["requests"] / capacity["requests"]),
                            "bandwidth": rounded(ideal["bandwidth"] * BIG / capacity["bytes"])},
        "share_over_weighted_share": {k: rounded(v / 0.5) for k, v in share.items()},
        "run": run,
    }


def protected(bench: Bench, data: DataSet) -> dict[str, Any]:
    """Phase 4: a protected tenant's Zipf reads of a small hot set, alone, then with a tenant
    scanning ``data.big`` (larger than all the caches) in order; fairness off, then all (each
    mode's p99 over its own solo p99)."""
    args = bench.args
    guard = Load(tenant("protected", 300), data.small[0], [1] * NODES)
    scan = Load(tenant("scanner", 301), data.big, [args.clients] * NODES, zipf_s=None)
    runs = {
        f"{case}_{mode}": bench.run(f"protected[{case}, {mode}]", mode, [guard] if case == "solo" else [guard, scan],
                                    warmup=args.protect_warmup)
        for mode in ("off", "all") for case in ("solo", "scan")
    }
    p99 = {k: r["per_tenant"]["protected"]["p99_ms"] for k, r in runs.items()}
    return {"scan_bytes": len(data.big) * BIG, "protected_p99_ms": p99,
            "p99_over_solo": {mode: rounded(p99[f"scan_{mode}"] / p99[f"solo_{mode}"]) for mode in ("off", "all")},
            "runs": runs}


CPU_SATURATED = 0.9  # machine busy fraction above which the CPU, not the scheduler, may be the limit


def cpu_summary(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The busiest run's CPU; runs where the whole machine was near saturation (their figures
    may say more about the CPU than about the scheduler)."""
    busy = {name: r["cpu"].get("machine_busy_fraction", float("nan")) for name, r in runs.items()}
    return {"machine_busy_max": max(busy.values(), default=float("nan")),
            "benchmark_cores_max": max((r["cpu"].get("benchmark_cores", 0.0) for r in runs.values()), default=0.0),
            "saturated_runs": sorted(n for n, b in busy.items() if b > CPU_SATURATED),
            "saturation_threshold": CPU_SATURATED}


def targets(result: dict[str, Any]) -> dict[str, Any]:
    ablation_ = result["ablation"]
    checks = [Target("mmr_all", ablation_["mmr_requests"]["all"], TARGET_MMR_MIN, True)]
    checks += [Target(f"weighted_{c}", v, TARGET_CLASS_RATIO_MIN, True)
               for c, v in result["weighted"]["share_over_weighted_share"].items()]
    checks.append(Target("protected_p99_over_solo_all", result["protected"]["p99_over_solo"]["all"],
                         TARGET_P99_RATIO_MAX, False))
    checks.append(Target("throughput_all_over_off", result["throughput"]["rps_all_over_off"],
                         TARGET_THROUGHPUT_RATIO_MIN, True))
    checks += [Target(f"two_resources_{k}", v, TARGET_CLASS_RATIO_MIN, True)
               for k, v in result["two_resources"]["share_over_weighted_share"].items()]
    out: dict[str, Any] = {t.name: t.as_dict() for t in checks}
    out["all_met"] = all(t.met for t in checks)
    return out


# -- figures -------------------------------------------------------------------------------------


def plots(result: dict[str, Any], directory: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from harness.results import save_figure

    modes = result["ablation"]["modes"]
    fig, axes = plt.subplots(len(MODES), 1, figsize=(8, 2.0 * len(MODES)), sharex=True, sharey=True)
    for ax, mode in zip(axes, MODES):
        for name, t in modes[mode]["per_tenant"].items():
            ax.plot([r / t["weight"] for r in t["bins_rps"]], label=name, linewidth=1)
        ax.set_title(f"{mode}: min-max ratio {modes[mode]['mmr_requests']}", fontsize=9)
        ax.set_ylabel("req/s / weight", fontsize=8)
    axes[-1].set_xlabel("second of the measured window")
    axes[0].legend(ncol=8, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, 1.6))
    written = [directory / "fairness_throughput.png"]
    save_figure(fig, written[-1])

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    mmr = [result["ablation"]["mmr_requests"][m] for m in MODES]
    left.bar(MODES, mmr, color=["#999", "#6a6", "#4a8", "#3a9", "#2a7"])
    left.axhline(TARGET_MMR_MIN, color="#c33", linestyle="--", linewidth=1, label=f"target {TARGET_MMR_MIN}")
    left.set_ylim(0, 1.05)
    left.set_ylabel("min-max ratio (req/s per weight)")
    left.set_title("Pisces ablation: 3 nodes, 8 tenants")
    left.legend(fontsize=8)
    right.bar(MODES, [result["ablation"]["total_rps"][m] for m in MODES], color="#789")
    right.set_ylabel("total req/s")
    right.set_title(f"throughput (all / off = {result['throughput']['rps_all_over_off']})")
    for ax in (left, right):
        ax.tick_params(axis="x", labelsize=8)
    written.append(directory / "fairness_ablation.png")
    save_figure(fig, written[-1])
    return written


# -- main ----------------------------------------------------------------------------------------


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="benchmarks.fairness", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a smoke run: seconds per phase, small data")
    p.add_argument("--warmup", type=float, default=15.0, help="seconds of load before measuring (WA converges in ~10 rounds)")
    p.add_argument("--measure", type=float, default=25.0, help="seconds measured per run")
    p.add_argument("--protect-warmup", type=float, default=8.0, help="warm-up of the protected-tenant runs")
    p.add_argument("--clients", type=int, default=4, help="closed-loop clients per tenant (spread over nodes)")
    p.add_argument("--objects", type=int, default=200, help="32 KiB objects per tenant")
    p.add_argument("--scan-objects", type=int, default=256, help="1 MiB objects the scanner reads")
    p.add_argument("--pair-big-objects", type=int, default=12, help="1 MiB objects of the bandwidth-bound tenant")
    p.add_argument("--request-rate", type=float, default=80.0, help="LAKEGATE_NODE_REQUEST_RATE (req/s per node)")
    p.add_argument("--send-mbps", type=float, default=6.0, help="LAKEGATE_NODE_SEND_RATE in MB/s per node")
    p.add_argument("--lake-mbps", type=float, default=8.0, help="LAKEGATE_LAKE_BANDWIDTH in MB/s (link: +15%%)")
    p.add_argument("--tenant-queue", type=int, default=32, help="LAKEGATE_TENANT_QUEUE")
    p.add_argument("--cache-capacity", default="24MiB", help="each node's L1 (and L2) capacity")
    p.add_argument("--seed", type=int, default=12)
    p.add_argument("--unshaped", action="store_true", help="no namespace, no tc: the host's loopback")
    p.add_argument("--plot-dir", type=Path, default=None, help="PNGs (default docs/benchmarks; quick: benchmarks/results)")
    p.add_argument("--output", type=Path, default=None, help="JSON result file")
    p.add_argument("--ceph-dir", type=Path, default=Path("/tmp/lakegate-bench-fairness-ceph"))
    p.add_argument("--rgw-port", type=int, default=7596)
    p.add_argument("--mon-port", type=int, default=40996)
    args = p.parse_args(argv)
    if args.quick:
        args.warmup, args.measure, args.protect_warmup = 1.0, 3.0, 2.0
        args.objects, args.scan_objects, args.pair_big_objects, args.cache_capacity = 40, 32, 6, "4MiB"
    if args.plot_dir is None:
        args.plot_dir = RESULTS_DIR if args.quick else Path(__file__).resolve().parents[1] / "docs" / "benchmarks"
    if args.output is None:
        args.output = RESULTS_DIR / (f"{NAME}_quick.json" if args.quick else f"{NAME}.json")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    exit_on_signals()
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C tears down even when started in the background
    started = time.monotonic()
    net: ShapedNetwork | None = None
    lake_mbit = args.lake_mbps * 8 * 1.15
    if not args.unshaped:
        why_not = available()
        if why_not:
            print(f"fairness: no shaped network ({why_not}); run with --unshaped", file=sys.stderr)
            return 2
        net = ShapedNetwork(lake_mbit=lake_mbit).start()
        net.enter()  # this process, its clients, Ceph and every node live in the namespace
    settings = Settings(request_rate=args.request_rate, send_rate=args.send_mbps * MB,
                        lake_bandwidth=args.lake_mbps * MB, tenant_queue=args.tenant_queue,
                        cache_capacity=args.cache_capacity, l2_capacity=args.cache_capacity)
    data = DataSet.make(tenants=8, per_tenant=args.objects, tiny=args.objects, big=args.scan_objects)
    ceph = CephCluster(ceph_dir=args.ceph_dir, rgw_port=args.rgw_port, mon_port=args.mon_port,
                       ms_port_min=47400, ms_port_max=47499)
    result: dict[str, Any] = {"benchmark": NAME, "revision": git_revision(), "machine": machine_info(),
                              "quick": args.quick}
    try:
        lake = ceph.start()
        ceph.restart_rgw("tcp_nodelay=1")
        log(f"uploading {len(data.sizes)} objects ({data.total_bytes / MiB:.0f} MiB), lake link unshaped")
        run_async(upload(lake, data))
        if net is not None:
            net.shape_lake_port(args.rgw_port)  # from here on the lake link is the shaped one
        bench = Bench(args, lake, net, ceph, settings)
        phases_started = time.monotonic()
        result["ablation"] = ablation(bench, data)
        result["weighted"] = weighted(bench, data)
        result["two_resources"] = two_resources(bench, data)
        result["protected"] = protected(bench, data)
    finally:
        ceph.stop()
        if net is not None:
            net.stop()
    totals = result["ablation"]["total_rps"]
    result["throughput"] = {"rps_off": totals["off"], "rps_all": totals["all"],
                            "rps_all_over_off": rounded(totals["all"] / totals["off"])}
    result |= {
        "shaped": net is not None,
        "network": net.describe() if net is not None else None,
        "settings": {**settings.env("<per run>"), "cache_capacity": settings.cache_capacity,
                     "l2_capacity": settings.l2_capacity, "byte_rates_in": "MB = 10^6 bytes"},
        "config": {"nodes": NODES, "tenants": 8, "warmup_s": args.warmup, "measure_s": args.measure,
                   "protect_warmup_s": args.protect_warmup, "clients_per_tenant": args.clients,
                   "objects_per_tenant": args.objects, "object_bytes": SMALL, "zipf_s": ZIPF_S,
                   "scan_bytes": len(data.big) * BIG, "seed": args.seed},
        "cpu": cpu_summary(bench.runs),
        "targets": targets(result),
        "phases_seconds": rounded(time.monotonic() - phases_started),
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
