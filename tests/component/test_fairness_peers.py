"""The fairness leader's messages over real sockets: two nodes, each its peer API served by
uvicorn on 127.0.0.1 (ports 22000-22999) and its real ``PeerClient`` on the lean transport,
find each other by heartbeats; the leader's allocation round sets the other's weights, and its
placement round gives both rings one new table."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import uvicorn
from doubles import RecordingFairness

from cachetier.cluster import wire
from cachetier.cluster.client import PeerClient
from cachetier.cluster.config import MembershipConfig
from cachetier.cluster.membership import Membership
from cachetier.cluster.node import Cluster
from cachetier.cluster.ring import Member
from gateway.loops.allocation import AllocationRounds
from gateway.loops.placement import PlacementRounds
from gateway.peerapi import PeerAPI
from harness.ports import port_busy

SECRET = b"cluster-secret-0123456789"
PORTS = range(22400, 22500)


def two_ports() -> list[int]:
    free = [port for port in PORTS if not port_busy(port)]
    assert len(free) >= 2, "no free ports in 22400-22499"
    return free[:2]


class PeerNode:
    def __init__(self, name: str, port: int) -> None:
        self.member = Member(name, f"http://127.0.0.1:{port}")
        self.port = port
        config = MembershipConfig(16, 1, heartbeat_interval=1.0, failure_timeout=30.0)
        self.membership = Membership(self.member, config, clock=time.time)
        self.client = PeerClient(self.member, SECRET, timeout=5.0, clock=time.time)
        self.cluster = Cluster(self.membership, self.client, seeds=[])
        self.fairness = RecordingFairness(name, self.cluster)
        reads: Any = SimpleNamespace(block_size=1 << 20)  # no block is asked for here
        self.api = PeerAPI(SECRET, self.cluster, reads, dict, fairness=self.fairness)


@contextlib.asynccontextmanager
async def serving(node: PeerNode) -> AsyncIterator[None]:
    server = uvicorn.Server(uvicorn.Config(node.api, host="127.0.0.1", port=node.port, lifespan="off",
                                           log_level="warning"))
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        yield
    finally:
        server.should_exit = True
        await task
        await node.cluster.aclose()


def test_the_leaders_updates_reach_the_other_node_over_http() -> None:
    first, second = (PeerNode(name, port) for name, port in zip(("n0", "n1"), two_ports()))
    first.cluster.seeds = [second.member.url]

    def rebalance(table: Any, demand: Any, servable: Any, *, max_moves: int) -> tuple[Any, tuple[object, ...]]:
        rows = list(table)
        rows[0] = ("n1",) if rows[0] == ("n0",) else ("n0",)
        return tuple(rows), ((0,),)

    async def main() -> None:
        async with serving(first), serving(second):
            await first.cluster.heartbeat_round({})  # second hears of first, and first of second
            assert [m.id for m in second.membership.live()] == ["n0", "n1"] == [m.id for m in first.membership.live()]
            weights = AllocationRounds(first.cluster, first.fairness, lambda: {"a": 1.0}, interval=2.0,
                                       allocate=lambda g, demand, c, cap, **_: {n: {"a": 5.0} for n in demand},
                                       split=lambda total, demand: dict.fromkeys(demand, total / len(demand)),
                                       lake_bandwidth=100.0)
            await weights.round()
            placement = PlacementRounds(first.cluster, first.fairness, interval=120.0, rebalance=rebalance)
            await placement.round()

    asyncio.run(main())
    (update,) = second.fairness.updates
    # every node's weights ride along (Pisces RS: replica choice by the tenant's weight on each)
    assert update == wire.WeightsUpdate("n0", update.epoch, {"a": 5.0}, 50.0, {}, None, {"n0": {"a": 5.0}, "n1": {"a": 5.0}})
    assert second.fairness.weights == first.fairness.weights == {"a": 5.0}
    assert first.membership.ring.version == second.membership.ring.version != second.membership.planned.version
    assert second.cluster.counters["partitions_moved"] == 1 and len(second.fairness.tables) == 1
