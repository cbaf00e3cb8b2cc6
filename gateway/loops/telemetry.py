"""The telemetry loop (issue 15, MicroMon): every second this worker samples the host's
micrometrics (``cachetier.telemetry.host``: CPU, iowait, run queue, the cache disk's busy time
and latency, page cache and dirty bytes, network drops and retransmits, RSS, this worker's event
loop lag), ``policies.anomaly.observe`` turns them into the anomalies current against fixed limits
and the node's own moving baseline, and heartbeats carry those compact reports instead of the raw
samples (``cachetier.cluster.wire.AnomalyReport``).

A node of several workers reports as one: every worker samples (the host's figures are the
same for all; loop lag and RSS are each worker's own) and publishes its anomalies with its
counts (``gateway.workerstats``); a worker's heartbeat carries the node's reports: its own and
the other workers' last published, the most severe per metric. So a peer sees the same node
whichever worker's heartbeat reached it.

Bytes disseminated are counted per heartbeat sent: the reports as sent, and the raw sample as
it would have been (``report_bytes`` and ``raw_bytes`` here, lakegate_telemetry_* at /metrics).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence

from cachetier.cluster import wire
from cachetier.telemetry.host import HostSample, LoopLag, TelemetrySource
from policies import anomaly

log = logging.getLogger("lakegate.telemetry")

INTERVAL = 1.0


class NodeTelemetry:
    """This worker's micrometrics and anomalies (``tick``), and the node's reports (``reports``)."""

    def __init__(self, source: TelemetrySource, *, thresholds: anomaly.Thresholds = anomaly.DEFAULT_THRESHOLDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.source = source
        self.thresholds = thresholds
        self.clock = clock
        self.baselines = anomaly.EMPTY
        self.sample: HostSample | None = None
        self.current: tuple[anomaly.Anomaly, ...] = ()
        self.started: dict[str, int] = {}  # metric -> anomalies begun (a counter)
        self.report_bytes = 0  # sent in heartbeats: the reports
        self.raw_bytes = 0  # what the raw samples would have been
        self._others: Callable[[], Sequence[Mapping[str, object]]] = lambda: ()

    def tick(self, loop_lag: float | None = None) -> None:
        """One sample (blocking: psutil and /proc reads; call from a thread)."""
        sample = self.source.sample()
        if loop_lag is not None:
            sample = sample.with_metrics({"loop_lag_s": loop_lag})
        before = {a.metric for a in self.current}
        self.baselines, self.current = anomaly.observe(self.baselines, sample.metrics, self.clock(), self.thresholds)
        for report in self.current:
            if report.metric not in before:
                self.started[report.metric] = self.started.get(report.metric, 0) + 1
        self.sample = sample

    def share_with(self, others: Callable[[], Sequence[Mapping[str, object]]]) -> None:
        """Where the node's other workers' published reports are read (their ``published()``)."""
        self._others = others

    def own_reports(self) -> tuple[wire.AnomalyReport, ...]:
        now = self.clock()
        return tuple(wire.AnomalyReport(a.metric, a.severity, max(0.0, now - a.since)) for a in self.current)

    def reports(self) -> tuple[wire.AnomalyReport, ...]:
        """The node's current anomalies: this worker's and the others' published, the most
        severe per metric, most severe first (at most ``wire.MAX_ANOMALIES``)."""
        worst: dict[str, wire.AnomalyReport] = {}
        for report in [*self.own_reports(), *_published(self._others())]:
            known = worst.get(report.metric)
            if known is None or report.severity > known.severity:
                worst[report.metric] = report
        ranked = sorted(worst.values(), key=lambda r: (-r.severity, r.metric))
        return tuple(ranked[: wire.MAX_ANOMALIES])

    def sent(self, reports: Sequence[wire.AnomalyReport], peers: int) -> None:
        """Count one heartbeat round's bytes disseminated: ``reports`` to ``peers`` peers."""
        self.report_bytes += peers * len(json.dumps(wire.anomalies_json(reports), separators=(",", ":")))
        if self.sample is not None:
            raw = {name: round(value, 6) for name, value in self.sample.metrics.items()}
            self.raw_bytes += peers * len(json.dumps(raw, separators=(",", ":")))

    def published(self) -> dict[str, object]:
        """What the node's other workers read of this one (the board)."""
        return {"anomalies": [r.to_list() for r in self.own_reports()]}

    def snapshot(self) -> dict[str, object]:
        """For /metrics and the admin endpoint: the last sample, the anomalies, the counts."""
        return {
            "metrics": dict(self.sample.metrics) if self.sample is not None else {},
            "anomalies": [r.to_list() for r in self.reports()],
            "anomalies_started": dict(self.started),
            "report_bytes": self.report_bytes,
            "raw_bytes": self.raw_bytes,
        }


class PeerScores:
    """Peers' anomaly scores relative to the cluster (``policies.anomaly.relative_scores``):
    each live peer's reports against every live node's, this node's own included, computed
    at most once per ``every`` seconds (scoring runs on each request's choice)."""

    def __init__(self, peers: Callable[[], Mapping[str, Sequence[wire.AnomalyReport]]],
                 own: Callable[[], Sequence[wire.AnomalyReport]], *, every: float = 0.5,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.peers = peers
        self.own = own
        self.every = every
        self.clock = clock
        self._at = -math.inf
        self._scores: dict[str, float] = {}

    def __call__(self, node: str) -> float:
        now = self.clock()
        if now - self._at >= self.every:
            rows = {name: [(r.metric, r.severity) for r in reports] for name, reports in self.peers().items()}
            rows["\x00self"] = [(r.metric, r.severity) for r in self.own()]
            self._scores, self._at = anomaly.relative_scores(rows), now
        return self._scores.get(node, 0.0)


def _published(docs: Sequence[Mapping[str, object]]) -> list[wire.AnomalyReport]:
    reports = []
    for doc in docs:
        items = doc.get("anomalies")
        if not isinstance(items, list):
            continue
        for item in items:
            if (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)
                    and all(isinstance(x, (int, float)) for x in item[1:])):
                reports.append(wire.AnomalyReport(item[0], float(item[1]), float(item[2])))
    return reports


async def telemetry_loop(telemetry: NodeTelemetry, interval: float = INTERVAL) -> None:
    """Forever: the event loop's lag measured beside, one sample a second (in a thread)."""
    lag = LoopLag(min(0.1, interval / 4))
    lag_task = asyncio.create_task(lag.run())
    try:
        while True:
            await asyncio.sleep(interval)
            try:
                await asyncio.to_thread(telemetry.tick, lag.take())
            except Exception:  # noqa: BLE001 - the loop must outlive one bad sample
                log.exception("telemetry sample failed")
    finally:
        lag_task.cancel()
