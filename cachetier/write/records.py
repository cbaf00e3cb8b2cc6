"""The write-back journal's values (``Version``, ``Upload``, ``Recovered``), its staged bodies
(``Staged``) and how they are kept as rows of its sqlite index; the journal itself, its crash
order and recovery rules are ``cachetier.write.journal``."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from types import TracebackType

SCHEMA = """
CREATE TABLE IF NOT EXISTS versions (
    bucket TEXT NOT NULL, key TEXT NOT NULL, seq INTEGER NOT NULL,
    kind TEXT NOT NULL, etag TEXT NOT NULL, size INTEGER NOT NULL, last_modified REAL NOT NULL,
    content_type TEXT, metadata TEXT NOT NULL, headers TEXT NOT NULL, part_sizes TEXT NOT NULL,
    tenant TEXT NOT NULL, holders TEXT NOT NULL, position INTEGER NOT NULL,
    verified INTEGER NOT NULL, sync INTEGER NOT NULL, md5 TEXT NOT NULL, file TEXT, flush_pid INTEGER,
    PRIMARY KEY (bucket, key, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS versions_local ON versions (seq, position, size, last_modified)
    WHERE position >= 0;
CREATE TABLE IF NOT EXISTS gone (
    bucket TEXT NOT NULL, key TEXT NOT NULL, seq INTEGER NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (bucket, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS flushes (
    bucket TEXT NOT NULL, key TEXT NOT NULL, seq INTEGER NOT NULL, pid INTEGER NOT NULL,
    PRIMARY KEY (bucket, key, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS lake_uploads (
    upload_id TEXT PRIMARY KEY, bucket TEXT NOT NULL, key TEXT NOT NULL, at REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS uploads (
    upload_id TEXT PRIMARY KEY, bucket TEXT NOT NULL, key TEXT NOT NULL, attrs TEXT NOT NULL,
    tenant TEXT NOT NULL, created REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS uploads_by_key ON uploads (bucket, key, upload_id);
CREATE TABLE IF NOT EXISTS parts (
    upload_id TEXT NOT NULL, number INTEGER NOT NULL, file TEXT NOT NULL, etag TEXT NOT NULL,
    size INTEGER NOT NULL, last_modified REAL NOT NULL, PRIMARY KEY (upload_id, number)
) WITHOUT ROWID;
"""

COLUMNS = (
    "bucket, key, seq, kind, etag, size, last_modified, content_type, metadata, headers, part_sizes,"
    " tenant, holders, position, verified, sync, md5"
)
INSERT_ROW = f"INSERT INTO versions ({COLUMNS}, file) VALUES ({', '.join('?' * 18)})"


class JournalError(OSError):
    """The journal's index failed (a sqlite error, mapped at this boundary)."""


@dataclass(frozen=True)
class Version:
    """One acknowledged write of a key, local (its body is in this journal) or a notice."""

    bucket: str
    key: str
    seq: int  # orders the versions of one key (assigned by the writer)
    kind: str  # "put" or "delete"
    etag: str = ""  # quoted, as S3 gives it ("" for a delete)
    size: int = 0
    last_modified: float = 0.0  # epoch seconds (the acknowledgement time)
    content_type: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    part_sizes: tuple[int, ...] = ()  # an object assembled from multipart parts: their sizes
    tenant: str = "-"
    holders: tuple[str, ...] = ()  # node ids that hold a durable copy, in replica order
    position: int = -1  # this node's index in holders; -1: a notice (the body is elsewhere)
    verified: bool = True  # False after a restart until the flusher checked it is still wanted
    sync: int = 1  # K: how many of holders got their copy before the write was acknowledged
    md5: str = field(default="", compare=False)  # hex MD5 of the body (the journal sets it at commit)

    @property
    def local(self) -> bool:
        return self.position >= 0


@dataclass(frozen=True)
class Recovered:
    bodies: int  # local versions kept
    orphans: int  # body/tmp/part files removed (never committed)
    notices: int  # notice rows dropped


@dataclass(frozen=True)
class Upload:
    upload_id: str
    bucket: str
    key: str
    attrs: dict[str, object]
    tenant: str
    created: float


class Staged:
    """A body being written to a tmp file of the journal, by one thread. ``commit`` or
    ``commit_part`` takes it; ``abort`` (or leaving a ``with`` block by an exception) removes it."""

    def __init__(self, path: str, sync: bool) -> None:
        self.path = path
        self.size = 0
        self._md5 = hashlib.md5()
        self._sync = sync
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)

    def write(self, data: bytes | memoryview) -> None:
        if self._fd is None:
            raise ValueError("write to a staged body already committed or aborted")
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        self._md5.update(data)
        self.size += len(data)

    def md5_hex(self) -> str:
        return self._md5.hexdigest()

    def abort(self) -> None:
        self._close()
        if self.path:
            with suppress(FileNotFoundError):
                os.unlink(self.path)
            self.path = ""

    def seal(self) -> str:
        """For the journal's commit (steps 1-2): fsync and close; the path it renames next."""
        if self._fd is None or not self.path:
            raise ValueError("a staged body already committed or aborted")
        if self._sync:
            os.fsync(self._fd)
        self._close()
        return self.path

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> Staged:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if kind is not None:
            self.abort()


def prefix_end(prefix: str) -> str | None:
    """The least string above every string starting with ``prefix`` (UTF-8 byte order is code
    point order), or None when there is none."""
    while prefix:
        last = ord(prefix[-1]) + 1
        last = 0xE000 if 0xD800 <= last < 0xE000 else last
        if last <= 0x10FFFF:
            return prefix[:-1] + chr(last)
        prefix = prefix[:-1]
    return None


def version_of(row: sqlite3.Row) -> Version:
    return Version(
        bucket=row["bucket"], key=row["key"], seq=row["seq"], kind=row["kind"], etag=row["etag"],
        size=row["size"], last_modified=row["last_modified"], content_type=row["content_type"],
        metadata=json.loads(row["metadata"]), headers=json.loads(row["headers"]),
        part_sizes=tuple(json.loads(row["part_sizes"])), tenant=row["tenant"],
        holders=tuple(json.loads(row["holders"])), position=row["position"], verified=bool(row["verified"]),
        sync=row["sync"], md5=row["md5"],
    )  # fmt: skip


def row_values(v: Version, file: str | None, md5: str | None = None) -> tuple[object, ...]:
    return (
        v.bucket, v.key, v.seq, v.kind, v.etag, v.size, v.last_modified, v.content_type,
        json.dumps(dict(v.metadata)), json.dumps(dict(v.headers)), json.dumps(list(v.part_sizes)),
        v.tenant, json.dumps(list(v.holders)), v.position, int(v.verified), v.sync, md5 or v.md5, file,
    )  # fmt: skip
