"""The sizing loop (issue 13, D3N's cache management): every epoch (LAKEGATE_SIZING_INTERVAL,
30 s) the node's split of its SSD between L1 and L2 moves towards the one that minimises what
misses cost, ``policies.sizing`` deciding from the tiers' miss-ratio curves and miss costs
(``cachetier.telemetry.reuse``: the hub's SHARDS estimators and timed fills).

One loop per node, whatever the number of workers: it runs beside the hub, in the supervisor
with several workers (resizing the tiers' space managers, which every worker's store asks), in
the node's one process otherwise (resizing its stores). An epoch:

1. takes the hub's snapshot: each stream's byte miss-ratio curve at 256 sizes over the node's
   total, the bytes referenced per second over the epoch, the miss costs per byte;
2. decides (``policies.sizing.decide``; with ``fixed`` sizing the decision is only reported, as
   what adaptive sizing would do);
3. resizes: the tier that shrinks first (it evicts at once, in its manager), then the one that
   grows, so the two never hold more than the total;
4. decays the curves (half-life LAKEGATE_SIZING_HALF_LIFE) and the costs (half each epoch: the
   network changes faster than the access pattern), records the epoch in the history, and
   writes the report (``sizing.json`` in the cache directory: atomic, read by every worker's
   ``/_lakegate/admin/sizing`` and /metrics), which also carries the split to the next start.

Costs: a tier whose misses were never timed takes the other's cost per byte (the same link, as
far as anything is known); with neither known, or no references in the epoch, there is no
evidence and the split holds.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cachetier.blocks.spaceipc import socket_path
from cachetier.telemetry.reuse import SIZING_SOCKET, STREAMS, HubSnapshot, ReuseHub, StreamSnapshot
from gateway.settings import Settings, SizingSettings
from policies import sizing

log = logging.getLogger("lakegate.sizing")

REPORT = "sizing.json"
_DECISION_POINTS = 256  # sizes each curve is evaluated at for a decision
_REPORT_POINTS = 96  # and for the report (over twice the total: "what would twice the SSD give?")
_HISTORY = 2880  # epochs kept (a day at 30 s); the report shows the last _HISTORY_SHOWN
_HISTORY_SHOWN = 240
COST_DECAY = 0.5  # the costs' weight kept per epoch


@dataclasses.dataclass(frozen=True)
class TierControl:
    """One tier as the loop drives it."""

    capacity: Callable[[], int]
    resize: Callable[[int], object]


def report_path(settings: Settings) -> Path:
    return settings.cache.directory / REPORT


def read_report(path: Path) -> dict[str, Any] | None:
    """The last report written, or None (none yet, or unreadable)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def initial_split(settings: Settings) -> tuple[int, int]:
    """The (L1, L2) capacities a node starts with. ``fixed``: the two settings. ``adaptive``: the
    split the last run left (when the total is unchanged), else the settings'; a node alone
    (no L2) gives L1 the whole total."""
    l1 = settings.cache.l1_capacity
    if not settings.sizing.adaptive:
        return l1, settings.cluster.l2_capacity if settings.cluster is not None else 0
    total = settings.sizing.total
    if settings.cluster is None:
        return total, 0
    low, high = sizing.bounds(policy_config(settings.sizing, settings.cache.read.block_size), total)
    last = read_report(report_path(settings))
    if last is not None and last.get("total_bytes") == total and last.get("mode") == "adaptive":
        kept = last.get("l1_capacity_bytes")
        if isinstance(kept, int) and 0 <= kept <= total:
            l1 = kept
    l1 = min(max(l1, low), high)
    return l1, total - l1


def policy_config(settings: SizingSettings, grain: int) -> sizing.SizingConfig:
    """``policies.sizing``'s config from the settings; candidates are whole blocks (``grain``)."""
    return sizing.SizingConfig(min_l1=settings.min_l1, max_l1=settings.max_l1, step=settings.step,
                               grain=max(1, grain))


class SizingLoop:
    """The epochs of one node (see the module docstring). ``tiers``: "l1", and "l2" in a cluster."""

    def __init__(
        self, settings: SizingSettings, hub: ReuseHub, tiers: Mapping[str, TierControl], total: int, report: Path,
        *, grain: int, clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.hub = hub
        self.tiers = dict(tiers)
        self.total = total
        self.report = report
        self.clock = clock
        self.wall = wall
        self.config = policy_config(settings, grain)
        self.history: collections.deque[dict[str, object]] = collections.deque(maxlen=_HISTORY)
        self.epochs = 0
        self.decision: sizing.Decision | None = None
        self._last = clock()

    # ---- one epoch --------------------------------------------------------------------------

    def epoch(self) -> sizing.Decision:
        now = self.clock()
        elapsed = max(now - self._last, 1e-3)
        self._last = now
        snap = self.hub.snapshot()
        current = {tier: control.capacity() for tier, control in self.tiers.items()}
        with self.hub.lock:
            snapshot = self._policy_snapshot(snap, current, elapsed)
            doc = self._report(snap, current, elapsed)
        decision = sizing.decide(self.config, snapshot)
        self.decision = decision
        if self.settings.adaptive:
            self._apply(decision, current)
        self.hub.decay(0.5 ** (elapsed / self.settings.half_life), COST_DECAY)
        self.epochs += 1
        entry = {"t": round(self.wall(), 3), "l1_bytes": decision.next_l1, "l2_bytes": decision.next_l2,
                 "target_l1_bytes": decision.target_l1, "reason": decision.reason,
                 "cost_now": decision.cost_now, "cost_target": decision.cost_target,
                 **{f"{tier}_observed_hit_ratio": doc["streams"][tier]["observed_hit_ratio"] for tier in STREAMS},
                 **{f"{tier}_predicted_hit_ratio": doc["streams"][tier]["predicted_hit_ratio"] for tier in STREAMS}}
        self.history.append(entry)
        self._write(doc, decision)
        return decision

    def _apply(self, decision: sizing.Decision, current: Mapping[str, int]) -> None:
        wanted = {"l1": decision.next_l1, "l2": decision.next_l2}
        changes = [(tier, wanted[tier]) for tier in self.tiers if wanted[tier] != current.get(tier)]
        for tier, capacity in sorted(changes, key=lambda change: change[1] - current.get(change[0], 0)):
            evicted = self.tiers[tier].resize(capacity)  # the shrinking tier first
            log.info("sizing: %s %d -> %d bytes (%s)%s", tier.upper(), current.get(tier, 0), capacity,
                     decision.reason, f", {evicted} blocks evicted" if evicted else "")

    def _policy_snapshot(self, snap: HubSnapshot, current: Mapping[str, int], elapsed: float) -> sizing.Snapshot:
        costs = {tier: snap.streams[tier].cost_per_byte for tier in STREAMS}
        known = [cost for cost in costs.values() if cost is not None]
        sizes = [round(self.total * i / (_DECISION_POINTS - 1)) for i in range(_DECISION_POINTS)]

        def stream(tier: str) -> sizing.Stream | None:
            part = snap.streams[tier]
            cost = costs[tier] if costs[tier] is not None else (known[0] if known else None)
            if cost is None or part.referenced_bytes <= 0:
                return None
            curve = sizing.curve_from(part.estimator.byte_curve(sizes))
            return sizing.Stream(curve, part.referenced_bytes / elapsed, cost)

        l2 = stream("l2") if "l2" in self.tiers else None
        if "l2" in self.tiers and l2 is None:  # a tier with no evidence costs nothing: a flat curve
            l2 = sizing.Stream(sizing.Curve(((0, 0.0),)), 0.0, 0.0)
        return sizing.Snapshot(total=self.total, current_l1=current["l1"], l1=stream("l1"), l2=l2)

    # ---- the report -------------------------------------------------------------------------

    def _report(self, snap: HubSnapshot, current: Mapping[str, int], elapsed: float) -> dict[str, Any]:
        """What the operator sees (under the hub's lock: the estimators are live)."""
        streams: dict[str, object] = {}
        curves: dict[str, list[list[float]]] = {}
        byte_curves: dict[str, list[list[float]]] = {}
        tenants: dict[str, dict[str, list[list[float]]]] = {}
        for tier in STREAMS:
            part = snap.streams[tier]
            estimator = part.estimator
            top = max(2 * self.total, math.ceil(1.2 * estimator.footprint), 1)
            sizes = [round(top * i / (_REPORT_POINTS - 1)) for i in range(_REPORT_POINTS)]
            curves[tier] = [[size, round(ratio, 5)] for size, ratio in estimator.curve(sizes)]
            byte_curves[tier] = [[size, round(ratio, 5)] for size, ratio in estimator.byte_curve(sizes)]
            tenants[tier] = {name: [[size, round(ratio, 5)] for size, ratio in own.curve(sizes)]
                             for name, own in sorted(part.tenants.items())}
            capacity = current.get(tier, 0)
            streams[tier] = _stream_json(part, estimator.miss_ratio(capacity) if estimator.references else None,
                                         elapsed, capacity)
        return {"streams": streams, "curves": curves, "byte_curves": byte_curves, "tenant_curves": tenants}

    def _write(self, doc: dict[str, Any], decision: sizing.Decision) -> None:
        capacities = {tier: control.capacity() for tier, control in self.tiers.items()}
        l1_cost = doc["streams"]["l1"]["miss_cost_s"]
        l2_cost = doc["streams"]["l2"]["miss_cost_s"]
        report = {
            "mode": self.settings.mode,
            "as_of": round(self.wall(), 3),
            "epochs": self.epochs,
            "interval_s": self.settings.interval,
            "total_bytes": self.total,
            "l1_capacity_bytes": capacities.get("l1", 0),
            "l2_capacity_bytes": capacities.get("l2", 0),
            "target_l1_bytes": decision.target_l1,
            "next_l1_bytes": decision.next_l1,
            "reason": decision.reason,
            "cost_now_s_per_s": decision.cost_now,
            "cost_target_s_per_s": decision.cost_target,
            "l1_miss_cost_s": l1_cost,
            "l2_miss_cost_s": l2_cost,
            "l1_miss_cost_s_per_byte": doc["streams"]["l1"]["miss_cost_s_per_byte"],
            "l2_miss_cost_s_per_byte": doc["streams"]["l2"]["miss_cost_s_per_byte"],
            "min_l1_fraction": self.settings.min_l1,
            "max_l1_fraction": self.settings.max_l1,
            "step_fraction": self.settings.step,
            "l1_curve": doc["curves"]["l1"],
            "l2_curve": doc["curves"]["l2"] if "l2" in self.tiers else [],
            **doc,
            "history": list(self.history)[-_HISTORY_SHOWN:],
        }
        if "l2" not in self.tiers:
            report["curves"] = {"l1": doc["curves"]["l1"], "l2": []}
        write_report(self.report, report)

    def write_initial(self) -> None:
        """A report before the first epoch: the split, no curves yet."""
        capacities = {tier: control.capacity() for tier, control in self.tiers.items()}
        write_report(self.report, {
            "mode": self.settings.mode, "as_of": round(self.wall(), 3), "epochs": 0,
            "interval_s": self.settings.interval, "total_bytes": self.total,
            "l1_capacity_bytes": capacities.get("l1", 0), "l2_capacity_bytes": capacities.get("l2", 0),
            "target_l1_bytes": capacities.get("l1", 0), "reason": "starting",
            "l1_miss_cost_s": None, "l2_miss_cost_s": None, "l1_curve": [], "l2_curve": [],
            "curves": {"l1": [], "l2": []}, "history": [],
        })

    # ---- the thread -------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self.settings.interval):
            try:
                self.epoch()
            except Exception:  # noqa: BLE001 - the loop must outlive one bad epoch
                log.exception("sizing epoch failed")


def _stream_json(part: StreamSnapshot, predicted_miss: float | None, elapsed: float, capacity: int) -> dict[str, object]:
    estimator = part.estimator
    return {
        "capacity_bytes": capacity,
        "references_per_s": round(part.references / elapsed, 3),
        "bytes_per_s": round(part.referenced_bytes / elapsed, 1),
        "sample_rate": estimator.rate,
        "sampled_references": part.sampled_references,
        "tracked_blocks": estimator.tracked,
        "estimator_memory_bytes": estimator.memory(),
        "footprint_bytes": int(estimator.footprint),
        "observed_hit_ratio": None if part.observed_hit_ratio is None else round(part.observed_hit_ratio, 4),
        "predicted_hit_ratio": None if predicted_miss is None else round(1 - predicted_miss, 4),
        "miss_cost_s": part.cost_per_miss,
        "miss_cost_s_per_byte": part.cost_per_byte,
        "misses_timed": round(part.misses_timed, 2),
    }


def write_report(path: Path, doc: Mapping[str, object]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    try:
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, path)
    except OSError as exc:  # a full disk: the last report stays
        log.warning("could not write the sizing report %s: %s", path, exc)


def start_sizing(settings: Settings, tiers: Mapping[str, TierControl], hub: ReuseHub | None = None
                 ) -> Callable[[], None]:
    """The loop's thread over ``tiers`` and ``hub`` (None: a hub of its own, listening for the
    workers' probes on its socket in the cache directory), started; returns what stops both."""
    config = settings.sizing
    if hub is None:
        hub = ReuseHub(config.sample_rate, config.memory, socket_path(settings.cache.directory, SIZING_SOCKET))
        hub.serve()
    total = config.total if config.adaptive else sum(control.capacity() for control in tiers.values())
    loop = SizingLoop(config, hub, tiers, total, report_path(settings), grain=settings.cache.read.block_size)
    loop.write_initial()  # before the node serves: the admin endpoint always has a report
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(stop,), name="sizing-loop", daemon=True)
    thread.start()

    def close() -> None:
        stop.set()
        thread.join(5)
        hub.close()

    return close
