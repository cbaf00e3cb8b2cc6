"""Test doubles and helpers shared by the test tiers, in one place so that no test module imports
another's.

The twins of lakegate's own interfaces live with the interface (``cachetier.lake.memory``,
``cachetier.blocks.store.MemoryBlockStore``, ``cachetier.cluster.memory.MemoryPeers``) and are
checked to conform there; what is here only exists for tests, in these sections:

    lakes and clocks                 wrappers that count and hold lake calls, a settable clock
    read path                        the block size, bucket and tenant of the read-path tests, and
                                     how they put, read and wait (tests/unit/test_readpath*.py,
                                     test_counters.py, test_peerapi.py)
    cluster of in-process nodes      ReadPath nodes with a real Cluster and Membership over one
                                     lake, their peer client the loopback twin told to fail
    block stores                     test blocks (their bytes derived from their ids, in any
                                     process), capacities that hold n of them, the disk store's rows
    lakes on disk                    a DirLake's ETags and what it leaves in its temporary folder
    transports                       an asyncio transport recording writes (tests/unit/test_http*.py)
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sqlite3
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from cachetier.blocks.ids import BlockId
from cachetier.blocks.store import MemoryBlockStore
from cachetier.cluster import wire
from cachetier.cluster.client import Answered, PeerUnavailable
from cachetier.cluster.config import MembershipConfig
from cachetier.cluster.membership import Membership
from cachetier.cluster.memory import MemoryPeers
from cachetier.cluster.node import Cluster
from cachetier.cluster.owner import Owner
from cachetier.cluster.ring import Member
from cachetier.context import RequestContext, current
from cachetier.lake import Lake, ObjectAttributes, ObjectInfo, ObjectStream, WriteResult
from cachetier.lake.conditions import Conditions
from cachetier.lake.memory import MemoryLake
from cachetier.lake.ranges import ByteRange
from cachetier.lake.s3.headers import range_header
from cachetier.read.config import ReadConfig
from cachetier.read.path import ReadPath
from cachetier.telemetry.counters import CacheStats


# ---- lakes and clocks ----------------------------------------------------------------------------


# the piece size of a test lake's bodies: small, so that readers of KiB-sized blocks interleave
SMALL_CHUNK = 300


def memory_lake(*buckets: str) -> MemoryLake:
    """The in-memory twin with ``buckets``, serving bodies in small pieces."""
    return MemoryLake(buckets=buckets, chunk_size=SMALL_CHUNK)


class CountingLake:
    """Wraps a lake: records HEADs and GETs (the Range header sent, None for a whole object),
    and holds GETs or HEADs while ``hold_gets`` / ``hold_heads`` is set and not released. A held
    HEAD has its answer already: the lake answered, the answer is on its way."""

    def __init__(self, lake: Lake) -> None:
        self.lake = lake
        self.heads: list[str] = []
        self.answered_heads = 0
        self.gets: list[tuple[str, str | None]] = []
        self.hold_gets: asyncio.Event | None = None
        self.hold_heads: asyncio.Event | None = None

    async def head_object(self, bucket: str, key: str) -> ObjectInfo:
        self.heads.append(key)
        info = await self.lake.head_object(bucket, key)
        self.answered_heads += 1
        if self.hold_heads is not None:
            await self.hold_heads.wait()
        return info

    async def get_object(
        self, bucket: str, key: str, range: ByteRange | None = None, conditions: Conditions = Conditions()
    ) -> ObjectStream:
        self.gets.append((key, range_header(range) if range is not None else None))
        if self.hold_gets is not None:
            await self.hold_gets.wait()
        return await self.lake.get_object(bucket, key, range, conditions)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.lake, name)


class Clock:
    """A clock a test sets: ``now`` seconds, 1000.0 at first."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# ---- read path ---------------------------------------------------------------------------------


T = TypeVar("T")
BS = 1024  # block size
B = "bkt"
TENANT = "t"


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` as tenant TENANT's request."""

    async def main() -> T:
        current.set(RequestContext(TENANT))
        return await coro

    return asyncio.run(main())


async def _body(data: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(data), 700):
        yield data[start : start + 700]


async def put(lake: Any, key: str, data: bytes) -> str:
    """Store ``data`` in the lake itself (behind the cache's back); its ETag."""
    result: WriteResult = await lake.put_object(B, key, _body(data), len(data), ObjectAttributes())
    return result.etag


async def read(lake: Lake | ReadPath, key: str, rng: ByteRange | None = None) -> tuple[ObjectStream, bytes]:
    """A whole GET through ``lake`` (a ReadPath, a CachedLake or any lake): the stream and its bytes."""
    if isinstance(lake, ReadPath):
        stream = await lake.open(B, key, rng, Conditions())
    else:
        stream = await lake.get_object(B, key, rng)
    try:
        body = b"".join([piece async for piece in stream.body])
    finally:
        await stream.aclose()
    assert len(body) == stream.length
    return stream, body


async def drain(reads: ReadPath) -> None:
    """Wait for the read path's background work (fetches, read-ahead, stores) to finish."""
    while reads.background:
        await asyncio.gather(*list(reads._tasks), return_exceptions=True)


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.001)


def block_range(index: int, size: int) -> str:
    return f"bytes={index * BS}-{min((index + 1) * BS, size) - 1}"


def counts(reads: ReadPath) -> dict[str, int]:
    return reads.stats.snapshot().get(TENANT, {})


# ---- cluster of in-process nodes ----------------------------------------------------------------

PARTITIONS = 64


@dataclass
class Fault:
    """How a node fails the blocks it serves: ``after`` bytes (0: before the first byte)."""

    after: int = 0


class LoopbackPeers(MemoryPeers):
    """The checked twin of PeerClient (calling the owner node's ``Owner`` in-process), recording
    the blocks asked for, and failing the nodes in ``faults`` as told."""

    def __init__(self, me: Member, owners: Mapping[str, Owner]) -> None:
        super().__init__(me, owners)
        self.faults: dict[str, Fault] = {}
        self.fetches: list[tuple[str, str, int]] = []  # (to node, key, index)

    async def fetch_block(
        self, member: Member, info: ObjectInfo, index: int, block_size: int, tenant: str,
        answered: Answered | None = None,
    ) -> AsyncIterator[bytes]:
        self.fetches.append((member.id, info.key, index))
        fault = self.faults.get(member.id)
        if fault is not None and fault.after == 0:
            raise PeerUnavailable(f"{member.id} is down")
        pieces = super().fetch_block(member, info, index, block_size, tenant, answered)
        sent = 0
        try:
            async for piece in pieces:
                if fault is not None and sent + len(piece) >= fault.after:
                    yield piece[: fault.after - sent]
                    raise PeerUnavailable(f"{member.id} went away after {fault.after} bytes")
                sent += len(piece)
                yield piece
        finally:
            await pieces.aclose()  # type: ignore[attr-defined]


class Node:
    """One cache node: L1, L2, membership, cluster and read path, over the shared ``lake``."""

    def __init__(self, name: str, lake: object, owners: dict[str, Owner], clock: Clock, *,
                 replicas: int, readahead: int) -> None:
        self.member = Member(name, f"http://{name}:9000")
        self.membership = Membership(self.member, MembershipConfig(PARTITIONS, replicas, failure_timeout=30.0),
                                     clock=clock)
        self.peers = LoopbackPeers(self.member, owners)
        self.cluster = Cluster(self.membership, self.peers, seeds=[])
        self.l1, self.l2 = MemoryBlockStore(1 << 30), MemoryBlockStore(1 << 30)
        config = ReadConfig(block_size=BS, meta_ttl=60.0, readahead=readahead)
        self.reads = ReadPath(lake, self.l1, CacheStats(), config,  # type: ignore[arg-type]
                              clock=clock, l2=self.l2, cluster=self.cluster)
        owners[self.member.url] = Owner(self.cluster, self.reads, dict)

    def owns(self, key: str, index: int = 0) -> bool:
        return self.cluster.owners(B, key, index)[0].id == self.member.id

    def counts(self) -> dict[str, int]:
        return {name: self.reads.stats.total(name) for name in ("hits", "l2_hits", "peer_fetches", "peer_hits",
                                                                   "lake_gets", "misses", "coalesced")}


def nodes(lake: object, count: int = 3, *, replicas: int = 1, readahead: int = 0) -> list[Node]:
    """``count`` nodes that have all heard from each other (so they plan one ring)."""
    clock = Clock()
    registry: dict[str, Node] = {}
    owners: dict[str, Owner] = {}
    for i in range(count):
        registry[f"n{i}"] = Node(f"n{i}", lake, owners, clock, replicas=replicas, readahead=readahead)
    for node in registry.values():
        for other in registry.values():
            node.membership.heard_from(other.member)
    assert len({node.membership.ring.version for node in registry.values()}) == 1
    return list(registry.values())


def key_owned_by(owner: Node, index: int = 0, *, second: Node | None = None, besides: str = "") -> str:
    """A key whose block ``index`` ``owner`` owns (and, given ``second``, that node next)."""
    for n in range(10_000):
        key = f"obj-{n}"
        owners = [m.id for m in owner.cluster.owners(B, key, index)]
        if owners[0] == owner.member.id and (second is None or owners[1] == second.member.id) and key != besides:
            return key
    raise AssertionError("no such key")


async def settle(cluster: Sequence[Node]) -> None:
    """Wait for every node's background work (fetches, stores, drops), which may wait on another's."""
    while tasks := [task for node in cluster for task in node.reads._tasks]:  # no public "idle" signal
        await asyncio.gather(*tasks, return_exceptions=True)


# ---- block stores --------------------------------------------------------------------------------

MiB = 1024 * 1024
# capacities of (n + 1) blocks - 1 byte hold exactly n 1 MiB blocks in either store, the disk
# store's 16-byte block headers fitting in the slack


def fits(n: int) -> int:
    return (n + 1) * MiB - 1


def bid(index: int, key: str = "k") -> BlockId:
    return BlockId.of("bucket", key, '"etag"', index)


def content(block_id: BlockId, size: int | None = None) -> bytes:
    """A block's bytes, derived from its id (any process derives the same). Self-contained:
    the crash test runs its source in a child process."""
    import random

    rng = random.Random(block_id.hex)
    if size is None:
        size = 1 + rng.randrange(64 * 1024)
    return rng.randbytes(size)


def block(index: int) -> tuple[BlockId, bytes]:
    block_id = bid(index)
    return block_id, content(block_id, MiB)


@contextmanager
def as_tenant(tenant: str) -> Iterator[None]:
    """Run the block stores' calls inside as ``tenant``'s request (``cachetier.context``)."""
    token = current.set(RequestContext(tenant))
    try:
        yield
    finally:
        current.reset(token)


# ---- lakes on disk -------------------------------------------------------------------------------


def md5_etag(data: bytes) -> str:
    return f'"{hashlib.md5(data).hexdigest()}"'


def leftovers(root: Path) -> list[str]:
    return os.listdir(root / ".tmp")


# ---- transports


class FakeTransport:
    """An asyncio transport that records what would go on the wire, one entry per system call
    (``calls``; ``written``: all of it), and whether it was closed, aborted, ended or paused."""

    def __init__(self) -> None:
        self.calls: list[bytes] = []
        self.closed = self.aborted = self.eof = self.reading_paused = False

    @property
    def written(self) -> bytes:
        return b"".join(self.calls)

    def write(self, data: bytes) -> None:
        self.calls.append(bytes(data))

    def writelines(self, list_of_data: list[bytes]) -> None:
        self.calls.append(b"".join(list_of_data))

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def get_write_buffer_size(self) -> int:
        return 0

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def pause_reading(self) -> None:
        self.reading_paused = True

    def resume_reading(self) -> None:
        self.reading_paused = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 1234), "sockname": ("127.0.0.1", 9000)}.get(name, default)


# ---- fairness ------------------------------------------------------------------------------------


class RecordingFairness:
    """A node's fairness state as a ``FairnessPeer``: it reports what a test sets, and keeps what
    it is sent."""

    def __init__(self, node: str, cluster: Cluster) -> None:
        self.node, self.cluster = node, cluster
        self.wanted: dict[str, dict[str, float]] = {}
        self.capacity = {"requests": 100.0, "client_bytes": 1000.0, "lake_bytes": 500.0}
        self.weights: dict[str, float] = {"a": 1.0, "b": 1.0}
        self.partitions: dict[int, dict[str, float]] = {}
        self.updates: list[wire.WeightsUpdate] = []
        self.tables: list[wire.PartitionsUpdate] = []
        self.sequence = 0

    async def report(self, request: wire.ReportsRequest) -> wire.DemandReport:
        self.sequence += 1
        return wire.DemandReport(self.node, self.sequence, request.window_s, {}, self.wanted, self.capacity,
                                 self.weights, self.partitions, self.cluster.membership.ring.version)

    async def apply_weights(self, update: wire.WeightsUpdate, sender: str) -> None:
        self.updates.append(update)
        self.weights = dict(update.weights)

    async def apply_partitions(self, update: wire.PartitionsUpdate, sender: str) -> None:
        self.tables.append(update)
