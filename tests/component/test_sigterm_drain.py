"""SIGTERM's drain of a real `lakegate serve` over a folder lake (issue 16), with one worker
(uvicorn in the CLI's process) and with two (the supervisor SIGTERMs each): a GET whose client
reads slowly is in flight when SIGTERM arrives; a new connection is refused from then on; the
GET still completes with its whole body; the process exits with status 0. Also the probes'
answers on a running node."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import signal
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from harness.endpoints import ALICE
from harness.gateway import Gateway

SIZE = 48 << 20  # far more than the sockets' buffers hold: the response stays in flight
PIECE = 1 << 20


@pytest.fixture(params=["1", "2"], ids=["one-worker", "two-workers"])
def gateway(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Gateway]:
    env = {"LAKEGATE_ACCESS_LOG": "false", "LAKEGATE_WORKERS": request.param, "LAKEGATE_SHUTDOWN_TIMEOUT": "120"}
    with Gateway(f"dir:{tmp_path / 'lake'}", tenants=(ALICE,), env=env, workdir=tmp_path / "gw",
                 stop_timeout=60.0) as gw:
        yield gw


def refused(port: int, timeout: float = 60.0) -> bool:
    """Whether a new connection to ``port`` is refused within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2):
                pass
        except ConnectionRefusedError:
            return True
        time.sleep(0.05)
    return False


def test_the_probes_of_a_running_node(gateway: Gateway) -> None:
    for path, doc in (("/_lakegate/health/live", {"status": "live"}),
                      ("/_lakegate/health/ready", {"status": "ready", "lake": "reachable"})):
        with urllib.request.urlopen(gateway.url + path, timeout=10) as response:
            assert (response.status, json.loads(response.read())) == (200, doc)
    banner = gateway.log_path.read_text()
    assert "/_lakegate/health/live" in banner and "/_lakegate/health/ready" in banner


def test_a_request_in_flight_at_sigterm_completes_and_the_node_exits_0(gateway: Gateway) -> None:
    s3 = gateway.target("gw", "dir").client()
    s3.create_bucket(Bucket="drain")
    data = os.urandom(SIZE)
    s3.put_object(Bucket="drain", Key="big", Body=data)
    url = urlsplit(s3.generate_presigned_url("get_object", Params={"Bucket": "drain", "Key": "big"}))
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=120)
    try:
        conn.request("GET", f"{url.path}?{url.query}")
        response = conn.getresponse()
        assert response.status == 200
        digest = hashlib.md5(response.read(PIECE))  # noqa: S324 - a checksum, not security
        assert gateway.proc is not None
        os.kill(gateway.pid, signal.SIGTERM)
        assert refused(gateway.port), "a new connection was still accepted after SIGTERM"
        assert gateway.proc.poll() is None  # still draining: our GET is not done
        received = PIECE
        while piece := response.read(PIECE):
            digest.update(piece)
            received += len(piece)
    finally:
        conn.close()
    assert received == SIZE and digest.hexdigest() == hashlib.md5(data).hexdigest()  # noqa: S324
    assert gateway.proc.wait(timeout=180) == 0, gateway.output_tail()
