"""Talking to peer cache nodes: the peer API's authentication, and its client.

Every peer request carries an HMAC-SHA256, keyed by the cluster secret, over its method, path,
query, body digest, sender id and time (``X-Lakegate-Node``, ``X-Lakegate-Time``,
``X-Lakegate-Signature``). Receivers refuse a request whose signature does not match or whose
time is more than ``MAX_SKEW`` seconds off. Tenant credentials mean nothing here: a SigV4
``Authorization`` header is not an HMAC of the cluster secret, so it is refused like any
other wrong signature.

The peer API (served by ``gateway.peerapi``), under ``/_lakegate/v1/``:

    GET  block?bucket=&key=&etag=&size=&index=&block_size=   one block, from the owner's L2
                                                              or fetched by it from the lake
    POST heartbeat      JSON {id, url, weight, load} both ways
    POST invalidate     JSON {bucket, keys}: forget the keys' metadata and blocks (keys null:
                        the whole bucket's metadata)
"""

from __future__ import annotations

import hashlib
import hmac
import json
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from urllib.parse import urlencode

import httpx2 as httpx  # the maintained continuation of httpx, same API

from cachetier.errors import PreconditionFailed
from cachetier.net.transport import LakeTransport
from cachetier.lake import ObjectInfo
from cachetier.cluster.ring import Member

PREFIX = "/_lakegate/v1/"
MAX_SKEW = 60.0
_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


class PeerAuthError(Exception):
    """A peer request without a valid cluster HMAC."""


class PeerUnavailable(Exception):
    """A peer could not serve the request (down, overloaded, or answered with an error)."""


def signature(secret: bytes, method: str, path: str, query: str, body_sha256: str, node: str, stamp: str) -> str:
    message = "\n".join((method.upper(), path, query, body_sha256, node, stamp)).encode("utf-8", "surrogatepass")
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def sign(secret: bytes, node: str, method: str, path: str, query: str = "", body: bytes = b"") -> dict[str, str]:
    """The headers that authenticate one peer request."""
    stamp = f"{time.time():.3f}"
    digest = hashlib.sha256(body).hexdigest() if body else _EMPTY_SHA256
    return {
        "x-lakegate-node": node,
        "x-lakegate-time": stamp,
        "x-lakegate-signature": signature(secret, method, path, query, digest, node, stamp),
    }


def verify(
    secret: bytes, method: str, path: str, query: str, headers: Mapping[str, str], body: bytes, now: float
) -> str:
    """The sending node's id, or PeerAuthError. ``headers`` have lower-case names."""
    node, stamp, given = (headers.get(h, "") for h in ("x-lakegate-node", "x-lakegate-time", "x-lakegate-signature"))
    if not (node and stamp and given):
        raise PeerAuthError("missing peer signature")
    try:
        skew = abs(now - float(stamp))
    except ValueError:
        raise PeerAuthError("bad peer time") from None
    digest = hashlib.sha256(body).hexdigest() if body else _EMPTY_SHA256
    expected = signature(secret, method, path, query, digest, node, stamp)
    if not hmac.compare_digest(expected, given):
        raise PeerAuthError("peer signature does not match")
    if skew > MAX_SKEW:
        raise PeerAuthError("peer request time too far from ours")
    return node


def member_from(doc: Mapping[str, object]) -> Member:
    node_id, url, weight = doc.get("id"), doc.get("url"), doc.get("weight", 1.0)
    if not isinstance(node_id, str) or not isinstance(url, str) or not isinstance(weight, (int, float)):
        raise ValueError(f"not a member: {doc!r}")
    return Member(node_id, url.rstrip("/"), float(weight))


class PeerClient:
    """HTTP client for the peer API, signing every request as node ``me``."""

    def __init__(self, me: Member, secret: bytes, *, timeout: float, connect_timeout: float = 1.0, verify_tls: bool | str = True):
        self.me = me
        self.secret = secret
        context = None
        if verify_tls is False:
            context = ssl.create_default_context()
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        elif isinstance(verify_tls, str):
            context = ssl.create_default_context(cafile=verify_tls)
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            transport=LakeTransport(max_connections=256, max_idle=64, ssl_context=context),
            headers={"user-agent": "lakegate-peer"},
        )

    def _headers(self, method: str, path: str, query: str = "", body: bytes = b"") -> dict[str, str]:
        return sign(self.secret, self.me.id, method, path, query, body)

    async def _post(self, url: str, name: str, doc: Mapping[str, object], timeout: float | None) -> dict:  # type: ignore[type-arg]
        body = json.dumps(doc).encode()
        path = PREFIX + name
        headers = self._headers("POST", path, "", body) | {"content-type": "application/json"}
        try:
            resp = await self.client.post(url + path, content=body, headers=headers, timeout=timeout)
        except httpx.HTTPError as exc:
            raise PeerUnavailable(f"{url}: {exc!r}") from exc
        if resp.status_code != 200:
            raise PeerUnavailable(f"{url}: {name} answered {resp.status_code}")
        try:
            return resp.json()
        except ValueError as exc:  # not a lakegate node (a wrong port, a proxy's page)
            raise PeerUnavailable(f"{url}: {name} answer is not JSON") from exc

    async def heartbeat(self, url: str, load: Mapping[str, float], timeout: float) -> tuple[Member, dict[str, float]]:
        """Send our heartbeat to ``url``; its answer names the node there and its load."""
        doc = {"id": self.me.id, "url": self.me.url, "weight": self.me.weight, "load": dict(load)}
        answer = await self._post(url, "heartbeat", doc, timeout)
        try:
            return member_from(answer), dict(answer.get("load") or {})
        except (ValueError, AttributeError, TypeError) as exc:
            raise PeerUnavailable(f"{url}: bad heartbeat answer") from exc

    async def invalidate(self, member: Member, bucket: str, keys: list[str] | None, timeout: float) -> None:
        await self._post(member.url, "invalidate", {"bucket": bucket, "keys": keys}, timeout)

    async def fetch_block(
        self, member: Member, info: ObjectInfo, index: int, block_size: int, tenant: str
    ) -> AsyncIterator[bytes]:
        """Block ``index`` of ``info``'s version, from its owner ``member``, as it arrives.

        Raises PeerUnavailable (before or during the body: the caller fetches what is
        missing elsewhere) or PreconditionFailed (the lake's object is no longer ``info``)."""
        query = urlencode(
            {"bucket": info.bucket, "key": info.key, "etag": info.etag, "size": info.size, "index": index,
             "block_size": block_size}
        )
        path = PREFIX + "block"
        headers = self._headers("GET", path, query) | {"x-lakegate-tenant": tenant}
        try:
            async with self.client.stream("GET", f"{member.url}{path}?{query}", headers=headers) as resp:
                if resp.status_code == 412:
                    raise PreconditionFailed(f"{member.id}: the object changed in the lake")
                if resp.status_code != 200:
                    raise PeerUnavailable(f"{member.id}: block answered {resp.status_code}")
                async for chunk in resp.aiter_raw():
                    yield chunk
        except httpx.HTTPError as exc:
            raise PeerUnavailable(f"{member.id}: {exc!r}") from exc

    async def aclose(self) -> None:
        await self.client.aclose()
