"""The partition ring (D3N's L2 placement): which node owns which blocks.

Blocks hash to a fixed number of partitions; partitions map to nodes. Two steps, kept apart
so that a placement policy can replace the second:

- **lookup** (``PartitionMap.owners``): a block -> its partition -> the partition's owners,
  primary first. A table lookup, no hashing of nodes.
- **planning** (``plan``): live members and their weights -> a table of R owners per
  partition, from a consistent-hash ring (uhashring): when a node joins or leaves,
  only the partitions it gains or loses move.

A block's partition comes from (bucket, key, block index), not from its ETag: every version of
a block lives on the same owner, so a node can ask that owner for a block whose current ETag it
does not know yet. Every node that sees the same live members plans the same table, and
``version`` (a digest of members and table) shows whether two nodes agree.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from uhashring import HashRing  # type: ignore[import-untyped]

_PERSON = b"lakegate.part.1"
_POINTS = 160  # ring points per unit of weight (uhashring's default per node)


@dataclass(frozen=True, slots=True)
class Member:
    """A cache node: its id, the URL peers reach it at, and its share of the partitions."""

    id: str
    url: str
    weight: float = 1.0


def partition_of(bucket: str, key: str, index: int, partitions: int) -> int:
    """The partition of block ``index`` of ``bucket/key`` (any version)."""
    digest = hashlib.blake2b(digest_size=8, person=_PERSON)
    for text in (bucket, key):
        raw = text.encode("utf-8", "surrogatepass")
        digest.update(len(raw).to_bytes(8, "big"))
        digest.update(raw)
    digest.update(index.to_bytes(8, "big"))
    return int.from_bytes(digest.digest(), "big") % partitions


@dataclass(frozen=True)
class PartitionMap:
    """Partition -> owner ids (primary first), over ``members``. Immutable: a new plan is a new
    map, swapped in whole, so a reader never sees half of a change."""

    members: Mapping[str, Member]
    table: tuple[tuple[str, ...], ...]
    version: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "members", MappingProxyType(dict(self.members)))
        for owners in self.table:
            unknown = set(owners) - self.members.keys()
            if unknown or not owners or len(set(owners)) != len(owners):
                raise ValueError(f"a partition's owners must be distinct members, got {owners}")
        digest = hashlib.blake2b(digest_size=6)
        for member in sorted(self.members.values(), key=lambda m: m.id):
            # float(): Member("a", u, 1) == Member("a", u, 1.0), so both must give one version
            digest.update(f"{member.id}\0{member.url}\0{float(member.weight)}\n".encode())
        for owners in self.table:
            digest.update(",".join(owners).encode() + b"\n")
        object.__setattr__(self, "version", digest.hexdigest())

    @property
    def partitions(self) -> int:
        return len(self.table)

    def owners(self, bucket: str, key: str, index: int) -> tuple[Member, ...]:
        """The nodes that own block ``index`` of ``bucket/key``, primary first."""
        return tuple(self.members[i] for i in self.table[partition_of(bucket, key, index, len(self.table))])

    def with_table(self, table: Iterable[Iterable[str]]) -> PartitionMap:
        """The same members with another assignment (a placement policy's decision)."""
        table = tuple(tuple(owners) for owners in table)
        if len(table) != len(self.table):
            raise ValueError(f"a table for {len(self.table)} partitions has {len(table)} rows")
        return PartitionMap(self.members, table)

    def share(self) -> dict[str, int]:
        """How many partitions each member is primary for."""
        counts = dict.fromkeys(self.members, 0)
        for owners in self.table:
            counts[owners[0]] += 1
        return counts


def plan(members: Iterable[Member], partitions: int, replicas: int = 1) -> PartitionMap:
    """Owners for every partition from a consistent-hash ring of ``members`` by weight:
    ``min(replicas, len(members))`` distinct nodes each."""
    by_id = {m.id: m for m in members}
    if not by_id:
        raise ValueError("a ring needs at least one member")
    if partitions < 1 or replicas < 1:
        raise ValueError("partitions and replicas must be >= 1")
    # uhashring weights are whole numbers: a weight becomes points on the ring instead
    ring = HashRing(nodes={m.id: {"vnodes": max(1, round(_POINTS * m.weight))} for m in by_id.values()})
    count = min(replicas, len(by_id))
    table = []
    for partition in range(partitions):
        owners = tuple(node["nodename"] for node in ring.range(f"partition-{partition}", size=count, unique=True))
        table.append(owners)
    return PartitionMap(by_id, tuple(table))
