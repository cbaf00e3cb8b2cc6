"""``LakeTransport``'s response bodies, fed to one connection's protocol by hand (no socket): a
Content-Length body's bytes after the packet its head came in are passed on as they came, with
no copy; what llhttp must frame (chunked, until EOF) is still parsed; bytes past the body drop
the connection and leave the body whole."""

from __future__ import annotations

import asyncio

import httpx2
from doubles import FakeTransport

from cachetier.net.transport import _Connection


async def _exchange(packets: list[bytes], method: str = "GET") -> tuple[_Connection, list[bytes]]:
    """Send a request on a fresh connection, feed it ``packets``, and read the body to its end."""
    conn = _Connection()
    conn.connection_made(FakeTransport())  # type: ignore[arg-type]
    await conn.send(httpx2.Request(method, "http://lake/b/k"), {})
    for packet in packets:
        conn.data_received(packet)
    await conn.receive_head(1.0)
    chunks = [chunk async for chunk in conn.body(1.0)]
    return conn, chunks


def test_a_content_length_body_is_passed_on_as_the_packets_it_came_in() -> None:
    packets = [b"HTTP/1.1 200 OK\r\nContent-Length: 30000\r\n\r\n" + b"a" * 100,
               b"b" * 9900, b"c" * 10000, b"d" * 10000]

    async def main() -> None:
        conn, chunks = await _exchange(packets)
        assert b"".join(chunks) == b"a" * 100 + b"b" * 9900 + b"c" * 10000 + b"d" * 10000
        assert all(chunk is packet for chunk, packet in zip(chunks[1:], packets[1:], strict=True))  # no copy
        assert conn.response is not None and conn.response.complete and conn.reusable

    asyncio.run(main())


def test_bytes_past_a_content_length_body_drop_the_connection_and_keep_the_body() -> None:
    async def main() -> None:
        conn, chunks = await _exchange([b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n12345", b"67890HTTP/1.1"])
        assert b"".join(chunks) == b"1234567890"
        assert not conn.reusable

    asyncio.run(main())


def test_chunked_and_head_responses_are_still_framed_by_llhttp() -> None:
    async def main() -> None:
        _, chunks = await _exchange([b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
                                     b"lo\r\n6\r\n world\r\n0\r\n\r\n"])
        assert b"".join(chunks) == b"hello world"
        conn, chunks = await _exchange([b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"], method="HEAD")
        assert chunks == [] and conn.reusable

    asyncio.run(main())


def test_a_body_that_ends_early_is_an_error() -> None:
    async def main() -> None:
        conn = _Connection()
        conn.connection_made(FakeTransport())  # type: ignore[arg-type]
        await conn.send(httpx2.Request("GET", "http://lake/b/k"), {})
        conn.data_received(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n123")
        conn.data_received(b"45")
        conn.eof_received()
        await conn.receive_head(1.0)
        got = []
        try:
            async for chunk in conn.body(1.0):
                got.append(chunk)
        except httpx2.RemoteProtocolError:
            pass
        else:
            raise AssertionError("a short body ended without an error")
        assert b"".join(got) == b"12345"

    asyncio.run(main())
