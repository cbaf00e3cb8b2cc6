"""``LakeTransport``: a lean HTTP/1.1 transport for httpx, used for the lake and for peers.

httpx's own transport (httpcore + h11) runs every request and every body chunk through h11's
pure-Python state machine and httpcore's pool bookkeeping. On the data path that is most of what
lakegate adds to a cold read's time to first byte (measured: ~0.6 ms of CPU per lake request
before its first byte, against ~0.1 ms here) and of its CPU per streamed GiB. This transport
keeps httpx's Request/Response types, so its callers (``S3Lake``, ``PeerClient``) and their
tests see no difference, and does only what they need:

- HTTP/1.1 with keep-alive: a LIFO pool of idle connections per origin (up to ``max_idle``
  each), at most ``max_connections`` requests in flight (a request waits for a slot up to the
  pool timeout); idle connections of other origins are not counted against it;
- responses parsed by httptools (llhttp, C), as they arrive, on an ``asyncio.Protocol``; a
  body with a Content-Length bypasses llhttp after the packet its head came in: each chunk is
  then the bytes object the socket read returned, with no copy in between; reading pauses
  when ``_HIGH_WATER`` bytes are waiting for a slow consumer and resumes once it took them,
  and pauses at a response's first body bytes until the consumer has had them and asks for
  more (the first bytes reach it without waiting behind the parsing of the rest);
  1xx interim responses are skipped, a body with neither Content-Length nor chunked ends at
  EOF, and bytes beyond the response asked for discard the connection;
- request bodies streamed from ``request.stream`` (Content-Length, or chunked when the
  request says so) with write flow control;
- TLS (``ssl_context``), connect / read / write / pool timeouts from httpx's request
  extensions, failures raised as httpx's exceptions (ConnectError, ReadTimeout, ...), so
  callers' retry rules keep working;
- a connection goes back to the pool only after its response was read to the end and the
  server keeps it alive; a response closed early, or whose body failed or was cancelled,
  closes its connection and gives its slot back.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import defaultdict
from collections.abc import AsyncIterator

import httptools
import httpx2

_HIGH_WATER = 4 << 20  # body bytes buffered for the consumer before the socket is paused
_NO_BODY_STATUSES = frozenset({204, 304})


class _UnaskedBytes(Exception):
    """Raised from a parser callback to stop llhttp at bytes that belong to no response."""


class _Response:
    """httptools' callbacks for one response."""

    def __init__(self, head_only: bool) -> None:
        self.head_only = head_only  # a HEAD's answer: its Content-Length announces no body
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.headers_done = False
        self.interim = False  # in a 1xx's head: the final response follows it
        self.until_eof = False  # neither Content-Length nor chunked: the body ends at EOF
        self.chunks: list[bytes] = []
        self.buffered = 0
        self.received = 0  # body bytes so far
        self.length: int | None = None  # Content-Length, for a body that has one
        # body bytes still to come, once they bypass llhttp (a Content-Length body after the
        # packet its head came in): None while llhttp parses
        self.remaining: int | None = None
        self.held = False  # reading was paused at its first body bytes
        self.complete = False
        self.keep_alive = False
        self.parser: httptools.HttpResponseParser | None = None

    def on_message_begin(self) -> None:
        if self.complete:  # llhttp would parse a second response into this one
            raise _UnaskedBytes("a second response")

    def on_status(self, status: bytes) -> None:
        self.reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.headers_done:  # after it: a chunked body's trailers, which httpx drops too
            self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        assert self.parser is not None
        if 100 <= self.parser.get_status_code() < 200:  # 100 Continue, 103 Early Hints: skipped
            self.interim, self.reason, self.headers = True, b"", []
            return
        self.headers_done = True
        # asked here: after the message, llhttp has reset the state the answer comes from
        self.keep_alive = bool(self.parser.should_keep_alive())
        framing = {name.lower(): value for name, value in self.headers
                   if name.lower() in (b"content-length", b"transfer-encoding")}
        self.until_eof = not framing
        # (llhttp has checked the value: digits, and no second Content-Length that differs)
        if b"content-length" in framing and b"transfer-encoding" not in framing and not self.head_only \
                and self.parser.get_status_code() not in _NO_BODY_STATUSES:
            self.length = int(framing[b"content-length"])

    def on_body(self, body: bytes) -> None:
        if self.head_only:  # llhttp takes a HEAD's Content-Length for a body to come
            raise _UnaskedBytes("a body after a HEAD's head")
        self.chunks.append(body)
        self.buffered += len(body)
        self.received += len(body)

    def on_message_complete(self) -> None:
        if self.interim:
            self.interim = False
            return
        self.complete = True


class _Connection(asyncio.Protocol):
    """One connection: the socket side (asyncio callbacks) and the request side (awaits)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.response: _Response | None = None
        self.parser: httptools.HttpResponseParser | None = None
        self.error: BaseException | None = None
        self.closed = False
        self._waiter: asyncio.Future[None] | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        self._paused = False
        self._held = False  # paused at a response's first body bytes (see data_received)

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # (uvloop's are not asyncio.Transport subclasses)

    def data_received(self, data: bytes) -> None:
        if self.parser is None or self.response is None or self.response.complete:
            self.error = httpx2.RemoteProtocolError("the lake sent bytes nobody asked for")
            self._lose()
            return
        response = self.response
        if response.remaining is not None:
            if not self._pass_body(response, data):
                return
        else:
            try:
                self.parser.feed_data(data)
            except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:  # 101: nobody asked
                self.error = httpx2.RemoteProtocolError(f"bad HTTP response: {exc}")
                self._lose()
                return
            if response.head_only and response.headers_done:
                response.complete = True
            elif response.length is not None and not response.complete:
                response.remaining = response.length - response.received
        if not self._paused and self.transport is not None:
            if response.buffered >= _HIGH_WATER:
                self._paused = True
                self.transport.pause_reading()
            elif response.chunks and not response.complete and not response.held:
                # The first body bytes: read no more until the consumer has them and asks for
                # more. Otherwise the event loop's next turns go to reading the rest of a 4 MiB
                # body (llhttp, copies) before the consumer's task can pass the first bytes on:
                # time to first byte, the client's.
                response.held = self._paused = self._held = True
                self.transport.pause_reading()
        self._wake()

    def _pass_body(self, response: _Response, data: bytes) -> bool:
        """Take body bytes of a known length as they came, without llhttp: it would copy each
        packet into a new bytes object (measured: 18% of the loop's time during cold fills went
        to feed_data, 1% after). False when bytes beyond the body came: the body is
        whole, the connection is dropped (as llhttp's path does)."""
        assert response.remaining is not None
        if len(data) > response.remaining:
            if response.remaining:
                response.on_body(data[: response.remaining])
            response.remaining, response.complete = 0, True
            self.error = httpx2.RemoteProtocolError("the lake sent bytes nobody asked for")
            self._lose()
            return False
        response.on_body(data)  # (the callback llhttp calls: body bytes, however they came)
        response.remaining -= len(data)
        response.complete = not response.remaining
        return True

    def eof_received(self) -> bool:
        response = self.response
        if response is not None and response.headers_done and response.until_eof:
            response.complete = True  # HTTP/1.0 style: the close is the body's end
        if self.error is None:
            self.error = httpx2.RemoteProtocolError("the server closed the connection")
        self._lose()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self.error is None:
            self.error = httpx2.ReadError(f"the connection was lost: {exc!r}") if exc else \
                httpx2.RemoteProtocolError("the server closed the connection")
        self.closed = True
        self._writable.set()
        self._wake()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # -- the request side ------------------------------------------------------------------

    @property
    def reusable(self) -> bool:
        return not self.closed and self.error is None and self.transport is not None and not self.transport.is_closing()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _lose(self) -> None:
        self.closed = True
        if self.transport is not None:
            # abort, not close: close() would keep the socket, and a request body still
            # buffered for a server that stopped reading, until the server reads it all
            self.transport.abort()
        self._wake()

    def close(self) -> None:
        self._lose()

    async def _wait(self, timeout: float | None) -> None:
        """Until the socket side has something new (bytes, EOF, an error)."""
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(timeout):
                await self._waiter
        except TimeoutError:
            self.close()
            raise httpx2.ReadTimeout("the lake did not answer in time") from None
        finally:
            self._waiter = None

    async def _write(self, data: bytes, timeout: float | None) -> None:
        if self.closed or self.transport is None:
            raise self.error or httpx2.WriteError("the connection is closed")
        self.transport.write(data)
        if not self._writable.is_set():
            try:
                async with asyncio.timeout(timeout):
                    await self._writable.wait()
            except TimeoutError:
                self.close()
                raise httpx2.WriteTimeout("the lake did not take the request body in time") from None
            if self.closed:
                raise self.error or httpx2.WriteError("the connection is closed")

    async def send(self, request: httpx2.Request, timeouts: dict[str, float | None]) -> None:
        self.response = _Response(head_only=request.method == "HEAD")
        self.parser = self.response.parser = httptools.HttpResponseParser(self.response)
        chunked = False
        lines = [b"%s %s HTTP/1.1\r\n" % (request.method.encode("ascii"), request.url.raw_path)]
        for name, value in request.headers.raw:
            lines.append(b"%s: %s\r\n" % (name, value))
            chunked = chunked or (name.lower() == b"transfer-encoding" and b"chunked" in value.lower())
        lines.append(b"\r\n")
        head = b"".join(lines)
        stream = request.stream
        if isinstance(stream, httpx2.ByteStream):  # bytes: one write with the head
            await self._write(head + b"".join([c async for c in stream]), timeouts.get("write"))
            return
        await self._write(head, timeouts.get("write"))
        async for chunk in stream:  # type: ignore[union-attr]
            if chunk:
                await self._write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk, timeouts.get("write"))
        if chunked:
            await self._write(b"0\r\n\r\n", timeouts.get("write"))

    async def receive_head(self, timeout: float | None) -> _Response:
        response = self.response
        assert response is not None
        while not response.headers_done:
            if self.error is not None:
                raise self.error
            await self._wait(timeout)
        return response

    async def body(self, timeout: float | None) -> AsyncIterator[bytes]:
        """The response body as it arrives; ends when the response is complete."""
        response = self.response
        assert response is not None
        while True:
            if response.chunks:
                chunks, response.chunks, response.buffered = response.chunks, [], 0
                if self._paused and not self._held:
                    self._resume()
                for chunk in chunks:
                    yield chunk
                continue
            if response.complete:
                return
            if self.error is not None:
                raise self.error
            if self._paused:  # held at the first body bytes, which the consumer has had
                self._resume()
            await self._wait(timeout)

    def _resume(self) -> None:
        self._paused = self._held = False
        if self.transport is not None:
            self.transport.resume_reading()


class _Body(httpx2.AsyncByteStream):
    def __init__(self, transport: LakeTransport, origin: tuple[str, str, int], conn: _Connection,
                 timeout: float | None) -> None:
        self._transport, self._origin, self._conn, self._timeout = transport, origin, conn, timeout
        self._released = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._conn.body(self._timeout):
                yield chunk
        finally:  # also on an error or a cancellation: callers may not aclose() then (as httpcore)
            self._release()

    async def aclose(self) -> None:
        self._release()

    def _release(self) -> None:
        if self._released:
            return
        self._released = True
        self._transport.release(self._origin, self._conn)


class LakeTransport(httpx2.AsyncBaseTransport):
    def __init__(self, *, max_connections: int = 64, max_idle: int | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.ssl_context = ssl_context
        self.max_idle = max_idle if max_idle is not None else max_connections
        self._slots = asyncio.Semaphore(max_connections)
        self._idle: defaultdict[tuple[str, str, int], list[_Connection]] = defaultdict(list)
        self._open: set[_Connection] = set()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        timeouts: dict[str, float | None] = request.extensions.get("timeout", {})
        url = request.url
        origin = (url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))
        try:
            async with asyncio.timeout(timeouts.get("pool")):
                await self._slots.acquire()
        except TimeoutError:
            raise httpx2.PoolTimeout("no lake connection free in time") from None
        conn: _Connection | None = None
        try:
            conn = self._pooled(origin) or await self._connect(origin, timeouts.get("connect"))
            await conn.send(request, timeouts)
            head = await conn.receive_head(timeouts.get("read"))
        except BaseException:
            if conn is not None:
                conn.close()
                self._open.discard(conn)
            self._slots.release()
            raise
        status = self._status(conn)
        stream = _Body(self, origin, conn, timeouts.get("read"))
        if request.method == "HEAD" or status in _NO_BODY_STATUSES:
            conn.response.complete = True  # type: ignore[union-attr]
        return httpx2.Response(status, headers=head.headers, stream=stream,
                              extensions={"http_version": b"HTTP/1.1", "reason_phrase": head.reason})

    @staticmethod
    def _status(conn: _Connection) -> int:
        assert conn.parser is not None
        return int(conn.parser.get_status_code())

    def _pooled(self, origin: tuple[str, str, int]) -> _Connection | None:
        idle = self._idle[origin]
        while idle:
            conn = idle.pop()
            if conn.reusable:
                return conn
            self._open.discard(conn)
        return None

    async def _connect(self, origin: tuple[str, str, int], timeout: float | None) -> _Connection:
        scheme, host, port = origin
        context = None
        if scheme == "https":
            context = self.ssl_context or ssl.create_default_context()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                _, conn = await loop.create_connection(
                    _Connection, host, port, ssl=context, server_hostname=host if context else None)
        except TimeoutError:
            raise httpx2.ConnectTimeout(f"connecting to {host}:{port} timed out") from None
        except OSError as exc:
            raise httpx2.ConnectError(f"cannot connect to {host}:{port}: {exc}") from exc
        self._open.add(conn)
        return conn

    def release(self, origin: tuple[str, str, int], conn: _Connection) -> None:
        """A response is done with its connection: pool it if it can serve another request."""
        done = conn.response is not None and conn.response.complete and not conn.response.chunks
        keep = done and conn.reusable and conn.response is not None and conn.response.keep_alive
        if keep and len(self._idle[origin]) < self.max_idle:
            conn.response, conn.parser = None, None
            self._idle[origin].append(conn)
        else:
            conn.close()
            self._open.discard(conn)
        self._slots.release()

    async def aclose(self) -> None:
        for conn in list(self._open):
            conn.close()
        self._open.clear()
        self._idle.clear()
