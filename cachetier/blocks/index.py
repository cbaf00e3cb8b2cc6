"""The disk store's in-memory index (see ``cachetier.blocks.store``): which blocks the store holds,
where their files are and what their checksums are, plus the reads not yet written to SQLite.

diskcache's SQLite database stays the record: the index is loaded from it at open (one SELECT),
and the store's writers (put, delete, eviction, check) change a row first and the index after,
one at a time under the store's write lock. Readers only look here, so a hit runs no SQL:

- a read is recorded in memory (``read``) and written to the rows' ``access_time`` (LRU) or
  ``access_count`` (LFU) by ``flush``, which the store runs before it picks an eviction victim
  (so diskcache's policy query sees every read) and every second or so (so a restart does);
- a block found corrupt leaves the index and its file at once, and its row at the next flush
  (``doom``), deleted only if it still names that file: a put that replaced the block
  meanwhile keeps its fresh copy.

Only this process changes the database: one store per directory (see the store's docstring).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import diskcache
from awscrt.checksums import crc32c

_TAG_PREFIX = "crc32c:"

# Rows changed per transaction by a flush: each touches a few pages (the row's, and the policy
# index's), so the WAL stays well under the store's SIDE_FILES_RESERVE between checkpoints.
_FLUSH_CHUNK = 16

_LOAD = (
    "SELECT key, filename, size, tag FROM Cache"
    f" WHERE raw = 1 AND mode = {diskcache.core.MODE_BINARY} AND filename IS NOT NULL"
)
_ROW = "SELECT filename, size, tag FROM Cache WHERE key = ? AND raw = 1"
_DELETE = "DELETE FROM Cache WHERE key = ? AND raw = 1 AND filename = ?"
# Parameters (value, key). MAX: a put that set access_time since the read is not undone.
_RECORD_READS = {
    "lru": "UPDATE Cache SET access_time = MAX(access_time, ?) WHERE key = ? AND raw = 1",
    "lfu": "UPDATE Cache SET access_count = access_count + ? WHERE key = ? AND raw = 1",
}


def checksum_tag(data: bytes) -> str:
    """The checksum as stored in the block's row (diskcache's tag column), committed in the
    same transaction as the file name, so the file holds exactly the block's bytes and a file
    torn after the commit cannot bring a matching checksum along. Self-describing, so a later
    algorithm can replace it: a tag of any other form never matches and reads as corrupt."""
    return f"{_TAG_PREFIX}{crc32c(data):08x}"


def tag_checksum(tag: object) -> int | None:
    """The crc32c a tag holds, or None (which no data matches) for a tag of any other form."""
    if not isinstance(tag, str) or not tag.startswith(_TAG_PREFIX):
        return None
    digits = tag[len(_TAG_PREFIX) :]
    try:
        value = int(digits, 16)
    except ValueError:
        return None
    return value if f"{value:08x}" == digits else None


@dataclass(frozen=True, slots=True, eq=False)
class Row:
    """One block's row, as far as a read needs it. Compared by identity: a put makes a new one,
    so a reader can tell whether the row it read is still the current one."""

    path: str  # the store's directory + the row's filename
    size: int
    checksum: int | None  # see tag_checksum

    def matches(self, data: bytes) -> bool:
        return bool(crc32c(data) == self.checksum)


def read_file(path: str, size: int) -> bytes | None:
    """The first ``size`` bytes of the file (fewer if it is shorter), or None if it is gone.
    Bytes past ``size`` are not read: the checksum covers the block, not the file."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        data = os.read(fd, size)
        remaining = size - len(data)
        if remaining > 0:  # a short read (some file systems) or a short file
            parts = [data]
            while remaining > 0 and (part := os.read(fd, remaining)):
                parts.append(part)
                remaining -= len(part)
            data = b"".join(parts)
    finally:
        os.close(fd)
    return data


class BlockIndex:
    """Rows by key, and the reads and deletions not yet flushed to the database. Thread-safe:
    a short lock guards the dictionaries, and is never held across I/O."""

    def __init__(self, directory: str, eviction: str) -> None:
        self._prefix = os.path.join(directory, "")  # a file's path is this + its filename
        self._record_reads = _RECORD_READS[eviction]
        self._lfu = eviction == "lfu"
        self._lock = threading.Lock()
        # One flush at a time: one that finds nothing to do has waited for the one running, so
        # the database then holds every read recorded before it was called.
        self._flush_lock = threading.Lock()
        self._rows: dict[str, Row] = {}
        self._reads: dict[str, float] = {}  # LRU: time of the last read; LFU: reads since
        self._doomed: list[tuple[str, str]] = []  # (key, filename) rows to delete

    # ---- readers: memory only ----------------------------------------------------------

    def find(self, key: str) -> Row | None:
        return self._rows.get(key)

    def __contains__(self, key: str) -> bool:
        return key in self._rows

    def __len__(self) -> int:
        return len(self._rows)

    def items(self) -> list[tuple[str, Row]]:
        with self._lock:
            return list(self._rows.items())

    def read(self, key: str) -> None:
        """Record a hit, for the eviction policy."""
        with self._lock:
            if self._lfu:
                self._reads[key] = self._reads.get(key, 0) + 1
            else:
                # diskcache's own clock for access_time: wall time, as diskcache stamps its rows
                # with it, so not an injected clock
                self._reads[key] = time.time()

    def forget(self, key: str, row: Row | None = None) -> None:
        """Drop the key (only if it is still ``row``, when given): its row is gone or the
        file it names has vanished."""
        with self._lock:
            current = self._rows.get(key)
            if current is not None and (row is None or current is row):
                del self._rows[key]
                self._reads.pop(key, None)

    def doom(self, key: str, row: Row) -> None:
        """Drop a corrupt block now and its row at the next flush (if it still names the
        file: a put may have replaced it meanwhile)."""
        self.forget(key, row)
        with self._lock:
            self._doomed.append((key, self.filename(row)))

    # ---- writers: in step with the database, under the store's write lock (but flush) ----

    def load(self, cache: diskcache.Cache) -> None:
        found = _sql(cache, _LOAD)
        rows = {key: self._row(filename, size, tag) for key, filename, size, tag in found}
        with self._lock:
            self._rows = rows

    def stored(self, cache: diskcache.Cache, key: str) -> None:
        """Take the key's row from the database after a put: a new file, and no reads yet."""
        found = _sql(cache, _ROW, key)
        with self._lock:
            self._reads.pop(key, None)
            if found:
                self._rows[key] = self._row(*found[0])
            else:
                self._rows.pop(key, None)

    def flush(self, cache: diskcache.Cache) -> None:
        """Write the recorded reads and delete the doomed rows. What a failing transaction
        did not write is kept for the next flush. Needs no write lock: its deletions are
        conditional, and its updates only move rows in the eviction order."""
        with self._flush_lock:
            with self._lock:
                reads, self._reads = self._reads, {}
                doomed, self._doomed = self._doomed, []
            self._write(cache, reads, doomed)

    def _write(
        self, cache: diskcache.Cache, reads: dict[str, float], doomed: list[tuple[str, str]]
    ) -> None:
        read_rows = [(value, key) for key, value in reads.items()]
        try:
            _in_chunks(cache, _DELETE, doomed, self._undoom)
        except BaseException:
            self._unread(read_rows)
            raise
        _in_chunks(cache, self._record_reads, read_rows, self._unread)

    def _undoom(self, rows: Sequence[tuple[Any, ...]]) -> None:
        with self._lock:
            self._doomed[:0] = rows

    def _unread(self, rows: Sequence[tuple[Any, ...]]) -> None:
        with self._lock:
            for value, key in rows:
                before = self._reads.get(key)
                if before is None:
                    self._reads[key] = value
                else:
                    self._reads[key] = before + value if self._lfu else max(before, value)

    def filename(self, row: Row) -> str:
        """The row's filename, as the database has it (relative to the store's directory)."""
        return row.path[len(self._prefix) :]

    def _row(self, filename: str, size: int, tag: object) -> Row:
        return Row(self._prefix + filename, size, tag_checksum(tag))


def _sql(cache: diskcache.Cache, statement: str, *params: Any) -> list[tuple[Any, ...]]:
    # diskcache (pinned 5.6.3) has no public query for rows, nor one that leaves its LRU/LFU
    # bookkeeping alone: its connection for this thread runs our statements. Each thing they
    # assume of its tables is pinned by tests/unit/test_diskcache_assumptions.py.
    rows: list[tuple[Any, ...]] = cache._sql(statement, params).fetchall()
    return rows


def _in_chunks(
    cache: diskcache.Cache,
    statement: str,
    rows: Sequence[tuple[Any, ...]],
    keep: Callable[[Sequence[tuple[Any, ...]]], None],
) -> None:
    for start in range(0, len(rows), _FLUSH_CHUNK):
        try:
            with cache.transact():
                for params in rows[start : start + _FLUSH_CHUNK]:
                    _sql(cache, statement, *params)
        except BaseException:
            keep(rows[start:])
            raise
