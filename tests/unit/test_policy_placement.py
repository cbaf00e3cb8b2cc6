"""policies.placement: node ids and weights -> R distinct owners per partition, the same for the
same nodes in any order, moving little when a node joins or leaves. Deterministic (md5 points),
so the figures below are fixed, not chances. (tests/unit/test_ring.py checks the same plan
through the ring that applies it.)"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.placement import Candidate, Move, Table, plan, rebalance


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


# --- rebalance: Pisces' partition placement


def test_rebalance_moves_the_overload_off_a_node() -> None:
    table = (("a", "b"), ("a", "c"), ("a", "b"), ("b", "c"), ("c", "a"))
    demand = {0: {"t": 40.0}, 1: {"t": 30.0}, 2: {"t": 20.0}, 3: {"t": 10.0}, 4: {"u": 50.0}}
    servable = {"a": {"t": 50.0, "u": 50.0}, "b": {"t": 50.0, "u": 50.0}, "c": {"t": 50.0, "u": 50.0}}
    new, moves = rebalance(table, demand, servable, max_moves=3)
    assert overload(new, demand, servable) == 0
    assert overload(table, demand, servable) == 40
    assert len(moves) == 1
    (move,) = moves
    assert move.from_node == "a" and new[move.partition][0] == move.to_node
    # the new primary was a replica of the partition: it swapped roles with the old one
    assert set(new[move.partition]) == set(table[move.partition])
    assert [row for i, row in enumerate(new) if i != move.partition] == [row for i, row in enumerate(table) if i != move.partition]


def test_rebalance_replaces_the_primary_when_no_replica_has_room() -> None:
    table = (("a",), ("a",), ("b",))
    demand = {0: {"t": 60.0}, 1: {"t": 60.0}, 2: {"t": 20.0}}
    servable = {"a": {"t": 70.0}, "b": {"t": 70.0}, "c": {"t": 70.0}}
    new, moves = rebalance(table, demand, servable, max_moves=4)
    assert moves == (Move(0, "a", "c"),)
    assert new == (("c",), ("a",), ("b",))


def test_rebalance_never_moves_more_than_the_bound() -> None:
    table = tuple(("a", "b") for _ in range(8))
    demand = {p: {"t": 10.0} for p in range(8)}
    servable = {"a": {"t": 10.0}, "b": {"t": 10.0}, "c": {"t": 100.0}}
    for bound in range(5):
        new, moves = rebalance(table, demand, servable, max_moves=bound)
        assert len(moves) == bound
        assert sum(old != row for old, row in zip(table, new)) == bound
    assert overload(rebalance(table, demand, servable, max_moves=7)[0], demand, servable) == 0


def test_rebalance_makes_no_move_that_does_not_help() -> None:
    # every node is overloaded by the same tenant: moving only shifts the excess
    table = (("a",), ("b",))
    demand = {0: {"t": 20.0}, 1: {"t": 20.0}}
    servable = {"a": {"t": 10.0}, "b": {"t": 10.0}}
    assert rebalance(table, demand, servable, max_moves=5) == (table, ())


def test_a_balanced_table_comes_back_unchanged() -> None:
    table = plan(nodes(3), 64, 2)
    demand = {p: {"t": 1.0, "u": 0.5} for p in range(64)}
    servable = {f"n{i}": {"t": 64.0, "u": 64.0} for i in range(3)}
    assert rebalance(table, demand, servable, max_moves=10) == (table, ())


def test_a_primary_on_an_unknown_node_stays() -> None:
    table = (("gone", "a"), ("a",))
    demand = {0: {"t": 100.0}, 1: {"t": 100.0}}
    new, moves = rebalance(table, demand, {"a": {"t": 10.0}, "b": {"t": 500.0}}, max_moves=5)
    assert moves == (Move(1, "a", "b"),)
    assert new[0] == ("gone", "a")
    with pytest.raises(ValueError):
        rebalance(table, demand, {}, max_moves=-1)


@st.composite
def loaded_tables(draw: st.DrawFn) -> tuple[Table, dict[int, dict[str, float]], dict[str, dict[str, float]]]:
    members = nodes(draw(st.integers(2, 5)))
    partitions = draw(st.integers(1, 40))
    table = plan(members, partitions, draw(st.integers(1, 3)))
    tenants = ["t", "u", "v"][: draw(st.integers(1, 3))]
    amounts = st.floats(0.0, 50.0, allow_nan=False)
    demand = {p: {tenant: draw(amounts) for tenant in tenants} for p in range(partitions) if draw(st.booleans())}
    servable = {c.id: {tenant: draw(st.floats(0.0, 200.0)) for tenant in tenants} for c in members}
    return table, demand, servable


@settings(max_examples=60, deadline=None)
@given(state=loaded_tables(), max_moves=st.integers(0, 6))
def test_rebalance_is_bounded_deterministic_and_never_worse(
    state: tuple[Table, dict[int, dict[str, float]], dict[str, dict[str, float]]], max_moves: int
) -> None:
    table, demand, servable = state
    new, moves = rebalance(table, demand, servable, max_moves=max_moves)
    assert (new, moves) == rebalance(table, demand, servable, max_moves=max_moves)
    assert len(moves) <= max_moves
    assert len({move.partition for move in moves}) == len(moves)
    assert overload(new, demand, servable) <= overload(table, demand, servable)
    if moves:
        assert overload(new, demand, servable) < overload(table, demand, servable)
    for partition, (old, row) in enumerate(zip(table, new)):
        assert len(row) == len(set(row)) == len(old)
        assert set(row) <= set(old) | set(servable)
        if old != row:
            assert any(move.partition == partition and row[0] == move.to_node for move in moves)


def overload(table: Table, demand: dict[int, dict[str, float]], servable: dict[str, dict[str, float]]) -> float:
    """Demand beyond what each node can serve each tenant, summed (what rebalance lowers)."""
    load: dict[tuple[str, str], float] = {}
    for partition, row in enumerate(table):
        for tenant, wanted in demand.get(partition, {}).items():
            load[row[0], tenant] = load.get((row[0], tenant), 0.0) + wanted
    return sum(max(0.0, wanted - servable.get(node, {}).get(tenant, 0.0)) for (node, tenant), wanted in load.items() if node in servable)
