"""The peer API's authentication (an HMAC of the cluster secret over method, path, query, body,
sender and time: pure functions, the time passed to ``sign`` and ``verify``), and PeerClient's boundary:
whatever a peer answers, its failure reaches the caller as PeerUnavailable (httpx's
MockTransport plays the peer)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping

import httpx2
import pytest

from cachetier.cluster.node import Cluster
from cachetier.cluster.config import MembershipConfig
from cachetier.cluster.membership import Membership
from cachetier.cluster.client import PeerClient, PeerUnavailable
from cachetier.cluster.wire import MAX_SKEW, PREFIX, PeerAuthError, member_from, sign, verify
from cachetier.cluster.ring import Member

SECRET = b"cluster-secret-0123456789"
PATH = PREFIX + "block"
QUERY = "bucket=bkt&key=a%2Fb&etag=%22e%22&size=10&index=0&block_size=4"
BODY = b'{"id": "node2"}'


def signed(method: str = "POST", path: str = PATH, query: str = QUERY, body: bytes = BODY) -> dict[str, str]:
    return sign(SECRET, "node2", method, path, query, body, now=time.time())


def check(headers: Mapping[str, str], *, secret: bytes = SECRET, method: str = "POST", path: str = PATH,
          query: str = QUERY, body: bytes = BODY, now: float | None = None) -> str:
    return verify(secret, method, path, query, headers, body, time.time() if now is None else now)


def test_a_signed_request_verifies_as_its_sender() -> None:
    assert check(signed()) == "node2"
    assert check(signed("GET", body=b""), method="GET", body=b"") == "node2"
    assert check(signed(method="post"), method="POST") == "node2"  # methods compare upper-case


@pytest.mark.parametrize(
    "change",
    [
        {"secret": b"another-secret"},
        {"method": "PUT"},
        {"path": PREFIX + "heartbeat"},
        {"query": QUERY.replace("index=0", "index=1")},
        {"query": ""},
        {"body": BODY + b" "},
        {"body": b""},
    ],
    ids=lambda change: next(iter(change)),
)
def test_any_change_to_a_signed_request_is_refused(change: dict[str, object]) -> None:
    with pytest.raises(PeerAuthError):
        check(signed(), **change)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("header", "value"),
    [("x-lakegate-node", "node3"), ("x-lakegate-time", "{stamp:.3f}"), ("x-lakegate-signature", "0" * 64)],
)
def test_a_changed_header_is_refused(header: str, value: str) -> None:
    headers = signed()
    headers[header] = value.format(stamp=float(headers["x-lakegate-time"]) + 1)
    with pytest.raises(PeerAuthError):
        check(headers)


@pytest.mark.parametrize("missing", ["x-lakegate-node", "x-lakegate-time", "x-lakegate-signature"])
def test_a_missing_header_is_refused(missing: str) -> None:
    headers = signed()
    del headers[missing]
    with pytest.raises(PeerAuthError, match="missing"):
        check(headers)


def test_a_request_too_far_from_our_time_is_refused_either_way() -> None:
    headers = signed()
    stamp = float(headers["x-lakegate-time"])
    assert check(headers, now=stamp + MAX_SKEW - 1) == "node2"
    assert check(headers, now=stamp - MAX_SKEW + 1) == "node2"
    for now in (stamp + MAX_SKEW + 1, stamp - MAX_SKEW - 1):
        with pytest.raises(PeerAuthError, match="time"):
            check(headers, now=now)


def test_a_time_that_is_not_a_number_is_refused() -> None:
    headers = signed()
    headers["x-lakegate-time"] = "yesterday"
    with pytest.raises(PeerAuthError, match="time"):
        check(headers)


def test_a_tenants_sigv4_authorization_alone_is_refused() -> None:
    sigv4 = {
        "authorization": "AWS4-HMAC-SHA256 Credential=AKIDALICE00000000001/20260101/us-east-1/s3/aws4_request, "
                         "SignedHeaders=host;x-amz-date, Signature=" + "a" * 64,
        "x-amz-date": "20260101T000000Z",
        "x-amz-content-sha256": "UNSIGNED-PAYLOAD",
    }
    with pytest.raises(PeerAuthError):
        check(sigv4)
    with pytest.raises(PeerAuthError):  # nor does it help next to a peer's headers signed otherwise
        check(sigv4 | {k: v for k, v in signed().items() if k != "x-lakegate-signature"}
              | {"x-lakegate-signature": "a" * 64})


def test_member_from_a_heartbeat() -> None:
    assert member_from({"id": "n", "url": "http://n:9000/", "weight": 2}) == Member("n", "http://n:9000", 2.0)
    assert member_from({"id": "n", "url": "http://n:9000"}).weight == 1.0
    for bad in ({"url": "http://n"}, {"id": "n"}, {"id": 1, "url": "http://n"}, {"id": "n", "url": "u", "weight": "x"}):
        with pytest.raises(ValueError):
            member_from(bad)


# ---- PeerClient: whatever a peer answers, a failure is PeerUnavailable ---------------------------


async def client_for(handler: Callable[[httpx2.Request], httpx2.Response]) -> PeerClient:
    """A PeerClient (as node "me") whose requests ``handler`` answers."""
    return PeerClient(Member("me", "http://me:9000"), SECRET, timeout=1.0, clock=time.time,
                      transport=httpx2.MockTransport(handler))


JUNK = [
    httpx2.Response(200, text="<html>welcome to nginx</html>"),  # a seed that is not a lakegate node
    httpx2.Response(200, json=["not", "an", "object"]),
    httpx2.Response(200, json={"id": "p", "url": "http://p:9000", "load": [1, 2]}),
    httpx2.Response(200, json={"id": "p"}),
    httpx2.Response(403, json={"error": "peer signature does not match"}),
    httpx2.Response(500, text="oops"),
]


@pytest.mark.parametrize("answer", JUNK, ids=["html", "list", "bad-load", "no-url", "403", "500"])
def test_a_heartbeat_answered_with_junk_is_peer_unavailable(answer: httpx2.Response) -> None:
    async def main() -> None:
        client = await client_for(lambda request: answer)
        try:
            with pytest.raises(PeerUnavailable):
                await client.heartbeat("http://p:9000", {}, 1.0)
        finally:
            await client.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("answer", [JUNK[0], JUNK[4], JUNK[5]], ids=["html", "403", "500"])
def test_an_invalidation_answered_with_junk_is_peer_unavailable(answer: httpx2.Response) -> None:
    async def main() -> None:
        client = await client_for(lambda request: answer)
        try:
            with pytest.raises(PeerUnavailable):
                await client.invalidate(Member("p", "http://p:9000"), "bkt", ["k"], 1.0)
        finally:
            await client.aclose()

    asyncio.run(main())


def test_one_junk_seed_does_not_stop_a_heartbeat_round() -> None:
    """The round still hears from the others and still expires the silent: a seed answering
    HTML (a wrong port, a proxy's default page) must not keep dead nodes in the ring."""
    now = [100.0]
    me, good, silent = (Member(i, f"http://{i}:9000") for i in ("me", "good", "silent"))

    def handler(request: httpx2.Request) -> httpx2.Response:
        verify(SECRET, request.method, request.url.path, request.url.query.decode(), request.headers,
               request.content, time.time())
        if request.url.host == "junk":
            return httpx2.Response(200, text="<html>")
        if request.url.host == "good":
            return httpx2.Response(200, json={"id": "good", "url": good.url, "load": {}})
        raise httpx2.ConnectError("refused", request=request)

    async def main() -> None:
        membership = Membership(me, MembershipConfig(16, 1, failure_timeout=3.0), clock=lambda: now[0])
        membership.heard_from(silent)
        cluster = Cluster(membership, await client_for(handler), seeds=[(None, "http://junk:9000"), (None, good.url)])
        now[0] += 10
        try:
            await cluster.heartbeat_round({})
        finally:
            await cluster.aclose()
        assert [m.id for m in membership.live()] == ["good", "me"]
        assert cluster.counters["heartbeat_failures"] == 2  # junk and silent

    asyncio.run(main())
