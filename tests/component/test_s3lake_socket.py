"""``S3Lake`` against a lake server on a real socket, for what httpx's MockTransport hides: the
order in which a request's head and body leave."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from cachetier.lake import ObjectAttributes
from cachetier.lake.s3.client import S3Lake
from cachetier.lake.s3.config import S3LakeConfig


def test_an_empty_body_is_checked_before_the_request_goes_out() -> None:
    """With nothing to hold back, a failing check on an empty body must stop the PUT before
    the lake sees it: a lake stores an empty object as soon as the headers arrive. (A real
    socket: httpx's MockTransport reads the body before the handler runs, hiding the order.)"""
    from cachetier.errors import BadDigest

    received: list[bytes] = []

    async def lake_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read(65536)
        received.append(data)
        if data:
            writer.write(b'HTTP/1.1 200 OK\r\nETag: "d41d8cd98f00b204e9800998ecf8427e"\r\nContent-Length: 0\r\n\r\n')
            await writer.drain()
        writer.close()

    async def failing() -> AsyncIterator[bytes]:
        raise BadDigest()
        yield b""  # an async generator

    async def main() -> None:
        server = await asyncio.start_server(lake_server, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        lake = S3Lake(S3LakeConfig(f"http://127.0.0.1:{port}", "AK", "SK", retries=0))
        try:
            with pytest.raises(BadDigest):
                await lake.put_object("b", "k", failing(), 0, ObjectAttributes())
            await asyncio.sleep(0.05)
        finally:
            await lake.aclose()
            server.close()
            await server.wait_closed()

    asyncio.run(main())
    assert not any(received), "the lake received a PUT whose body failed its checks"


def test_a_head_does_not_wait_behind_gets_holding_every_connection() -> None:
    """A hit whose metadata has expired waits on a HEAD: HEADs have connections of their own,
    so block GETs that hold every connection of the pool (a slow lake, many cold reads) never
    queue it."""
    release = asyncio.Event()

    async def lake_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if head.startswith(b"GET"):
            await release.wait()  # a block fetch from a lake that is slow to answer
            writer.write(b"HTTP/1.1 200 OK\r\nETag: \"e\"\r\nContent-Length: 1\r\n\r\nx")
        else:
            writer.write(b'HTTP/1.1 200 OK\r\nETag: "e"\r\nContent-Length: 5\r\n'
                         b"Last-Modified: Tue, 01 Dec 2026 12:00:00 GMT\r\n\r\n")
        await writer.drain()
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(lake_server, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        lake = S3Lake(S3LakeConfig(f"http://127.0.0.1:{port}", "AK", "SK", retries=0, max_connections=2))
        gets = [asyncio.create_task(lake.get_object("b", f"k{i}")) for i in range(2)]
        try:
            await asyncio.sleep(0.2)  # both connections of the pool are the GETs'
            info = await asyncio.wait_for(lake.head_object("b", "k"), timeout=5)
            assert info.size == 5 and not any(get.done() for get in gets)
        finally:
            release.set()
            for stream in await asyncio.gather(*gets, return_exceptions=True):
                if not isinstance(stream, BaseException):
                    await stream.aclose()
            await lake.aclose()
            server.close()
            await server.wait_closed()

    asyncio.run(main())
