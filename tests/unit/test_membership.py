"""Membership: peers join when heard from, leave after ``failure_timeout`` of silence, rejoin;
the ring follows the live set; suspects are skipped by lookups for a while. A fake clock, no
network. Also ``parse_peers``, the ``LAKEGATE_PEERS`` syntax."""

from __future__ import annotations

import pytest

from cachetier.cluster.config import MembershipConfig
from cachetier.cluster.membership import Membership, parse_peers
from cachetier.cluster.ring import Member, partition_of

TIMEOUT = 3.0
SUSPECT_FOR = 1.0
A, B, C = (Member(name, f"http://{name}:9000") for name in ("a", "b", "c"))


class Clock:
    def __init__(self) -> None:
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


def membership(me: Member, clock: Clock, *, partitions: int = 64, replicas: int = 1) -> Membership:
    config = MembershipConfig(partitions, replicas, heartbeat_interval=SUSPECT_FOR, failure_timeout=TIMEOUT)
    return Membership(me, config, clock=clock)


def live_ids(view: Membership) -> list[str]:
    return [m.id for m in view.live()]


def test_alone_a_node_owns_every_partition() -> None:
    view = membership(A, Clock())
    assert live_ids(view) == ["a"] and view.peers() == []
    assert view.ring.share() == {"a": 64}
    assert view.owners("bkt", "k", 0) == (A,)
    assert view.tick() is False


def test_a_peer_joins_when_heard_from_and_leaves_after_the_failure_timeout() -> None:
    clock = Clock()
    view = membership(A, clock)
    alone = view.ring.version
    assert view.heard_from(B) is True
    assert live_ids(view) == ["a", "b"] and view.peers() == [B]
    assert set(view.ring.members) == {"a", "b"} and view.ring.share()["b"] > 0
    joined = view.ring.version
    assert joined != alone

    assert view.heard_from(B) is False  # nothing new: no replan
    clock.now += TIMEOUT - 0.01
    assert view.tick() is False and view.peers() == [B]  # silent, but not for long enough
    clock.now += 0.02
    assert view.tick() is True
    assert live_ids(view) == ["a"] and view.known() == [B]  # remembered, to heartbeat it again
    assert view.ring.version == alone and view.ring.share() == {"a": 64}

    clock.now += 100
    assert view.heard_from(B) is True  # rejoins
    assert view.ring.version == joined
    assert [(change, node) for _, change, node in view.changes] == [("join", "b"), ("leave", "b"), ("join", "b")]
    assert view.generation == 4  # alone, with b, alone, with b


def test_heartbeats_keep_a_peer_alive() -> None:
    clock = Clock()
    view = membership(A, clock)
    view.heard_from(B)
    for _ in range(20):
        clock.now += TIMEOUT / 2
        view.heard_from(B)
        assert view.tick() is False
    assert view.peers() == [B]


def test_only_the_silent_peer_leaves() -> None:
    clock = Clock()
    view = membership(A, clock)
    view.heard_from(B)
    view.heard_from(C)
    clock.now += TIMEOUT / 2
    view.heard_from(C)
    clock.now += TIMEOUT / 2
    assert view.tick() is True
    assert live_ids(view) == ["a", "c"]


def test_hearing_from_oneself_changes_nothing() -> None:
    view = membership(A, Clock())
    assert view.heard_from(Member("a", "http://a:9000")) is False
    assert live_ids(view) == ["a"] and view.known() == []


def test_a_peer_that_comes_back_at_another_url_or_weight_replans() -> None:
    view = membership(A, Clock())
    view.heard_from(B)
    version = view.ring.version
    moved = Member("b", "http://b-new:9000")
    assert view.heard_from(moved) is True
    assert view.peers() == [moved] and view.ring.members["b"] == moved and view.ring.version != version
    assert view.heard_from(Member("b", "http://b-new:9000", 2.0)) is True


def test_nodes_that_hear_from_the_same_members_converge_on_one_ring() -> None:
    clock = Clock()
    a, b, c = (membership(m, clock, replicas=2) for m in (A, B, C))
    a.heard_from(C)  # heard in different orders, at different times
    a.heard_from(B)
    b.heard_from(A)
    clock.now += 1
    b.heard_from(C)
    c.heard_from(B)
    assert len({a.ring.version, b.ring.version, c.ring.version}) == 2  # c has not heard from a yet
    c.heard_from(A)
    assert a.ring.version == b.ring.version == c.ring.version
    assert a.ring.table == b.ring.table == c.ring.table
    for index in range(20):
        assert a.owners("bkt", "k", index) == b.owners("bkt", "k", index) == c.owners("bkt", "k", index)

    clock.now += TIMEOUT  # c falls silent for a and b: both drop it, and agree again
    a.heard_from(B)
    b.heard_from(A)
    assert a.tick() is False and b.tick() is False  # heard_from already expired c
    assert live_ids(a) == live_ids(b) == ["a", "b"]
    assert a.ring.version == b.ring.version


def test_load_is_kept_from_the_last_heartbeat_that_carried_it() -> None:
    view = membership(A, Clock())
    view.heard_from(B, {"cpu_percent": 12.0})
    view.heard_from(B)
    peers = view.snapshot()["peers"]
    assert isinstance(peers, dict) and peers["b"]["load"] == {"cpu_percent": 12.0}


# ---- suspects ----------------------------------------------------------------------------------


def _a_block_owned_by(view: Membership, node: str, position: int = 0) -> tuple[str, str, int]:
    """A block whose owner at ``position`` (0: primary) is ``node`` by ``view``'s ring."""
    for index in range(10_000):
        if view.ring.table[partition_of("bkt", "k", index, view.partitions)][position] == node:
            return "bkt", "k", index
    raise AssertionError(f"{node} owns nothing")


def test_a_suspect_is_skipped_until_suspect_for_has_passed() -> None:
    clock = Clock()
    view = membership(A, clock, replicas=2)
    view.heard_from(B)
    view.heard_from(C)
    block = _a_block_owned_by(view, "b")
    owners = view.owners(*block)
    version = view.ring.version
    assert owners[0] == B and len(owners) == 2

    view.suspect("b")
    assert view.owners(*block) == owners[1:]  # the next owner (or, with none left, the lake)
    assert view.ring.version == version and view.peers() == [B, C]  # the ring is the heartbeats' to change
    assert view.snapshot()["peers"]["b"]["suspect"] is True  # type: ignore[index]
    clock.now += SUSPECT_FOR - 0.01
    assert view.owners(*block) == owners[1:]
    clock.now += 0.01
    assert view.owners(*block) == owners


def test_a_heartbeat_clears_a_suspect_at_once() -> None:
    clock = Clock()
    view = membership(A, clock)
    view.heard_from(B)
    block = _a_block_owned_by(view, "b")
    view.suspect("b")
    assert view.owners(*block) == ()  # no owner left: the caller reads the lake
    view.heard_from(B)
    assert view.owners(*block) == (B,)


def test_this_node_is_never_skipped_and_unknown_suspects_are_ignored() -> None:
    view = membership(A, Clock(), replicas=2)
    view.heard_from(B)
    view.suspect("a")
    view.suspect("nobody")
    block = _a_block_owned_by(view, "a")
    assert view.owners(*block)[0] == A and len(view.owners(*block)) == 2


# ---- parse_peers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "seeds"),
    [
        ("", []),
        ("node2=http://10.0.0.2:9000,node3=https://10.0.0.3:9000/", [("node2", "http://10.0.0.2:9000"),
                                                                  ("node3", "https://10.0.0.3:9000")]),
        (" http://h1:9000 , http://h2:9000,", [(None, "http://h1:9000"), (None, "http://h2:9000")]),
        ("n1=http://h1:9000,http://h2:9000", [("n1", "http://h1:9000"), (None, "http://h2:9000")]),
        ("=http://h1:9000", [(None, "http://h1:9000")]),
    ],
)
def test_parse_peers_seeds(spec: str, seeds: list[tuple[str | None, str]]) -> None:
    assert parse_peers(spec) == (seeds, None)


def test_parse_peers_dns() -> None:
    assert parse_peers("dns:lakegate-headless.ns.svc.cluster.local:9000") == (
        [], "lakegate-headless.ns.svc.cluster.local:9000"
    )
    assert parse_peers("  dns:peers:80 ") == ([], "peers:80")


@pytest.mark.parametrize(
    "spec",
    ["h1:9000", "node2=h2:9000", "node2=", "ftp://h:21", "http://h1:9000,h2",
     "dns:", "dns:name", "dns::9000", "dns:name:", "dns:name:port"],
)
def test_parse_peers_refuses_what_it_cannot_read(spec: str) -> None:
    with pytest.raises(ValueError):
        parse_peers(spec)


# ---- the leader and the placement loop's table ------------------------------------------------


def test_the_leader_is_the_live_node_with_the_smallest_id_and_the_next_takes_over() -> None:
    clock = Clock()
    b_view, c_view = membership(B, clock), membership(C, clock)
    assert b_view.leader() == B  # alone, a node leads itself
    for view in (b_view, c_view):
        view.heard_from(A), view.heard_from(B), view.heard_from(C)
    assert b_view.leader() == c_view.leader() == A
    clock.now += TIMEOUT - 1.0
    for view in (b_view, c_view):
        view.heard_from(B if view is c_view else C)  # a falls silent, b and c still hear each other
    clock.now += 1.5
    assert b_view.tick() and c_view.tick()
    assert b_view.leader() == c_view.leader() == B  # a left the ring: b takes over
    b_view.heard_from(A)
    assert b_view.leader() == A  # back: it leads again


def _moved(view: Membership) -> tuple[tuple[str, ...], ...]:
    """The planned table with its first partition given to the other node."""
    table = list(view.planned.table)
    table[0] = ("b",) if table[0] == ("a",) else ("a",)
    return tuple(table)


def test_a_table_planned_on_this_ring_is_used_until_the_members_change() -> None:
    clock = Clock()
    view = membership(A, clock)
    view.heard_from(B)
    planned = view.planned
    table = _moved(view)
    assert view.apply_table(planned.version, table) is planned  # the ring it replaced
    assert view.ring.table == table and view.ring.version != planned.version
    assert view.planned is planned and view.snapshot()["table_override"] is True
    assert view.heard_from(B) is False and view.ring.table == table  # same members: the table holds

    assert view.heard_from(C) is True  # a join: the consistent-hash plan of the new members
    assert view.ring is view.planned and view.planned.version != planned.version
    assert view.apply_table(planned.version, table) is None  # planned on the old ring: not used
    assert view.ring is view.planned and view.snapshot()["table_override"] is False


def test_a_table_that_does_not_fit_the_ring_is_not_used() -> None:
    view = membership(A, Clock())
    view.heard_from(B)
    base = view.planned.version
    assert view.apply_table(base, view.planned.table[:-1]) is None  # a partition short
    assert view.apply_table(base, [("a", "x")] * view.partitions) is None  # x is no member
    assert view.apply_table(base, view.planned.table) is not None  # the plan itself: no override
    assert view.ring is view.planned
