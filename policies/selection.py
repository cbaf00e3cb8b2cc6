"""Replica selection (D3N's "the next node"; Pisces' RS, C3 and MicroMon): which of a block's
owners (or of a lake's endpoints) to ask, in which order, and where a missed block comes from.

``usable`` is a function of (replicas, per-peer health, now): the ring's owners of a block,
primary first, less the peers a recent failure made suspect. ``sources`` turns that order into
the fetch plan the read path walks: peers until this node itself is an owner, then the lake.

``choose`` orders the candidates where there is a choice (L2 owners with R >= 2, lake
endpoints), by one of ``POLICIES``:

- ``round_robin``: the next in turn (a counter in ``ChoiceState``), the others after it.
- ``least_outstanding``: two random choices (Envoy's default): of two candidates drawn with the
  caller's random number, the one with fewer requests in flight first.
- ``latency``: by the EWMA of response time (Cassandra's dynamic snitch); an untried candidate
  first, so that it is explored. No probing: a candidate it left is seen again only when the
  others' latency rises past its last (the baseline micromon is compared with).
- ``micromon`` (the default): all signals. C3 (Suresh et al., NSDI'15) ranks by its cubic cost
  ``(R - S) + q^3 * S``: R the response time EWMA, S the service time the candidate reports,
  q = 1 + outstanding * n + its own queue, so that a queue, which grows latency superlinearly
  once it builds, is avoided before latency shows it. MicroMon multiplies that cost by
  ``1 + anomaly_weight * score`` of the candidate's anomaly reports (``policies.anomaly``:
  a busy disk or a saturated CPU counts before requests slow down). Pisces' replica selection
  divides it by the tenant's local weight on the candidate (its share of that node's service).
  C3's rate control then keeps a candidate from a stampede: each candidate may be sent a limited
  number of requests per ``rate_window``; when its latency rises the limit is cut to
  ``backoff`` of what it was served and then grows back cubically (as TCP CUBIC and C3 do) over
  ``regain_s`` to it and past it. A candidate over its limit goes after those within theirs
  (unless all are over). Probing: a candidate not tried for ``probe_interval`` goes first, one
  at a time, so that a recovered candidate is seen and none starves.
- ``c3``: C3 as published, the ablation: the cubic queue term, no anomaly reports, no weights.

``micromon`` takes the queue term linear (``queue_exponent`` 1: queue size times service time),
not C3's cube. The cube assumes a server that queues what it is sent; an RGW or a lakegate peer
serves a node's requests in parallel, and with a node's many clients in flight the cube made an
idle candidate 4-5x slower look cheaper than a busy fast one: the replica benchmark's c3 and the
first micromon sent 93% of the reads to a delayed lake endpoint within seconds. A linear term is
what latency-aware balancers use for such servers (peak EWMA in Finagle and tower: latency times
requests in flight).

The caller sends to the first id ``choose`` returns (the rest are its fallbacks, in order) and
reports each answer with ``record_response``; a candidate's send limit starts unlimited and
is set by the first rise of its latency.

The state is a value per process: each worker holds its own ``ChoiceState`` and its own
candidates' outstanding counts and latencies (they describe what that worker sends), while the
anomaly scores are the node's, from heartbeats. Nothing here needs the workers to agree.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class PeerHealth:
    """What this node knows of a peer's health: a request to it failed, so skip it until
    ``suspect_until`` (or until it is heard from, which gives it a fresh ``HEALTHY``)."""

    suspect_until: float = 0.0


HEALTHY = PeerHealth()


def suspected(now: float, suspect_for: float) -> PeerHealth:
    """A peer's health after a request to it failed at ``now``."""
    return PeerHealth(suspect_until=now + suspect_for)


def usable(replicas: Sequence[str], health: Mapping[str, PeerHealth], now: float, *, me: str) -> tuple[str, ...]:
    """The replicas to ask, in order: ``replicas`` (primary first) less suspect peers. This node
    is never skipped (its own copy needs no peer), nor a peer it has no health for."""
    return tuple(r for r in replicas if r == me or health.get(r, HEALTHY).suspect_until <= now)


@dataclass(frozen=True, slots=True)
class FromPeer:
    """Ask the owner ``node_id`` for the block over the peer API."""

    node_id: str


@dataclass(frozen=True, slots=True)
class FromLake:
    """Read the block from the lake; ``owned_here``: this node is the block's owner."""

    owned_here: bool


Source = FromPeer | FromLake


def sources(owners: Sequence[str], me: str) -> tuple[Source, ...]:
    """Where a block this node missed comes from, in order: each owner ahead of this node
    (another node's copy is one hop away), then the lake, as the owner when this node is one.
    A block is one hop from its owner at most: when every peer owner fails, the lake."""
    plan: list[Source] = []
    for owner in owners:
        if owner == me:
            return (*plan, FromLake(owned_here=True))
        plan.append(FromPeer(owner))
    return (*plan, FromLake(owned_here=False))


def after_partial_failure() -> FromLake:
    """Where the rest of a block comes from when a peer failed after sending some of it: the
    lake (a ranged GET of the rest, not another peer), kept like a block fetched for want of a
    reachable owner."""
    return FromLake(owned_here=False)


POLICIES = ("micromon", "round_robin", "least_outstanding", "latency", "c3")

# The least a backed-off candidate may be sent per rate window, so that its recovery is seen.
_MIN_LIMIT = 1.0
# A tenant with no weight on a candidate: the candidate goes last among those it is known on.
_MIN_WEIGHT = 1e-9
# EWMA weight of a response in a candidate's latency baseline (rate control's "latency rose");
# a response that rose moves it this much less, so a long slowness stays one back-off while a
# lasting change still becomes the new normal (after some hundred responses).
_LATENCY_ALPHA = 0.25
_RISEN_DAMPING = 0.1


@dataclass(frozen=True, slots=True)
class Candidate:
    """What this process knows of one candidate. ``outstanding``: its requests in flight to it
    now; ``latency_s``: EWMA of the response times it saw (None: never tried); ``service_s``:
    EWMA of the service time the candidate reports (None: it reports none); ``queue``: its own
    queue as it last reported (heartbeats; None: unknown); ``anomaly``: ``policies.anomaly``'s
    ``node_score`` of its last reports; ``weight``: the tenant's local weight on it (Pisces;
    None: not known); ``last_tried``: when this process last sent it a request."""

    id: str
    outstanding: int = 0
    latency_s: float | None = None
    service_s: float | None = None
    queue: float | None = None
    anomaly: float = 0.0
    weight: float | None = None
    last_tried: float = -math.inf


@dataclass(frozen=True, slots=True)
class ChoiceConfig:
    """How ``micromon`` chooses. ``probe_interval``: a candidate not tried for this long gets one
    request. ``concurrency_weight``: C3's n, the clients' concurrency weighting outstanding
    requests. ``rate_window``: seconds over which sends to one candidate are limited.
    ``anomaly_weight``: how much a unit of anomaly score multiplies the cost. ``backoff``: the
    fraction of its served rate a candidate is cut to when its latency rises (by
    ``latency_rise`` times its baseline); ``regain_s``: how long the cubic takes to give it that
    rate back."""

    probe_interval: float = 1.0
    concurrency_weight: int = 1
    queue_exponent: float = 1.0  # micromon's q^e: 1, queue x service time (c3: C3's 3)
    rate_window: float = 0.2
    anomaly_weight: float = 1.0
    backoff: float = 0.2
    regain_s: float = 1.0
    latency_rise: float = 2.0


@dataclass(frozen=True, slots=True)
class RateState:
    """C3's rate control of one candidate: ``sent`` requests in the send window from
    ``window_start`` (and ``last_sent``); ``received`` responses in the receive window from
    ``receive_start`` and ``receive_rate``, responses per window in the last one; ``latency``,
    the baseline a rise is seen against; ``backed_off_at``, the last response whose latency rose
    (None: never), and ``regain_to``, the rate per window the cubic regains by ``regain_s``;
    ``risen``: the last response's latency rose (a slowness going on)."""

    window_start: float = -math.inf
    sent: int = 0
    last_sent: float = -math.inf
    receive_start: float = -math.inf
    received: int = 0
    receive_rate: float | None = None
    latency: float | None = None
    backed_off_at: float | None = None
    regain_to: float = math.inf
    risen: bool = False


_NEW_RATE = RateState()


@dataclass(frozen=True, slots=True)
class ChoiceState:
    """One process's choice state: ``turn``, round robin's counter, and each candidate's
    ``RateState`` by id."""

    turn: int = 0
    rates: Mapping[str, RateState] = field(default_factory=lambda: MappingProxyType({}))


EMPTY_CHOICE = ChoiceState()


def score(policy: str, c: Candidate, config: ChoiceConfig = ChoiceConfig()) -> float:
    """``c``'s cost under ``policy`` (lower is better): ``micromon``, C3's cubic cost times
    the anomaly penalty over the tenant's weight; ``latency``, the latency EWMA (0 when never
    tried: unexplored first); ``least_outstanding``, requests in flight; ``round_robin``, 0."""
    if policy == "micromon":
        return _cost(c, config)
    if policy == "c3":
        return _cost(_c3_only(c), _C3(config))
    if policy == "latency":
        return c.latency_s if c.latency_s is not None else 0.0
    if policy == "least_outstanding":
        return float(c.outstanding)
    if policy == "round_robin":
        return 0.0
    raise ValueError(f"unknown replica policy {policy!r}: one of {', '.join(POLICIES)}")


def choose(policy: str, candidates: Sequence[Candidate], state: ChoiceState, now: float, rand: float,
           config: ChoiceConfig = ChoiceConfig()) -> tuple[tuple[str, ...], ChoiceState]:
    """The candidates' ids in the order to try (the first is chosen, the rest are fallbacks)
    and the state after sending to the first. ``rand``: uniform in [0, 1), the caller's draw
    (only ``least_outstanding`` uses it)."""
    score(policy, Candidate(""), config)  # an unknown policy fails here, whatever the candidates
    if not candidates:
        return (), state
    if policy == "round_robin":
        turn = state.turn % len(candidates)
        order = [*candidates[turn:], *candidates[:turn]]
        state = replace(state, turn=state.turn + 1)
    elif policy == "least_outstanding":
        order = _two_choices(candidates, rand)
    elif policy == "latency":
        order = sorted(candidates, key=lambda c: (c.latency_s is not None, c.latency_s or 0.0))
    elif policy == "c3":
        order = _micromon([_c3_only(c) for c in candidates], state, now, _C3(config))
    else:
        order = _micromon(candidates, state, now, config)
    ids = tuple(c.id for c in order)
    return ids, _sent(state, ids[0], now, config)


def record_response(state: ChoiceState, candidate: str, now: float, latency_s: float,
                    config: ChoiceConfig = ChoiceConfig()) -> ChoiceState:
    """The state after ``candidate`` answered at ``now`` after ``latency_s``: its receive rate
    counts the response, and when the latency rose (``latency_rise`` times its baseline) its send
    limit backs off to ``backoff`` of the rate it was served before, and the cubic regain starts
    from this response; while the slowness goes on (every response since rose) each response
    restarts the regain towards the same rate, so that a long slowness is not forgotten by the
    time it ends."""
    if not math.isfinite(latency_s) or latency_s < 0:
        return state  # a broken measurement says nothing of the candidate
    rate = _received(state.rates.get(candidate, _NEW_RATE), now, config)
    # risen against its own baseline, and against the others' (their median): a candidate whose
    # latency rose only because the load moved onto it, as the others' did, is no slow one
    # (backing it off sent the load back to the slow candidate it had left)
    others = [r.latency for name, r in state.rates.items() if name != candidate and r.latency is not None]
    risen = (rate.latency is not None and latency_s > config.latency_rise * rate.latency
             and (not others or latency_s > config.latency_rise * statistics.median(others)))
    if risen:
        if not rate.risen:  # a new slowness: regain what it was served before it
            served = max(rate.receive_rate or 0.0, float(rate.received))
            rate = replace(rate, regain_to=max(min(send_limit(rate, now, config), served), _MIN_LIMIT))
        rate = replace(rate, backed_off_at=now)
    alpha = _LATENCY_ALPHA * (_RISEN_DAMPING if risen else 1.0)
    latency = latency_s if rate.latency is None else rate.latency + alpha * (latency_s - rate.latency)
    return replace(state, rates=_with(state.rates, candidate, replace(rate, latency=latency, risen=risen)))


def send_limit(rate: RateState, now: float, config: ChoiceConfig = ChoiceConfig()) -> float:
    """How many requests per ``rate_window`` a candidate may be sent at ``now``: no limit until
    its latency first rose; after, CUBIC's curve from ``backoff * regain_to`` (at the back-off)
    through ``regain_to`` (``regain_s`` later, where it flattens) and growing past it."""
    if rate.backed_off_at is None:
        return math.inf
    elapsed = (now - rate.backed_off_at) / config.regain_s - 1.0
    return max(_MIN_LIMIT, rate.regain_to * (1.0 + (1.0 - config.backoff) * elapsed**3))


def _C3(config: ChoiceConfig) -> ChoiceConfig:
    """C3 as published: the cubic queue term."""
    return replace(config, queue_exponent=3.0)


def _cost(c: Candidate, config: ChoiceConfig) -> float:
    """C3's ``(R - S) + q^e * S`` (R and S each standing for the other when unknown; 0 when
    untried; ``e`` is 3 for ``c3``, 1 for ``micromon``), times MicroMon's anomaly penalty, over
    Pisces' local weight when known."""
    response = c.latency_s if c.latency_s is not None else c.service_s
    service = c.service_s if c.service_s is not None else c.latency_s
    if response is None or service is None:
        return 0.0
    queue = 1.0 + c.outstanding * config.concurrency_weight + max(c.queue or 0.0, 0.0)
    cost = (max(response - service, 0.0) + float(queue**config.queue_exponent) * service) * (
        1.0 + config.anomaly_weight * c.anomaly)
    return cost if c.weight is None else cost / max(c.weight, _MIN_WEIGHT)


def _c3_only(c: Candidate) -> Candidate:
    """``c`` as C3 alone sees it: queue and service time, no anomaly reports, no weights."""
    return replace(c, anomaly=0.0, weight=None)


def _two_choices(candidates: Sequence[Candidate], rand: float) -> list[Candidate]:
    """Two candidates drawn by ``rand`` (one of the n*(n-1) ordered pairs), the one with fewer
    outstanding first (the first drawn on a tie), then the rest by outstanding."""
    n = len(candidates)
    if n == 1:
        return list(candidates)
    draw = min(int(rand * n * (n - 1)), n * (n - 1) - 1)
    first, second = divmod(draw, n - 1)
    second += second >= first
    pair = sorted((candidates[first], candidates[second]), key=lambda c: c.outstanding)
    rest = sorted((c for i, c in enumerate(candidates) if i not in (first, second)), key=lambda c: c.outstanding)
    return [*pair, *rest]


def _micromon(candidates: Sequence[Candidate], state: ChoiceState, now: float, config: ChoiceConfig) -> list[Candidate]:
    """By cost, those within their send limit ahead of those over it (unless all are over),
    and the most overdue candidate for a probe first."""
    ranked = sorted(_weights_filled(candidates), key=lambda c: _cost(c, config))
    over = {c.id for c in ranked if _over_limit(state.rates.get(c.id, _NEW_RATE), now, config)}
    order = [*(c for c in ranked if c.id not in over), *(c for c in ranked if c.id in over)]
    due = [c for c in order if now - _last_tried(c, state) >= config.probe_interval]
    if not due:
        return order
    probe = min(due, key=lambda c: _last_tried(c, state))
    return [probe, *(c for c in order if c is not probe)]


def _weights_filled(candidates: Sequence[Candidate]) -> list[Candidate]:
    """The candidates, those with no known weight given the mean of the known ones (so that a
    weight missing on one does not rank it against the others' weights by accident)."""
    known = [c.weight for c in candidates if c.weight is not None]
    if not known or len(known) == len(candidates):
        return list(candidates)
    mean = sum(known) / len(known)
    return [c if c.weight is not None else replace(c, weight=mean) for c in candidates]


def _over_limit(rate: RateState, now: float, config: ChoiceConfig) -> bool:
    in_window = now < rate.window_start + config.rate_window
    return in_window and rate.sent >= send_limit(rate, now, config)


def _last_tried(c: Candidate, state: ChoiceState) -> float:
    """When ``c`` was last sent a request, by the caller's account or this state's (whichever is
    later: a probe chosen but not yet counted by the caller is not probed again)."""
    return max(c.last_tried, state.rates.get(c.id, _NEW_RATE).last_sent)


def _sent(state: ChoiceState, candidate: str, now: float, config: ChoiceConfig) -> ChoiceState:
    rate = state.rates.get(candidate, _NEW_RATE)
    if now >= rate.window_start + config.rate_window:
        rate = replace(rate, window_start=now, sent=0)
    rate = replace(rate, sent=rate.sent + 1, last_sent=now)
    return replace(state, rates=_with(state.rates, candidate, rate))


def _received(rate: RateState, now: float, config: ChoiceConfig) -> RateState:
    """``rate`` counting one more response at ``now``; a window that ended gives the receive rate
    (per window, over however long it lasted: an idle spell is a low rate)."""
    if now >= rate.receive_start + config.rate_window:
        last = None if math.isinf(rate.receive_start) else rate.received * config.rate_window / (now - rate.receive_start)
        rate = replace(rate, receive_start=now, received=0, receive_rate=last)
    return replace(rate, received=rate.received + 1)


def _with(rates: Mapping[str, RateState], candidate: str, rate: RateState) -> Mapping[str, RateState]:
    return MappingProxyType({**rates, candidate: rate})
