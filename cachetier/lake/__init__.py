"""The ``Lake`` interface: the object store lakegate fronts (Ceph RGW, MinIO, any S3, or a
local folder), with typed arguments and results and S3-coded errors (:mod:`cachetier.errors`).

Contract, for every implementation (``S3Lake``, ``DirLake``, and test twins):

- Bodies stream both ways as async iterators of bytes; nothing holds a whole object in memory.
- A write is all or nothing: if the body iterator raises (a checksum the gateway verifies at the
  end, a client that went away), no object and no part is created or replaced.
- ETags are returned quoted, exactly as S3 sends them (``"<md5>"``, ``"<md5>-<parts>"``).
- Errors are ``S3Error`` subclasses with the code the lake (or S3, for DirLake) would answer;
  an unreachable or failing lake raises ``ServiceUnavailable`` or ``SlowDown`` (503).
- Keys are str (unicode), never URL-encoded at this level.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, TypeVar, runtime_checkable

from cachetier.lake.conditions import NO_CONDITIONS, Conditions
from cachetier.lake.ranges import ByteRange

Body = AsyncIterator[bytes]


class FileRegion:
    """Bytes of an open file, sent as they are (sendfile) rather than read into Python: a piece
    a GET's stream yields in place of bytes only when its consumer asked for such pieces (the
    request context's ``zero_copy``: the S3 GET handler, on a server that sends files). The
    piece owns its file descriptor: whoever takes it closes it (also when it is collected), and
    ``slice`` hands it on to the slice."""

    __slots__ = ("fd", "offset", "length")

    def __init__(self, fd: int, offset: int, length: int) -> None:
        self.fd = fd
        self.offset = offset
        self.length = length

    def __len__(self) -> int:
        return self.length

    def fileno(self) -> int:
        return self.fd

    def slice(self, start: int, end: int) -> FileRegion:
        """Bytes ``start`` to ``end`` (exclusive) of this region, which gives up its file to it."""
        if (start, end) == (0, self.length):
            return self
        fd, self.fd = self.fd, -1
        return FileRegion(fd, self.offset + start, end - start)

    def read(self) -> bytes:
        """The bytes, read (for a consumer that cannot send a file)."""
        return pread_exactly(self.fd, self.offset, self.length)

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        self.close()


def pread_upto(fd: int, count: int, offset: int) -> bytes:
    """Up to ``count`` bytes of ``fd`` from ``offset``: fewer only where the file ends (a short
    read of some file systems is read on)."""
    data = os.pread(fd, count, offset)
    if 0 < len(data) < count:
        parts, got = [data], len(data)
        while got < count and (part := os.pread(fd, count - got, offset + got)):
            parts.append(part)
            got += len(part)
        data = b"".join(parts)
    return data


def pread_exactly(fd: int, offset: int, count: int) -> bytes:
    """``count`` bytes of ``fd`` from ``offset``; ConnectionError if the file ends first."""
    data = pread_upto(fd, count, offset)
    if len(data) < count:
        raise ConnectionError(f"the file ended {count - len(data)} bytes early")
    return data


Piece = bytes | FileRegion  # of a GET's body: FileRegion only where the consumer asked
Served = AsyncIterator[Piece]
P = TypeVar("P", bytes, Piece)

# Representation headers an S3 object keeps besides Content-Type and user metadata; a PUT
# stores them and a GET/HEAD returns them.
STORED_HEADERS = (
    "cache-control",
    "content-disposition",
    "content-encoding",
    "content-language",
    "expires",
    "x-amz-website-redirect-location",
)
CHECKSUM_ALGORITHMS = ("crc32", "crc32c", "crc64nvme", "sha1", "sha256")
CHECKSUM_HEADERS = tuple(f"x-amz-checksum-{a}" for a in CHECKSUM_ALGORITHMS)


@dataclass(frozen=True)
class ObjectAttributes:
    """What a writer sets on an object: content type, user metadata (names lower-case, without
    the ``x-amz-meta-`` prefix) and other stored headers (``STORED_HEADERS``, checksums)."""

    content_type: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ObjectInfo:
    """An object's metadata, as HEAD returns it."""

    bucket: str
    key: str
    size: int
    etag: str
    last_modified: datetime
    content_type: str = "binary/octet-stream"
    metadata: Mapping[str, str] = field(default_factory=dict)
    # stored representation headers and checksums, lower-case names (see STORED_HEADERS)
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ObjectPart:
    """Where part ``number`` of the object ``info`` describes lies: its bytes ``first`` to
    ``last``, inclusive (``last`` is -1 for the one part of an empty object). ``parts_count`` is
    None for an object not uploaded in parts, which S3 answers as a single part."""

    info: ObjectInfo
    number: int
    first: int
    last: int
    parts_count: int | None

    @property
    def range(self) -> ByteRange | None:
        """The part as a range GET of the object (None: empty, nothing to range over)."""
        return ByteRange(first=self.first, last=self.last) if self.last >= self.first else None


@dataclass
class ObjectStream:
    """An open GET: the object's metadata, the inclusive byte range served (None = whole
    object) and the body. The consumer must ``aclose()`` it, read to the end or not."""

    info: ObjectInfo
    content_range: tuple[int, int] | None
    body: Served  # bytes, but for a consumer that asked for file regions (see FileRegion)
    first_in: bool = False  # the body's first bytes have arrived (see started)

    @property
    def length(self) -> int:
        if self.content_range is None:
            return self.info.size
        return self.content_range[1] - self.content_range[0] + 1

    async def aclose(self) -> None:
        aclose = getattr(self.body, "aclose", None)
        if aclose is not None:
            await aclose()

    async def started(self) -> ObjectStream:
        """This stream once its first body bytes are in. A response's head then leaves with
        them rather than alone, and a failure before them raises here, while an S3 error can
        still be sent instead of a cut body."""
        if self.first_in or self.length == 0:
            return self
        body = aiter(self.body)
        try:
            first = await anext(body)
        except StopAsyncIteration:
            return self  # ended at once: the response is cut where it would have been
        except BaseException:
            await self.aclose()
            raise
        return ObjectStream(self.info, self.content_range, prepend(first, body), first_in=True)


async def prepend(first: P, rest: AsyncIterator[P]) -> AsyncIterator[P]:
    """``first``, then ``rest`` (closed at the end, or when this is)."""
    try:
        yield first
        async for piece in rest:
            yield piece
    finally:
        aclose = getattr(rest, "aclose", None)
        if aclose is not None:
            await aclose()


@dataclass(frozen=True)
class WriteResult:
    """The outcome of PutObject, CopyObject, UploadPart(Copy) and CompleteMultipartUpload."""

    etag: str
    last_modified: datetime | None = None
    # e.g. x-amz-checksum-*, x-amz-version-id: returned to the client as the lake sent them
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BucketInfo:
    name: str
    created: datetime


@dataclass(frozen=True)
class ListQuery:
    """ListObjects (v1) or ListObjectsV2 arguments; keys and prefixes are decoded str."""

    prefix: str = ""
    delimiter: str = ""
    max_keys: int = 1000
    v2: bool = False
    marker: str = ""  # v1
    start_after: str = ""  # v2
    continuation_token: str | None = None  # v2, opaque


@dataclass(frozen=True)
class ListEntry:
    key: str
    size: int
    etag: str
    last_modified: datetime
    storage_class: str = "STANDARD"


@dataclass(frozen=True)
class ListPage:
    entries: list[ListEntry]
    common_prefixes: list[str]
    is_truncated: bool
    next_marker: str | None = None  # v1, when truncated
    next_continuation_token: str | None = None  # v2, when truncated


@dataclass(frozen=True)
class PartInfo:
    part_number: int
    etag: str
    size: int
    last_modified: datetime


@dataclass(frozen=True)
class PartsPage:
    parts: list[PartInfo]
    is_truncated: bool
    next_part_number_marker: int | None
    part_number_marker: int = 0
    max_parts: int = 1000


@dataclass(frozen=True)
class UploadInfo:
    key: str
    upload_id: str
    initiated: datetime


@dataclass(frozen=True)
class UploadsQuery:
    prefix: str = ""
    delimiter: str = ""
    key_marker: str = ""
    upload_id_marker: str = ""
    max_uploads: int = 1000


@dataclass(frozen=True)
class UploadsPage:
    uploads: list[UploadInfo]
    common_prefixes: list[str]
    is_truncated: bool
    next_key_marker: str | None = None
    next_upload_id_marker: str | None = None


@dataclass(frozen=True)
class DeleteOutcome:
    """One key of a DeleteObjects request: deleted (code None) or the error S3 reports."""

    key: str
    code: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class CopySource:
    bucket: str
    key: str
    conditions: Conditions = Conditions()  # x-amz-copy-source-if-*
    range: ByteRange | None = None  # UploadPartCopy only


@runtime_checkable
class Lake(Protocol):
    """See the module docstring for the contract every implementation keeps."""

    async def list_buckets(self) -> list[BucketInfo]: ...

    async def create_bucket(self, bucket: str, location: str | None = None) -> None: ...

    async def head_bucket(self, bucket: str) -> None: ...

    async def delete_bucket(self, bucket: str) -> None: ...

    async def bucket_location(self, bucket: str) -> str: ...

    async def list_objects(self, bucket: str, query: ListQuery) -> ListPage: ...

    async def head_object(self, bucket: str, key: str) -> ObjectInfo: ...

    async def object_part(self, bucket: str, key: str, part_number: int) -> ObjectPart:
        """Where part ``part_number`` (1..10000) of the object lies, as HEAD ?partNumber= tells.
        Raises NoSuchKey, InvalidPartNumber (416) past the object's part count."""
        ...

    async def get_object(
        self, bucket: str, key: str, range: ByteRange | None = None, conditions: Conditions = Conditions()
    ) -> ObjectStream:
        """Raises NoSuchKey, InvalidRange (416, with the object's ``size``), PreconditionFailed
        (412), NotModified (304, with the object's ``etag``)."""
        ...

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
        """``length`` is exact; ``content_md5`` (base64), when given, is checked by the lake too.
        ``conditions``: a conditional write (``Conditions.check_write``), decided by the lake
        atomically with the write: PreconditionFailed (412) or NoSuchKey leave the object as it was."""
        ...

    async def copy_object(
        self,
        source: CopySource,
        bucket: str,
        key: str,
        attrs: ObjectAttributes | None = None,
    ) -> WriteResult:
        """``attrs`` None copies the source's metadata (COPY directive), else replaces it."""
        ...

    async def delete_object(self, bucket: str, key: str, conditions: Conditions = NO_CONDITIONS) -> None:
        """``conditions``: a conditional delete (``Conditions.check_delete``), decided by the lake
        atomically with the delete."""
        ...

    async def delete_objects(self, bucket: str, keys: list[str]) -> list[DeleteOutcome]: ...

    async def create_multipart_upload(self, bucket: str, key: str, attrs: ObjectAttributes) -> str: ...

    async def upload_part(
        self,
        bucket: str,
        key: str,
        upload_id: str,
        part_number: int,
        body: Body,
        length: int,
        content_md5: str | None = None,
    ) -> WriteResult: ...

    async def upload_part_copy(
        self, source: CopySource, bucket: str, key: str, upload_id: str, part_number: int
    ) -> WriteResult: ...

    async def complete_multipart_upload(
        self, bucket: str, key: str, upload_id: str, parts: list[tuple[int, str]],
        conditions: Conditions = NO_CONDITIONS,
    ) -> WriteResult:
        """``parts`` are (part number, etag) as the client listed them; ``conditions`` as for
        ``put_object`` (a failed one leaves the upload in place, as S3 does)."""
        ...

    async def abort_multipart_upload(self, bucket: str, key: str, upload_id: str) -> None: ...

    async def list_parts(
        self, bucket: str, key: str, upload_id: str, max_parts: int = 1000, part_number_marker: int = 0
    ) -> PartsPage: ...

    async def list_multipart_uploads(self, bucket: str, query: UploadsQuery) -> UploadsPage: ...

    async def aclose(self) -> None: ...
