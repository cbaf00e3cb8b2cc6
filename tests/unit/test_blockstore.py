"""Block stores: the disk store and its in-memory twin conform to ``BlockStore`` and pass one
shared list of tests; the disk store alone is checked for what only a disk has: restarts,
corrupted and stray files, directory size, stores sharing a space manager. Processes killed in
the middle of a put, and worker processes sharing a store, are tests/component's."""

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

import pytest
from doubles import MiB, bid, block, content, fits

from cachetier.blocks.files import HEADER_SIZE, BlockFiles
from cachetier.blocks.space import LocalSpace, Space, Usage
from cachetier.blocks.store import EVICTION_POLICIES, BlockStore, BlockStoreError, DiskBlockStore, MemoryBlockStore

# Shared tests use 1 MiB blocks and capacities of fits(n) (tests/doubles.py): both stores then
# hold exactly n blocks.
B = MiB

MakeStore = Callable[..., BlockStore]


# "-plain": without fair occupancy (fair=False), which must behave as the stores did before it
@pytest.fixture(params=["disk", "memory", "disk-plain", "memory-plain"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeStore]:
    stores: list[BlockStore] = []
    fair = not request.param.endswith("-plain")

    def make(capacity_bytes: int, eviction: str = "lru") -> BlockStore:
        store: BlockStore
        if request.param.startswith("disk"):
            store = DiskBlockStore(tmp_path / f"store{len(stores)}", capacity_bytes, eviction, fair=fair)
        else:
            store = MemoryBlockStore(capacity_bytes, eviction, fair=fair)
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
    return sorted(p for p in (directory / "blocks").rglob("*") if p.is_file())


def directory_size(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())


def test_blocks_are_files_named_by_id_and_survive_a_restart(tmp_path: Path) -> None:
    with closing(DiskBlockStore(tmp_path, fits(4))) as store:
        for i in range(3):
            store.put(*block(i))
        assert len(store) == 3
    assert block_files(tmp_path) == sorted(Path(BlockFiles(tmp_path).path(bid(i).hex)) for i in range(3))
    assert [path.stat().st_size for path in block_files(tmp_path)] == [B + HEADER_SIZE] * 3
    assert {path.read_bytes()[HEADER_SIZE:] for path in block_files(tmp_path)} == {block(i)[1] for i in range(3)}
    with closing(DiskBlockStore(tmp_path, fits(4))) as store:
        assert all(store.get(bid(i)) == block(i)[1] for i in range(3))
        assert store.used_bytes() == 3 * B and store.check() == []
    with closing(DiskBlockStore(tmp_path, fits(1))) as store:  # reopened smaller: evicts at once
        assert len(store) == 1 and store.used_bytes() == B and store.evictions == 2


def test_a_corrupted_block_is_deleted_not_returned(tmp_path: Path) -> None:
    with closing(DiskBlockStore(tmp_path, fits(4))) as store:
        store.put(*block(0))
        (path,) = block_files(tmp_path)
        raw = bytearray(path.read_bytes())
        raw[12345] ^= 0x01
        path.write_bytes(raw)
        assert store.get(bid(0)) is None
        assert store.corrupt == 1 and store.misses == 1 and store.hits == 0
        assert bid(0) not in store and block_files(tmp_path) == [] and len(store) == 0
        assert store.check() == []


def test_check_repairs_torn_stray_and_unfinished_files(tmp_path: Path) -> None:
    with closing(DiskBlockStore(tmp_path, fits(4))) as store:
        for i in range(3):
            store.put(*block(i))
        torn = Path(store.files.path(bid(1).hex))
        with torn.open("r+b") as f:
            f.truncate(B // 2)  # as a power cut after the rename could leave it
        stray = tmp_path / "blocks" / "ab" / "not-a-block"
        stray.parent.mkdir(exist_ok=True)
        stray.write_bytes(b"put here by hand")
        unfinished = tmp_path / "tmp" / f"{bid(5).hex}.999999999.0"  # no such process runs
        unfinished.write_bytes(b"left by a put killed before its rename")
        problems = store.check()
        assert any(f"corrupt block {bid(1).hex}" in p for p in problems)
        assert any("unknown file" in p and "not-a-block" in p for p in problems)
        assert any("unfinished put" in p for p in problems)
        assert store.corrupt == 1 and not stray.exists() and not unfinished.exists()
        assert store.check() == []
        assert [i for i in range(3) if store.get(bid(i)) == block(i)[1]] == [0, 2]
        assert store.used_bytes() == 2 * B


def test_a_block_whose_file_vanished_is_a_miss(tmp_path: Path) -> None:
    with closing(DiskBlockStore(tmp_path, fits(4))) as store:
        store.put(*block(0))
        block_files(tmp_path)[0].unlink()
        assert store.get(bid(0)) is None and store.misses == 1
        assert bid(0) not in store
        assert store.check() == [] and store.used_bytes() == 0  # the accounting follows the disk


def test_disk_usage_stays_within_capacity(tmp_path: Path) -> None:
    # capacity 64 MiB, 200 MiB of distinct 4 MiB blocks: room is made before each block lands
    capacity, size = 64 * MiB, 4 * MiB
    data = {i: random.Random(i).randbytes(64 * 1024) * (size // (64 * 1024)) for i in range(50)}
    with closing(DiskBlockStore(tmp_path, capacity)) as store:
        for i in range(50):
            store.put(bid(i), data[i])
            assert directory_size(tmp_path) <= capacity, i
            assert store.get(bid(i)) == data[i]
        present = [i for i in range(50) if bid(i) in store]
        assert all(store.get(i_) == data[i] for i, i_ in ((i, bid(i)) for i in present))
        # evicted one block at a time: the store stays nearly full, not emptied in batches
        assert store.used_bytes() == len(present) * size >= capacity - 2 * size
        assert store.evictions == 50 - len(present)
        assert store.check() == []


def test_reads_ask_no_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the event loop reads small blocks inline: a hit asks the space manager nothing
    store = DiskBlockStore(tmp_path, fits(4), "lfu", flush_interval=3600)
    ids = [bid(i) for i in range(4)]
    with closing(store):
        for block_id in ids[:3]:
            store.put(block_id, content(block_id))
        asked: list[str] = []
        for name in ("reserve", "used", "usage", "commit"):
            real = getattr(store.space, name)
            monkeypatch.setattr(store.space, name, lambda *a, _n=name, _r=real: asked.append(_n) or _r(*a))
        Path(store.files.path(ids[2].hex)).write_bytes(b"torn")
        for _ in range(100):  # hits, misses, a corrupt block, existence checks
            assert store.get(ids[0]) == content(ids[0]) and store.get(ids[1]) == content(ids[1])
            assert store.get(ids[2]) is None and store.get(ids[3]) is None
            assert ids[0] in store and ids[2] not in store and ids[3] not in store
        assert asked == []
        assert (store.hits, store.misses, store.corrupt) == (200, 200, 1)
        store.flush_reads()  # the reads reach the manager in one report
        assert asked == ["used"]


def test_short_reads_are_read_to_the_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with closing(DiskBlockStore(tmp_path, fits(4), flush_interval=3600)) as store:
        store.put(*block(0))
        pread = os.pread
        monkeypatch.setattr(os, "pread", lambda fd, n, off: pread(fd, min(n, 1000), off))
        assert store.get(bid(0)) == block(0)[1]


@pytest.mark.parametrize("eviction", ["lru", "lfu"])
def test_reads_survive_a_restart(tmp_path: Path, eviction: str) -> None:
    # puts 0, 1, 2 and reads of 0 and 1: without the reads, both policies' victim would be 0
    with closing(DiskBlockStore(tmp_path, fits(3), eviction, flush_interval=3600)) as store:
        for i in range(3):
            store.put(*block(i))
        old = time.time() - 60
        for i in range(3):  # the puts long ago: the reads' stamps come later
            os.utime(store.files.path(bid(i).hex), (old, old))
        for i in (0, 1):
            assert store.get(bid(i)) is not None
    assert not store._flusher.is_alive()  # close() reported the reads and stopped the flusher
    with closing(DiskBlockStore(tmp_path, fits(3), eviction)) as store:
        store.put(*block(3))
        assert [i for i in range(4) if bid(i) in store] == [0, 1, 3]


def test_a_block_whose_directory_vanished_is_a_miss_and_can_be_stored_again(tmp_path: Path) -> None:
    with closing(DiskBlockStore(tmp_path, fits(4))) as store:
        store.put(*block(0))
        path = Path(store.files.path(bid(0).hex))
        shutil.rmtree(path.parent)
        assert store.get(bid(0)) is None and store.misses == 1 and store.corrupt == 0
        assert bid(0) not in store
        store.put(*block(0))  # a later read miss stores it again
        assert store.get(bid(0)) == block(0)[1] and bid(0) in store
        assert store.check() == [] and store.used_bytes() == B


def test_the_old_diskcache_layout_is_cleared(tmp_path: Path) -> None:
    (tmp_path / "cache.db").write_bytes(b"SQLite format 3")
    (tmp_path / "ab" / "cd").mkdir(parents=True)
    (tmp_path / "ab" / "cd" / "0123.val").write_bytes(b"an old block")
    with closing(DiskBlockStore(tmp_path, fits(4))) as store:
        assert sorted(os.listdir(tmp_path)) == ["blocks", "manager.lock", "tmp"]
        store.put(*block(0))
        assert store.get(bid(0)) == block(0)[1]


def test_one_manager_per_directory(tmp_path: Path) -> None:
    # a second node on the same cache directory would fight the first over its capacity
    with closing(DiskBlockStore(tmp_path, fits(4))):
        with pytest.raises(BlockStoreError, match="managed by another process"):
            DiskBlockStore(tmp_path, fits(4))
    with closing(DiskBlockStore(tmp_path, fits(4))):  # released at close
        pass


def test_stores_sharing_a_space_share_blocks_and_capacity(tmp_path: Path) -> None:
    # as a node's worker processes do (over cachetier.blocks.spaceipc; tests/component has those)
    files = BlockFiles(tmp_path)
    shared = Space(files, fits(3), "lru")
    shared.load()
    one, two = (DiskBlockStore(tmp_path, fits(3), space=LocalSpace(shared)) for _ in range(2))
    with closing(one), closing(two):
        one.put(*block(0))
        assert two.get(bid(0)) == block(0)[1]  # a hit for the other, asking no one
        for i in range(1, 6):
            (one if i % 2 else two).put(*block(i))
            assert directory_size(tmp_path) <= fits(3)
        assert shared.usage().blocks == 3 and one.evictions + two.evictions == 3


def test_a_reservation_left_by_a_dead_writer_is_settled_from_the_disk(tmp_path: Path) -> None:
    files = BlockFiles(tmp_path)
    space = Space(files, fits(4), "lru")
    writer = object()
    size = B + HEADER_SIZE
    for i in (0, 1):
        assert space.reserve(bid(i).hex, size, writer).answer == "ok"
    assert space.reserve(bid(0).hex, size).answer == "busy"  # being written by the other
    tmp = files.write(bid(0).hex, block(0)[1])
    files.publish(tmp, bid(0).hex)  # renamed, then killed before its commit
    files.write(bid(1).hex, block(1)[1])  # killed before its rename
    space.release(writer, os.getpid())
    assert files.tmp_files() == []
    assert space.usage() == Usage(size, fits(4), 1, HEADER_SIZE, size)
    assert space.reserve(bid(0).hex, size).answer == "ok"  # no longer anyone's


def test_reads_racing_puts_and_evictions_see_a_block_or_a_miss(tmp_path: Path) -> None:
    ids = [bid(i) for i in range(12)]
    with closing(DiskBlockStore(tmp_path, 4 * (48 * 1024 + HEADER_SIZE))) as store:
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


# ---------------------------------------------------------------- regions (zero-copy) and the scrub


def test_a_region_is_the_block_unread_and_owns_its_file(tmp_path: Path) -> None:
    with closing(DiskBlockStore(tmp_path, fits(4))) as store:
        store.put(*block(0))
        region = store.open_region(bid(0))
        assert region is not None and (region.offset, len(region)) == (HEADER_SIZE, B)
        assert region.read() == block(0)[1]
        part = region.slice(10, 1000)  # the slice takes the file over
        assert region.fd == -1 and part.read() == block(0)[1][10:1000]
        part.close()
        part.close()  # idempotent
        assert store.open_region(bid(1)) is None  # no region: the caller reads it (and counts that)
        assert (store.hits, store.misses) == (1, 0)


def test_a_block_written_into_since_it_was_checked_is_read_and_checked(tmp_path: Path) -> None:
    with closing(DiskBlockStore(tmp_path, fits(4))) as store:
        store.put(*block(0))
        store.put(*block(1))
        path = Path(store.files.path(bid(0).hex))
        raw = bytearray(path.read_bytes())
        raw[HEADER_SIZE + 99] ^= 0x01  # in place, by a tool or a hand: a new mtime
        path.write_bytes(raw)
        assert store.open_region(bid(0)) is None and (store.hits, store.misses) == (0, 0)  # read it
        assert store.get(bid(0)) is None and store.corrupt == 1  # ... and the read finds it
        assert store.open_region(bid(2)) is None  # nothing this store checked: read it too
        region = store.open_region(bid(1))  # written here: checked
        assert region is not None and region.read() == block(1)[1]
        region.close()


def test_a_torn_block_is_no_region(tmp_path: Path) -> None:
    with closing(DiskBlockStore(tmp_path, fits(4))) as store:
        store.put(*block(0))
        with open(store.files.path(bid(0).hex), "r+b") as f:
            f.truncate(B // 2)  # what a power cut after the rename may leave: the header tells
        assert store.open_region(bid(0)) is None and store.corrupt == 1 and bid(0) not in store


def test_the_scrub_finds_a_flipped_bit_that_a_region_would_send(tmp_path: Path) -> None:
    with closing(DiskBlockStore(tmp_path, fits(4), flush_interval=3600)) as store:
        for i in range(3):
            store.put(*block(i))
        path = Path(store.files.path(bid(1).hex))
        st = path.stat()
        raw = bytearray(path.read_bytes())
        raw[HEADER_SIZE + 777] ^= 0x10  # bit rot: same length, same inode and times
        path.write_bytes(raw)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        region = store.open_region(bid(1))  # a region does not see it
        assert region is not None
        region.close()
        assert isinstance(store.space, LocalSpace)
        space = store.space.space
        assert space.scrub(B) == 0 or bid(1) not in store  # a pass goes a megabyte at a time
        for _ in range(10):  # at most a pass over the three blocks
            if bid(1) not in store:
                break
            space.scrub(B)
        assert space.scrub_corrupt == 1 and store.used_bytes() == 2 * B
        assert [i for i in range(3) if bid(i) in store] == [0, 2]


def test_a_scrub_of_empty_blocks_ends(tmp_path: Path) -> None:
    # a key's marker is an empty block: a budget of bytes is never used up by such blocks
    with closing(DiskBlockStore(tmp_path, fits(4), flush_interval=3600)) as store:
        for i in range(3):
            store.put(bid(i), b"")
        assert isinstance(store.space, LocalSpace)
        assert store.space.space.scrub(64 * MiB) == 0  # returns, after one pass
        store.put(*block(5))
        assert store.space.space.scrub(10 * MiB) == 0
