"""Counters of the cache, per tenant: plain numbers here; the gateway exports them at
/metrics (Prometheus) and /_lakegate/admin/stats (JSON)."""

from __future__ import annotations

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
}


class CacheStats:
    def __init__(self) -> None:
        self._by_tenant: defaultdict[str, defaultdict[str, int]] = defaultdict(lambda: defaultdict(int))

    def add(self, tenant: str, name: str, amount: int = 1) -> None:
        self._by_tenant[tenant][name] += amount

    def snapshot(self) -> dict[str, dict[str, int]]:
        return {tenant: dict(counts) for tenant, counts in self._by_tenant.items()}

    def total(self, name: str) -> int:
        return sum(counts.get(name, 0) for counts in self._by_tenant.values())
