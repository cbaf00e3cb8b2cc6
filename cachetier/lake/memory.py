"""MemoryLake: the complete in-memory twin of the ``Lake`` protocol, answering as DirLake does.

It keeps DirLake's rules by using DirLake's own pure pieces: bucket and key naming
(``dirlake.index``), the listing and paging rules (``dirlake.listing``), the multipart checks
(``dirlake.multipart``) and Content-MD5 parsing (``dirlake.files``); so where the two lakes
could disagree, only storage differs. tests/unit/test_dirlake.py checks it against the
``Lake`` protocol by exact signature and runs its behaviour suite over both lakes.

Where it deliberately differs from DirLake: objects live in memory (a PUT holds the whole body
until it commits, which is the one point where the twin breaks the Lake contract's "nothing
holds a whole object"); nothing survives the process; there is no ``check()``. Bodies are
served in ``chunk_size`` pieces with a yield to the event loop between them, so readers
interleave as they do over a real lake.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import time
import uuid
from bisect import bisect_left, insort
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

from cachetier.errors import (
    BadDigest, BucketNotEmpty, EntityTooLarge, IncompleteBody, InvalidArgument, InvalidBucketName,
    InvalidRequest, NoSuchBucket, NoSuchKey, NoSuchUpload, S3Error,
)  # fmt: skip
from cachetier.lake import (
    Body, BucketInfo, CopySource, DeleteOutcome, ListEntry, ListPage, ListQuery, ObjectAttributes, ObjectInfo,
    ObjectPart, ObjectStream, PartInfo, PartsPage, UploadInfo, UploadsPage, UploadsQuery, WriteResult,
)  # fmt: skip
from cachetier.lake.conditions import NO_CONDITIONS, Conditions
from cachetier.lake.dirlake import SELF_COPY_MESSAGE
from cachetier.lake.dirlake.files import MAX_PUT_SIZE, _parse_content_md5
from cachetier.lake.dirlake.index import (
    DEFAULT_CONTENT_TYPE, _checksums, _lower_keys, _utc, _without_checksums, check_key, valid_bucket_name,
)  # fmt: skip
from cachetier.lake.dirlake.listing import list_objects_page, list_uploads_page
from cachetier.lake.dirlake.multipart import MAX_LISTED_PARTS, _check_part_number, _choose_parts, part_of
from cachetier.lake.ranges import ByteRange

CHUNK = 1 << 20


@dataclasses.dataclass(frozen=True)
class _Object:
    """A stored object: its bytes and what HEAD says about it (a new one per write)."""

    data: bytes
    etag: str
    last_modified: int  # seconds, S3's resolution
    content_type: str = DEFAULT_CONTENT_TYPE
    metadata: Mapping[str, str] = dataclasses.field(default_factory=dict)
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    parts: tuple[int, ...] = ()  # part sizes of a multipart object, as DirLake's index row

    def info(self, bucket: str, key: str) -> ObjectInfo:
        return ObjectInfo(
            bucket, key, len(self.data), self.etag, _utc(self.last_modified),
            self.content_type, dict(self.metadata), dict(self.headers),
        )  # fmt: skip


@dataclasses.dataclass
class _Upload:
    key: str
    initiated: int
    content_type: str
    metadata: dict[str, str]
    headers: dict[str, str]
    # part number -> {data, size, etag, last_modified}: the shape dirlake.multipart checks
    parts: dict[int, dict[str, Any]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _Bucket:
    created: int
    location: str
    objects: dict[str, _Object] = dataclasses.field(default_factory=dict)
    keys: list[str] = dataclasses.field(default_factory=list)  # sorted: S3 order (see listing)
    uploads: dict[str, _Upload] = dataclasses.field(default_factory=dict)

    def store(self, key: str, obj: _Object) -> None:
        if key not in self.objects:
            insort(self.keys, key)
        self.objects[key] = obj

    def remove(self, key: str) -> None:
        if self.objects.pop(key, None) is not None:
            del self.keys[bisect_left(self.keys, key)]

    def scan(self, lower: str, inclusive: bool, limit: int) -> list[ListEntry]:
        """dirlake.listing's ``Scan`` over this bucket."""
        start = bisect_left(self.keys, lower)
        if not inclusive and start < len(self.keys) and self.keys[start] == lower:
            start += 1
        found = []
        for key in self.keys[start : start + limit]:
            obj = self.objects[key]
            found.append(ListEntry(key, len(obj.data), obj.etag, _utc(obj.last_modified)))
        return found


def _etag(data: bytes) -> str:
    return f'"{hashlib.md5(data).hexdigest()}"'


class MemoryLake:
    """The ``Lake`` in memory. ``buckets`` are created at once (a test's fixture bucket);
    ``clock`` gives Last-Modified and upload times (seconds since the epoch)."""

    def __init__(
        self, *, buckets: Iterable[str] = (), chunk_size: int = CHUNK, clock: Callable[[], float] = time.time
    ) -> None:
        self._clock = clock
        self._chunk_size = chunk_size
        self._buckets: dict[str, _Bucket] = {}
        for name in buckets:
            self._buckets[name] = _Bucket(self._now(), "")

    def _now(self) -> int:
        return int(self._clock())

    def _bucket(self, bucket: str) -> _Bucket:
        found = self._buckets.get(bucket) if valid_bucket_name(bucket) else None
        if found is None:
            raise NoSuchBucket(resource=bucket)
        return found

    def _object(self, bucket: str, key: str) -> _Object:
        found = self._bucket(bucket)
        check_key(key)
        obj = found.objects.get(key)
        if obj is None:
            raise NoSuchKey(resource=key)
        return obj

    def _upload(self, bucket: str, key: str, upload_id: str) -> tuple[_Bucket, _Upload]:
        found = self._bucket(bucket)
        check_key(key)
        upload = found.uploads.get(upload_id)
        if upload is None or upload.key != key:
            raise NoSuchUpload(resource=upload_id)
        return found, upload

    async def _receive(self, body: Body, length: int, content_md5: str | None) -> bytes:
        """The whole body, checked as DirLake checks it; nothing is kept if it raises."""
        expected = _parse_content_md5(content_md5)
        if length > MAX_PUT_SIZE:
            raise EntityTooLarge()
        pieces: list[bytes] = []
        size = 0
        async for piece in body:
            size += len(piece)
            if size > length:
                raise IncompleteBody("The body is longer than its Content-Length.")
            pieces.append(piece)
        if size != length:
            raise IncompleteBody()
        data = b"".join(pieces)
        if expected is not None and hashlib.md5(data).digest() != expected:
            raise BadDigest()
        return data

    async def _chunks(self, data: bytes) -> AsyncIterator[bytes]:
        for start in range(0, len(data), self._chunk_size):
            await asyncio.sleep(0)  # let other readers in between pieces, as a real lake does
            yield data[start : start + self._chunk_size]

    def _source(self, source: CopySource, for_part: bool) -> tuple[_Object, tuple[int, int] | None]:
        obj = self._object(source.bucket, source.key)
        # copy-source conditions: 412 where a GET would answer 304
        source.conditions.check(obj.etag, _utc(obj.last_modified), for_read=False)
        if for_part and source.range is not None:
            return obj, source.range.resolve(len(obj.data))
        return obj, None

    # -- buckets --------------------------------------------------------------------------

    async def list_buckets(self) -> list[BucketInfo]:
        return [BucketInfo(name, _utc(b.created)) for name, b in sorted(self._buckets.items())]

    async def create_bucket(self, bucket: str, location: str | None = None) -> None:
        if not valid_bucket_name(bucket):
            raise InvalidBucketName(resource=bucket)
        # re-creating a bucket one owns answers 200 (us-east-1), as DirLake does
        self._buckets.setdefault(bucket, _Bucket(self._now(), location or ""))

    async def head_bucket(self, bucket: str) -> None:
        self._bucket(bucket)

    async def delete_bucket(self, bucket: str) -> None:
        if self._bucket(bucket).objects:  # uploads in progress don't keep a bucket
            raise BucketNotEmpty(resource=bucket)
        del self._buckets[bucket]

    async def bucket_location(self, bucket: str) -> str:
        return self._bucket(bucket).location

    # -- objects --------------------------------------------------------------------------

    async def list_objects(self, bucket: str, query: ListQuery) -> ListPage:
        return list_objects_page(self._bucket(bucket).scan, query)

    async def head_object(self, bucket: str, key: str) -> ObjectInfo:
        return self._object(bucket, key).info(bucket, key)

    async def object_part(self, bucket: str, key: str, part_number: int) -> ObjectPart:
        obj = self._object(bucket, key)
        return part_of(obj.info(bucket, key), obj.parts, part_number)

    async def get_object(
        self,
        bucket: str,
        key: str,
        range: ByteRange | None = None,  # noqa: A002 - the Lake protocol's name
        conditions: Conditions = Conditions(),
    ) -> ObjectStream:
        obj = self._object(bucket, key)
        conditions.check(obj.etag, _utc(obj.last_modified))  # before the range: S3's order
        span = range.resolve(len(obj.data)) if range is not None else None
        start, end = span if span is not None else (0, len(obj.data) - 1)
        # bytes are immutable: an overwrite meanwhile leaves this stream on the old version
        return ObjectStream(obj.info(bucket, key), span, self._chunks(obj.data[start : end + 1]))

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
        self._bucket(bucket)
        check_key(key)
        data = await self._receive(body, length, content_md5)
        obj = _Object(
            data, _etag(data), self._now(), attrs.content_type or DEFAULT_CONTENT_TYPE,
            dict(attrs.metadata), _lower_keys(attrs.headers),
        )  # fmt: skip
        target = self._bucket(bucket)  # looked up again: deleted while the body came?
        _check_write(target, key, conditions)  # no await from here to the store: atomic
        target.store(key, obj)
        return WriteResult(obj.etag, _utc(obj.last_modified), _checksums(obj.headers))

    async def copy_object(
        self,
        source: CopySource,
        bucket: str,
        key: str,
        attrs: ObjectAttributes | None = None,
    ) -> WriteResult:
        target = self._bucket(bucket)
        check_key(key)
        obj, _ = self._source(source, for_part=False)
        if attrs is None and (source.bucket, source.key) == (bucket, key):
            raise InvalidRequest(SELF_COPY_MESSAGE)
        # the source's ETag as-is ("-N" for a multipart source) and its checksums, as DirLake
        copy = dataclasses.replace(obj, last_modified=self._now())
        if attrs is not None:
            copy = dataclasses.replace(
                copy,
                content_type=attrs.content_type or DEFAULT_CONTENT_TYPE,
                metadata=dict(attrs.metadata),
                headers=_without_checksums(attrs.headers) | _checksums(obj.headers),
            )
        target.store(key, copy)
        return WriteResult(copy.etag, _utc(copy.last_modified), _checksums(copy.headers))

    async def delete_object(self, bucket: str, key: str, conditions: Conditions = NO_CONDITIONS) -> None:
        found = self._bucket(bucket)
        check_key(key)
        if conditions.for_write:
            current = found.objects.get(key)
            conditions.check_delete(None if current is None else current.etag)
        found.remove(key)

    async def delete_objects(self, bucket: str, keys: list[str]) -> list[DeleteOutcome]:
        found = self._bucket(bucket)
        outcomes = []
        for key in keys:
            try:
                check_key(key)
            except S3Error as exc:
                outcomes.append(DeleteOutcome(key, exc.code, exc.message))
                continue
            found.remove(key)
            outcomes.append(DeleteOutcome(key))
        return outcomes

    # -- multipart uploads ----------------------------------------------------------------

    async def create_multipart_upload(self, bucket: str, key: str, attrs: ObjectAttributes) -> str:
        found = self._bucket(bucket)
        check_key(key)
        now = time.time_ns()
        # DirLake's id form: creation time first, so id order is S3's order of one key's uploads
        upload_id = f"{now:016x}{uuid.uuid4().hex}"
        found.uploads[upload_id] = _Upload(
            key, self._now(), attrs.content_type or DEFAULT_CONTENT_TYPE, dict(attrs.metadata),
            _without_checksums(attrs.headers),  # they'd describe parts, not the object
        )  # fmt: skip
        return upload_id

    def _store_part(self, upload: _Upload, number: int, data: bytes) -> WriteResult:
        etag, now = _etag(data), self._now()
        upload.parts[number] = {"data": data, "size": len(data), "etag": etag, "last_modified": now}
        return WriteResult(etag, _utc(now))

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
        self._upload(bucket, key, upload_id)
        _check_part_number(part_number)
        data = await self._receive(body, length, content_md5)
        _, upload = self._upload(bucket, key, upload_id)  # completed or aborted meanwhile?
        return self._store_part(upload, part_number, data)

    async def upload_part_copy(
        self, source: CopySource, bucket: str, key: str, upload_id: str, part_number: int
    ) -> WriteResult:
        _, upload = self._upload(bucket, key, upload_id)
        _check_part_number(part_number)
        obj, span = self._source(source, for_part=True)
        start, end = span if span is not None else (0, len(obj.data) - 1)
        return self._store_part(upload, part_number, obj.data[start : end + 1])

    async def complete_multipart_upload(
        self, bucket: str, key: str, upload_id: str, parts: list[tuple[int, str]],
        conditions: Conditions = NO_CONDITIONS,
    ) -> WriteResult:
        found, upload = self._upload(bucket, key, upload_id)
        chosen = _choose_parts(parts, upload.parts)
        _check_write(found, key, conditions)
        digests = b"".join(bytes.fromhex(p["etag"].strip('"')) for p in chosen)
        obj = _Object(
            b"".join(p["data"] for p in chosen), f'"{hashlib.md5(digests).hexdigest()}-{len(chosen)}"',
            self._now(), upload.content_type, upload.metadata, upload.headers, tuple(p["size"] for p in chosen),
        )  # fmt: skip
        found.store(key, obj)
        del found.uploads[upload_id]
        return WriteResult(obj.etag, _utc(obj.last_modified))

    async def abort_multipart_upload(self, bucket: str, key: str, upload_id: str) -> None:
        found, _ = self._upload(bucket, key, upload_id)
        del found.uploads[upload_id]

    async def list_parts(
        self, bucket: str, key: str, upload_id: str, max_parts: int = 1000, part_number_marker: int = 0
    ) -> PartsPage:
        if max_parts < 0 or part_number_marker < 0:
            raise InvalidArgument("max-parts and part-number-marker must not be negative")
        _, upload = self._upload(bucket, key, upload_id)
        numbers = sorted(n for n in upload.parts if n > part_number_marker)
        shown = numbers[: min(max_parts, MAX_LISTED_PARTS)]
        listed = [upload.parts[n] for n in shown]
        return PartsPage(
            [PartInfo(n, p["etag"], p["size"], _utc(p["last_modified"])) for n, p in zip(shown, listed, strict=True)],
            is_truncated=len(numbers) > len(shown),
            next_part_number_marker=shown[-1] if shown else None,
            part_number_marker=part_number_marker,
            max_parts=max_parts,
        )

    async def list_multipart_uploads(self, bucket: str, query: UploadsQuery) -> UploadsPage:
        found = self._bucket(bucket)
        uploads = sorted(
            (UploadInfo(u.key, upload_id, _utc(u.initiated)) for upload_id, u in found.uploads.items()),
            key=lambda u: (u.key, u.upload_id),
        )
        return list_uploads_page(uploads, query)

    async def aclose(self) -> None:
        """Nothing to close: the objects stay, as a folder's do when DirLake closes."""


def _check_write(bucket: _Bucket, key: str, conditions: Conditions) -> None:
    if conditions.for_write:
        current = bucket.objects.get(key)
        conditions.check_write(None if current is None else current.etag)
