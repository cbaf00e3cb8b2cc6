"""Counters of the cache, per tenant: plain numbers here; the gateway exports them at
/metrics (Prometheus) and /_lakegate/admin/stats (JSON)."""

from __future__ import annotations

import threading
from collections import defaultdict

# name -> help text; the gateway's exporter publishes each as lakegate_cache_<name>_total
COUNTERS = {
    "hits": "block reads served from L1",
    "l2_hits": "block reads served from this node's L2",
    "misses": "block reads not served locally (fetched from a peer or the lake)",
    "peer_fetches": "blocks fetched from their L2 owner on another node",
    "peer_bytes": "bytes of blocks fetched from peers",
    "peer_hits": "blocks served to peers from this node's stores",
    "coalesced": "block reads that joined a fetch already in flight (single flight)",
    "prefetches": "blocks fetched ahead for sequential readers",
    "lake_gets": "ranged GETs sent to the lake for blocks",
    "lake_bytes": "bytes read from the lake for blocks",
    "bytes_from_l1": "bytes served to clients from L1",
    "bytes_from_l2": "bytes served to clients from this node's L2",
    "bytes_from_lake": "bytes served to clients that came from the lake or a peer",
    "bypass": "GETs that skipped the cache (no-cache, too large)",
    "bytes_bypassed": "bytes served on GETs that skipped the cache",
    "meta_hits": "HEAD/metadata lookups answered from the metadata cache",
    "meta_misses": "metadata lookups that went to the lake",
    "write_blocks": "blocks cached by write-through",
    "write_skipped": "PUTs written through without caching their blocks: the node's cache-on-write memory budget was full",
    "l1_errors": "L1 reads, stores and deletes that failed (disk errors): reads served from the next source",
    "l2_errors": "L2 reads, stores and deletes that failed (disk errors): reads served from the next source",
}


class CacheStats:
    """Per-tenant counts, safe to add to from any thread: the event loop counts reads, and
    worker threads (stores of blocks, write-through) count too, while /metrics takes
    snapshots. One lock guards them: an addition is a few hundred nanoseconds at most."""

    def __init__(self) -> None:
        self._by_tenant: defaultdict[str, defaultdict[str, int]] = defaultdict(lambda: defaultdict(int))
        self._lock = threading.Lock()

    def add(self, tenant: str, name: str, amount: int = 1) -> None:
        with self._lock:  # `+=` on a dict entry is a read and a write: two threads could lose one
            self._by_tenant[tenant][name] += amount

    def snapshot(self) -> dict[str, dict[str, int]]:
        with self._lock:  # a tenant or name added meanwhile would break the iteration
            return {tenant: dict(counts) for tenant, counts in self._by_tenant.items()}

    def total(self, name: str) -> int:
        with self._lock:
            return sum(counts.get(name, 0) for counts in self._by_tenant.values())
