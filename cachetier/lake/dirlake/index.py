"""The per-bucket sqlite index: one row per object, the single commit point of every object
write (see the package docstring), plus the naming rules for buckets and keys it stores.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cachetier.errors import InvalidArgument, KeyTooLongError, NoSuchBucket
from cachetier.lake import ListEntry, ObjectInfo

MAX_KEY_BYTES = 1024
DEFAULT_CONTENT_TYPE = "binary/octet-stream"

_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_IPV4 = re.compile(r"\d+\.\d+\.\d+\.\d+")
_BUCKET_META = "bucket.json"

_SCHEMA = """CREATE TABLE IF NOT EXISTS objects (
    key TEXT PRIMARY KEY,  -- BINARY collation: UTF-8 byte order, S3's listing order
    file TEXT NOT NULL, size INTEGER NOT NULL, etag TEXT NOT NULL,
    last_modified INTEGER NOT NULL, attrs TEXT NOT NULL
) WITHOUT ROWID"""


def valid_bucket_name(name: str) -> bool:
    """S3's rules: 3-63 of [a-z0-9.-], a letter or digit at both ends, no "..", not an IP."""
    return bool(_BUCKET_NAME.fullmatch(name)) and ".." not in name and not _IPV4.fullmatch(name)


def check_key(key: str) -> None:
    """Any non-empty UTF-8 up to 1024 bytes is a key (``../x`` too), except with NUL in it."""
    if not key or "\x00" in key:
        raise InvalidArgument("An object key must be non-empty and must not contain NUL.")
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidArgument("An object key must be valid UTF-8.") from exc
    if size > MAX_KEY_BYTES:
        raise KeyTooLongError()


def _utc(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _checksums(headers: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.startswith("x-amz-checksum-")}


def _lower_keys(headers: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def _without_checksums(headers: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in _lower_keys(headers).items() if not k.startswith("x-amz-checksum-")}


@dataclasses.dataclass(frozen=True)
class _Record:
    """An object's index row."""

    key: str
    file: str
    size: int
    etag: str
    last_modified: int
    content_type: str = DEFAULT_CONTENT_TYPE
    metadata: Mapping[str, str] = dataclasses.field(default_factory=dict)
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    parts: tuple[int, ...] = ()  # part sizes of a multipart object; () for one PUT in one piece

    def info(self, bucket: str) -> ObjectInfo:
        return ObjectInfo(
            bucket, self.key, self.size, self.etag, _utc(self.last_modified),
            self.content_type, dict(self.metadata), dict(self.headers),
        )  # fmt: skip

    def row(self) -> tuple[Any, ...]:
        attrs: dict[str, Any] = {"content_type": self.content_type, "metadata": self.metadata, "headers": self.headers}
        if self.parts:
            attrs["parts"] = list(self.parts)
        return (self.key, self.file, self.size, self.etag, self.last_modified, json.dumps(attrs))

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> _Record:
        key, file, size, etag, last_modified, attrs = row
        a = json.loads(attrs)
        # a row written before DirLake recorded part sizes has none: a single-part object
        parts = tuple(a.get("parts", ()))
        return cls(key, file, size, etag, last_modified, a["content_type"], a["metadata"], a["headers"], parts)


class _BucketIndex:
    """A bucket's folder and sqlite index. Worker threads share the connection, so each use
    holds ``lock``; the lock also orders a reader's lookup-and-open before a writer's unlink of
    the file it replaced, so an open never finds its file gone."""

    def __init__(self, folder: Path, meta: dict[str, Any]) -> None:
        self.folder = folder
        self.meta = meta
        self.lock = threading.Lock()
        self.closed = False  # set when the bucket is deleted
        self._db: sqlite3.Connection | None = None

    @contextlib.contextmanager
    def use(self) -> Iterator[sqlite3.Connection]:
        with self.lock:
            if self.closed or (self._db is None and not (self.folder / _BUCKET_META).exists()):
                raise NoSuchBucket(resource=self.folder.name)
            if self._db is None:
                self._db = sqlite3.connect(
                    self.folder / "index.sqlite3", isolation_level=None, check_same_thread=False, timeout=30
                )
                self._db.execute("PRAGMA journal_mode=WAL")
                # FULL fsyncs the WAL at each commit: a commit is the commit point of a write.
                self._db.execute("PRAGMA synchronous=FULL")
                self._db.execute(_SCHEMA)
            yield self._db

    def release(self, retire: bool = False) -> None:
        """Close the connection (reopened on next use unless ``retire``). Holds no lock: call it
        with ``lock`` held, or when no thread can be using the index."""
        if self._db is not None:
            self._db.close()
            self._db = None
        self.closed = self.closed or retire

    def data_path(self, name: str) -> Path:
        return self.folder / "data" / name[:2] / name


def _get(db: sqlite3.Connection, key: str) -> _Record | None:
    row = db.execute("SELECT * FROM objects WHERE key = ?", (key,)).fetchone()
    return None if row is None else _Record.from_row(row)


def _put(db: sqlite3.Connection, record: _Record, admit: Callable[[str | None], None] | None = None) -> str | None:
    """Insert or replace ``record``; returns the data file the replaced row named. ``admit``, a
    conditional write's check, sees the replaced row's ETag (None: no row) inside the same
    write transaction (BEGIN IMMEDIATE: no other process commits between it and the write), and
    may raise to leave the row as it was."""
    db.execute("BEGIN IMMEDIATE")
    try:
        old = db.execute("SELECT file, etag FROM objects WHERE key = ?", (record.key,)).fetchone()
        if admit is not None:
            admit(None if old is None else str(old[1]))
        db.execute("INSERT OR REPLACE INTO objects VALUES (?, ?, ?, ?, ?, ?)", record.row())
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return None if old is None else str(old[0])


def _delete(db: sqlite3.Connection, keys: list[str], admit: Callable[[str | None], None] | None = None) -> list[str]:
    """Delete rows in one transaction; returns the data files they named. ``admit``, a
    conditional delete's check, sees each row's ETag (None: no row) inside the transaction and
    may raise to leave every row as it was."""
    db.execute("BEGIN IMMEDIATE")
    try:
        files = []
        for key in keys:  # no DELETE ... RETURNING: it needs sqlite 3.35
            row = db.execute("SELECT file, etag FROM objects WHERE key = ?", (key,)).fetchone()
            if admit is not None:
                admit(None if row is None else str(row[1]))
            if row is not None:
                db.execute("DELETE FROM objects WHERE key = ?", (key,))
                files.append(str(row[0]))
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return files


def _scan(db: sqlite3.Connection, lower: str, inclusive: bool, limit: int) -> list[ListEntry]:
    op = ">=" if inclusive else ">"
    sql = f"SELECT key, size, etag, last_modified FROM objects WHERE key {op} ? ORDER BY key LIMIT ?"
    return [ListEntry(k, s, e, _utc(lm)) for k, s, e, lm in db.execute(sql, (lower, limit))]
