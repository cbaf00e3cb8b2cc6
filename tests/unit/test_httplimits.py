"""``LakegateHttpProtocol`` within ``HttpLimits``, on a fake transport: a request head is bounded
before the parser holds it (size, header count, request line, time), a refused request never
reaches the app and gets S3's error on S3 paths and a plain status on lakegate's own, idle and
stalled connections are closed, and a connection past the bound gets SlowDown."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any

from doubles import FakeTransport
from prometheus_client import REGISTRY
from uvicorn.config import Config
from uvicorn.server import ServerState

from gateway.httplimits import HttpLimits
from gateway.httpserver import LakegateHttpProtocol

FAST = HttpLimits(header_timeout=0.05, idle_timeout=0.05, send_timeout=0.05, linger_seconds=0.05)


class CountingParser:
    """The protocol's parser, counting the bytes fed to it."""

    def __init__(self, parser: Any) -> None:
        self.parser = parser
        self.fed = 0

    def feed_data(self, data: Any) -> None:
        self.fed += len(data)
        self.parser.feed_data(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.parser, name)


class Served:
    """One connection to the protocol, with an app that records each request and answers ok."""

    def __init__(self, limits: HttpLimits, state: ServerState | None = None) -> None:
        self.requests: list[tuple[str, bytes]] = []
        self.answering = asyncio.Event()  # cleared: the app waits before it answers
        self.answering.set()
        self.transport = FakeTransport()
        config = Config(app=self.app, proxy_headers=False, lifespan="off", interface="asgi3")
        loop = asyncio.get_running_loop()
        self.protocol = LakegateHttpProtocol(config, state or ServerState(), {}, loop, limits=limits)
        self.protocol.connection_made(self.transport)  # type: ignore[arg-type]
        self.parser = CountingParser(self.protocol.parser)
        self.protocol.parser = self.parser  # type: ignore[assignment]

    async def app(self, scope: Any, receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.requests.append((scope["path"], body))
        await self.answering.wait()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    def send(self, data: bytes, chunk: int = 256 * 1024) -> None:
        for start in range(0, len(data), chunk):
            self.protocol.data_received(data[start : start + chunk])

    @property
    def status(self) -> int:
        match = re.match(rb"HTTP/1.1 (\d+) ", self.transport.written)
        assert match, self.transport.written[:200]
        return int(match.group(1))

    def s3_code(self) -> str:
        match = re.search(rb"<Code>(\w+)</Code>", self.transport.written)
        assert match, self.transport.written[:500]
        return match.group(1).decode()


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


def head(path: str, headers: dict[str, str] | None = None, method: str = "GET") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: localhost"] + [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def refused(served: Served, status: int) -> None:
    assert served.status == status
    assert b"connection: close\r\n" in served.transport.written.lower()
    assert served.requests == []


def test_a_64_mib_header_section_is_refused_after_about_the_limit_and_never_parsed_whole() -> None:
    async def test() -> None:
        served = Served(FAST)
        sent = b"GET /bucket/key HTTP/1.1\r\nX-Big: " + b"a" * (64 << 20)
        served.send(sent[: 1 << 20])
        assert served.parser.fed <= FAST.max_header_bytes
        refused(served, 400)
        assert served.s3_code() == "RequestHeaderSectionTooLarge"
        assert b"content-type: application/xml" in served.transport.written
        assert served.transport.eof and not served.transport.closed  # lingering: the client reads the answer
        served.send(sent[1 << 20 :])  # discarded, never parsed; past the lingering's bytes: closed
        assert served.parser.fed <= FAST.max_header_bytes and served.transport.closed
        served = Served(FAST)
        served.send(sent[: 1 << 20])
        await asyncio.sleep(0.1)  # or past its time
        assert served.transport.closed

    run(test)


def test_lakegates_own_paths_get_a_plain_431() -> None:
    async def test() -> None:
        for path in ("/_lakegate/health", "/metrics"):
            served = Served(FAST)
            served.send(f"GET {path} HTTP/1.1\r\nX-Big: ".encode() + b"a" * (1 << 20))
            refused(served, 431)
            assert b"<Error>" not in served.transport.written

    run(test)


def test_too_many_headers_are_refused() -> None:
    async def test() -> None:
        many = {f"X-H{i}": "v" for i in range(FAST.max_headers + 1)}
        served = Served(FAST)
        served.send(head("/bucket/key", many))
        refused(served, 400)
        assert served.s3_code() == "RequestHeaderSectionTooLarge"
        served = Served(FAST)
        served.send(head("/_lakegate/health", many))
        refused(served, 431)
        served = Served(FAST)
        served.send(head("/_lakegate/health", dict(list(many.items())[: FAST.max_headers - 1])))  # with Host: the limit
        await asyncio.sleep(0.01)
        assert served.status == 200

    run(test)


def test_an_overlong_request_line_is_refused() -> None:
    async def test() -> None:
        served = Served(FAST)
        served.send(head("/bucket/" + "k" * FAST.max_request_line_bytes))
        refused(served, 400)
        assert served.s3_code() == "InvalidURI"
        served = Served(FAST)
        served.send(head("/_lakegate/" + "k" * FAST.max_request_line_bytes))
        refused(served, 414)

    run(test)


def test_pipelined_requests_are_all_answered_in_order_also_past_one_allowance_together() -> None:
    async def test() -> None:
        served = Served(FAST)
        filler = {"X-Filler": "f" * (FAST.max_header_bytes // 3)}  # three heads: more than one allowance
        served.send(head("/b/one", filler) + head("/b/two", filler) + head("/b/three", filler))
        for _ in range(20):
            await asyncio.sleep(0)
        assert [path for path, _ in served.requests] == ["/b/one", "/b/two", "/b/three"]
        assert served.transport.written.count(b"HTTP/1.1 200 OK") == 3

    run(test)


def test_a_request_with_a_body_and_the_one_after_it_are_served() -> None:
    async def test() -> None:
        served = Served(FAST)
        body = bytes(range(256)) * 4096 * 2  # 2 MiB, fed in 256 KiB chunks
        served.send(head("/b/k", {"Content-Length": str(len(body))}, method="PUT") + body)
        for _ in range(50):
            await asyncio.sleep(0)
        served.send(head("/b/k"))
        for _ in range(20):
            await asyncio.sleep(0)
        assert served.requests == [("/b/k", body), ("/b/k", b"")]

    run(test)


def test_a_head_not_finished_within_the_header_timeout_is_answered_and_closed() -> None:
    async def test() -> None:
        for path, status in (("/bucket/key", 400), ("/_lakegate/health", 408)):
            served = Served(FAST)
            served.send(f"GET {path} HTTP/1.1\r\nHost: local".encode())
            await asyncio.sleep(0.03)
            assert served.transport.written == b""  # the idle timer no longer runs: a head is under way
            await asyncio.sleep(0.05)
            refused(served, status)
            if status == 400:
                assert served.s3_code() == "RequestTimeout"
            await asyncio.sleep(0.1)
            assert served.transport.closed

    run(test)


def test_each_head_on_a_keep_alive_connection_has_its_own_header_timeout() -> None:
    """One timer per connection: a head begun late in the window of an earlier one is given its
    whole timeout (not the earlier head's rest), and is refused once that has passed."""

    async def test() -> None:
        limits = HttpLimits(header_timeout=1.0, idle_timeout=10, linger_seconds=0.05)
        served = Served(limits)
        served.send(head("/bucket/first"))
        await asyncio.sleep(0.6)  # the first head's timer is still armed, due at ~1.0
        assert served.transport.written.startswith(b"HTTP/1.1 200")
        before = len(served.transport.written)
        served.send(b"GET /bucket/second HTTP/1.1\r\nHost: loc")  # begins at ~0.6, due at ~1.6
        await asyncio.sleep(0.6)  # ~1.2: past the first head's due time, not this one's
        assert len(served.transport.written) == before and not served.transport.closed
        await asyncio.sleep(0.8)
        assert served.transport.written[before:].startswith(b"HTTP/1.1 400")
        assert b"<Code>RequestTimeout</Code>" in served.transport.written

    run(test)


def test_a_connection_that_sends_nothing_is_closed_after_the_idle_timeout() -> None:
    async def test() -> None:
        served = Served(FAST)
        await asyncio.sleep(0.1)
        assert served.transport.closed and served.transport.written == b""

    run(test)


def test_a_client_that_stops_reading_is_aborted_after_the_send_timeout() -> None:
    async def test() -> None:
        served = Served(HttpLimits(send_timeout=0.05))
        served.protocol.pause_writing()
        served.protocol.resume_writing()
        await asyncio.sleep(0.1)
        assert not served.transport.aborted  # it read again in time
        served.protocol.pause_writing()
        await asyncio.sleep(0.1)
        assert served.transport.aborted

    run(test)


def test_a_connection_past_the_bound_gets_slowdown_and_is_closed() -> None:
    async def test() -> None:
        state = ServerState()
        limits = HttpLimits(max_connections=2, linger_seconds=0.05)
        first, second = Served(limits, state), Served(limits, state)
        before = REGISTRY.get_sample_value("lakegate_http_refused_total", {"reason": "connections"}) or 0
        third = Served(limits, state)
        assert REGISTRY.get_sample_value("lakegate_http_refused_total", {"reason": "connections"}) == before + 1
        assert first.transport.written == second.transport.written == b""
        assert third.status == 503 and third.s3_code() == "SlowDown"
        assert b"Please reduce your request rate." in third.transport.written
        assert len(state.connections) == 2
        third.send(head("/b/k"))
        assert third.requests == [] and third.parser.fed == 0  # discarded, never parsed
        await asyncio.sleep(0.1)
        assert third.transport.closed

    run(test)


def test_a_head_refused_while_a_response_is_under_way_gets_no_answer_between_and_the_connection_ends_after_it() -> None:
    async def test() -> None:
        served = Served(FAST)
        served.answering.clear()
        served.send(head("/b/slow"))
        await asyncio.sleep(0.01)
        served.send(b"GET /b/next HTTP/1.1\r\nX-Big: " + b"a" * (8 << 20))  # refused; the rest discarded
        assert served.transport.written == b"" and not served.transport.is_closing()
        served.answering.set()
        await asyncio.sleep(0.01)
        assert served.transport.written.startswith(b"HTTP/1.1 200 OK") and served.transport.written.count(b"HTTP/1.1") == 1
        assert served.transport.closed and [path for path, _ in served.requests] == ["/b/slow"]

    run(test)


def test_bytes_that_begin_no_request_do_not_keep_a_connection_open() -> None:
    async def test() -> None:
        served = Served(FAST)
        for _ in range(10):  # empty lines before a request line, which the parser skips
            served.send(b"\r\n")
            await asyncio.sleep(0.02)
        assert served.transport.closed and served.requests == []

    run(test)
