"""Flow control of write-back's background work (Pfimbi, MSST 2016; issue 14): whether a new
write is journalled, written through or refused, whether a node takes async peer copies, how many
background transfers run at once, and which queued transfer starts next.

A write-back PUT is journalled on the receiving node and on K peers before its 200; afterwards
the node flushes it to the lake (replica position 1) and makes the async peer copies beyond K
(positions 2, 3, ...). Until the flush is done the journalled bytes are dirty.

Thresholds (Pfimbi's T and delta; dirty bytes of this node's journal):

- ``intake``: a new write-back write is journalled while dirty + incoming <= T + delta; past
  that it is written through to the lake (the journal must not fill the disk), or refused with
  503 SlowDown when the lake is down (nowhere safe to put it).
- ``async_copy_allowed``: an async copy is taken (or started) only while dirty + incoming <= T;
  above T background copying is held back so the cache disk serves foreground I/O, while the lake
  flushes, which lower dirty, go on.
- ``background_slots``: background transfers yield to foreground lake reads (one slot while
  reads wait, so background still moves), except when dirty > T + delta/2: then the journal must
  drain before new writes fall back to write-through, and it gets every slot.

Scheduling (``decide``): hierarchical start-time fair queuing (SFQ, Goyal et al.) by bytes, two
levels as in Pfimbi's weight tree: tenants (weighted), then within a tenant the replica position
classes (weights 100:10:1 by default, Pfimbi's figure; positions past the last weight take the
last). Each tenant and each (tenant, position) class has a virtual time: the finish tag of its
last started job, advanced by size / weight when a job starts. A job's start tag is its flow's
virtual time, raised to the level's virtual clock; the clock is the start tag of the last job
started at that level (the root's for tenants, each tenant's own for its classes). Raising to the
clock is what makes an idle tenant or class re-enter at "now" in virtual time: it banks no credit
while idle (nor while all its jobs are held back by per-key order). Among flows with an eligible
job the lowest start tag wins (ties: tenant name, then the earlier position), then the job with
the lowest seq (ties: queue order). SFQ rather than WF2Q: a job's size is charged at its start,
so no finish-time estimate is needed, and jobs that run for long on several slots at once change
nothing in the tags.

Per-key order: the jobs of one ``order_key`` (an object's versions) run one at a time, lowest
seq first: a job is eligible only when no job of its key is running (including one started
earlier in the same decision) and no queued job of its key has a lower seq.

Flow entries at or below their level's clock say no more than an absent entry, so ``decide``
drops them: the state stays as small as the set of tenants and classes ahead of the clock. When a
tenant has nothing queued or running its clock moves to its classes' last finish tag, and when no
tenant has, the root's clock to the tenants' (SFQ's rule at the end of a busy period), so an idle
node keeps no state at all.

The policy never reads a clock; ``now`` is taken for the house signature and unused: virtual
time here advances with bytes started, not with seconds.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

POSITION_WEIGHTS: tuple[float, ...] = (100.0, 10.0, 1.0)  # position 1, 2, 3 and beyond

SOFT_SHARE = 0.10  # T: a tenth of the cache disk (Pfimbi-like)
DELTA_SHARE = 0.05  # delta: a twentieth more


@dataclass(frozen=True)
class Thresholds:
    """``soft``: T, bytes of dirty (not yet in the lake) journal data on this node; ``delta``:
    T + delta is the hard bound."""

    soft: int
    delta: int

    def __post_init__(self) -> None:
        if self.soft < 0 or self.delta < 0:
            raise ValueError(f"thresholds must be >= 0, not soft={self.soft!r} delta={self.delta!r}")

    @property
    def hard(self) -> int:
        return self.soft + self.delta

    @classmethod
    def for_disk(cls, cache_bytes: int, soft: int | None = None, delta: int | None = None) -> Thresholds:
        """Defaults relative to the cache disk: T = 10% of ``cache_bytes``, delta = 5%; explicit
        values win. Negative values are refused (ValueError)."""
        if cache_bytes < 0:
            raise ValueError(f"cache_bytes must be >= 0, not {cache_bytes!r}")
        return cls(
            soft=math.floor(cache_bytes * SOFT_SHARE) if soft is None else soft,
            delta=math.floor(cache_bytes * DELTA_SHARE) if delta is None else delta,
        )


class Intake(enum.Enum):
    WRITE_BACK = "write-back"
    WRITE_THROUGH = "write-through"
    SLOW_DOWN = "slow-down"


def intake(dirty: int, incoming: int, thresholds: Thresholds, lake_up: bool) -> Intake:
    """What a new write-back write of ``incoming`` bytes gets: WRITE_BACK while dirty + incoming
    <= T + delta; past it WRITE_THROUGH when the lake is up, SLOW_DOWN (503) when it is down."""
    if dirty + incoming <= thresholds.hard:
        return Intake.WRITE_BACK
    return Intake.WRITE_THROUGH if lake_up else Intake.SLOW_DOWN


def async_copy_allowed(dirty: int, incoming: int, thresholds: Thresholds) -> bool:
    """Whether this node takes (or starts) an async peer copy of ``incoming`` bytes: only while
    dirty + incoming <= T (above it the cache disk serves foreground I/O; lake flushes go on)."""
    return dirty + incoming <= thresholds.soft


def background_slots(max_slots: int, foreground_waiting: bool, dirty: int, thresholds: Thresholds) -> int:
    """How many background transfers may run at once: ``max_slots``, or 1 while foreground lake
    reads wait, unless dirty > T + delta/2 (the journal must drain: ``max_slots`` again)."""
    if max_slots < 0:
        raise ValueError(f"max_slots must be >= 0, not {max_slots!r}")
    if foreground_waiting and dirty * 2 <= thresholds.soft * 2 + thresholds.delta:
        return min(1, max_slots)
    return max_slots


BACKGROUND_SHARE = 0.1  # of the node's lake budget background work may use while foreground reads wait


def background_rate(budget: float, foreground_waiting: bool, dirty: int, thresholds: Thresholds,
                    share: float = BACKGROUND_SHARE) -> float:
    """Bytes/s the background work may send to the lake: unpaced (inf) while no foreground lake
    read waits, or when dirty > T + delta/2 (the journal must drain); else ``share`` of the
    node's lake ``budget`` (bytes/s; inf: no budget, so nothing to pace by). Foreground first,
    the background still moving (Pfimbi); the slots alone cannot do it: one upload still takes
    its TCP share of a congested link (measured: the drain as long as with four)."""
    if not foreground_waiting or dirty * 2 > thresholds.soft * 2 + thresholds.delta:
        return math.inf
    return share * budget


@dataclass(frozen=True)
class Job:
    """One background transfer. ``position``: 1 = the lake flush of a version, 2, 3, ... = async
    peer copies by place in the replica order; ``size`` in bytes; the jobs of one ``order_key``
    ("bucket/key") run one at a time, lowest ``seq`` first."""

    id: str
    tenant: str
    position: int
    size: int
    order_key: str
    seq: int

    def __post_init__(self) -> None:
        if self.position < 1 or self.size < 0:
            raise ValueError(f"job {self.id!r}: position must be >= 1 and size >= 0")


@dataclass(frozen=True)
class Snapshot:
    """The queued and running jobs, the ``slots`` background transfers allowed at once now, the
    tenants' weights (a missing tenant weighs 1.0) and the weights of positions 1, 2, ... (the
    last one for every position beyond)."""

    queued: tuple[Job, ...]
    running: tuple[Job, ...]
    slots: int
    tenant_weights: Mapping[str, float] = field(default_factory=dict)
    position_weights: tuple[float, ...] = POSITION_WEIGHTS

    def __post_init__(self) -> None:
        if self.slots < 0:
            raise ValueError(f"slots must be >= 0, not {self.slots!r}")
        if not self.position_weights:
            raise ValueError("position_weights must name at least position 1")
        for weight in (*self.tenant_weights.values(), *self.position_weights):
            if not (math.isfinite(weight) and weight > 0):
                raise ValueError(f"weights must be finite and > 0, not {weight!r}")

    def tenant_weight(self, tenant: str) -> float:
        return self.tenant_weights.get(tenant, 1.0)

    def position_weight(self, position: int) -> float:
        weights = self.position_weights
        return weights[min(position, len(weights)) - 1]


_Class = tuple[str, int]  # (tenant, position)


@dataclass(frozen=True)
class SchedulerState:
    """Virtual times (bytes / weight): ``clock`` is the root's (start tag of the last job
    started), ``tenants`` each tenant's finish tag, ``tenant_clocks`` each tenant's own clock
    over its classes, ``classes`` each (tenant, position) class's finish tag. Never mutated:
    ``decide`` returns a new one."""

    clock: float = 0.0
    tenants: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    tenant_clocks: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    classes: Mapping[_Class, float] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def initial(cls) -> SchedulerState:
        return cls()


@dataclass(frozen=True)
class Decision:
    """The queued jobs to start now, in order, and the state to pass to the next ``decide``."""

    start: tuple[Job, ...]
    state: SchedulerState


def decide(state: SchedulerState, snapshot: Snapshot, now: float) -> Decision:
    """Start up to slots - len(running) queued jobs in hierarchical SFQ order (module docstring)."""
    # Measured: 10,000 queued jobs (7 tenants, 4 positions), 8 slots: ~10 ms a decision.
    del now  # virtual time advances with bytes started, not seconds
    tags = _Tags(state)
    waiting = _dedup(snapshot.queued)
    eligible = _eligible(waiting, {job.order_key for job in snapshot.running})
    started: list[Job] = []
    for _ in range(max(0, snapshot.slots - len(snapshot.running))):
        job = _next(tags, eligible)
        if job is None:
            break
        tags.charge(job, snapshot)
        started.append(job)
        # its key now runs: no other job of it may start in this decision
        eligible = [other for other in eligible if other.order_key != job.order_key]
    busy = {job.tenant for job in (*waiting, *snapshot.running)}
    return Decision(tuple(started), tags.state(busy))


class _Tags:
    """The state's virtual times, updated while one decision is made."""

    def __init__(self, state: SchedulerState) -> None:
        self.clock = state.clock
        self.tenants = dict(state.tenants)
        self.tenant_clocks = dict(state.tenant_clocks)
        self.classes = dict(state.classes)

    def tenant_start(self, tenant: str) -> float:
        return max(self.tenants.get(tenant, 0.0), self.clock)

    def class_start(self, tenant: str, position: int) -> float:
        return max(self.classes.get((tenant, position), 0.0), self.tenant_clocks.get(tenant, 0.0))

    def charge(self, job: Job, snapshot: Snapshot) -> None:
        tenant, position = job.tenant, job.position
        start = self.tenant_start(tenant)
        self.clock = start
        self.tenants[tenant] = start + job.size / snapshot.tenant_weight(tenant)
        class_start = self.class_start(tenant, position)
        self.tenant_clocks[tenant] = class_start
        self.classes[(tenant, position)] = class_start + job.size / snapshot.position_weight(position)

    def state(self, busy: set[str]) -> SchedulerState:
        """The state, without the entries that say no more than their absence (at or below their
        level's clock). A tenant with no job queued or running ends its busy period: its clock
        moves to its classes' last finish tag (SFQ's rule for an idle server), and so does the
        root's when no tenant is busy."""
        for tenant in set(self.tenant_clocks) - busy:
            finishes = [v for c, v in self.classes.items() if c[0] == tenant]
            self.tenant_clocks[tenant] = max([self.tenant_clocks[tenant], *finishes])
        if not busy:
            self.clock = max([self.clock, *self.tenants.values()])
        tenants = {t: v for t, v in self.tenants.items() if v > self.clock}
        classes = {c: v for c, v in self.classes.items() if v > self.tenant_clocks.get(c[0], 0.0)}
        clocks = {t: v for t, v in self.tenant_clocks.items() if any(c[0] == t for c in classes)}
        return SchedulerState(
            self.clock, MappingProxyType(tenants), MappingProxyType(clocks), MappingProxyType(classes)
        )


def _dedup(jobs: Iterable[Job]) -> list[Job]:
    """The queued jobs in queue order, each id once (a repeated id would otherwise start twice)."""
    seen: set[str] = set()
    kept = []
    for job in jobs:
        if job.id not in seen:
            seen.add(job.id)
            kept.append(job)
    return kept


def _eligible(waiting: list[Job], running_keys: set[str]) -> list[Job]:
    """The waiting jobs that may start: none of their key running, none of their key queued with
    a lower seq."""
    lowest: dict[str, int] = {}
    for job in waiting:
        lowest[job.order_key] = min(job.seq, lowest.get(job.order_key, job.seq))
    return [job for job in waiting if job.order_key not in running_keys and job.seq == lowest[job.order_key]]


def _next(tags: _Tags, eligible: list[Job]) -> Job | None:
    """The eligible job to start next: lowest tenant start tag, then lowest class start tag, then
    lowest seq (ties: tenant name, earlier position, queue order)."""
    if not eligible:
        return None
    tenant = min({job.tenant for job in eligible}, key=lambda t: (tags.tenant_start(t), t))
    mine = [job for job in eligible if job.tenant == tenant]
    position = min({job.position for job in mine}, key=lambda p: (tags.class_start(tenant, p), p))
    return min((job for job in mine if job.position == position), key=lambda job: job.seq)
