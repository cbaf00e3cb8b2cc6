"""The unit tier is pure: a test here that opens a network socket or starts a process fails
with TierViolation, so such a test goes to tests/component instead and the tiers stay honest.

Guarded: binding, connecting and listening on any socket (asyncio's servers and connections
go through these), subprocess.Popen (and so run, check_output, asyncio's subprocesses),
os.fork and os.posix_spawn. A socketpair (asyncio's self-pipe, in-process test transports)
needs none of these and stays allowed. There are no exceptions: the crash tests that SIGKILL a
child python are tests/component/test_crash_kill.py.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest


class TierViolation(AssertionError):
    """A unit test reached for a socket or a process."""


def _refuse(what: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise TierViolation(f"a unit test must not {what}: move it to tests/component")

    return refuse


@pytest.fixture(autouse=True)
def _no_sockets_or_processes(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("bind", "connect", "connect_ex", "listen"):
        monkeypatch.setattr(socket.socket, name, _refuse(f"{name} a socket"))
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse("start a process"))
    monkeypatch.setattr(os, "fork", _refuse("fork"))
    monkeypatch.setattr(os, "posix_spawn", _refuse("spawn a process"))
    yield
