"""Prometheus export of the data plane's counters (cachetier keeps plain numbers and answers typed
queries: ``CachedLake.snapshot``, ``Cluster.ring_report``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from cachetier.cluster.node import CLUSTER_COUNTERS, Cluster
from cachetier.telemetry.counters import COUNTERS
from cachetier.telemetry.snapshots import CacheSnapshot

# What a tier's hits and misses count: each is one block read that asked the tier, so hits +
# misses is every such read (a read the store failed on is a miss; see lakegate_cache_*_errors).
TIER_READS = {
    "l1": ("block reads served from L1",
           "block reads that missed L1 (every block read through the cache asks L1 first)"),
    "l2": ("block reads served from L2 by this node as the block's owner, for its clients or for peers",
           "block reads that missed L1 and then missed this owner's L2"),
}


class CacheCollector(Collector):
    """The node's cache counters: ``snapshot`` answers them (all workers' counts; None: the cache is off)."""

    def __init__(self, snapshot: Callable[[], CacheSnapshot | None]) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        cache = self.snapshot()
        per_tenant = cache.per_tenant if cache is not None else {}
        for name, help_text in COUNTERS.items():
            family = CounterMetricFamily(f"lakegate_cache_{name}", help_text, labels=["tenant"])
            for tenant, counts in per_tenant.items():
                family.add_metric([tenant], counts.get(name, 0))
            yield family
        if cache is not None:
            yield GaugeMetricFamily("lakegate_write_buffered_bytes", "PUT bodies held in memory for cache-on-write",
                                    value=cache.write_buffered_bytes)
            yield GaugeMetricFamily("lakegate_write_buffer_budget_bytes", "the node's bound on them "
                                    "(LAKEGATE_CACHE_ON_WRITE_BUDGET)", value=cache.write_budget_bytes)
        tiers = cache.tiers if cache is not None else {}
        for tier, stats in tiers.items():
            name = tier.upper()
            yield GaugeMetricFamily(f"lakegate_{tier}_capacity_bytes", f"{name} capacity", value=stats.capacity_bytes)
            yield GaugeMetricFamily(f"lakegate_{tier}_used_bytes", f"{name} block bytes stored", value=stats.used_bytes)
            hits_help, misses_help = TIER_READS[tier]
            yield CounterMetricFamily(f"lakegate_{tier}_hits", hits_help, value=stats.hits)
            yield CounterMetricFamily(f"lakegate_{tier}_misses", misses_help, value=stats.misses)
            yield CounterMetricFamily(f"lakegate_{tier}_evictions", f"blocks evicted from {name}", value=stats.evictions)
            yield CounterMetricFamily(f"lakegate_{tier}_corrupt", f"corrupt {name} blocks dropped", value=stats.corrupt)


class ClusterCollector(Collector):
    """The node's cluster view; ``counters`` answers its counters (all workers' counts)."""

    def __init__(self, cluster: Cluster, counters: Callable[[], Mapping[str, int]]) -> None:
        self.cluster = cluster
        self.counters = counters

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        report = self.cluster.ring_report()
        counters = self.counters()
        for name, help_text in CLUSTER_COUNTERS.items():
            yield CounterMetricFamily(f"lakegate_cluster_{name}", help_text, value=counters.get(name, 0))
        yield GaugeMetricFamily("lakegate_cluster_members_live", "live members, this node included",
                                value=report.live_members)
        yield CounterMetricFamily("lakegate_cluster_ring_changes", "rings planned since start",
                                  value=report.ring_changes)
        info = GaugeMetricFamily("lakegate_cluster_ring_info", "the current ring's version (1 per node)",
                                 labels=["node", "version"])
        info.add_metric([report.node_id, report.ring_version], 1)
        yield info
        yield GaugeMetricFamily("lakegate_cluster_partitions_owned", "partitions this node is primary for",
                                value=report.partitions_owned)
