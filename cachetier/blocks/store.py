"""Block stores: where one cache tier keeps its blocks (D3N: 4 MiB blocks as files on the node's
SSD). ``DiskBlockStore`` is built on diskcache; ``MemoryBlockStore`` is its in-memory twin for
tests, checked to conform and to behave the same (tests/unit/test_blockstore.py).

Contract, for every implementation:

- ``get`` returns exactly the bytes ``put`` stored, or None: a missing, evicted, vanished or
  corrupt block is a miss, never an exception and never wrong bytes. Each block is stored
  with a checksum and verified on every read; one that fails is deleted and counted.
- Capacity is in bytes, may change at run time, and eviction (``"lru"`` or ``"lfu"``) keeps
  the store within it, one block at a time; the block just put is never its own victim. A
  block larger than the whole capacity is not stored.
- Methods are synchronous and thread-safe; asyncio callers use ``asyncio.to_thread``, except
  where an implementation says a method never waits: ``DiskBlockStore.get`` runs no SQL and
  takes no lock a writer holds (a file read and a checksum: fine inline for small blocks), and
  its ``in`` and ``len`` are dictionary lookups.
- I/O trouble raises OSError (``BlockStoreError`` when the index fails or stays locked), never
  sqlite3's or diskcache's own errors: callers catch OSError alone. A block whose file fails
  to read (EIO) leaves the store's index as it raises, so the next put stores it anew.
- Statistics count this instance's calls: ``hits``, ``misses`` (every get that returned None or
  raised, corrupt ones included), ``puts``, ``evictions``, ``corrupt``. A ``get(...,
  counted=False)`` is a look that is no read of this tier (a re-check, a fallback after another
  tier): it counts neither a hit nor a miss, so ``hits + misses`` is the reads that asked it.

One process owns a ``DiskBlockStore``'s directory. The store keeps its SQLite index in memory
too (``cachetier.blocks.index``), loaded at open and kept in step by its own writes, so that reads
need no SQL; a second process (or a second store in this one) on the same directory would serve
neither the other's new blocks nor notice its evictions (those read as misses: never wrong
bytes, but the two would fight over capacity). Run one gateway process per cache directory.
"""

from __future__ import annotations

import itertools
import logging
import os
import sqlite3
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import diskcache

from cachetier.blocks.index import BlockIndex, Row, checksum_tag, read_file
from cachetier.blocks.ids import BlockId

log = logging.getLogger("lakegate.blockstore")

# Eviction policies by name: policy as data. The values are diskcache's policy names, whose
# victim queries (diskcache.EVICTION_POLICY) the disk store runs.
EVICTION_POLICIES = {"lru": "least-recently-used", "lfu": "least-frequently-used"}
DEFAULT_EVICTION = "lru"

# diskcache's volume() counts block files and the main database, not SQLite's WAL and its
# shared-memory index. Checkpointing every 64 pages and truncating the WAL back to 256 KiB keep
# those two files under this reserve, which the disk store subtracts from its capacity (as long
# as no reader holds a snapshot long enough to starve checkpoints).
_WAL_CHECKPOINT_PAGES = 64
_WAL_SIZE_LIMIT = 256 * 1024
SIDE_FILES_RESERVE = 512 * 1024


class BlockStoreError(OSError):
    """The block index failed (an SQLite error) or stayed locked past the store's timeout."""


@runtime_checkable
class BlockStore(Protocol):
    """See the module docstring for the contract every implementation keeps."""

    hits: int
    misses: int
    puts: int
    evictions: int
    corrupt: int

    def get(self, block_id: BlockId, *, counted: bool = True) -> bytes | None: ...

    def put(self, block_id: BlockId, data: bytes) -> None: ...

    def delete(self, block_id: BlockId) -> bool: ...  # True when a block was removed

    def __contains__(self, block_id: object) -> bool: ...

    @property
    def capacity(self) -> int: ...

    def set_capacity(self, capacity_bytes: int) -> None: ...  # a smaller one evicts at once

    def used_bytes(self) -> int: ...  # bytes of block data, without the index

    def check(self) -> list[str]: ...  # verify, repair, and return one line per problem

    def close(self) -> None: ...


class _Statistics:
    """The counters both stores keep; increments are locked, as callers run in threads."""

    def __init__(self) -> None:
        self.hits = self.misses = self.puts = self.evictions = self.corrupt = 0
        self._stats_lock = threading.Lock()

    def _count(self, name: str, counted: bool = True) -> None:
        if not counted:
            return
        with self._stats_lock:
            setattr(self, name, getattr(self, name) + 1)


class DiskBlockStore(_Statistics):
    """Blocks as files in ``directory``, indexed by diskcache's SQLite database and, for reads,
    by an in-memory copy of it (``cachetier.blocks.index``).

    ``capacity_bytes`` bounds what the directory holds: block files, the database and its WAL
    (see ``SIDE_FILES_RESERVE``). While a put runs the directory may exceed it by that block.
    Blocks survive restarts: reopening the directory finds them (statistics start at zero), and
    their LRU/LFU order as of the last flush of reads (every ``flush_interval`` seconds, before
    every eviction, and at ``close``).

    Reads run no SQL: ``get`` is a dictionary lookup, a file read and a checksum; ``in`` and
    ``len`` are dictionary lookups. So one process owns the directory: a second store (or
    process) on it would neither see the first one's puts nor know its files were evicted.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        capacity_bytes: int,
        eviction: str = DEFAULT_EVICTION,
        *,
        timeout: float = 60.0,
        flush_interval: float = 1.0,
    ) -> None:
        super().__init__()
        policy = _policy_name(eviction)
        self._capacity = _checked_capacity(capacity_bytes)
        # Every change to the database (and so to the index) is made under this lock: puts,
        # deletes, evictions, check(); flushes need none (see BlockIndex.flush). Readers never
        # take it.
        self._write_lock = threading.RLock()
        with _index_errors():
            self._cache = diskcache.Cache(
                os.fspath(directory),
                timeout=timeout,
                size_limit=self._size_limit(),
                eviction_policy=policy,
                cull_limit=0,  # we cull, one block at a time: see _evict_to_capacity
                statistics=0,  # counted in memory here, not by an UPDATE per get
                tag_index=0,
                disk_min_file_size=0,  # every block is a file, as in D3N
                sqlite_wal_autocheckpoint=_WAL_CHECKPOINT_PAGES,
                sqlite_journal_size_limit=_WAL_SIZE_LIMIT,
            )
            self._index = BlockIndex(self._cache.directory, eviction)
            self._victims = diskcache.EVICTION_POLICY[policy]["cull"].format(fields="key", now=0)
            with self._write_lock:
                self._index.load(self._cache)
                # a directory reopened with a smaller capacity than it was filled to
                self._evict_to_capacity()
        self._closing = threading.Event()
        self._flusher = threading.Thread(
            target=_flush_periodically,
            args=(weakref.ref(self), self._closing, flush_interval),
            name=f"blockstore-flush {self._cache.directory}",
            daemon=True,
        )
        self._flusher.start()

    def get(self, block_id: BlockId, *, counted: bool = True) -> bytes | None:
        # No SQL and no lock but the index's: safe on an event loop for small blocks. A block
        # evicted or replaced between the lookup and the open is a miss; one evicted after the
        # open is read whole (an open file outlives its name).
        try:
            data = self._read(block_id.hex)
        except OSError:  # EIO, a directory gone to pieces: the caller's to handle, a miss here
            self._count("misses", counted)
            raise
        self._count("misses" if data is None else "hits", counted)
        return data

    def _read(self, key: str) -> bytes | None:
        row = self._index.find(key)
        if row is None:
            return None
        try:
            data = read_file(row.path, row.size)
        except OSError:
            self._index.forget(key, row)  # unreadable: out of the index, so a fill stores it anew
            raise
        if data is not None and row.matches(data):
            self._index.read(key)
            return data
        if data is None:
            self._index.forget(key, row)  # gone: evicted, replaced, or removed by hand
        else:
            self._drop_corrupt(key, row)
        return None

    def put(self, block_id: BlockId, data: bytes) -> None:
        # Crash safety: a SIGKILL at any point leaves no block that reads back wrong. In
        # diskcache's write order:
        #  1. the bytes go to a new, randomly named file, closed before the index is touched.
        #     Killed here: an orphan file no row names, which check() removes.
        #  2. one SQLite (WAL) transaction inserts or repoints the row: key, file, size,
        #     checksum. Killed before COMMIT: rolled back on the next open. After it: the row
        #     names a complete file (its bytes are in the page cache, which outlives us).
        #  3. after COMMIT, a replaced row's old file is removed. Killed before: an orphan.
        #  4. eviction, in transactions of its own. Killed before: over capacity by this
        #     block until the next put or check().
        # The in-memory index follows the database (and is rebuilt from it at open), so a kill
        # loses at most the reads recorded since the last flush: eviction order, not data.
        # Nothing is fsynced (SQLite runs synchronous=NORMAL), so a power cut may leave a
        # committed row over a short or zeroed file. The checksum, verified on every read,
        # makes that block a miss: the cache may forget, never lie.
        if len(data) > self._size_limit():
            return
        if type(data) is not bytes:
            data = bytes(data)  # diskcache pickles anything else (bytearray, memoryview)
        key, tag = block_id.hex, checksum_tag(data)
        # One writer at a time, and room is made before the bytes land: concurrent puts (read
        # misses, read-ahead) would otherwise each write first and evict after, overshooting
        # the capacity by a block per writer.
        with _index_errors(), self._write_lock:
            self._evict_to_capacity(reserve=len(data))
            self._cache.set(key, data, tag=tag)
            self._index.stored(self._cache, key)
            self._count("puts")
            self._evict_to_capacity(keep=key)

    def delete(self, block_id: BlockId) -> bool:
        with _index_errors(), self._write_lock:
            self._index.flush(self._cache)  # a doomed row is no longer there to delete
            deleted = bool(self._cache.delete(block_id.hex))
            self._index.forget(block_id.hex)
        return deleted

    def __contains__(self, block_id: object) -> bool:
        return isinstance(block_id, BlockId) and block_id.hex in self._index

    def __len__(self) -> int:
        return len(self._index)

    @property
    def capacity(self) -> int:
        return self._capacity

    def set_capacity(self, capacity_bytes: int) -> None:
        self._capacity = _checked_capacity(capacity_bytes)
        with _index_errors(), self._write_lock:
            # kept equal for anyone opening the directory with diskcache itself
            self._cache.reset("size_limit", self._size_limit())
            self._evict_to_capacity()

    def used_bytes(self) -> int:
        with _index_errors():
            return int(self._cache.reset("size"))

    def check(self) -> list[str]:
        """Repair the index and the files (diskcache's check), verify every block's checksum
        (deleting those that fail), and evict down to capacity. Reads every block: for tests,
        start-up after a crash and admin tools, not for a request path."""
        with _index_errors(), self._write_lock:
            self._index.flush(self._cache)
            problems = self._check_index()
            self._index.load(self._cache)  # rows diskcache's check deleted or repaired
            problems += self._check_blocks()
            self._index.flush(self._cache)
            self._evict_to_capacity()
        return problems

    def flush(self) -> None:
        """Write the reads recorded since the last flush to the database (and delete the rows
        of blocks found corrupt): a restart then sees them. Runs by itself every
        ``flush_interval`` seconds, before every eviction, and at ``close``."""
        with _index_errors():
            self._index.flush(self._cache)

    def close(self) -> None:
        self._closing.set()
        if self._flusher is not threading.current_thread():
            self._flusher.join()
        try:
            self.flush()
        finally:
            self._cache.close()

    def _size_limit(self) -> int:
        return max(self._capacity - SIDE_FILES_RESERVE, 0)

    def _evict_to_capacity(self, keep: str | None = None, reserve: int = 0) -> None:
        # diskcache culls cull_limit blocks at once when volume() reaches size_limit, and
        # cull() in tens: either would empty 40 MiB to make room for 4. So blocks leave one at
        # a time, in diskcache's policy order, never the block just put (else LFU would evict
        # every newcomer, which has no reads yet, while the store is full of read blocks).
        # The caller holds the write lock.
        if self._cache.volume() + reserve <= self._size_limit():
            return
        self._index.flush(self._cache)  # the policy query sees every read so far
        while self._cache.volume() + reserve > self._size_limit():
            victims = [k for (k,) in self._query(self._victims, 2) if k != keep]
            if not victims:
                return
            if self._cache.delete(victims[0]):
                self._count("evictions")
            self._index.forget(victims[0])

    def _check_index(self) -> list[str]:
        # diskcache reports through warnings.warn; "always" keeps each report a record, not an
        # exception (-W error) nor a repeat the default filter drops. (Filters are process-wide
        # meanwhile: check() is no hot path.)
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            problems = [str(w.message) for w in self._cache.check(fix=True)]
        # diskcache walks top-down, so a directory emptied by removing its empty subdirectory
        # (around an orphan it deleted) would only be reported by the next check.
        root = self._cache.directory
        for path, _, _ in os.walk(root, topdown=False):
            if path != root and not os.listdir(path):
                with suppress(OSError):  # a concurrent put just made it its home
                    os.rmdir(path)
                    problems.append(f"empty directory: {path}")
        return problems

    def _check_blocks(self) -> list[str]:
        problems = []
        for key, row in self._index.items():
            data = read_file(row.path, row.size)
            if data is not None and not row.matches(data):
                problems.append(f"corrupt block {key}: checksum mismatch, deleted")
                self._drop_corrupt(key, row)
        return problems

    def _drop_corrupt(self, key: str, row: Row) -> None:
        # Out of the index and off the disk now, its row at the next flush (no SQL here: get
        # may run on an event loop). A put that replaced the block meanwhile keeps its copy.
        self._index.doom(key, row)
        self._cache.disk.remove(self._index.filename(row))
        self._count("corrupt")

    def _flush_in_background(self) -> None:
        try:
            self.flush()
        except Exception as exc:  # noqa: BLE001 - logged; what is not written waits for the next
            log.warning("could not flush block reads to %s: %s", self._cache.directory, exc)

    def _query(self, statement: str, *params: Any) -> list[tuple[Any, ...]]:
        # diskcache has no public query for a policy's next victim: its (pinned 5.6.3)
        # connection runs our SELECTs.
        rows: list[tuple[Any, ...]] = self._cache._sql(statement, params).fetchall()
        return rows


def _flush_periodically(
    store_ref: weakref.ref[DiskBlockStore], closing: threading.Event, interval: float
) -> None:
    # Holds the store weakly: a store dropped without close() ends this thread too.
    try:
        while not closing.wait(interval):
            store = store_ref()
            if store is None:
                return
            store._flush_in_background()
            del store
    finally:
        store = store_ref()
        if store is not None:
            store._cache.close()  # this thread's connection


@dataclass
class _Entry:
    data: bytes
    stored: int  # order of first store: diskcache's rowid, which breaks LFU ties
    used: int  # last put or get, for LRU
    reads: int = 0  # gets since the last put, for LFU


# The twin's victim order for each policy name, matching diskcache's queries.
_MEMORY_ORDER: dict[str, Callable[[_Entry], tuple[int, ...]]] = {
    "lru": lambda entry: (entry.used,),
    "lfu": lambda entry: (entry.reads, entry.stored),
}


class MemoryBlockStore(_Statistics):
    """The in-memory twin of ``DiskBlockStore``: same contract and eviction order; capacity
    bounds block bytes alone (it has no index to pay for), and nothing can corrupt it."""

    def __init__(self, capacity_bytes: int, eviction: str = DEFAULT_EVICTION) -> None:
        super().__init__()
        _policy_name(eviction)
        self._order = _MEMORY_ORDER[eviction]
        self._capacity = _checked_capacity(capacity_bytes)
        self._entries: dict[BlockId, _Entry] = {}
        self._clock = itertools.count()
        self._lock = threading.RLock()

    def get(self, block_id: BlockId, *, counted: bool = True) -> bytes | None:
        with self._lock:
            entry = self._entries.get(block_id)
            if entry is None:
                self._count("misses", counted)
                return None
            entry.used = next(self._clock)
            entry.reads += 1
            self._count("hits", counted)
            return entry.data

    def put(self, block_id: BlockId, data: bytes) -> None:
        if len(data) > self._capacity:
            return
        with self._lock:
            tick = next(self._clock)
            old = self._entries.get(block_id)
            stored = tick if old is None else old.stored
            self._entries[block_id] = _Entry(bytes(data), stored=stored, used=tick)
            self._count("puts")
            self._evict_to_capacity(keep=block_id)

    def delete(self, block_id: BlockId) -> bool:
        with self._lock:
            return self._entries.pop(block_id, None) is not None

    def __contains__(self, block_id: object) -> bool:
        with self._lock:
            return block_id in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def capacity(self) -> int:
        return self._capacity

    def set_capacity(self, capacity_bytes: int) -> None:
        with self._lock:
            self._capacity = _checked_capacity(capacity_bytes)
            self._evict_to_capacity()

    def used_bytes(self) -> int:
        with self._lock:
            return sum(len(entry.data) for entry in self._entries.values())

    def check(self) -> list[str]:
        return []

    def close(self) -> None:
        pass

    def _evict_to_capacity(self, keep: BlockId | None = None) -> None:
        while self.used_bytes() > self._capacity:
            victims = [(self._order(e), i) for i, e in self._entries.items() if i != keep]
            if not victims:
                return
            del self._entries[min(victims)[1]]
            self._count("evictions")


def _policy_name(eviction: str) -> str:
    try:
        return EVICTION_POLICIES[eviction]
    except KeyError:
        known = ", ".join(sorted(EVICTION_POLICIES))
        raise ValueError(f"unknown eviction policy {eviction!r} (known: {known})") from None


def _checked_capacity(capacity_bytes: int) -> int:
    if capacity_bytes < 0:
        raise ValueError(f"capacity must be >= 0 bytes, not {capacity_bytes}")
    return capacity_bytes


@contextmanager
def _index_errors() -> Iterator[None]:
    try:
        yield
    except diskcache.Timeout as exc:
        raise BlockStoreError("the block index stayed locked past its timeout") from exc
    except sqlite3.Error as exc:
        raise BlockStoreError(f"the block index failed: {exc}") from exc
