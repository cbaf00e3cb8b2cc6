"""DirLake: the embedded lake, a local folder that answers as S3 (AWS, Ceph RGW) would.

Layout under ``root``::

    .tmp/                     files and folders being written; stale ones are removed at start
    .uploads/<upload_id>/     one multipart upload
        upload.json           {bucket, bucket_id, key, initiated, content_type, metadata, headers}
        <nnnnn>.json          part n: {file, size, etag, last_modified}; its rename commits the part
        <nnnnn>.<nonce>.part  part n's bytes
    <bucket>/
        bucket.json           {id, created, location}
        index.sqlite3         key -> data file, size, etag, last_modified, attributes (WAL mode)
        data/<xx>/<name>      object bytes; <name> is a fresh uuid4 hex per write, <xx> its start

Keys never become paths. S3 lets "a", "a/" and "a/b" coexist and "../x" or "/abs" are legal
keys; here a key is only a row in the bucket's sqlite index, so no key can reach outside root.
The index lists in S3 order (BINARY collation is UTF-8 byte order) by range queries, which keeps
10k-key listings cheap, and its commit is the single commit point of every object write. Data
files get a fresh name per write, so a write never touches a file a reader has open, and an
overwritten object's old file is unlinked only after the new row is committed (see _commit).

Bucket names are checked by S3's rules on create; any other call naming something that cannot
be a bucket answers NoSuchBucket. Bucket names never start with ".", so .tmp and .uploads can't
be buckets. Upload ids are checked against their own format before they touch a path.

Run one DirLake per root. Start-up recovery only removes leftovers older than ``stale_after``
seconds, so a second instance opened on the same root (a test, a CLI) can't break the first
one's writes in flight.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import dataclasses
import errno
import hashlib
import json
import os
import re
import shutil
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from cachetier.conditions import Conditions
from cachetier.dirlake_listing import list_objects_page, list_uploads_page
from cachetier.errors import (
    BadDigest,
    BucketNotEmpty,
    EntityTooLarge,
    EntityTooSmall,
    IncompleteBody,
    InternalError,
    InvalidArgument,
    InvalidBucketName,
    InvalidDigest,
    InvalidPart,
    InvalidPartOrder,
    InvalidRequest,
    KeyTooLongError,
    MalformedXML,
    NoSuchBucket,
    NoSuchKey,
    NoSuchUpload,
    NotModified,
    PreconditionFailed,
    S3Error,
    ServiceUnavailable,
)
from cachetier.lake import (
    Body,
    BucketInfo,
    CopySource,
    DeleteOutcome,
    ListEntry,
    ListPage,
    ListQuery,
    ObjectAttributes,
    ObjectInfo,
    ObjectStream,
    PartInfo,
    PartsPage,
    UploadInfo,
    UploadsPage,
    UploadsQuery,
    WriteResult,
)
from cachetier.ranges import ByteRange

T = TypeVar("T")

CHUNK = 1 << 20
MIN_PART_SIZE = 5 << 20
MAX_PUT_SIZE = 5 << 30  # S3's limit for one PutObject or one part
MAX_KEY_BYTES = 1024
MAX_PART_NUMBER = 10000
MAX_LISTED_PARTS = 1000
DEFAULT_CONTENT_TYPE = "binary/octet-stream"
SELF_COPY_MESSAGE = (
    "This copy request is illegal because it is trying to copy an object to itself without "
    "changing the object's metadata, storage class, website redirect location or encryption "
    "attributes."
)

_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_IPV4 = re.compile(r"\d+\.\d+\.\d+\.\d+")
_UPLOAD_ID = re.compile(r"[0-9a-f]{48}")
_PART_META = re.compile(r"(\d{5})\.json")
_BUCKET_META = "bucket.json"
_UPLOAD_META = "upload.json"

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


def _parse_content_md5(value: str | None) -> bytes | None:
    if value is None:
        return None
    try:
        digest = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidDigest() from exc
    if len(digest) != 16:
        raise InvalidDigest()
    return digest


def _utc(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _checksums(headers: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.startswith("x-amz-checksum-")}


def _lower_keys(headers: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def _without_checksums(headers: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in _lower_keys(headers).items() if not k.startswith("x-amz-checksum-")}


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _discard(path: Path) -> None:
    """Unlink if present; used on cleanup paths, where a second error must not mask the first."""
    with contextlib.suppress(OSError):
        os.unlink(path)


def _read_json(path: Path) -> Any:
    """The JSON at ``path``, or None when it (or its folder) doesn't exist."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (FileNotFoundError, NotADirectoryError):
        return None


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

    def info(self, bucket: str) -> ObjectInfo:
        return ObjectInfo(
            bucket, self.key, self.size, self.etag, _utc(self.last_modified),
            self.content_type, dict(self.metadata), dict(self.headers),
        )  # fmt: skip

    def row(self) -> tuple[Any, ...]:
        attrs = {"content_type": self.content_type, "metadata": self.metadata, "headers": self.headers}
        return (self.key, self.file, self.size, self.etag, self.last_modified, json.dumps(attrs))

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> _Record:
        key, file, size, etag, last_modified, attrs = row
        a = json.loads(attrs)
        return cls(key, file, size, etag, last_modified, a["content_type"], a["metadata"], a["headers"])


@dataclasses.dataclass(frozen=True)
class _Staged:
    """Bytes written and fsynced under .tmp, waiting to be committed."""

    path: Path
    size: int
    md5: bytes


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


def _put(db: sqlite3.Connection, record: _Record) -> str | None:
    """Insert or replace ``record``; returns the data file the replaced row named."""
    db.execute("BEGIN IMMEDIATE")
    try:
        old = db.execute("SELECT file FROM objects WHERE key = ?", (record.key,)).fetchone()
        db.execute("INSERT OR REPLACE INTO objects VALUES (?, ?, ?, ?, ?, ?)", record.row())
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return None if old is None else str(old[0])


def _delete(db: sqlite3.Connection, keys: list[str]) -> list[str]:
    """Delete rows in one transaction; returns the data files they named."""
    db.execute("BEGIN IMMEDIATE")
    try:
        files = []
        for key in keys:  # no DELETE ... RETURNING: it needs sqlite 3.35
            row = db.execute("SELECT file FROM objects WHERE key = ?", (key,)).fetchone()
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


class _FileBody:
    """An open data file read as an async iterator of up-to-1-MiB chunks, off the event loop.
    A class, not an async generator, so ``aclose()`` closes the file even if never iterated."""

    def __init__(self, file: BinaryIO, length: int) -> None:
        self._file: BinaryIO | None = file
        self._remaining = length

    def __aiter__(self) -> _FileBody:
        return self

    async def __anext__(self) -> bytes:
        if self._file is None or self._remaining <= 0:
            await self.aclose()
            raise StopAsyncIteration
        chunk = await asyncio.to_thread(self._file.read, min(CHUNK, self._remaining))
        if not chunk:  # shorter than its index row says: never end a body short silently
            await self.aclose()
            raise InternalError("DirLake: object data file is truncated")
        self._remaining -= len(chunk)
        return chunk

    async def aclose(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _copy_conditions(conditions: Conditions, record: _Record) -> None:
    """x-amz-copy-source-if-*: S3 answers 412 where a GET would answer 304. (Conditions.check
    with for_read=False ignores If-Modified-Since, which S3 does check on copies.)"""
    try:
        conditions.check(record.etag, _utc(record.last_modified))
    except NotModified as exc:
        raise PreconditionFailed() from exc


def _check_part_number(number: int) -> None:
    if not 1 <= number <= MAX_PART_NUMBER:
        raise InvalidArgument("Part number must be an integer between 1 and 10000, inclusive")


def _choose_parts(requested: list[tuple[int, str]], stored: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """The stored parts a CompleteMultipartUpload names, checked as S3 checks them."""
    if not requested:
        raise MalformedXML()
    numbers = [n for n, _ in requested]
    if any(b <= a for a, b in zip(numbers, numbers[1:], strict=False)):
        raise InvalidPartOrder()
    chosen = []
    for number, etag in requested:
        part = stored.get(number)
        if part is None or part["etag"].strip('"') != etag.strip().strip('"'):
            raise InvalidPart()
        chosen.append(part)
    if any(part["size"] < MIN_PART_SIZE for part in chosen[:-1]):
        raise EntityTooSmall()
    return chosen


class DirLake:
    """The ``Lake`` over a local folder; see the module docstring for layout and guarantees."""

    def __init__(self, root: str | os.PathLike[str], *, stale_after: float = 3600.0) -> None:
        self.root = Path(root)
        self._tmp = self.root / ".tmp"
        self._uploads = self.root / ".uploads"
        self._indexes: dict[str, _BucketIndex] = {}
        self._recover(stale_after)

    # -- plumbing -------------------------------------------------------------------------

    async def _io(self, fn: Callable[..., T], *args: Any) -> T:
        """Run blocking file/sqlite work in a thread; storage failures answer 503."""
        try:
            return await asyncio.to_thread(fn, *args)
        except (OSError, sqlite3.Error) as exc:
            raise ServiceUnavailable(f"DirLake storage error: {exc}") from exc

    def _tmp_path(self) -> Path:
        return self._tmp / uuid.uuid4().hex

    def _write_json(self, path: Path, obj: Any) -> None:
        """Atomically replace ``path``: temp file, fsync, rename, fsync the folder."""
        tmp = self._tmp_path()
        try:
            with open(tmp, "x", encoding="utf-8") as f:
                json.dump(obj, f)
                f.flush()
                os.fsync(f.fileno())
            os.rename(tmp, path)
        except BaseException:
            _discard(tmp)
            raise
        _fsync_dir(path.parent)

    async def _index(self, bucket: str) -> _BucketIndex:
        idx = self._indexes.get(bucket)
        if idx is not None and not idx.closed:
            return idx
        if not valid_bucket_name(bucket):
            raise NoSuchBucket(resource=bucket)
        meta = await self._io(_read_json, self.root / bucket / _BUCKET_META)
        if meta is None:
            raise NoSuchBucket(resource=bucket)
        idx = self._indexes.get(bucket)  # another task may have opened it meanwhile
        if idx is None or idx.closed:
            idx = self._indexes[bucket] = _BucketIndex(self.root / bucket, meta)
        return idx

    def _recover(self, stale_after: float) -> None:
        """Create the layout, and remove what a crash can leave: temp files, data files no row
        names (written but never committed, or replaced but not yet unlinked), and uploads of
        deleted buckets. Only leftovers older than ``stale_after`` go (see module docstring)."""
        for folder in (self.root, self._tmp, self._uploads):
            folder.mkdir(parents=True, exist_ok=True)
        cutoff = time.time() - stale_after
        for entry in os.scandir(self._tmp):
            with contextlib.suppress(FileNotFoundError):  # another instance's, just finished
                if entry.stat(follow_symlinks=False).st_mtime >= cutoff:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    _discard(Path(entry.path))
        live: set[str] = set()
        for name in os.listdir(self.root):
            meta = _read_json(self.root / name / _BUCKET_META) if valid_bucket_name(name) else None
            if meta is None:
                continue
            live.add(meta["id"])
            idx = self._indexes[name] = _BucketIndex(self.root / name, meta)
            with idx.use() as db:
                named = {row[0] for row in db.execute("SELECT file FROM objects")}
                for path in (idx.folder / "data").glob("*/*"):
                    with contextlib.suppress(FileNotFoundError):
                        if path.name not in named and path.stat().st_mtime < cutoff:
                            _discard(path)
            idx.release()
        self._drop_uploads(lambda meta: meta["bucket_id"] not in live)

    def check(self) -> list[str]:
        """Consistency problems (empty when sound): rows whose data file is missing or has
        another size than the row says. Blocking; for tests and operators."""
        problems = []
        for idx in [i for i in self._indexes.values() if not i.closed]:
            with idx.use() as db:
                rows = db.execute("SELECT key, file, size FROM objects").fetchall()
                idx.release()
            for key, file, size in rows:
                path = idx.data_path(file)
                if not path.is_file() or path.stat().st_size != size:
                    problems.append(f"{idx.folder.name}/{key}: data file {file} missing or wrong size")
        return problems

    # -- writing bytes --------------------------------------------------------------------

    async def _receive(self, body: Body, length: int, expected_md5: bytes | None) -> _Staged:
        """Stream ``body`` into a fsynced temp file. Nothing of it survives an exception."""
        path = self._tmp_path()
        out = await self._io(open, path, "xb")
        md5 = hashlib.md5()
        batch: list[bytes] = []
        size = pending = 0

        def write(final: bool, chunks: list[bytes]) -> None:
            for chunk in chunks:
                md5.update(chunk)
                out.write(chunk)
            if final:
                out.flush()
                os.fsync(out.fileno())
                out.close()

        try:
            async for chunk in body:
                batch.append(chunk)
                pending += len(chunk)
                if size + pending > length:  # never store more than was announced
                    raise IncompleteBody("The body is longer than its Content-Length.")
                if pending >= CHUNK:  # one thread hop per MiB, not per network read
                    await self._io(write, False, batch)
                    size, batch, pending = size + pending, [], 0
            await self._io(write, True, batch)
            size += pending
            if size != length:
                raise IncompleteBody()
            if expected_md5 is not None and md5.digest() != expected_md5:
                raise BadDigest()
        except BaseException:
            out.close()
            _discard(path)
            raise
        return _Staged(path, size, md5.digest())

    def _spool_copy(self, pieces: list[tuple[BinaryIO | Path, int, int]]) -> _Staged:
        """Copy (source, start, length) pieces into a fsynced temp file; blocking."""
        path = self._tmp_path()
        md5 = hashlib.md5()
        size = 0
        try:
            with open(path, "xb") as out:
                for source, start, length in pieces:
                    src = open(source, "rb") if isinstance(source, Path) else source
                    try:
                        src.seek(start)
                        while length > 0:
                            chunk = src.read(min(CHUNK, length))
                            if not chunk:
                                raise InternalError("DirLake: source data file is truncated")
                            md5.update(chunk)
                            out.write(chunk)
                            length -= len(chunk)
                            size += len(chunk)
                    finally:
                        if src is not source:
                            src.close()
                out.flush()
                os.fsync(out.fileno())
        except BaseException:
            _discard(path)
            raise
        return _Staged(path, size, md5.digest())

    def _commit(self, idx: _BucketIndex, staged: Path, record: _Record) -> None:
        """Make the fsynced temp file ``staged`` the object ``record.key``. Blocking.

        Crash consistency, in write order:
          1. the bytes are in .tmp/<nonce>, fsynced (_receive, _spool_copy);
          2. rename to data/<xx>/<name>, a fresh name no row or reader knows; fsync data/<xx>;
          3. commit the index row naming <name> (WAL, synchronous=FULL): the commit point;
          4. unlink the data file of the row it replaced.
        A crash before 3 leaves the old object intact plus an unnamed file; after 3, the new
        object whole (its file and folder entry were durable before the row) plus at worst the
        old, now unnamed, file. Recovery removes unnamed files.
        """
        name = uuid.uuid4().hex
        placed = idx.data_path(name)
        committed = False
        try:
            if not placed.parent.is_dir():
                placed.parent.mkdir(exist_ok=True)
                _fsync_dir(placed.parent.parent)
            os.rename(staged, placed)  # no lock needed: nothing knows the fresh name yet
            _fsync_dir(placed.parent)
            with idx.use() as db:
                old = _put(db, dataclasses.replace(record, file=name))
                committed = True
                if old is not None:  # under the lock: no reader is between lookup and open
                    _discard(idx.data_path(old))
        except FileNotFoundError as exc:
            if idx.closed:  # the bucket was deleted meanwhile
                raise NoSuchBucket(resource=idx.folder.name) from exc
            raise
        finally:
            if not committed:
                _discard(staged)
                _discard(placed)

    def _open(
        self, idx: _BucketIndex, key: str, prepare: Callable[[_Record], tuple[int, int] | None]
    ) -> tuple[_Record, tuple[int, int] | None, BinaryIO]:
        """Look ``key`` up, let ``prepare`` check it and pick a span, open its file there."""
        with idx.use() as db:
            record = _get(db, key)
            if record is None:
                raise NoSuchKey(resource=key)
            span = prepare(record)
            file = open(idx.data_path(record.file), "rb")
        try:
            file.seek(span[0] if span else 0)
        except BaseException:
            file.close()
            raise
        return record, span, file

    async def _open_source(
        self, source: CopySource, for_part: bool
    ) -> tuple[_Record, tuple[int, int] | None, BinaryIO]:
        idx = await self._index(source.bucket)
        check_key(source.key)

        def prepare(record: _Record) -> tuple[int, int] | None:
            _copy_conditions(source.conditions, record)
            if for_part and source.range is not None:
                return source.range.resolve(record.size)
            return None

        return await self._io(self._open, idx, source.key, prepare)

    # -- buckets --------------------------------------------------------------------------

    async def list_buckets(self) -> list[BucketInfo]:
        def scan() -> list[BucketInfo]:
            found = []
            for name in sorted(os.listdir(self.root)):
                meta = _read_json(self.root / name / _BUCKET_META) if valid_bucket_name(name) else None
                if meta is not None:
                    found.append(BucketInfo(name, _utc(meta["created"])))
            return found

        return await self._io(scan)

    async def create_bucket(self, bucket: str, location: str | None = None) -> None:
        if not valid_bucket_name(bucket):
            raise InvalidBucketName(resource=bucket)
        await self._io(self._create_bucket, bucket, location or "")

    def _create_bucket(self, bucket: str, location: str) -> None:
        # Built in .tmp and renamed into place: a bucket appears whole or not at all, and of
        # two racing creates exactly one rename wins (a non-empty target folder refuses it).
        # Re-creating a bucket one owns answers 200 in us-east-1, on AWS (legacy behaviour) and
        # on Ceph RGW alike; the folder lake has one owner, the gateway.
        final = self.root / bucket
        if (final / _BUCKET_META).exists():
            return
        staging = self._tmp_path()
        (staging / "data").mkdir(parents=True)
        try:
            meta = {"id": uuid.uuid4().hex, "created": int(time.time()), "location": location}
            self._write_json(staging / _BUCKET_META, meta)
            idx = _BucketIndex(staging, meta)
            with idx.use():  # the index file exists before the bucket does
                pass
            idx.release()
            _fsync_dir(staging)
            os.rename(staging, final)
        except BaseException as exc:
            shutil.rmtree(staging, ignore_errors=True)
            if isinstance(exc, OSError) and exc.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR):
                return  # a racing create won: the bucket exists, which is what was asked
            raise
        _fsync_dir(self.root)

    async def head_bucket(self, bucket: str) -> None:
        await self._index(bucket)

    async def delete_bucket(self, bucket: str) -> None:
        idx = await self._index(bucket)
        await self._io(self._delete_bucket, idx)
        if self._indexes.get(bucket) is idx:
            del self._indexes[bucket]

    def _delete_bucket(self, idx: _BucketIndex) -> None:
        # S3 counts only objects: uploads in progress don't keep a bucket; they go with it.
        trash = self._tmp_path()
        with idx.use() as db:
            if db.execute("SELECT 1 FROM objects LIMIT 1").fetchone() is not None:
                raise BucketNotEmpty(resource=idx.folder.name)
            idx.release(retire=True)  # writers waiting on the lock now see NoSuchBucket
            os.rename(idx.folder, trash)  # the bucket vanishes at once; the rest is cleanup
            _fsync_dir(self.root)
        shutil.rmtree(trash, ignore_errors=True)
        self._drop_uploads(lambda meta: meta["bucket_id"] == idx.meta["id"])

    async def bucket_location(self, bucket: str) -> str:
        return str((await self._index(bucket)).meta.get("location") or "")

    # -- objects --------------------------------------------------------------------------

    async def list_objects(self, bucket: str, query: ListQuery) -> ListPage:
        idx = await self._index(bucket)

        def scan(lower: str, inclusive: bool, limit: int) -> list[ListEntry]:
            with idx.use() as db:
                return _scan(db, lower, inclusive, limit)

        return await self._io(list_objects_page, scan, query)

    async def head_object(self, bucket: str, key: str) -> ObjectInfo:
        idx = await self._index(bucket)
        check_key(key)

        def lookup() -> _Record | None:
            with idx.use() as db:
                return _get(db, key)

        record = await self._io(lookup)
        if record is None:
            raise NoSuchKey(resource=key)
        return record.info(bucket)

    async def get_object(
        self,
        bucket: str,
        key: str,
        range: ByteRange | None = None,  # noqa: A002 - the Lake protocol's name
        conditions: Conditions = Conditions(),
    ) -> ObjectStream:
        idx = await self._index(bucket)
        check_key(key)

        def prepare(record: _Record) -> tuple[int, int] | None:
            conditions.check(record.etag, _utc(record.last_modified))  # before the range: S3's order
            return range.resolve(record.size) if range is not None else None

        # The file is opened before we return: an overwrite meanwhile unlinks it, and the open
        # descriptor keeps reading the old bytes, never a mix.
        record, span, file = await self._io(self._open, idx, key, prepare)
        length = record.size if span is None else span[1] - span[0] + 1
        return ObjectStream(record.info(bucket), span, _FileBody(file, length))

    async def put_object(
        self,
        bucket: str,
        key: str,
        body: Body,
        length: int,
        attrs: ObjectAttributes,
        content_md5: str | None = None,
    ) -> WriteResult:
        idx = await self._index(bucket)
        check_key(key)
        expected = _parse_content_md5(content_md5)
        if length > MAX_PUT_SIZE:
            raise EntityTooLarge()
        staged = await self._receive(body, length, expected)
        record = _Record(
            key, "", staged.size, f'"{staged.md5.hex()}"', int(time.time()),
            attrs.content_type or DEFAULT_CONTENT_TYPE, dict(attrs.metadata), _lower_keys(attrs.headers),
        )  # fmt: skip
        await self._io(self._commit, idx, staged.path, record)
        return WriteResult(record.etag, _utc(record.last_modified), _checksums(record.headers))

    async def copy_object(
        self,
        source: CopySource,
        bucket: str,
        key: str,
        attrs: ObjectAttributes | None = None,
    ) -> WriteResult:
        idx = await self._index(bucket)
        check_key(key)
        record, _, file = await self._open_source(source, for_part=False)
        try:
            if attrs is None and (source.bucket, source.key) == (bucket, key):
                raise InvalidRequest(SELF_COPY_MESSAGE)
            staged = await self._io(self._spool_copy, [(file, 0, record.size)])
        finally:
            file.close()
        # The copy keeps the source's ETag as-is ("-N" for a multipart source, as S3 does) and
        # its checksums (the bytes are the same), whatever the metadata directive.
        copy = dataclasses.replace(record, key=key, last_modified=int(time.time()))
        if attrs is not None:
            copy = dataclasses.replace(
                copy,
                content_type=attrs.content_type or DEFAULT_CONTENT_TYPE,
                metadata=dict(attrs.metadata),
                headers=_without_checksums(attrs.headers) | _checksums(record.headers),
            )
        await self._io(self._commit, idx, staged.path, copy)
        return WriteResult(copy.etag, _utc(copy.last_modified), _checksums(copy.headers))

    async def delete_object(self, bucket: str, key: str) -> None:
        idx = await self._index(bucket)
        check_key(key)
        await self._io(self._delete_keys, idx, [key])

    def _delete_keys(self, idx: _BucketIndex, keys: list[str]) -> None:
        # The row delete is the commit point; a crash before the unlink leaves an unnamed file.
        with idx.use() as db:
            for name in _delete(db, keys):
                _discard(idx.data_path(name))

    async def delete_objects(self, bucket: str, keys: list[str]) -> list[DeleteOutcome]:
        idx = await self._index(bucket)
        outcomes = []
        for key in keys:
            try:
                check_key(key)
                outcomes.append(DeleteOutcome(key))
            except S3Error as exc:
                outcomes.append(DeleteOutcome(key, exc.code, exc.message))
        await self._io(self._delete_keys, idx, [o.key for o in outcomes if o.code is None])
        return outcomes

    # -- multipart uploads ----------------------------------------------------------------

    async def _upload(self, bucket: str, key: str, upload_id: str) -> tuple[_BucketIndex, Path, dict[str, Any]]:
        idx = await self._index(bucket)
        check_key(key)
        if not _UPLOAD_ID.fullmatch(upload_id):  # never let a client string reach a path
            raise NoSuchUpload(resource=upload_id)
        folder = self._uploads / upload_id
        meta = await self._io(_read_json, folder / _UPLOAD_META)
        if meta is None or (meta["bucket_id"], meta["key"]) != (idx.meta["id"], key):
            raise NoSuchUpload(resource=upload_id)
        return idx, folder, meta

    def _drop_uploads(self, doomed: Callable[[dict[str, Any]], bool]) -> None:
        for entry in os.scandir(self._uploads):
            meta = _read_json(Path(entry.path) / _UPLOAD_META) if _UPLOAD_ID.fullmatch(entry.name) else None
            if meta is not None and doomed(meta):
                self._drop_upload(Path(entry.path))

    def _drop_upload(self, folder: Path) -> bool:
        """Remove an upload: renamed away first so it vanishes at once. False if already gone."""
        trash = self._tmp_path()
        try:
            os.rename(folder, trash)
        except FileNotFoundError:
            return False
        _fsync_dir(self._uploads)
        shutil.rmtree(trash, ignore_errors=True)
        return True

    async def create_multipart_upload(self, bucket: str, key: str, attrs: ObjectAttributes) -> str:
        idx = await self._index(bucket)
        check_key(key)
        now = time.time_ns()
        # Ids start with their creation time in fixed-width hex, so id order is S3's listing
        # order of uploads of one key (by initiation), and the random rest keeps them unguessable.
        upload_id = f"{now:016x}{uuid.uuid4().hex}"
        meta = {
            "bucket": bucket,
            "bucket_id": idx.meta["id"],
            "key": key,
            "initiated": now // 1_000_000_000,
            "content_type": attrs.content_type or DEFAULT_CONTENT_TYPE,
            "metadata": dict(attrs.metadata),
            # checksums of a whole upload are not kept: they'd describe parts, not the object
            "headers": _without_checksums(attrs.headers),
        }
        await self._io(self._create_upload, upload_id, meta)
        return upload_id

    def _create_upload(self, upload_id: str, meta: dict[str, Any]) -> None:
        # Built in .tmp and renamed, so an upload folder always has its upload.json.
        staging = self._tmp_path()
        staging.mkdir()
        try:
            self._write_json(staging / _UPLOAD_META, meta)
            os.rename(staging, self._uploads / upload_id)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        _fsync_dir(self._uploads)

    def _read_parts(self, folder: Path) -> dict[int, dict[str, Any]]:
        try:
            names = os.listdir(folder)
        except FileNotFoundError as exc:
            raise NoSuchUpload() from exc
        parts = {}
        for name in names:
            match = _PART_META.fullmatch(name)
            part = _read_json(folder / name) if match else None
            if match and part is not None:
                parts[int(match.group(1))] = part
        return parts

    def _commit_part(self, folder: Path, number: int, staged: _Staged) -> WriteResult:
        """Same order as _commit, with the part's JSON as commit point: bytes fsynced, renamed
        under a fresh name, folder fsynced, JSON renamed over the old one, folder fsynced, then
        the replaced part's bytes unlinked. A crash leaves the old part or the new one, plus at
        worst an unnamed file, which goes with the upload folder. Blocking."""
        name = f"{number:05d}.{uuid.uuid4().hex}.part"
        meta_path = folder / f"{number:05d}.json"
        now = int(time.time())
        part = {"file": name, "size": staged.size, "etag": f'"{staged.md5.hex()}"', "last_modified": now}
        try:
            old = _read_json(meta_path)
            os.rename(staged.path, folder / name)
            _fsync_dir(folder)
            self._write_json(meta_path, part)
        except FileNotFoundError as exc:  # completed or aborted meanwhile
            _discard(staged.path)
            _discard(folder / name)
            raise NoSuchUpload() from exc
        if old is not None:
            _discard(folder / old["file"])
        return WriteResult(part["etag"], _utc(now))

    async def upload_part(
        self,
        bucket: str,
        key: str,
        upload_id: str,
        part_number: int,
        body: Body,
        length: int,
        content_md5: str | None = None,
    ) -> WriteResult:
        _, folder, _ = await self._upload(bucket, key, upload_id)
        _check_part_number(part_number)
        expected = _parse_content_md5(content_md5)
        if length > MAX_PUT_SIZE:
            raise EntityTooLarge()
        staged = await self._receive(body, length, expected)
        return await self._io(self._commit_part, folder, part_number, staged)

    async def upload_part_copy(
        self, source: CopySource, bucket: str, key: str, upload_id: str, part_number: int
    ) -> WriteResult:
        _, folder, _ = await self._upload(bucket, key, upload_id)
        _check_part_number(part_number)
        record, span, file = await self._open_source(source, for_part=True)
        start, end = span if span is not None else (0, record.size - 1)
        try:
            staged = await self._io(self._spool_copy, [(file, start, end - start + 1)])
        finally:
            file.close()
        return await self._io(self._commit_part, folder, part_number, staged)

    async def complete_multipart_upload(
        self, bucket: str, key: str, upload_id: str, parts: list[tuple[int, str]]
    ) -> WriteResult:
        idx, folder, meta = await self._upload(bucket, key, upload_id)
        chosen = _choose_parts(parts, await self._io(self._read_parts, folder))
        staged = await self._io(self._spool_copy, [(folder / p["file"], 0, p["size"]) for p in chosen])
        digests = b"".join(bytes.fromhex(p["etag"].strip('"')) for p in chosen)
        etag = f'"{hashlib.md5(digests).hexdigest()}-{len(chosen)}"'
        record = _Record(
            key, "", staged.size, etag, int(time.time()), meta["content_type"], meta["metadata"], meta["headers"]
        )
        # Committed like a PUT; a crash before the upload is dropped leaves it listed, and
        # completing it again gives the same object.
        await self._io(self._commit, idx, staged.path, record)
        await self._io(self._drop_upload, folder)
        return WriteResult(etag, _utc(record.last_modified))

    async def abort_multipart_upload(self, bucket: str, key: str, upload_id: str) -> None:
        _, folder, _ = await self._upload(bucket, key, upload_id)
        if not await self._io(self._drop_upload, folder):
            raise NoSuchUpload(resource=upload_id)

    async def list_parts(
        self, bucket: str, key: str, upload_id: str, max_parts: int = 1000, part_number_marker: int = 0
    ) -> PartsPage:
        if max_parts < 0 or part_number_marker < 0:
            raise InvalidArgument("max-parts and part-number-marker must not be negative")
        _, folder, _ = await self._upload(bucket, key, upload_id)
        stored = await self._io(self._read_parts, folder)
        numbers = sorted(n for n in stored if n > part_number_marker)
        shown = numbers[: min(max_parts, MAX_LISTED_PARTS)]
        parts = [
            PartInfo(n, stored[n]["etag"], stored[n]["size"], _utc(stored[n]["last_modified"])) for n in shown
        ]
        return PartsPage(
            parts,
            is_truncated=len(numbers) > len(shown),
            next_part_number_marker=shown[-1] if shown else None,
            part_number_marker=part_number_marker,
            max_parts=max_parts,
        )

    async def list_multipart_uploads(self, bucket: str, query: UploadsQuery) -> UploadsPage:
        idx = await self._index(bucket)

        def scan() -> list[UploadInfo]:
            found = []
            for entry in os.scandir(self._uploads):
                meta = _read_json(Path(entry.path) / _UPLOAD_META) if _UPLOAD_ID.fullmatch(entry.name) else None
                if meta is not None and meta["bucket_id"] == idx.meta["id"]:
                    found.append(UploadInfo(meta["key"], entry.name, _utc(meta["initiated"])))
            return sorted(found, key=lambda u: (u.key, u.upload_id))

        return list_uploads_page(await self._io(scan), query)

    async def aclose(self) -> None:
        """Close the sqlite connections (they reopen if the lake is used again)."""
        for idx in list(self._indexes.values()):
            with idx.lock:
                idx.release()
