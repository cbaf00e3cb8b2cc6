"""Adaptive L1/L2 sizing (issue 13, D3N's cache management): three phases that change the access
pattern and the network, run back to back on the same 3 nodes, for adaptive sizing and for fixed
splits (50/50 and a sweep of L1 fractions), in one run.

Everything runs in a network namespace of its own (benchmarks/netns.py): Ceph's RGW is the lake
(its port the shaped lake link), peers talk over the shaped cluster link, clients are unshaped.
Each node has one worker, block size 1 MiB, no readahead, no fairness, a total of ``T`` bytes of
cache (LAKEGATE_CACHE_CAPACITY + LAKEGATE_L2_CAPACITY), starting at 50/50 with adaptive sizing.
Objects are 1 MiB: one block each.

1. rack-local small working set, fast links: each node's clients read a set of their own
   (``--local-fraction`` of T) whose blocks other nodes own: L1 keeps them (D3N: L1 grows).
2. a shared large working set (``--shared-fraction`` of T, read by every node) over a slow lake
   link: one copy in the cluster's L2 beats one per node's L1 (D3N: L2 grows).
3. a congested cluster link (lake fast again), local sets larger than half of T, owned by
   others: an L1 miss crosses the slow link (D3N: L1 grows).

Each phase: ``warm-up`` seconds of reads (not measured: the caches fill, the adaptive split
settles), then a fixed amount of work, ``gets`` GETs per client of random keys of its set
(seeded), whose completion time is measured, with the lake bytes (the tc lake class's counter
and the nodes' ``lake_bytes`` counters) and hit ratios. Then the sampler's overhead: request CPU
of the nodes with every block sampled against almost none, and the probe's cost timed in-process.

    .venv/bin/python -m benchmarks.sizing [--quick]

Progress on stderr; one JSON object on stdout, also written to docs/benchmarks/sizing.json
(quick: benchmarks/results/sizing_quick.json); PNGs in docs/benchmarks (quick: benchmarks/results).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.netns import CLIENT_HOST, PEER_HOST, ShapedNetwork, enter_benchmark_namespace
from harness.ceph import CephCluster
from harness.clients import RawS3Client, gather_limited, make_client, run_async
from harness.cluster import LocalCluster
from harness.endpoints import S3Endpoint, Tenant
from harness.processes import log
from harness.results import RESULTS_DIR, emit_result, git_revision, machine_info, rounded
from harness.units import MiB

NAME = "sizing"
NODES = 3
BUCKET = "sizing"
BLOCK = 1 * MiB
SWEEP = (0.1, 0.3, 0.5, 0.7, 0.9)  # fixed L1 fractions of the total
TOLERANCE = 0.05  # adaptive within 5% of the best fixed split
OVERHEAD_MAX = 0.02  # the sampler's share of request CPU
TENANT = Tenant("sizing", "SIZINGBENCHKEY000000", "sizing-bench-secret-0123456789abcdef")
TINY_RATE = 1e-6  # a sample rate at which (almost) nothing is sampled
DEFAULT_RATE = 0.01  # LAKEGATE_SIZING_SAMPLE_RATE's default
OVERHEAD_L1 = 0.9  # the overhead runs' fixed split: phase 1's sets fit L1, every GET a local hit


# -- pure parts: what the run's figures are judged by (tests/unit/test_sizing_bench.py) ---------------


def config_name(l1_fraction: float | None) -> str:
    return "adaptive" if l1_fraction is None else f"fixed-{round(100 * l1_fraction)}"


def fixed_split(total: int, l1_fraction: float, grain: int = BLOCK) -> tuple[int, int]:
    """(L1, L2) bytes of a fixed split: L1 rounded to whole blocks, L2 the rest of the total."""
    l1 = round(l1_fraction * total / grain) * grain
    return l1, total - l1


def best_fixed(phase: Mapping[str, Mapping[str, float]], metric: str) -> str:
    """The fixed config (name ``fixed-N``) with the least ``metric`` in one phase's results
    (config -> figures); ties: the first in name order."""
    fixed = sorted(name for name in phase if name.startswith("fixed-"))
    if not fixed:
        raise ValueError("no fixed config in the phase")
    return min(fixed, key=lambda name: phase[name][metric])


@dataclass(frozen=True)
class Within:
    """``value`` within ``tolerance`` of ``best`` (lower is better), with an absolute ``slack``
    for figures near zero (lake bytes of a phase whose working sets all fit)."""

    name: str
    value: float
    best: float
    tolerance: float
    slack: float = 0.0

    @property
    def bound(self) -> float:
        return self.best * (1 + self.tolerance) + self.slack

    @property
    def met(self) -> bool:
        return not math.isnan(self.value) and self.value <= self.bound

    def as_dict(self) -> dict[str, object]:
        ratio = self.value / self.best if self.best > 0 else None
        return {"value": rounded(self.value, 4), "best": rounded(self.best, 4), "max": rounded(self.bound, 4),
                "over_best": None if ratio is None else rounded(ratio, 4), "met": self.met}


def phase_targets(phase: Mapping[str, Mapping[str, float]], slack_bytes: float) -> list[Within]:
    """Adaptive against the best fixed split of one phase: lake bytes (least-lake-bytes fixed
    split; ``slack_bytes`` of absolute room) and completion time (least-time fixed split)."""
    adaptive = phase["adaptive"]
    by_lake = phase[best_fixed(phase, "lake_bytes")]
    by_time = phase[best_fixed(phase, "completion_s")]
    return [Within("lake_bytes", adaptive["lake_bytes"], by_lake["lake_bytes"], TOLERANCE, slack_bytes),
            Within("completion_s", adaptive["completion_s"], by_time["completion_s"], TOLERANCE)]


def overall(phases: Mapping[str, Mapping[str, Mapping[str, float]]], config: str, metric: str) -> float:
    return sum(phase[config][metric] for phase in phases.values())


def targets(phases: Mapping[str, Mapping[str, Mapping[str, float]]], overhead: float | None,
            slack_bytes: Mapping[str, float] | None = None) -> dict[str, Any]:
    """Every target of the issue, met or missed: per phase, adaptive within 5% of the best fixed
    split (lake bytes and completion time); overall (sum over phases) better than 50/50 in both;
    the sampler's overhead (a fraction of request CPU; None: not measured) at most 2%. With only
    adaptive and 50/50 (a quick run) the best fixed split is 50/50's."""
    out: dict[str, Any] = {}
    met: list[bool] = []
    for name, phase in phases.items():
        checks = phase_targets(phase, (slack_bytes or {}).get(name, 0.0))
        out[name] = {c.name: c.as_dict() for c in checks} | {
            "best_fixed_by_lake_bytes": best_fixed(phase, "lake_bytes"),
            "best_fixed_by_completion_s": best_fixed(phase, "completion_s")}
        met += [c.met for c in checks]
    half = config_name(0.5)
    for metric in ("lake_bytes", "completion_s"):
        if not phases or any(half not in p for p in phases.values()):
            continue
        a, b = overall(phases, "adaptive", metric), overall(phases, half, metric)
        ok = a < b
        out[f"overall_{metric}_better_than_50_50"] = {"adaptive": rounded(a, 4), "fixed_50": rounded(b, 4),
                                                      "over_50_50": rounded(a / b, 4) if b else None, "met": ok}
        met.append(ok)
    if overhead is not None:
        out["sampler_overhead"] = {"value": rounded(overhead, 4), "max": OVERHEAD_MAX, "met": overhead <= OVERHEAD_MAX}
        met.append(overhead <= OVERHEAD_MAX)
    out["all_met"] = bool(met) and all(met)
    return out


def summary(runs: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """phase -> config -> the figures judged (lake bytes from tc, completion time), from each
    config's run (``phases``: phase -> its measured figures)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for config, run in runs.items():
        for phase, got in run["phases"].items():
            out.setdefault(phase, {})[config] = {"lake_bytes": float(got["lake_bytes_tc"]),
                                                 "completion_s": float(got["completion_s"])}
    return out


def assign_sets(owners: Mapping[str, str], nodes: Sequence[str], per_node: int) -> dict[str, list[str]]:
    """Disjoint sets of ``per_node`` keys, one per node, every key owned by another node: the
    keys an owner holds are dealt in turn to the nodes that do not own them (sorted keys)."""
    sets: dict[str, list[str]] = {node: [] for node in nodes}
    for owner in nodes:
        others = [n for n in nodes if n != owner]
        mine = sorted(k for k, o in owners.items() if o == owner)
        for i, key in enumerate(mine):
            sets[others[i % len(others)]].append(key)
    short = {node: len(keys) for node, keys in sets.items() if len(keys) < per_node}
    if short:
        raise ValueError(f"too few keys owned by other nodes: {short} (need {per_node} each)")
    rng = random.Random(7)
    return {node: sorted(rng.sample(keys, per_node)) for node, keys in sets.items()}


def micro_overhead(timed: Mapping[str, float], rate: float, calls_per_request: float, request_cpu_s: float) -> float:
    """The sampler's share of request CPU from the in-process timings: every probe call hashes
    the block (``reference_unsampled_ns``), and a ``rate`` share of them is sampled (costing
    ``reference_sampled_ns`` in all)."""
    unsampled, sampled = timed["reference_unsampled_ns"], timed["reference_sampled_ns"]
    per_call = unsampled + rate * (sampled - unsampled)
    return calls_per_request * per_call * 1e-9 / request_cpu_s


def cpu_per_request(cpu_s: float, requests: int) -> float:
    return cpu_s / requests if requests else float("nan")


def sampler_overhead(sampled: Sequence[float], unsampled: Sequence[float]) -> float:
    """The sampler's share of request CPU from runs alternating sampled/unsampled (CPU seconds
    per request): (mean sampled - mean unsampled) / mean unsampled."""
    if not sampled or not unsampled:
        return float("nan")
    base = sum(unsampled) / len(unsampled)
    return (sum(sampled) / len(sampled) - base) / base


# -- the data set and the phases --------------------------------------------------------------------


@dataclass(frozen=True)
class Phase:
    name: str
    lake_mbit: float
    cluster_mbit: float
    warmup_s: float
    gets: int  # per client, measured
    shared: bool  # one set read by every node, else a set per node owned by others
    pool: str  # key prefix


@dataclass
class Plan:
    total: int
    local_blocks: int
    congested_blocks: int
    shared_blocks: int
    pools: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def make(cls, total: int, local: float, congested: float, shared: float) -> Plan:
        plan = cls(total, round(local * total / BLOCK), round(congested * total / BLOCK), round(shared * total / BLOCK))
        # candidates for the per-node sets: 1.5x what the sets need, dealt by owner
        plan.pools = {"local": [f"local-{i:04d}" for i in range(math.ceil(1.5 * NODES * plan.local_blocks))],
                      "congested": [f"congested-{i:04d}" for i in range(math.ceil(1.5 * NODES * plan.congested_blocks))],
                      "shared": [f"shared-{i:04d}" for i in range(plan.shared_blocks)]}
        return plan

    def per_node(self, phase: Phase) -> int:
        return self.local_blocks if phase.pool == "local" else self.congested_blocks

    @property
    def keys(self) -> list[str]:
        return [k for keys in self.pools.values() for k in keys]


async def upload(lake: S3Endpoint, keys: Sequence[str]) -> None:
    rng = random.Random(13)
    async with make_client("httpx", lake) as s3:
        await s3.create_bucket(BUCKET)
        await gather_limited((s3.put_checked(BUCKET, k, rng.randbytes(BLOCK)) for k in keys), 16)


# -- load ----------------------------------------------------------------------------------------------


@dataclass
class Served:
    gets: int = 0
    bytes: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    finished: list[float] = field(default_factory=list)  # each client's completion, seconds from start


async def _client(s3: RawS3Client, keys: Sequence[str], rng: random.Random, served: Served, t0: float,
                  *, seconds: float | None, gets: int | None) -> None:
    loop = asyncio.get_running_loop()
    done = 0
    while (seconds is None or loop.time() - t0 < seconds) and (gets is None or done < gets):
        key = keys[rng.randrange(len(keys))]
        try:
            status, received, _ = await s3.get_with_prefix(BUCKET, key, keep=0)
        except (OSError, ConnectionError, TimeoutError) as exc:
            served.errors[type(exc).__name__] = served.errors.get(type(exc).__name__, 0) + 1
            await asyncio.sleep(0.1)
            continue
        if status != 200:
            served.errors[str(status)] = served.errors.get(str(status), 0) + 1
            await asyncio.sleep(0.05)
            continue
        done += 1
        served.gets += 1
        served.bytes += received
    served.finished.append(loop.time() - t0)


async def drive(urls: Sequence[str], sets: Sequence[Sequence[str]], clients: int, seed: int, *,
                seconds: float | None = None, gets: int | None = None) -> Served:
    """``clients`` closed-loop readers per node, node i's reading ``sets[i]``: for ``seconds``, or
    until each has done ``gets`` GETs."""
    served = Served()
    pools = [RawS3Client(S3Endpoint(url, TENANT.access_key, TENANT.secret_key), max_connections=clients)
             for url in urls]
    t0 = asyncio.get_running_loop().time()
    try:
        await asyncio.gather(*(
            _client(s3, keys, random.Random(f"{seed}/{node}/{c}"), served, t0, seconds=seconds, gets=gets)
            for node, (s3, keys) in enumerate(zip(pools, sets)) for c in range(clients)))
    finally:
        for s3 in pools:
            await s3.aclose()
    return served


def node_cpu(pids: Sequence[int]) -> float:
    """CPU seconds (user + system) of ``pids`` and their children so far."""
    import psutil

    total = 0.0
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            for p in (proc, *proc.children(recursive=True)):
                t = p.cpu_times()
                total += t.user + t.system
        except psutil.Error:
            continue
    return total


# -- one config: fresh nodes, the three phases ----------------------------------------------------


COUNTERS = ("lake_bytes", "bytes_from_lake", "hits", "misses", "peer_hits", "peer_fetches", "peer_bytes", "lake_gets")


class Bench:
    def __init__(self, args: argparse.Namespace, lake: S3Endpoint, net: ShapedNetwork, plan: Plan,
                 phases: Sequence[Phase]) -> None:
        self.args, self.lake, self.net, self.plan, self.phases = args, lake, net, plan, phases
        self.sets: dict[str, list[list[str]]] | None = None
        self.owners: dict[str, str] | None = None

    def env(self, l1_fraction: float | None, sample_rate: float | None = None) -> dict[str, str]:
        a = self.args
        return {"LAKEGATE_ACCESS_LOG": "false", "LAKEGATE_FAIRNESS": "off", "LAKEGATE_WORKERS": "1",
                "LAKEGATE_BLOCK_SIZE": str(BLOCK), "LAKEGATE_READAHEAD": "0",
                "LAKEGATE_SIZING": "adaptive" if l1_fraction is None else "fixed",
                "LAKEGATE_SIZING_INTERVAL": f"{a.interval:g}", "LAKEGATE_SIZING_STEP": f"{a.step:g}",
                "LAKEGATE_SIZING_SAMPLE_RATE": f"{a.sample_rate if sample_rate is None else sample_rate:g}",
                "LAKEGATE_SIZING_HALF_LIFE": f"{a.half_life:g}"}

    def nodes(self, l1_fraction: float | None, sample_rate: float | None = None) -> LocalCluster:
        l1, l2 = fixed_split(self.plan.total, 0.5 if l1_fraction is None else l1_fraction)
        return LocalCluster(self.lake, nodes=NODES, tenants=(TENANT,), env=self.env(l1_fraction, sample_rate),
                            host="0.0.0.0", advertise_host=PEER_HOST, client_host=CLIENT_HOST,  # noqa: S104 - in the namespace
                            cache_capacity=str(l1), l2_capacity=str(l2))

    def _sets(self, nodes: LocalCluster) -> dict[str, list[list[str]]]:
        """Each phase's key set per node (in node order); the owners are the ring's, asked once
        (every config's nodes get the same ids, hence the same ring: checked on a sample)."""
        ids = nodes.node_ids
        first = nodes.node_ids[0]

        def owner(key: str) -> str:
            return str(nodes.admin(first, f"/_lakegate/admin/locate?bucket={BUCKET}&key={key}")["owners"][0])

        if self.owners is not None:
            sample = sorted(self.owners)[:: max(1, len(self.owners) // 20)]
            if any(owner(k) != self.owners[k] for k in sample):
                log("the ring changed between configs: owners asked again")
                self.owners = None
        if self.owners is None:
            self.owners = {k: owner(k) for pool in ("local", "congested") for k in self.plan.pools[pool]}
            self.sets = None
        if self.sets is None:
            sets: dict[str, list[list[str]]] = {}
            for phase in self.phases:
                if phase.shared:
                    sets[phase.name] = [self.plan.pools[phase.pool]] * NODES
                    continue
                pool = {k: self.owners[k] for k in self.plan.pools[phase.pool]}
                by_node = assign_sets(pool, ids, self.plan.per_node(phase))
                sets[phase.name] = [by_node[n] for n in ids]
            self.sets = sets
        return self.sets

    def counters(self, nodes: LocalCluster) -> dict[str, dict[str, int]]:
        out = {}
        for node in nodes.node_ids:
            per_tenant = (nodes.admin_stats(node).get("cache") or {}).get("per_tenant") or {}
            mine = per_tenant.get(TENANT.name, {})
            out[node] = {name: int(mine.get(name, 0)) for name in COUNTERS}
        return out

    def sizing(self, nodes: LocalCluster) -> dict[str, dict[str, Any]]:
        return {node: dict(nodes.admin(node, "/_lakegate/admin/sizing")) for node in nodes.node_ids}

    def run(self, l1_fraction: float | None) -> dict[str, Any]:
        name = config_name(l1_fraction)
        self.net.set_rate("lake", self.phases[0].lake_mbit)
        self.net.set_rate("cluster", self.phases[0].cluster_mbit)
        nodes = self.nodes(l1_fraction)
        started = time.time()
        out: dict[str, Any] = {"config": name, "l1_fraction": l1_fraction, "phases": {}, "boundaries": []}
        try:
            nodes.up()
            sets = self._sets(nodes)
            urls = list(nodes.urls.values())
            for phase in self.phases:
                self.net.set_rate("lake", phase.lake_mbit)
                self.net.set_rate("cluster", phase.cluster_mbit)
                begun = time.time()
                log(f"{name}: {phase.name}: {phase.warmup_s:g} s warm-up, then {phase.gets} GETs per client")
                run_async(drive(urls, sets[phase.name], self.args.clients, self.args.seed, seconds=phase.warmup_s))
                measured_at = time.time()
                link0, nodes0, cpu0 = self.net.counters(), self.counters(nodes), node_cpu(list(nodes.pids.values()))
                t0 = time.monotonic()
                served = run_async(drive(urls, sets[phase.name], self.args.clients, self.args.seed + 1,
                                         gets=phase.gets))
                completion = time.monotonic() - t0
                link1, nodes1, cpu1 = self.net.counters(), self.counters(nodes), node_cpu(list(nodes.pids.values()))
                report = self.sizing(nodes)
                delta = {n: {c: nodes1[n][c] - nodes0[n][c] for c in COUNTERS} for n in nodes1}
                got = {
                    "completion_s": rounded(completion),
                    "client_finish_s": {"min": rounded(min(served.finished)), "max": rounded(max(served.finished))},
                    "gets": served.gets, "client_bytes": served.bytes, "errors": served.errors,
                    "lake_bytes_tc": (link1 - link0).lake, "cluster_bytes_tc": (link1 - link0).cluster,
                    "lake_bytes_nodes": sum(d["lake_bytes"] for d in delta.values()),
                    "counters": delta,
                    "hit_ratio": _hit_ratios(delta),
                    "node_cpu_s_per_request": rounded(cpu_per_request(cpu1 - cpu0, served.gets), 6),
                    "split_at_end": {n: {"l1_fraction": rounded(r["l1_capacity_bytes"] / r["total_bytes"]),
                                         "target_l1_fraction": rounded(r["target_l1_bytes"] / r["total_bytes"]),
                                         "l1_miss_cost_s": r.get("l1_miss_cost_s"),
                                         "l2_miss_cost_s": r.get("l2_miss_cost_s"),
                                         "reason": r.get("reason"),
                                         "observed_hit_ratio": {t: (r.get("streams") or {}).get(t, {}).get(
                                             "observed_hit_ratio") for t in ("l1", "l2")}}
                                     for n, r in report.items()},
                    "lake_mbit": phase.lake_mbit, "cluster_mbit": phase.cluster_mbit,
                }
                out["phases"][phase.name] = got
                out["boundaries"].append({"phase": phase.name, "start": rounded(begun - started),
                                          "measured": rounded(measured_at - started),
                                          "end": rounded(time.time() - started)})
                if phase.shared and l1_fraction is None:
                    first = nodes.node_ids[0]
                    out["curve_report"] = {k: report[first].get(k) for k in (
                        "curves", "l1_capacity_bytes", "l2_capacity_bytes", "total_bytes", "target_l1_bytes",
                        "mode", "epochs", "reason", "l1_miss_cost_s", "l2_miss_cost_s")} | {"node": first}
                log(f"{name}: {phase.name}: {completion:.1f} s, lake {got['lake_bytes_tc'] / MiB:.0f} MiB (tc), "
                    f"L1 {[got['split_at_end'][n]['l1_fraction'] for n in nodes.node_ids]}")
            final = self.sizing(nodes)
            out["history"] = {n: [{"t": rounded(e["t"] - started), "l1_fraction": rounded(e["l1_bytes"] / r["total_bytes"]),
                                   "target_l1_fraction": rounded(e["target_l1_bytes"] / r["total_bytes"]),
                                   "reason": e.get("reason"),
                                   "l1_observed_hit_ratio": e.get("l1_observed_hit_ratio"),
                                   "l2_observed_hit_ratio": e.get("l2_observed_hit_ratio"),
                                   "l1_predicted_hit_ratio": e.get("l1_predicted_hit_ratio"),
                                   "l2_predicted_hit_ratio": e.get("l2_predicted_hit_ratio")}
                                  for e in r.get("history", []) if e["t"] >= started]
                              for n, r in final.items()}
        finally:
            nodes.down()
        out["seconds"] = rounded(time.time() - started)
        out["loadavg_1m_at_end"] = rounded(os.getloadavg()[0], 2)  # the machine is shared
        return out

    def overhead(self, phase: Phase, rate: float, l1_fraction: float, warmup_s: float) -> dict[str, Any]:
        """Phase ``phase``'s workload on fresh nodes with a fixed split (the same work whatever the
        sampler sees: adaptive sizing with nothing sampled would hold at 50/50) sampling at
        ``rate``: the nodes' CPU seconds per request over the measured GETs."""
        self.net.set_rate("lake", phase.lake_mbit)
        self.net.set_rate("cluster", phase.cluster_mbit)
        nodes = self.nodes(l1_fraction, sample_rate=rate)
        try:
            nodes.up()
            sets = self._sets(nodes)[phase.name]
            urls = list(nodes.urls.values())
            run_async(drive(urls, sets, self.args.clients, self.args.seed, seconds=warmup_s))
            before, cpu0 = self.counters(nodes), node_cpu(list(nodes.pids.values()))
            served = run_async(drive(urls, sets, self.args.clients, self.args.seed + 1, gets=phase.gets))
            cpu = node_cpu(list(nodes.pids.values())) - cpu0
            after = self.counters(nodes)
        finally:
            nodes.down()
        delta = {n: {c: after[n][c] - before[n][c] for c in COUNTERS} for n in after}
        return {"sample_rate": rate, "l1_fraction": l1_fraction, "gets": served.gets, "node_cpu_s": rounded(cpu, 4),
                "cpu_s_per_request": rounded(cpu_per_request(cpu, served.gets), 7),
                "peer_fetches": sum(d["peer_fetches"] for d in delta.values()),
                "lake_gets": sum(d["lake_gets"] for d in delta.values()), "hit_ratio": _hit_ratios(delta)}


def _hit_ratios(delta: Mapping[str, Mapping[str, int]]) -> dict[str, float | None]:
    hits = sum(d["hits"] for d in delta.values())
    misses = sum(d["misses"] for d in delta.values())
    peer = sum(d["peer_hits"] for d in delta.values())
    return {"node_hits_over_reads": rounded(hits / (hits + misses)) if hits + misses else None,
            "peer_hits_over_reads": rounded(peer / (hits + misses)) if hits + misses else None}


def micro(reps: int = 50_000, repeats: int = 3) -> dict[str, float]:
    """ns per block read of SizingProbe.reference (every block sampled, and none) and per
    ReuseHub.handle of one sample line, in this process (one worker's direct path): the least
    of ``repeats`` timings of ``reps`` calls each (the machine is shared)."""
    from cachetier.telemetry.reuse import ReuseHub, SizingProbe

    ids = [f"{random.Random(i).getrandbits(128):032x}" for i in range(4096)]
    lines = [f"r l1 {i * 2654435761 % (1 << 32)} {BLOCK} 1 sizing".encode() for i in range(4096)]

    def probe_ns(rate: float) -> float:
        probe = SizingProbe(None, rate, hub=ReuseHub(rate, 1 << 20))
        t0 = time.perf_counter_ns()
        for i in range(reps):
            probe.reference("l1", ids[i & 4095], BLOCK, "sizing", i & 1 == 0)
        return (time.perf_counter_ns() - t0) / reps

    def handle_ns() -> float:
        hub = ReuseHub(1.0, 1 << 20)
        t0 = time.perf_counter_ns()
        for i in range(reps):
            hub.handle(lines[i & 4095])
        return (time.perf_counter_ns() - t0) / reps

    return {"reference_sampled_ns": rounded(min(probe_ns(1.0) for _ in range(repeats)), 1),
            "reference_unsampled_ns": rounded(min(probe_ns(TINY_RATE) for _ in range(repeats)), 1),
            "hub_handle_ns": rounded(min(handle_ns() for _ in range(repeats)), 1),
            "distinct_blocks": 4096, "calls_per_timing": reps}


# -- figures ---------------------------------------------------------------------------------------


def plots(result: dict[str, Any], directory: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from harness.results import save_figure

    runs = result["runs"]
    adaptive = runs["adaptive"]
    written: list[Path] = []

    def boundaries(ax: Any) -> None:
        for b in adaptive["boundaries"]:
            ax.axvline(b["start"], color="#888", linewidth=0.8)
            ax.axvline(b["measured"], color="#bbb", linestyle=":", linewidth=0.8)
            ax.text(b["start"] + 1, 1.01, b["phase"], fontsize=7, va="bottom")

    fig, ax = plt.subplots(figsize=(9, 3.8))
    for node, entries in adaptive["history"].items():
        ax.plot([e["t"] for e in entries], [e["l1_fraction"] for e in entries], label=f"adaptive {node}")
    for name, run in runs.items():
        if run["l1_fraction"] is not None:
            ax.axhline(run["l1_fraction"], color="#ccc", linestyle="--", linewidth=0.8)
    boundaries(ax)
    ax.set_ylim(0, 1.08)
    ax.set_xlabel("seconds since the adaptive nodes started")
    ax.set_ylabel("L1 share of the node's total")
    ax.set_title("adaptive split per node (dashed: the fixed splits; dotted: measured part starts)", fontsize=9)
    ax.legend(fontsize=7)
    written.append(directory / "sizing_split.png")
    save_figure(fig, written[-1])

    fig, axes = plt.subplots(2, 1, figsize=(9, 5.6), sharex=True)
    for ax, tier in zip(axes, ("l1", "l2")):
        for node, entries in adaptive["history"].items():
            pts = [(e["t"], e[f"{tier}_observed_hit_ratio"]) for e in entries if e[f"{tier}_observed_hit_ratio"] is not None]
            ax.plot([t for t, _ in pts], [h for _, h in pts], linewidth=1, label=node)
        boundaries(ax)
        ax.set_ylim(0, 1.08)
        ax.set_ylabel(f"{tier.upper()} hit ratio")
        ax.legend(fontsize=7, loc="lower right")
    axes[0].set_title("adaptive: observed hit ratio of each stream per node, per epoch", fontsize=9)
    axes[-1].set_xlabel("seconds since the adaptive nodes started")
    written.append(directory / "sizing_hits.png")
    save_figure(fig, written[-1])

    table = result["summary"]
    phases = list(table)
    configs = list(runs)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    width = 0.8 / len(configs)
    for i, config in enumerate(configs):
        xs = [p + (i - (len(configs) - 1) / 2) * width for p in range(len(phases))]
        colour = "#222" if config == "adaptive" else f"C{i}"
        left.bar(xs, [table[p][config]["lake_bytes"] / MiB for p in phases], width, label=config, color=colour)
        right.bar(xs, [table[p][config]["completion_s"] for p in phases], width, label=config, color=colour)
    for ax, label in ((left, "lake MiB (tc, measured part)"), (right, "completion time of the measured part, s")):
        ax.set_xticks(range(len(phases)), phases, fontsize=8)
        ax.set_ylabel(label)
    left.legend(fontsize=7)
    written.append(directory / "sizing_phases.png")
    save_figure(fig, written[-1])

    curve = adaptive.get("curve_report")
    if curve and curve.get("curves"):
        from tools.cachecurve import draw

        written.append(directory / "sizing_curve.png")
        written[-1].parent.mkdir(parents=True, exist_ok=True)
        written[-1].write_bytes(draw(curve))
        log(f"plot written to {written[-1]}")
    return written


# -- main ------------------------------------------------------------------------------------------


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="benchmarks.sizing", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sets, short phases, adaptive and 50/50 only")
    p.add_argument("--total-mib", type=int, default=96, help="each node's cache total T, MiB")
    p.add_argument("--local-fraction", type=float, default=0.7, help="phase 1: each node's set, of T")
    p.add_argument("--shared-fraction", type=float, default=2.0, help="phase 2: the shared set, of T")
    p.add_argument("--congested-fraction", type=float, default=0.8, help="phase 3: each node's set, of T")
    p.add_argument("--clients", type=int, default=2, help="closed-loop readers per node")
    p.add_argument("--gets", type=int, nargs=3, default=[250, 80, 60], help="measured GETs per client per phase")
    p.add_argument("--warmup", type=float, nargs=3, default=[20.0, 40.0, 35.0], help="warm-up seconds per phase")
    p.add_argument("--fast-mbit", type=float, default=2000.0)
    p.add_argument("--slow-lake-mbit", type=float, default=80.0, help="phase 2's lake link")
    p.add_argument("--slow-cluster-mbit", type=float, default=120.0, help="phase 3's cluster link")
    p.add_argument("--interval", type=float, default=3.0, help="LAKEGATE_SIZING_INTERVAL")
    p.add_argument("--step", type=float, default=0.15, help="LAKEGATE_SIZING_STEP")
    p.add_argument("--half-life", type=float, default=6.0, help="LAKEGATE_SIZING_HALF_LIFE")
    p.add_argument("--sample-rate", type=float, default=1.0, help="LAKEGATE_SIZING_SAMPLE_RATE")
    p.add_argument("--overhead-pairs", type=int, default=2, help="sampled/unsampled run pairs for the overhead")
    p.add_argument("--overhead-warmup", type=float, default=10.0, help="warm-up seconds of each overhead run")
    p.add_argument("--configs", default=None,
                   help="comma-separated: adaptive and/or fixed L1 fractions (default: adaptive and the sweep; "
                        "quick: adaptive,0.5)")
    p.add_argument("--seed", type=int, default=13)
    p.add_argument("--plot-dir", type=Path, default=None)
    p.add_argument("--output", type=Path, default=None)
    p.add_argument("--ceph-dir", type=Path, default=Path("/tmp/lakegate-bench-sizing-ceph"))
    p.add_argument("--rgw-port", type=int, default=7696)
    p.add_argument("--mon-port", type=int, default=41196)
    args = p.parse_args(argv)
    args.configs_arg, args.configs = args.configs, [None, *SWEEP]
    if args.quick:
        args.total_mib, args.gets, args.warmup, args.configs = 32, [60, 30, 40], [8.0, 15.0, 15.0], [None, 0.5]
        args.overhead_pairs, args.overhead_warmup = 1, 5.0
    if args.configs_arg is not None:
        args.configs = [None if c.strip() == "adaptive" else float(c) for c in args.configs_arg.split(",")]
    root = Path(__file__).resolve().parents[1]
    if args.plot_dir is None:
        args.plot_dir = RESULTS_DIR if args.quick else root / "docs" / "benchmarks"
    if args.output is None:
        args.output = RESULTS_DIR / f"{NAME}_quick.json" if args.quick else root / "docs" / "benchmarks" / f"{NAME}.json"
    return args


def make_phases(args: argparse.Namespace) -> list[Phase]:
    fast = args.fast_mbit
    return [Phase("1_local", fast, fast, args.warmup[0], args.gets[0], False, "local"),
            Phase("2_shared_slow_lake", args.slow_lake_mbit, fast, args.warmup[1], args.gets[1], True, "shared"),
            Phase("3_congested_cluster", fast, args.slow_cluster_mbit, args.warmup[2], args.gets[2], False, "congested")]


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    started = time.monotonic()
    net = enter_benchmark_namespace("sizing", lake_mbit=args.fast_mbit, cluster_mbit=args.fast_mbit)
    if net is None:
        return 2
    total = args.total_mib * MiB
    plan = Plan.make(total, args.local_fraction, args.congested_fraction, args.shared_fraction)
    phases = make_phases(args)
    ceph = CephCluster(ceph_dir=args.ceph_dir, rgw_port=args.rgw_port, mon_port=args.mon_port,
                       ms_port_min=47600, ms_port_max=47699)
    result: dict[str, Any] = {"benchmark": NAME, "revision": git_revision(), "machine": machine_info(),
                              "quick": args.quick}
    runs: dict[str, dict[str, Any]] = {}
    overhead_runs: list[dict[str, Any]] = []
    try:
        lake = ceph.start()
        ceph.restart_rgw("tcp_nodelay=1")
        log(f"uploading {len(plan.keys)} objects of 1 MiB, lake link unshaped")
        run_async(upload(lake, plan.keys))
        net.shape_lake_port(args.rgw_port)
        bench = Bench(args, lake, net, plan, phases)
        for fraction in args.configs:
            runs[config_name(fraction)] = bench.run(fraction)
        for _ in range(args.overhead_pairs):
            for rate in (args.sample_rate, TINY_RATE):
                overhead_runs.append(bench.overhead(phases[0], rate, OVERHEAD_L1, args.overhead_warmup))
    finally:
        ceph.stop()
        net.stop()
    table = summary(runs)
    sampled = [r["cpu_s_per_request"] for r in overhead_runs if r["sample_rate"] == args.sample_rate]
    unsampled = [r["cpu_s_per_request"] for r in overhead_runs if r["sample_rate"] == TINY_RATE]
    measured_overhead = sampler_overhead(sampled, unsampled)
    timed = micro()
    per_request = sum(unsampled) / len(unsampled) if unsampled else float("nan")
    # a GET of one block is one probe call on the reading node's stream, and one more on the
    # owner's L2 stream when a peer serves it
    sampled_runs = [r for r in overhead_runs if r["sample_rate"] == args.sample_rate]
    calls = 1 + sum(r["peer_fetches"] for r in sampled_runs) / max(1, sum(r["gets"] for r in sampled_runs))
    micro_share = micro_overhead(timed, args.sample_rate, calls, per_request)
    micro_default = micro_overhead(timed, DEFAULT_RATE, calls, per_request)
    slack = {p: 0.01 * sum(run["phases"][p]["client_bytes"] for run in runs.values()) / len(runs) for p in table}
    result |= {
        "network": net.describe(),
        "settings": {**bench.env(None), "total_bytes": total, "cache_capacity_start": total // 2,
                     "fixed_splits": {config_name(f): fixed_split(total, f) for f in args.configs if f is not None}},
        "config": {"nodes": NODES, "clients_per_node": args.clients, "block_bytes": BLOCK, "object_bytes": BLOCK,
                   "local_set_blocks_per_node": plan.local_blocks, "shared_set_blocks": plan.shared_blocks,
                   "congested_set_blocks_per_node": plan.congested_blocks, "seed": args.seed,
                   "phases": [vars(p) for p in phases]},
        "summary": table,
        "runs": runs,
        "overhead": {
            "runs": overhead_runs, "phase": phases[0].name,
            "measured_fraction": rounded(measured_overhead, 4),
            "micro_ns": timed,
            "probe_calls_per_get": rounded(calls, 4),
            "request_cpu_s_unsampled": rounded(per_request, 7),
            "micro_fraction_of_request_cpu": rounded(micro_share, 5),
            "micro_fraction_at_default_rate": rounded(micro_default, 5),
            "default_rate": DEFAULT_RATE,
            "figure_of_record": "micro_fraction_of_request_cpu (at this run's sample rate, every block "
                                "sampled): the probe's in-process cost per call times the calls per GET over "
                                "the unsampled runs' node CPU per request. The measured_fraction (node CPU of "
                                "sampled over unsampled runs) is reported beside it, but a difference of a "
                                "few % is within run-to-run noise on this shared 2-core machine",
        },
        "targets": targets(table, micro_share, slack),
        "target_notes": {
            "lake_bytes": "within 5% of the best fixed split's, plus an absolute slack of 1% of the bytes the "
                          "clients read in the phase (phases whose sets fit read ~0 lake bytes in every config)",
            "completion_s": "within 5% of the fixed split with the least completion time (wall-clock on a "
                            "shared 2-core machine: a few % of noise)",
            "best_fixed": "among the fixed configs run (the sweep incl. 50/50; quick: 50/50 only)",
        },
        "notes": [
            "LAKEGATE_SIZING_SAMPLE_RATE=1: the data sets are a few hundred blocks; SHARDS at 1% would sample "
            "a handful of them (its error bound needs ~1e5 distinct blocks)",
            "every config runs the three phases back to back on the same fresh nodes (adaptive carries its "
            "split from phase to phase); lake bytes are the tc lake class's (both directions, headers "
            "included) and the nodes' lake_bytes counters",
        ],
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
