"""The HTTP layer's bounds on a real ``lakegate serve`` over a folder lake: clients sending
64 MiB header sections, on an S3 path and on ``/_lakegate/health``, are refused after the limit
while another client's health checks are each answered within 100 ms (the issue's bound: a
sender cannot stall the event loop); an idle connection is closed after LAKEGATE_IDLE_TIMEOUT
and a half-sent head is answered and closed after LAKEGATE_HEADER_TIMEOUT."""

from __future__ import annotations

import http.client
import re
import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.gateway import Gateway

IDLE_TIMEOUT = HEADER_TIMEOUT = 1.0
BIG = 64 << 20
CHUNK = 256 << 10


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    lake: Path = tmp_path_factory.mktemp("lake")
    (lake / "bucket").mkdir()
    env = {"LAKEGATE_ACCESS_LOG": "false", "LAKEGATE_IDLE_TIMEOUT": str(IDLE_TIMEOUT),
           "LAKEGATE_HEADER_TIMEOUT": str(HEADER_TIMEOUT)}
    with Gateway(f"dir:{lake}", env=env) as gw:
        yield gw


def _connect(gateway: Gateway) -> socket.socket:
    return socket.create_connection(("127.0.0.1", gateway.port), timeout=10)


def _answer(sock: socket.socket) -> bytes:
    """What the server sends until it closes (or 10 s pass)."""
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    return received


def _send_big_head(gateway: Gateway, path: str) -> bytes:
    """Sends a head with a 64 MiB header in 256 KiB writes until the server answers (or resets
    the connection): the answer, or b"" when none could be read."""
    with _connect(gateway) as sock:
        filler = b"a" * CHUNK
        try:
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nX-Big: ".encode())
            for _ in range(BIG // CHUNK):
                sock.sendall(filler)
                if select.select([sock], [], [], 0)[0]:
                    break
        except (BrokenPipeError, ConnectionResetError):
            pass
        return _answer(sock)


def test_big_header_sections_are_refused_while_health_checks_stay_fast(gateway: Gateway) -> None:
    answers: dict[str, list[bytes]] = {"/bucket/key": [], "/_lakegate/health": []}
    stop = threading.Event()

    def attack(path: str) -> None:
        while not stop.is_set():
            answers[path].append(_send_big_head(gateway, path))

    health = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=10)
    health.request("GET", "/_lakegate/health")
    assert health.getresponse().read()  # connected, warmed
    senders = [threading.Thread(target=attack, args=(path,), daemon=True) for path in answers]
    for sender in senders:
        sender.start()
    latencies = []
    try:
        for _ in range(40):
            started = time.perf_counter()
            health.request("GET", "/_lakegate/health")
            response = health.getresponse()
            response.read()
            latencies.append(time.perf_counter() - started)
            assert response.status == 200
            time.sleep(0.02)
    finally:
        stop.set()
        for sender in senders:
            sender.join(30)
        health.close()
    assert max(latencies) < 0.1, sorted(latencies)[-5:]
    s3 = [a for a in answers["/bucket/key"] if a]
    own = [a for a in answers["/_lakegate/health"] if a]
    assert s3 and own, {path: len(got) for path, got in answers.items()}
    assert all(a.startswith(b"HTTP/1.1 400 ") and b"<Code>RequestHeaderSectionTooLarge</Code>" in a for a in s3)
    assert all(a.startswith(b"HTTP/1.1 431 ") for a in own)


def test_an_idle_connection_is_closed_after_the_idle_timeout(gateway: Gateway) -> None:
    with _connect(gateway) as sock:
        started = time.monotonic()
        assert _answer(sock) == b""
        assert IDLE_TIMEOUT * 0.5 < time.monotonic() - started < IDLE_TIMEOUT + 5


@pytest.mark.parametrize(("path", "status"), [("/bucket/key", 400), ("/_lakegate/health", 408)])
def test_a_half_sent_head_is_answered_and_closed_after_the_header_timeout(gateway: Gateway, path: str, status: int) -> None:
    with _connect(gateway) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n".encode())
        started = time.monotonic()
        answer = _answer(sock)
        assert HEADER_TIMEOUT * 0.5 < time.monotonic() - started < HEADER_TIMEOUT + 5
    assert re.match(rf"HTTP/1.1 {status} ".encode(), answer), answer[:200]
    if status == 400:
        assert b"<Code>RequestTimeout</Code>" in answer
