"""Talking to peer cache nodes: ``Peers``, what the cluster and the read path ask of the other
nodes, and ``PeerClient``, its HTTP implementation over the wire messages of
``cachetier.cluster.wire`` (the in-memory twin is ``cachetier.cluster.memory.MemoryPeers``).

Whatever goes wrong with a peer (down, slow, answering with an error or with something that is
not lakegate at all) reaches the caller as ``PeerUnavailable``, the one exception besides
``PreconditionFailed`` (the owner found the object changed in the lake) that a peer call raises.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Protocol, runtime_checkable

import httpx2

from cachetier.cluster import wire
from cachetier.cluster.ring import Member
from cachetier.errors import PreconditionFailed
from cachetier.lake import ObjectInfo
from cachetier.net.transport import LakeTransport
from cachetier.write.messages import BodyRequest, Copied, Copy, Held, HeldQuery, Notice
from cachetier.write.peers import NotHeld


Answered = Callable[[wire.BlockAnswer], None]  # told a block's answer before its bytes


class PeerUnavailable(Exception):
    """A peer could not serve the request (down, overloaded, or answered with an error)."""


@runtime_checkable
class Peers(Protocol):
    """The other nodes, as this node calls them (``cachetier.cluster.node.Cluster`` and, through
    it, the read path)."""

    async def heartbeat(self, url: str, load: Mapping[str, float], timeout: float,
                        anomalies: tuple[wire.AnomalyReport, ...] = ()) -> wire.HeartbeatAnswer:
        """Send our heartbeat (with ``load`` and our ``anomalies``) to the node at ``url``; its
        answer names it."""
        ...

    async def invalidate(self, member: Member, bucket: str, keys: list[str] | None, timeout: float) -> None:
        """Have ``member`` forget ``keys`` of ``bucket`` (None: the bucket's metadata)."""
        ...

    async def goodbye(self, member: Member, timeout: float) -> None:
        """Tell ``member`` this node is shutting down: it drops this node from its ring now."""
        ...

    async def report(self, member: Member, request: wire.ReportsRequest, timeout: float) -> wire.DemandReport:
        """``member``'s demand over the window ``request`` names (the fairness leader asks)."""
        ...

    async def update(
        self, member: Member, update: wire.WeightsUpdate | wire.PartitionsUpdate, timeout: float
    ) -> None:
        """Send the fairness leader's ``update`` to ``member`` (acknowledged, applied or not)."""
        ...

    def fetch_block(
        self, member: Member, info: ObjectInfo, index: int, block_size: int, tenant: str,
        answered: Answered | None = None,
    ) -> AsyncIterator[bytes]:
        """Block ``index`` of ``info``'s version, from its owner ``member``, as it arrives;
        ``answered`` is called with the owner's answer before the first byte.

        Raises PeerUnavailable (before or during the body: the caller fetches what is missing
        elsewhere) or PreconditionFailed (the lake's object is no longer ``info``)."""
        ...

    async def aclose(self) -> None:
        ...


def block_request(info: ObjectInfo, index: int, block_size: int, tenant: str) -> wire.BlockRequest:
    """The wire request for block ``index`` of ``info``; one the owner would refuse is PeerUnavailable."""
    try:
        return wire.BlockRequest(info.bucket, info.key, info.etag, info.size, index, block_size, tenant)
    except wire.WireError as exc:
        raise PeerUnavailable(str(exc)) from None


def _tls_context(verify_tls: bool | str) -> ssl.SSLContext | None:
    """None: the system's CAs; False: no verification; a path: that CA file."""
    if verify_tls is True:
        return None
    if verify_tls is False:
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        return context
    return ssl.create_default_context(cafile=verify_tls)


class PeerClient:
    """``Peers`` over HTTP: the peer API, every request signed as node ``me`` at ``clock()``
    (wall-clock seconds: receivers compare the stamp with their own time) under its own nonce. ``transport``
    replaces the lean HTTP transport (tests pass httpx's ASGITransport or MockTransport)."""

    def __init__(
        self,
        me: Member,
        secret: bytes,
        *,
        timeout: float,
        clock: Callable[[], float],
        connect_timeout: float = 1.0,
        verify_tls: bool | str = True,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        self.me = me
        self.secret = secret
        self.clock = clock
        if transport is None:
            transport = LakeTransport(max_connections=256, max_idle=64, ssl_context=_tls_context(verify_tls))
        self.client = httpx2.AsyncClient(
            timeout=httpx2.Timeout(timeout, connect=connect_timeout),
            transport=transport,
            headers={"user-agent": "lakegate-peer"},
        )

    def _headers(
        self, method: str, path: str, query: str = "", body: bytes = b"", headers: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """``headers`` and the signature over them (each request with a fresh nonce)."""
        return wire.sign(self.secret, self.me.id, method, path, query, body, now=self.clock(), headers=headers)

    async def _post(self, url: str, path: str, body: bytes, timeout: float | None) -> bytes:
        """The answer's body to ``body`` POSTed to ``path`` at ``url``; any failure is PeerUnavailable."""
        headers = self._headers("POST", path, "", body) | {"content-type": "application/json"}
        try:
            resp = await self.client.post(url + path, content=body, headers=headers, timeout=timeout)
        except httpx2.HTTPError as exc:
            raise PeerUnavailable(f"{url}: {exc!r}") from exc
        if resp.status_code != 200:
            raise PeerUnavailable(f"{url}: {path} answered {resp.status_code}")
        return resp.content

    async def heartbeat(self, url: str, load: Mapping[str, float], timeout: float,
                        anomalies: tuple[wire.AnomalyReport, ...] = ()) -> wire.HeartbeatAnswer:
        body = wire.Heartbeat(self.me, dict(load), anomalies).to_json()
        answer = await self._post(url, wire.HEARTBEAT, body, timeout)
        try:
            return wire.HeartbeatAnswer.from_json(answer)
        except wire.WireError as exc:  # not a lakegate node (a wrong port, a proxy's page)
            raise PeerUnavailable(f"{url}: bad heartbeat answer: {exc}") from exc

    async def invalidate(self, member: Member, bucket: str, keys: list[str] | None, timeout: float) -> None:
        body = wire.Invalidate(bucket, None if keys is None else tuple(keys)).to_json()
        answer = await self._post(member.url, wire.INVALIDATE, body, timeout)
        try:
            wire.Acknowledged.from_json(answer)
        except wire.WireError as exc:
            raise PeerUnavailable(f"{member.url}: bad invalidate answer: {exc}") from exc

    async def goodbye(self, member: Member, timeout: float) -> None:
        answer = await self._post(member.url, wire.GOODBYE, wire.Goodbye(self.me).to_json(), timeout)
        try:
            wire.Acknowledged.from_json(answer)
        except wire.WireError as exc:
            raise PeerUnavailable(f"{member.url}: bad goodbye answer: {exc}") from exc

    async def report(self, member: Member, request: wire.ReportsRequest, timeout: float) -> wire.DemandReport:
        answer = await self._post(member.url, wire.REPORTS, request.to_json(), timeout)
        try:
            return wire.DemandReport.from_json(answer)
        except wire.WireError as exc:
            raise PeerUnavailable(f"{member.url}: bad demand report: {exc}") from exc

    async def update(
        self, member: Member, update: wire.WeightsUpdate | wire.PartitionsUpdate, timeout: float
    ) -> None:
        path = wire.WEIGHTS if isinstance(update, wire.WeightsUpdate) else wire.PARTITIONS
        answer = await self._post(member.url, path, update.to_json(), timeout)
        try:
            wire.Acknowledged.from_json(answer)
        except wire.WireError as exc:
            raise PeerUnavailable(f"{member.url}: bad {path} answer: {exc}") from exc

    async def fetch_block(
        self, member: Member, info: ObjectInfo, index: int, block_size: int, tenant: str,
        answered: Answered | None = None,
    ) -> AsyncIterator[bytes]:
        request = block_request(info, index, block_size, tenant)
        query = request.to_query()
        headers = self._headers("GET", wire.BLOCK, query, headers=request.headers())  # the tenant signed too
        try:
            async with self.client.stream("GET", f"{member.url}{wire.BLOCK}?{query}", headers=headers) as resp:
                if resp.status_code == 412:
                    raise PreconditionFailed(f"{member.id}: the object changed in the lake")
                if resp.status_code != 200:
                    raise PeerUnavailable(f"{member.id}: block answered {resp.status_code}")
                answer = _check_length(member, request, resp.headers)
                if answered is not None:
                    answered(answer)
                async for chunk in resp.aiter_raw():
                    yield chunk
        except httpx2.HTTPError as exc:
            raise PeerUnavailable(f"{member.id}: {exc!r}") from exc

    # ---- write-back (cachetier.write.peers.JournalPeers) ---------------------------------------

    async def journal_copy(self, member: Member, copy: Copy, body: AsyncIterator[bytes], timeout: float) -> str:
        query = copy.to_query()
        headers = wire.sign(self.secret, self.me.id, "PUT", wire.JOURNAL_COPY, query, now=self.clock(), streamed=True)
        headers |= {"content-type": "application/octet-stream", "content-length": str(copy.version.size)}
        try:
            resp = await self.client.put(f"{member.url}{wire.JOURNAL_COPY}?{query}", content=body, headers=headers,
                                         timeout=timeout)
        except httpx2.HTTPError as exc:
            raise PeerUnavailable(f"{member.id}: {exc!r}") from exc
        if resp.status_code != 200:
            raise PeerUnavailable(f"{member.id}: journal copy answered {resp.status_code}: {resp.text[:200]}")
        try:
            return Copied.from_json(resp.content).md5
        except wire.WireError as exc:
            raise PeerUnavailable(f"{member.id}: bad copy answer: {exc}") from exc

    async def journal_notice(self, member: Member, notice: Notice, timeout: float) -> None:
        answer = await self._post(member.url, wire.JOURNAL_NOTICE, notice.to_json(), timeout)
        try:
            wire.Acknowledged.from_json(answer)
        except wire.WireError as exc:
            raise PeerUnavailable(f"{member.url}: bad notice answer: {exc}") from exc

    async def journal_held(self, member: Member, query: HeldQuery, timeout: float) -> Held:
        answer = await self._post(member.url, wire.JOURNAL_HELD, query.to_json(), timeout)
        try:
            return Held.from_json(answer)
        except wire.WireError as exc:
            raise PeerUnavailable(f"{member.url}: bad held answer: {exc}") from exc

    async def journal_body(self, member: Member, request: BodyRequest) -> AsyncIterator[bytes]:
        query = request.to_query()
        headers = self._headers("GET", wire.JOURNAL_BODY, query)
        try:
            async with self.client.stream("GET", f"{member.url}{wire.JOURNAL_BODY}?{query}", headers=headers) as resp:
                if resp.status_code == 404:
                    raise NotHeld(f"{member.id} does not hold {request.bucket}/{request.key}@{request.seq}")
                if resp.status_code != 200:
                    raise PeerUnavailable(f"{member.id}: journal body answered {resp.status_code}")
                got = 0
                async for chunk in resp.aiter_raw():
                    got += len(chunk)
                    yield chunk
                if got != request.last - request.first + 1:
                    raise PeerUnavailable(f"{member.id}: journal body cut short")
        except httpx2.HTTPError as exc:
            raise PeerUnavailable(f"{member.id}: {exc!r}") from exc

    async def aclose(self) -> None:
        await self.client.aclose()


def _check_length(member: Member, request: wire.BlockRequest, headers: Mapping[str, str]) -> wire.BlockAnswer:
    """The answer; one that will not be the whole block is refused before its first byte (so the
    reader asks the next owner rather than taking part of a block from this one)."""
    try:
        answer = wire.BlockAnswer.from_headers(headers)
    except wire.WireError as exc:
        raise PeerUnavailable(f"{member.id}: {exc}") from None
    if answer.length != request.length:
        raise PeerUnavailable(f"{member.id}: block {request.index} of {answer.length} bytes, expected {request.length}")
    return answer
