"""Write stamps shared by a node's worker processes, so that a write through any worker (or a
peer's invalidation, which reaches one worker of this node) makes every worker's cached
metadata of the key stale at once, before the write is acknowledged.

A table of 64-bit stamps in a file every worker maps (``mmap``; in memory for a lone process):
one slot per (bucket, key) hash and one per bucket hash. ``bump`` writes a fresh random value
into the slot; a metadata entry remembers the slots' values read before its lookup left for the
lake, and is used only while they are unchanged. Stamps are random, not counters, so two
workers bumping one slot at once cannot write back a value an entry already holds (two
increments could both write n + 1); a torn read or write of a slot yields some other value,
which only makes an entry stale early. Keys sharing a slot (65,536 of each) invalidate each
other: a spare lake HEAD, never a stale answer.
"""

from __future__ import annotations

import mmap
import os
import random
import struct
import zlib

_SLOTS = 1 << 16
_STAMP = struct.Struct("<Q")
SIZE = 2 * _SLOTS * _STAMP.size

Stamp = tuple[int, int]


class Generations:
    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self._random = random.Random()
        if path is None:
            self._table: bytearray | mmap.mmap = bytearray(SIZE)
            return
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size != SIZE:
                os.ftruncate(fd, SIZE)  # zeros: every stamp the same, no entry yet to compare
            self._table = mmap.mmap(fd, SIZE)
        finally:
            os.close(fd)

    def stamp(self, bucket: str, key: str) -> Stamp:
        """The key's and its bucket's current values, to keep with metadata about to be fetched."""
        return (
            _STAMP.unpack_from(self._table, _key_slot(bucket, key))[0],
            _STAMP.unpack_from(self._table, _bucket_slot(bucket))[0],
        )

    def bump(self, bucket: str, key: str | None = None) -> None:
        """Make every stamp of the key (None: of the whole bucket) taken so far stale."""
        offset = _bucket_slot(bucket) if key is None else _key_slot(bucket, key)
        _STAMP.pack_into(self._table, offset, self._random.getrandbits(64) | 1)

    def close(self) -> None:
        if isinstance(self._table, mmap.mmap):
            self._table.close()


def _key_slot(bucket: str, key: str) -> int:
    # a stable hash: Python's own str hash differs between processes
    return (zlib.crc32(f"{bucket}\0{key}".encode(errors="surrogatepass")) % _SLOTS) * _STAMP.size


def _bucket_slot(bucket: str) -> int:
    return (_SLOTS + zlib.crc32(bucket.encode(errors="surrogatepass")) % _SLOTS) * _STAMP.size
