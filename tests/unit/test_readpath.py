"""The read path and write-through without a network: ReadPath and CachedLake over the in-memory
lake (``MemoryLake``) or DirLake (every test that takes the ``lake`` fixture runs on both), with
the in-memory block store, a wrapper that counts (and can hold) lake calls, and an injected clock
(the last two, and the helpers that put, read and wait, from tests/doubles.py). Sync tests drive
the async code with asyncio.run; the block size is 1 KiB, so objects of a few KiB cross many blocks.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from doubles import (
    BS,
    B,
    TENANT,
    Clock,
    CountingLake,
    _body,
    block_range,
    counts,
    drain,
    memory_lake,
    put,
    read,
    run,
    until,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from cachetier.blocks.ids import BlockId
from cachetier.blocks.store import MemoryBlockStore
from cachetier.cachedlake import CacheOnWrite, CachedLake
from cachetier.telemetry.counters import CacheStats
from cachetier.lake.conditions import Conditions
from cachetier.context import RequestContext, current
from cachetier.lake.dirlake import DirLake
from cachetier.errors import InvalidRange, NoSuchKey, PreconditionFailed
from cachetier.lake import Lake, ObjectAttributes
from cachetier.lake.ranges import ByteRange
from cachetier.lake.s3.headers import range_header
from cachetier.read.config import ReadConfig
from cachetier.read.path import ObjectChanged, ReadPath


# ---- lakes ------------------------------------------------------------------------------------


@pytest.fixture(params=["memory", "dir"])
def lake(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CountingLake]:
    """A counting wrapper around each kind of lake, with bucket ``B``."""
    inner: Lake = memory_lake() if request.param == "memory" else DirLake(tmp_path / "lake")
    asyncio.run(inner.create_bucket(B))
    yield CountingLake(inner)
    asyncio.run(inner.aclose())


def _reads(lake: Any, *, ttl: float = 60.0, readahead: int = 2, clock: Callable[[], float] | None = None,
           block_size: int = BS) -> ReadPath:
    config = ReadConfig(block_size=block_size, meta_ttl=ttl, readahead=readahead)
    return ReadPath(lake, MemoryBlockStore(1 << 30), CacheStats(), config, clock=clock or Clock())


# ---- single flight -----------------------------------------------------------------------------


def test_concurrent_readers_of_a_cold_block_share_one_lake_get(lake: CountingLake) -> None:
    data = os.urandom(BS)

    async def main() -> None:
        await put(lake, "k", data)
        reads = _reads(lake)
        lake.hold_gets = asyncio.Event()
        readers = [asyncio.ensure_future(read(reads, "k")) for _ in range(16)]
        await until(lambda: len(lake.gets) == 1)
        await asyncio.sleep(0.01)  # time for a second request to go out, if one would
        lake.hold_gets.set()
        bodies = [body for _, body in await asyncio.gather(*readers)]
        await drain(reads)
        assert bodies == [data] * 16
        assert lake.gets == [("k", block_range(0, BS))]
        assert lake.heads == []  # a cold key: the block's GET brought the metadata, no HEAD
        assert (counts(reads)["misses"], counts(reads)["lake_gets"], counts(reads)["coalesced"]) == (1, 1, 15)

    run(main())


def test_background_counts_a_block_in_flight_until_it_is_stored(lake: CountingLake) -> None:
    data = os.urandom(2 * BS)

    async def main() -> None:
        await put(lake, "k", data)
        reads = _reads(lake)
        await read(reads, "k", ByteRange(first=0, last=0))  # metadata and block 0
        await until(lambda: reads.background == 0)
        stored = len(reads.store)
        lake.hold_gets = asyncio.Event()
        reader = asyncio.ensure_future(read(reads, "k", ByteRange(first=BS, last=BS)))
        await until(lambda: len(lake.gets) == 2)
        assert reads.background == 1  # block 1's fetch, its GET held
        lake.hold_gets.set()
        _, body = await reader
        assert body == data[BS : BS + 1]
        await until(lambda: reads.background == 0)
        assert len(reads.store) == stored + 1  # stored before it stops counting

    run(main())


def test_concurrent_readers_of_a_cold_object_fetch_each_block_once(lake: CountingLake) -> None:
    data = os.urandom(10 * BS + 17)

    async def main() -> None:
        await put(lake, "k", data)
        reads = _reads(lake)
        results = await asyncio.gather(*(read(reads, "k") for _ in range(16)))
        await drain(reads)
        assert [body for _, body in results] == [data] * 16
        assert sorted(r for _, r in lake.gets) == sorted(block_range(i, len(data)) for i in range(11))

    run(main())


def test_a_reader_that_goes_away_does_not_cancel_the_fetch_for_the_others(lake: CountingLake) -> None:
    data = os.urandom(BS)

    async def main() -> None:
        await put(lake, "k", data)
        reads = _reads(lake)
        lake.hold_gets = asyncio.Event()
        leaving, staying = asyncio.ensure_future(read(reads, "k")), asyncio.ensure_future(read(reads, "k"))
        await until(lambda: len(lake.gets) == 1)
        leaving.cancel()
        lake.hold_gets.set()
        assert (await staying)[1] == data
        await drain(reads)
        assert len(lake.gets) == 1
        assert reads.store.get(BlockId.of(B, "k", (await lake.head_object(B, "k")).etag, 0, BS)) == data

    run(main())


# ---- read-ahead ----------------------------------------------------------------------------------


def test_a_one_block_range_does_not_prefetch(lake: CountingLake) -> None:
    data = os.urandom(10 * BS)

    async def main() -> None:
        await put(lake, "k", data)
        reads = _reads(lake)
        _, body = await read(reads, "k", ByteRange(5 * BS + 3, 5 * BS + 3))
        await drain(reads)
        assert body == data[5 * BS + 3 : 5 * BS + 4]
        assert lake.gets == [("k", block_range(5, len(data)))]
        assert len(reads.store) == 2  # type: ignore[arg-type]  # the block and the key's marker
        assert counts(reads).get("prefetches", 0) == 0

    run(main())


def test_a_one_block_range_read_again_does_not_prefetch(lake: CountingLake) -> None:
    """Reading the same block twice (readers sharing a file's header, a retry) is no
    sequential reader: nothing past the block is fetched."""
    data = os.urandom(10 * BS)

    async def main() -> None:
        await put(lake, "k", data)
        reads = _reads(lake)
        for _ in range(3):
            assert (await read(reads, "k", ByteRange(5 * BS + 3, 5 * BS + 3)))[1] == data[5 * BS + 3 : 5 * BS + 4]
            await drain(reads)
        assert lake.gets == [("k", block_range(5, len(data)))]

    run(main())


def test_a_sequential_reader_gets_its_next_blocks_fetched_ahead(lake: CountingLake) -> None:
    size = 10 * BS

    async def main() -> None:
        await put(lake, "k", os.urandom(size))
        reads = _reads(lake, readahead=2)
        await read(reads, "k", ByteRange(0, BS - 1))  # block 0: nothing to continue yet
        await drain(reads)
        assert [r for _, r in lake.gets] == [block_range(0, size)]

        await read(reads, "k", ByteRange(BS, 2 * BS - 1))  # block 1 continues it: 2 and 3 ahead
        await drain(reads)
        assert sorted(r for _, r in lake.gets[1:]) == sorted(block_range(i, size) for i in (1, 2, 3))
        assert counts(reads)["prefetches"] == 2

        hits = counts(reads).get("hits", 0)
        await read(reads, "k", ByteRange(2 * BS, 3 * BS - 1))  # block 2: in L1; 4 fetched ahead
        await drain(reads)
        assert counts(reads)["hits"] == hits + 1
        assert [r for _, r in lake.gets[4:]] == [block_range(4, size)]

        await read(reads, "k", ByteRange(3 * BS, size - 1))  # to the end: nothing past it
        await drain(reads)
        assert sorted(r for _, r in lake.gets) == sorted(block_range(i, size) for i in range(10))

    run(main())


def test_read_ahead_zero_fetches_only_what_is_read(lake: CountingLake) -> None:
    size = 6 * BS

    async def main() -> None:
        await put(lake, "k", os.urandom(size))
        reads = _reads(lake, readahead=0)
        for i in range(3):
            await read(reads, "k", ByteRange(i * BS, (i + 1) * BS - 1))
        await drain(reads)
        assert [r for _, r in lake.gets] == [block_range(i, size) for i in range(3)]

    run(main())


# ---- a changed object never mixes bytes ------------------------------------------------------------


def test_an_object_changed_behind_the_metadata_is_read_new_after_one_retry(lake: CountingLake) -> None:
    old, new = os.urandom(3 * BS + 5), os.urandom(3 * BS + 5)

    async def main() -> None:
        old_etag = await put(lake, "k", old)
        reads = _reads(lake)
        assert (await reads.head(B, "k")).etag == old_etag  # metadata cached, no block yet
        new_etag = await put(lake, "k", new)

        stream, body = await read(reads, "k")
        await drain(reads)
        assert body == new
        assert stream.info.etag == new_etag
        # the first HEAD (above) left no block; the retry found no marker and revalidated
        # through the first block's GET, which brings the new metadata
        assert lake.heads == ["k"]
        assert ("k", block_range(0, len(new))) in lake.gets
        assert not any(BlockId.of(B, "k", old_etag, i, BS) in reads.store for i in range(4))

    run(main())


def test_an_object_changed_to_a_smaller_one_is_read_new(lake: CountingLake) -> None:
    async def main() -> None:
        await put(lake, "k", os.urandom(5 * BS))
        reads = _reads(lake)
        await reads.head(B, "k")
        new = os.urandom(BS // 2)
        await put(lake, "k", new)
        assert (await read(reads, "k"))[1] == new
        assert (await read(reads, "k", ByteRange(3, None)))[1] == new[3:]

    run(main())


def test_a_changed_object_cuts_the_stream_rather_than_mix_versions(lake: CountingLake) -> None:
    old, new = os.urandom(4 * BS), os.urandom(4 * BS)

    async def main() -> None:
        await put(lake, "k", old)
        reads = _reads(lake)
        await read(reads, "k", ByteRange(0, BS - 1))  # block 0 of the old object in L1
        await drain(reads)
        await put(lake, "k", new)

        stream = await reads.open(B, "k", None, Conditions())  # its first piece is old: no retry now
        received = b""
        with pytest.raises((ObjectChanged, PreconditionFailed)):
            async for piece in stream.body:
                received += piece
        await stream.aclose()
        assert received == old[: len(received)] and len(received) >= 1  # old bytes only, then cut

        assert (await read(reads, "k"))[1] == new  # the failed block GET dropped the metadata

    run(main())


class ReplacedAfterEachHead(CountingLake):
    """A key rewritten right after every HEAD answers (writers as fast as the reader): the
    ETag a HEAD gives is stale by the time its first block is fetched."""

    def __init__(self, lake: Lake) -> None:
        super().__init__(lake)
        self.versions = 0
        self.racing = False

    async def head_object(self, bucket: str, key: str) -> ObjectInfo:
        info = await super().head_object(bucket, key)
        if self.racing:
            self.versions += 1
            await put(self.lake, key, f"version {self.versions}".encode() * 100)
        return info


def test_a_key_replaced_faster_than_it_is_read_is_still_read_whole(lake: CountingLake) -> None:
    async def main() -> None:
        await put(lake.lake, "k", b"version 0" * 100)
        racing = ReplacedAfterEachHead(lake.lake)
        reads = _reads(racing)
        assert (await read(reads, "k"))[1] == b"version 0" * 100  # read here before: HEADs from now on
        await drain(reads)
        racing.racing, racing.heads = True, []
        reads.invalidate(B, "k")
        await drain(reads)  # the old version's blocks dropped: none of them to serve
        _, body = await read(reads, "k")
        assert body == f"version {racing.versions}".encode() * 100  # one version whole, the lake's
        assert racing.heads == ["k", "k"] and counts(reads)["bypass"] == 1  # two tries, then the lake

    run(main())


def test_an_object_deleted_behind_the_metadata_is_no_such_key(lake: CountingLake) -> None:
    async def main() -> None:
        await put(lake, "k", os.urandom(2 * BS))
        reads = _reads(lake)
        await reads.head(B, "k")
        await lake.delete_object(B, "k")
        with pytest.raises(NoSuchKey):
            await read(reads, "k")

    run(main())


# ---- ranges and empty objects ----------------------------------------------------------------------

SIZE = 5 * BS + 300

RANGES = [
    (None, (None, slice(0, SIZE))),
    (ByteRange(0, 0), ((0, 0), slice(0, 1))),
    (ByteRange(BS - 1, BS), ((BS - 1, BS), slice(BS - 1, BS + 1))),  # across a boundary
    (ByteRange(BS, 2 * BS - 1), ((BS, 2 * BS - 1), slice(BS, 2 * BS))),  # exactly one block
    (ByteRange(10, 4 * BS + 10), ((10, 4 * BS + 10), slice(10, 4 * BS + 11))),
    (ByteRange(5 * BS, None), ((5 * BS, SIZE - 1), slice(5 * BS, SIZE))),  # the short last block
    (ByteRange(SIZE - 1, SIZE + 10_000), ((SIZE - 1, SIZE - 1), slice(SIZE - 1, SIZE))),
    (ByteRange(None, suffix=1), ((SIZE - 1, SIZE - 1), slice(SIZE - 1, SIZE))),
    (ByteRange(None, suffix=BS + 1), ((SIZE - BS - 1, SIZE - 1), slice(SIZE - BS - 1, SIZE))),
    (ByteRange(None, suffix=SIZE + 5), ((0, SIZE - 1), slice(0, SIZE))),
]


def _range_id(value: object) -> str | None:
    return range_header(value) if isinstance(value, ByteRange) else None


@pytest.mark.parametrize(("rng", "expected"), RANGES, ids=_range_id)
def test_ranges(
    lake: CountingLake, rng: ByteRange | None, expected: tuple[tuple[int, int] | None, slice]
) -> None:
    data = os.urandom(SIZE)
    content_range, part = expected

    async def main() -> None:
        await put(lake, "k", data)
        reads = _reads(lake)
        for _ in range(2):  # from the lake, then from L1
            stream, body = await read(reads, "k", rng)
            await drain(reads)
            assert (stream.content_range, body) == (content_range, data[part])
        assert counts(reads)["hits"] >= 1

    run(main())


@pytest.mark.parametrize("rng", [ByteRange(SIZE, None), ByteRange(SIZE + 1, SIZE + 5)])
def test_a_range_past_the_end_is_invalid(lake: CountingLake, rng: ByteRange) -> None:
    async def main() -> None:
        await put(lake, "k", os.urandom(SIZE))
        with pytest.raises(InvalidRange) as exc:
            await read(_reads(lake), "k", rng)
        assert exc.value.size == SIZE  # told to the client as Content-Range: bytes */SIZE
        assert len(lake.gets) <= 1  # at most the first block's GET (cold key), then the size is known

    run(main())


def test_a_zero_byte_object(lake: CountingLake) -> None:
    async def main() -> None:
        etag = await put(lake, "empty", b"")
        reads = _reads(lake)
        for _ in range(2):
            stream, body = await read(reads, "empty")
            assert (body, stream.info.size, stream.info.etag, stream.content_range) == (b"", 0, etag, None)
        # a cold key: the first block's GET is refused (416), and a HEAD then says it all
        assert len(lake.gets) == 1 and lake.heads == ["empty"]
        for rng in (ByteRange(0, 0), ByteRange(0, None), ByteRange(None, suffix=1)):
            with pytest.raises(InvalidRange):
                await read(reads, "empty", rng)

    run(main())


@settings(max_examples=60, deadline=None)
@given(size=st.integers(0, 7 * BS), data=st.data())
def test_any_range_reads_the_bytes_the_lake_holds(size: int, data: st.DataObject) -> None:
    content = bytes(i % 251 for i in range(size))
    kind = data.draw(st.sampled_from(["none", "first-last", "open", "suffix"]))
    rng: ByteRange | None = None
    if kind == "suffix":
        rng = ByteRange(None, suffix=data.draw(st.integers(1, size + 2 * BS)))
    elif kind != "none":
        first = data.draw(st.integers(0, size + BS))
        last = None if kind == "open" else first + data.draw(st.integers(0, 3 * BS))
        rng = ByteRange(first, last)

    async def main() -> None:
        lake = memory_lake(B)
        await put(lake, "k", content)
        reads = _reads(lake, readahead=data.draw(st.integers(0, 3)))
        try:
            expected = rng.resolve(size) if rng is not None else None
        except InvalidRange:
            with pytest.raises(InvalidRange):
                await read(reads, "k", rng)
            return
        start, end = expected or (0, size - 1)
        for _ in range(2):
            stream, body = await read(reads, "k", rng)
            assert (stream.content_range, body) == (expected, content[start : end + 1])
            await drain(reads)

    run(main())


# ---- metadata TTL ------------------------------------------------------------------------------


def test_metadata_is_revalidated_after_the_ttl(lake: CountingLake) -> None:
    clock = Clock()
    old, new = os.urandom(2 * BS), os.urandom(2 * BS)

    async def main() -> None:
        await put(lake, "k", old)
        reads = _reads(lake, ttl=5.0, clock=clock)
        assert (await read(reads, "k"))[1] == old
        await drain(reads)
        new_etag = await put(lake, "k", new)  # behind the cache's back

        clock.now += 4.9
        assert (await read(reads, "k"))[1] == old  # within the TTL: the cached version, whole
        assert lake.heads == []  # the cold read got its metadata with its first block
        clock.now += 0.1
        stream, body = await read(reads, "k")
        assert (body, stream.info.etag) == (new, new_etag)
        assert lake.heads == ["k"]  # blocks of the key are cached: a HEAD revalidates them
        assert (await reads.head(B, "k")).etag == new_etag
        assert lake.heads == ["k"]

    run(main())


def test_a_key_read_before_is_revalidated_by_a_head_even_when_its_marker_was_evicted(lake: CountingLake) -> None:
    """Markers are never hit, so LRU evicts them before the blocks they mark: a key whose
    metadata expired is no cold key for that (a first-block GET of a cached block would be cut
    short, its bytes wasted on the lake link)."""
    clock = Clock()
    data = os.urandom(BS)

    async def main() -> None:
        await put(lake, "k", data)
        reads = _reads(lake, ttl=5.0, clock=clock)
        assert (await read(reads, "k"))[1] == data
        await drain(reads)
        reads.store.delete(BlockId.marker(B, "k"))  # evicted
        gets = len(lake.gets)
        clock.now += 6
        assert (await read(reads, "k"))[1] == data
        assert lake.heads == ["k"] and len(lake.gets) == gets  # a HEAD, and the block from L1

    run(main())


def test_a_zero_ttl_asks_the_lake_every_time(lake: CountingLake) -> None:
    async def main() -> None:
        await put(lake, "k", os.urandom(BS))
        reads = _reads(lake, ttl=0)
        for _ in range(3):
            await reads.head(B, "k")
        assert lake.heads == ["k"] * 3

    run(main())


def test_no_cache_reads_skip_the_metadata_and_the_blocks(lake: CountingLake) -> None:
    data = os.urandom(3 * BS)

    async def main() -> None:
        await put(lake, "k", data)
        reads = _reads(lake)
        await read(reads, "k")
        await drain(reads)
        lake.gets.clear()
        token = current.set(RequestContext(TENANT, no_cache=True))
        try:
            assert (await read(reads, "k"))[1] == data
            assert (await read(reads, "k", ByteRange(5, 9)))[1] == data[5:10]
        finally:
            current.reset(token)
        assert lake.gets == [("k", None), ("k", "bytes=5-9")]
        assert counts(reads)["bypass"] == 2

    run(main())


# ---- write-through (CachedLake) --------------------------------------------------------------------


def _cached(lake: Any, reads: ReadPath, **options: Any) -> CachedLake:
    return CachedLake(lake, reads, CacheOnWrite(**options))


def test_a_put_enters_l1_and_reads_back_without_a_lake_get(lake: CountingLake) -> None:
    data = os.urandom(3 * BS + 100)

    async def main() -> None:
        reads = _reads(lake)
        cached = _cached(lake, reads)
        result = await cached.put_object(B, "k", _body(data), len(data), ObjectAttributes())
        for i in range(4):
            assert BlockId.of(B, "k", result.etag, i, BS) in reads.store
        assert (await read(cached, "k"))[1] == data
        assert (await read(cached, "k", ByteRange(BS - 2, 2 * BS + 1)))[1] == data[BS - 2 : 2 * BS + 2]
        assert lake.gets == []
        assert counts(reads)["write_blocks"] == 4

    run(main())


@pytest.mark.parametrize("options", [{"enabled": False}, {"max_bytes": 3 * BS}])
def test_a_put_is_not_cached_when_write_caching_is_off_or_it_is_too_large(
    lake: CountingLake, options: dict[str, Any]
) -> None:
    data = os.urandom(3 * BS + 100)

    async def main() -> None:
        reads = _reads(lake)
        cached = _cached(lake, reads, **options)
        await cached.put_object(B, "k", _body(data), len(data), ObjectAttributes())
        assert len(reads.store) == 0  # type: ignore[arg-type]
        assert (await read(cached, "k"))[1] == data
        assert len(lake.gets) == 4

    run(main())


def test_a_failed_put_caches_nothing(lake: CountingLake) -> None:
    async def failing() -> AsyncIterator[bytes]:
        yield b"x" * BS
        raise RuntimeError("the client went away")

    async def main() -> None:
        reads = _reads(lake)
        with pytest.raises(RuntimeError):
            await _cached(lake, reads).put_object(B, "k", failing(), 2 * BS, ObjectAttributes())
        assert len(reads.store) == 0  # type: ignore[arg-type]

    run(main())


def test_the_write_budget_bounds_the_bodies_held_at_once_and_is_returned(lake: CountingLake) -> None:
    """Two PUTs held at once under a budget of one: the second is written through without being
    kept (and counted), both reach the lake, and the budget is whole again afterwards, also after
    a PUT that failed."""
    first, second = os.urandom(2 * BS), os.urandom(2 * BS)

    async def main() -> None:
        reads = _reads(lake)
        cached = _cached(lake, reads, budget_bytes=2 * BS + 1)
        release = asyncio.Event()

        async def stalled() -> AsyncIterator[bytes]:
            yield first[:BS]
            await release.wait()
            yield first[BS:]

        held = asyncio.ensure_future(cached.put_object(B, "one", stalled(), len(first), ObjectAttributes()))
        await until(lambda: cached.budget.used == len(first))
        await cached.put_object(B, "two", _body(second), len(second), ObjectAttributes())
        assert counts(reads)["write_skipped"] == 1 and counts(reads).get("write_blocks", 0) == 0
        release.set()
        await held
        assert counts(reads)["write_blocks"] == 2 and cached.budget.used == 0
        assert (await read(cached, "one"))[1] == first and (await read(cached, "two"))[1] == second

        async def failing() -> AsyncIterator[bytes]:
            yield b"x"
            raise RuntimeError("the client went away")

        with pytest.raises(RuntimeError):
            await cached.put_object(B, "three", failing(), 2 * BS, ObjectAttributes())
        assert cached.budget.used == 0

    run(main())


@pytest.mark.parametrize("sizes", [[BS], [1] * 5, [BS - 1, 2, BS * 2 + 3], [3 * BS + 7], [7, BS, 1]])
def test_blocks_of_a_kept_body_are_cut_from_its_chunks_whatever_their_sizes(sizes: list[int]) -> None:
    from cachetier.cachedlake import _blocks

    chunks = [os.urandom(n) for n in sizes]
    whole = b"".join(chunks)
    blocks = list(_blocks(chunks, BS))
    assert b"".join(blocks) == whole and chunks == []
    assert all(len(b) == BS for b in blocks[:-1]) and 0 < len(blocks[-1]) <= BS


def test_an_overwrite_through_the_cache_reads_new_bytes_at_once(lake: CountingLake) -> None:
    async def main() -> None:
        reads = _reads(lake, ttl=3600)
        for options in ({}, {"enabled": False}):
            cached = _cached(lake, reads, **options)
            for size in (2 * BS, 2 * BS, 3 * BS + 1, 10):
                data = os.urandom(size)
                etag = (await cached.put_object(B, "k", _body(data), size, ObjectAttributes())).etag
                stream, body = await read(cached, "k")
                assert (body, stream.info.etag) == (data, etag)
                assert (await cached.head_object(B, "k")).etag == etag
                await drain(reads)

    run(main())


def test_an_overwrite_through_the_cache_wins_over_a_head_in_flight(lake: CountingLake) -> None:
    """A HEAD the lake answered before a PUT through the gateway, arriving after it, must not
    bring the old version back: every read that starts after the PUT returned sees the new one."""
    clock = Clock()
    old, new = os.urandom(2 * BS), os.urandom(2 * BS)

    async def main() -> None:
        await put(lake, "k", old)
        reads = _reads(lake, ttl=60, clock=clock)
        cached = _cached(lake, reads)
        assert (await read(cached, "k"))[1] == old  # old blocks in L1
        await drain(reads)
        clock.now += 61  # the metadata expired: the next read revalidates

        lake.hold_heads = asyncio.Event()
        heads_before = lake.answered_heads
        before = asyncio.ensure_future(cached.head_object(B, "k"))  # answered "old", on its way
        await until(lambda: lake.answered_heads == heads_before + 1)
        await cached.put_object(B, "k", _body(new), len(new), ObjectAttributes())

        joined = asyncio.ensure_future(read(cached, "k"))  # starts after the PUT returned
        await asyncio.sleep(0.01)
        lake.hold_heads.set()
        await before
        joined_new = (await joined)[1] == new
        after_new = (await read(cached, "k"))[1] == new
        assert joined_new, "a read started after the PUT joined the HEAD in flight and got the old bytes"
        assert after_new, "the HEAD in flight cached the old metadata after the PUT invalidated it"

    run(main())
