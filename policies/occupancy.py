"""Tenant-fair cache occupancy (issue 12, item 4): which tenant a full cache tier evicts from.

A tenant's fair share of a tier is ``capacity * weight / sum of weights`` over the tenants that
hold bytes there or are putting now (an absent tenant's share goes to the others: work
conserving); tenants not named in the weights weigh 1.0. When room is needed, the victim tenant
is the one most over its share (largest held / share); when nobody is over share there is none,
and the tier evicts in its plain LRU/LFU order.

A block held by k tenants counts size/k for each (``split``): so the shares of every block sum
to the bytes stored, and a hot block shared by many weighs little on each of them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

DEFAULT_WEIGHT = 1.0


def split(size: int, holders: int) -> list[int]:
    """``size`` bytes cut into ``holders`` whole parts that sum to it (the first get the rest)."""
    if holders <= 0:
        return []
    base, rest = divmod(size, holders)
    return [base + (i < rest) for i in range(holders)]


def checked_weights(weights: Mapping[str, float]) -> dict[str, float]:
    """The weights as a dict, each a positive finite number (ValueError otherwise)."""
    for tenant, weight in weights.items():
        if not (math.isfinite(weight) and weight > 0):
            raise ValueError(f"tenant {tenant!r}: weight must be a positive number, not {weight!r}")
    return dict(weights)


def fair_shares(capacity: int, weights: Mapping[str, float], tenants: Iterable[str]) -> dict[str, float]:
    """Each of ``tenants`` (those holding bytes or putting) -> its share of ``capacity`` bytes."""
    named = {t: weights.get(t, DEFAULT_WEIGHT) for t in tenants}
    total = sum(named.values())
    return {t: capacity * w / total for t, w in named.items()} if total else {}


def victim_tenant(
    held: Mapping[str, int], weights: Mapping[str, float], capacity: int, putting: str | None = None
) -> str | None:
    """The tenant to evict from: the one most over its fair share (ties by name), or None when
    no tenant holds more than its share. ``putting`` counts as active even if it holds nothing."""
    active = [t for t, size in held.items() if size > 0]
    if putting is not None and putting not in active:
        active.append(putting)
    shares = fair_shares(capacity, weights, active)
    over = [(held.get(t, 0) / share if share else math.inf, t) for t, share in shares.items()
            if held.get(t, 0) > share]
    if not over:
        return None
    return min(over, key=lambda item: (-item[0], item[1]))[1]
