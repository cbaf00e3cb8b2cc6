"""Replica selection (D3N's "the next node"; later Pisces' RS, C3 and MicroMon): which of a
block's owners to ask, in which order, and where a missed block comes from.

``usable`` is a function of (replicas, per-peer health, now): the ring's owners of a block,
primary first, less the peers a recent failure made suspect. ``sources`` turns that order into
the fetch plan the read path walks: peers until this node itself is an owner, then the lake.
The replica-choice issue extends ``PeerHealth`` (queue length, service time, anomalies) and
the order, not the shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


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
