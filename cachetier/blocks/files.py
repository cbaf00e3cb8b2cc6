"""A tier's blocks on disk, one file per block named by its id: what every worker process of a
node reads and writes directly, without asking anyone (nginx's cache names its files by key
hash the same way).

Layout under the tier's directory::

    blocks/<first two hex digits>/<block id hex>   a 16-byte header, then the block's bytes
    tmp/<block id hex>.<pid>.<n>                   a block being written by process <pid>

The header is ``b"LGB1"``, the crc32c of the bytes and their length (little-endian u32, u64).
A read opens the block's name, checks the header against what follows and returns the bytes:
no index lookup and no lock. A file that fails the check (a power cut tore it, a disk flipped
a bit, a hand truncated it) is corrupt: ``read`` raises ``CorruptBlock`` and the store removes it.

Publishing is crash-safe by rename: the bytes are written to a fresh file in tmp/ and renamed
onto the block's name, so a reader finds no file or a whole one, never a half-written one. A
process killed before the rename leaves only its tmp/ file, which the tier's space manager
removes (``remove_tmp_of``); nothing is fsynced, so after a power cut a renamed file may be short
or zeroed: its header then fails the check and the block is a miss (the cache may forget, never
lie). A reader that opened a file before it was evicted (unlinked) or replaced (renamed over)
reads that file whole: an open file outlives its name.
"""

from __future__ import annotations

import itertools
import os
import struct
import time
from collections.abc import Iterator
from contextlib import suppress

from awscrt.checksums import crc32c

from cachetier.lake import FileRegion, pread_upto

HEADER = struct.Struct("<4sIQ")
HEADER_SIZE = HEADER.size  # 16: what each block costs on disk besides its bytes
_MAGIC = b"LGB1"
_NOATIME = getattr(os, "O_NOATIME", 0)  # Linux; the file's owner (us) may ask it
# One pread takes the header and a small block together; a larger one takes a second pread of
# exactly its length (no copy, no over-allocation).
_FIRST_READ = 64 * 1024


# A block file's inode, mtime and size: another file renamed onto the name, or bytes written into
# the file (a tool, a hand), change it; touch() does not (it stamps the atime).
Identity = tuple[int, int, int]


class CorruptBlock(Exception):
    """A block file whose header does not match its bytes (not an OSError: nothing failed to read)."""


def file_size(data_length: int) -> int:
    return HEADER_SIZE + data_length


class BlockFiles:
    """The files of one tier's directory. Every method is safe to call from any thread of any
    process sharing the directory."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = os.path.abspath(os.fspath(directory))
        self.blocks = os.path.join(self.directory, "blocks")
        self.tmp = os.path.join(self.directory, "tmp")
        os.makedirs(self.tmp, exist_ok=True)
        os.makedirs(self.blocks, exist_ok=True)
        self._serial = itertools.count()

    def path(self, key: str) -> str:
        return f"{self.blocks}/{key[:2]}/{key}"

    def exists(self, key: str) -> bool:
        return os.path.exists(self.path(key))

    def read(self, key: str, *, use: bool = True) -> bytes | None:
        """The block's bytes, or None when it has no file. ``CorruptBlock`` when its header does
        not match; OSError when the file fails to read (EIO). ``use=False`` (the scrub's reads):
        the file's atime, its last use, is left alone."""
        try:
            fd = os.open(self.path(key), os.O_RDONLY if use else os.O_RDONLY | _NOATIME)
        except FileNotFoundError:
            return None
        try:
            head = pread_upto(fd, _FIRST_READ, 0)
            if len(head) < HEADER_SIZE:
                raise CorruptBlock(f"{len(head)} bytes, shorter than a header")
            magic, checksum, length = HEADER.unpack_from(head)
            if magic != _MAGIC:
                raise CorruptBlock("not a block file")
            if length <= _FIRST_READ - HEADER_SIZE:
                data = head[HEADER_SIZE : HEADER_SIZE + length]
            else:
                data = pread_upto(fd, length, HEADER_SIZE)
        finally:
            os.close(fd)
        if len(data) != length:
            raise CorruptBlock(f"{len(data)} bytes of {length}")
        if crc32c(data) != checksum:
            raise CorruptBlock("checksum mismatch")
        return data

    def open_region(self, key: str) -> tuple[FileRegion, Identity] | None:
        """The block's bytes as a region of its open file, to send without reading them, and the
        file's identity: the header is checked (its magic, and the file's length against it,
        which catches a torn file), the checksum is not (see ``DiskBlockStore.open_region``).
        None when it has no file."""
        try:
            fd = os.open(self.path(key), os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            head = os.pread(fd, HEADER_SIZE, 0)
            if len(head) < HEADER_SIZE:
                raise CorruptBlock(f"{len(head)} bytes, shorter than a header")
            magic, _, length = HEADER.unpack(head)
            if magic != _MAGIC:
                raise CorruptBlock("not a block file")
            st = os.fstat(fd)
            if st.st_size != HEADER_SIZE + length:
                raise CorruptBlock(f"{st.st_size - HEADER_SIZE} bytes of {length}")
        except BaseException:
            os.close(fd)
            raise
        return FileRegion(fd, HEADER_SIZE, length), _identity(st)

    def identity(self, key: str) -> Identity | None:
        """The block file's identity (None: no file): a file replaced or written in place since
        has another."""
        try:
            return _identity(os.stat(self.path(key)))
        except FileNotFoundError:
            return None

    def write(self, key: str, data: bytes) -> str:
        """Write the block to a new file in tmp/ and return its path (``publish`` renames it)."""
        tmp = f"{self.tmp}/{key}.{os.getpid()}.{next(self._serial)}"
        header = HEADER.pack(_MAGIC, crc32c(data), len(data))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            _write_full(fd, header)
            _write_full(fd, data)
        except BaseException:
            os.close(fd)
            with suppress(OSError):
                os.unlink(tmp)
            raise
        os.close(fd)
        return tmp

    def publish(self, tmp: str, key: str) -> None:
        """Rename a written block onto its name: readers see it whole from now on."""
        target = self.path(key)
        try:
            os.replace(tmp, target)
        except FileNotFoundError:
            if not os.path.exists(tmp):
                raise
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.replace(tmp, target)

    def discard(self, tmp: str) -> None:
        with suppress(OSError):
            os.unlink(tmp)

    def remove(self, key: str) -> bool:
        """Remove the block's file; False when it had none."""
        try:
            os.unlink(self.path(key))
        except FileNotFoundError:
            return False
        return True

    def touch(self, key: str) -> None:
        """Stamp the file's atime with now: its last use, which a restart orders blocks by. Its
        mtime stays the time its bytes were written (``identity``)."""
        with suppress(OSError):
            path = self.path(key)
            os.utime(path, ns=(time.time_ns(), os.stat(path).st_mtime_ns))

    def scan(self) -> Iterator[tuple[str, int, float]]:
        """(key, file size, last use: its atime) of every block file; files that vanish
        meanwhile are skipped."""
        with suppress(FileNotFoundError):
            for sub in os.scandir(self.blocks):
                if not sub.is_dir(follow_symlinks=False):
                    continue
                with suppress(FileNotFoundError):
                    for entry in os.scandir(sub.path):
                        with suppress(FileNotFoundError):
                            st = entry.stat(follow_symlinks=False)
                            if entry.is_file(follow_symlinks=False):
                                yield entry.name, st.st_size, st.st_atime

    def stray_files(self) -> list[str]:
        """Files under blocks/ that are no block's (wrong name or place): ``check`` removes them."""
        strays = []
        with suppress(FileNotFoundError):
            for sub in os.scandir(self.blocks):
                if not sub.is_dir(follow_symlinks=False):
                    strays.append(sub.path)
                    continue
                for entry in os.scandir(sub.path):
                    if entry.name[:2] != sub.name or not _is_hex(entry.name) or not entry.is_file():
                        strays.append(entry.path)
        return strays

    def tmp_files(self) -> list[tuple[str, int | None]]:
        """(path, writer pid or None) of every file in tmp/."""
        found = []
        with suppress(FileNotFoundError):
            for entry in os.scandir(self.tmp):
                parts = entry.name.split(".")
                pid = int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None
                found.append((entry.path, pid))
        return found

    def remove_tmp_of(self, pid: int | None = None) -> list[str]:
        """Remove the tmp/ files of writer ``pid`` (None: of every writer no longer running)."""
        removed = []
        for path, writer in self.tmp_files():
            if (writer == pid) if pid is not None else not _running(writer):
                with suppress(FileNotFoundError):
                    os.unlink(path)
                    removed.append(path)
        return removed


def _identity(st: os.stat_result) -> Identity:
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _write_full(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _is_hex(name: str) -> bool:
    return bool(name) and all(c in "0123456789abcdef" for c in name)


def _running(pid: int | None) -> bool:
    if pid is None:
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
