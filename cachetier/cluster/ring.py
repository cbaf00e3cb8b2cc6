"""The partition ring (D3N's L2 placement): which node owns which blocks.

Blocks hash to a fixed number of partitions; partitions map to nodes. Two steps, kept apart
as Swift keeps its ring builder and its ring:

- **lookup** (``PartitionMap.owners``): a block -> its partition -> the partition's owners,
  primary first. A table lookup, no hashing of nodes. This module.
- **planning** (``policies.placement``): live members and their weights -> a table of R owner
  ids per partition; ``plan`` here applies that table to the members.

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

from policies import placement

_PERSON = b"lakegate.part.1"


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
        rows = tuple(tuple(owners) for owners in table)
        if len(rows) != len(self.table):
            raise ValueError(f"a table for {len(self.table)} partitions has {len(rows)} rows")
        return PartitionMap(self.members, rows)

    def share(self) -> dict[str, int]:
        """How many partitions each member is primary for."""
        counts = dict.fromkeys(self.members, 0)
        for owners in self.table:
            counts[owners[0]] += 1
        return counts


def plan(members: Iterable[Member], partitions: int, replicas: int = 1) -> PartitionMap:
    """The map of ``members`` with the table placement plans for them:
    ``min(replicas, len(members))`` distinct nodes per partition."""
    by_id = {m.id: m for m in members}
    table = placement.plan((placement.Candidate(m.id, m.weight) for m in by_id.values()), partitions, replicas)
    return PartitionMap(by_id, table)
