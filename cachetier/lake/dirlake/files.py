"""DirLake's file plumbing: blocking work run off the event loop, the .tmp staging area (temp
paths, atomic JSON replaces, bodies and copies spooled into fsynced temp files), the fsync and
cleanup helpers, and the stream that reads an object's data file.

Every temp file written here is fsynced before it is renamed into place (here, or by a commit),
and the folder holding the new name is fsynced after; the order for objects is in the package
docstring.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import dataclasses
import hashlib
import json
import os
import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from cachetier.errors import BadDigest, IncompleteBody, InternalError, InvalidDigest, ServiceUnavailable
from cachetier.lake import Body

T = TypeVar("T")

CHUNK = 1 << 20
MAX_PUT_SIZE = 5 << 30  # S3's limit for one PutObject or one part


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
class _Staged:
    """Bytes written and fsynced under .tmp, waiting to be committed."""

    path: Path
    size: int
    md5: bytes


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


class _Staging:
    """Mixed into DirLake: the .tmp staging area under ``_tmp`` and the thread hop for
    blocking work. Bytes are staged here, fsynced, then committed by a rename."""

    _tmp: Path

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

    async def _receive(self, body: Body, length: int, expected_md5: bytes | None) -> _Staged:
        """Stream ``body`` into a fsynced temp file. Nothing of it survives an exception."""
        path = self._tmp_path()
        out: BinaryIO = await self._io(open, path, "xb")
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
