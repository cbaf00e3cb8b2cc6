"""Partition placement (D3N's L2 placement; later Pisces' PP): which nodes own each partition.

The decision half of the ring (Swift's builder): nodes and their weights -> a table of R owner
ids per partition, primary first. ``cachetier.cluster.ring`` applies the table and does the
runtime lookup (block -> partition -> owners).

Today's plan is a consistent-hash ring (uhashring, md5 points, no randomness): every node that
sees the same members plans the same table, and when a node joins or leaves only the
partitions it gains or loses move.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from uhashring import HashRing

POINTS = 160  # ring points per unit of weight (uhashring's default per node)

# partition -> owner ids, primary first
Table = tuple[tuple[str, ...], ...]


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node placement may give partitions to, and its share of them (1.0 = an even share)."""

    id: str
    weight: float = 1.0


def plan(nodes: Iterable[Candidate], partitions: int, replicas: int) -> Table:
    """``min(replicas, len(nodes))`` distinct owners for each of ``partitions``, by weight.
    The order of ``nodes`` does not matter; a repeated id counts once (its last weight)."""
    weights = {node.id: node.weight for node in nodes}
    if not weights:
        raise ValueError("a ring needs at least one member")
    if partitions < 1 or replicas < 1:
        raise ValueError("partitions and replicas must be >= 1")
    # uhashring weights are whole numbers: a weight becomes points on the ring instead
    ring = HashRing(nodes={i: {"vnodes": max(1, round(POINTS * w))} for i, w in weights.items()})
    count = min(replicas, len(weights))
    return tuple(
        tuple(node["nodename"] for node in ring.range(f"partition-{partition}", size=count, unique=True))
        for partition in range(partitions)
    )
