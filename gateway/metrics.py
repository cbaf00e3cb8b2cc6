"""Prometheus export of the data plane's counters (cachetier keeps plain numbers)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from cachetier.blockstore import BlockStore
from cachetier.cachestats import COUNTERS, CacheStats


class CacheCollector(Collector):
    def __init__(self, stats: CacheStats, store: BlockStore | None) -> None:
        self.stats = stats
        self.store = store

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        snapshot = self.stats.snapshot()
        for name, help_text in COUNTERS.items():
            family = CounterMetricFamily(f"lakegate_cache_{name}", help_text, labels=["tenant"])
            for tenant, counts in snapshot.items():
                family.add_metric([tenant], counts.get(name, 0))
            yield family
        if self.store is None:
            return
        yield GaugeMetricFamily("lakegate_l1_capacity_bytes", "L1 capacity", value=self.store.capacity)
        yield GaugeMetricFamily("lakegate_l1_used_bytes", "L1 block bytes stored", value=self.store.used_bytes())
        yield CounterMetricFamily("lakegate_l1_evictions", "blocks evicted from L1", value=self.store.evictions)
        yield CounterMetricFamily("lakegate_l1_corrupt", "corrupt L1 blocks dropped", value=self.store.corrupt)
