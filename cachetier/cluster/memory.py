"""``MemoryPeers``: the in-memory twin of ``PeerClient``, for tests of anything that talks to
peers without a network. It calls the other nodes' ``Owner`` (the same code the peer API runs)
directly, passing every message and answer through its wire encoding, and fails as the client
does: a node that is down, unknown or refusing is ``PeerUnavailable``; an object changed in the
lake is ``PreconditionFailed``. The fairness messages go to the nodes' ``Follower`` in
``followers`` (a node without one is ``PeerUnavailable``, as the peer API's 404). It does no HMAC and keeps no nonces: authentication and replay protection are the peer API's,
tested there.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import NoReturn

from cachetier.cluster import wire
from cachetier.cluster.client import Answered, PeerUnavailable, block_request
from cachetier.cluster.follower import Follower
from cachetier.cluster.owner import Owner, WrongBlockSize
from cachetier.cluster.ring import Member
from cachetier.errors import NoSuchKey, PreconditionFailed, S3Error
from cachetier.lake import ObjectInfo
from cachetier.write.messages import BodyRequest, Copied, Copy, Held, HeldQuery, Notice
from cachetier.write.peers import JournalOwner


class MemoryPeers:
    """``Peers`` as calls into ``owners`` (peer URL -> that node's Owner) and ``followers`` (peer
    URL -> that node's Follower), as node ``me``. Nodes whose id is in ``down`` answer nothing."""

    def __init__(self, me: Member, owners: Mapping[str, Owner], followers: Mapping[str, Follower] | None = None,
                 journals: Mapping[str, JournalOwner] | None = None) -> None:
        self.me = me
        self.owners = owners
        self.followers: Mapping[str, Follower] = followers if followers is not None else {}
        self.journals: Mapping[str, JournalOwner] = journals if journals is not None else {}
        self.down: set[str] = set()

    def _owner(self, url: str) -> Owner:
        owner = self.owners.get(url)
        if owner is None or owner.cluster.me.id in self.down:
            raise PeerUnavailable(f"{url}: no answer")
        return owner

    async def heartbeat(self, url: str, load: Mapping[str, float], timeout: float,
                        anomalies: tuple[wire.AnomalyReport, ...] = ()) -> wire.HeartbeatAnswer:
        message = wire.Heartbeat.from_json(wire.Heartbeat(self.me, dict(load), anomalies).to_json())
        try:
            answer = await self._owner(url).heartbeat(message, self.me.id)
        except (wire.WireError, S3Error) as exc:
            _unavailable(url, exc)
        return wire.HeartbeatAnswer.from_json(answer.to_json())

    async def invalidate(self, member: Member, bucket: str, keys: list[str] | None, timeout: float) -> None:
        sent = wire.Invalidate(bucket, None if keys is None else tuple(keys))
        try:
            answer = await self._owner(member.url).invalidate(wire.Invalidate.from_json(sent.to_json()), self.me.id)
        except (wire.WireError, S3Error) as exc:
            _unavailable(member.url, exc)
        wire.Acknowledged.from_json(answer.to_json())

    async def goodbye(self, member: Member, timeout: float) -> None:
        sent = wire.Goodbye.from_json(wire.Goodbye(self.me).to_json())
        self._owner(member.url).cluster.said_goodbye(sent.member)
        wire.Acknowledged.from_json(wire.Acknowledged().to_json())

    def _follower(self, member: Member) -> Follower:
        follower = self.followers.get(member.url)
        if follower is None or member.id in self.down:
            raise PeerUnavailable(f"{member.url}: no answer")
        return follower

    async def report(self, member: Member, request: wire.ReportsRequest, timeout: float) -> wire.DemandReport:
        sent = wire.ReportsRequest.from_json(request.to_json())
        try:
            answer = await self._follower(member).reports(sent, self.me.id)
        except wire.WireError as exc:
            _unavailable(member.url, exc)
        return wire.DemandReport.from_json(answer.to_json())

    async def update(
        self, member: Member, update: wire.WeightsUpdate | wire.PartitionsUpdate, timeout: float
    ) -> None:
        follower = self._follower(member)
        try:
            if isinstance(update, wire.WeightsUpdate):
                answer = await follower.weights(wire.WeightsUpdate.from_json(update.to_json()), self.me.id)
            else:
                answer = await follower.partitions(wire.PartitionsUpdate.from_json(update.to_json()), self.me.id)
        except wire.WireError as exc:
            _unavailable(member.url, exc)
        wire.Acknowledged.from_json(answer.to_json())

    async def fetch_block(
        self, member: Member, info: ObjectInfo, index: int, block_size: int, tenant: str,
        answered: Answered | None = None,
    ) -> AsyncIterator[bytes]:
        sent = block_request(info, index, block_size, tenant)
        request = wire.BlockRequest.from_query(sent.to_query(), sent.headers())
        try:
            served = await self._owner(member.url).block(request, self.me.id)
        except (PreconditionFailed, NoSuchKey) as exc:  # the peer API's 412
            raise PreconditionFailed(f"{member.id}: the object changed in the lake") from exc
        except (wire.WireError, WrongBlockSize, S3Error) as exc:
            _unavailable(member.id, exc)
        if answered is not None:
            answered(served.answer)
        try:
            async for piece in served.pieces:
                yield piece
        except S3Error as exc:  # over HTTP: a body cut short
            _unavailable(member.id, exc)
        finally:
            await served.pieces.aclose()

    # ---- write-back: the nodes' JournalOwner in ``journals`` (peer URL -> it) --------------------

    def _journal(self, member: Member) -> JournalOwner:
        journal = self.journals.get(member.url)
        if journal is None or member.id in self.down:
            raise PeerUnavailable(f"{member.url}: no answer")
        return journal

    async def journal_copy(self, member: Member, copy: Copy, body: AsyncIterator[bytes], timeout: float) -> str:
        journal = self._journal(member)
        try:
            answer = await journal.copy(copy.to_query(), body)
        except (wire.WireError, S3Error, OSError) as exc:
            _unavailable(member.id, exc)
        return Copied.from_json(answer.to_json()).md5

    async def journal_notice(self, member: Member, notice: Notice, timeout: float) -> None:
        answer = await self._journal(member).notice(Notice.from_json(notice.to_json()), self.me.id)
        wire.Acknowledged.from_json(answer.to_json())

    async def journal_held(self, member: Member, query: HeldQuery, timeout: float) -> Held:
        answer = await self._journal(member).held(HeldQuery.from_json(query.to_json()), self.me.id)
        return Held.from_json(answer.to_json())

    async def journal_body(self, member: Member, request: BodyRequest) -> AsyncIterator[bytes]:
        _, pieces = await self._journal(member).body(BodyRequest.from_query(request.to_query()))
        try:
            async for piece in pieces:
                yield piece
        finally:
            await pieces.aclose()  # type: ignore[attr-defined]

    async def aclose(self) -> None:
        pass


def _unavailable(who: str, exc: Exception) -> NoReturn:
    raise PeerUnavailable(f"{who}: {exc}") from exc
