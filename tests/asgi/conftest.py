"""ASGI tier: the boto3 conformance suite (tests/conformance.py, shared with tests/integration)
against the gateway's ASGI app in-process, with no Ceph and no sockets, so the S3 front end is
checked on any machine. Its targets, the app built from Settings as `lakegate serve` builds it:

    asgi-dir      over DirLake, in a temporary folder
    asgi-memory   over MemoryLake, the Lake's in-memory twin
    wb-dir        over DirLake with every write in write-back (LAKEGATE_WRITE_MODE=write-back):
                  acknowledged from the node's journal, flushed to the lake in the background

boto3 reaches the app through a botocore ``before-send`` handler (inprocess.AsgiBridge), so
every byte boto3 would put on the wire goes through the app, signed as it would be. The tests
that need the RGW itself (as the reference answer) are skipped here, with the reason.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conformance import boto3_defaults_only, fresh_bucket, target_client
from harness.endpoints import ALICE, Target
from inprocess import AsgiBridge, lakegate_app

from cachetier.lake.memory import MemoryLake

ASGI_TARGETS = ("asgi-dir", "asgi-memory", "wb-dir")
# No socket is opened: the port only completes the endpoint's URL (the suite's virtual-host
# test names it in the Host header); one of this tier's range, so a real listener never clashes.
ENDPOINT = "http://localhost:21400"


@dataclass(frozen=True)
class InProcessTarget(Target):
    """A Target whose clients reach ``bridge`` in-process instead of ``endpoint_url``."""

    bridge: AsgiBridge | None = None

    def client(self, **options: Any) -> Any:
        client = super().client(**options)
        assert self.bridge is not None
        # last: the suite's own handlers (recording headers, rewriting the Host) run first
        client.meta.events.register_last("before-send.s3", self.bridge.send)
        return client


def _no_network(*_: Any) -> None:
    raise AssertionError("the asgi tier opened a network connection")


@pytest.fixture(scope="session", autouse=True)
def _asgi_environment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """boto3 on its defaults."""
    with boto3_defaults_only(tmp_path_factory.mktemp("aws")):
        yield


@pytest.fixture(autouse=True)
def _no_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    """No socket may connect during a test here: a request that missed the bridge fails. Per
    test, not per session: a session-wide patch outlived this tier and broke every later one."""
    monkeypatch.setattr(socket.socket, "connect", _no_network)
    monkeypatch.setattr(socket.socket, "connect_ex", _no_network)


@pytest.fixture(scope="session", params=ASGI_TARGETS)
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    """The app under test, over each lake; a test restricted to another tier's target
    (`parametrize("target", [...], indirect=True)`) is skipped here."""
    if request.param not in ASGI_TARGETS:
        pytest.skip(f"{request.param} is a target of the integration tier")
    yield from _in_process(request.param, tmp_path_factory.mktemp(request.param))


@pytest.fixture(scope="module")
def sigv2_off_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    """The app with LAKEGATE_SIGV2=false, over a memory lake."""
    yield from _in_process("asgi-memory", tmp_path_factory.mktemp("sigv2-off"), sigv2=False)


def _in_process(name: str, folder: Path, **overrides: object) -> Iterator[InProcessTarget]:
    """The target ``name`` (an ASGI_TARGETS one), its app started while the generator runs."""
    lake = MemoryLake() if name == "asgi-memory" else None
    if name == "wb-dir":
        overrides = {"write_mode": "write-back", **overrides}
    bridge = AsgiBridge(lakegate_app(folder, lake, **overrides))
    bridge.start()
    try:
        yield InProcessTarget(
            name=name,
            endpoint_url=ENDPOINT,
            access_key=ALICE.access_key,
            secret_key=ALICE.secret_key,
            lake="memory" if lake is not None else "dir",
            via_gateway=True,
            bridge=bridge,
        )
    finally:
        bridge.close()


@pytest.fixture(scope="session")
def rgw_target() -> Target:
    pytest.skip("needs the RGW itself as the reference: the asgi tier has none")


@pytest.fixture(scope="session")
def rgw_s3() -> Any:
    pytest.skip("needs the RGW itself as the reference: the asgi tier has none")


@pytest.fixture(scope="session")
def s3(target: Target) -> Iterator[Any]:
    """boto3 S3 client for the target (conformance.target_client)."""
    yield from target_client(target)


@pytest.fixture
def bucket(s3: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh bucket on the target, deleted afterwards (conformance.fresh_bucket)."""
    yield from fresh_bucket(s3, request)
