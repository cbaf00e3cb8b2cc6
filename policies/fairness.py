"""Fair queuing at admission (Pisces FQ): which tenant's queued work a node serves next.

Work items are single-resource: (tenant, resource, amount). The runtime submits one
``requests`` item of 1 when it admits a request, one ``client_bytes`` item per chunk it sends
and one ``lake_bytes`` item per chunk it fetches from the lake, so a 4 GiB GET is many items
and a small request waits behind at most one quantum of it.

The rule, exactly:

- Each resource is its own lane: a token bucket that refills at the node's capacity (units/s)
  and banks at most ``burst`` seconds of it, and a weighted deficit round robin over the tenants
  with items queued there. A tenant's quantum on resource r is ``weight * quantum * capacity_r``
  units, i.e. ``weight * quantum`` seconds of the resource: deficits are counted in units of r,
  which is dominant-share units (amount / capacity_r) scaled by the constant capacity_r.
- The bucket uses a debt model: an item is granted when the level is >= 0 and then subtracted,
  so an item larger than the bank (a 4 MiB chunk on a 1 MB/s link) still passes, and the bucket
  goes negative until the link has carried it.
- Across resources: because items are single-resource, a request's later items wait in the
  lanes of the resources they use, so a tenant advances at the pace of its scarcest (dominant)
  resource and holds no more of the others than that pace takes; each lane being weighted
  max-min fair, a request-bound and a bandwidth-bound tenant each get at least their weighted
  share of their own bottleneck. This is DRFQ's outcome without estimating demand profiles
  (Pisces needs them because its items are multi-resource vectors served whole).
- Work conserving: only tenants with queued items take part in a round; a tenant whose queue
  on a lane empties leaves the round and its deficit is reset to 0 (an idle tenant banks no
  credit), and comes back at the tail of the round when it has work again.
- A lane whose capacity is ``math.inf`` is never scheduled: its items pass at once.
- Hard limits (optional, per tenant and resource, units/s): a per-tenant token bucket with the
  same debt model and ``burst`` bank. A tenant over its limit is parked off the round (not work
  conserving: the node may idle) and rejoins the tail when its bucket is back to >= 0.
- Fast path: a submitted item is granted at once when its lane has no tenant in the round, the
  tenant has nothing queued there, the node bucket is >= 0 and the tenant is under its limit.
- Bounded queues: a tenant's ``requests`` items queue up to ``max_queued``; past that, submit
  refuses (the gateway answers 503 SlowDown). Byte items are never refused: they belong to
  responses under way.

DRR runs many empty rounds when items are much larger than quanta (4 MiB chunks on a slow
link); after one full round without a grant the lane adds the k rounds that would still grant
nothing at once, so a decision costs O(tenants) rounds, not O(item / quantum).

The policy never reads a clock: every method that depends on time takes ``now`` (seconds).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

RESOURCES = ("requests", "client_bytes", "lake_bytes")

# A bucket within a nanosecond's refill of 0 counts as 0: a decision at the wake time it asked
# for must find it ready despite float rounding.
_SLACK = 1e-9


@dataclass(frozen=True, slots=True)
class Submitted:
    """What ``submit`` did: granted at once, refused (queue bound), or queued as ``item``."""

    granted: bool = False
    refused: bool = False
    item: int | None = None


GRANTED = Submitted(granted=True)
REFUSED = Submitted(refused=True)


@dataclass(frozen=True, slots=True)
class Decision:
    """The queued items granted now, in DRR order, and when to decide again (None: nothing queued)."""

    granted: tuple[int, ...]
    wake_at: float | None


@dataclass(frozen=True, slots=True)
class TenantWindow:
    """A tenant over ``seconds`` since the previous window: amounts served per resource, amounts
    wanted (served + queued now + refused) and refused ``requests`` items."""

    seconds: float
    served: dict[str, float]
    wanted: dict[str, float]
    refused: int


@dataclass(frozen=True, slots=True)
class TenantTotals:
    """A tenant's served amounts and refused items since the queue was made."""

    served: dict[str, float]
    refused: int


class _Bucket:
    """A token bucket with debt: ready while level >= 0; ``take`` may push it below 0."""

    __slots__ = ("rate", "bank", "level", "stamp")

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate = rate
        self.bank = _bank(rate, burst)
        self.level = self.bank
        self.stamp = now

    def refill(self, now: float) -> None:
        if now > self.stamp:
            if self.level < self.bank:
                self.level = min(self.bank, self.level + (now - self.stamp) * self.rate)
            self.stamp = now

    def ready(self) -> bool:
        return self.level >= -self.rate * _SLACK

    def ready_at(self, now: float) -> float:
        return now + max(0.0, -self.level) / self.rate

    def retune(self, rate: float, burst: float, now: float) -> None:
        """A new rate from ``now``: what was earned so far is kept, up to the new bank."""
        self.refill(now)
        self.rate = rate
        self.bank = _bank(rate, burst)
        self.level = self.bank if math.isinf(rate) else min(self.level, self.bank)


@dataclass(slots=True)
class _Flow:
    """One tenant on one lane: its queued item ids (cancelled ones dropped lazily at the head),
    its DRR deficit, its optional hard limit and its accounting."""

    cap: _Bucket | None
    queue: deque[int] = field(default_factory=deque)
    live: int = 0
    amount: float = 0.0
    deficit: float = 0.0
    parked: bool = False
    served_total: float = 0.0
    served_window: float = 0.0
    refused_total: int = 0
    refused_window: int = 0
    refused_amount_window: float = 0.0


@dataclass(slots=True)
class _Lane:
    """One resource: the node's bucket, the tenants in the DRR round (``active``, head first),
    whether the head has had its quantum this visit, and the tenants parked over their limit."""

    bucket: _Bucket
    flows: dict[str, _Flow] = field(default_factory=dict)
    active: deque[str] = field(default_factory=deque)
    fresh: bool = False
    idle_visits: int = 0
    parked: set[str] = field(default_factory=set)


class FairQueue:
    """Weighted DRR per resource over tenants, with node token buckets and optional hard limits."""

    def __init__(
        self, capacity: Mapping[str, float], *, quantum: float = 0.005, burst: float = 0.05, max_queued: int = 256
    ) -> None:
        if quantum <= 0 or burst < 0 or max_queued < 0:
            raise ValueError("quantum must be > 0, burst >= 0 and max_queued >= 0")
        self.quantum = quantum
        self.burst = burst
        self.max_queued = max_queued
        self._lanes = {r: _Lane(_Bucket(_rate(capacity, r), burst, 0.0)) for r in RESOURCES}
        self._weights: dict[str, float] = {}
        self._limits: dict[str, dict[str, float]] = {}
        self._items: dict[int, tuple[str, str, float]] = {}
        self._next_item = 0
        self._window_start: float | None = None

    # -- settings ------------------------------------------------------------------------------

    def set_capacity(self, capacity: Mapping[str, float], now: float) -> None:
        """The node's capacity per resource (units/s; absent or math.inf: unlimited) from ``now``."""
        for resource, lane in self._lanes.items():
            lane.bucket.retune(_rate(capacity, resource), self.burst, now)

    def rate(self, resource: str) -> float:
        """The node's capacity of ``resource`` now (units/s; math.inf: unlimited)."""
        return self._lanes[resource].bucket.rate

    def set_weights(self, weights: Mapping[str, float]) -> None:
        """Each tenant's weight (> 0); tenants not named weigh 1.0. Takes effect at the next quantum."""
        if any(not w > 0 or math.isinf(w) for w in weights.values()):
            raise ValueError("weights must be finite and > 0")
        self._weights = dict(weights)

    def set_limits(self, limits: Mapping[str, Mapping[str, float]], now: float) -> None:
        """Hard caps, tenant -> resource -> units/s (> 0). A tenant's bucket keeps what it earned."""
        if any(not rate > 0 for per in limits.values() for rate in per.values()):
            raise ValueError("limits must be > 0")
        self._limits = {t: {r: rate for r, rate in per.items() if r in self._lanes} for t, per in limits.items()}
        for resource, lane in self._lanes.items():
            for tenant, flow in lane.flows.items():
                flow.cap = self._retuned_cap(flow.cap, tenant, resource, now)
                if flow.parked and flow.cap is None:
                    self._unpark(lane, tenant, flow)

    def weight(self, tenant: str) -> float:
        return self._weights.get(tenant, 1.0)

    # -- the queue -----------------------------------------------------------------------------

    def submit(self, tenant: str, resource: str, amount: float, now: float) -> Submitted:
        """Grant ``amount`` of ``resource`` to ``tenant`` at once, queue it, or refuse it."""
        lane = self._lanes[resource]
        flow = lane.flows.get(tenant)
        if flow is None:
            flow = lane.flows[tenant] = _Flow(self._retuned_cap(None, tenant, resource, now))
        bucket = lane.bucket
        bucket.refill(now)
        cap = flow.cap
        if cap is not None:
            cap.refill(now)
        if not lane.active and not flow.live and bucket.ready() and (cap is None or cap.ready()):
            bucket.level -= amount
            if cap is not None:
                cap.level -= amount
            flow.served_total += amount
            flow.served_window += amount
            return GRANTED
        if resource == "requests" and flow.live >= self.max_queued:
            flow.refused_total += 1
            flow.refused_window += 1
            flow.refused_amount_window += amount
            return REFUSED
        return Submitted(item=self._enqueue(lane, tenant, flow, resource, amount))

    def cancel(self, item: int, now: float) -> None:
        """The waiter of ``item`` went away: drop it (unknown or granted ids are ignored)."""
        entry = self._items.pop(item, None)
        if entry is None:
            return
        tenant, resource, amount = entry
        lane = self._lanes[resource]
        flow = lane.flows[tenant]
        flow.live -= 1
        flow.amount -= amount
        if not flow.live:
            flow.queue.clear()
            self._leave(lane, tenant, flow)

    def decide(self, now: float) -> Decision:
        """The queued items whose turn it is at ``now``, and when to decide again."""
        granted: list[int] = []
        wake: float | None = None
        for lane in self._lanes.values():
            if lane.active or lane.parked:
                at = self._serve_lane(lane, now, granted)
                if at is not None and (wake is None or at < wake):
                    wake = at
        return Decision(tuple(granted), wake)

    # -- what it did ---------------------------------------------------------------------------

    def backlog(self) -> dict[str, dict[str, float]]:
        """tenant -> resource -> amount queued now (tenants and resources with nothing queued left out)."""
        found: dict[str, dict[str, float]] = {}
        for resource, lane in self._lanes.items():
            for tenant, flow in lane.flows.items():
                if flow.live:
                    found.setdefault(tenant, {})[resource] = flow.amount
        return found

    def totals(self) -> dict[str, TenantTotals]:
        """Per tenant, the amounts served and the requests refused since the queue was made."""
        served: dict[str, dict[str, float]] = {}
        refused: dict[str, int] = {}
        for resource, lane in self._lanes.items():
            for tenant, flow in lane.flows.items():
                served.setdefault(tenant, dict.fromkeys(RESOURCES, 0.0))[resource] = flow.served_total
                refused[tenant] = refused.get(tenant, 0) + flow.refused_total
        return {t: TenantTotals(served[t], refused[t]) for t in served}

    def take_window(self, now: float) -> dict[str, TenantWindow]:
        """Per tenant, what it was served and wanted since the previous call (the first window
        starts at the queue's first use of the clock, 0.0), and start a new window."""
        seconds = now - (self._window_start if self._window_start is not None else 0.0)
        self._window_start = now
        served: dict[str, dict[str, float]] = {}
        wanted: dict[str, dict[str, float]] = {}
        refused: dict[str, int] = {}
        for resource, lane in self._lanes.items():
            for tenant, flow in lane.flows.items():
                served.setdefault(tenant, dict.fromkeys(RESOURCES, 0.0))[resource] = flow.served_window
                want = flow.served_window + flow.amount + flow.refused_amount_window
                wanted.setdefault(tenant, dict.fromkeys(RESOURCES, 0.0))[resource] = want
                refused[tenant] = refused.get(tenant, 0) + flow.refused_window
                flow.served_window = flow.refused_amount_window = 0.0
                flow.refused_window = 0
        return {t: TenantWindow(seconds, served[t], wanted[t], refused[t]) for t in served}

    # -- inside --------------------------------------------------------------------------------

    def _retuned_cap(self, cap: _Bucket | None, tenant: str, resource: str, now: float) -> _Bucket | None:
        rate = self._limits.get(tenant, {}).get(resource)
        if rate is None:
            return None
        if cap is None:
            return _Bucket(rate, self.burst, now)
        cap.retune(rate, self.burst, now)
        return cap

    def _enqueue(self, lane: _Lane, tenant: str, flow: _Flow, resource: str, amount: float) -> int:
        item = self._next_item
        self._next_item += 1
        self._items[item] = (tenant, resource, amount)
        flow.queue.append(item)
        flow.live += 1
        flow.amount += amount
        if flow.live == 1:  # newly backlogged: join the round's tail, or park if over its limit
            if flow.cap is not None and not flow.cap.ready():
                flow.parked = True
                lane.parked.add(tenant)
            else:
                lane.active.append(tenant)
        return item

    def _leave(self, lane: _Lane, tenant: str, flow: _Flow) -> None:
        """``tenant`` leaves ``lane``'s round (emptied or parked): its deficit goes, its place too."""
        if lane.active and lane.active[0] == tenant:
            lane.active.popleft()
            lane.fresh = False
        elif tenant in lane.active:
            lane.active.remove(tenant)
        if not flow.live:
            lane.parked.discard(tenant)
            flow.parked = False
        flow.deficit = 0.0
        lane.idle_visits = 0

    def _unpark(self, lane: _Lane, tenant: str, flow: _Flow) -> None:
        lane.parked.discard(tenant)
        flow.parked = False
        lane.active.append(tenant)

    def _release_parked(self, lane: _Lane, now: float) -> None:
        """Move the parked tenants back under their limit to the round's tail."""
        for tenant in sorted(lane.parked):  # sorted: the same order whatever the set's
            flow = lane.flows[tenant]
            assert flow.cap is not None
            flow.cap.refill(now)
            if flow.cap.ready():
                self._unpark(lane, tenant, flow)

    def _serve_lane(self, lane: _Lane, now: float, granted: list[int]) -> float | None:
        """Run ``lane``'s DRR until its bucket is in debt or its round is empty; when to come back
        (the bucket's or a parked tenant's return, whichever is first; None: nothing queued)."""
        self._release_parked(lane, now)
        bucket = lane.bucket
        bucket.refill(now)
        wake: float | None = None
        while lane.active:
            if not bucket.ready():
                wake = bucket.ready_at(now)
                break
            tenant = lane.active[0]
            flow = lane.flows[tenant]
            item, amount = self._head(flow)
            if not lane.fresh:
                if lane.idle_visits >= len(lane.active):
                    self._skip_rounds(lane)
                flow.deficit += self._quantum(lane, tenant)
                lane.fresh = True
            if amount > flow.deficit:
                lane.active.rotate(-1)
                lane.fresh = False
                lane.idle_visits += 1
                continue
            self._grant(lane, tenant, flow, item, amount, now)
            granted.append(item)
        for tenant in lane.parked:
            cap = lane.flows[tenant].cap
            assert cap is not None
            at = cap.ready_at(now)
            wake = at if wake is None or at < wake else wake
        return wake

    def _grant(self, lane: _Lane, tenant: str, flow: _Flow, item: int, amount: float, now: float) -> None:
        flow.queue.popleft()
        del self._items[item]
        flow.live -= 1
        flow.amount -= amount
        flow.deficit -= amount
        flow.served_total += amount
        flow.served_window += amount
        lane.bucket.level -= amount
        lane.idle_visits = 0
        if flow.cap is not None:
            flow.cap.refill(now)
            flow.cap.level -= amount
        if not flow.live:
            self._leave(lane, tenant, flow)
        elif flow.cap is not None and not flow.cap.ready():
            self._leave(lane, tenant, flow)
            flow.parked = True
            lane.parked.add(tenant)

    def _head(self, flow: _Flow) -> tuple[int, float]:
        """The first live item of ``flow`` and its amount (cancelled ids are dropped here)."""
        while flow.queue[0] not in self._items:
            flow.queue.popleft()
        item = flow.queue[0]
        return item, self._items[item][2]

    def _skip_rounds(self, lane: _Lane) -> None:
        """A whole round granted nothing: add at once the k further rounds that would not either."""
        rounds = math.inf
        for tenant in lane.active:
            flow = lane.flows[tenant]
            shortfall = (self._head(flow)[1] - flow.deficit) / self._quantum(lane, tenant)
            rounds = min(rounds, max(0.0, math.ceil(shortfall) - 1.0))
        if 0 < rounds < math.inf:
            for tenant in lane.active:
                lane.flows[tenant].deficit += rounds * self._quantum(lane, tenant)
        lane.idle_visits = 0

    def _quantum(self, lane: _Lane, tenant: str) -> float:
        return self._weights.get(tenant, 1.0) * self.quantum * lane.bucket.rate


def _bank(rate: float, burst: float) -> float:
    return math.inf if math.isinf(rate) else rate * burst  # inf * 0 would be nan


def _rate(capacity: Mapping[str, float], resource: str) -> float:
    rate = capacity.get(resource, math.inf)
    if not rate > 0:
        raise ValueError(f"capacity of {resource} must be > 0 (math.inf: unlimited)")
    return rate
