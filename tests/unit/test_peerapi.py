"""The peer API (``gateway.peerapi.PeerAPI``) as an ASGI app, driven through httpx's
ASGITransport, in front of a real ReadPath node over the in-memory lake (the cluster twin of
tests/doubles.py). Also the real ``PeerClient`` talking to it, so what the client signs
is checked against what the server receives; and ``PeerClient`` and its in-memory twin
``MemoryPeers`` conform to ``Peers`` by exact signature and pass one behaviour suite (the client
over ASGITransport to the peer API, the twin calling the node's ``Owner`` directly)."""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping, MutableMapping
from typing import Any
from urllib.parse import urlencode, urlsplit

import httpx2
import pytest
from doubles import BS, B, Clock, CountingLake, Node, memory_lake, nodes, put, run

from cachetier.cluster.node import Cluster
from cachetier.errors import PreconditionFailed
from cachetier.lake import ObjectInfo
from cachetier.cluster.config import MembershipConfig
from cachetier.cluster.membership import Membership
from cachetier.cluster.client import PeerClient, Peers, PeerUnavailable
from cachetier.cluster.memory import MemoryPeers
from cachetier.cluster.owner import Owner
from cachetier.cluster.wire import PREFIX, sign
from cachetier.cluster.ring import Member
from gateway.peerapi import PeerAPI

SECRET = b"cluster-secret-0123456789"
LOAD = {"cpu_percent": 5.0}
SENDER = Member("n9", "http://n9:9000")  # the peer that calls the node under test


@pytest.fixture
def lake() -> CountingLake:
    return CountingLake(memory_lake(B))


def peer_api(node: Node, secret: bytes = SECRET) -> PeerAPI:
    return PeerAPI(secret, node.cluster, node.reads, lambda: LOAD)


async def call(
    app: Any, method: str, name: str, *, query: str = "", doc: Mapping[str, object] | None = None,
    secret: bytes | None = SECRET, sender: str = "n9", headers: Mapping[str, str] | None = None,
) -> httpx2.Response:
    """One request to ``app``'s peer API, signed as ``sender`` with ``secret`` (None: unsigned)."""
    body = json.dumps(doc).encode() if doc is not None else b""
    path = PREFIX + name
    signed = sign(secret, sender, method, path, query, body, now=time.time()) if secret is not None else {}
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://n0:9000") as client:
        return await client.request(method, path + (f"?{query}" if query else ""), content=body,
                                    headers={**signed, **(headers or {})})


def block_query(info: ObjectInfo, index: int, /, **changes: object) -> str:
    """A block request's query; ``changes`` replace fields (None drops one)."""
    params: dict[str, object] = {"bucket": info.bucket, "key": info.key, "etag": info.etag, "size": info.size,
                                 "index": index, "block_size": BS}
    params.update(changes)
    return urlencode({k: v for k, v in params.items() if v is not None})


# ---- refusals ----------------------------------------------------------------------------------

SIGV4 = {"authorization": "AWS4-HMAC-SHA256 Credential=AKIDALICE00000000001/20260101/us-east-1/s3/aws4_request, "
                          "SignedHeaders=host;x-amz-date, Signature=" + "a" * 64,
         "x-amz-date": "20260101T000000Z"}
REQUESTS = [("GET", "block", None), ("POST", "heartbeat", {"id": "n9", "url": "http://n9:9000"}),
            ("POST", "invalidate", {"bucket": B, "keys": None}), ("POST", "goodbye", {"id": "n9", "url": "http://n9:9000"})]


@pytest.mark.parametrize(("method", "name", "doc"), REQUESTS, ids=[name for _, name, _ in REQUESTS])
@pytest.mark.parametrize("how", ["unsigned", "wrong-secret", "tenant-sigv4"])
def test_a_request_without_the_cluster_hmac_is_refused(
    lake: CountingLake, method: str, name: str, doc: dict[str, object] | None, how: str
) -> None:
    (node,) = nodes(lake, 1)

    async def main() -> None:
        await put(lake, "k", os.urandom(BS))
        info = await lake.head_object(B, "k")
        query = block_query(info, 0) if name == "block" else ""
        secret = {"unsigned": None, "wrong-secret": b"not-the-secret", "tenant-sigv4": None}[how]
        headers = SIGV4 if how == "tenant-sigv4" else None
        resp = await call(peer_api(node), method, name, query=query, doc=doc, secret=secret, headers=headers)
        assert resp.status_code == 403
        assert lake.gets == [] and node.membership.known() == []  # no work was done

    run(main())


@pytest.mark.parametrize("what", ["no-secret", "no-cluster"])
def test_a_node_outside_a_cluster_refuses_every_peer_request(lake: CountingLake, what: str) -> None:
    (node,) = nodes(lake, 1)
    app = PeerAPI(b"", node.cluster, node.reads, dict) if what == "no-secret" else PeerAPI(SECRET, None, None, dict)

    async def main() -> None:
        for secret in (b"", SECRET):  # even signed with the empty key it would check against
            resp = await call(app, "POST", "heartbeat", doc={"id": "n9", "url": "http://n9:9000"}, secret=secret)
            assert resp.status_code == 403
        assert node.membership.known() == []

    run(main())


def test_an_unknown_peer_call_is_404(lake: CountingLake) -> None:
    (node,) = nodes(lake, 1)

    async def main() -> None:
        assert (await call(peer_api(node), "POST", "block", doc={})).status_code == 404
        assert (await call(peer_api(node), "GET", "nothing")).status_code == 404

    run(main())


# ---- heartbeat ---------------------------------------------------------------------------------


class Hosts:
    """An ASGI app that hands each request to the peer API of the node its Host names."""

    def __init__(self, apps: Mapping[str, Any]) -> None:
        self.apps = apps

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        host = dict(scope["headers"])[b"host"].decode()
        await self.apps[host](scope, receive, send)


def test_a_heartbeat_round_trip_registers_both_nodes(lake: CountingLake) -> None:
    (node,) = nodes(lake, 1)
    sender = Member("n9", "http://n9:9000", 2.0)

    async def main() -> None:
        membership = Membership(sender, MembershipConfig(64, 1, failure_timeout=30.0), clock=Clock())
        async with peer_client(node, sender) as client:
            cluster = Cluster(membership, client, seeds=[(None, node.member.url)])
            await cluster.heartbeat_round({"cpu_percent": 50.0})
        assert node.membership.peers() == [sender]  # the receiver heard the sender
        assert membership.peers() == [node.member]  # and the sender learned its id from the answer
        assert membership.ring.version == node.membership.ring.version
        assert node.cluster.snapshot()["peers"]["n9"]["load"] == {"cpu_percent": 50.0}  # type: ignore[index]
        assert membership.snapshot()["peers"]["n0"]["load"] == LOAD  # type: ignore[index]
        assert cluster.counters["heartbeat_failures"] == 0

    run(main())


@pytest.mark.parametrize("doc", [{"url": "http://n9:9000"}, {"id": "n9", "url": "http://n9", "load": ["x"]},
                                 {"id": "n9", "url": "http://n9", "load": {"cpu": "high"}}])
def test_a_bad_heartbeat_is_400(lake: CountingLake, doc: dict[str, object]) -> None:
    (node,) = nodes(lake, 1)

    async def main() -> None:
        assert (await call(peer_api(node), "POST", "heartbeat", doc=doc)).status_code == 400
        assert node.membership.known() == []

    run(main())


async def post_signed(app: Any, name: str, body: bytes, headers: Mapping[str, str]) -> int:
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://n0:9000") as client:
        return (await client.post(PREFIX + name, content=body, headers=dict(headers))).status_code


def test_a_replayed_heartbeat_is_refused(lake: CountingLake) -> None:
    """A captured heartbeat sent again, well within the time window, is 403: it cannot keep a
    killed node in the ring. The same heartbeat signed afresh (a new nonce) is accepted."""
    (node,) = nodes(lake, 1)
    clock = Clock()
    app = PeerAPI(SECRET, node.cluster, node.reads, lambda: LOAD, clock=clock)
    body = json.dumps({"id": "n9", "url": "http://n9:9000"}).encode()

    async def main() -> None:
        captured = sign(SECRET, "n9", "POST", PREFIX + "heartbeat", "", body, now=clock.now)
        assert await post_signed(app, "heartbeat", body, captured) == 200
        assert [m.id for m in node.membership.known()] == ["n9"]
        clock.now += 1
        assert await post_signed(app, "heartbeat", body, captured) == 403
        assert len(app.replays) == 1
        fresh = sign(SECRET, "n9", "POST", PREFIX + "heartbeat", "", body, now=clock.now)
        assert await post_signed(app, "heartbeat", body, fresh) == 200

    run(main())


def test_a_block_request_with_its_tenant_changed_is_refused(lake: CountingLake) -> None:
    """The tenant header is signed: a captured block request cannot be charged to another tenant."""
    (node,) = nodes(lake, 1)

    async def main() -> None:
        await put(lake, "k", os.urandom(BS))
        info = await lake.head_object(B, "k")
        query = block_query(info, 0)
        signed = sign(SECRET, "n9", "GET", PREFIX + "block", query, now=time.time(), headers={"x-lakegate-tenant": "a"})
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=peer_api(node)), base_url="http://n0") as c:
            resp = await c.get(PREFIX + "block?" + query, headers=signed | {"x-lakegate-tenant": "b"})
        assert resp.status_code == 403 and lake.gets == []

    run(main())


# ---- invalidate --------------------------------------------------------------------------------


def test_invalidate_forgets_the_keys_metadata(lake: CountingLake) -> None:
    (node,) = nodes(lake, 1)

    async def main() -> None:
        for key in ("a", "b", "c"):
            await put(lake, key, os.urandom(10))
            await node.reads.head(B, key)
        resp = await call(peer_api(node), "POST", "invalidate", doc={"bucket": B, "keys": ["a", "b"]})
        assert (resp.status_code, resp.json()) == (200, {"ok": True})
        assert [node.reads.meta.get(B, k) is None for k in ("a", "b", "c")] == [True, True, False]

        resp = await call(peer_api(node), "POST", "invalidate", doc={"bucket": B, "keys": None})
        assert resp.status_code == 200 and len(node.reads.meta) == 0  # the whole bucket
        assert node.cluster.counters["invalidations_received"] == 2

    run(main())


@pytest.mark.parametrize("doc", [{"keys": ["a"]}, {"bucket": B, "keys": "a"}, {"bucket": 1, "keys": None}])
def test_a_bad_invalidate_is_400(lake: CountingLake, doc: dict[str, object]) -> None:
    (node,) = nodes(lake, 1)

    async def main() -> None:
        assert (await call(peer_api(node), "POST", "invalidate", doc=doc)).status_code == 400

    run(main())


def test_a_body_that_is_not_a_json_object_is_400(lake: CountingLake) -> None:
    (node,) = nodes(lake, 1)

    async def main() -> None:
        body = b"[1, 2]"
        headers = sign(SECRET, "n9", "POST", PREFIX + "invalidate", "", body, now=time.time())
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=peer_api(node)), base_url="http://n0") as c:
            assert (await c.post(PREFIX + "invalidate", content=body, headers=headers)).status_code == 400

    run(main())


# ---- block -------------------------------------------------------------------------------------


def test_a_block_is_its_exact_bytes(lake: CountingLake) -> None:
    (node,) = nodes(lake, 1)
    data = os.urandom(3 * BS + 10)

    async def main() -> None:
        await put(lake, "k", data)
        info = await lake.head_object(B, "k")
        for index, expected in [(1, data[BS : 2 * BS]), (3, data[3 * BS :]), (1, data[BS : 2 * BS])]:
            resp = await call(peer_api(node), "GET", "block", query=block_query(info, index))
            assert resp.status_code == 200
            assert resp.content == expected and resp.headers["content-length"] == str(len(expected))
        assert [r for _, r in lake.gets] == [f"bytes={BS}-{2 * BS - 1}", f"bytes={3 * BS}-{3 * BS + 9}"]
        assert node.cluster.counters["peer_served"] == 3  # the last one from L2
        assert node.cluster.counters["peer_served_bytes"] == 2 * BS + 10

    run(main())


@pytest.mark.parametrize(
    ("changes", "status"),
    [
        ({"block_size": BS * 2}, 409),
        ({"index": 4}, 400),
        ({"index": -1}, 400),
        ({"index": "one"}, 400),
        ({"size": 0}, 400),
        ({"etag": None}, 400),
        ({"etag": '"0123456789abcdef0123456789abcdef"'}, 412),  # another version than the lake's
        ({"key": "missing"}, 412),
    ],
    ids=["block-size", "index-past-end", "negative-index", "index-nan", "empty", "no-etag", "changed", "gone"],
)
def test_a_block_request_that_cannot_be_served(lake: CountingLake, changes: dict[str, object], status: int) -> None:
    (node,) = nodes(lake, 1)

    async def main() -> None:
        await put(lake, "k", os.urandom(3 * BS + 10))
        info = await lake.head_object(B, "k")
        resp = await call(peer_api(node), "GET", "block", query=block_query(info, 1, **changes))
        assert resp.status_code == status, resp.text
        if status != 412:
            assert lake.gets == []  # refused before any lake request
        assert len(node.l2) == 0

    run(main())


def test_an_object_changed_in_the_lake_is_412_to_the_peer_client(lake: CountingLake) -> None:
    """Through the real PeerClient: a 412 comes back as PreconditionFailed (retry with fresh
    metadata), not PeerUnavailable (which would send the reader to the lake with the old ETag)."""
    (node,) = nodes(lake, 1)

    async def main() -> None:
        await put(lake, "k", os.urandom(BS))
        old = await lake.head_object(B, "k")
        await put(lake, "k", os.urandom(BS))
        async with peer_client(node) as client:
            with pytest.raises(PreconditionFailed):
                await collect(client.fetch_block(node.member, old, 0, BS, "t"))

    run(main())


@pytest.mark.parametrize("key", ["plain", "a b+c%20d/e?f=g&h#i", "ünïcödé/ключ/键", "~!*'();:@$,[]"])
def test_the_peer_client_fetches_blocks_of_any_key(lake: CountingLake, key: str) -> None:
    """What PeerClient signs (its query) is what the peer API receives, whatever the key holds."""
    (node,) = nodes(lake, 1)
    data = os.urandom(2 * BS + 1)

    async def main() -> None:
        await put(lake, key, data)
        info = await lake.head_object(B, key)
        async with peer_client(node) as client:
            assert await collect(client.fetch_block(node.member, info, 1, BS, "t")) == data[BS : 2 * BS]
            assert await collect(client.fetch_block(node.member, info, 2, BS, "t")) == data[2 * BS :]

    run(main())


@contextlib.asynccontextmanager
async def peer_client(node: Node, sender: Member = SENDER) -> AsyncIterator[PeerClient]:
    """A PeerClient (as ``sender``) whose HTTP goes to ``node``'s peer API in-process."""
    app = Hosts({urlsplit(node.member.url).netloc: peer_api(node)})
    client = PeerClient(sender, SECRET, timeout=5.0, clock=time.time, transport=httpx2.ASGITransport(app=app))
    try:
        yield client
    finally:
        await client.aclose()


async def collect(pieces: AsyncIterator[bytes]) -> bytes:
    return b"".join([piece async for piece in pieces])


# ---- PeerClient and its twin: one behaviour ---------------------------------------------------


@pytest.mark.parametrize("cls", [PeerClient, MemoryPeers])
def test_the_client_and_its_twin_conform_to_peers(cls: type) -> None:
    for name in ("heartbeat", "invalidate", "goodbye", "report", "update", "fetch_block", "aclose"):
        assert inspect.signature(getattr(cls, name)) == inspect.signature(getattr(Peers, name)), name
    assert inspect.isasyncgenfunction(cls.fetch_block)  # type: ignore[attr-defined]


def test_both_are_peers_at_run_time() -> None:
    transport = httpx2.MockTransport(lambda request: httpx2.Response(500))
    client = PeerClient(SENDER, SECRET, timeout=1.0, clock=time.time, transport=transport)
    assert isinstance(client, Peers) and isinstance(MemoryPeers(SENDER, {}), Peers)
    run(client.aclose())


# ---- one behaviour, both implementations -------------------------------------------------------

Connect = Callable[[Node, set[str]], contextlib.AbstractAsyncContextManager[Peers]]  # node, ids of the nodes down


class Unplugged(httpx2.AsyncBaseTransport):
    """``transport``, except that hosts named in ``down`` refuse the connection."""

    def __init__(self, transport: httpx2.AsyncBaseTransport, down: set[str]) -> None:
        self.transport, self.down = transport, down

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.host in self.down:
            raise httpx2.ConnectError("connection refused", request=request)
        return await self.transport.handle_async_request(request)


@contextlib.asynccontextmanager
async def over_http(node: Node, down: set[str]) -> AsyncIterator[Peers]:
    transport = Unplugged(httpx2.ASGITransport(app=Hosts({"n0:9000": peer_api(node)})), down)
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


def test_a_goodbye_drops_the_sender_from_the_ring_at_once(lake: CountingLake, connect: Connect) -> None:
    """Issue 16: the goodbye of a node shutting down takes it out of the receiver's ring now (no
    failure timeout), counted; its late heartbeat does not bring it back; a node down is
    PeerUnavailable."""
    (node,) = nodes(lake, 1)

    async def main() -> None:
        async with connect(node, set()) as peers:
            await peers.heartbeat(node.member.url, LOAD, 1.0)
            assert node.membership.peers() == [SENDER]
            await peers.goodbye(node.member, 1.0)
            assert node.membership.peers() == []
            assert node.cluster.counters["goodbyes_received"] == 1
            await peers.heartbeat(node.member.url, LOAD, 1.0)  # a draining worker's late heartbeat
            assert node.membership.peers() == []
        async with connect(node, {"n0"}) as peers:
            with pytest.raises(PeerUnavailable):
                await peers.goodbye(node.member, 1.0)

    run(main())


def test_a_goodbye_for_another_node_is_400(lake: CountingLake) -> None:
    (node,) = nodes(lake, 1)

    async def main() -> None:
        node.membership.heard_from(Member("n7", "http://n7:9000"))
        resp = await call(peer_api(node), "POST", "goodbye", doc={"id": "n7", "url": "http://n7:9000"})
        assert resp.status_code == 400
        assert [m.id for m in node.membership.peers()] == ["n7"]
        assert (await call(peer_api(node), "POST", "goodbye", doc={"id": "n7", "url": "http://n7:9000"},
                           sender="n7")).status_code == 200
        assert node.membership.peers() == []

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
