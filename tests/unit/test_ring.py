"""The partition ring: ``plan`` (members -> table) and lookup (``PartitionMap``, ``partition_of``).

Everything here is pure and deterministic (md5 and blake2b, no randomness), so the statistical
checks (shares, spread) are fixed numbers, not chances: they cannot be flaky.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cachetier.cluster.ring import Member, PartitionMap, partition_of, plan


def members(n: int, weights: Sequence[float] = ()) -> list[Member]:
    return [Member(f"node{i}", f"http://10.0.0.{i}:9000", weights[i] if weights else 1.0) for i in range(n)]


def ids(table: tuple[tuple[str, ...], ...]) -> list[list[str]]:
    return [list(row) for row in table]


member_counts = st.integers(1, 7)
replica_counts = st.integers(1, 3)
partition_counts = st.integers(1, 96)


# ---- plan --------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(n=member_counts, replicas=replica_counts, partitions=partition_counts, seed=st.randoms())
def test_plan_is_the_same_for_the_same_members_in_any_order(
    n: int, replicas: int, partitions: int, seed: random.Random
) -> None:
    nodes = members(n)
    shuffled = nodes[:]
    seed.shuffle(shuffled)
    one, other = plan(nodes, partitions, replicas), plan(shuffled, partitions, replicas)
    assert (one.table, one.version) == (other.table, other.version)
    assert dict(one.members) == dict(other.members)


def test_members_that_are_equal_give_the_same_version() -> None:
    """A weight of 1 and of 1.0 is the same member (``Member`` compares them equal, and
    Membership does not replan for it): two nodes must not report different ring versions."""
    assert plan([Member("a", "http://a", 1)], 8).version == plan([Member("a", "http://a", 1.0)], 8).version


def test_the_version_follows_members_and_table() -> None:
    base = plan(members(3), 64, 2)
    assert plan(members(3), 64, 2).version == base.version
    assert plan(members(4), 64, 2).version != base.version
    assert plan(members(3), 64, 1).version != base.version
    assert plan(members(3, [1.0, 1.0, 2.0]), 64, 2).version != base.version
    moved_url = [*members(2), Member("node2", "http://elsewhere:9000")]
    assert plan(moved_url, 64, 2).version != base.version  # same ids, another URL


@settings(max_examples=60, deadline=None)
@given(n=member_counts, replicas=replica_counts, partitions=partition_counts)
def test_every_partition_has_min_r_members_distinct_owners(n: int, replicas: int, partitions: int) -> None:
    ring = plan(members(n), partitions, replicas)
    assert ring.partitions == partitions
    for owners in ring.table:
        assert len(owners) == len(set(owners)) == min(replicas, n)
        assert set(owners) <= ring.members.keys()
    assert sum(ring.share().values()) == partitions


def test_a_plan_uses_every_member_and_spreads_primaries_evenly() -> None:
    for n in range(1, 9):
        share = plan(members(n), 1024).share()
        assert set(share) == {m.id for m in members(n)}
        assert all(0.7 < count / (1024 / n) < 1.3 for count in share.values()), share


def test_weights_shift_shares_roughly_in_proportion() -> None:
    weights = [1.0, 2.0, 1.0, 4.0]
    share = plan(members(4, weights), 4096).share()
    for i, weight in enumerate(weights):
        expected = 4096 * weight / sum(weights)
        assert 0.75 < share[f"node{i}"] / expected < 1.25, share
    # doubling one node's weight takes partitions to it and to it alone
    before, after = plan(members(3), 2048).share(), plan(members(3, [1.0, 2.0, 1.0]), 2048).share()
    assert after["node1"] > 1.3 * before["node1"]
    assert after["node0"] < before["node0"] and after["node2"] < before["node2"]


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 7), replicas=replica_counts, data=st.data())
def test_removing_a_node_only_moves_what_it_owned(n: int, replicas: int, data: st.DataObject) -> None:
    """Consistent hashing: a partition the node did not own keeps its owners; one it did keeps
    the other owners in their order, and gains the next node on the ring at the end."""
    nodes = members(n)
    gone = data.draw(st.sampled_from(nodes))
    before = plan(nodes, 128, replicas)
    after = plan([m for m in nodes if m != gone], 128, replicas)
    for old, new in zip(before.table, after.table):
        if gone.id not in old:
            assert new == old
        else:
            rest = tuple(i for i in old if i != gone.id)
            assert new[: len(rest)] == rest
            assert gone.id not in new


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 6), replicas=replica_counts)
def test_adding_a_node_only_takes_partitions_to_it(n: int, replicas: int) -> None:
    nodes = members(n + 1)
    before, after = plan(nodes[:n], 128, replicas), plan(nodes, 128, replicas)
    newcomer = nodes[n].id
    moved = 0
    for old, new in zip(before.table, after.table):
        if newcomer not in new:
            assert new == old
        else:
            moved += 1
            assert tuple(i for i in new if i != newcomer) == old[: len(new) - 1]
    assert moved > 0


def test_plan_refuses_what_cannot_be_a_ring() -> None:
    with pytest.raises(ValueError):
        plan([], 8)
    with pytest.raises(ValueError):
        plan(members(2), 0)
    with pytest.raises(ValueError):
        plan(members(2), 8, replicas=0)


# ---- lookup ------------------------------------------------------------------------------------


def test_owners_are_the_partitions_row_as_members_primary_first() -> None:
    ring = plan(members(5), 256, 3)
    for index in range(50):
        owners = ring.owners("bkt", "some/key", index)
        row = ring.table[partition_of("bkt", "some/key", index, 256)]
        assert tuple(m.id for m in owners) == row
        assert all(ring.members[m.id] is m for m in owners)


def test_with_table_swaps_the_assignment_and_keeps_the_members() -> None:
    ring = plan(members(3), 4, 2)
    table = [("node2", "node0"), ("node1",), ("node0", "node1"), ("node2",)]
    other = ring.with_table(table)
    assert ids(other.table) == [list(row) for row in table]
    assert dict(other.members) == dict(ring.members)
    assert other.version != ring.version
    assert ring.with_table(ring.table).version == ring.version  # same table, same version


@pytest.mark.parametrize(
    "table",
    [
        [("node0",)] * 3,  # a row short
        [("node0",)] * 5,  # a row too many
        [("node0",), ("node1",), ("nobody",), ("node2",)],  # not a member
        [("node0",), (), ("node1",), ("node2",)],  # a partition without an owner
        [("node0",), ("node1", "node1"), ("node1",), ("node2",)],  # one node twice
    ],
    ids=["short", "long", "unknown", "empty-row", "duplicate"],
)
def test_with_table_refuses_an_invalid_table(table: list[tuple[str, ...]]) -> None:
    with pytest.raises(ValueError):
        plan(members(3), 4).with_table(table)


def test_a_map_is_immutable() -> None:
    ring = plan(members(2), 4)
    with pytest.raises(TypeError):
        ring.members["x"] = Member("x", "http://x")  # type: ignore[index]
    with pytest.raises(AttributeError):
        ring.table = ()  # type: ignore[misc]
    direct = PartitionMap({"a": Member("a", "http://a")}, (("a",),))
    with pytest.raises(ValueError):
        PartitionMap({"a": Member("a", "http://a")}, (("b",),))
    assert direct.share() == {"a": 1}


# ---- partition_of ------------------------------------------------------------------------------


def test_partition_of_spreads_keys_evenly() -> None:
    counts = Counter(partition_of("bkt", f"data/part-{k:05d}.parquet", i, 64) for k in range(2500) for i in range(8))
    assert set(counts) == set(range(64))
    mean = 2500 * 8 / 64
    assert all(0.75 * mean < c < 1.25 * mean for c in counts.values()), counts  # sigma is ~6% of the mean


def test_partition_of_depends_on_bucket_key_and_index() -> None:
    parts = 1 << 16
    base = partition_of("bkt", "key", 3, parts)
    assert partition_of("bkt", "key", 3, parts) == base
    assert partition_of("bkt2", "key", 3, parts) != base
    assert partition_of("bkt", "key2", 3, parts) != base
    assert partition_of("bkt", "key", 4, parts) != base
    # fields are length-prefixed: moving a character between bucket and key is another block
    assert partition_of("ab", "c", 0, parts) != partition_of("a", "bc", 0, parts)
    # the blocks of one key spread over partitions (not all on one owner)
    assert len({partition_of("bkt", "big-object", i, 64) for i in range(64)}) > 30


def test_partition_of_is_the_same_on_every_node_and_release() -> None:
    """Pinned values: every node, and every release in a rolling upgrade, must place a block on
    the same partition, or nodes ask owners that do not hold it (blake2b, not ``hash()``)."""
    assert partition_of("bkt", "key", 0, 1024) == 279
    assert partition_of("bkt", "key", 1, 1 << 16) == 1108
    assert partition_of("b", "ü/ñ ?", 7, 4096) == 1872
    assert partition_of("", "", 0, 3) == 1


@settings(max_examples=100, deadline=None)
@given(bucket=st.text(max_size=20), key=st.text(max_size=40), index=st.integers(0, 1 << 40),
       partitions=st.integers(1, 1 << 16))
def test_partition_of_is_in_range_for_any_key(bucket: str, key: str, index: int, partitions: int) -> None:
    assert 0 <= partition_of(bucket, key, index, partitions) < partitions
