"""The peer client and its in-memory twin: ``PeerClient`` and ``MemoryPeers`` conform to ``Peers``
by exact signature, and pass one behaviour suite: the real client over httpx's ASGITransport to
the peer API app in-process, the twin calling the node's ``Owner`` directly. Both talk to a real
ReadPath node over the in-memory lake (``test_readpath_cluster.nodes``)."""

from __future__ import annotations

import contextlib
import inspect
import os
import time
from collections.abc import AsyncIterator, Callable
from typing import AsyncContextManager

import httpx
import pytest
from test_peerapi import LOAD, SECRET, SENDER, Hosts, collect, peer_api
from test_readpath import BS, B, CountingLake, MemoryLake, put, run
from test_readpath_cluster import Node, nodes

from cachetier.cluster.client import PeerClient, Peers, PeerUnavailable
from cachetier.cluster.memory import MemoryPeers
from cachetier.cluster.owner import Owner
from cachetier.errors import PreconditionFailed


@pytest.mark.parametrize("cls", [PeerClient, MemoryPeers])
def test_the_client_and_its_twin_conform_to_peers(cls: type) -> None:
    for name in ("heartbeat", "invalidate", "fetch_block", "aclose"):
        assert inspect.signature(getattr(cls, name)) == inspect.signature(getattr(Peers, name)), name
    assert inspect.isasyncgenfunction(cls.fetch_block)  # type: ignore[attr-defined]


def test_both_are_peers_at_run_time() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(500))
    client = PeerClient(SENDER, SECRET, timeout=1.0, clock=time.time, transport=transport)
    assert isinstance(client, Peers) and isinstance(MemoryPeers(SENDER, {}), Peers)
    run(client.aclose())


# ---- one behaviour, both implementations -------------------------------------------------------

Connect = Callable[[Node, set[str]], AsyncContextManager[Peers]]  # node, ids of the nodes down


class Unplugged(httpx.AsyncBaseTransport):
    """``transport``, except that hosts named in ``down`` refuse the connection."""

    def __init__(self, transport: httpx.AsyncBaseTransport, down: set[str]) -> None:
        self.transport, self.down = transport, down

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.host in self.down:
            raise httpx.ConnectError("connection refused", request=request)
        return await self.transport.handle_async_request(request)


@contextlib.asynccontextmanager
async def over_http(node: Node, down: set[str]) -> AsyncIterator[Peers]:
    transport = Unplugged(httpx.ASGITransport(app=Hosts({"n0:9000": peer_api(node)})), down)
    client = PeerClient(SENDER, SECRET, timeout=5.0, clock=time.time, transport=transport)
    try:
        yield client
    finally:
        await client.aclose()


@contextlib.asynccontextmanager
async def in_memory(node: Node, down: set[str]) -> AsyncIterator[Peers]:
    peers = MemoryPeers(SENDER, {node.member.url: Owner(node.cluster, node.reads, lambda: LOAD)})
    peers.down = down
    yield peers


@pytest.fixture(params=[over_http, in_memory], ids=["http", "memory"])
def connect(request: pytest.FixtureRequest) -> Connect:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def lake() -> CountingLake:
    return CountingLake(MemoryLake())


def test_a_heartbeat_is_answered_by_the_node_it_reached(lake: CountingLake, connect: Connect) -> None:
    (node,) = nodes(lake, 1)

    async def main() -> None:
        async with connect(node, set()) as peers:
            answer = await peers.heartbeat(node.member.url, {"cpu_percent": 50.0}, 1.0)
        assert (answer.member, dict(answer.load)) == (node.member, LOAD)
        assert answer.ring_version == node.membership.ring.version
        assert node.membership.peers() == [SENDER]
        assert node.cluster.snapshot()["peers"]["n9"]["load"] == {"cpu_percent": 50.0}  # type: ignore[index]

    run(main())


def test_an_invalidation_forgets_the_keys(lake: CountingLake, connect: Connect) -> None:
    (node,) = nodes(lake, 1)

    async def main() -> None:
        for key in ("a", "b"):
            await put(lake, key, os.urandom(10))
            await node.reads.head(B, key)
        async with connect(node, set()) as peers:
            await peers.invalidate(node.member, B, ["a"], 1.0)
            assert [node.reads.meta.get(B, k) is None for k in ("a", "b")] == [True, False]
            await peers.invalidate(node.member, B, None, 1.0)
        assert len(node.reads.meta) == 0
        assert node.cluster.counters["invalidations_received"] == 2

    run(main())


def test_a_block_is_its_bytes_and_a_changed_object_is_precondition_failed(
    lake: CountingLake, connect: Connect
) -> None:
    (node,) = nodes(lake, 1)
    data = os.urandom(2 * BS + 1)

    async def main() -> None:
        await put(lake, "k", data)
        info = await lake.head_object(B, "k")
        async with connect(node, set()) as peers:
            assert await collect(peers.fetch_block(node.member, info, 1, BS, "t")) == data[BS : 2 * BS]
            assert await collect(peers.fetch_block(node.member, info, 2, BS, "t")) == data[2 * BS :]
            await put(lake, "k", os.urandom(BS))
            with pytest.raises(PreconditionFailed):
                await collect(peers.fetch_block(node.member, info, 0, BS, "t"))
        assert node.cluster.counters["peer_served"] == 2

    run(main())


@pytest.mark.parametrize(("index", "block_size"), [(0, 2 * BS), (5, BS), (-1, BS)],
                         ids=["other-block-size", "past-the-end", "negative"])
def test_a_block_the_owner_cannot_serve_is_peer_unavailable(
    lake: CountingLake, connect: Connect, index: int, block_size: int
) -> None:
    (node,) = nodes(lake, 1)

    async def main() -> None:
        await put(lake, "k", os.urandom(2 * BS))
        info = await lake.head_object(B, "k")
        async with connect(node, set()) as peers:
            with pytest.raises(PeerUnavailable):
                await collect(peers.fetch_block(node.member, info, index, block_size, "t"))
        assert lake.gets == []

    run(main())


def test_a_node_that_is_down_is_peer_unavailable(lake: CountingLake, connect: Connect) -> None:
    (node,) = nodes(lake, 1)

    async def main() -> None:
        await put(lake, "k", os.urandom(BS))
        info = await lake.head_object(B, "k")
        async with connect(node, {node.member.id}) as peers:
            with pytest.raises(PeerUnavailable):
                await peers.heartbeat(node.member.url, {}, 1.0)
            with pytest.raises(PeerUnavailable):
                await peers.invalidate(node.member, B, ["k"], 1.0)
            with pytest.raises(PeerUnavailable):
                await collect(peers.fetch_block(node.member, info, 0, BS, "t"))
        assert node.membership.known() == [] and lake.gets == []

    run(main())
