"""Large L1 hits sent with sendfile (ASGI's zero-copy extension, gateway/httpserver.py) by a real
`lakegate serve` over a folder lake: whole and ranged GETs read back exactly, a client that goes
away mid-body leaves no open file behind, and a block rotting on disk (which a region sends
unread: its file unchanged to the file system) is found by the scrub and fetched again. A file
written into since it was checked is read and checked first: tests/integration/test_cache.py."""

from __future__ import annotations

import hashlib
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from harness.endpoints import ALICE
from harness.gateway import Gateway

from cachetier.blocks.files import HEADER_SIZE, BlockFiles

MiB = 1 << 20
SIZE = 12 * MiB + 4321  # four blocks, the last one short


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    env = {"LAKEGATE_ACCESS_LOG": "false", "LAKEGATE_SCRUB_RATE": "64MiB"}
    with Gateway(f"dir:{tmp_path / 'lake'}", tenants=(ALICE,), env=env, workdir=tmp_path / "gw") as gw:
        yield gw


@pytest.fixture
def s3(gateway: Gateway) -> Iterator[Any]:
    client = gateway.target("gw", "dir").client()
    yield client
    client.close()


def open_files(pid: int) -> int:
    return len(psutil.Process(pid).open_files())


def warm(s3: Any, data: bytes) -> None:
    s3.create_bucket(Bucket="zero-copy")
    s3.put_object(Bucket="zero-copy", Key="big", Body=data)
    assert s3.get_object(Bucket="zero-copy", Key="big")["Body"].read() == data  # cold: the blocks in L1


def test_hits_sent_from_their_files_read_back_exactly(gateway: Gateway, s3: Any) -> None:
    data = os.urandom(SIZE)
    warm(s3, data)
    for _ in range(3):
        assert hashlib.sha256(s3.get_object(Bucket="zero-copy", Key="big")["Body"].read()).digest() == hashlib.sha256(data).digest()
    for first, last in [(0, 0), (5, 4 * MiB + 7), (4 * MiB, 8 * MiB - 1), (12 * MiB, SIZE - 1), (1000, SIZE - 1)]:
        got = s3.get_object(Bucket="zero-copy", Key="big", Range=f"bytes={first}-{last}")["Body"].read()
        assert got == data[first : last + 1], (first, last)
    assert gateway.admin_stats()["cache"]["per_tenant"]["alice"]["hits"] >= 3 * 4


def test_a_client_gone_mid_body_leaves_no_open_file(gateway: Gateway, s3: Any) -> None:
    data = os.urandom(SIZE)
    warm(s3, data)
    before = open_files(gateway.pid)
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "zero-copy", "Key": "big"})
    path = url[len(gateway.url):]
    for _ in range(5):  # reads the head and a little, then resets the connection
        with socket.create_connection(("127.0.0.1", gateway.port)) as sock:
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{gateway.port}\r\n\r\n".encode())
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    deadline = time.monotonic() + 10
    while open_files(gateway.pid) > before:
        assert time.monotonic() < deadline, psutil.Process(gateway.pid).open_files()
        time.sleep(0.1)
    assert s3.get_object(Bucket="zero-copy", Key="big")["Body"].read() == data  # and it serves on


def test_a_block_corrupted_on_disk_is_found_by_the_scrub_and_fetched_again(gateway: Gateway, s3: Any) -> None:
    data = os.urandom(SIZE)
    warm(s3, data)
    assert gateway.cache_dir is not None
    files = BlockFiles(gateway.cache_dir / "l1")
    big = [Path(files.path(key)) for key, size, _ in files.scan() if size == HEADER_SIZE + 4 * MiB]
    assert len(big) == 3
    st = big[1].stat()
    raw = bytearray(big[1].read_bytes())
    raw[HEADER_SIZE + 12345] ^= 0x01  # bit rot: same length, inode and times, so sent unread
    big[1].write_bytes(raw)
    os.utime(big[1], ns=(st.st_atime_ns, st.st_mtime_ns))
    deadline = time.monotonic() + 20  # 12 MiB at 64 MiB/s: a pass well within a second or two
    while big[1].exists():
        assert time.monotonic() < deadline, "the scrub never found the corrupt block"
        time.sleep(0.1)
    assert s3.get_object(Bucket="zero-copy", Key="big")["Body"].read() == data
