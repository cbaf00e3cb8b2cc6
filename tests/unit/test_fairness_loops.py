"""The fairness leader's plumbing (issue 12, WA and PP): updates admitted from the leader only
and newer epochs only (``Cluster.admit``), the leader's allocation and placement rounds over
the in-memory peer twin (``MemoryPeers`` calling each node's ``Follower``) with fake policies,
the pure helpers that turn reports into the policies' inputs, and the peer API's routes for
the three messages (through the real ``PeerClient`` over ASGITransport). A set clock, no
sockets."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import httpx2
import pytest
from doubles import B, Clock, RecordingFairness, memory_lake, nodes

from cachetier.cluster import wire
from cachetier.cluster.client import PeerClient, PeerUnavailable
from cachetier.cluster.config import MembershipConfig
from cachetier.cluster.follower import Follower
from cachetier.cluster.memory import MemoryPeers
from cachetier.cluster.membership import Membership
from cachetier.cluster.node import Cluster
from cachetier.cluster.ring import Member
from gateway.loops.allocation import AllocationRounds, allocation_inputs, weight_updates
from gateway.loops.leader import next_epoch
from gateway.loops.placement import PlacementRounds, partition_demand, servable
from gateway.peerapi import PeerAPI

SECRET = b"cluster-secret-0123456789"
PARTITIONS = 16


class Node:
    def __init__(self, name: str, clock: Clock, followers: dict[str, Follower]) -> None:
        self.member = Member(name, f"http://{name}:9000")
        config = MembershipConfig(PARTITIONS, 1, heartbeat_interval=1.0, failure_timeout=3.0)
        self.membership = Membership(self.member, config, clock=clock)
        self.peers = MemoryPeers(self.member, {}, followers)
        self.cluster = Cluster(self.membership, self.peers, seeds=[])
        self.fairness = RecordingFairness(name, self.cluster)
        followers[self.member.url] = Follower(self.cluster, self.fairness)


def cluster(count: int = 3) -> tuple[list[Node], Clock]:
    clock = Clock()
    followers: dict[str, Follower] = {}
    group = [Node(f"n{i}", clock, followers) for i in range(count)]
    for node in group:
        for other in group:
            node.membership.heard_from(other.member)
    return group, clock


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def weights_from(leader: str, epoch: int) -> wire.WeightsUpdate:
    return wire.WeightsUpdate(leader, epoch, {"a": 3.0})


# ---- who is listened to --------------------------------------------------------------------------


def test_only_the_leaders_newer_updates_are_applied() -> None:
    (n0, n1, _), clock = cluster()
    admit = n1.cluster.admit
    assert admit(weights_from("n0", 5), "n0") is True
    assert admit(weights_from("n0", 5), "n0") is False  # the same epoch again
    assert admit(weights_from("n0", 4), "n0") is False  # older
    assert admit(weights_from("n2", 9), "n2") is False  # n2 does not lead in n1's view
    assert admit(weights_from("n0", 9), "n2") is False  # nor may it speak for n0
    assert n1.cluster.counters["updates_ignored"] == 4
    assert admit(wire.PartitionsUpdate("n0", 1, "v", (("n0",),)), "n0") is True  # each kind has its own epochs
    assert admit(weights_from("n0", 6), "n0") is True


def test_a_new_leader_is_listened_to_whatever_its_epochs() -> None:
    (n0, n1, n2), clock = cluster()
    assert n2.cluster.admit(weights_from("n0", 10**12), "n0") is True
    clock.now += 2.0
    n2.membership.heard_from(n1.member)
    clock.now += 1.5
    n2.membership.tick()  # n0 fell silent: n1 leads in n2's view
    assert n2.membership.leader() == n1.member
    assert n2.cluster.admit(weights_from("n0", 10**12 + 1), "n0") is False  # the old leader is not listened to
    assert n2.cluster.admit(weights_from("n1", 1), "n1") is True


def test_epochs_grow_within_a_run_and_across_a_restart() -> None:
    assert next_epoch(0, 1000.0) == 1_000_000
    assert next_epoch(1_000_000, 1000.0) == 1_000_001  # the clock did not move
    assert next_epoch(5, 1001.0) == 1_001_000  # a restarted leader (epoch 0) is still ahead


# ---- allocation ----------------------------------------------------------------------------------


class FakeAllocate:
    """Gives every node the tenants' global weights times its node number + 1, and records its inputs."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, global_weights: Mapping[str, float], demand: Any, current: Any, capacity: Any,
                 **_: Any) -> dict[str, dict[str, float]]:
        self.calls.append((dict(global_weights), demand, current, capacity))
        return {node: {t: w * (int(node[1:]) + 1) for t, w in global_weights.items()} for node in demand}


def proportional(total: float, demand: Mapping[str, float]) -> dict[str, float]:
    whole = sum(demand.values())
    return {n: total * d / whole if whole else total / len(demand) for n, d in demand.items()}


def allocation(node: Node, fake: FakeAllocate, clock: Clock, **kwargs: Any) -> AllocationRounds:
    return AllocationRounds(node.cluster, node.fairness, lambda: {"a": 2.0, "b": 1.0}, interval=2.0,
                            allocate=fake, split=proportional, clock=clock, **kwargs)


def test_the_leader_sets_every_nodes_weights_lake_share_and_limits() -> None:
    group, clock = cluster()
    for i, node in enumerate(group):
        node.fairness.wanted = {"a": {"requests": 20.0 * (i + 1), "lake_bytes": 100.0 * (i + 1)}}
    fake = FakeAllocate()
    rounds = allocation(group[0], fake, clock, lake_bandwidth=600.0, limits=lambda: {"a": {"requests": 60.0}})
    run(rounds.round())
    (global_weights, demand, current, capacity), = fake.calls
    assert set(demand) == {"n0", "n1", "n2"} and current["n1"] == {"a": 1.0, "b": 1.0}
    assert demand["n1"]["a"] == pytest.approx(40.0 / 2.0 / 100.0)  # requests/s over the mean capacity
    for i, node in enumerate(group):
        (update,) = node.fairness.updates
        assert update.leader == "n0" and update.weights == {"a": 2.0 * (i + 1), "b": 1.0 * (i + 1)}
        assert update.lake_capacity == pytest.approx(600.0 * (i + 1) / 6)  # by each node's lake demand
        assert update.limits["a"]["requests"] == pytest.approx(60.0 * (i + 1) / 6)


def test_a_node_that_is_not_the_leader_runs_no_round() -> None:
    group, clock = cluster()
    fake = FakeAllocate()
    run(allocation(group[1], fake, clock).round())
    assert fake.calls == [] and all(node.fairness.updates == [] for node in group)


def test_a_node_that_does_not_report_keeps_its_weights_and_its_share() -> None:
    group, clock = cluster()
    for node in group:
        node.fairness.wanted = {"a": {"lake_bytes": 100.0}}
    rounds = allocation(group[0], FakeAllocate(), clock, lake_bandwidth=600.0)
    run(rounds.round())
    assert group[2].fairness.updates[-1].lake_capacity == pytest.approx(200.0)
    group[0].peers.down.add("n2")
    clock.now += 1.0
    run(rounds.round())
    assert len(group[2].fairness.updates) == 1  # nothing reached it: it keeps its last weights
    assert group[0].cluster.counters["reports_missed"] == 1
    shares = [node.fairness.updates[-1].lake_capacity for node in group[:2]]
    assert shares == pytest.approx([200.0, 200.0])  # what n2 holds is not handed out again
    assert sum(s or 0.0 for s in shares) + 200.0 == pytest.approx(600.0)


def test_a_new_leader_takes_over_when_the_old_one_leaves() -> None:
    group, clock = cluster()
    fake = FakeAllocate()
    run(allocation(group[0], fake, clock).round())
    clock.now += 2.0
    for node in group[1:]:
        for other in group[1:]:
            node.membership.heard_from(other.member)
    clock.now += 1.5
    for node in group:
        node.membership.tick()  # n0 sees the others gone too, and leads its own view of one
    run(allocation(group[1], fake, clock).round())
    assert [u.leader for u in group[2].fairness.updates] == ["n0", "n1"]
    assert set(fake.calls[-1][1]) == {"n1", "n2"}


def test_dominant_demand_is_the_largest_over_the_resources() -> None:
    small = wire.DemandReport("n0", 1, 2.0, {}, {"a": {"requests": 100.0, "client_bytes": 200.0}, "b": {}},
                              {"requests": 100.0, "client_bytes": 1000.0}, {"a": 1.0}, {}, "v")
    big = wire.DemandReport("n1", 1, 2.0, {}, {"b": {"client_bytes": 3000.0}},
                            {"requests": 300.0, "client_bytes": 3000.0}, {"b": 2.0}, {}, "v")
    inputs = allocation_inputs({"n0": small, "n1": big})
    assert inputs.demand == {"n0": {"a": pytest.approx(50.0 / 200.0), "b": 0.0}, "n1": {"b": pytest.approx(0.75)}}
    assert inputs.capacity == {"n0": pytest.approx(0.5), "n1": pytest.approx(1.5)}  # by the mean capacities
    assert inputs.current == {"n0": {"a": 1.0}, "n1": {"b": 2.0}}


def test_a_node_the_policy_leaves_out_keeps_its_current_weights() -> None:
    report = wire.DemandReport("n0", 1, 1.0, {}, {}, {}, {"a": 4.0}, {}, "v")
    updates = weight_updates({"n0": report}, {"a": 1.0}, leader="n0", epoch=3, allocate=lambda *a, **k: {},
                             split=proportional)
    assert updates == {"n0": wire.WeightsUpdate("n0", 3, {"a": 4.0}, None, {}, None, {"n0": {"a": 4.0}})}


# ---- placement -----------------------------------------------------------------------------------


class FakeRebalance:
    """Moves partition 0 to the node after its owner (one move), and records its inputs."""

    def __init__(self, moves: bool = True) -> None:
        self.moves = moves
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, table: Any, demand: Any, servable: Any, *, max_moves: int) -> tuple[Any, tuple[object, ...]]:
        self.calls.append((table, demand, servable, max_moves))
        if not self.moves:
            return table, ()
        ids = sorted(servable)
        rows = list(table)
        rows[0] = (ids[(ids.index(rows[0][0]) + 1) % len(ids)],)
        return tuple(rows), ((0, table[0][0], rows[0][0]),)


def test_the_leaders_table_is_applied_on_every_node_and_the_move_counted() -> None:
    group, clock = cluster()
    group[1].fairness.partitions = {0: {"a": 50.0}}
    fake = FakeRebalance()
    rounds = PlacementRounds(group[0].cluster, group[0].fairness, interval=120.0, max_moves=3, rebalance=fake,
                             clock=clock)
    before = group[0].membership.ring.table
    run(rounds.round())
    (table, demand, serves, max_moves), = fake.calls
    assert table == before and max_moves == 3 and demand == {0: {"a": pytest.approx(50.0 / 120.0)}}
    assert serves["n2"] == {"a": 500.0, "b": 500.0}
    versions = {node.membership.ring.version for node in group}
    assert len(versions) == 1 and versions != {group[0].membership.planned.version}
    for node in group:
        assert node.membership.ring.table[0] != before[0] and node.membership.ring.table[1:] == before[1:]
        assert node.cluster.counters["partitions_moved"] == 1 and len(node.fairness.tables) == 1

    still = FakeRebalance(moves=False)
    rounds.rebalance = still
    run(rounds.round())  # nothing moves and every ring agrees: nothing is sent
    assert len(still.calls) == 1 and all(len(node.fairness.tables) == 1 for node in group)


def test_a_membership_change_drops_the_table_and_a_stale_one_is_refused() -> None:
    group, clock = cluster()
    rounds = PlacementRounds(group[0].cluster, group[0].fairness, interval=120.0, rebalance=FakeRebalance(),
                             clock=clock)
    run(rounds.round())
    newcomer = Member("n3", "http://n3:9000")
    group[2].membership.heard_from(newcomer)  # only n2 hears of n3 yet
    assert group[2].membership.ring is group[2].membership.planned  # back to the consistent-hash plan
    clock.now += 1.0
    run(rounds.round())  # planned on n0's ring, without n3
    assert group[2].cluster.counters["partition_tables_refused"] == 1
    assert group[2].membership.ring is group[2].membership.planned
    assert group[1].cluster.counters["partition_tables_applied"] == 2


def test_partition_demand_adds_up_the_nodes_and_servable_follows_the_weights() -> None:
    one = wire.DemandReport("n0", 1, 2.0, {}, {}, {"client_bytes": 100.0}, {"a": 3.0, "b": 1.0},
                            {4: {"a": 10.0}}, "v")
    two = wire.DemandReport("n1", 1, 5.0, {}, {}, {}, {}, {4: {"a": 10.0, "b": 5.0}}, "v")
    assert partition_demand({"n0": one, "n1": two}) == {4: {"a": 7.0, "b": 1.0}}
    assert servable({"n0": one, "n1": two}) == {"n0": {"a": 75.0, "b": 25.0}, "n1": {}}


# ---- the peer API's routes -----------------------------------------------------------------------


def test_the_peer_api_serves_the_three_messages_to_a_node_given_its_fairness() -> None:
    (node,) = nodes(memory_lake(B), 1)
    fairness = RecordingFairness(node.member.id, node.cluster)
    sender = Member("n9", "http://n9:9000")
    node.membership.heard_from(Member("m0", "http://m0:9000"))  # m0 leads in the node's view

    async def main(api: PeerAPI, as_node: Member) -> None:
        client = PeerClient(as_node, SECRET, timeout=5.0, clock=lambda: 1_800_000_000.0,
                            transport=httpx2.ASGITransport(app=api))
        try:
            report = await client.report(node.member, wire.ReportsRequest(2.0), 1.0)
            assert report.node == node.member.id and report.window_s == 2.0
            await client.update(node.member, wire.WeightsUpdate(as_node.id, 1, {"a": 9.0}), 1.0)
            await client.update(node.member, wire.PartitionsUpdate(as_node.id, 1, "other", (("n0",),)), 1.0)
        finally:
            await client.aclose()

    api = PeerAPI(SECRET, node.cluster, node.reads, dict, clock=lambda: 1_800_000_000.0, fairness=fairness)
    run(main(api, sender))  # n9 does not lead: acknowledged, not applied
    assert fairness.weights == {"a": 1.0, "b": 1.0} and node.cluster.counters["updates_ignored"] == 2
    run(main(api, Member("m0", "http://m0:9000")))
    assert fairness.weights == {"a": 9.0}
    assert node.cluster.counters["partition_tables_refused"] == 1 and fairness.tables == []

    without = PeerAPI(SECRET, node.cluster, node.reads, dict, clock=lambda: 1_800_000_000.0)
    with pytest.raises(PeerUnavailable, match="404"):
        run(main(without, sender))


def test_an_update_a_peer_does_not_acknowledge_is_counted() -> None:
    (n0, n1, _), clock = cluster()
    n0.peers.down.add("n1")
    assert run(n0.cluster.send_update(n1.member, weights_from("n0", 1), 1.0)) is False
    assert n0.cluster.counters["updates_unacknowledged"] == 1
    n0.peers.down.clear()
    assert run(n0.cluster.send_update(n1.member, weights_from("n0", 2), 1.0)) is True
    assert n1.fairness.weights == {"a": 3.0}


def test_demand_of_a_tenant_without_a_global_weight_is_not_given_to_the_policy() -> None:
    report = wire.DemandReport("n0", 1, 1.0, {}, {"a": {"requests": 1.0}, "gone": {"requests": 9.0}},
                               {"requests": 10.0}, {"a": 1.0}, {}, "v")
    fake = FakeAllocate()
    weight_updates({"n0": report}, {"a": 1.0}, leader="n0", epoch=1, allocate=fake, split=proportional)
    assert fake.calls[0][1] == {"n0": {"a": pytest.approx(0.1)}}


def test_the_cluster_min_max_ratio_counts_only_tenants_short_of_their_demand() -> None:
    from cachetier.cluster import wire
    from gateway.loops.allocation import cluster_mmr

    def report(node: str, served: dict[str, float], wanted: dict[str, float]) -> wire.DemandReport:
        return wire.DemandReport(node=node, sequence=1, window_s=1.0,
                                 served={t: {"requests": v} for t, v in served.items()},
                                 wanted={t: {"requests": v} for t, v in wanted.items()},
                                 capacity={"requests": 100.0}, weights={}, partitions={}, ring_version="v")

    reports = {"n1": report("n1", {"a": 40.0, "b": 60.0}, {"a": 80.0, "b": 90.0}),
               "n2": report("n2", {"a": 40.0, "c": 5.0}, {"a": 80.0, "c": 5.0})}  # c got all it asked
    assert cluster_mmr(reports, {"a": 1.0, "b": 1.0, "c": 1.0}) == pytest.approx(60.0 / 80.0)
    assert cluster_mmr(reports, {"a": 2.0, "b": 1.0, "c": 1.0}) == pytest.approx(40.0 / 60.0)
