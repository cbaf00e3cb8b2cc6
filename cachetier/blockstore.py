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
- Methods are synchronous and thread-safe; asyncio callers use ``asyncio.to_thread``.
- I/O trouble raises OSError (``BlockStoreError`` when the index fails or stays locked).
- Statistics count this instance's calls: ``hits``, ``misses`` (every get that returned None,
  corrupt ones included), ``puts``, ``evictions``, ``corrupt``.
"""

from __future__ import annotations

import itertools
import os
import sqlite3
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import diskcache  # type: ignore[import-untyped]
from awscrt.checksums import crc32c

from cachetier.blocks import BlockId

# Eviction policies by name: policy as data. The values are diskcache's policy names, whose
# victim queries (diskcache.EVICTION_POLICY) the disk store runs.
EVICTION_POLICIES = {"lru": "least-recently-used", "lfu": "least-frequently-used"}

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

    def get(self, block_id: BlockId) -> bytes | None: ...

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

    def _count(self, name: str) -> None:
        with self._stats_lock:
            setattr(self, name, getattr(self, name) + 1)


class DiskBlockStore(_Statistics):
    """Blocks as files in ``directory``, indexed by diskcache's SQLite database.

    ``capacity_bytes`` bounds what the directory holds: block files, the database and its WAL
    (see ``SIDE_FILES_RESERVE``). While a put runs the directory may exceed it by that block.
    Blocks survive restarts: reopening the directory finds them (statistics start at zero).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        capacity_bytes: int,
        eviction: str = "lru",
        *,
        timeout: float = 60.0,
    ) -> None:
        super().__init__()
        policy = _policy_name(eviction)
        self._capacity = _checked_capacity(capacity_bytes)
        self._evict_lock = threading.Lock()
        self._put_lock = threading.Lock()
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
            # a directory reopened with a smaller capacity than it was filled to
            self._evict_to_capacity()

    def get(self, block_id: BlockId) -> bytes | None:
        # The index transaction (a write: LRU/LFU bookkeeping) only opens the file; the bytes
        # are read after it, so readers don't queue on the lock. An open handle reads a block
        # evicted meanwhile whole.
        with _index_errors():
            found, tag = self._cache.get(block_id.hex, read=True, tag=True)
        if found is None:
            self._count("misses")
            return None
        if isinstance(found, bytes):
            data = found
        else:
            with found:
                data = found.read()
        if tag != _checksum_tag(data):
            self._drop_corrupt(block_id.hex)
            self._count("misses")
            return None
        self._count("hits")
        return data

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
        # Nothing is fsynced (SQLite runs synchronous=NORMAL), so a power cut may leave a
        # committed row over a short or zeroed file. The checksum, verified on every read,
        # makes that block a miss: the cache may forget, never lie.
        if len(data) > self._size_limit():
            return
        if type(data) is not bytes:
            data = bytes(data)  # diskcache pickles anything else (bytearray, memoryview)
        # One writer at a time, and room is made before the bytes land: concurrent puts (read
        # misses, read-ahead) would otherwise each write first and evict after, overshooting
        # the capacity by a block per writer.
        with _index_errors(), self._put_lock:
            self._evict_to_capacity(reserve=len(data))
            self._cache.set(block_id.hex, data, tag=_checksum_tag(data))
            self._count("puts")
            self._evict_to_capacity(keep=block_id.hex)

    def delete(self, block_id: BlockId) -> bool:
        with _index_errors():
            return bool(self._cache.delete(block_id.hex))

    def __contains__(self, block_id: object) -> bool:
        if not isinstance(block_id, BlockId):
            return False
        with _index_errors():
            return block_id.hex in self._cache

    def __len__(self) -> int:
        with _index_errors():
            return int(self._cache.reset("count"))

    @property
    def capacity(self) -> int:
        return self._capacity

    def set_capacity(self, capacity_bytes: int) -> None:
        self._capacity = _checked_capacity(capacity_bytes)
        with _index_errors():
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
        with _index_errors():
            problems = self._check_index()
            problems += self._check_blocks()
            self._evict_to_capacity()
        return problems

    def close(self) -> None:
        self._cache.close()

    def _size_limit(self) -> int:
        return max(self._capacity - SIDE_FILES_RESERVE, 0)

    def _evict_to_capacity(self, keep: str | None = None, reserve: int = 0) -> None:
        # diskcache culls cull_limit blocks at once when volume() reaches size_limit, and
        # cull() in tens: either would empty 40 MiB to make room for 4. So blocks leave one at
        # a time, in diskcache's policy order, never the block just put (else LFU would evict
        # every newcomer, which has no reads yet, while the store is full of read blocks).
        template = diskcache.EVICTION_POLICY[self._cache.eviction_policy]["cull"]
        select = template.format(fields="key", now=0)
        with self._evict_lock:
            while self._cache.volume() + reserve > self._size_limit():
                victims = [k for (k,) in self._query(select, 2) if k != keep]
                if not victims:
                    return
                if self._cache.delete(victims[0]):
                    self._count("evictions")

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
        for key, tag, mode, filename, value in self._query(
            "SELECT key, tag, mode, filename, value FROM Cache"
        ):
            try:
                data = self._cache.disk.fetch(mode, filename, value, False)
            except OSError:
                continue  # evicted or replaced since the query
            if tag != _checksum_tag(data):
                problems.append(f"corrupt block {key}: checksum mismatch, deleted")
                self._drop_corrupt(key)
        return problems

    def _drop_corrupt(self, key: str) -> None:
        # A writer may have replaced the block since it was read; deleting the fresh copy
        # then costs one miss, which is cheaper than a second index lookup on every failure.
        self._cache.delete(key)
        self._count("corrupt")

    def _query(self, statement: str, *params: Any) -> list[tuple[Any, ...]]:
        # diskcache has no public query for a policy's next victim, nor one for a row's tag that
        # leaves LRU/LFU bookkeeping alone: its (pinned 5.6.3) connection runs our SELECTs.
        rows: list[tuple[Any, ...]] = self._cache._sql(statement, params).fetchall()
        return rows


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

    def __init__(self, capacity_bytes: int, eviction: str = "lru") -> None:
        super().__init__()
        _policy_name(eviction)
        self._order = _MEMORY_ORDER[eviction]
        self._capacity = _checked_capacity(capacity_bytes)
        self._entries: dict[BlockId, _Entry] = {}
        self._clock = itertools.count()
        self._lock = threading.RLock()

    def get(self, block_id: BlockId) -> bytes | None:
        with self._lock:
            entry = self._entries.get(block_id)
            if entry is None:
                self._count("misses")
                return None
            entry.used = next(self._clock)
            entry.reads += 1
            self._count("hits")
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


def _checksum_tag(data: bytes) -> str:
    # Stored in the block's index row (diskcache's tag column), committed in the same
    # transaction as the file name, so the file holds exactly the block's bytes and a file torn
    # after the commit cannot bring a matching checksum along. Self-describing, so a later
    # algorithm can replace it: a tag of any other form never matches and reads as corrupt.
    return f"crc32c:{crc32c(data):08x}"


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
