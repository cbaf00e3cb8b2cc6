"""What the disk block store (cachetier/blocks/store.py, index.py) assumes of diskcache's
internals, one test per assumption, on a Cache opened with the store's own settings.

diskcache has no public API for the rows, the next eviction victim or a read that leaves its
bookkeeping alone, so the store runs SQL of its own over diskcache's tables (pinned 5.6.3).
Pinning each assumption here beats owning the schema: diskcache's write order, crash safety
and check() stay diskcache's, and an upgrade that changes the layout fails here, loudly, not
as a cache that silently forgets or evicts in the wrong order."""

from __future__ import annotations

import sqlite3
import time
import warnings
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import diskcache  # type: ignore[import-untyped]
import pytest

from cachetier.blocks import index
from cachetier.blocks.ids import BlockId
from cachetier.blocks.store import EVICTION_POLICIES, DiskBlockStore

MiB = 1 << 20


@pytest.fixture(params=sorted(EVICTION_POLICIES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DiskBlockStore]:
    with closing(DiskBlockStore(tmp_path, 64 * MiB, request.param, flush_interval=3600)) as opened:
        yield opened


def _cache(store: DiskBlockStore) -> diskcache.Cache:
    return store._cache  # the store's own Cache: the settings it opens diskcache with


def _block(n: int) -> BlockId:
    return BlockId(f"{n:040x}")


def _columns(path: Path, table: str) -> set[str]:
    with closing(sqlite3.connect(path / "cache.db")) as db:
        return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


def test_the_pinned_version() -> None:
    # every assumption below was checked against this release; re-run them on an upgrade
    assert diskcache.__version__ == "5.6.3"


def test_cache_table_has_the_columns_the_index_reads_and_writes(store: DiskBlockStore, tmp_path: Path) -> None:
    used = {"rowid", "key", "raw", "mode", "filename", "size", "tag", "access_time", "access_count"}
    assert used <= _columns(tmp_path, "Cache")


def test_settings_table_holds_the_keys_the_store_resets(store: DiskBlockStore, tmp_path: Path) -> None:
    assert {"key", "value"} <= _columns(tmp_path, "Settings")
    with closing(sqlite3.connect(tmp_path / "cache.db")) as db:
        keys = {row[0] for row in db.execute("SELECT key FROM Settings")}
    assert {"size", "size_limit", "eviction_policy", "cull_limit"} <= keys


def test_private_sql_runs_a_statement_with_params(store: DiskBlockStore) -> None:
    # index._sql and DiskBlockStore._query: Cache._sql(statement, params) -> a cursor
    assert _cache(store)._sql("SELECT ? + 1", (41,)).fetchall() == [(42,)]


def test_a_block_is_a_raw_key_with_a_binary_file_and_its_tag(store: DiskBlockStore) -> None:
    data = b"x" * 1000
    store.put(_block(1), data)
    rows = index._sql(_cache(store), index._LOAD)
    assert [(key, size, tag) for key, _filename, size, tag in rows] == [(_block(1).hex, 1000, index.checksum_tag(data))]
    assert diskcache.core.MODE_BINARY == 2
    filename = rows[0][1]
    assert (Path(_cache(store).directory) / filename).read_bytes() == data  # relative to the directory
    assert index._sql(_cache(store), index._ROW, _block(1).hex) == [(filename, 1000, index.checksum_tag(data))]


def test_store_time_access_time_and_count_as_a_put_leaves_them(store: DiskBlockStore) -> None:
    before = time.time()
    store.put(_block(1), b"y")
    ((access_time, access_count),) = _cache(store)._sql("SELECT access_time, access_count FROM Cache").fetchall()
    assert before <= access_time <= time.time()  # time.time(), the clock BlockIndex.read uses
    assert access_count == 0


def test_the_policy_names_and_their_victim_queries() -> None:
    queries = {name: diskcache.EVICTION_POLICY[policy]["cull"] for name, policy in EVICTION_POLICIES.items()}
    assert queries == {
        "lru": "SELECT {fields} FROM Cache ORDER BY access_time LIMIT ?",
        "lfu": "SELECT {fields} FROM Cache ORDER BY access_count LIMIT ?",
    }


def test_lfu_ties_go_by_first_store_as_the_memory_twin_assumes(tmp_path: Path) -> None:
    with closing(DiskBlockStore(tmp_path, 64 * MiB, "lfu", flush_interval=3600)) as lfu:
        for n in (3, 1, 2):
            lfu.put(_block(n), b"z")
        lfu.put(_block(3), b"zz")  # a replaced row keeps its rowid
        assert [k for (k,) in lfu._query(lfu._victims, 3)] == [_block(n).hex for n in (3, 1, 2)]


def test_recorded_reads_move_the_victim_order(store: DiskBlockStore) -> None:
    for n in (1, 2):
        store.put(_block(n), b"w")
    time.sleep(0.01)
    store._index.read(_block(1).hex)
    store.flush()
    assert [k for (k,) in store._query(store._victims, 2)] == [_block(2).hex, _block(1).hex]


def test_size_counts_block_bytes_and_volume_adds_the_database(store: DiskBlockStore) -> None:
    store.put(_block(1), b"v" * 5000)
    store.put(_block(2), b"v" * 3000)
    cache = _cache(store)
    assert cache.reset("size") == 8000  # used_bytes()
    assert cache.volume() >= 8000 + 4096  # what _evict_to_capacity compares with capacity
    store.set_capacity(32 * MiB)
    assert cache.reset("size_limit") == store._size_limit()


def test_disk_remove_takes_a_filename_relative_to_the_directory(store: DiskBlockStore) -> None:
    store.put(_block(1), b"u")
    ((filename,),) = _cache(store)._sql("SELECT filename FROM Cache").fetchall()
    _cache(store).disk.remove(filename)
    assert not (Path(_cache(store).directory) / filename).exists()


def test_check_returns_its_warnings_and_fixes_the_rows(store: DiskBlockStore) -> None:
    store.put(_block(1), b"t")
    ((filename,),) = _cache(store)._sql("SELECT filename FROM Cache").fetchall()
    (Path(_cache(store).directory) / filename).unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # as DiskBlockStore._check_index runs it
        problems: list[warnings.WarningMessage] = _cache(store).check(fix=True)
    assert any(filename in str(problem.message) for problem in problems)  # recorded, returned
    assert _cache(store)._sql("SELECT COUNT(*) FROM Cache").fetchall() == [(0,)]


def test_a_busy_database_raises_diskcache_timeout() -> None:
    assert issubclass(diskcache.Timeout, Exception)  # mapped by the store's _index_errors
