"""Partition placement (D3N's L2 placement, and Pisces' PP): which nodes own each partition.

The decision half of the ring (Swift's builder): nodes and their weights -> a table of R owner
ids per partition, primary first. ``cachetier.cluster.ring`` applies the table and does the
runtime lookup (block -> partition -> owners).

Today's plan is a consistent-hash ring (uhashring, md5 points, no randomness): every node that
sees the same members plans the same table, and when a node joins or leaves only the
partitions it gains or loses move.

``rebalance`` is Pisces' partition placement on top of that table: from each partition's
per-tenant demand and what each node's local weights can serve each tenant, it moves a few
primaries off nodes where some tenant wants more than the node can serve it (bin packing,
largest excess first). The ring applies the returned table on every node like a planned one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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


@dataclass(frozen=True, slots=True)
class Move:
    """``partition``'s primary moves from ``from_node`` to ``to_node``."""

    partition: int
    from_node: str
    to_node: str


# Below this a reduction of the overload is rounding, not a reason to move a partition.
EPSILON = 1e-9

Load = dict[str, dict[str, float]]  # node -> tenant -> demand its primaries bring


def rebalance(
    table: Table,
    demand: Mapping[int, Mapping[str, float]],
    servable: Mapping[str, Mapping[str, float]],
    *,
    max_moves: int,
) -> tuple[Table, tuple[Move, ...]]:
    """``table`` with at most ``max_moves`` primaries moved, and the moves, in order.

    - ``demand``: partition -> tenant -> demand its primary serves (missing: none);
    - ``servable``: node -> tenant -> what that node's local weights can serve the tenant, in
      the same units (capacity * weight / sum of weights). Only its nodes give or take partitions:
      a primary on a node absent from it stays where it is.

    The overload is the sum over nodes and tenants of demand beyond what the node can serve. Each
    move takes the worst (node, tenant) excess that some move can lower, and moves that node's
    partition (one that tenant wants) to the node that lowers the overload most; ties go to a
    node already holding a replica (nothing to fetch), then the lower partition and node id. A
    move that does not lower the overload is not made; no partition moves twice in one call. The new primary swaps places with it when it
    was a replica, else it takes the old primary's place (owners stay distinct). A table with no
    overload comes back unchanged with no moves; the same arguments give the same answer.
    """
    if max_moves < 0:
        raise ValueError("max_moves must be >= 0")
    owners = [list(row) for row in table]
    load = _load(owners, demand, servable)
    moves: list[Move] = []
    while len(moves) < max_moves:
        move = _best_move(owners, demand, servable, load, {move.partition for move in moves})
        if move is None:
            break
        moves.append(move)
        _apply(owners, demand, load, move)
    return tuple(tuple(row) for row in owners), tuple(moves)


def _load(owners: list[list[str]], demand: Mapping[int, Mapping[str, float]], servable: Mapping[str, Mapping[str, float]]) -> Load:
    load: Load = {node: {} for node in servable}
    for partition, row in enumerate(owners):
        if row and row[0] in load:
            for tenant, wanted in demand.get(partition, {}).items():
                load[row[0]][tenant] = load[row[0]].get(tenant, 0.0) + wanted
    return load


def _change(load: Mapping[str, float], can_serve: Mapping[str, float], wants: Mapping[str, float], sign: float) -> float:
    """How much one node's excess grows when ``wants`` is added to its load (``sign`` 1) or taken
    off it (-1): only the partition's tenants change, so only they are counted."""
    change = 0.0
    for tenant, wanted in wants.items():
        before = load.get(tenant, 0.0) - can_serve.get(tenant, 0.0)
        change += max(0.0, before + sign * wanted) - max(0.0, before)
    return change


def _best_move(
    owners: list[list[str]],
    demand: Mapping[int, Mapping[str, float]],
    servable: Mapping[str, Mapping[str, float]],
    load: Load,
    moved: set[int],
) -> Move | None:
    """The move that lowers the overload most, for the worst (node, tenant) excess that has one."""
    excesses = sorted(
        ((wanted - servable[node].get(tenant, 0.0), node, tenant) for node in load for tenant, wanted in load[node].items()),
        key=lambda item: (-item[0], item[1], item[2]),
    )
    for excess, node, tenant in excesses:
        if excess <= EPSILON:
            return None
        best: tuple[float, int, int, str] | None = None  # (-gain, not a replica, partition, to node)
        for partition in _primaries(owners, demand, node, tenant, moved):
            wants = demand[partition]
            relief = -_change(load[node], servable[node], wants, -1)
            for target in sorted(servable):
                if target != node:
                    gain = relief - _change(load[target], servable[target], wants, 1)
                    candidate = (-gain, int(target not in owners[partition]), partition, target)
                    if gain > EPSILON and (best is None or candidate < best):
                        best = candidate
        if best is not None:
            return Move(best[2], node, best[3])
    return None


def _primaries(owners: list[list[str]], demand: Mapping[int, Mapping[str, float]], node: str, tenant: str, moved: set[int]) -> list[int]:
    """The partitions ``node`` is primary of that bring ``tenant`` demand."""
    return [p for p, row in enumerate(owners) if row and row[0] == node and p not in moved and demand.get(p, {}).get(tenant, 0.0) > 0]


def _apply(owners: list[list[str]], demand: Mapping[int, Mapping[str, float]], load: Load, move: Move) -> None:
    row = owners[move.partition]
    if move.to_node in row:  # a replica: the two swap roles
        row[row.index(move.to_node)] = move.from_node
    row[0] = move.to_node
    for tenant, wanted in demand.get(move.partition, {}).items():
        load[move.from_node][tenant] = load[move.from_node].get(tenant, 0.0) - wanted
        load[move.to_node][tenant] = load[move.to_node].get(tenant, 0.0) + wanted
