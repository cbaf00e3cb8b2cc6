"""Admission: the node's fair queuing (Pisces FQ) as the gateway runs it, and the node-level
state of fairness whatever the number of worker processes.

``NodeFairness`` owns this process's ``Fairness`` (cachetier.fairness: the queues and tokens,
over the pure ``policies.fairness.FairQueue``) and keeps what the mechanisms share:

- **Capacity** per resource (units a second): requests (``LAKEGATE_NODE_REQUEST_RATE``), bytes
  sent (``LAKEGATE_NODE_SEND_RATE``, default the speed of the fastest network interface, read
  with psutil at start: unlimited on a loopback-only host), bytes from the lake (this node's part
  of ``LAKEGATE_LAKE_BANDWIDTH``: the cluster's budget, split by the leader by demand; before
  the first split, an even part per configured node).
- **Local weights** per tenant: the tenants file's weights until the leader's weight
  allocation (Pisces WA) sets this node's own.
- **Hard caps** per tenant: the tenants file's cluster-wide caps, this node's part of them
  (split by the leader by demand like the lake budget).

Several workers (``gateway.workers``). Every worker runs its own scheduler; the node's state
holds across them so:

- each worker's capacity is its part of the node's, split every second by the workers' demand
  (``policies.allocation.split``: max-min, each at least a floor), from the counts every
  worker publishes on the node's board (``gateway.workerstats``). The parts sum to the node's
  capacity, so the node never serves more than it has, and an idle worker's part goes to busy
  ones within a second. The same split divides the node's per-tenant caps.
- an update of the node's weights, lake budget or caps reaches one worker (the leader's POST
  lands where the connection does); it writes the update to ``fairness.json`` in the board's
  folder (whole, renamed into place) and every worker reads it within a second.
- the node's counts (served and wanted per tenant and resource, SlowDowns, queue delays) are
  the sum of the workers' published ones and this worker's live ones, as the cache counters are.

Weighted shares between tenants hold within each worker; across workers, a tenant whose
connections all reached one worker competes there with the part of the others' demand that
reached it (connections spread evenly under SO_REUSEPORT, so tenants with many connections,
which are the ones that contend, are spread too).
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from cachetier.fairness.admission import DELAY_BUCKETS, Fairness, TenantStats, quantile
from gateway.settings import FairnessSettings
from gateway.tenants import TenantDirectory
from gateway.workerstats import SharedDoc
from policies import allocation
from policies.fairness import RESOURCES, FairQueue, TenantWindow

log = logging.getLogger("lakegate.fairness")

_UPDATE_FILE = "fairness.json"
FIFO = "*"  # the one queue of LAKEGATE_FAIRNESS=off
_RECENT = 10  # windows (seconds) the admin shares are measured over


def limited(settings: FairnessSettings) -> bool:
    """Whether the settings name a capacity (so even without fairness, admission is scheduled)."""
    return bool(settings.request_rate or settings.send_rate or settings.lake_bandwidth)


def interface_speed() -> float | None:
    """Bytes a second of the fastest network interface that is up (not loopback); None if none
    reports a speed (loopback only, or a virtual interface that reports 0)."""
    best = 0
    with suppress(OSError):
        for name, stats in psutil.net_if_stats().items():
            if stats.isup and name != "lo" and stats.speed > 0:
                best = max(best, stats.speed)
    return best * 1e6 / 8 if best else None


@dataclass
class NodeState:
    """What the leader (or the tenants file, before it speaks) set for this node."""

    weights: dict[str, float]
    lake_capacity: float | None  # bytes/s from the lake; None: unlimited
    limits: dict[str, dict[str, float]]  # tenant -> resource -> units/s on this node
    epoch: int = 0  # the update's (0: from the settings)
    leader: str = ""
    cluster_mmr: float | None = None  # the cluster's min-max ratio as the leader last measured it
    nodes: dict[str, dict[str, float]] = field(default_factory=dict)  # every node's weights (RS)

    def to_doc(self) -> dict[str, object]:
        return {"weights": self.weights, "lake_capacity": self.lake_capacity, "limits": self.limits,
                "epoch": self.epoch, "leader": self.leader, "cluster_mmr": self.cluster_mmr, "nodes": self.nodes}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> NodeState:
        return cls({str(t): float(w) for t, w in doc["weights"].items()},
                   None if doc["lake_capacity"] is None else float(doc["lake_capacity"]),
                   {str(t): {str(r): float(v) for r, v in caps.items()} for t, caps in doc["limits"].items()},
                   int(doc["epoch"]), str(doc["leader"]),
                   None if doc.get("cluster_mmr") is None else float(doc["cluster_mmr"]),
                   {str(n): {str(t): float(w) for t, w in row.items()} for n, row in doc.get("nodes", {}).items()})


Amounts = dict[str, dict[str, float]]  # tenant -> resource -> amount


@dataclass
class Totals:
    """Per tenant and resource: what was served and what was wanted (served, queued, refused)."""

    served: Amounts = field(default_factory=dict)
    wanted: Amounts = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)

    def add(self, other: Totals) -> None:
        for mine, theirs in ((self.served, other.served), (self.wanted, other.wanted)):
            for tenant, amounts in theirs.items():
                row = mine.setdefault(tenant, {})
                for resource, amount in amounts.items():
                    row[resource] = row.get(resource, 0.0) + amount
        for tenant, count in other.refused.items():
            self.refused[tenant] = self.refused.get(tenant, 0) + count

    def add_window(self, window: Mapping[str, TenantWindow]) -> None:
        self.add(Totals({t: dict(w.served) for t, w in window.items()},
                        {t: dict(w.wanted) for t, w in window.items()},
                        {t: w.refused for t, w in window.items() if w.refused}))

    def to_doc(self) -> dict[str, object]:
        return {"served": self.served, "wanted": self.wanted, "refused": self.refused}

    @classmethod
    def from_doc(cls, doc: object) -> Totals:
        """Totals as a worker published them; anything malformed reads as none."""
        if not isinstance(doc, dict):
            return cls()
        try:
            return cls(_amounts(doc.get("served")), _amounts(doc.get("wanted")),
                       {str(t): int(v) for t, v in (doc.get("refused") or {}).items()})
        except (AttributeError, TypeError, ValueError):
            return cls()


def _amounts(doc: object) -> Amounts:
    if not isinstance(doc, dict):
        return {}
    return {str(t): {str(r): float(v) for r, v in row.items()} for t, row in doc.items()}


def wants(served: Mapping[str, float], wanted: Mapping[str, float], capacity: Mapping[str, float],
          seconds: float) -> dict[str, float]:
    """What a tenant asks of each resource, for the allocators: what it wanted, except that a
    tenant left waiting (it wanted more than it was served) wants all of a finite resource. A
    closed-loop client's queue is its number of connections, which says nothing of how much more
    it would take: only that it is backlogged, i.e. more than any share it is given."""
    asked = {}
    for resource, amount in wanted.items():
        total = capacity.get(resource, math.inf)
        backlogged = amount > served.get(resource, 0.0) * 1.001 + 1e-9
        asked[resource] = max(amount, total * seconds) if backlogged and math.isfinite(total) else amount
    return asked


def shares(served: Amounts) -> dict[str, float]:
    """Each tenant's share of what the node served: its largest fraction, over the resources,
    of the amount served to everyone (so capacity need not be known: unlimited resources too)."""
    totals = {r: sum(row.get(r, 0.0) for row in served.values()) for r in RESOURCES}
    return {t: max((row.get(r, 0.0) / totals[r] for r in RESOURCES if totals[r] > 0), default=0.0)
            for t, row in served.items()}


class NodeFairness:
    """This worker's fair queuing, and its part of the node's fairness state."""

    def __init__(
        self,
        settings: FairnessSettings,
        tenants: TenantDirectory,
        *,
        workers: int = 1,
        nodes: int = 1,
        directory: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        # LAKEGATE_FAIRNESS=off with capacities set: the same capacities, one first-come queue for
        # every tenant (the baseline fairness is measured against: a node that is just as big)
        self.fifo = not settings.fq
        self.global_weights = tenants.weights()
        self.global_limits = tenants.limits()
        self.workers = max(1, workers)
        send = settings.send_rate if settings.send_rate is not None else interface_speed()
        self.node_capacity: dict[str, float] = {
            "requests": settings.request_rate or math.inf,
            "client_bytes": send or math.inf,
        }
        n = max(1, nodes)  # before the leader's first split: an even part per configured node
        lake = settings.lake_bandwidth / n if settings.lake_bandwidth else None
        caps = {t: {r: v / n for r, v in c.items()} for t, c in self.global_limits.items()}
        self.state = NodeState(dict(self.global_weights), lake, caps)
        self._shared = SharedDoc(directory, _UPDATE_FILE) if directory is not None and self.workers > 1 else None
        # this worker's part of the node (capacity per resource, weights, caps): 1/N of each
        # until the workers' demand is known, then ``policies.allocation.divide``
        self._capacity = self._even(self.capacity())
        self._weights = dict(self.state.weights)
        self._limits = {t: self._even(caps) for t, caps in self.state.limits.items()}
        self.clock = clock
        queue = FairQueue(self._capacity, max_queued=settings.tenant_queue)
        self.fairness = Fairness(queue, clock=clock)
        self.fairness.set_weights(self._weights)
        self.fairness.set_limits(self._limits)
        self.totals = Totals()  # this worker's, since start
        self.recent: deque[Totals] = deque(maxlen=_RECENT)  # this worker's last windows

    async def acquire(self, tenant: str, resource: str, amount: float) -> None:
        """``amount`` of ``resource`` for ``tenant``, in its turn (``Fairness.acquire``)."""
        await self.fairness.acquire(FIFO if self.fifo else tenant, resource, amount)

    # ---- capacity -----------------------------------------------------------------------

    def capacity(self) -> dict[str, float]:
        """The node's capacity per resource now (units/s; inf: unlimited)."""
        lake = self.state.lake_capacity
        return {**self.node_capacity, "lake_bytes": lake if lake is not None else math.inf}

    def _even(self, amounts: Mapping[str, float]) -> dict[str, float]:
        return {r: v / self.workers for r, v in amounts.items()}

    def _retune(self) -> None:
        self.fairness.set_capacity(self._capacity)
        self.fairness.set_weights(self._weights)
        self.fairness.set_limits(self._limits)

    # ---- the node's state, set by the leader ----------------------------------------------

    def weight_on(self, node: str, tenant: str) -> float | None:
        """``tenant``'s local weight on ``node`` as the leader last set it (None: not known)."""
        row = self.state.nodes.get(node)
        return None if row is None else row.get(tenant)

    def apply(self, state: NodeState) -> bool:
        """An update from the leader: applied here and written for the node's other workers.
        An update older than the one applied (same leader, lower epoch) is ignored: False."""
        if state.leader == self.state.leader and state.epoch <= self.state.epoch:
            return False
        self._use(state)
        if self._shared is not None:
            self._shared.write(state.to_doc())
        return True

    def _use(self, state: NodeState) -> None:
        weights = dict(self.global_weights)
        weights.update({t: w for t, w in state.weights.items() if t in weights and w > 0})
        self.state = NodeState(weights, state.lake_capacity, state.limits, state.epoch, state.leader,
                               state.cluster_mmr, state.nodes)
        self._capacity = self._even(self.capacity())  # until the next division by demand
        self._weights = dict(weights)
        self._limits = {t: self._even(caps) for t, caps in state.limits.items()}
        self._retune()

    # ---- every second ---------------------------------------------------------------------

    def tick(self, others: Sequence[Mapping[str, object]] | None = None) -> None:
        """Take this worker's window into its totals; with other workers, pick up a node update
        one of them received, and re-split the node's capacity by the workers' demand."""
        window = Totals()
        window.add_window(self.fairness.take_window())
        self.totals.add(window)
        self.recent.append(window)
        if others is None or self.workers == 1:
            return
        self._read_update()
        self._split_by_demand(window, others)

    def _read_update(self) -> None:
        doc = self._shared.changed() if self._shared is not None else None
        if doc is None:
            return
        try:
            state = NodeState.from_doc(doc)
        except (ValueError, KeyError, TypeError, AttributeError):
            return
        if (state.leader, state.epoch) != (self.state.leader, self.state.epoch):
            self._use(state)

    def _split_by_demand(self, window: Totals, others: Sequence[Mapping[str, object]]) -> None:
        """This worker's part of the node, from every worker's demand in its last window
        (``policies.allocation.divide``): per finite resource, the capacity that serves each
        tenant here its node-wide weighted share in proportion to its demand here, and local
        weights from the busiest such resource; each cap split by the tenant's demand."""
        windows = {"": window}
        for i, doc in enumerate(others):
            windows[str(i + 1)] = Totals.from_doc(doc.get("window"))
        capacity = self.capacity()
        seconds = 1.0  # windows are the one-second ticks
        busiest, load = None, 0.0
        parts = {}
        for resource, total in capacity.items():
            if not math.isfinite(total):
                continue
            demand = {part: {t: wants(w.served.get(t, {}), row, capacity, seconds).get(resource, 0.0) / seconds
                             for t, row in w.wanted.items()} for part, w in windows.items()}
            division = allocation.divide(total, demand, self.state.weights)
            parts[resource] = division[""]
            wanted = sum(sum(d.values()) for d in demand.values()) / total
            if wanted > load:
                busiest, load = resource, wanted
        if not parts:
            return
        self._capacity = {r: parts[r].capacity if r in parts else v for r, v in capacity.items()}
        if busiest is not None:  # as many units as the node's weights, so a tenant unnamed (weight 1) fits in
            weights = {t: w for t, w in parts[busiest].weights.items() if w > 0}
            scale = sum(self.state.weights.values()) / (sum(weights.values()) or 1.0)
            self._weights = {t: w * scale for t, w in weights.items()}
        limits = {}
        for tenant, caps in self.state.limits.items():
            demand_of = {part: w.wanted.get(tenant, {}) for part, w in windows.items()}
            limits[tenant] = {r: allocation.split(cap, {p: d.get(r, 0.0) for p, d in demand_of.items()})[""]
                              for r, cap in caps.items()}
        self._limits = limits
        self._retune()

    # ---- what the board carries, and the node's view ---------------------------------------

    def published(self) -> dict[str, object]:
        """This worker's counts for the node's other workers (``gateway.workerstats``)."""
        recent = Totals()
        for window in self.recent:
            recent.add(window)
        stats = {t: {"queued": s.queued, "delays": _counts(s)}
                 for t, s in self.fairness.snapshot().items()}
        last = self.recent[-1] if self.recent else Totals()
        return {"totals": self.totals.to_doc(), "recent": recent.to_doc(), "window": last.to_doc(), "stats": stats,
                "lake_waiting": self.fairness.waiting("lake_bytes")}

    def lake_waiting(self, others: Sequence[Mapping[str, object]]) -> bool:
        """Whether tenants' lake reads wait for the lake budget on any worker of the node: this
        one now, the others as they last published (write-back's flusher, in one worker, yields
        to all of them)."""
        return self.fairness.waiting("lake_bytes") or any(doc.get("lake_waiting") is True for doc in others)

    def node_totals(self, others: Sequence[Mapping[str, object]], part: str = "totals") -> Totals:
        """The node's totals (``part="recent"``: over the last windows): this worker's and the
        others' last published."""
        total = Totals()
        if part == "totals":
            total.add(self.totals)
        else:
            for window in self.recent:
                total.add(window)
        for doc in others:
            total.add(Totals.from_doc(doc.get(part)))
        return total

    def node_window(self, others: Sequence[Mapping[str, object]], windows: int) -> Totals:
        """The node's last ``windows`` seconds: this worker's last windows and the others' last
        published one, as many times (each publishes its last second only)."""
        total = Totals()
        for window in list(self.recent)[-windows:]:
            total.add(window)
        for doc in others:
            last = Totals.from_doc(doc.get("window"))
            for _ in range(windows):
                total.add(last)
        return total

    def tenants_json(self, others: Sequence[Mapping[str, object]], cache_bytes: Mapping[str, int],
                     cache_capacity: int) -> dict[str, object]:
        """``/_lakegate/admin/tenants``: per tenant on this node, and the node's min-max ratio."""
        own = self.fairness.snapshot()
        totals = Totals(  # this worker's live counts (its totals lag by up to a tick), and the others'
            {t: {"requests": st.requests, "client_bytes": st.client_bytes, "lake_bytes": st.lake_bytes}
             for t, st in own.items()}, {}, {t: st.refused for t, st in own.items() if st.refused})
        for doc in others:
            totals.add(Totals.from_doc(doc.get("totals")))
        recent = self.node_totals(others, "recent")
        queued: dict[str, int] = {t: s.queued for t, s in own.items()}
        delays: dict[str, list[int]] = {t: _counts(s) for t, s in own.items()}
        for published in others:
            stats = published.get("stats")
            for tenant, row in (stats.items() if isinstance(stats, dict) else ()):
                with suppress(AttributeError, TypeError, ValueError):
                    queued[tenant] = queued.get(tenant, 0) + int(row["queued"])
                    counts = [int(c) for c in row["delays"]]
                    if len(counts) == len(DELAY_BUCKETS) + 1:
                        mine = delays.setdefault(tenant, [0] * len(counts))
                        delays[tenant] = [a + b for a, b in zip(mine, counts)]
        served_shares = shares(recent.served)
        names = sorted(set(self.global_weights) | set(totals.served))
        active = [t for t in names if recent.served.get(t)]
        weight_sum = sum(self.global_weights.get(t, 1.0) for t in active) or 1.0
        held_sum = sum(cache_bytes.get(t, 0) for t in names)
        holders = [t for t in names if cache_bytes.get(t)]
        holder_weights = sum(self.global_weights.get(t, 1.0) for t in holders) or 1.0
        rows: dict[str, object] = {}
        for tenant in names:
            served = totals.served.get(tenant, {})
            weight = self.global_weights.get(tenant, 1.0)
            rows[tenant] = {
                "weight": weight,
                "local_weight": self.state.weights.get(tenant, weight),
                "requests": int(served.get("requests", 0)),
                "bytes_sent": int(served.get("client_bytes", 0)),
                "lake_bytes": int(served.get("lake_bytes", 0)),
                "queue_length": queued.get(tenant, 0),
                "queue_delay_p99_s": round(quantile(_cumulative(delays.get(tenant)), 0.99), 6),
                "queue_delay_buckets": [[b if math.isfinite(b) else "+Inf", c]
                                        for b, c in _cumulative(delays.get(tenant))],
                "share": round(served_shares.get(tenant, 0.0), 4),
                "weighted_share": round(weight / weight_sum, 4) if tenant in active else 0.0,
                "slowdowns": totals.refused.get(tenant, 0),
                "cache_bytes": int(cache_bytes.get(tenant, 0)),
                "cache_share": round(cache_bytes.get(tenant, 0) / held_sum, 4) if held_sum else 0.0,
                "cache_fair_bytes": int(cache_capacity * weight / holder_weights) if tenant in holders else 0,
            }
        wanting = {t: recent.wanted.get(t, {}) for t in active}
        mmr = allocation.min_max_ratio(
            {t: served_shares.get(t, 0.0) for t in active}, {t: self.global_weights.get(t, 1.0) for t in active})
        return {"tenants": rows, "min_max_ratio": round(mmr, 4), "cluster_min_max_ratio": self.state.cluster_mmr,
                "leader": self.state.leader or None, "capacity": _finite(self.capacity()),
                "mode": self.settings.mode, "window_s": len(self.recent), "backlogged": sorted(
                    t for t in active if _backlogged(recent.served.get(t, {}), wanting[t]))}


def _counts(stats: TenantStats) -> list[int]:
    cumulative = [c for _, c in stats.delay_buckets]
    return [c - (cumulative[i - 1] if i else 0) for i, c in enumerate(cumulative)]


def _cumulative(counts: list[int] | None) -> tuple[tuple[float, int], ...]:
    """Per-bucket counts as Prometheus' cumulative (upper bound, count) pairs, +Inf last."""
    cumulative, running = [], 0
    for bound, count in zip((*DELAY_BUCKETS, math.inf), counts or [0] * (len(DELAY_BUCKETS) + 1)):
        running += count
        cumulative.append((bound, running))
    return tuple(cumulative)


def _backlogged(served: Mapping[str, float], wanted: Mapping[str, float]) -> bool:
    return any(wanted.get(r, 0.0) > served.get(r, 0.0) * 1.01 + 1 for r in RESOURCES)


def _finite(capacity: Mapping[str, float]) -> dict[str, float | None]:
    return {r: (v if math.isfinite(v) else None) for r, v in capacity.items()}
