"""The unit tier's guard (tests/unit/conftest.py): a socket or a process in a unit test fails it."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys

import pytest


def test_binding_or_connecting_a_socket_fails_the_test() -> None:
    with socket.socket() as sock, pytest.raises(AssertionError, match="tests/component"):
        sock.bind(("127.0.0.1", 0))
    with socket.socket() as sock, pytest.raises(AssertionError, match="tests/component"):
        sock.connect(("127.0.0.1", 9))


def test_an_asyncio_server_fails_the_test() -> None:
    with pytest.raises(AssertionError, match="tests/component"):
        asyncio.run(asyncio.start_server(lambda r, w: None, "127.0.0.1", 0))  # type: ignore[arg-type, return-value]


def test_a_child_process_fails_the_test() -> None:
    with pytest.raises(AssertionError, match="tests/component"):
        subprocess.run([sys.executable, "-c", "pass"], check=False)


def test_an_event_loop_and_a_socketpair_are_allowed() -> None:
    async def echo() -> bytes:
        left, right = socket.socketpair()
        with left, right:
            left.send(b"x")
            return right.recv(1)

    assert asyncio.run(echo()) == b"x"
