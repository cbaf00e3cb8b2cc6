"""The partition placement loop (issue 12, Pisces PP): every ``interval`` seconds (minutes, by
default) the leader asks every live node for its per-partition per-tenant demand, and
``policies.placement.rebalance`` moves at most ``max_moves`` partitions of the current ring so
that no node is asked for more than its weights let it serve; every live node, the leader
too, then applies the new table (``PartitionsUpdate``) to its ring.

Demand and what a node can serve are in bytes per second of blocks sent (``client_bytes``):
a partition's demand is what every node wanted of its blocks, added up; a node serves each
tenant ``capacity * local weight / sum of its local weights``.

A moved partition's L2 blocks are not handed over: its new owner fetches each again from the
lake on its first miss (``ReadPath.serve_block``), and the old owner's copies age out of its
L2 as anything unread does. Moves are few per round and counted on every node
(``partitions_moved``); the lake bytes they cost show in the lake fills of the new owners.
The table holds while the live set stays the one it was planned on (``base_version``); a
join or a leave drops it on every node, back to the consistent-hash plan, until the leader's
next round.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import logging
import time
from collections.abc import Callable, Mapping

from cachetier.cluster import wire
from cachetier.cluster.follower import FairnessPeer, Follower
from cachetier.cluster.node import Cluster
from gateway.loops.leader import deliver, every, gather_reports, leads, next_epoch

log = logging.getLogger("lakegate.fairness")

Table = tuple[tuple[str, ...], ...]  # partition -> owner ids, primary first
Rebalance = Callable[..., tuple[Table, tuple[object, ...]]]  # (table, demand, servable, *, max_moves)
RESOURCE = "client_bytes"


def partition_demand(reports: Mapping[str, wire.DemandReport]) -> dict[int, dict[str, float]]:
    """Partition -> tenant -> bytes/s wanted of its blocks, over every reporting node."""
    demand: dict[int, dict[str, float]] = {}
    for report in reports.values():
        window = report.window_s or 1.0
        for partition, tenants in report.partitions.items():
            row = demand.setdefault(partition, {})
            for tenant, amount in tenants.items():
                row[tenant] = row.get(tenant, 0.0) + amount / window
    return demand


def servable(reports: Mapping[str, wire.DemandReport], resource: str = RESOURCE) -> dict[str, dict[str, float]]:
    """Node -> tenant -> what the node serves it per second: its capacity by the tenant's local weight."""
    serves: dict[str, dict[str, float]] = {}
    for node, report in reports.items():
        total = sum(report.weights.values())
        capacity = report.capacity.get(resource, 0.0)
        serves[node] = {t: capacity * w / total for t, w in report.weights.items()} if total > 0 else {}
    return serves


def _rebalance() -> Rebalance:
    """``policies.placement.rebalance``, looked up when first needed (tests pass their own)."""
    return getattr(importlib.import_module("policies.placement"), "rebalance")  # type: ignore[no-any-return]


class PlacementRounds:
    """The leader's placement rounds, with their epoch."""

    def __init__(
        self, cluster: Cluster, local: FairnessPeer, *, interval: float, max_moves: int = 8,
        rebalance: Rebalance | None = None, clock: Callable[[], float] = time.time,
    ) -> None:
        self.cluster = cluster
        self.follower = Follower(cluster, local)
        self.interval = interval
        self.max_moves = max_moves
        self.rebalance = rebalance or _rebalance()
        self.clock = clock
        self.epoch = 0

    async def round(self) -> None:
        """One round, if this node leads: a new table, sent when it moves something or some
        node's ring is not the leader's."""
        if not leads(self.cluster):
            return
        timeout = min(self.interval / 2, 5.0)
        reports = await gather_reports(self.cluster, self.follower, self.interval, timeout)
        membership = self.cluster.membership  # read after the reports: the table fits the ring of now
        ring, base = membership.ring, membership.planned.version
        table, moves = await asyncio.to_thread(functools.partial(  # ~0.25 s of CPU for 1024 partitions
            self.rebalance, ring.table, partition_demand(reports), servable(reports), max_moves=self.max_moves))
        if not moves and all(r.ring_version == ring.version for r in reports.values()):
            return
        self.epoch = next_epoch(self.epoch, self.clock())
        update = wire.PartitionsUpdate(self.cluster.me.id, self.epoch, base, tuple(tuple(o) for o in table))
        log.info("placement: %d partitions moved on ring %s", len(moves), base)
        await deliver(self.cluster, self.follower, {m.id: update for m in membership.live()}, timeout)


async def placement_loop(
    cluster: Cluster, local: FairnessPeer, interval: float = 120.0, max_moves: int = 8, *,
    rebalance: Rebalance | None = None, clock: Callable[[], float] = time.time,
) -> None:
    """Forever, every ``interval`` seconds: a round of partition placement, on the leader only."""
    rounds = PlacementRounds(cluster, local, interval=interval, max_moves=max_moves, rebalance=rebalance, clock=clock)
    await every(interval, rounds.round, "partition placement")
