"""The supervisor of `lakegate serve --workers 2` over a folder lake: its workers listen on the
node's one address and stop with it, on SIGTERM and when it is killed; a second node cannot take
the address. What the workers share (the cache) is tests/integration/test_workers.py's."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from harness.endpoints import ALICE
from harness.gateway import Gateway
from harness.ports import free_port
from harness.processes import gateway_environment, lakegate_command

ENV = {"LAKEGATE_ACCESS_LOG": "false", "LAKEGATE_WORKERS": "2"}


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    with Gateway(f"dir:{tmp_path / 'lake'}", tenants=(ALICE,), env=ENV, workdir=tmp_path / "gw") as gw:
        yield gw


def gone(pids: list[int], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_two_workers_answer_on_one_address(gateway: Gateway) -> None:
    workers = gateway.listening_workers()
    assert len(workers) == 2 and gateway.pid not in workers
    s3 = gateway.target("gw", "dir").client()
    s3.create_bucket(Bucket="workers")
    for i in range(10):  # fresh connections, spread over both by the kernel: each sees the bucket
        s3.put_object(Bucket="workers", Key=f"k{i}", Body=b"x" * i)
    assert len(s3.list_objects_v2(Bucket="workers")["Contents"]) == 10


def test_sigterm_stops_every_worker(gateway: Gateway) -> None:
    workers = gateway.listening_workers()
    gateway.stop()
    assert gone(workers)


def test_a_killed_supervisor_takes_its_workers_with_it(gateway: Gateway) -> None:
    workers = gateway.listening_workers()
    os.kill(gateway.pid, signal.SIGKILL)
    assert gone(workers), "workers outlived their supervisor (PR_SET_PDEATHSIG)"
    with socket.socket() as sock:  # and the address is free again (beside connections in TIME_WAIT)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", gateway.port))


def test_a_second_node_cannot_take_the_address(gateway: Gateway, tmp_path: Path) -> None:
    cmd = [*lakegate_command(), "serve", "--listen", f"127.0.0.1:{gateway.port}", "--lake", f"dir:{tmp_path / 'lake2'}",
           "--cache-dir", str(tmp_path / "cache2"), "--tenants", str(tmp_path / "gw" / "tenants.toml")]
    done = subprocess.run(cmd, env=gateway_environment(ENV), capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode != 0 and "address already in use" in (done.stdout + done.stderr).lower()


def test_a_second_node_cannot_take_the_cache_directory(gateway: Gateway, tmp_path: Path) -> None:
    assert gateway.cache_dir is not None
    cmd = [*lakegate_command(), "serve", "--listen", f"127.0.0.1:{free_port()}", "--lake", f"dir:{tmp_path / 'lake2'}",
           "--cache-dir", str(gateway.cache_dir), "--tenants", str(tmp_path / "gw" / "tenants.toml")]
    done = subprocess.run(cmd, env=gateway_environment(ENV), capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 1 and "managed by another process" in done.stderr
