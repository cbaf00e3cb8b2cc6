"""policies.selection (which owners to ask, and the fetch plan) and policies.tiering (which store
keeps a fetched block): pure functions of ids, health and now."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from policies import selection, tiering
from policies.selection import HEALTHY, FromLake, FromPeer, PeerHealth, sources, suspected, usable

ids = st.lists(st.sampled_from("abcdef"), unique=True, max_size=5)


def test_a_suspect_is_skipped_until_its_time_is_up() -> None:
    health = {"b": suspected(100.0, 1.0)}
    assert usable(("b", "c"), health, 100.5, me="a") == ("c",)
    assert usable(("b", "c"), health, 101.0, me="a") == ("b", "c")


def test_this_node_and_unknown_peers_are_never_skipped() -> None:
    health = {"a": PeerHealth(suspect_until=1e9)}
    assert usable(("a", "z"), health, 0.0, me="a") == ("a", "z")


@given(replicas=ids, suspects=st.sets(st.sampled_from("abcdef")), now=st.floats(0, 10), me=st.sampled_from("abc"))
def test_usable_keeps_the_order_and_drops_only_suspect_peers(
    replicas: list[str], suspects: set[str], now: float, me: str
) -> None:
    health = {i: PeerHealth(suspect_until=now + 1) if i in suspects else HEALTHY for i in "abcdef"}
    chosen = usable(replicas, health, now, me=me)
    assert list(chosen) == [r for r in replicas if r not in suspects or r == me]


def test_sources_ask_peers_ahead_of_this_node_then_the_lake() -> None:
    assert sources(("b", "c"), "a") == (FromPeer("b"), FromPeer("c"), FromLake(owned_here=False))
    assert sources(("b", "a", "c"), "a") == (FromPeer("b"), FromLake(owned_here=True))
    assert sources(("a", "b"), "a") == (FromLake(owned_here=True),)
    assert sources((), "a") == (FromLake(owned_here=False),)  # every owner suspect: the lake


@given(owners=ids, me=st.sampled_from("abc"))
def test_a_plan_ends_with_the_lake_and_never_asks_this_node(owners: list[str], me: str) -> None:
    plan = sources(owners, me)
    assert isinstance(plan[-1], FromLake) and all(isinstance(s, FromPeer) for s in plan[:-1])
    assert me not in [s.node_id for s in plan if isinstance(s, FromPeer)]
    assert plan[-1].owned_here == (me in owners)


def test_the_rest_of_a_half_sent_block_comes_from_the_lake() -> None:
    assert selection.after_partial_failure() == FromLake(owned_here=False)


def test_an_owned_block_goes_to_l2_when_there_is_one() -> None:
    assert tiering.keeper(owned_here=True, has_l2=True) is tiering.Tier.L2
    assert tiering.keeper(owned_here=True, has_l2=False) is tiering.Tier.L1
    assert tiering.keeper(owned_here=False, has_l2=True) is tiering.Tier.L1
    assert tiering.keeper(owned_here=False, has_l2=False) is tiering.Tier.L1
