"""The HTTP protocol ``lakegate serve`` runs: uvicorn's httptools protocol, whose transport
sends a response's head together with its first body bytes.

uvicorn writes the status line and headers the moment the app sends ``http.response.start``,
and the body with each ``http.response.body``: two system calls and two TCP segments for
every response, the first of which wakes the client only for it to wait for the second. Here a
small write (a response head) waits for the end of the event loop's current turn, and a write
that follows in the same turn goes out with it in one ``writelines``. lakegate sends a GET's
head and first body bytes in the same turn, so they leave as one; a response with no body to
follow (a HEAD, an error) leaves at the end of the turn, microseconds later. Measured on a cold
64 MiB GET: the client's first byte is no longer delayed by a wake-up for the head alone.

It also implements ASGI's zero-copy send extension (``http.response.zerocopysend``) on plain
HTTP connections: a GET's large L1 hits leave as regions of their block files, sent by
``os.sendfile`` from the page cache to the socket, never read into Python (see ``FileSender``).

The protocol also holds each connection to :class:`gateway.httplimits.HttpLimits`, before the
parser: httptools gathers a header's value whole before any callback, so a head is fed to it
in slices no larger than what its allowance has left, and a refused request never starts the
app. The answers past each bound are :mod:`gateway.httplimits`'.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import select
from typing import Any

import httptools
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from cachetier.lake import pread_exactly
from gateway import httplimits
from gateway.httplimits import HttpLimits, Refusal

log = logging.getLogger("lakegate.http")

# Writes up to this size wait for a follower within the turn: a response head (lakegate's are
# well under 2 KiB). Larger ones go out at once, after anything waiting.
_HOLD_MAX = 8 * 1024


class CoalescingTransport:
    """An asyncio transport whose small writes wait for the end of the loop's turn, so that a
    write following in the same turn is sent with them. Everything else is the wrapped
    transport's; closing or ending the stream sends what waits first, aborting drops it."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        if self._held is not None:
            held, self._held = self._held, None
            self._transport.writelines([held, data])
        elif len(data) <= _HOLD_MAX:
            self._held = bytes(data)
            self._loop.call_soon(self.flush)
        else:
            self._transport.write(data)

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def flush(self) -> None:
        if self._held is not None:
            held, self._held = self._held, None
            if not self._transport.is_closing():
                self._transport.write(held)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + len(self._held or b"")

    @property
    def wrapped(self) -> asyncio.Transport:
        return self._transport

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


_WARN_EVERY = 10.0  # seconds between log lines about refused connections

ZERO_COPY = "http.response.zerocopysend"
_EXTENSIONS: dict[str, dict[object, object]] = {ZERO_COPY: {}}
# sendfile runs in threads of its own, which wait for a slow client's socket in poll() without
# holding the GIL; a pool apart from asyncio's default, so that blocks' reads and stores
# (asyncio.to_thread) never wait behind clients that read slowly
_SENDERS = 64
_sender_pool: concurrent.futures.ThreadPoolExecutor | None = None


def _senders() -> concurrent.futures.ThreadPoolExecutor:
    global _sender_pool
    if _sender_pool is None:
        _sender_pool = concurrent.futures.ThreadPoolExecutor(_SENDERS, thread_name_prefix="sendfile")
    return _sender_pool


def sendfile_all(sock_fd: int, file_fd: int, offset: int, count: int, timeout: float) -> None:
    """Send ``count`` bytes of ``file_fd`` from ``offset`` to the non-blocking socket, waiting
    up to ``timeout`` seconds each time it is full (TimeoutError past that). A file that ends
    early raises ConnectionError; a peer gone, the socket's OSError."""
    poller = select.poll()
    poller.register(sock_fd, select.POLLOUT)
    end = offset + count
    while offset < end:
        try:
            sent = os.sendfile(sock_fd, file_fd, offset, end - offset)
        except BlockingIOError:
            if not poller.poll(timeout * 1000):
                raise TimeoutError(f"the client read nothing for {timeout}s") from None
            continue
        if sent == 0:
            raise ConnectionError(f"the file ended {end - offset} bytes early")
        offset += sent


class FileSender:
    """A request cycle's ``send`` that also takes ``http.response.zerocopysend``: the file's
    bytes go straight to the socket (``os.sendfile``: once on the loop, and what the socket had
    no room for in a thread, on a duplicate of the socket's descriptor, so that a connection
    closed meanwhile never lets the bytes reach another one),
    once everything written before them has left (else they are read and written: the
    transport's order must hold). The connection reads nothing while a file is sent, so no
    other answer can go between. A client that goes away or reads nothing for the send
    timeout ends the connection, as with any body."""

    def __init__(self, protocol: LakegateHttpProtocol, cycle: Any) -> None:
        self.protocol = protocol
        self.cycle = cycle
        self.send_message = cycle.send

    async def __call__(self, message: Any) -> None:
        if message["type"] != ZERO_COPY:
            await self.send_message(message)
            return
        cycle = self.cycle
        if cycle.flow.write_paused and not cycle.disconnected:
            await cycle.flow.drain()
        if cycle.disconnected:
            return
        if not cycle.response_started or cycle.response_complete or cycle.chunked_encoding:
            raise RuntimeError(f"'{ZERO_COPY}' outside a response body of known length")
        file, count = message["file"], int(message["count"])
        offset = int(message.get("offset", 0))
        if count > cycle.expected_content_length:
            raise RuntimeError("Response content longer than Content-Length")
        if count and not await self._send_file(file.fileno(), offset, count):
            cycle.disconnected = True
            return
        cycle.expected_content_length -= count
        await self.send_message({"type": "http.response.body", "body": b"", "more_body": message.get("more_body", False)})

    async def _send_file(self, file_fd: int, offset: int, count: int) -> bool:
        """False when the connection ended."""
        transport = self.protocol.transport
        assert isinstance(transport, CoalescingTransport)  # connection_made's
        transport.flush()  # the response's head, held for its first bytes
        raw = transport.wrapped
        sock = raw.get_extra_info("socket")
        if sock is None or raw.get_write_buffer_size() or raw.is_closing():
            if raw.is_closing():
                return False
            data = await asyncio.get_running_loop().run_in_executor(_senders(), pread_exactly, file_fd, offset, count)
            raw.write(data)
            return True
        try:  # at once, on the loop: a socket with room takes a whole block in one call
            sent = os.sendfile(sock.fileno(), file_fd, offset, count)
        except BlockingIOError:
            sent = 0
        except OSError:
            raw.abort()
            return False
        if sent == count:
            return True
        offset, count = offset + sent, count - sent
        sock_fd = os.dup(sock.fileno())
        raw.pause_reading()
        try:  # the rest as the client takes it, in a thread that waits for room
            await asyncio.get_running_loop().run_in_executor(
                _senders(), sendfile_all, sock_fd, file_fd, offset, count, self.protocol.limits.send_timeout
            )
        except (OSError, TimeoutError) as exc:
            if isinstance(exc, TimeoutError):
                log.info("aborting a connection whose client read nothing for %ss (LAKEGATE_SEND_TIMEOUT)",
                         self.protocol.limits.send_timeout)
                httplimits.REFUSED.labels("send_timeout").inc()
            raw.abort()
            return False
        finally:
            os.close(sock_fd)
            if not raw.is_closing() and not self.protocol.flow.read_paused:
                raw.resume_reading()
        return True


class _Refused(Exception):
    """Raised in a parser callback to stop the parser; the refusal is on the protocol."""


class LakegateHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol on a ``CoalescingTransport``, within ``HttpLimits``.

    A request head is open from the parser's ``on_message_begin`` to ``on_headers_complete``.
    The bytes fed while it is open are counted (an upper bound: in a slice where it began, the
    bytes of heads and bodies finished before it are taken off), and no slice is longer than
    what the allowance has left. Between requests a slice is at most one allowance long, or
    exactly the rest of a body of known length, so that a body is fed in one piece."""

    _warned_at = float("-inf")  # when a refused connection was last logged, by any connection

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
        *,
        limits: HttpLimits = HttpLimits(),
        zero_copy: bool = False,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits = limits
        self.zero_copy = zero_copy  # offer http.response.zerocopysend (plain HTTP only)
        # uvicorn's keep-alive timer, armed from connection_made on too (uvicorn types it int)
        self.timeout_keep_alive = limits.idle_timeout  # type: ignore[assignment]
        self._head_open = False
        self._head_bytes = 0  # of the open head, fed so far (an upper bound)
        self._head_before_slice = 0  # of those, fed before the slice being fed
        self._head_began_in_slice = False
        self._finished_in_slice = 0  # bytes of the slice in heads and bodies finished in it
        self._body_left: int | None = 0  # of the current request's body, unfed; None: chunked
        self._refusal: Refusal | None = None  # set by a callback that stops the parser
        self._discarding = False  # refused: what still arrives is dropped, unparsed
        self._linger_left = 0
        self._head_length = 0  # of the open head: its request line and fields as parsed so far
        self._head_started = 0.0  # loop time at which the open head began
        # One lazy timer per connection, not one per request (a keep-alive connection's heads
        # come many a second): armed when a head begins and none is, it checks on firing whether
        # the head now open began more than header_timeout ago, and re-arms for the rest if not.
        self._header_timer: asyncio.TimerHandle | None = None
        self._send_timer: asyncio.TimerHandle | None = None
        self._linger_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]
        if len(self.connections) > self.limits.max_connections:
            self.connections.discard(self)  # it is gone in a moment: no place among those served
            if self.loop.time() - LakegateHttpProtocol._warned_at > _WARN_EVERY:  # not a line per connection in a flood
                LakegateHttpProtocol._warned_at = self.loop.time()
                log.warning("refusing connections: %d open (LAKEGATE_MAX_CONNECTIONS)", self.limits.max_connections)
            self._refuse(httplimits.TOO_MANY_CONNECTIONS, s3=True)
            return
        self._arm_idle_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._header_timer, self._send_timer, self._linger_timer):
            if timer is not None:
                timer.cancel()
        super().connection_lost(exc)

    # -- reading, within the head's allowance

    def data_received(self, data: bytes) -> None:
        if self._discarding:
            self._linger_left -= len(data)
            if self._linger_left < 0:
                if self._linger_timer is not None:  # the answer is out: enough lingering
                    self.transport.close()
                else:  # a response is still going out: the client waits for it unheard
                    self.flow.pause_reading()
            return
        view = memoryview(data)
        while view and not self._discarding and self.parser is not None:
            piece = view[: self._slice_length()]
            view = view[len(piece) :]
            if not self._feed(piece):
                return

    def _slice_length(self) -> int:
        if self._head_open:
            return self.limits.max_header_bytes - self._head_bytes
        if self._body_left:
            return self._body_left
        return self.limits.max_header_bytes

    def _feed(self, piece: memoryview) -> bool:
        """Feeds one slice to the parser; False when the connection reads no further."""
        self._head_before_slice = self._head_bytes if self._head_open else 0
        self._head_began_in_slice = False
        self._finished_in_slice = 0
        try:
            self.parser.feed_data(piece)
        except httptools.HttpParserError:
            if self._refusal is not None:  # raised by one of ours (a callback error)
                self._refuse(self._refusal, httplimits.is_s3_target(self.url))
                return False
            self.logger.warning("Invalid HTTP request received.")
            self.send_400_response("Invalid HTTP request received.")
            return False
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return False
        if self._head_open:
            if self._head_began_in_slice:
                self._head_bytes = len(piece) - self._finished_in_slice
            else:
                self._head_bytes += len(piece)
            if self._head_bytes >= self.limits.max_header_bytes:  # and not ended: past the bound
                self._refuse(httplimits.HEADER_SECTION_TOO_LARGE, httplimits.is_s3_target(self.url))
                return False
        return True

    # -- parser callbacks

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_open = self._head_began_in_slice = True
        self._head_bytes = self._head_before_slice = 0
        self._head_length = 12  # the request line's two spaces, "HTTP/1.1" and CRLF (the method: at its end)
        self._head_started = self.loop.time()
        self._unset_keepalive_if_required()
        if self._header_timer is None:
            self._header_timer = self.loop.call_at(self._head_started + self.limits.header_timeout, self._header_check)

    def on_url(self, url: bytes) -> None:
        self.url += url
        self._head_length += len(url)
        if len(self.url) > self.limits.max_request_line_bytes:
            self._refusal = httplimits.REQUEST_LINE_TOO_LONG
            raise _Refused()

    def on_header(self, name: bytes, value: bytes) -> None:
        # uvicorn's own, inline (it runs for every field of every request), and the head's length
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True
        self.headers.append((name, value))
        self._head_length += len(name) + len(value) + 4
        if len(self.headers) > self.limits.max_headers:
            self._refusal = httplimits.TOO_MANY_HEADERS
            raise _Refused()

    def on_headers_complete(self) -> None:
        if self._refusal is not None:  # never the app for a refused request
            return
        head = self._head_length + len(self.parser.get_method()) + 2  # + the blank line
        self._finished_in_slice += max(0, head - self._head_before_slice)
        self._head_open = False
        self._head_bytes = 0
        self._body_left = _body_length(self.headers)
        files = self.zero_copy and self.scheme == "http"
        if files:
            self.scope["extensions"] = _EXTENSIONS
        super().on_headers_complete()
        if files and self.cycle is not None and self.cycle.scope is self.scope:
            self.cycle.send = FileSender(self, self.cycle)  # type: ignore[method-assign]  # run_asgi sends with it

    def on_body(self, body: bytes) -> None:
        self._finished_in_slice += len(body)
        if self._body_left is not None:
            self._body_left = max(0, self._body_left - len(body))
        super().on_body(body)

    # -- timers

    def _arm_idle_timer(self) -> None:
        self._unset_keepalive_if_required()
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)

    def _header_check(self) -> None:
        self._header_timer = None
        if not self._head_open or self._discarding:
            return  # the next head arms it again
        due = self._head_started + self.limits.header_timeout
        if self.flow.read_paused:  # the head waits on us (pipelined behind a request), not on the client
            due = self.loop.time() + self.limits.header_timeout
        if due > self.loop.time():
            self._header_timer = self.loop.call_at(due, self._header_check)
            return
        self._refuse(httplimits.HEADER_TIMEOUT, httplimits.is_s3_target(self.url))

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._send_timer is None:
            self._send_timer = self.loop.call_later(self.limits.send_timeout, self._send_stalled)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def _send_stalled(self) -> None:
        self._send_timer = None
        log.info("aborting a connection whose client read nothing for %ss (LAKEGATE_SEND_TIMEOUT)", self.limits.send_timeout)
        httplimits.REFUSED.labels("send_timeout").inc()
        self.transport.abort()

    # -- refusing

    def _refuse(self, refusal: Refusal, s3: bool) -> None:
        """Answers a refused request (or connection) and closes after a bounded lingering: what
        the client still sends is discarded, so that it reads the answer rather than a reset."""
        httplimits.REFUSED.labels(refusal.reason).inc()
        self._discarding = True
        self._head_open = False
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        self._unset_keepalive_if_required()
        if self.transport.is_closing():
            return
        self._linger_left = self.limits.linger_bytes
        if self.cycle is not None and not self.cycle.response_complete or self.pipeline:
            # a response is under way on this connection: no answer can go between; it is the last
            self.cycle.keep_alive = False
            return
        self.transport.write(httplimits.answer(refusal, s3))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.flow.resume_reading()
        self._linger_timer = self.loop.call_later(self.limits.linger_seconds, self.transport.close)


def _body_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    """The request body's length as its headers give it (the parser has checked them); None
    when it is chunked."""
    length = 0
    for name, value in headers:
        if name == b"transfer-encoding":
            return None
        if name == b"content-length":
            try:
                length = int(value)
            except ValueError:
                return None  # not one the parser passes; sliced as an unknown length if it did
    return length
