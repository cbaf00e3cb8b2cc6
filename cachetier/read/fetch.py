"""Blocks on their way from the lake (or a peer): each one a ``BlockFetch`` that any number of
readers read as its bytes arrive, and ``Fetches``, the registry that makes it the block's single
flight. Imports ``cachetier.errors``, ``cachetier.blocks.ids`` and ``cachetier.lake`` (types)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator

from cachetier.blocks.ids import BlockId
from cachetier.errors import ServiceUnavailable
from cachetier.lake import ObjectInfo


class ObjectChanged(ServiceUnavailable):
    """The lake's object no longer has the ETag its cached metadata says (a retryable 503:
    SDKs retry it, and the retry sees the new object)."""

    message = "The object changed in the lake while it was being read. Please retry."


class BlockFetch:
    """One block on its way from the lake, readable by any number of readers as it arrives."""

    def __init__(self, owned: bool = True) -> None:
        # False while a fetch started by metadata discovery waits for the reader it was
        # started for: that reader owns it rather than joining someone else's
        self.owned = owned
        self.chunks: list[bytes] = []
        self.size = 0
        self.done = False
        self.error: BaseException | None = None
        self._changed = asyncio.Event()

    def feed(self, chunk: bytes) -> None:
        self.chunks.append(chunk)
        self.size += len(chunk)
        self._wake()

    def finish(self, error: BaseException | None = None) -> None:
        self.done, self.error = True, error
        self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def read(self, start: int, stop: int) -> AsyncIterator[bytes]:
        """Bytes [start, stop) of the block, as soon as they have arrived."""
        i = offset = 0
        while True:
            changed = self._changed
            while i < len(self.chunks):
                chunk = self.chunks[i]
                lo, hi = max(start, offset), min(stop, offset + len(chunk))
                if lo < hi:
                    yield chunk[lo - offset : hi - offset]
                offset += len(chunk)
                i += 1
                if offset >= stop:
                    return
            if self.error is not None:
                raise self.error
            if self.done:
                raise ObjectChanged(f"block ended after {offset} bytes, wanted {stop}")
            await changed.wait()


class Fetches:
    """The blocks on their way in, one ``BlockFetch`` each: a reader that misses a block joins
    the fetch registered for it rather than starting a second one. An entry stays until its
    block is stored, so no reader can miss both."""

    def __init__(self) -> None:
        self._fetches: dict[BlockId, BlockFetch] = {}
        self._keys: Counter[tuple[str, str]] = Counter()  # keys with blocks in _fetches

    def get(self, bid: BlockId) -> BlockFetch | None:
        return self._fetches.get(bid)

    def __contains__(self, bid: BlockId) -> bool:
        return bid in self._fetches

    def any_of(self, bucket: str, key: str) -> bool:
        """Whether a block of the key is on its way (of any version)."""
        return (bucket, key) in self._keys

    def track(self, info: ObjectInfo, bid: BlockId, fetch: BlockFetch) -> None:
        """Register ``fetch`` as block ``bid``'s single flight (until ``untrack``)."""
        self._fetches[bid] = fetch
        self._keys[(info.bucket, info.key)] += 1

    def untrack(self, info: ObjectInfo, bid: BlockId) -> None:
        self._fetches.pop(bid, None)
        name = (info.bucket, info.key)
        self._keys[name] -= 1
        if self._keys[name] <= 0:
            del self._keys[name]
