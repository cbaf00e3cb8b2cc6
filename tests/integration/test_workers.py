"""A node served by several worker processes (``lakegate serve --workers N``) over the real RGW:
one L1 for all of them, its capacity held under fills from all of them, and a worker killed
mid-fill leaving nothing that reads back wrong. Which worker serves a connection is read from
the kernel (psutil: the worker holding the connection's server end); lake requests from RGW's
log, as in test_cache.py."""

from __future__ import annotations

import hashlib
import http.client
import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
import pytest
from cachegw import BLOCK, MiB, Gateway, StartGateway, coexisting_bytes, lake_bucket, rgw, rgw_log, start_gateway  # noqa: F401
from harness.clients import S3ClientBase
from harness.rgwlog import RgwLog

from cachetier.blocks.files import HEADER_SIZE, BlockFiles, CorruptBlock


class Connection:
    """One keep-alive connection to the gateway, SigV4-signed GETs over it."""

    def __init__(self, gw: Gateway) -> None:
        endpoint = gw.process.target("gw", "rgw").endpoint
        self.signer = S3ClientBase(endpoint)
        self.conn = http.client.HTTPConnection(self.signer.host, self.signer.port, timeout=60)
        self.gateway_pid = gw.process.pid

    def get(self, bucket: str, key: str) -> tuple[int, bytes]:
        url = self.signer.url(bucket, key)
        self.conn.request("GET", url[len(self.signer.origin):], headers=self.signer.sign("GET", url))
        resp = self.conn.getresponse()
        return resp.status, resp.read()

    def health(self) -> None:
        self.conn.request("GET", "/_lakegate/health")
        assert self.conn.getresponse().read()

    def worker(self) -> int:
        """The pid of the worker serving this connection."""
        port = self.conn.sock.getsockname()[1]
        for child in psutil.Process(self.gateway_pid).children():
            try:
                if any(c.raddr and c.raddr.port == port for c in child.net_connections(kind="tcp")):
                    return child.pid
            except psutil.NoSuchProcess:
                continue
        raise AssertionError(f"no worker of {self.gateway_pid} holds the connection from port {port}")

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def connections() -> Iterator[list[Connection]]:
    opened: list[Connection] = []
    yield opened
    for conn in opened:
        conn.close()


def connect_to(gw: Gateway, opened: list[Connection], *, not_worker: int | None = None) -> Connection:
    """A new connection, served by any worker but ``not_worker`` (the kernel picks: retried)."""
    for _ in range(100):
        conn = Connection(gw)
        opened.append(conn)
        conn.health()
        if not_worker is None or conn.worker() != not_worker:
            return conn
    raise AssertionError(f"100 connections, all served by worker {not_worker}")


def start_workers(start_gateway: StartGateway, count: int = 2, **settings: str) -> Gateway:
    """A gateway of ``count`` workers, every one listening (harness.gateway waits for them)."""
    gw = start_gateway(workers=str(count), **settings)
    assert len(gw.process.listening_workers()) == count
    return gw


def block_files(l1: Path) -> list[tuple[str, int, float]]:
    return list(BlockFiles(l1).scan())


def test_a_block_one_worker_fetched_is_a_hit_for_another(
    start_gateway: StartGateway, rgw: Any, rgw_log: RgwLog, lake_bucket: str, connections: list[Connection]
) -> None:
    data = os.urandom(2 * BLOCK + MiB)  # three blocks
    rgw.put_object(Bucket=lake_bucket, Key="obj", Body=data)
    gw = start_workers(start_gateway)
    assert len(gw.process.listening_workers()) == 2
    first = connect_to(gw, connections)
    assert first.get(lake_bucket, "obj") == (200, data)
    gw.wait_stored(len(data))
    other = connect_to(gw, connections, not_worker=first.worker())

    mark = rgw_log.mark()
    assert other.get(lake_bucket, "obj") == (200, data)
    assert rgw_log.count(mark, "GET", lake_bucket, "obj", expected=0) == 0  # its metadata: a HEAD
    assert len(block_files(gw.l1_dir)) == 4  # three blocks and the key's marker, stored once
    # the node's counters add both workers' up, whichever answers (the other's a second late)
    deadline = time.monotonic() + 10
    def settled(counts: dict[str, int]) -> bool:  # each block fetched once, by the first; the second read all hits
        return counts.get("lake_gets") == 3 and counts.get("bytes_from_l1", 0) >= len(data)

    while not settled(counts := gw.stats()["cache"]["per_tenant"]["alice"]):
        assert time.monotonic() < deadline, counts
        time.sleep(0.2)


def test_a_write_through_one_worker_is_seen_by_another_at_once(
    start_gateway: StartGateway, rgw: Any, lake_bucket: str, connections: list[Connection]
) -> None:
    rgw.put_object(Bucket=lake_bucket, Key="obj", Body=b"old")
    gw = start_workers(start_gateway, meta_ttl="3600")
    one = connect_to(gw, connections)
    two = connect_to(gw, connections, not_worker=one.worker())
    assert one.get(lake_bucket, "obj") == two.get(lake_bucket, "obj") == (200, b"old")  # both cache it
    gw.client().put_object(Bucket=lake_bucket, Key="obj", Body=b"new")  # through either worker
    assert one.get(lake_bucket, "obj") == two.get(lake_bucket, "obj") == (200, b"new")


def test_capacity_holds_under_concurrent_fills_from_every_worker(
    start_gateway: StartGateway, rgw: Any, lake_bucket: str, connections: list[Connection]
) -> None:
    objects = {f"o{i}": os.urandom(BLOCK) for i in range(12)}
    for key, body in objects.items():
        rgw.put_object(Bucket=lake_bucket, Key=key, Body=body)
    capacity = 5 * (BLOCK + HEADER_SIZE) + 64 * 1024  # five blocks (and the keys' markers)
    gw = start_workers(start_gateway, cache_capacity=str(capacity))
    readers = [connect_to(gw, connections)]
    readers.append(connect_to(gw, connections, not_worker=readers[0].worker()))  # both workers fill
    readers += [connect_to(gw, connections) for _ in range(4)]
    on_disk: list[int] = []
    done = threading.Event()

    def sample() -> None:
        folders = [gw.l1_dir / "blocks", gw.l1_dir / "tmp"]
        while not done.is_set():
            on_disk.append(coexisting_bytes(folders))
            time.sleep(0.005)

    def read(n: int) -> bool:
        keys = list(objects)[n::len(readers)] + list(objects)
        return all(readers[n].get(lake_bucket, key) == (200, objects[key]) for key in keys)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        with ThreadPoolExecutor(len(readers)) as pool:
            assert all(pool.map(read, range(len(readers))))
    finally:
        done.set()
        sampler.join()
    assert max(on_disk) <= capacity, (max(on_disk), capacity)
    stats = gw.stats()["cache"]["l1"]
    assert stats["used_bytes"] <= capacity and stats["capacity_bytes"] == capacity


def test_a_worker_killed_mid_fill_leaves_nothing_wrong(
    start_gateway: StartGateway, rgw: Any, lake_bucket: str, connections: list[Connection]
) -> None:
    data = os.urandom(16 * BLOCK)
    digest = hashlib.sha256(data).hexdigest()
    rgw.put_object(Bucket=lake_bucket, Key="big", Body=data)
    gw = start_workers(start_gateway)
    victim_conn = connect_to(gw, connections)
    victim = victim_conn.worker()
    survivor = connect_to(gw, connections, not_worker=victim)

    def read_on_victim() -> None:
        try:
            victim_conn.get(lake_bucket, "big")
        except (OSError, http.client.HTTPException):
            pass  # its worker is killed under it

    reader = threading.Thread(target=read_on_victim)
    reader.start()
    deadline = time.monotonic() + 30
    l1 = gw.l1_dir
    while not list((l1 / "tmp").iterdir()) and not block_files(l1):  # mid-fill: blocks arriving
        assert time.monotonic() < deadline, "the fill never started"
        time.sleep(0.002)
    os.kill(victim, signal.SIGKILL)
    reader.join(timeout=60)

    status, body = survivor.get(lake_bucket, "big")  # the node keeps serving
    assert status == 200 and hashlib.sha256(body).hexdigest() == digest
    # the dead worker's unfinished files are removed, and every block file reads back whole
    deadline = time.monotonic() + 10
    while any(f".{victim}." in p.name for p in (l1 / "tmp").iterdir()):
        assert time.monotonic() < deadline, "a killed worker's tmp files stayed"
        time.sleep(0.05)
    files = BlockFiles(l1)
    for key, _, _ in block_files(l1):
        try:
            files.read(key)
        except CorruptBlock as exc:
            raise AssertionError(f"block {key} reads back wrong: {exc}") from None
    # a replacement worker was started, and a fresh connection reads the object right
    deadline = time.monotonic() + 60
    while len(live := gw.process.listening_workers()) < 2 or victim in live:
        assert time.monotonic() < deadline, "no replacement worker"
        time.sleep(0.2)
    again = connect_to(gw, connections)
    status, body = again.get(lake_bucket, "big")
    assert status == 200 and hashlib.sha256(body).hexdigest() == digest
    used = gw.stats()["cache"]["l1"]["used_bytes"]
    assert used == sum(size - HEADER_SIZE for _, size, _ in block_files(l1))  # accounting matches the disk
