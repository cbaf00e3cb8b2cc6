"""The weight allocation loop (issue 12, Pisces WA): every ``interval`` seconds the leader asks
every live node for its demand over the last interval, has ``policies.allocation.allocate``
set each node's local weights so that every tenant's cluster-wide share follows its global
weight wherever its demand lands, splits the cluster's lake bandwidth and each tenant's
cluster-wide hard limits over the nodes by their demand (``policies.allocation.split``), and
sends each node its ``WeightsUpdate``.

The policy's demand is a tenant's *dominant* demand on a node: the largest, over the
resources, of what it wanted per second over the cluster's mean capacity of that resource, so
a request-bound and a bandwidth-bound tenant compare on one scale and a node twice as big
(``capacity``) serves twice the demand. A node that does not report in time is left out of the
round and keeps its last weights; what it was last given of the lake bandwidth and of the
limits stays its own, so the split over the others never hands out more than the total.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import logging
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from cachetier.cluster import wire
from cachetier.cluster.follower import FairnessPeer, Follower
from cachetier.cluster.node import Cluster
from gateway.loops.leader import deliver, every, gather_reports, leads, next_epoch
from policies import allocation

log = logging.getLogger("lakegate.fairness")

Table = Mapping[str, Mapping[str, float]]  # node -> tenant -> figure
class Allocate(Protocol):
    """``policies.allocation.allocate``'s shape (tests pass their own)."""

    def __call__(self, global_weights: Mapping[str, float], demand: Table, current: Table,
                 capacity: Mapping[str, float], /, *, served: Mapping[str, float]) -> dict[str, dict[str, float]]: ...

Split = Callable[[float, Mapping[str, float]], dict[str, float]]
Limits = Mapping[str, Mapping[str, float]]  # tenant -> resource -> units/s, cluster-wide
# the policy's swaps per round and its step (of a tenant's weight): 12 swaps of 3 nodes x 8 tenants
# take ~50 ms of CPU, in a thread (the event loop keeps serving); measured on the benchmark's demand
# pattern, the model reaches an MMR of 0.98 in 9 rounds (4 swaps of 0.25: 16 rounds)
SWAPS_PER_ROUND = 8
STEP = 0.35


@dataclass(frozen=True)
class AllocationInputs:
    """What ``allocate`` is given, from one round's reports."""

    demand: dict[str, dict[str, float]]  # node -> tenant -> dominant demand (mean capacities)
    current: dict[str, dict[str, float]]  # node -> tenant -> local weight now
    capacity: dict[str, float]  # node -> capacity (mean capacities: 1.0 for an average node)
    served: dict[str, float]  # tenant -> what it was served over the cluster (dominant, mean capacities)


def wanted_rates(report: wire.DemandReport, resource: str) -> dict[str, float]:
    """Tenant -> what it wanted of ``resource`` per second on the reporting node."""
    window = report.window_s or 1.0
    return {t: wanted.get(resource, 0.0) / window for t, wanted in report.wanted.items()}


def allocation_inputs(reports: Mapping[str, wire.DemandReport]) -> AllocationInputs:
    """The policy's inputs: dominant demand, current weights and capacity of each reporting node."""
    mean = {r: statistics.fmean(caps) for r in wire.RESOURCES
            if (caps := [rep.capacity[r] for rep in reports.values() if rep.capacity.get(r, 0.0) > 0])}
    demand: dict[str, dict[str, float]] = {}
    for node, report in reports.items():
        rates = {r: wanted_rates(report, r) for r in mean}
        demand[node] = {t: max((rates[r][t] / mean[r] for r in mean), default=0.0) for t in report.wanted}
    capacity = {node: statistics.fmean(rep.capacity.get(r, 0.0) / mean[r] for r in mean) if mean else 1.0
                for node, rep in reports.items()}
    served: dict[str, float] = {}
    for report in reports.values():
        window = report.window_s or 1.0
        for tenant, amounts in report.served.items():
            got = max((amounts.get(r, 0.0) / window / mean[r] for r in mean), default=0.0)
            served[tenant] = served.get(tenant, 0.0) + got
    return AllocationInputs(demand, {n: dict(r.weights) for n, r in reports.items()}, capacity, served)


def split_total(total: float, demand: Mapping[str, float], held: float, split: Split) -> dict[str, float]:
    """``total`` less what silent nodes hold (``held``), split over the reporting nodes by ``demand``."""
    return split(max(0.0, total - held), demand) if demand else {}


def lake_shares(reports: Mapping[str, wire.DemandReport], bandwidth: float | None, held: Mapping[str, wire.WeightsUpdate],
                split: Split) -> dict[str, float | None]:
    """Node -> its share of the cluster's lake bandwidth (bytes/s; None: unlimited)."""
    if bandwidth is None:
        return dict.fromkeys(reports, None)
    demand = {node: sum(wanted_rates(rep, "lake_bytes").values()) for node, rep in reports.items()}
    kept = sum(u.lake_capacity or 0.0 for u in held.values())
    return dict(split_total(bandwidth, demand, kept, split))


def limit_shares(reports: Mapping[str, wire.DemandReport], limits: Limits, held: Mapping[str, wire.WeightsUpdate],
                 split: Split) -> dict[str, dict[str, dict[str, float]]]:
    """Node -> tenant -> resource -> its share of the tenant's cluster-wide hard limit."""
    shares: dict[str, dict[str, dict[str, float]]] = {node: {} for node in reports}
    for tenant, caps in limits.items():
        for resource, cap in caps.items():
            demand = {node: wanted_rates(rep, resource).get(tenant, 0.0) for node, rep in reports.items()}
            kept = sum(u.limits.get(tenant, {}).get(resource, 0.0) for u in held.values())
            for node, share in split_total(cap, demand, kept, split).items():
                shares[node].setdefault(tenant, {})[resource] = share
    return shares


def cluster_mmr(reports: Mapping[str, wire.DemandReport], global_weights: Mapping[str, float]) -> float | None:
    """Pisces' min-max ratio over the cluster in the reports' window: each tenant's service
    summed over the nodes (on its dominant resource, in the cluster's mean capacities; requests
    when no resource is limited) over its weight, min over max, among the tenants served less
    than they wanted (a tenant that got all it asked for is not short of anything). None: no one."""
    if not reports:
        return None
    mean = {r: statistics.fmean(caps) for r in wire.RESOURCES
            if (caps := [rep.capacity[r] for rep in reports.values() if rep.capacity.get(r, 0.0) > 0])}
    units = mean or {"requests": 1.0}
    served: dict[str, float] = {}
    short: dict[str, float] = {}
    for rep in reports.values():
        for tenant, amounts in rep.served.items():
            got = max(amounts.get(r, 0.0) / units[r] for r in units)
            served[tenant] = served.get(tenant, 0.0) + got
            wanted = rep.wanted.get(tenant, {})
            if any(wanted.get(r, 0.0) > amounts.get(r, 0.0) * 1.001 + 1e-9 for r in units):
                short[tenant] = 1.0
    tenants = {t: v for t, v in served.items() if t in short and t in global_weights}
    if len(tenants) < 2:
        return None
    return allocation.min_max_ratio(tenants, {t: global_weights[t] for t in tenants})


def weight_updates(
    reports: Mapping[str, wire.DemandReport], global_weights: Mapping[str, float], *, leader: str, epoch: int,
    allocate: Allocate, split: Split, lake_bandwidth: float | None = None, limits: Limits | None = None,
    held: Mapping[str, wire.WeightsUpdate] | None = None,
) -> dict[str, wire.WeightsUpdate]:
    """Node -> its update, for every reporting node. ``held``: the last updates of the live
    nodes that did not report (what they keep of the lake bandwidth and limits)."""
    inputs = allocation_inputs(reports)
    demand = {node: {t: d for t, d in tenants.items() if t in global_weights} for node, tenants in inputs.demand.items()}
    served = {t: v for t, v in inputs.served.items() if t in global_weights}
    weights = allocate(global_weights, demand, inputs.current, inputs.capacity, served=served)
    lake = lake_shares(reports, lake_bandwidth, held or {}, split)
    caps = limit_shares(reports, limits or {}, held or {}, split)
    mmr = cluster_mmr(reports, global_weights)
    table = {node: dict(weights.get(node, inputs.current[node])) for node in reports}
    return {node: wire.WeightsUpdate(leader, epoch, table[node], lake.get(node), caps[node],
                                     None if mmr is None else round(mmr, 4), table)
            for node in reports}


def _policy(name: str, **options: Any) -> Callable[..., Any]:
    """``policies.allocation``'s ``name`` with ``options``, imported when first needed (tests
    pass their own)."""
    return functools.partial(getattr(importlib.import_module("policies.allocation"), name), **options)


class AllocationRounds:
    """The leader's rounds, with what they remember: the epoch, and each node's last update."""

    def __init__(
        self, cluster: Cluster, local: FairnessPeer, global_weights: Callable[[], Mapping[str, float]], *,
        interval: float, allocate: Allocate | None = None, split: Split | None = None,
        lake_bandwidth: float | None = None, limits: Callable[[], Limits] = dict, clock: Callable[[], float] = time.time,
    ) -> None:
        self.cluster = cluster
        self.follower = Follower(cluster, local)
        self.global_weights, self.limits = global_weights, limits
        self.interval = interval
        self.allocate: Allocate = allocate or _policy("allocate", max_swaps=SWAPS_PER_ROUND, step=STEP)
        self.split: Split = split or _policy("split")
        self.lake_bandwidth = lake_bandwidth
        self.clock = clock
        self.epoch = 0
        self.sent: dict[str, wire.WeightsUpdate] = {}  # node -> its last update

    async def round(self) -> None:
        """One round, if this node leads."""
        if not leads(self.cluster):
            return
        timeout = self.interval / 2
        reports = await gather_reports(self.cluster, self.follower, self.interval, timeout)
        live = {m.id for m in self.cluster.membership.live()}
        held = {node: update for node, update in self.sent.items() if node in live and node not in reports}
        self.epoch = next_epoch(self.epoch, self.clock())
        updates = await asyncio.to_thread(functools.partial(
            weight_updates, reports, self.global_weights(), leader=self.cluster.me.id, epoch=self.epoch,
            allocate=self.allocate, split=self.split, lake_bandwidth=self.lake_bandwidth, limits=self.limits(),
            held=held))
        self.sent = {**{n: u for n, u in self.sent.items() if n in live}, **updates}
        await deliver(self.cluster, self.follower, updates, timeout)


async def allocation_loop(
    cluster: Cluster, local: FairnessPeer, global_weights: Callable[[], Mapping[str, float]], interval: float = 2.0, *,
    allocate: Allocate | None = None, split: Split | None = None, lake_bandwidth: float | None = None,
    limits: Callable[[], Limits] = dict, clock: Callable[[], float] = time.time,
) -> None:
    """Forever, every ``interval`` seconds: a round of weight allocation, on the leader only.
    ``global_weights`` and ``limits`` are asked each round (the tenants file may change);
    ``lake_bandwidth``: the cluster's lake link in bytes/s (None: unlimited)."""
    rounds = AllocationRounds(cluster, local, global_weights, interval=interval, allocate=allocate, split=split,
                              lake_bandwidth=lake_bandwidth, limits=limits, clock=clock)
    await every(interval, rounds.round, "weight allocation")
