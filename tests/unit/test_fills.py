"""Cold fills keep the event loop free for hits: a fetched block's big copies and stores run in
threads, not on the loop (the read path over the in-memory lake and block store, 1 KiB blocks
served in 300-byte pieces, as in test_readpath)."""

from __future__ import annotations

import os
import threading

import pytest
from doubles import BS, B, Clock, CountingLake, drain, memory_lake, put, read, run

from cachetier.blocks.ids import BlockId
from cachetier.blocks.store import MemoryBlockStore
from cachetier.read import sources
from cachetier.read.config import ReadConfig
from cachetier.read.path import ReadPath
from cachetier.telemetry.counters import CacheStats


def _reads(lake: CountingLake, store: MemoryBlockStore) -> ReadPath:
    return ReadPath(lake, store, CacheStats(), ReadConfig(block_size=BS, meta_ttl=60.0, readahead=2), clock=Clock())


def test_a_fetched_block_is_joined_and_stored_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    data = os.urandom(3 * BS)
    joins: list[tuple[int, bool]] = []  # (pieces, on the loop's thread)
    loop_thread = threading.get_ident()
    join = sources._joined

    def recorded(chunks: list[bytes]) -> bytes:
        joins.append((len(chunks), threading.get_ident() == loop_thread))
        return join(chunks)

    monkeypatch.setattr(sources, "_joined", recorded)
    lake = CountingLake(memory_lake(B))
    store = MemoryBlockStore(1 << 20)

    async def main() -> str:
        etag = await put(lake, "k", data)
        reads = _reads(lake, store)
        _, body = await read(reads, "k")
        await drain(reads)
        assert body == data
        return etag

    etag = run(main())
    assert len(joins) == 3 and all(pieces > 1 for pieces, _ in joins)  # 1 KiB in 300-byte pieces
    assert not any(on_loop for _, on_loop in joins)
    assert [store.get(BlockId.of(B, "k", etag, i, BS)) for i in range(3)] == [data[:BS], data[BS:2 * BS], data[2 * BS:]]
