"""Blocks: the unit the cache stores and moves (D3N keeps fixed-size blocks, 4 MiB, as files on
SSD). An object of ``size`` bytes is cut into ``ceil(size / block_size)`` blocks; the last one is
short, and a 0-byte object has none. Pure arithmetic and hashing, no I/O.

A block is named by a ``BlockId`` derived from (bucket, key, etag, index, block size). The etag
makes a changed object's blocks new names, so old bytes are never served once the object's
metadata is refreshed; the block size is in the name too, so a cache directory kept across a
change of block size never serves a block cut at other boundaries.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

DEFAULT_BLOCK_SIZE = 4 * 1024 * 1024

# blake2b's personalisation separates block ids from any other hash of the same fields.
_PERSON = b"lakegate.block.1"
_MARKER_PERSON = b"lakegate.marker1"
_DIGEST_SIZE = 20
_HEX_DIGITS = frozenset("0123456789abcdef")


@dataclass(frozen=True, slots=True)
class BlockId:
    """The name of one block: 40 lower-case hex digits (blake2b, 160 bits). A value, hashable,
    usable as a key on disk and on the peer API (``str(block_id)`` is the hex)."""

    hex: str

    def __post_init__(self) -> None:
        if len(self.hex) != 2 * _DIGEST_SIZE or not set(self.hex) <= _HEX_DIGITS:
            raise ValueError(f"not a block id: {self.hex!r}")

    @classmethod
    def of(
        cls, bucket: str, key: str, etag: str, index: int, block_size: int = DEFAULT_BLOCK_SIZE
    ) -> BlockId:
        """The id of block ``index`` of the object version ``etag`` (as the lake sent it, quoted).

        Every field is length-prefixed, so ("a", "bc") and ("ab", "c") name different blocks."""
        if index < 0:
            raise ValueError(f"block index must be >= 0, not {index}")
        _check_block_size(block_size)
        digest = hashlib.blake2b(digest_size=_DIGEST_SIZE, person=_PERSON)
        for text in (bucket, key, etag):
            raw = text.encode("utf-8", "surrogatepass")
            digest.update(len(raw).to_bytes(8, "big"))
            digest.update(raw)
        digest.update(index.to_bytes(8, "big"))
        digest.update(block_size.to_bytes(8, "big"))
        return cls(digest.hexdigest())

    @classmethod
    def marker(cls, bucket: str, key: str) -> BlockId:
        """The id of a key's marker: an empty entry stored next to its first cached block,
        saying "blocks of this key may be in this store" (whatever the version)."""
        digest = hashlib.blake2b(digest_size=_DIGEST_SIZE, person=_MARKER_PERSON)
        for text in (bucket, key):
            raw = text.encode("utf-8", "surrogatepass")
            digest.update(len(raw).to_bytes(8, "big"))
            digest.update(raw)
        return cls(digest.hexdigest())

    def __str__(self) -> str:
        return self.hex


def block_count(size: int, block_size: int = DEFAULT_BLOCK_SIZE) -> int:
    """How many blocks an object of ``size`` bytes has (0 for an empty object)."""
    _check_block_size(block_size)
    if size < 0:
        raise ValueError(f"object size must be >= 0, not {size}")
    return -(-size // block_size)


def block_span(start: int, end: int, block_size: int = DEFAULT_BLOCK_SIZE) -> range:
    """The indexes of the blocks that hold the inclusive byte range ``start..end``."""
    _check_block_size(block_size)
    if start < 0 or end < start:
        raise ValueError(f"not a byte range: {start}-{end}")
    return range(start // block_size, end // block_size + 1)


def block_bounds(index: int, size: int, block_size: int = DEFAULT_BLOCK_SIZE) -> tuple[int, int]:
    """The inclusive byte range ``(first, last)`` block ``index`` covers in an object of ``size``
    bytes; the last block ends at the object's end."""
    if not 0 <= index < block_count(size, block_size):
        raise ValueError(f"an object of {size} bytes has no block {index} of {block_size} bytes")
    first = index * block_size
    return first, min(first + block_size, size) - 1


def _check_block_size(block_size: int) -> None:
    if block_size <= 0:
        raise ValueError(f"block size must be > 0, not {block_size}")
