"""Test doubles shared by the test tiers, in one place so that no test module imports another's.

The twins of lakegate's own interfaces live with the interface (``cachetier.lake.memory``,
``cachetier.blocks.store.MemoryBlockStore``) and are checked to conform there; what is here
only exists for tests: wrappers that count and hold calls, and a settable clock.
"""

from __future__ import annotations

import asyncio
from typing import Any

from cachetier.lake import Lake, ObjectInfo, ObjectStream
from cachetier.lake.conditions import Conditions
from cachetier.lake.memory import MemoryLake
from cachetier.lake.ranges import ByteRange
from cachetier.lake.s3.headers import range_header

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
