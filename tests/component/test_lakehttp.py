"""``LakeTransport`` against raw HTTP/1.1 servers on 127.0.0.1 that the tests start and script
byte for byte: response framing (Content-Length, chunked with extensions and trailers, EOF,
HEAD, 1xx, 204, 304), responses cut into single-byte TCP writes, keep-alive reuse (LIFO) and
when a connection must not be reused, read and write flow control, request bodies, timeouts,
malformed responses, cancellation and ``aclose()``. Every test runs on asyncio's loop and on
uvloop's, under a deadline, so a hang fails fast instead of stalling the suite.

Timeouts a test expects to fire are short; every wait for something that should happen is
generous, so the suite holds on a loaded machine."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import random
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Self

import httpx2
import pytest
import trustme
import uvloop

from cachetier.net import transport as lakehttp
from cachetier.net.transport import LakeTransport

GENEROUS = httpx2.Timeout(10.0)  # for what should happen: only a bug makes it fire
DEADLINE = 20.0  # one test on one loop, hang included


# -- running a test on each event loop ---------------------------------------------------------


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Callable[[Callable[[], Awaitable[Any]]], Any]:
    def run(main: Callable[[], Awaitable[Any]]) -> Any:
        async def bounded() -> Any:
            async with asyncio.timeout(DEADLINE):
                return await main()

        return uvloop.run(bounded()) if request.param == "uvloop" else asyncio.run(bounded())

    return run


# -- the server side ---------------------------------------------------------------------------


@dataclass
class Received:
    """One request as the server read it."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes
    raw_body: bytes  # as framed on the wire (chunked framing included)


class Peer:
    """The server's end of one accepted connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, index: int) -> None:
        self.reader, self.writer, self.index = reader, writer, index
        self.eof = asyncio.Event()  # the client closed the connection

    async def request(self) -> Received | None:
        """The next request, or None at a clean EOF between requests."""
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            self.eof.set()
            if exc.partial:
                raise
            return None
        line, *fields = head[:-4].decode("latin-1").split("\r\n")
        method, target, version = line.split(" ")
        assert version == "HTTP/1.1"
        headers: dict[str, str] = {}
        for header in fields:
            name, _, value = header.partition(":")
            assert name.lower() not in headers, f"{name} sent twice"
            headers[name.lower()] = value.strip()
        body = raw = b""
        if "chunked" in headers.get("transfer-encoding", ""):
            assert "content-length" not in headers
            while True:
                size_line = await self.reader.readuntil(b"\r\n")
                size = int(size_line.split(b";")[0], 16)
                chunk = await self.reader.readexactly(size + 2)
                assert chunk.endswith(b"\r\n")
                raw += size_line + chunk
                body += chunk[:-2]
                if size == 0:
                    break
        elif "content-length" in headers:
            body = raw = await self.reader.readexactly(int(headers["content-length"]))
        return Received(method, target, headers, body, raw)

    async def send(self, data: bytes, *, byte_by_byte: bool = False) -> None:
        if not byte_by_byte:
            self.writer.write(data)
            await self.writer.drain()
            return
        for i in range(len(data)):  # one byte per write, the loop turning in between
            self.writer.write(data[i:i + 1])
            await self.writer.drain()
            await asyncio.sleep(0)

    async def until_closed(self) -> None:
        """Read (and drop) whatever comes until the client closes the connection."""
        while await self.reader.read(1 << 16):
            pass
        self.eof.set()

    async def closed_by_client(self) -> bool:
        """Whether the client closes this connection within a generous wait (a handler reading
        from it sees the close)."""
        try:
            await asyncio.wait_for(self.eof.wait(), GENEROUS.read)
        except TimeoutError:
            return False
        return True

    def reset(self) -> None:
        """Close with a TCP RST rather than a FIN."""
        sock = self.writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        self.writer.transport.abort()


Handler = Callable[[Peer], Awaitable[None]]


@dataclass
class RawServer:
    """An HTTP/1.1 server on 127.0.0.1 that says what ``handler`` writes, one handler call per
    accepted connection. A handler's failed assertion fails the test at exit."""

    handler: Handler
    ssl_context: ssl.SSLContext | None = None
    peers: list[Peer] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.ssl_context)
        self.port = self._server.sockets[0].getsockname()[1]
        scheme = "https" if self.ssl_context else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for peer in self.peers:
            peer.writer.transport.abort()
        await self._server.wait_closed()
        if self.errors and exc_info[0] is None:
            raise self.errors[0]

    @property
    def accepted(self) -> int:
        return len(self.peers)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = Peer(reader, writer, len(self.peers) + 1)
        self.peers.append(peer)
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self.handler(peer)
        except (ConnectionError, asyncio.IncompleteReadError):
            peer.eof.set()  # the client hung up
        except asyncio.CancelledError:
            pass  # the test is over
        except BaseException as exc:  # noqa: BLE001  # reported at exit
            self.errors.append(exc)
        finally:
            self._tasks.discard(task)
            writer.transport.abort()


def answer(body: bytes = b"", status: bytes = b"200 OK", *, headers: bytes = b"") -> bytes:
    return b"HTTP/1.1 %s\r\nContent-Length: %d\r\n%s\r\n%s" % (status, len(body), headers, body)


def keep_answering(response: Callable[[Peer, Received], bytes]) -> Handler:
    """A handler that answers every request on its connection with ``response(peer, request)``."""

    async def handler(peer: Peer) -> None:
        while (request := await peer.request()) is not None:
            await peer.send(response(peer, request))

    return handler


def echo(peer: Peer, request: Received) -> bytes:
    return answer(request.body, headers=b"X-Connection: %d\r\n" % peer.index)


# -- the client side ---------------------------------------------------------------------------


def make_request(method: str, url: str, *, timeout: httpx2.Timeout = GENEROUS, **kwargs: Any) -> httpx2.Request:
    request = httpx2.Request(method, url, **kwargs)
    request.extensions["timeout"] = timeout.as_dict()  # as S3Lake._send sets it
    return request


async def open_response(transport: LakeTransport, url: str, method: str = "GET", **kwargs: Any) -> httpx2.Response:
    return await transport.handle_async_request(make_request(method, url, **kwargs))


async def fetch(transport: LakeTransport, url: str, method: str = "GET", **kwargs: Any) -> tuple[httpx2.Response, bytes]:
    """A response and its whole body (``aiter_raw`` closes the response at its end)."""
    response = await open_response(transport, url, method, **kwargs)
    return response, b"".join([chunk async for chunk in response.aiter_raw()])


@contextlib.asynccontextmanager
async def serving(handler: Handler, **options: Any) -> AsyncIterator[tuple[RawServer, LakeTransport]]:
    """A server with ``handler`` and a ``LakeTransport(**options)`` closed at the end."""
    async with RawServer(handler) as server:
        transport = LakeTransport(**options)
        try:
            yield server, transport
        finally:
            await transport.aclose()


def idle_connections(transport: LakeTransport) -> list[lakehttp._Connection]:
    return [conn for conns in transport._idle.values() for conn in conns]


async def eventually(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(GENEROUS.read):
        while not condition():
            await asyncio.sleep(0.002)


async def chunks_of(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


# -- response framing --------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    response: bytes
    body: bytes
    reusable: bool  # the server keeps the connection open: the next request reuses it
    status: int = 200


SHAPES = {
    "content-length": Shape(answer(b"hello"), b"hello", True),
    "content-length-zero": Shape(answer(b""), b"", True),
    "chunked-with-extensions-and-trailers": Shape(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;name=value\r\nhello\r\n6;flag;q=\"x y\"\r\n world\r\n1\r\n!\r\n"
        b"0;last=1\r\nX-Trailer: t\r\nX-Checksum: abc\r\n\r\n",
        b"hello world!", True),
    "chunked-empty": Shape(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", b"", True),
    "no-content": Shape(b"HTTP/1.1 204 No Content\r\n\r\n", b"", True, 204),
    "not-modified-with-length": Shape(
        b"HTTP/1.1 304 Not Modified\r\nContent-Length: 1234\r\nETag: \"e\"\r\n\r\n", b"", True, 304),
    "connection-close": Shape(answer(b"bye", headers=b"Connection: close\r\n"), b"bye", False),
    "http-1.0-content-length": Shape(b"HTTP/1.0 200 OK\r\nContent-Length: 4\r\n\r\nold!", b"old!", False),
    "http-1.0-keep-alive": Shape(
        b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 4\r\n\r\nold!", b"old!", True),
    "http-1.0-until-eof": Shape(b"HTTP/1.0 200 OK\r\nServer: old\r\n\r\nto the end", b"to the end", False),
    "http-1.1-close-until-eof": Shape(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nto the end", b"to the end", False),
    "interim-100-then-200": Shape(b"HTTP/1.1 100 Continue\r\n\r\n" + answer(b"final"), b"final", True),
    "interim-103-then-200": Shape(
        b"HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n" + answer(b"final"), b"final", True),
}


@pytest.mark.parametrize("byte_by_byte", [False, True], ids=["one-write", "byte-by-byte"])
@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_response_framing(run: Any, shape: Shape, byte_by_byte: bool) -> None:
    """Each framing gives the exact body and status whether the response comes in one TCP write
    or one byte per write; the connection is reused exactly when the server keeps it alive.
    Trailers and interim responses never leak into the response's headers."""

    async def handler(peer: Peer) -> None:
        while await peer.request() is not None:
            await peer.send(shape.response, byte_by_byte=byte_by_byte)
            if not shape.reusable:
                return  # and the server closes: what ends an EOF-framed body

    async def main() -> None:
        async with serving(handler) as (server, transport):
            for _ in range(2):
                response, body = await fetch(transport, server.url + "/key")
                assert (response.status_code, body) == (shape.status, shape.body)
                assert "x-trailer" not in response.headers
                assert "link" not in response.headers  # the 103's
            assert server.accepted == (1 if shape.reusable else 2)

    run(main)


def test_head_with_content_length_reads_no_body(run: Any) -> None:
    """A HEAD's Content-Length announces the object, not bytes on the wire: the response ends
    at its head, and the next response on the same connection parses right."""

    def respond(peer: Peer, request: Received) -> bytes:
        if request.method == "HEAD":
            return b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\nETag: \"e\"\r\n\r\n"
        return answer(b"the body")

    async def main() -> None:
        async with serving(keep_answering(respond)) as (server, transport):
            for _ in range(2):
                head, body = await fetch(transport, server.url + "/k", "HEAD")
                assert (head.status_code, head.headers["content-length"], body) == (200, "1000000", b"")
                _, body = await fetch(transport, server.url + "/k")
                assert body == b"the body"
            assert server.accepted == 1

    run(main)


def test_a_body_after_a_head_answer_is_refused(run: Any) -> None:
    """A server that sends a body after a HEAD's head: the HEAD still has no body, and the
    connection, out of step with the server, is not reused."""

    async def handler(peer: Peer) -> None:
        if peer.index == 1:
            await peer.request()
            await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nbody!")
        await keep_answering(echo)(peer)

    async def main() -> None:
        async with serving(handler) as (server, transport):
            head, body = await fetch(transport, server.url, "HEAD")
            assert (head.status_code, head.headers["content-length"], body) == (200, "5", b"")
            _, body = await fetch(transport, server.url, "PUT", content=b"next")
            assert body == b"next" and server.accepted == 2

    run(main)


def test_a_second_response_in_the_same_read_is_refused(run: Any) -> None:
    """Bytes after a complete response were asked for by nobody: they never join its body or
    headers, and its connection is not reused."""

    async def handler(peer: Peer) -> None:
        if peer.index == 1:
            await peer.request()
            await peer.send(answer(b"ok") + answer(b"unasked", headers=b"X-Extra: 1\r\n"))
        await keep_answering(echo)(peer)

    async def main() -> None:
        async with serving(handler) as (server, transport):
            response, body = await fetch(transport, server.url)
            assert body == b"ok" and "x-extra" not in response.headers
            _, body = await fetch(transport, server.url, "PUT", content=b"again")
            assert body == b"again"
            assert server.accepted == 2

    run(main)


# -- the keep-alive pool -----------------------------------------------------------------------


def test_keep_alive_reuse_is_lifo(run: Any) -> None:
    """A connection goes back to the pool after its body was read; the last one back is the
    first one out (it is the least likely to have been closed by the server)."""

    async def main() -> None:
        async with serving(keep_answering(echo)) as (server, transport):
            _, body = await fetch(transport, server.url, "PUT", content=b"one")
            _, body = await fetch(transport, server.url, "PUT", content=b"two")
            assert body == b"two" and server.accepted == 1

            first = await open_response(transport, server.url)  # the pooled connection 1
            second = await open_response(transport, server.url)  # a new connection 2
            assert [first.headers["x-connection"], second.headers["x-connection"]] == ["1", "2"]
            await first.aread()  # pool: [1]
            await second.aread()  # pool: [1, 2]
            response, _ = await fetch(transport, server.url)
            assert response.headers["x-connection"] == "2"
            assert server.accepted == 2

    run(main)


def test_max_idle_closes_the_surplus(run: Any) -> None:
    async def main() -> None:
        async with serving(keep_answering(echo), max_connections=4, max_idle=1) as (server, transport):
            responses = [await open_response(transport, server.url) for _ in range(3)]
            for response in responses:
                await response.aread()
            assert len(idle_connections(transport)) == 1
            assert [await peer.closed_by_client() for peer in server.peers[1:]] == [True, True]

    run(main)


def test_a_response_closed_early_closes_its_connection(run: Any) -> None:
    async def main() -> None:
        big = b"x" * (2 << 20)
        async with serving(keep_answering(lambda peer, request: answer(big)), max_connections=1) as (server, transport):
            response = await open_response(transport, server.url)
            async for chunk in response.aiter_raw():
                assert chunk
                break
            await response.aclose()
            assert await server.peers[0].closed_by_client()
            _, body = await fetch(transport, server.url)
            assert body == big and server.accepted == 2

    run(main)


def test_an_idle_connection_the_server_closed_is_not_used(run: Any) -> None:
    """The server closes an idle keep-alive connection (no ``Connection: close`` said): once the
    close has arrived, the pool drops the connection and the next request opens a new one."""

    async def handler(peer: Peer) -> None:
        await peer.request()
        await peer.send(answer(b"first"))
        if peer.index == 1:
            peer.writer.close()
            return
        await keep_answering(echo)(peer)

    async def main() -> None:
        async with serving(handler) as (server, transport):
            await fetch(transport, server.url)
            await eventually(lambda: all(conn.closed for conn in idle_connections(transport)))
            _, body = await fetch(transport, server.url)
            assert body == b"first" and server.accepted == 2

    run(main)


@pytest.mark.parametrize("how", ["fin", "rst"])
def test_a_close_racing_the_request_is_a_transport_error(run: Any, how: str) -> None:
    """The server closes the pooled connection as the next request arrives (its idle timeout
    racing us): the request fails fast with an httpx2.TransportError, which S3Lake retries."""

    async def handler(peer: Peer) -> None:
        await peer.request()
        await peer.send(answer(b"first"))
        await peer.request()
        if how == "rst":
            peer.reset()

    async def main() -> None:
        async with serving(handler, max_connections=1) as (server, transport):
            await fetch(transport, server.url)
            with pytest.raises(httpx2.TransportError):
                await fetch(transport, server.url)
            _, body = await fetch(transport, server.url)  # the slot came back
            assert body == b"first" and server.accepted == 2

    run(main)


def test_bytes_on_an_idle_connection_discard_it(run: Any) -> None:
    async def handler(peer: Peer) -> None:
        await peer.request()
        await peer.send(answer(b"first"))
        if peer.index == 1:
            await peer.send(b"HTTP/1.1 200 OK\r\n")  # after the response, asked for by nobody
            await peer.until_closed()
        await keep_answering(echo)(peer)

    async def main() -> None:
        async with serving(handler) as (server, transport):
            await fetch(transport, server.url)
            await eventually(lambda: all(conn.closed for conn in idle_connections(transport)))
            assert await server.peers[0].closed_by_client()
            _, body = await fetch(transport, server.url)
            assert body == b"first" and server.accepted == 2

    run(main)


def test_aclose_closes_idle_and_active_connections(run: Any) -> None:
    async def handler(peer: Peer) -> None:
        await peer.request()
        if peer.index == 1:
            await peer.send(answer(b"idle soon"))
        else:
            await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
        await peer.until_closed()

    async def main() -> None:
        async with RawServer(handler) as server:
            transport = LakeTransport()
            soon_idle = await open_response(transport, server.url)
            active = await open_response(transport, server.url)
            await soon_idle.aread()
            assert server.accepted == 2 and len(idle_connections(transport)) == 1
            await transport.aclose()
            assert [await peer.closed_by_client() for peer in server.peers] == [True, True]
            with pytest.raises(httpx2.TransportError):
                await active.aread()
            assert not transport._open and not idle_connections(transport)

    run(main)


# -- flow control ------------------------------------------------------------------------------


def test_a_slow_consumer_of_a_large_body_keeps_memory_bounded(run: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """64 MiB to a consumer that stalls at first: reading pauses once ``_HIGH_WATER`` bytes wait,
    so what is buffered stays under it plus one socket read, and the bytes arrive exact."""
    size = 64 << 20
    payload = random.Random(7).randbytes(size)
    peak = 0
    on_body = lakehttp._Response.on_body

    def counting_on_body(self: lakehttp._Response, body: bytes) -> None:
        nonlocal peak
        on_body(self, body)
        peak = max(peak, self.buffered)

    monkeypatch.setattr(lakehttp._Response, "on_body", counting_on_body)

    async def handler(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
        view = memoryview(payload)
        for offset in range(0, size, 1 << 20):
            await peer.send(view[offset:offset + (1 << 20)])  # type: ignore[arg-type]
        await peer.until_closed()

    async def main() -> None:
        async with serving(handler) as (server, transport):
            response = await open_response(transport, server.url)
            digest, received = hashlib.sha256(), 0
            async for chunk in response.aiter_raw():
                if received < (2 << 20):
                    await asyncio.sleep(0.05)  # slow at first: time for the socket to outrun us
                digest.update(chunk)
                received += len(chunk)
            assert received == size and digest.digest() == hashlib.sha256(payload).digest()
            assert lakehttp._HIGH_WATER <= peak <= lakehttp._HIGH_WATER + (1 << 20)

    run(main)


def test_reading_holds_at_the_first_body_bytes_until_the_consumer_asks_for_more(
    run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first body bytes pause reading: the rest of the body (here long sent, waiting in the
    socket) is not parsed until the consumer has taken them and asks for more, so they reach it
    without waiting behind the rest. Then the body arrives whole and exact."""
    rest = random.Random(3).randbytes(1 << 20)
    parsed = 0
    on_body = lakehttp._Response.on_body

    def counting_on_body(self: lakehttp._Response, body: bytes) -> None:
        nonlocal parsed
        on_body(self, body)
        parsed += len(body)

    monkeypatch.setattr(lakehttp._Response, "on_body", counting_on_body)

    async def handler(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\nfirst" % (5 + len(rest)))
        await asyncio.sleep(0.05)  # a TCP read of its own
        await peer.send(rest)
        await peer.until_closed()

    async def main() -> None:
        async with serving(handler) as (server, transport):
            response = await open_response(transport, server.url)
            await asyncio.sleep(0.5)  # the rest is sent, and would be read by now
            assert parsed == 5
            chunks = response.aiter_raw()
            assert await anext(chunks) == b"first"
            assert parsed == 5  # taken, but no more asked for yet
            body = b"".join([chunk async for chunk in chunks])
            assert body == rest

    run(main)


@pytest.mark.parametrize("body", ["bytes", "stream"])
def test_a_server_that_stops_reading_is_a_write_timeout(run: Any, body: str) -> None:
    """Request bodies respect the socket's flow control: when the server stops reading, the
    request waits for room, and the write timeout ends the wait. The connection given up drops
    the body it still held at once, rather than holding it (and its socket) until the server
    reads again."""
    size = 64 << 20
    block = b"w" * (1 << 20)
    stalled, resume = asyncio.Event(), asyncio.Event()

    async def handler(peer: Peer) -> None:
        if peer.index == 1:
            await peer.reader.readuntil(b"\r\n\r\n")
            peer.writer.transport.pause_reading()
            stalled.set()
            await resume.wait()
            peer.writer.transport.resume_reading()
            await peer.until_closed()
            return
        await keep_answering(echo)(peer)

    async def main() -> None:
        content: Any = block * 64 if body == "bytes" else chunks_of(*[block] * 64)
        timeout = httpx2.Timeout(GENEROUS.read, write=0.3)
        async with serving(handler, max_connections=1) as (server, transport):
            started = time.monotonic()
            sending = asyncio.create_task(fetch(transport, server.url, "PUT", content=content,
                                                headers={"Content-Length": str(size)}, timeout=timeout))
            await asyncio.wait_for(stalled.wait(), GENEROUS.read)
            (conn,) = transport._open
            with pytest.raises(httpx2.WriteTimeout):
                await sending
            assert time.monotonic() - started < GENEROUS.read
            assert conn.transport is not None
            await eventually(lambda: conn.transport.get_write_buffer_size() == 0)  # type: ignore[union-attr]
            resume.set()
            assert await server.peers[0].closed_by_client()
            _, echoed = await fetch(transport, server.url, "PUT", content=b"next")
            assert echoed == b"next"

    run(main)


# -- request bodies ----------------------------------------------------------------------------


def test_request_bodies(run: Any) -> None:
    """Bytes, a stream with a Content-Length (sent as is) and a stream without one (chunked,
    an empty part not ending it early) reach the server exact, on one kept-alive connection."""
    received: list[Received] = []

    def respond(peer: Peer, request: Received) -> bytes:
        received.append(request)
        return echo(peer, request)

    async def main() -> None:
        async with serving(keep_answering(respond)) as (server, transport):
            _, body = await fetch(transport, server.url + "/a?x=1&y=%20", "PUT", content=b"bytes body")
            assert body == b"bytes body"
            _, body = await fetch(transport, server.url + "/b", "PUT", content=chunks_of(b"abc", b"", b"defg"),
                                  headers={"Content-Length": "7"})
            assert body == b"abcdefg"
            _, body = await fetch(transport, server.url + "/c", "POST", content=chunks_of(b"ab", b"", b"c" * 300))
            assert body == b"ab" + b"c" * 300
            _, body = await fetch(transport, server.url + "/d", "PUT", content=chunks_of(b"xy"),
                                  headers={"Transfer-Encoding": "chunked"})
            assert body == b"xy"
            assert server.accepted == 1
        assert [r.target for r in received] == ["/a?x=1&y=%20", "/b", "/c", "/d"]
        assert received[0].headers["content-length"] == "10"
        assert received[0].headers["host"] == f"127.0.0.1:{server.port}"
        assert received[1].raw_body == b"abcdefg" and "transfer-encoding" not in received[1].headers
        assert received[2].raw_body == b"2\r\nab\r\n12c\r\n" + b"c" * 300 + b"\r\n0\r\n\r\n"
        assert received[3].raw_body == b"2\r\nxy\r\n0\r\n\r\n"

    run(main)


# -- timeouts and the pool limit ---------------------------------------------------------------


def test_connect_to_a_closed_port_is_a_connect_error(run: Any) -> None:
    async def main() -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]  # bound, never listening: connections are refused
            transport = LakeTransport()
            try:
                with pytest.raises(httpx2.ConnectError):
                    await fetch(transport, f"http://127.0.0.1:{port}/")
            finally:
                await transport.aclose()

    run(main)


def test_a_server_that_never_answers_is_a_read_timeout(run: Any) -> None:
    async def handler(peer: Peer) -> None:
        await peer.request()
        if peer.index == 1:
            await peer.until_closed()  # no head
        await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf")
        await peer.until_closed()  # half a body

    async def main() -> None:
        timeout = httpx2.Timeout(GENEROUS.read, read=0.2)
        async with serving(handler, max_connections=1) as (server, transport):
            started = time.monotonic()
            with pytest.raises(httpx2.ReadTimeout):
                await fetch(transport, server.url, timeout=timeout)
            response = await open_response(transport, server.url, timeout=timeout)
            with pytest.raises(httpx2.ReadTimeout):
                await response.aread()
            await response.aclose()
            assert time.monotonic() - started < GENEROUS.read
            assert [await peer.closed_by_client() for peer in server.peers] == [True, True]

    run(main)


def test_pool_exhaustion_is_a_pool_timeout_until_a_response_is_closed(run: Any) -> None:
    async def main() -> None:
        async with serving(keep_answering(echo), max_connections=1) as (server, transport):
            held = await open_response(transport, server.url, "PUT", content=b"held")
            with pytest.raises(httpx2.PoolTimeout):
                await open_response(transport, server.url, timeout=httpx2.Timeout(GENEROUS.read, pool=0.1))
            waiting = asyncio.create_task(fetch(transport, server.url, "PUT", content=b"waited"))
            await asyncio.sleep(0.05)
            assert not waiting.done()
            assert await held.aread() == b"held"  # read to the end: the slot and connection return
            _, body = await waiting
            assert body == b"waited" and server.accepted == 1

    run(main)


# -- malformed responses -----------------------------------------------------------------------


MALFORMED = {
    "garbage-status-line": b"HTTX/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
    "bad-status-code": b"HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n",
    "bad-header": b"HTTP/1.1 200 OK\r\nNo colon here\r\n\r\n",
    "bad-content-length": b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n",
    "bad-chunk-size": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n",
    "chunk-longer-than-said": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhello\r\n0\r\n\r\n",
    "body-cut-short": b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf",
    "switching-protocols": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",
    "closed-before-head": b"",
    "head-cut-short": b"HTTP/1.1 200 OK\r\nContent-Len",
}


@pytest.mark.parametrize("response", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_response_is_a_remote_protocol_error(run: Any, response: bytes) -> None:
    async def handler(peer: Peer) -> None:
        if peer.index == 1:
            await peer.request()
            await peer.send(response)
            return  # and close
        await keep_answering(echo)(peer)

    async def main() -> None:
        async with serving(handler, max_connections=1) as (server, transport):
            with pytest.raises(httpx2.RemoteProtocolError):
                await fetch(transport, server.url)
            _, body = await fetch(transport, server.url, "PUT", content=b"fine")  # the slot came back
            assert body == b"fine" and server.accepted == 2

    run(main)


# -- cancellation ------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["head", "body", "body-no-aclose", "pool"])
def test_cancelling_a_request_gives_its_slot_back(run: Any, where: str) -> None:
    """A request cancelled while waiting for the head, mid-body (whether or not its caller
    closes the response) or while waiting for a slot leaves the pool whole: with
    max_connections=1 the next request goes through, and the cancelled request's connection
    is closed."""
    reached = asyncio.Event()  # bound to the loop that first waits on it

    async def handler(peer: Peer) -> None:
        await peer.request()
        if peer.index == 1:
            if where.startswith("body"):
                await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npart")
            reached.set()
            await peer.until_closed()
        await peer.send(answer(b"next"))
        await keep_answering(echo)(peer)

    async def caller(transport: LakeTransport, url: str) -> None:
        response = await open_response(transport, url)
        try:
            async for _ in response.aiter_raw():
                pass
        finally:
            if where != "body-no-aclose":
                await response.aclose()

    async def main() -> None:
        async with serving(handler, max_connections=1) as (server, transport):
            first = asyncio.create_task(caller(transport, server.url))
            await asyncio.wait_for(reached.wait(), GENEROUS.read)
            if where == "pool":  # the request cancelled is a second one, waiting for the slot
                waiting = asyncio.create_task(caller(transport, server.url))
                await asyncio.sleep(0.05)
                waiting.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await waiting
            first.cancel()
            with pytest.raises(asyncio.CancelledError):
                await first
            assert await server.peers[0].closed_by_client()
            pool_wait = httpx2.Timeout(GENEROUS.read, pool=2.0)  # the slot is free at once
            _, body = await fetch(transport, server.url, timeout=pool_wait)
            assert body == b"next" and server.accepted == 2

    run(main)


# -- TLS ---------------------------------------------------------------------------------------


def test_tls(run: Any) -> None:
    authority = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(server_context)
    client_context = ssl.create_default_context()
    authority.configure_trust(client_context)

    async def main() -> None:
        async with RawServer(keep_answering(echo), ssl_context=server_context) as server:
            transport = LakeTransport(ssl_context=client_context)
            try:
                for payload in (b"secret", b"again"):
                    _, body = await fetch(transport, server.url, "PUT", content=payload)
                    assert body == payload
                assert server.accepted == 1
            finally:
                await transport.aclose()
            untrusting = LakeTransport()  # the system's CAs do not know the test's
            try:
                with pytest.raises(httpx2.ConnectError):
                    await fetch(untrusting, server.url)
            finally:
                await untrusting.aclose()

    run(main)
