"""The peer API under ``/_lakegate/v1/`` (the protocol is ``cachetier.cluster.wire``): a raw ASGI
app, reached only through ``LakegateApp``'s routing, never through the S3 router. It holds the
HTTP plumbing only: a route table (method, path) -> (decode, handler) over the wire messages,
whose handlers are ``cachetier.cluster.owner.Owner``'s (and the goodbye's, applied to the node's
``Cluster``) and, on a node given a ``FairnessPeer``,
``cachetier.cluster.follower.Follower``'s (POST reports, weights, partitions; else 404).

Every request must carry the cluster HMAC under a nonce not seen from its sender within the
window; anything else (no signature, a wrong one, a replay, an old node's request without a
nonce, a tenant's SigV4 ``Authorization``, a node without a cluster secret) is refused with 403
before any other work. Answers are JSON, except a block and a journal body, which are bytes. The
write-back journal's copy route streams its body in (its MD5 named in the signed query).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from cachetier.cluster import wire
from cachetier.cluster.follower import FairnessPeer, Follower
from cachetier.cluster.node import Cluster
from cachetier.cluster.owner import LocalReads, Owner, ServedBlock, WrongBlockSize
from cachetier.errors import NoSuchKey, PreconditionFailed, S3Error
from cachetier.write.messages import BodyRequest, HeldQuery, Notice
from cachetier.write.peers import JournalOwner, NotHeld
from gateway.s3.config import FrontendConfig

log = logging.getLogger("lakegate.peer")
M = TypeVar("M")
Meter = Callable[[wire.BlockRequest, int], Awaitable[None]]  # a block's request, a piece's length
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

_MAX_BODY = 1 << 20  # heartbeats, invalidations, fairness messages are small; a block request has no body

# exception -> status, looked up along the exception's MRO (the most specific class wins)
_STATUS: dict[type[BaseException], int] = {
    wire.PeerAuthError: 403,
    wire.WireError: 400,
    WrongBlockSize: 409,
    PreconditionFailed: 412,
    NoSuchKey: 412,
    S3Error: 503,
    OSError: 503,  # the journal's disk (full, failing): the sender tries elsewhere
}


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Incoming:
    """A verified peer request, before its message is decoded."""

    sender: str
    query: str
    headers: Mapping[str, str]
    body: bytes


class JsonAnswer(Protocol):
    def to_json(self) -> bytes: ...


Answer = JsonAnswer | ServedBlock


@dataclass(frozen=True)
class Route(Generic[M]):
    """How one call's message is decoded from its request, and who handles it (with the sender's id)."""

    decode: Callable[[Incoming], M]
    handle: Callable[[M, str], Awaitable[Answer]]


def routes(owner: Owner, follower: Follower | None = None, journal: JournalOwner | None = None
           ) -> dict[tuple[str, str], Route[Any]]:
    table: dict[tuple[str, str], Route[Any]] = {
        ("GET", wire.BLOCK): Route(lambda r: wire.BlockRequest.from_query(r.query, r.headers), owner.block),
        ("POST", wire.HEARTBEAT): Route(lambda r: wire.Heartbeat.from_json(r.body), owner.heartbeat),
        ("POST", wire.INVALIDATE): Route(lambda r: wire.Invalidate.from_json(r.body), owner.invalidate),
        ("POST", wire.GOODBYE): Route(lambda r: wire.Goodbye.from_json(r.body), _goodbye(owner.cluster)),
    }
    if follower is not None:
        table |= {
            ("POST", wire.REPORTS): Route(lambda r: wire.ReportsRequest.from_json(r.body), follower.reports),
            ("POST", wire.WEIGHTS): Route(lambda r: wire.WeightsUpdate.from_json(r.body), follower.weights),
            ("POST", wire.PARTITIONS): Route(lambda r: wire.PartitionsUpdate.from_json(r.body), follower.partitions),
        }
    if journal is not None:  # write-back (issue 14); the copy and body routes stream (PeerAPI.__call__)
        table |= {
            ("POST", wire.JOURNAL_NOTICE): Route(lambda r: Notice.from_json(r.body), journal.notice),
            ("POST", wire.JOURNAL_HELD): Route(lambda r: HeldQuery.from_json(r.body), journal.held),
        }
    return table


def _goodbye(cluster: Cluster) -> Callable[[wire.Goodbye, str], Awaitable[wire.Acknowledged]]:
    """POST goodbye: the sender leaves this node's ring now; only a node may say its own."""

    async def handle(message: wire.Goodbye, sender: str) -> wire.Acknowledged:
        if message.member.id != sender:
            raise wire.WireError(f"a goodbye of {message.member.id!r} sent by {sender!r}")
        cluster.said_goodbye(message.member)
        return wire.Acknowledged()

    return handle


class PeerAPI:
    """The peer API of a node; without a secret, a cluster or a read path it refuses everything.
    ``clock`` is the wall clock the requests' stamps are checked against; ``replays`` the memory
    of the nonces accepted (one per app: every request of this node passes it); ``fairness``
    this node's fairness state, which the cluster's leader asks and updates (None: 404);
    ``meter`` is awaited before each piece of a block leaves, with the block's request and the
    piece's length (fairness: the owner's bytes sent, charged to the tenant the peer named)."""

    def __init__(
        self, secret: bytes, cluster: Cluster | None, reads: LocalReads | None, load: Callable[[], Mapping[str, float]],
        *, clock: Callable[[], float] = time.time, replays: wire.ReplayGuard | None = None,
        body_timeout: float = FrontendConfig.body_timeout, fairness: FairnessPeer | None = None,
        meter: Meter | None = None, anomalies: Callable[[], tuple[wire.AnomalyReport, ...]] = tuple,
        journal: JournalOwner | None = None,
    ) -> None:
        self.secret = secret
        self.meter = meter
        self.body_timeout = body_timeout
        self.clock = clock
        self.replays = replays if replays is not None else wire.ReplayGuard()
        self.routes: dict[tuple[str, str], Route[Any]] = {}
        self.journal = journal if secret and cluster is not None else None
        if secret and cluster is not None and reads is not None:
            follower = Follower(cluster, fairness) if fairness is not None else None
            self.routes = routes(Owner(cluster, reads, load, anomalies), follower, self.journal)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method, path = scope["method"], scope["path"]
        if self.journal is not None and (method, path) in _JOURNAL_STREAMS:
            await self._journal_stream(scope, receive, send)
            return
        try:
            incoming = await self._verified(scope, receive)
            route = self.routes.get((method, path))
            if route is None:
                raise _Refused(404, f"no peer API {method} {path[len(wire.PREFIX):]}")
            message = route.decode(incoming)
            answer = await route.handle(message, incoming.sender)
        except Exception as exc:
            status = _status_of(exc)
            if status is None:
                raise
            await _refuse(scope, send, status, exc)
            return
        if isinstance(answer, ServedBlock):
            meter = self.meter
            await _stream(send, answer, None if meter is None else functools.partial(meter, message))
        else:
            await _send(send, 200, answer.to_json())

    async def _verified(self, scope: Scope, receive: Receive) -> Incoming:
        """The request, once its cluster HMAC checks out (else 403, before any other work)."""
        query = scope.get("query_string", b"").decode("latin-1")
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        body = await _read_body(receive, self.body_timeout)
        if not self.routes:
            raise _Refused(403, "this node is not in a cluster")
        sender = wire.verify(
            self.secret, scope["method"], scope["path"], query, headers, body, self.clock(), self.replays)
        return Incoming(sender, query, headers, body)


    async def _journal_stream(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The write-back routes whose bodies stream: a copy in (its body checked against the
        MD5 its signed query names, and bounded in how long the sender may pause), a body out."""
        assert self.journal is not None
        query = scope.get("query_string", b"").decode("latin-1")
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        copy = scope["method"] == "PUT"
        try:
            wire.verify(self.secret, scope["method"], scope["path"], query, headers, b"", self.clock(), self.replays,
                        streamed=copy)
            if copy:
                answer = await self.journal.copy(query, _body_pieces(receive, self.body_timeout))
                await _send(send, 200, answer.to_json())
                return
            length, pieces = await self.journal.body(BodyRequest.from_query(query))
        except Exception as exc:
            status = 404 if isinstance(exc, NotHeld) else _status_of(exc)
            if status is None:
                raise
            await _refuse(scope, send, status, exc)
            return
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"application/octet-stream"), (b"content-length", str(length).encode())]})
        try:
            async for piece in pieces:
                await send({"type": "http.response.body", "body": piece, "more_body": True})
        finally:
            await pieces.aclose()  # type: ignore[attr-defined]
        await send({"type": "http.response.body", "body": b""})


async def _body_pieces(receive: Receive, timeout: float) -> AsyncIterator[bytes]:
    """A streamed request body, as it arrives; _Refused if the sender pauses too long or goes."""
    while True:
        try:
            async with asyncio.timeout(timeout):
                message = await receive()
        except TimeoutError:
            raise _Refused(408, "no body byte within the body timeout") from None
        if message["type"] == "http.disconnect":
            raise _Refused(400, "client went away")
        if message.get("body"):
            yield message["body"]
        if not message.get("more_body", False):
            return


_JOURNAL_STREAMS = {("PUT", wire.JOURNAL_COPY), ("GET", wire.JOURNAL_BODY)}


def _status_of(exc: Exception) -> int | None:
    if isinstance(exc, _Refused):
        return exc.status
    return next((_STATUS[cls] for cls in type(exc).__mro__ if cls in _STATUS), None)


async def _refuse(scope: Scope, send: Send, status: int, exc: Exception) -> None:
    if status == 403:
        log.warning("peer API: refused %s %s from %s: %s", scope["method"], scope["path"], _client(scope), exc)
    await _send(send, status, json.dumps({"error": str(exc)}).encode())


async def _stream(send: Send, block: ServedBlock, meter: Callable[[int], Awaitable[None]] | None = None) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": block.answer.headers()})
    try:
        async for piece in block.pieces:
            if meter is not None:
                await meter(len(piece))
            await send({"type": "http.response.body", "body": piece, "more_body": True})
    finally:
        await block.pieces.aclose()
    await send({"type": "http.response.body", "body": b""})


async def _read_body(receive: Receive, timeout: float) -> bytes:
    """The body, bounded in size and in how long the sender may pause (the HMAC is checked
    once it is whole, so an unauthenticated caller must not be able to hold it open)."""
    body = bytearray()
    async for piece in _body_pieces(receive, timeout):
        body += piece
        if len(body) > _MAX_BODY:
            raise _Refused(413, "peer request body too large")
    return bytes(body)


async def _send(send: Send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def _client(scope: Mapping[str, object]) -> str:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if isinstance(client, (tuple, list)) else "?"
