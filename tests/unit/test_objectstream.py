"""``ObjectStream.started``: the stream once its first body bytes are in, bytes unchanged; a
failure before them raises (the body closed), so the handler can still answer an S3 error."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from cachetier.errors import ServiceUnavailable
from cachetier.lake import ObjectInfo, ObjectStream


class Body:
    """An async iterator over ``pieces`` (an exception among them is raised), recording reads and aclose."""

    def __init__(self, *pieces: bytes | BaseException) -> None:
        self.pieces = list(pieces)
        self.reads = 0
        self.closed = False

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        if not self.pieces:
            raise StopAsyncIteration
        self.reads += 1
        piece = self.pieces.pop(0)
        if isinstance(piece, BaseException):
            raise piece
        return piece

    async def aclose(self) -> None:
        self.closed = True


def stream(body: Body, size: int) -> ObjectStream:
    info = ObjectInfo("b", "k", size, '"e"', datetime(2026, 1, 1, tzinfo=UTC))
    return ObjectStream(info, None, body)


async def drain(s: ObjectStream) -> bytes:
    try:
        return b"".join([piece async for piece in s.body])
    finally:
        await s.aclose()


def test_started_has_read_the_first_bytes_and_keeps_them_all() -> None:
    async def main() -> None:
        body = Body(b"ab", b"cd", b"e")
        started = await stream(body, 5).started()
        assert body.reads == 1
        assert await started.started() is started and body.reads == 1  # once is enough
        assert await drain(started) == b"abcde"
        assert body.closed

    asyncio.run(main())


def test_a_failure_before_the_first_bytes_raises_and_closes_the_body() -> None:
    async def main() -> None:
        body = Body(ServiceUnavailable("the lake went away"))
        with pytest.raises(ServiceUnavailable):
            await stream(body, 5).started()
        assert body.closed

    asyncio.run(main())


def test_an_empty_object_is_not_read_and_a_body_that_ends_at_once_stays_short() -> None:
    async def main() -> None:
        empty = Body(b"never read")
        s = stream(empty, 0)
        assert await s.started() is s and empty.reads == 0
        short = stream(Body(), 5)
        assert await drain(await short.started()) == b""  # the sender sees 0 of 5 bytes: a cut response

    asyncio.run(main())
