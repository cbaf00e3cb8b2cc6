"""A block on its way from the lake (or a peer), readable by any number of readers as its bytes
arrive: the single flight of ``cachetier.read.path``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from cachetier.errors import ServiceUnavailable


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
