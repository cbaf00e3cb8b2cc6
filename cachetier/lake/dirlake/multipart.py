"""Multipart uploads for DirLake: each upload is a folder under .uploads (layout in the package
docstring) whose part JSON files are the commit points of its parts; completing one commits the
assembled object exactly as a PUT does.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from cachetier.lake.dirlake.files import (
    MAX_PUT_SIZE, _discard, _fsync_dir, _parse_content_md5, _read_json, _Staged, _Staging,
)  # fmt: skip
from cachetier.lake.dirlake.index import (
    DEFAULT_CONTENT_TYPE, _BucketIndex, _Record, _utc, _without_checksums, check_key,
)  # fmt: skip
from cachetier.lake.dirlake.listing import list_uploads_page
from cachetier.errors import (
    EntityTooLarge,
    EntityTooSmall,
    InvalidArgument,
    InvalidPart,
    InvalidPartNumber,
    InvalidPartOrder,
    MalformedXML,
    NoSuchUpload,
)
from cachetier.lake import (
    Body,
    CopySource,
    ObjectAttributes,
    ObjectInfo,
    ObjectPart,
    PartInfo,
    PartsPage,
    UploadInfo,
    UploadsPage,
    UploadsQuery,
    WriteResult,
)
from cachetier.lake.conditions import NO_CONDITIONS, Conditions

MIN_PART_SIZE = 5 << 20
MAX_PART_NUMBER = 10000
MAX_LISTED_PARTS = 1000

_UPLOAD_ID = re.compile(r"[0-9a-f]{48}")
_PART_META = re.compile(r"(\d{5})\.json")
_UPLOAD_META = "upload.json"


def _check_part_number(number: int) -> None:
    if not 1 <= number <= MAX_PART_NUMBER:
        raise InvalidArgument("Part number must be an integer between 1 and 10000, inclusive")


def part_of(info: ObjectInfo, part_sizes: Sequence[int], number: int) -> ObjectPart:
    """Part ``number`` of an object whose parts had ``part_sizes`` (empty: not uploaded in parts,
    a single part, as S3 answers; so is an object DirLake stored before it recorded parts)."""
    _check_part_number(number)
    if not part_sizes:
        if number != 1:
            raise InvalidPartNumber()
        return ObjectPart(info, 1, 0, info.size - 1, None)
    if number > len(part_sizes):
        raise InvalidPartNumber()
    first = sum(part_sizes[: number - 1])
    return ObjectPart(info, number, first, first + part_sizes[number - 1] - 1, len(part_sizes))


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


class _MultipartUploads(_Staging):
    """Mixed into DirLake, which provides ``_uploads`` (the .uploads folder), its ``_clock`` and
    ``_now``, ``_index``, ``_open_source`` and ``_commit``."""

    _uploads: Path
    _clock: Callable[[], float]
    _last_upload_ns: int  # the newest upload id's time, so that ids increase whatever the clock

    if TYPE_CHECKING:  # what DirLake provides, declared for the type checker only
        def _now(self) -> int: ...
        async def _index(self, bucket: str) -> _BucketIndex: ...
        def _commit(
            self, idx: _BucketIndex, staged: Path, record: _Record, conditions: Conditions = NO_CONDITIONS
        ) -> None: ...
        async def _open_source(
            self, source: CopySource, for_part: bool
        ) -> tuple[_Record, tuple[int, int] | None, BinaryIO]: ...

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
        now = max(int(self._clock() * 1e9), self._last_upload_ns + 1)
        self._last_upload_ns = now
        # Ids start with their creation time in fixed-width hex (ns), so id order is S3's listing
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
        now = self._now()
        etag = f'"{staged.md5.hex()}"'
        part = {"file": name, "size": staged.size, "etag": etag, "last_modified": now}
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
        self, bucket: str, key: str, upload_id: str, parts: list[tuple[int, str]],
        conditions: Conditions = NO_CONDITIONS,
    ) -> WriteResult:
        idx, folder, meta = await self._upload(bucket, key, upload_id)
        chosen = _choose_parts(parts, await self._io(self._read_parts, folder))
        staged = await self._io(self._spool_copy, [(folder / p["file"], 0, p["size"]) for p in chosen])
        digests = b"".join(bytes.fromhex(p["etag"].strip('"')) for p in chosen)
        etag = f'"{hashlib.md5(digests).hexdigest()}-{len(chosen)}"'
        record = _Record(
            key, "", staged.size, etag, self._now(), meta["content_type"], meta["metadata"], meta["headers"],
            parts=tuple(p["size"] for p in chosen),
        )  # fmt: skip
        # The part sizes are in the index row, so they commit with the object. Committed like a PUT; a crash before the upload is dropped leaves it listed, and
        # completing it again gives the same object.
        await self._io(self._commit, idx, staged.path, record, conditions)  # failed: the upload stays
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
