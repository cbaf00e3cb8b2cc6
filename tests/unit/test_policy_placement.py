"""policies.placement: node ids and weights -> R distinct owners per partition, the same for the
same nodes in any order, moving little when a node joins or leaves. Deterministic (md5 points),
so the figures below are fixed, not chances. (tests/unit/test_ring.py checks the same plan
through the ring that applies it.)"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.placement import Candidate, plan


def nodes(n: int) -> list[Candidate]:
    return [Candidate(f"n{i}") for i in range(n)]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 8), replicas=st.integers(1, 4), partitions=st.integers(1, 128))
def test_each_partition_gets_min_r_n_distinct_known_owners(n: int, replicas: int, partitions: int) -> None:
    table = plan(nodes(n), partitions, replicas)
    assert len(table) == partitions
    for owners in table:
        assert len(owners) == len(set(owners)) == min(replicas, n)
        assert set(owners) <= {c.id for c in nodes(n)}


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 7), replicas=st.integers(1, 3), seed=st.randoms())
def test_the_order_of_nodes_does_not_matter(n: int, replicas: int, seed: random.Random) -> None:
    shuffled = nodes(n)
    seed.shuffle(shuffled)
    assert plan(shuffled, 64, replicas) == plan(nodes(n), 64, replicas)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 8), replicas=st.integers(1, 3), data=st.data())
def test_a_leave_moves_only_the_partitions_the_node_held(n: int, replicas: int, data: st.DataObject) -> None:
    gone = data.draw(st.sampled_from(nodes(n)))
    before = plan(nodes(n), 256, replicas)
    after = plan([c for c in nodes(n) if c != gone], 256, replicas)
    changed = [i for i, (old, new) in enumerate(zip(before, after)) if old != new]
    assert all(gone.id in before[i] for i in changed)
    # and it moves little: about the departing node's share, never most of the ring
    held = sum(gone.id in owners for owners in before)
    assert len(changed) == held


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 7), replicas=st.integers(1, 3))
def test_a_join_moves_only_partitions_to_the_newcomer_and_about_its_share(n: int, replicas: int) -> None:
    before, after = plan(nodes(n), 512, replicas), plan(nodes(n + 1), 512, replicas)
    newcomer = f"n{n}"
    moved = sum(old != new for old, new in zip(before, after))
    assert all(newcomer in new for old, new in zip(before, after) if old != new)
    expected = 512 * min(replicas, n + 1) / (n + 1)  # partitions the newcomer should own
    assert 0.5 * expected < moved < 1.6 * expected


def test_weight_is_a_share() -> None:
    table = plan([Candidate("a", 1.0), Candidate("b", 3.0)], 4096, 1)
    primaries = sum(owners[0] == "b" for owners in table)
    assert 0.65 < primaries / 4096 < 0.85


def test_refuses_what_cannot_be_a_plan() -> None:
    with pytest.raises(ValueError):
        plan([], 8, 1)
    with pytest.raises(ValueError):
        plan(nodes(2), 0, 1)
    with pytest.raises(ValueError):
        plan(nodes(2), 8, 0)
