"""The counters: CacheStats under concurrency (the event loop and worker threads add to the same
counters while snapshots are taken, and no addition is lost), and the per-tier counters of the
block stores, which must count what /metrics says they count: each tier's hits + misses is the
block reads that asked it (L1: every block read; L2: the reads that missed L1 and asked the
block's owner), driven through the read path alone and through the cluster twin."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest
from doubles import BS, B, CountingLake, counts, drain, key_owned_by, memory_lake, nodes, put, read, run, settle, until

from cachetier.blocks.ids import BlockId
from cachetier.blocks.store import DiskBlockStore, MemoryBlockStore
from cachetier.lake.ranges import ByteRange
from cachetier.read.config import ReadConfig
from cachetier.read.path import ReadPath
from cachetier.telemetry.counters import COUNTERS, CacheStats

THREADS = 8
ADDS = 20_000


def test_additions_from_many_threads_are_all_counted() -> None:
    stats = CacheStats()
    start = threading.Barrier(THREADS + 1)
    names = list(COUNTERS)[:4]

    def hammer(worker: int) -> None:
        start.wait()
        for i in range(ADDS):
            # shared counters, and new tenants appearing while others snapshot
            stats.add("shared", names[i % len(names)])
            stats.add(f"tenant-{worker}-{i % 50}", "hits", 2)

    def snapshots() -> None:
        start.wait()
        try:
            while any(thread.is_alive() for thread in workers):
                stats.snapshot()
                stats.total("hits")
        except RuntimeError as exc:  # dictionary changed size during iteration
            failures.append(exc)

    failures: list[Exception] = []

    workers = [threading.Thread(target=hammer, args=(n,)) for n in range(THREADS)]
    reader = threading.Thread(target=snapshots)
    for thread in [*workers, reader]:
        thread.start()
    for thread in [*workers, reader]:
        thread.join()

    assert failures == []
    snapshot = stats.snapshot()
    assert snapshot["shared"] == {name: THREADS * ADDS // len(names) for name in names}
    assert stats.total("hits") == THREADS * ADDS // len(names) + 2 * THREADS * ADDS
    assert len(snapshot) == 1 + THREADS * 50


def test_a_snapshot_is_a_copy() -> None:
    stats = CacheStats()
    stats.add("t", "hits")
    snapshot = stats.snapshot()
    stats.add("t", "hits")
    assert snapshot == {"t": {"hits": 1}} and stats.snapshot() == {"t": {"hits": 2}}


# ---- per-tier counters: each tier's hits + misses is the block reads that asked it -----------


def _block_reads(reads: ReadPath) -> int:
    """Block reads through the cache, as the tenant counters see them: each is one of these."""
    return sum(reads.stats.total(name) for name in ("hits", "l2_hits", "misses", "coalesced"))


def _concurrent_cold_reads(lake: CountingLake, readers: list[tuple[ReadPath, str]]) -> Coroutine[Any, Any, None]:
    """Readers of one-block objects started while the lake holds its GETs: they coalesce."""

    async def main() -> None:
        lake.hold_gets = asyncio.Event()
        tasks = [asyncio.ensure_future(read(reads, key)) for reads, key in readers]
        await asyncio.sleep(0.01)
        lake.hold_gets.set()
        await asyncio.gather(*tasks)
        lake.hold_gets = None

    return main()


def test_l1_hits_and_misses_add_up_to_every_block_read() -> None:
    """100 block reads, 48 of them filled from the lake: l1_misses says 52 (the fills and the
    reads that joined them), and L1's hit ratio is the one the clients saw."""
    lake = CountingLake(memory_lake(B))
    store = MemoryBlockStore(1 << 30)
    reads = ReadPath(lake, store, CacheStats(), ReadConfig(block_size=BS, meta_ttl=60.0, readahead=0),
                     clock=lambda: 1000.0)

    async def main() -> None:
        await lake.create_bucket(B)
        await put(lake, "a", os.urandom(44 * BS))
        for n in range(4):
            await put(lake, f"c{n}", os.urandom(BS))
        await read(reads, "a")  # 44 fills
        await drain(reads)  # stored: the next reads hit
        await read(reads, "a")  # 44 L1 hits
        await read(reads, "a", ByteRange(0, 4 * BS - 1))  # 4 L1 hits
        await _concurrent_cold_reads(lake, [(reads, f"c{n}") for n in range(4) for _ in range(2)])
        await drain(reads)

    run(main())
    assert _block_reads(reads) == 100 and len(lake.gets) == 48
    assert (store.hits, store.misses) == (48, 52)
    assert counts(reads)["hits"] == 48 and counts(reads)["misses"] + counts(reads)["coalesced"] == 52
    assert counts(reads)["lake_gets"] == 48 and counts(reads)["coalesced"] == 4


def test_each_tier_counts_the_reads_that_asked_it_across_a_cluster() -> None:
    """L1 hits, L2 hits (local and over the peer API), lake fills, and coalesced fetches at both
    the reader and the owner, each counted by the tier that was asked and nowhere else."""
    lake = CountingLake(memory_lake(B))
    owner, reader, third = nodes(lake, 3)
    x, y = key_owned_by(owner), key_owned_by(owner, besides=key_owned_by(owner))

    async def main() -> None:
        await lake.create_bucket(B)
        for key in (x, y):
            await put(lake, key, os.urandom(BS))
        await read(reader.reads, x)  # reader: L1 miss; owner: L2 miss, lake fill
        await settle([owner, reader, third])
        await read(reader.reads, x)  # reader: L1 hit
        await read(third.reads, x)  # third: L1 miss; owner: L2 hit over the peer API
        await read(owner.reads, x)  # owner: L1 miss, its own L2 hit
        await settle([owner, reader, third])
        # y: two readers on `reader` (one joins the other's fetch there, asking no L2), one on
        # `third` (the owner's L2 misses, and the request joins the fetch in flight there)
        lake.hold_gets = asyncio.Event()
        first = [asyncio.ensure_future(read(reader.reads, y)) for _ in range(2)]
        await until(lambda: len(lake.gets) == 2)
        late = asyncio.ensure_future(read(third.reads, y))
        await until(lambda: (owner.member.id, y, 0) in third.peers.fetches)
        await asyncio.sleep(0.01)
        lake.hold_gets.set()
        await asyncio.gather(*first, late)
        await settle([owner, reader, third])

    run(main())
    tiers = {node.member.id: (node.l1.hits, node.l1.misses, node.l2.hits, node.l2.misses)
             for node in (owner, reader, third)}
    assert tiers == {owner.member.id: (0, 1, 2, 3), reader.member.id: (1, 3, 0, 0), third.member.id: (0, 2, 0, 0)}
    # L1: every block read on the node (1 on the owner, 4 on `reader`, 2 on `third`)
    assert [node.l1.hits + node.l1.misses for node in (owner, reader, third)] == [1, 4, 2]
    for node in (reader, third):  # (the owner's tenant counters count its peers' requests too)
        assert node.l1.hits + node.l1.misses == _block_reads(node.reads)
    # L2: every read that missed L1 and asked an owner (all but the one coalesced on `reader`)
    assert owner.l2.hits + owner.l2.misses == 7 - 1 - 1
    assert len(lake.gets) == sum(node.counts()["lake_gets"] for node in (owner, reader, third)) == 2
    assert reader.counts()["coalesced"] == 1 and owner.counts()["coalesced"] == 1


@pytest.mark.parametrize("kind", ["memory", "disk"])
def test_a_get_that_is_not_counted_counts_neither_a_hit_nor_a_miss(kind: str, tmp_path: Path) -> None:
    store: MemoryBlockStore | DiskBlockStore = (
        MemoryBlockStore(1 << 20) if kind == "memory" else DiskBlockStore(tmp_path / "store", 1 << 20)
    )
    try:
        held, absent = (BlockId.of(B, "k", '"e"', i, BS) for i in range(2))
        store.put(held, b"x" * 10)
        assert store.get(held, counted=False) == b"x" * 10 and store.get(absent, counted=False) is None
        assert (store.hits, store.misses) == (0, 0)
        assert store.get(held) == b"x" * 10 and store.get(absent) is None
        assert (store.hits, store.misses) == (1, 1)
    finally:
        store.close()
