"""The peer API under ``/_lakegate/v1/`` (see ``cachetier.cluster.peers`` for the protocol): a raw ASGI
app, reached only through ``LakegateApp``'s routing, never through the S3 router.

Every request must carry the cluster HMAC; anything else (no signature, a wrong one, a tenant's
SigV4 ``Authorization``, a node without a cluster secret) is refused with 403 before any
other work. Answers are JSON, except a block, which is its bytes.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from urllib.parse import parse_qs

from cachetier.blocks.ids import block_count
from cachetier.cluster.node import Cluster
from cachetier.context import RequestContext, current
from cachetier.errors import NoSuchKey, PreconditionFailed, S3Error
from cachetier.lake import ObjectInfo
from cachetier.cluster.peers import PREFIX, PeerAuthError, member_from, verify
from cachetier.read.path import ReadPath

log = logging.getLogger("lakegate.peer")

_MAX_BODY = 1 << 20  # heartbeats and invalidations are small; a block request has no body
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class PeerAPI:
    def __init__(
        self, secret: bytes, cluster: Cluster | None, reads: ReadPath | None, load: Callable[[], Mapping[str, float]],
    ) -> None:
        self.secret = secret
        self.cluster = cluster
        self.reads = reads
        self.load = load

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        method, path = scope["method"], scope["path"]
        query = scope.get("query_string", b"").decode("latin-1")
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            body = await _read_body(receive)
            if not self.secret or self.cluster is None or self.reads is None:
                raise _Refused(403, "this node is not in a cluster")
            try:
                node = verify(self.secret, method, path, query, headers, body, time.time())
            except PeerAuthError as exc:
                raise _Refused(403, str(exc)) from None
            name = path[len(PREFIX):]
            if (method, name) == ("GET", "block"):
                await self._block(send, parse_qs(query, keep_blank_values=True), headers)
                return
            if (method, name) == ("POST", "heartbeat"):
                await _json(send, 200, self._heartbeat(_parse_json(body)))
                return
            if (method, name) == ("POST", "invalidate"):
                self._invalidate(_parse_json(body), node)
                await _json(send, 200, {"ok": True})
                return
            raise _Refused(404, f"no peer API {method} {name}")
        except _Refused as exc:
            if exc.status == 403:
                log.warning("peer API: refused %s %s from %s: %s", method, path, _client(scope), exc)
            await _json(send, exc.status, {"error": str(exc)})

    def _heartbeat(self, doc: dict) -> dict[str, object]:  # type: ignore[type-arg]
        assert self.cluster is not None
        try:
            member = member_from(doc)
            load = {k: float(v) for k, v in (doc.get("load") or {}).items()}
        except (ValueError, TypeError, AttributeError) as exc:
            raise _Refused(400, f"bad heartbeat: {exc}") from None
        self.cluster.heard_from(member, load)
        me = self.cluster.me
        return {"id": me.id, "url": me.url, "weight": me.weight, "load": dict(self.load()),
                "ring_version": self.cluster.membership.ring.version}

    def _invalidate(self, doc: dict, node: str) -> None:  # type: ignore[type-arg]
        assert self.reads is not None and self.cluster is not None
        bucket, keys = doc.get("bucket"), doc.get("keys")
        if not isinstance(bucket, str) or not (keys is None or isinstance(keys, list)):
            raise _Refused(400, "invalidate needs bucket and keys")
        if keys is None:
            self.reads.meta.invalidate_bucket(bucket)
        else:
            for key in keys:
                if isinstance(key, str):
                    self.reads.invalidate(bucket, key)
        self.cluster.counters["invalidations_received"] += 1
        log.debug("peer %s invalidated %s %s", node, bucket, "(bucket)" if keys is None else len(keys))

    async def _block(self, send, params: dict[str, list[str]], headers: Mapping[str, str]) -> None:  # type: ignore[no-untyped-def]
        assert self.reads is not None and self.cluster is not None
        info, index = self._block_request(params)
        current.set(RequestContext(tenant=headers.get("x-lakegate-tenant", "-")[:64]))
        pieces = self.reads.serve_block(info, index)
        try:
            first = await anext(pieces)
        except (PreconditionFailed, NoSuchKey) as exc:
            raise _Refused(412, str(exc)) from None
        except S3Error as exc:
            raise _Refused(503, str(exc)) from None
        lo = index * self.reads.block_size
        length = min(lo + self.reads.block_size, info.size) - lo
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/octet-stream"), (b"content-length", str(length).encode())]})
        sent = 0
        try:
            await send({"type": "http.response.body", "body": first, "more_body": True})
            sent = len(first)
            async for piece in pieces:
                await send({"type": "http.response.body", "body": piece, "more_body": True})
                sent += len(piece)
        finally:
            await pieces.aclose()
        self.cluster.counters["peer_served"] += 1
        self.cluster.counters["peer_served_bytes"] += sent
        await send({"type": "http.response.body", "body": b""})

    def _block_request(self, params: dict[str, list[str]]) -> tuple[ObjectInfo, int]:
        assert self.reads is not None
        try:
            one = {name: params[name][0] for name in ("bucket", "key", "etag", "size", "index", "block_size")}
            size, index, block_size = int(one["size"]), int(one["index"]), int(one["block_size"])
        except (KeyError, ValueError):
            raise _Refused(400, "a block request needs bucket, key, etag, size, index, block_size") from None
        if block_size != self.reads.block_size:
            raise _Refused(409, f"block size {block_size} differs from this node's {self.reads.block_size}")
        if size <= 0 or not 0 <= index < block_count(size, block_size):
            raise _Refused(400, f"no block {index} in an object of {size} bytes")
        return ObjectInfo(one["bucket"], one["key"], size, one["etag"], _EPOCH), index


async def _read_body(receive) -> bytes:  # type: ignore[no-untyped-def]
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Refused(400, "client went away")
        body += message.get("body", b"")
        if len(body) > _MAX_BODY:
            raise _Refused(413, "peer request body too large")
        if not message.get("more_body", False):
            return bytes(body)


def _parse_json(body: bytes) -> dict:  # type: ignore[type-arg]
    try:
        doc = json.loads(body)
    except ValueError:
        raise _Refused(400, "body is not JSON") from None
    if not isinstance(doc, dict):
        raise _Refused(400, "body is not a JSON object")
    return doc


async def _json(send, status: int, doc: Mapping[str, object]) -> None:  # type: ignore[no-untyped-def]
    body = json.dumps(doc).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def _client(scope: Mapping[str, object]) -> str:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if isinstance(client, (tuple, list)) else "?"
