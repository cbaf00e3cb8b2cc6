"""DirLake: the embedded lake, a local folder that answers as S3 (AWS, Ceph RGW) would.

Layout under ``root``::

    .tmp/                     files and folders being written; stale ones are removed at start
    .uploads/<upload_id>/     one multipart upload
        upload.json           {bucket, bucket_id, key, initiated, content_type, metadata, headers}
        <nnnnn>.json          part n: {file, size, etag, last_modified}; its rename commits the part
        <nnnnn>.<nonce>.part  part n's bytes
    <bucket>/
        bucket.json           {id, created, location}
        index.sqlite3         key -> data file, size, etag, last_modified, attributes (WAL mode);
                              a multipart object's part sizes are among its attributes
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

Crash consistency of an object write (PUT, copy, CompleteMultipartUpload), in write order:
  1. the bytes are in .tmp/<nonce>, fsynced (_receive, _spool_copy);
  2. rename to data/<xx>/<name>, a fresh name no row or reader knows; fsync data/<xx>;
  3. commit the index row naming <name> (WAL, synchronous=FULL): the commit point;
  4. unlink the data file of the row it replaced.
A crash before 3 leaves the old object intact plus an unnamed file; after 3, the new
object whole (its file and folder entry were durable before the row) plus at worst the
old, now unnamed, file. Recovery removes unnamed files. Steps 2-4 are DirLake._commit.

Modules: this one holds ``DirLake`` (buckets, objects, commit, recovery); ``index`` the per-bucket
sqlite index and the bucket/key naming rules; ``files`` atomic writes, temp files, fsync helpers
and the read stream; ``multipart`` multipart upload state and operations (a mixin of DirLake);
``listing`` the pure S3 listing and paging rules.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from cachetier.lake.conditions import NO_CONDITIONS, Conditions
from cachetier.lake.dirlake.files import (
    CHUNK, MAX_PUT_SIZE, _discard, _FileBody, _fsync_dir, _parse_content_md5, _read_json,
)  # fmt: skip
from cachetier.lake.dirlake.index import (
    _BUCKET_META, DEFAULT_CONTENT_TYPE, MAX_KEY_BYTES, _BucketIndex, _checksums, _delete, _get, _lower_keys,
    _put, _Record, _scan, _utc, _without_checksums, check_key, valid_bucket_name,
)  # fmt: skip
from cachetier.lake.dirlake.listing import list_objects_page
from cachetier.lake.dirlake.multipart import (
    MAX_LISTED_PARTS, MAX_PART_NUMBER, MIN_PART_SIZE, _MultipartUploads, part_of,
)  # fmt: skip
from cachetier.errors import (
    BucketNotEmpty, EntityTooLarge, InvalidBucketName, InvalidRequest, NoSuchBucket, NoSuchKey,
    S3Error,
)  # fmt: skip
from cachetier.lake import (
    Body, BucketInfo, CopySource, DeleteOutcome, ListEntry, ListPage, ListQuery, ObjectAttributes, ObjectInfo,
    ObjectPart, ObjectStream, WriteResult,
)  # fmt: skip
from cachetier.lake.ranges import ByteRange

# The public names of cachetier.lake.dirlake from when it was one module, still importable from here.
__all__ = [
    "CHUNK", "DEFAULT_CONTENT_TYPE", "MAX_KEY_BYTES", "MAX_LISTED_PARTS", "MAX_PART_NUMBER", "MAX_PUT_SIZE",
    "MIN_PART_SIZE", "SELF_COPY_MESSAGE", "DirLake", "check_key", "valid_bucket_name",
]  # fmt: skip

SELF_COPY_MESSAGE = (
    "This copy request is illegal because it is trying to copy an object to itself without "
    "changing the object's metadata, storage class, website redirect location or encryption "
    "attributes."
)


class DirLake(_MultipartUploads):
    """The ``Lake`` over a local folder; see the module docstring for layout and guarantees.
    ``clock`` gives Last-Modified, bucket and upload times and the stale-leftover cutoff (seconds
    since the epoch)."""

    def __init__(
        self, root: str | os.PathLike[str], *, stale_after: float = 3600.0, clock: Callable[[], float] = time.time
    ) -> None:
        self._clock = clock
        self._last_upload_ns = 0
        self.root = Path(root)
        self._tmp = self.root / ".tmp"
        self._uploads = self.root / ".uploads"
        self._indexes: dict[str, _BucketIndex] = {}
        self._recover(stale_after)

    # -- plumbing -------------------------------------------------------------------------

    def _now(self) -> int:
        return int(self._clock())

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
        # leftovers' mtimes are the file system's wall clock: the cutoff means what it says only
        # for a clock that keeps to it
        cutoff = self._clock() - stale_after
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
        another size than the row says, or whose part sizes do not add up to it. Blocking; for
        tests and operators."""
        problems = []
        for idx in [i for i in self._indexes.values() if not i.closed]:
            with idx.use() as db:
                records = [_Record.from_row(row) for row in db.execute("SELECT * FROM objects")]
                idx.release()
            for record in records:
                path, name = idx.data_path(record.file), f"{idx.folder.name}/{record.key}"
                if not path.is_file() or path.stat().st_size != record.size:
                    problems.append(f"{name}: data file {record.file} missing or wrong size")
                if record.parts and sum(record.parts) != record.size:
                    problems.append(f"{name}: part sizes add up to {sum(record.parts)}, not {record.size}")
        return problems

    # -- committing and opening objects ------------------------------------------------

    def _commit(self, idx: _BucketIndex, staged: Path, record: _Record, conditions: Conditions = NO_CONDITIONS) -> None:
        """Make the fsynced temp file ``staged`` the object ``record.key``: steps 2-4 of the
        write order in the module docstring; a conditional write's ``conditions`` are checked
        in step 3's transaction (a failed one leaves the old row, and step 2's file is
        removed). Blocking."""
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
                old = _put(db, dataclasses.replace(record, file=name),
                           conditions.check_write if conditions.for_write else None)
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
            # copy-source conditions: 412 where a GET would answer 304
            source.conditions.check(record.etag, _utc(record.last_modified), for_read=False)
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
            meta = {"id": uuid.uuid4().hex, "created": self._now(), "location": location}
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

    async def _record(self, bucket: str, key: str) -> _Record:
        idx = await self._index(bucket)
        check_key(key)

        def lookup() -> _Record | None:
            with idx.use() as db:
                return _get(db, key)

        record = await self._io(lookup)
        if record is None:
            raise NoSuchKey(resource=key)
        return record

    async def head_object(self, bucket: str, key: str) -> ObjectInfo:
        return (await self._record(bucket, key)).info(bucket)

    async def object_part(self, bucket: str, key: str, part_number: int) -> ObjectPart:
        record = await self._record(bucket, key)
        return part_of(record.info(bucket), record.parts, part_number)

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
        conditions: Conditions = NO_CONDITIONS,
    ) -> WriteResult:
        idx = await self._index(bucket)
        check_key(key)
        expected = _parse_content_md5(content_md5)
        if length > MAX_PUT_SIZE:
            raise EntityTooLarge()
        staged = await self._receive(body, length, expected)
        record = _Record(
            key, "", staged.size, f'"{staged.md5.hex()}"', self._now(),
            attrs.content_type or DEFAULT_CONTENT_TYPE, dict(attrs.metadata), _lower_keys(attrs.headers),
        )  # fmt: skip
        await self._io(self._commit, idx, staged.path, record, conditions)
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
        copy = dataclasses.replace(record, key=key, last_modified=self._now())
        if attrs is not None:
            copy = dataclasses.replace(
                copy,
                content_type=attrs.content_type or DEFAULT_CONTENT_TYPE,
                metadata=dict(attrs.metadata),
                headers=_without_checksums(attrs.headers) | _checksums(record.headers),
            )
        await self._io(self._commit, idx, staged.path, copy)
        return WriteResult(copy.etag, _utc(copy.last_modified), _checksums(copy.headers))

    async def delete_object(self, bucket: str, key: str, conditions: Conditions = NO_CONDITIONS) -> None:
        idx = await self._index(bucket)
        check_key(key)
        await self._io(self._delete_keys, idx, [key], conditions.check_delete if conditions.for_write else None)

    def _delete_keys(self, idx: _BucketIndex, keys: list[str], admit: Callable[[str | None], None] | None = None) -> None:
        # The row delete is the commit point; a crash before the unlink leaves an unnamed file.
        with idx.use() as db:
            for name in _delete(db, keys, admit):
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

    async def aclose(self) -> None:
        """Close the sqlite connections (they reopen if the lake is used again)."""
        for idx in list(self._indexes.values()):
            with idx.lock:
                idx.release()
