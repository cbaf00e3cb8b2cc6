"""Typed answers of the data plane's query methods (``CachedLake.snapshot``, ``CachedLake.locate``,
``Cluster.ring_report``): what the admin endpoints and ``/metrics`` read, so the gateway never
reaches into the read path's or the membership's internals. Plain values only."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from cachetier.blocks.store import BlockStore


@dataclasses.dataclass(frozen=True)
class TierStats:
    """One cache tier's (L1's or L2's) fill and counters."""

    capacity_bytes: int
    used_bytes: int
    hits: int
    misses: int
    evictions: int
    corrupt: int

    @classmethod
    def of(cls, store: BlockStore) -> TierStats:
        return cls(store.capacity, store.used_bytes(), store.hits, store.misses, store.evictions, store.corrupt)


@dataclasses.dataclass(frozen=True)
class CacheSnapshot:
    per_tenant: Mapping[str, Mapping[str, int]]
    tiers: Mapping[str, TierStats]  # "l1", and "l2" on a node in a cluster
    metadata_entries: int
    background_tasks: int
    write_buffered_bytes: int = 0  # bodies held for cache-on-write now
    write_budget_bytes: int = 0  # ... and the node's bound on them


@dataclasses.dataclass(frozen=True)
class BlockLocation:
    """Where one block of an object lives: its L2 owners (any version), and whether this node's
    tiers hold it in version ``etag`` (None: no version known here, ``held`` is empty)."""

    owners: tuple[str, ...]
    etag: str | None
    held: Mapping[str, bool]


@dataclasses.dataclass(frozen=True)
class RingReport:
    live_members: int  # this node included
    ring_changes: int  # rings planned since start
    node_id: str
    ring_version: str
    partitions_owned: int  # partitions this node is primary for
