"""Prometheus export of the data plane's counters (cachetier keeps plain numbers and answers typed
queries: ``CachedLake.snapshot``, ``Cluster.ring_report``)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from cachetier.cluster.node import CLUSTER_COUNTERS, Cluster
from cachetier.telemetry.counters import COUNTERS
from cachetier.telemetry.snapshots import CacheSnapshot
from cachetier.write.writeback import COUNTERS as WRITEBACK_COUNTERS

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


# per-tenant figures of /_lakegate/admin/tenants: (field, metric, kind, help)
TENANT_METRICS = (
    ("requests", "lakegate_tenant_requests", "counter", "requests admitted"),
    ("bytes_sent", "lakegate_tenant_bytes_sent", "counter", "bytes sent to clients and peers"),
    ("lake_bytes", "lakegate_tenant_lake_bytes", "counter", "bytes read from the lake for the tenant"),
    ("slowdowns", "lakegate_tenant_slowdowns", "counter", "requests refused with 503 SlowDown (queue bound)"),
    ("queue_length", "lakegate_tenant_queue_length", "gauge", "requests waiting for admission now"),
    ("queue_delay_p99_s", "lakegate_tenant_queue_delay_p99_seconds", "gauge", "admission delay, 99th percentile"),
    ("weight", "lakegate_tenant_weight", "gauge", "the tenant's weight (tenants file)"),
    ("local_weight", "lakegate_tenant_local_weight", "gauge", "the tenant's weight on this node (weight allocation)"),
    ("share", "lakegate_tenant_share", "gauge", "the tenant's share of what this node served, last seconds"),
    ("weighted_share", "lakegate_tenant_weighted_share", "gauge", "the share its weight entitles it to"),
    ("cache_bytes", "lakegate_tenant_cache_bytes", "gauge", "cache bytes the tenant holds (shared blocks split)"),
    ("cache_fair_bytes", "lakegate_tenant_cache_fair_bytes", "gauge", "its weighted share of the cache"),
)


class FairnessCollector(Collector):
    """Tenant fairness per tenant on this node; ``report`` answers it (``Node.tenants_report``)."""

    def __init__(self, report: Callable[[], Mapping[str, object]]) -> None:
        self.report = report

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
        report = self.report()
        tenants = report.get("tenants")
        rows = tenants if isinstance(tenants, dict) else {}
        yield from _labelled(TENANT_METRICS, "tenant", rows)
        delays = HistogramMetricFamily("lakegate_tenant_queue_delay_seconds",
                                       "how long admitted requests waited for their turn", labels=["tenant"])
        for tenant, row in rows.items():
            buckets = [(str(bound), count) for bound, count in row.get("queue_delay_buckets", [])]
            if buckets:
                delays.add_metric([tenant], buckets, sum_value=None)
        yield delays
        mmr = report.get("min_max_ratio")
        if isinstance(mmr, (int, float)):
            yield GaugeMetricFamily("lakegate_fairness_min_max_ratio",
                                    "min over max of the active tenants' share/weight on this node", value=mmr)
        cluster = report.get("cluster_min_max_ratio")
        if isinstance(cluster, (int, float)):
            yield GaugeMetricFamily("lakegate_fairness_cluster_min_max_ratio", "the same over the cluster, among "
                                    "tenants short of their demand (the leader's last measure)", value=cluster)


class SizingCollector(Collector):
    """The L1/L2 split and the curves' predictions (issue 13); ``report`` is the node's last
    sizing report (``gateway.loops.sizing``), None before the first."""

    def __init__(self, report: Callable[[], Mapping[str, object] | None]) -> None:
        self.report = report

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        report = self.report()
        if not report:
            return
        yield from _gauges(report, (
            ("lakegate_sizing_total_bytes", "total_bytes", "the bytes L1 and L2 share"),
            ("lakegate_sizing_target_l1_bytes", "target_l1_bytes", "the L1 size that minimises what misses cost"),
        ))
        epochs = report.get("epochs")
        if isinstance(epochs, int):
            yield CounterMetricFamily("lakegate_sizing_epochs", "sizing decisions taken", value=epochs)
        streams = report.get("streams")
        rows = streams if isinstance(streams, dict) else {}
        for name, field, help_text in (
            ("lakegate_sizing_miss_cost_seconds", "miss_cost_s", "what one miss of the tier costs (moving average)"),
            ("lakegate_sizing_predicted_hit_ratio", "predicted_hit_ratio", "the tier's hit ratio its curve "
             "predicts at its size"),
            ("lakegate_sizing_observed_hit_ratio", "observed_hit_ratio", "the hit ratio of the sampled reads "
             "in the last epoch"),
            ("lakegate_sizing_referenced_bytes_per_second", "bytes_per_s", "bytes of blocks read per second from "
             "the tier's stream (estimated)"),
            ("lakegate_sizing_sample_rate", "sample_rate", "SHARDS' sampling rate of the tier's stream"),
            ("lakegate_sizing_tracked_blocks", "tracked_blocks", "blocks the tier's estimator tracks"),
        ):
            family = GaugeMetricFamily(name, help_text, labels=["tier"])
            for tier, row in rows.items():
                value = row.get(field) if isinstance(row, dict) else None
                if isinstance(value, (int, float)):
                    family.add_metric([tier], float(value))
            yield family


class TelemetryCollector(Collector):
    """Host micrometrics and anomalies (issue 15, MicroMon); ``snapshot`` is
    ``NodeTelemetry.snapshot`` (this worker's last sample, the node's anomalies)."""

    def __init__(self, snapshot: Callable[[], Mapping[str, object]]) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        doc = self.snapshot()
        metrics = doc.get("metrics")
        for name, value in (metrics.items() if isinstance(metrics, dict) else ()):
            if isinstance(value, (int, float)):
                yield GaugeMetricFamily(f"lakegate_host_{name}", f"host micrometric {name} (last sample)", value=value)
        current = GaugeMetricFamily("lakegate_anomaly_severity", "the node's current anomalies: how far off (>= 1)",
                                    labels=["metric"])
        for item in doc.get("anomalies") or []:  # type: ignore[attr-defined]
            current.add_metric([str(item[0])], float(item[1]))
        yield current
        started = CounterMetricFamily("lakegate_anomalies", "anomalies begun on this worker's samples",
                                      labels=["metric"])
        for metric, count in (doc.get("anomalies_started") or {}).items():  # type: ignore[attr-defined]
            started.add_metric([str(metric)], float(count))
        yield started
        for field, help_text in (("report_bytes", "bytes of anomaly reports sent in heartbeats"),
                                 ("raw_bytes", "bytes the raw samples would have taken instead")):
            value = doc.get(field)
            if isinstance(value, int):
                yield CounterMetricFamily(f"lakegate_telemetry_{field}", help_text, value=value)


class WriteBackCollector(Collector):
    """The write-back journal (issue 14): dirty bytes, pending objects, lag per replica position,
    and the node's write-back counts (flushes, fallbacks, SlowDowns, copies); ``report`` is
    ``Node.replication_report``."""

    def __init__(self, report: Callable[[], Mapping[str, object] | None]) -> None:
        self.report = report

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        report = self.report()
        if not report:
            return
        yield from _gauges(report, (
            ("lakegate_writeback_dirty_bytes", "dirty_bytes", "bytes in this node's journal the lake does not have yet"),
            ("lakegate_writeback_pending_objects", "pending_objects", "writes in this node's journal the lake does "
             "not have yet"),
        ))
        thresholds = _mapping(report.get("thresholds"))
        soft, delta = thresholds.get("soft"), thresholds.get("delta")
        if isinstance(soft, int) and isinstance(delta, int):
            yield GaugeMetricFamily("lakegate_writeback_dirty_soft_bytes", "T: past it the journal's flushes "
                                    "speed up (LAKEGATE_WRITE_DIRTY_SOFT)", value=soft)
            yield GaugeMetricFamily("lakegate_writeback_dirty_hard_bytes", "T + delta: past it writes are "
                                    "answered SlowDown", value=soft + delta)
        yield GaugeMetricFamily("lakegate_writeback_lake_up", "1 while the flusher's last lake write succeeded",
                                value=1.0 if report.get("lake_up") else 0.0)
        lag = GaugeMetricFamily("lakegate_writeback_lag_seconds", "age of the oldest pending write this node holds, "
                                "by its place among the write's copies (0: the receiving node)", labels=["position"])
        for position, seconds in _mapping(report.get("lag_s")).items():
            if isinstance(seconds, (int, float)):
                lag.add_metric([str(position)], float(seconds))
        yield lag
        for name, value in _mapping(report.get("counters")).items():
            if isinstance(value, int):
                yield CounterMetricFamily(f"lakegate_writeback_{name}", WRITEBACK_COUNTERS.get(name, name), value=value)


# per lake endpoint (S3Lake.endpoint_stats): (field, metric, kind, help)
LAKE_METRICS = (
    ("requests", "lakegate_lake_requests", "counter", "requests (attempts) sent to the lake endpoint"),
    ("errors", "lakegate_lake_errors", "counter", "attempts the endpoint failed: connection errors, timeouts, "
     "5xx, bodies broken mid-way"),
    ("outstanding", "lakegate_lake_outstanding", "gauge", "attempts in flight now"),
)


class LakeCollector(Collector):
    """The S3 lake's endpoints; ``stats`` answers per endpoint URL (all workers' counts). Every
    endpoint has its series from the start, so a rate of errors is 0, not absent, on a healthy lake."""

    def __init__(self, stats: Callable[[], Mapping[str, Mapping[str, int]]]) -> None:
        self.stats = stats

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        yield from _labelled(LAKE_METRICS, "endpoint", self.stats())


class DiskCollector(Collector):
    """The file system of the cache directory (L1, L2 and the write-back journal): its size and
    what is left, so an alert sees the disk filling whatever the tiers' capacities say."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            usage = shutil.disk_usage(self.directory)
        except OSError:  # not there (yet): no figures rather than wrong ones
            return
        yield GaugeMetricFamily("lakegate_cache_disk_size_bytes", "size of the cache directory's file system",
                                value=usage.total)
        yield GaugeMetricFamily("lakegate_cache_disk_free_bytes", "bytes of that file system still free for "
                                "lakegate (not the root reserve)", value=usage.free)


def _labelled(table: tuple[tuple[str, str, str, str], ...], label: str,
              rows: Mapping[str, Mapping[str, object]]) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
    """A family per (field, name, kind, help) of ``table``, a sample per row (its key: ``label``)."""
    for field, name, kind, help_text in table:
        family_type = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
        family = family_type(name, help_text, labels=[label])
        for key, row in rows.items():
            family.add_metric([key], float(row.get(field, 0)))  # type: ignore[arg-type]
        yield family


def _mapping(value: object) -> dict[str, object]:
    return value if isinstance(value, dict) else {}


def _gauges(report: Mapping[str, object], rows: tuple[tuple[str, str, str], ...]) -> Iterator[GaugeMetricFamily]:
    """A gauge per (name, field, help) whose field in ``report`` is a number."""
    for name, field, help_text in rows:
        value = report.get(field)
        if isinstance(value, (int, float)):
            yield GaugeMetricFamily(name, help_text, value=value)
