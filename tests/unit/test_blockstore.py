"""Block stores: the disk store and its in-memory twin conform to ``BlockStore`` and pass one
shared list of tests; the disk store alone is checked for what only a disk has: restarts,
corrupted and orphaned files, directory size. Processes killed in the middle of a put are
tests/component/test_crash_kill.py's."""

from __future__ import annotations

import inspect
import os
import random
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path

import diskcache  # type: ignore[import-untyped]
import pytest
from doubles import MiB, bid, block, block_rows, content, fits

from cachetier.blocks import store as blockstore
from cachetier.blocks.store import (
    EVICTION_POLICIES,
    SIDE_FILES_RESERVE,
    BlockStore,
    BlockStoreError,
    DiskBlockStore,
    MemoryBlockStore,
)

# Shared tests use 1 MiB blocks and capacities of fits(n) (tests/doubles.py): both stores then
# hold exactly n blocks.
B = MiB

MakeStore = Callable[..., BlockStore]


@pytest.fixture(params=["disk", "memory"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeStore]:
    stores: list[BlockStore] = []

    def make(capacity_bytes: int, eviction: str = "lru") -> BlockStore:
        store: BlockStore
        if request.param == "disk":
            store = DiskBlockStore(tmp_path / f"store{len(stores)}", capacity_bytes, eviction)
        else:
            store = MemoryBlockStore(capacity_bytes, eviction)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


# ---------------------------------------------------------------- conformance, both stores


@pytest.mark.parametrize("cls", [DiskBlockStore, MemoryBlockStore])
def test_stores_conform_to_the_protocol(cls: type, tmp_path: Path) -> None:
    store = DiskBlockStore(tmp_path, MiB) if cls is DiskBlockStore else MemoryBlockStore(MiB)
    assert isinstance(store, BlockStore)
    for name in ("get", "put", "delete", "__contains__", "set_capacity", "used_bytes", "check", "close"):
        assert inspect.signature(getattr(cls, name)) == inspect.signature(getattr(BlockStore, name)), name
    assert isinstance(inspect.getattr_static(cls, "capacity"), property)
    store.close()


def test_the_twin_knows_every_policy() -> None:
    from cachetier.blocks.store import _MEMORY_ORDER

    assert set(_MEMORY_ORDER) == set(EVICTION_POLICIES)


# ---------------------------------------------------------------- shared behaviour


def test_put_get_delete(make_store: MakeStore) -> None:
    store = make_store(fits(4))
    a, b = bid(0), bid(1)
    assert store.get(a) is None and a not in store
    store.put(a, content(a))
    store.put(b, b"")
    assert store.get(a) == content(a) and store.get(b) == b""
    assert a in store and "not a block id" not in store
    assert store.delete(a) is True and store.delete(a) is False
    assert store.get(a) is None and a not in store
    assert (store.hits, store.misses, store.puts, store.evictions, store.corrupt) == (2, 2, 2, 0, 0)


def test_put_replaces_and_used_bytes_counts_block_data(make_store: MakeStore) -> None:
    store = make_store(fits(4))
    a = bid(0)
    store.put(a, b"x" * 1000)
    store.put(a, b"y" * 300)
    store.put(bid(1), bytearray(b"z" * 20))
    assert store.get(a) == b"y" * 300 and store.get(bid(1)) == b"z" * 20
    assert store.used_bytes() == 320


def test_unknown_policy_and_negative_capacity_are_refused(make_store: MakeStore) -> None:
    with pytest.raises(ValueError, match="unknown eviction policy 'fifo'"):
        make_store(MiB, "fifo")
    with pytest.raises(ValueError):
        make_store(-1)
    store = make_store(MiB)
    with pytest.raises(ValueError):
        store.set_capacity(-1)


@pytest.mark.parametrize(("eviction", "victim"), [("lru", 0), ("lfu", 1)])
def test_eviction_policies_pick_their_victim(make_store: MakeStore, eviction: str, victim: int) -> None:
    store = make_store(fits(3), eviction)
    for i in range(3):
        store.put(*block(i))
    # block 0 is read most often but longest ago; block 1 least often, last
    for i in (0, 0, 0, 2, 2, 1):
        assert store.get(bid(i)) is not None
    store.put(*block(3))
    assert [i for i in range(4) if bid(i) in store] == sorted({0, 1, 2, 3} - {victim})
    assert store.evictions == 1
    assert store.used_bytes() == 3 * B


def test_lfu_keeps_the_frequently_read_through_a_scan(make_store: MakeStore) -> None:
    store = make_store(fits(2), "lfu")
    store.put(*block(0))
    assert store.get(bid(0)) is not None
    for i in range(1, 6):  # each newcomer gets in, and displaces the previous one
        store.put(*block(i))
        assert bid(i) in store and bid(0) in store
    assert store.evictions == 4


def test_lru_put_counts_as_a_use(make_store: MakeStore) -> None:
    store = make_store(fits(2))
    store.put(*block(0))
    store.put(*block(1))
    store.put(*block(0))  # rewritten: now the most recent
    store.put(*block(2))
    assert bid(0) in store and bid(1) not in store


def test_capacity_changes_at_run_time(make_store: MakeStore) -> None:
    store = make_store(fits(4))
    for i in range(4):
        store.put(*block(i))
    for i in (2, 0, 3, 1):
        store.get(bid(i))
    store.set_capacity(fits(2))
    assert store.capacity == fits(2)
    assert [i for i in range(4) if bid(i) in store] == [1, 3]  # the two read last
    assert store.evictions == 2
    store.set_capacity(fits(5))
    for i in range(5, 8):
        store.put(*block(i))
    assert store.used_bytes() == 5 * B and store.evictions == 2


def test_a_block_larger_than_the_capacity_is_not_stored(make_store: MakeStore) -> None:
    store = make_store(fits(1))
    store.put(*block(0))
    store.put(bid(1), b"x" * (2 * B))
    assert bid(1) not in store and bid(0) in store and store.puts == 1
    store.set_capacity(0)
    assert store.used_bytes() == 0
    store.put(bid(2), b"x")
    assert bid(2) not in store


def test_check_finds_nothing_in_a_healthy_store(make_store: MakeStore) -> None:
    store = make_store(fits(2))
    for i in range(3):
        store.put(*block(i))
    assert store.check() == []
    assert store.check() == []


def test_threads_share_a_store(make_store: MakeStore) -> None:
    store = make_store(MiB)  # ~40 blocks of up to 64 KiB: both stores evict as they go
    ids = [bid(i) for i in range(40)]

    def work(n: int) -> None:
        store.put(ids[n], content(ids[n]))
        other = ids[n * 7 % len(ids)]
        assert store.get(other) in (None, content(other))

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(work, range(len(ids))))
    assert all(store.get(i) in (None, content(i)) for i in ids)
    assert store.puts == len(ids) and store.hits + store.misses == 2 * len(ids)
    assert store.evictions > 0 and store.used_bytes() <= store.capacity
    assert store.check() == []


# ---------------------------------------------------------------- the disk store alone


def block_files(directory: Path) -> list[Path]:
    return sorted(directory.rglob("*.val"))


def directory_size(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())


def test_blocks_are_files_and_survive_a_restart(tmp_path: Path) -> None:
    with closing(DiskBlockStore(tmp_path, fits(4))) as store:
        for i in range(3):
            store.put(*block(i))
        assert len(store) == 3
    assert [path.stat().st_size for path in block_files(tmp_path)] == [B] * 3
    assert {path.read_bytes() for path in block_files(tmp_path)} == {block(i)[1] for i in range(3)}
    with closing(DiskBlockStore(tmp_path, fits(4))) as store:
        assert all(store.get(bid(i)) == block(i)[1] for i in range(3))
        assert store.used_bytes() == 3 * B and store.check() == []
    with closing(DiskBlockStore(tmp_path, fits(1))) as store:  # reopened smaller: evicts at once
        assert len(store) == 1 and store.used_bytes() == B


def test_a_corrupted_block_is_deleted_not_returned(tmp_path: Path) -> None:
    with closing(DiskBlockStore(tmp_path, fits(4))) as store:
        store.put(*block(0))
        (path,) = block_files(tmp_path)
        raw = bytearray(path.read_bytes())
        raw[12345] ^= 0x01
        path.write_bytes(raw)
        assert store.get(bid(0)) is None
        assert store.corrupt == 1 and store.misses == 1 and store.hits == 0
        assert bid(0) not in store and block_files(tmp_path) == []
        assert store.check() == []


def test_check_repairs_torn_and_orphaned_files(tmp_path: Path) -> None:
    with closing(DiskBlockStore(tmp_path, fits(4))) as store:
        for i in range(3):
            store.put(*block(i))
        torn = next(p for p in block_files(tmp_path) if p.read_bytes() == block(1)[1])
        with torn.open("r+b") as f:
            f.truncate(B // 2)  # as a power cut after the index commit could leave it
        orphan = tmp_path / "ab" / "cd" / "0123456789.val"
        orphan.parent.mkdir(parents=True)
        orphan.write_bytes(b"left by a put killed before its commit")
        problems = store.check()
        assert any("wrong file size" in p for p in problems)
        assert any(f"corrupt block {bid(1).hex}" in p for p in problems)
        assert any("unknown file" in p and "0123456789.val" in p for p in problems)
        assert store.corrupt == 1 and not orphan.exists()
        assert store.check() == []
        assert [i for i in range(3) if store.get(bid(i)) == block(i)[1]] == [0, 2]


def test_a_block_whose_file_vanished_is_a_miss(tmp_path: Path) -> None:
    with closing(DiskBlockStore(tmp_path, fits(4))) as store:
        store.put(*block(0))
        block_files(tmp_path)[0].unlink()
        assert store.get(bid(0)) is None and store.misses == 1
        assert any("file not found" in p for p in store.check())
        assert bid(0) not in store and store.check() == []


def test_disk_usage_stays_within_capacity_plus_one_block(tmp_path: Path) -> None:
    # the check: capacity 64 MiB, 200 MiB of distinct 4 MiB blocks
    capacity, size = 64 * MiB, 4 * MiB
    data = {i: random.Random(i).randbytes(64 * 1024) * (size // (64 * 1024)) for i in range(50)}
    with closing(DiskBlockStore(tmp_path, capacity)) as store:
        for i in range(50):
            store.put(bid(i), data[i])
            assert directory_size(tmp_path) <= capacity + size, i
            assert store.get(bid(i)) == data[i]
        present = [i for i in range(50) if bid(i) in store]
        assert all(store.get(bid(i)) == data[i] for i in present)
        # evicted one block at a time: the store stays nearly full, not emptied in batches
        assert store.used_bytes() == len(present) * size >= capacity - 2 * size
        assert store.evictions == 50 - len(present)
        assert store.check() == []


# ---------------------------------------------------------------- reads without SQL


def test_reads_run_no_sql(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the event loop reads small blocks inline: no SQLite transaction (nor lock wait) per hit
    store = DiskBlockStore(tmp_path, fits(4), "lfu", flush_interval=3600)
    ids = [bid(i) for i in range(4)]
    with closing(store):
        for block_id in ids[:3]:
            store.put(block_id, content(block_id))
        connections: list[diskcache.Cache] = []
        con = diskcache.Cache._con  # every statement diskcache or the store runs goes through it
        monkeypatch.setattr(diskcache.Cache, "_con", property(lambda c: connections.append(c) or con.fget(c)))
        (torn,) = [p for p in block_files(tmp_path) if p.read_bytes() == content(ids[2])]
        torn.write_bytes(b"torn")
        for _ in range(100):  # hits, misses, a corrupt block, existence checks: all in memory
            assert store.get(ids[0]) == content(ids[0]) and store.get(ids[1]) == content(ids[1])
            assert store.get(ids[2]) is None and store.get(ids[3]) is None
            assert ids[0] in store and ids[2] not in store and ids[3] not in store and len(store) == 2
        assert connections == []
        assert (store.hits, store.misses, store.corrupt) == (200, 200, 1) and not torn.exists()
        monkeypatch.undo()
        # the reads reach the database at the next flush, and so does the corrupt block's row
        assert ids[2].hex in block_rows(tmp_path)
        store.flush()
        rows = block_rows(tmp_path)
        assert sorted(rows) == sorted([ids[0].hex, ids[1].hex])
        assert rows[ids[0].hex][2] == rows[ids[1].hex][2] == 100
        assert store.check() == []


def test_short_reads_are_read_to_the_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with closing(DiskBlockStore(tmp_path, fits(4), flush_interval=3600)) as store:
        store.put(*block(0))
        read = os.read
        monkeypatch.setattr(os, "read", lambda fd, n: read(fd, min(n, 1000)))
        assert store.get(bid(0)) == block(0)[1]


@pytest.mark.parametrize("eviction", ["lru", "lfu"])
def test_reads_survive_a_restart(tmp_path: Path, eviction: str) -> None:
    # puts 0, 1, 2 and reads of 0 and 1: without the reads, both policies' victim would be 0
    with closing(DiskBlockStore(tmp_path, fits(3), eviction, flush_interval=3600)) as store:
        for i in range(3):
            store.put(*block(i))
        for i in (0, 1):
            assert store.get(bid(i)) is not None
    assert not store._flusher.is_alive()  # close() flushed and stopped the flusher
    with closing(DiskBlockStore(tmp_path, fits(3), eviction)) as store:
        store.put(*block(3))
        assert [i for i in range(4) if bid(i) in store] == [0, 1, 3]


def test_a_failed_flush_keeps_its_reads_for_the_next(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with closing(DiskBlockStore(tmp_path, fits(4), "lfu", flush_interval=3600)) as store:
        store.put(*block(0))
        store.put(*block(1))
        (path,) = [p for p in block_files(tmp_path) if p.read_bytes() == block(1)[1]]
        path.write_bytes(b"torn")
        assert store.get(bid(0)) is not None and store.get(bid(0)) is not None
        assert store.get(bid(1)) is None and store.corrupt == 1

        def locked(self: diskcache.Cache, retry: bool = False) -> None:
            raise diskcache.Timeout

        monkeypatch.setattr(diskcache.Cache, "transact", locked)
        with pytest.raises(BlockStoreError):
            store.flush()
        monkeypatch.undo()
        assert store.get(bid(0)) is not None
        store.flush()
        assert {key: count for key, (_, _, count) in block_rows(tmp_path).items()} == {bid(0).hex: 3}
        assert store.check() == []


# ---------------------------------------------------------------- files gone behind the index


def test_a_block_whose_directory_vanished_is_a_miss_and_can_be_stored_again(tmp_path: Path) -> None:
    with closing(DiskBlockStore(tmp_path, fits(4))) as store:
        store.put(*block(0))
        store.put(*block(1))
        (path,) = [p for p in block_files(tmp_path) if p.read_bytes() == block(0)[1]]
        shutil.rmtree(path.parent.parent)
        assert store.get(bid(0)) is None and store.misses == 1 and store.corrupt == 0
        assert bid(0) not in store and len(store) == 1  # known gone at once, before any check()
        assert store.get(bid(1)) == block(1)[1]
        store.put(*block(0))  # a later read miss stores it again, over the stale row
        assert store.get(bid(0)) == block(0)[1] and bid(0) in store
        assert store.check() == []


def test_a_corrupt_block_replaced_while_it_was_read_keeps_the_fresh_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh = b"fresh bytes"
    with closing(DiskBlockStore(tmp_path, fits(4))) as store:
        store.put(*block(0))
        (path,) = block_files(tmp_path)
        path.write_bytes(b"torn")
        real_read = blockstore.read_file

        def read_then_replace(path: str, size: int) -> bytes | None:
            data = real_read(path, size)
            monkeypatch.setattr(blockstore, "read_file", real_read)
            store.put(bid(0), fresh)  # a writer replaces the block between the read and the drop
            return data

        monkeypatch.setattr(blockstore, "read_file", read_then_replace)
        assert store.get(bid(0)) is None and store.corrupt == 1
        assert store.get(bid(0)) == fresh
        store.flush()  # deletes the corrupt block's row only if it still names the torn file
        assert store.get(bid(0)) == fresh and store.check() == []


def test_reads_racing_puts_and_evictions_see_a_block_or_a_miss(tmp_path: Path) -> None:
    ids = [bid(i) for i in range(12)]
    with closing(DiskBlockStore(tmp_path, SIDE_FILES_RESERVE + 4 * 64 * 1024)) as store:
        writing = threading.Event()

        def write(seed: int) -> None:
            rng = random.Random(seed)
            for _ in range(30):
                block_id = rng.choice(ids)
                store.put(block_id, content(block_id, 48 * 1024))
                writing.set()

        def read(seed: int) -> int:
            rng, hits, reads = random.Random(seed), 0, 0
            writing.wait()
            while any(not writer.done() for writer in writers) or reads < 1000:
                block_id = rng.choice(ids)
                data = store.get(block_id)
                assert data in (None, content(block_id, 48 * 1024))
                hits, reads = hits + (data is not None), reads + 1
                time.sleep(0)  # let the writers have the GIL
            return hits

        with ThreadPoolExecutor(4) as pool:
            writers = [pool.submit(write, seed) for seed in range(2)]
            hits = sum(pool.map(read, range(2)))
            for writer in writers:
                writer.result()
        assert hits > 0 and store.evictions > 0 and store.corrupt == 0
        assert store.check() == []
