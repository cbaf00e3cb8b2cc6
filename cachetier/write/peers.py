"""What the write-back path asks of the other nodes (``JournalPeers``), and the side of a node
that answers them (``JournalOwner``, behind the peer API's journal routes). The messages are
``cachetier.write.messages``; the HTTP client is ``cachetier.cluster.client.PeerClient`` and
the in-memory twin ``cachetier.cluster.memory.MemoryPeers``, both of which implement
``JournalPeers``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol, runtime_checkable

from cachetier.cluster.ring import Member
from cachetier.cluster.wire import Acknowledged, WireError
from cachetier.lake import prepend
from cachetier.write.journal import Journal, Staged, Version
from cachetier.write.messages import BodyRequest, Copied, Copy, Held, HeldQuery, Notice

log = logging.getLogger("lakegate.write")

PIECE = 1 << 20  # bytes read from a journal body at a time


class NotHeld(Exception):
    """The peer does not hold that version (flushed, superseded, or never had it)."""


@runtime_checkable
class JournalPeers(Protocol):
    async def journal_copy(self, member: Member, copy: Copy, body: AsyncIterator[bytes], timeout: float) -> str:
        """A durable copy of ``copy.version`` on ``member``; returns once it is committed there,
        with the MD5 of the body it got. PeerUnavailable otherwise."""
        ...

    async def journal_notice(self, member: Member, notice: Notice, timeout: float) -> None: ...

    async def journal_held(self, member: Member, query: HeldQuery, timeout: float) -> Held: ...

    def journal_body(self, member: Member, request: BodyRequest) -> AsyncIterator[bytes]:
        """The bytes asked for, as they arrive; NotHeld, or PeerUnavailable (before or during)."""
        ...


async def file_pieces(journal: Journal, version: Version, first: int = 0, last: int | None = None,
                      still: Callable[[], Awaitable[bool]] | None = None) -> AsyncIterator[bytes]:
    """Bytes ``first`` to ``last`` (inclusive; default the end) of ``version``'s journaled body,
    a piece at a time, read in a thread. ``still`` is asked before each piece after the first
    (the flusher's: is the version still wanted?), the first too; False stops with ``Superseded``.
    FileNotFoundError when the body is gone before the first piece."""
    end = version.size - 1 if last is None else last
    fd = await asyncio.to_thread(journal.open_body, version)
    try:
        offset = first
        while offset <= end:
            if still is not None and not await still():
                raise Superseded(f"{version.bucket}/{version.key} was overwritten while it was sent")
            count = min(PIECE, end - offset + 1)
            piece = await asyncio.to_thread(os.pread, fd, count, offset)
            if not piece:
                raise ConnectionError("the journal body ended early")
            offset += len(piece)
            yield piece
    finally:
        os.close(fd)


class Superseded(Exception):
    """A later write of the key was acknowledged: this version must not reach the lake."""


async def _write(staged: Staged, body: AsyncIterator[bytes]) -> None:
    """``body`` into ``staged``, about a piece at a time (HTTP hands over 64 KiB chunks: one
    thread hop each would cost more than the writes)."""
    batch: list[bytes] = []
    held = 0
    async for chunk in body:
        batch.append(chunk)
        held += len(chunk)
        if held >= PIECE:
            await asyncio.to_thread(staged.write, b"".join(batch))
            batch, held = [], 0
    if batch:
        await asyncio.to_thread(staged.write, b"".join(batch))


class JournalOwner:
    """The receiving side of the journal routes, over this node's ``Journal``. ``me`` is this
    node's id; ``on_notice`` is the write-back engine's handling of a notice (forget metadata,
    supersede, record); ``committed`` is told of each copy committed here."""

    def __init__(self, me: str, journal: Journal, on_notice: Callable[[Notice, str], Awaitable[None]],
                 on_copy: Callable[[Version], Awaitable[None]]) -> None:
        self.me = me
        self.journal = journal
        self.on_notice = on_notice
        self.on_copy = on_copy

    async def copy(self, query: str, body: AsyncIterator[bytes]) -> Copied:
        """Commit the body that follows as a copy of the version the query names (its MD5
        checked when named; a put's empty ETag filled with the body's MD5)."""
        copy = Copy.from_query(query, self.me)
        version = copy.version
        staged = await asyncio.to_thread(self.journal.stage)
        try:
            await _write(staged, body)
            md5 = staged.md5_hex()
            if staged.size != version.size or (copy.md5 and md5 != copy.md5):
                raise WireError("the copy's body is not the one its query names")
            if version.kind == "put" and not version.etag:
                version = dataclasses.replace(version, etag=f'"{md5}"')
            if version.kind == "delete":
                await asyncio.to_thread(staged.abort)
                await asyncio.to_thread(self.journal.commit, version, None)
            else:
                await asyncio.to_thread(self.journal.commit, version, staged)
        except BaseException:
            await asyncio.to_thread(staged.abort)
            raise
        await self.on_copy(version)  # older versions go after the commit: a crash between keeps one
        return Copied(md5)

    async def notice(self, notice: Notice, sender: str) -> Acknowledged:
        await self.on_notice(notice, sender)
        return Acknowledged()

    async def held(self, query: HeldQuery, sender: str) -> Held:
        versions = await asyncio.to_thread(self.journal.versions, query.bucket, query.key)
        gone = await asyncio.to_thread(self.journal.gone_seq, query.bucket, query.key)
        return Held(any(v.seq == query.seq and v.local for v in versions), query.seq <= gone)

    async def body(self, request: BodyRequest) -> tuple[int, AsyncIterator[bytes]]:
        """The length and the pieces of the range asked for; NotHeld if this node has no such body."""
        versions = await asyncio.to_thread(self.journal.versions, request.bucket, request.key)
        version = next((v for v in versions if v.seq == request.seq and v.local), None)
        if version is None or request.last >= version.size:
            raise NotHeld(f"{request.bucket}/{request.key}@{request.seq}")
        pieces = file_pieces(self.journal, version, request.first, request.last)
        try:
            first = await anext(pieces)
        except FileNotFoundError:
            raise NotHeld(f"{request.bucket}/{request.key}@{request.seq}") from None
        except StopAsyncIteration:
            return 0, pieces
        return request.last - request.first + 1, prepend(first, pieces)
