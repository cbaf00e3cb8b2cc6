"""This node's side of the cluster's fairness loops (Pisces WA and PP): its demand reports, the
leader's updates applied, the per-partition demand placement needs, and which worker of the
node runs the leader's loops.

- ``report``: the node's demand over its last windows (``gateway.admission``: this worker's
  and the other workers' last published), its capacity per resource (0: unlimited), local
  weights, the demand on its busiest partitions, and its ring's version.
- ``apply_weights``: the leader's weights, lake share and caps for this node (``NodeFairness.
  apply``, which shares them with the node's other workers).
- ``apply_partitions``: the ring already uses the table in this worker (``Follower``); the
  update is written to ``partitions.json`` in the board's folder, and every other worker applies
  it to its own ring within a second (``tick``), as the leader's weights.
- Partition demand: the bytes this node serves to peers as the owner of their blocks (the L2
  work placement moves), per partition and tenant, counted where the peer API sends them.
- The loops: every worker of a node is the same member, so each would take itself for the
  leader. One worker per node runs them, the one holding an exclusive ``flock`` on
  ``loops.lock`` in the board's folder; when it dies, the kernel drops its lock and another
  worker takes it within a second (``loop_lock``). One worker alone needs no lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import logging
import math
import os
from collections import deque
from collections.abc import Awaitable, Callable, Sequence, Mapping
from pathlib import Path

from cachetier.cluster import wire
from cachetier.cluster.node import Cluster
from cachetier.cluster.ring import partition_of
from gateway.admission import NodeFairness, NodeState, wants
from gateway.workerstats import SharedDoc

log = logging.getLogger("lakegate.fairness")

_PARTITIONS_FILE = "partitions.json"
_LOCK_FILE = "loops.lock"
_WINDOWS = 5  # seconds of partition demand a report covers (as the admission windows)


class PartitionDemand:
    """Bytes served to peers per partition and tenant, in one-second windows (the last few kept)."""

    def __init__(self) -> None:
        self.current: dict[int, dict[str, float]] = {}
        self.windows: deque[dict[int, dict[str, float]]] = deque(maxlen=_WINDOWS)

    def add(self, partition: int, tenant: str, amount: float) -> None:
        row = self.current.setdefault(partition, {})
        row[tenant] = row.get(tenant, 0.0) + amount

    def roll(self) -> None:
        self.windows.append(self.current)
        self.current = {}

    def recent(self) -> dict[int, dict[str, float]]:
        total: dict[int, dict[str, float]] = {}
        for window in (*self.windows, self.current):
            _add(total, window)
        return total


def _add(total: dict[int, dict[str, float]], more: Mapping[int, Mapping[str, float]]) -> None:
    for partition, row in more.items():
        mine = total.setdefault(partition, {})
        for tenant, amount in row.items():
            mine[tenant] = mine.get(tenant, 0.0) + amount


class FairnessMember:
    """A ``FairnessPeer`` (cachetier.cluster.follower) over this worker's ``NodeFairness``."""

    def __init__(
        self, fairness: NodeFairness, cluster: Cluster,
        others: Callable[[], Sequence[Mapping[str, object]]] = list, directory: Path | None = None,
    ) -> None:
        self.fairness = fairness
        self.cluster = cluster
        self.others = others  # the other workers' published fairness docs
        self._shared = SharedDoc(directory, _PARTITIONS_FILE) if directory is not None and fairness.workers > 1 else None
        self.partitions = PartitionDemand()
        self._sequence = itertools.count(1)

    # ---- FairnessPeer ---------------------------------------------------------------------

    async def report(self, request: wire.ReportsRequest) -> wire.DemandReport:
        others = self.others()
        # the last round's worth of windows: a swap is judged by service at the weights it acts on
        window = max(1, min(len(self.fairness.recent), round(request.window_s)))
        recent = self.fairness.node_window(others, window)
        partitions = self.partitions.recent()
        for doc in others:
            _add(partitions, _partition_doc(doc.get("partitions")))
        busiest = dict(sorted(partitions.items(), key=lambda item: -sum(item[1].values()))[:wire.MAX_PARTITIONS])
        node_capacity = self.fairness.capacity()
        capacity = {r: (v if math.isfinite(v) else 0.0) for r, v in node_capacity.items()}
        wanted = {t: wants(recent.served.get(t, {}), row, node_capacity, window) for t, row in recent.wanted.items()}
        return wire.DemandReport(
            node=self.cluster.me.id, sequence=next(self._sequence), window_s=float(window),
            served=recent.served, wanted=wanted, capacity=capacity,
            weights=dict(self.fairness.state.weights), partitions=busiest,
            ring_version=self.cluster.membership.ring.version,
        )

    async def apply_weights(self, update: wire.WeightsUpdate, sender: str) -> None:
        limits = {t: dict(caps) for t, caps in update.limits.items()}
        nodes = {n: dict(w) for n, w in update.nodes.items()}
        self.fairness.apply(NodeState(dict(update.weights), update.lake_capacity, limits, update.epoch, update.leader,
                                      update.cluster_mmr, nodes))

    async def apply_partitions(self, update: wire.PartitionsUpdate, sender: str) -> None:
        if self._shared is not None:
            self._shared.write({"leader": update.leader, "epoch": update.epoch, "base_version": update.base_version,
                                "table": [list(owners) for owners in update.table]})

    # ---- this worker ------------------------------------------------------------------------

    def served_to_peer(self, bucket: str, key: str, index: int, tenant: str, amount: int) -> None:
        """``amount`` bytes of block ``index`` of ``bucket/key`` sent to a peer for ``tenant``."""
        ring = self.cluster.membership.ring
        self.partitions.add(partition_of(bucket, key, index, ring.partitions), tenant, amount)

    def tick(self) -> None:
        """Every second: roll the partition window; pick up a table another worker received."""
        self.partitions.roll()
        doc = self._shared.changed() if self._shared is not None else None
        if doc is None:
            return
        try:
            update = wire.PartitionsUpdate(str(doc["leader"]), int(doc["epoch"]), str(doc["base_version"]),
                                           tuple(tuple(str(o) for o in owners) for owners in doc["table"]))
        except (ValueError, KeyError, TypeError):
            return
        if self.cluster.membership.ring.table != update.table:
            self.cluster.apply_table(update)

    def published(self) -> dict[str, object]:
        """For the board: this worker's partition demand over its recent windows."""
        return {str(p): row for p, row in self.partitions.recent().items()}


def _partition_doc(doc: object) -> dict[int, dict[str, float]]:
    if not isinstance(doc, dict):
        return {}
    found: dict[int, dict[str, float]] = {}
    with contextlib.suppress(AttributeError, TypeError, ValueError):
        for partition, row in doc.items():
            found[int(partition)] = {str(t): float(v) for t, v in row.items()}
    return found


async def loop_lock(directory: Path | None, then: Callable[[], Awaitable[None]], retry: float = 1.0) -> None:
    """Run ``then`` (the leader's loops) once this worker holds the node's loop lock (at once
    without ``directory``: a node of one worker); the lock is the kernel's, so it goes with the
    worker that held it, however it ends."""
    if directory is None:
        await then()
        return
    fd = os.open(directory / _LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await asyncio.sleep(retry)
        log.info("this worker (pid %d) runs the node's fairness loops", os.getpid())
        await then()
    finally:
        os.close(fd)
