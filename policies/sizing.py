"""The L1/L2 split of a node's cache (D3N's cache management, issue 13): how many of its C bytes
of SSD serve as L1 and how many as its share of L2.

L1 holds this node's clients' reads of blocks other nodes own; L2 holds the blocks this node owns,
read by its own clients and by peers. D3N chooses the L1 size x that minimises the time the
node's misses cost per second::

    cost(x) = l1.bytes_per_s * l1.curve(x)     * l1.cost_per_byte
            + l2.bytes_per_s * l2.curve(C - x) * l2.cost_per_byte

Conventions: a curve is a byte miss ratio as a function of cache bytes (piecewise linear between
its points, 1.0 at size 0 unless a point says otherwise, flat past its last point); a stream's
``bytes_per_s`` is the bytes it references per second and ``cost_per_byte`` the seconds a missed
byte costs (for L1: a fetch from the owner's L2; for L2: a fetch from the lake). So a congested
lake link (dear L2 misses) pushes space to L2, a congested cluster network (dear L1 misses) or
high locality with a small working set pushes it to L1: the directions of D3N's slides.

The optimum is searched over candidate sizes, multiples of ``grain`` between the bounds
(``min_l1 * C`` and ``max_l1 * C``, themselves candidates), coarsened to at most about
``MAX_CANDIDATES`` sizes; ties go to the candidate closest to the current split. A node alone
has no L2: L1 takes everything at once. With no traffic on either tier there is nothing to
decide on, and the split holds.

Why steps and hysteresis: a resize evicts, and the evicted bytes are refetched at the very cost
being minimised; the curves are estimates from sampled, decayed histories, so an optimum that
jumps with their noise would empty and refill both tiers every epoch. So a split moves only
when the target is cheaper than the current split by more than ``hysteresis`` of its cost, and
then by at most ``step * C`` per epoch (the curves measured after each step correct the next).
A current split outside the bounds (bounds changed, capacity changed) is clamped into them
first, even when that moves more than a step.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass

MAX_CANDIDATES = 4096  # curves are evaluated at each: bounded whatever C / grain


@dataclass(frozen=True)
class Curve:
    """A byte miss ratio per cache size: ``points`` are (cache bytes, miss ratio), sizes strictly
    increasing and >= 0, ratios in [0, 1]. No points: every size misses everything."""

    points: tuple[tuple[int, float], ...]

    def __post_init__(self) -> None:
        previous = -1
        for size, ratio in self.points:
            if size <= previous:
                raise ValueError(f"curve sizes must be >= 0 and strictly increasing, not {size!r} after {previous!r}")
            if not 0.0 <= ratio <= 1.0:  # also refuses NaN
                raise ValueError(f"miss ratio at {size} bytes must be in [0, 1], not {ratio!r}")
            previous = size

    def at(self, size: int) -> float:
        """The miss ratio with ``size`` bytes of cache (interpolated linearly between points; from
        (0, 1.0) below a first point past 0; the last ratio beyond the last point)."""
        points = self.points
        if not points:
            return 1.0
        i = bisect.bisect_left(points, size, key=lambda point: point[0])
        if i == len(points):
            return points[-1][1]
        right_size, right_ratio = points[i]
        if right_size == size or (i == 0 and right_size == 0):
            return right_ratio
        left_size, left_ratio = points[i - 1] if i else (0, 1.0)
        if size <= left_size:  # below 0: as at 0
            return left_ratio
        return left_ratio + (right_ratio - left_ratio) * (size - left_size) / (right_size - left_size)


def curve_from(points: Iterable[tuple[int, float]]) -> Curve:
    """A Curve from estimated points: sorted by size, the first of each size kept, ratios clipped
    into [0, 1] and made non-increasing (a running minimum: more cache never misses more)."""
    kept: list[tuple[int, float]] = []
    for size, ratio in sorted(points, key=lambda point: point[0]):
        if kept and kept[-1][0] == size:
            continue
        floor = kept[-1][1] if kept else 1.0
        kept.append((size, min(max(ratio, 0.0), 1.0, floor)))
    return Curve(tuple(kept))


@dataclass(frozen=True)
class Stream:
    """One tier's traffic: its miss-ratio ``curve``, the ``bytes_per_s`` it references and the
    seconds each missed byte costs (``cost_per_byte``)."""

    curve: Curve
    bytes_per_s: float
    cost_per_byte: float

    def __post_init__(self) -> None:
        for name in ("bytes_per_s", "cost_per_byte"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, not {value!r}")

    def cost(self, size: int) -> float:
        """Seconds per second its misses cost with ``size`` bytes of cache."""
        return self.bytes_per_s * self.curve.at(size) * self.cost_per_byte


@dataclass(frozen=True)
class SizingConfig:
    """``min_l1``, ``max_l1``: L1's bounds, fractions of the total; ``step``: the most of the
    total that moves per epoch; ``grain``: candidate L1 sizes are its multiples (and the bounds);
    ``hysteresis``: move only when the target is cheaper than the current split by more than
    this fraction of its cost."""

    min_l1: float = 0.1
    max_l1: float = 0.9
    step: float = 0.1
    grain: int = 4 << 20
    hysteresis: float = 0.02

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_l1 <= self.max_l1 <= 1.0:
            raise ValueError(f"need 0 <= min_l1 <= max_l1 <= 1, not {self.min_l1!r}, {self.max_l1!r}")
        if not 0.0 < self.step <= 1.0:
            raise ValueError(f"step must be in (0, 1], not {self.step!r}")
        if self.grain < 1:
            raise ValueError(f"grain must be >= 1 byte, not {self.grain!r}")
        if not (math.isfinite(self.hysteresis) and self.hysteresis >= 0):
            raise ValueError(f"hysteresis must be a finite number >= 0, not {self.hysteresis!r}")


@dataclass(frozen=True)
class Snapshot:
    """The node's ``total`` cache bytes, its ``current_l1`` size and both tiers' traffic.
    ``l1`` None (or no bytes per second): no evidence for L1; ``l2`` None: this node has no L2
    (it is alone), so L1 takes everything."""

    total: int
    current_l1: int
    l1: Stream | None
    l2: Stream | None

    def __post_init__(self) -> None:
        if self.total < 0 or self.current_l1 < 0:
            raise ValueError(f"sizes must be >= 0, not total={self.total!r} current_l1={self.current_l1!r}")


@dataclass(frozen=True)
class Decision:
    """``target_l1``: the cheapest candidate within bounds; ``next_l1``/``next_l2``: this epoch's
    split (a bounded step towards the target); the costs (seconds per second) of the current
    split (clamped into bounds) and of the target; ``reason``: "alone", "no evidence", "hold"
    (within hysteresis) or "move"."""

    target_l1: int
    next_l1: int
    next_l2: int
    cost_now: float
    cost_target: float
    reason: str


def cost(snapshot: Snapshot, l1_bytes: int) -> float:
    """D3N's cost of giving L1 ``l1_bytes`` of the total: seconds of miss time per second."""
    l1 = snapshot.l1.cost(l1_bytes) if snapshot.l1 is not None else 0.0
    l2 = snapshot.l2.cost(snapshot.total - l1_bytes) if snapshot.l2 is not None else 0.0
    return l1 + l2


def bounds(config: SizingConfig, total: int) -> tuple[int, int]:
    """L1's smallest and largest size, in bytes, for a total of ``total``."""
    return round(config.min_l1 * total), round(config.max_l1 * total)


def candidates(config: SizingConfig, total: int) -> list[int]:
    """The L1 sizes the optimum is chosen from, increasing: the bounds and the multiples of the
    grain between them (of a multiple of it, when there would be more than MAX_CANDIDATES)."""
    low, high = bounds(config, total)
    grain = config.grain
    count = high // grain - -(-low // grain) + 1
    if count > MAX_CANDIDATES:
        grain *= -(-count // MAX_CANDIDATES)
    first = -(-low // grain) * grain
    return sorted({low, high, *range(first, high + 1, grain)})


def decide(config: SizingConfig, snapshot: Snapshot) -> Decision:
    """This epoch's split of ``snapshot.total`` between L1 and L2 (the rules: module docstring)."""
    total = snapshot.total
    if snapshot.l2 is None:
        return Decision(total, total, 0, cost(snapshot, snapshot.current_l1), cost(snapshot, total), "alone")
    low, high = bounds(config, total)
    current = min(max(snapshot.current_l1, low), high)
    if not (_has_evidence(snapshot.l1) or _has_evidence(snapshot.l2)):
        return Decision(current, current, total - current, 0.0, 0.0, "no evidence")
    target, cost_target = _cheapest(snapshot, candidates(config, total), current)
    cost_now = cost(snapshot, current)
    if cost_now - cost_target <= config.hysteresis * cost_now:
        return Decision(target, current, total - current, cost_now, cost_target, "hold")
    stride = max(1, math.floor(config.step * total))
    next_l1 = current + max(-stride, min(stride, target - current))
    return Decision(target, next_l1, total - next_l1, cost_now, cost_target, "move")


def _has_evidence(stream: Stream | None) -> bool:
    return stream is not None and stream.bytes_per_s > 0


# Costs this close count as equal: interpolation's rounding must not break ties for a far size.
_TIE = 1e-9


def _cheapest(snapshot: Snapshot, sizes: list[int], current: int) -> tuple[int, float]:
    """The cheapest of ``sizes`` and its cost; among costs equal (to _TIE), the closest to
    ``current``, then the smaller."""
    costs = [(cost(snapshot, size), size) for size in sizes]
    least = min(c for c, _ in costs)
    tied = [(abs(size - current), size, c) for c, size in costs if c <= least + _TIE * abs(least)]
    _, size, best = min(tied)
    return size, best
