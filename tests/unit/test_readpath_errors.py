"""A failing cache disk under the read path: a block store that raises (EIO on a read, a full
disk on a fill, a delete that fails, a block file that breaks in the middle of its read, a
directory that vanished) is a miss served from the next source (the owner's L2 or the lake),
never an error for the client. Each failure is counted (``l1_errors`` / ``l2_errors``) and
logged once with the block's id.

The stores are ``FailingStore`` (the in-memory twin, raising while told to) and the real
``DiskBlockStore``; the read path's helpers, the lakes and the cluster twin are tests/doubles.py's.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import shutil
from pathlib import Path

import pytest
from doubles import (
    B,
    BS,
    TENANT,
    CountingLake,
    Node,
    _body,
    block_range,
    counts,
    key_owned_by,
    memory_lake,
    nodes,
    put,
    read,
    run,
    settle,
)

from cachetier.blocks.ids import BlockId
from cachetier.blocks.store import BlockStore, DiskBlockStore, MemoryBlockStore
from cachetier.cachedlake import CacheOnWrite, CachedLake
from cachetier.lake import ObjectAttributes
from cachetier.read.config import ReadConfig
from cachetier.read.path import ReadPath
from cachetier.telemetry.counters import CacheStats

BIG = 2 * 1024 * 1024  # a block size past the read path's inline reads: its gets run in a thread


class FailingStore(MemoryBlockStore):
    """The in-memory store failing as a broken disk would: while ``failing`` names an
    operation ("get", "put", "delete"), that operation raises ``error`` and changes nothing."""

    def __init__(self, error: OSError | None = None) -> None:
        super().__init__(1 << 30)
        self.failing: set[str] = set()
        self.error = error or OSError(errno.EIO, "Input/output error")

    def get(self, block_id: BlockId, *, counted: bool = True) -> bytes | None:
        if "get" in self.failing:
            self._count("misses", counted)  # as DiskBlockStore: a get that raised is a miss
            raise self.error
        return super().get(block_id, counted=counted)

    def put(self, block_id: BlockId, data: bytes) -> None:
        if "put" in self.failing:
            raise self.error
        super().put(block_id, data)

    def delete(self, block_id: BlockId) -> bool:
        if "delete" in self.failing:
            raise self.error
        return super().delete(block_id)


def test_the_failing_store_conforms() -> None:
    assert isinstance(FailingStore(), BlockStore)


def _reads(lake: object, store: BlockStore, block_size: int = BS) -> ReadPath:
    config = ReadConfig(block_size=block_size, meta_ttl=60.0, readahead=0)
    return ReadPath(lake, store, CacheStats(), config, clock=lambda: 1000.0)  # type: ignore[arg-type]


async def _settled(reads: ReadPath) -> None:
    """Wait for the background work, which must not have failed either."""
    while reads.background:
        for result in await asyncio.gather(*list(reads._tasks), return_exceptions=True):
            assert result is None, result


def _blocks_in(reads: ReadPath, etag: str, key: str, blocks: int, block_size: int = BS) -> list[BlockId]:
    return [BlockId.of(B, key, etag, i, block_size) for i in range(blocks) if
            BlockId.of(B, key, etag, i, block_size) in reads.store]


@pytest.fixture
def lake() -> CountingLake:
    return CountingLake(memory_lake(B))


# ---- L1 on this node ---------------------------------------------------------------------------


@pytest.mark.parametrize("block_size", [BS, BIG], ids=["inline", "threaded"])
def test_an_l1_read_error_is_a_miss_served_from_the_lake(
    lake: CountingLake, block_size: int, caplog: pytest.LogCaptureFixture
) -> None:
    store = FailingStore()
    data = os.urandom(2 * block_size)

    async def main() -> None:
        await put(lake, "k", data)
        reads = _reads(lake, store, block_size)
        assert (await read(reads, "k"))[1] == data
        await _settled(reads)
        gets = len(lake.gets)
        store.failing = {"get"}
        with caplog.at_level(logging.WARNING, "lakegate.readpath"):
            assert (await read(reads, "k"))[1] == data
            await _settled(reads)
        assert len(lake.gets) == gets + 2  # both blocks again, from the lake
        assert counts(reads)["l1_errors"] == 4  # each block's read, and its fetch's look again
        etag = (await reads.head(B, "k")).etag
        logged = [r.getMessage() for r in caplog.records if "L1 read" in r.getMessage()]
        assert len(logged) == 2 and BlockId.of(B, "k", etag, 0, block_size).hex in logged[0]

    run(main())


def test_a_failing_fill_does_not_fail_the_read(lake: CountingLake) -> None:
    store = FailingStore(OSError(errno.ENOSPC, "No space left on device"))
    store.failing = {"put"}
    data = os.urandom(3 * BS + 10)

    async def main() -> None:
        await put(lake, "k", data)
        reads = _reads(lake, store)
        for _ in range(2):  # nothing was kept: the second read goes to the lake again
            assert (await read(reads, "k"))[1] == data
            await _settled(reads)
        assert len(lake.gets) == 8 and len(store) == 0
        assert counts(reads)["l1_errors"] == 8

    run(main())


def test_a_failing_write_through_fill_does_not_fail_the_put(lake: CountingLake) -> None:
    store = FailingStore(OSError(errno.ENOSPC, "No space left on device"))
    store.failing = {"put"}
    data = os.urandom(2 * BS)

    async def main() -> None:
        reads = _reads(lake, store)
        result = await CachedLake(lake, reads).put_object(B, "k", _body(data), len(data), ObjectAttributes())
        assert result.etag == (await lake.head_object(B, "k")).etag
        assert counts(reads)["l1_errors"] == 2  # each block's first put (the key's marker) failed
        assert (await read(reads, "k"))[1] == data and len(lake.gets) == 2

    run(main())


def test_a_failing_delete_of_invalidated_blocks_is_counted_not_raised(lake: CountingLake) -> None:
    store = FailingStore()
    old, new = os.urandom(BS), os.urandom(BS)

    async def main() -> None:
        await put(lake, "k", old)
        reads = _reads(lake, store)
        cached = CachedLake(lake, reads, CacheOnWrite(enabled=False))
        assert (await read(reads, "k"))[1] == old
        await _settled(reads)
        store.failing = {"delete"}
        await cached.put_object(B, "k", _body(new), len(new), ObjectAttributes())
        await _settled(reads)
        assert (await read(reads, "k"))[1] == new
        assert counts(reads)["l1_errors"] == 1

    run(main())


def test_a_block_file_that_fails_mid_read_is_a_miss(
    lake: CountingLake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DiskBlockStore(tmp_path / "l1", 1 << 30)
    data = os.urandom(2 * BS)

    async def main() -> None:
        etag = await put(lake, "k", data)
        reads = _reads(lake, store)
        assert (await read(reads, "k"))[1] == data
        await _settled(reads)
        # the file opens, and its reads fail (EIO: a bad sector) until a fill replaces it
        st = os.stat(store.files.path(BlockId.of(B, "k", etag, 0, BS).hex))
        bad = (st.st_ino, st.st_ctime_ns)  # (an inode number alone is reused by the next file)
        real_pread = os.pread

        def pread(fd: int, n: int, offset: int) -> bytes:
            st = os.fstat(fd)
            if (st.st_ino, st.st_ctime_ns) == bad:
                raise OSError(errno.EIO, "Input/output error")
            return real_pread(fd, n, offset)

        monkeypatch.setattr(os, "pread", pread)
        hits, misses = store.hits, store.misses
        assert (await read(reads, "k"))[1] == data
        await _settled(reads)
        assert lake.gets[-1] == ("k", block_range(0, 2 * BS))
        assert counts(reads)["l1_errors"] == 1  # the read's (its file then removed)
        assert (store.hits, store.misses) == (hits + 1, misses + 1)  # a read that raised is a miss
        gets = len(lake.gets)
        assert (await read(reads, "k"))[1] == data  # the fill stored the block anew
        assert len(lake.gets) == gets and store.hits == hits + 3

    try:
        run(main())
    finally:
        store.close()


def test_a_vanished_cache_directory_is_a_miss(lake: CountingLake, tmp_path: Path) -> None:
    store = DiskBlockStore(tmp_path / "l1", 1 << 30)
    data = os.urandom(3 * BS)

    async def main() -> None:
        await put(lake, "k", data)
        reads = _reads(lake, store)
        assert (await read(reads, "k"))[1] == data
        await _settled(reads)
        shutil.rmtree(tmp_path / "l1")
        for _ in range(2):  # whatever the fills then do, the reads are right
            assert (await read(reads, "k"))[1] == data
            await _settled(reads)
        assert len(lake.gets) >= 6

    try:
        run(main())
    finally:
        store.close()


# ---- the owner's L2, serving peers ---------------------------------------------------------


def _failing_l2(node: Node) -> FailingStore:
    store = FailingStore()
    node.l2 = node.reads.tiers.l2 = store
    return store


def test_an_owner_whose_l2_fails_a_read_serves_its_peer_from_the_lake(lake: CountingLake) -> None:
    owner, reader = nodes(lake, 2)
    store = _failing_l2(owner)
    key = key_owned_by(owner)
    data = os.urandom(BS)

    async def main() -> None:
        await put(lake, key, data)
        assert (await read(owner.reads, key))[1] == data  # into the owner's L2
        await settle([owner, reader])
        store.failing = {"get"}
        assert (await read(reader.reads, key))[1] == data
        await settle([owner, reader])
        assert reader.counts()["peer_fetches"] == 1 and reader.counts()["lake_gets"] == 0
        assert owner.reads.stats.total("l2_errors") == 2  # the peer's read, and the fetch's look again
        assert len(lake.gets) == 2  # the owner asked the lake again

    run(main())


def test_an_owner_whose_l2_fails_a_fill_still_serves_its_peer(lake: CountingLake) -> None:
    owner, reader = nodes(lake, 2)
    store = _failing_l2(owner)
    store.failing = {"put"}
    key = key_owned_by(owner)
    data = os.urandom(BS)

    async def main() -> None:
        await put(lake, key, data)
        for _ in range(2):
            assert (await read(reader.reads, key))[1] == data
            await settle([owner, reader])
        assert reader.counts()["peer_fetches"] == 1 and reader.counts()["hits"] == 1  # kept in its L1
        assert owner.reads.stats.total("l2_errors") == 1 and len(store) == 0
        assert len(lake.gets) == 1

    run(main())


def test_the_tenant_of_an_error_is_the_reader(lake: CountingLake) -> None:
    store = FailingStore()
    store.failing = {"put"}
    data = os.urandom(BS)

    async def main() -> None:
        await put(lake, "k", data)
        reads = _reads(lake, store)
        assert (await read(reads, "k"))[1] == data
        await _settled(reads)
        assert set(reads.stats.snapshot()) == {TENANT}

    run(main())
