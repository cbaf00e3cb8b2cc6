"""Object metadata (HEAD results) cached with a TTL.

A fresh entry answers HEAD and conditional requests without the lake; an expired one is
revalidated by a HEAD, and kept meanwhile (``known``: the key was read here). Writes and deletes through the gateway invalidate at once. Blocks are
keyed by ETag, so a changed ETag makes every old block unreachable.

With several worker processes on a node, each keeps its own entries, and a write through any
of them reaches all through ``generations`` (``cachetier.read.generations``): an entry is used
only while its key's and bucket's stamps are those read before its lookup left.

``MetadataFlights`` is the single flight of the lookups a miss makes: concurrent readers of a
key share one. Imports ``cachetier.lake`` (types) and ``cachetier.read.generations``.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from cachetier.lake import ObjectInfo
from cachetier.read.generations import Generations, Stamp


_UNSHARED: Stamp = (0, 0)


class MetadataCache:
    def __init__(
        self,
        ttl: float,
        clock: Callable[[], float],
        max_entries: int = 100_000,
        generations: Generations | None = None,
    ) -> None:
        self.ttl = ttl
        self._clock = clock
        self._max = max_entries
        self.generations = generations  # None: one process, whose invalidations pop its entries
        self._entries: OrderedDict[tuple[str, str], tuple[ObjectInfo, float, Stamp]] = OrderedDict()

    def get(self, bucket: str, key: str) -> ObjectInfo | None:
        if self.ttl <= 0:
            return None
        hit = self._entries.get((bucket, key))
        if hit is None:
            return None
        info, expires, stamp = hit
        if self.generations is not None and self.generations.stamp(bucket, key) != stamp:
            del self._entries[(bucket, key)]
            return None
        if self._clock() >= expires:
            return None  # kept for ``known``: the key was read here, its blocks may be cached
        self._entries.move_to_end((bucket, key))
        return info

    def known(self, bucket: str, key: str) -> ObjectInfo | None:
        """The key's last metadata here, fresh or expired (never once the key was written): a
        key read before is no cold key, whatever the stores' markers say."""
        hit = self._entries.get((bucket, key))
        if hit is None or (self.generations is not None and self.generations.stamp(bucket, key) != hit[2]):
            return None
        return hit[0]

    def stamp(self, bucket: str, key: str) -> Stamp:
        """To take before a lookup leaves for the lake, and give to ``put`` with its answer."""
        return self.generations.stamp(bucket, key) if self.generations is not None else _UNSHARED

    def put(self, info: ObjectInfo, stamp: Stamp | None = None) -> None:
        if self.ttl <= 0:
            return
        if stamp is None:
            stamp = self.stamp(info.bucket, info.key)
        self._entries[(info.bucket, info.key)] = (info, self._clock() + self.ttl, stamp)
        self._entries.move_to_end((info.bucket, info.key))
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def invalidate(self, bucket: str, key: str) -> ObjectInfo | None:
        """Forget the key, in every worker of the node; returns what this one had cached for it
        (fresh or not)."""
        if self.generations is not None:
            self.generations.bump(bucket, key)
        hit = self._entries.pop((bucket, key), None)
        return hit[0] if hit is not None else None

    def invalidate_bucket(self, bucket: str) -> None:
        if self.generations is not None:
            self.generations.bump(bucket)
        for k in [k for k in self._entries if k[0] == bucket]:
            del self._entries[k]

    def __len__(self) -> int:
        return len(self._entries)


class _Flight:
    """A metadata lookup on its way to the lake (a HEAD, or a cold key's first block GET),
    shared by the readers that need it."""

    future: asyncio.Future[ObjectInfo]
    stale = False  # the key was written meanwhile: do not cache the answer


class MetadataFlights:
    """The metadata lookups on their way to the lake, one per key, whose answers go into
    ``cache`` unless the key was written while they were out."""

    def __init__(self, cache: MetadataCache) -> None:
        self.cache = cache
        self._flights: dict[tuple[str, str], _Flight] = {}

    def join(self, bucket: str, key: str, lookup: Callable[[], Awaitable[ObjectInfo]]) -> Awaitable[ObjectInfo]:
        """The key's lookup in flight, else a new one made by ``lookup`` (single flight: 16 cold
        readers, one lake request). A reader that goes away does not cancel it for the others."""
        flight = self._flights.get((bucket, key))
        if flight is None:
            flight = _Flight()
            flight.future = asyncio.ensure_future(self._run(bucket, key, lookup, flight))
            self._flights[(bucket, key)] = flight
        return asyncio.shield(flight.future)

    async def _run(
        self, bucket: str, key: str, lookup: Callable[[], Awaitable[ObjectInfo]], flight: _Flight
    ) -> ObjectInfo:
        stamp = self.cache.stamp(bucket, key)  # a write in another worker meanwhile changes it
        try:
            info = await lookup()
        finally:
            if self._flights.get((bucket, key)) is flight:
                del self._flights[(bucket, key)]
        if not flight.stale:  # a write while the request was out: its answer may predate the write
            self.cache.put(info, stamp)
        return info

    def forget(self, bucket: str, key: str) -> None:
        """Detach the key's lookup in flight: a read that starts after a write must not join a
        lookup that may have been answered before the write, nor cache its answer."""
        flight = self._flights.pop((bucket, key), None)
        if flight is not None:
            flight.stale = True

    async def settled(self, bucket: str, key: str) -> None:
        """Wait for the key's lookup in flight, if any, to end (however it ends)."""
        flight = self._flights.get((bucket, key))
        if flight is not None:
            await asyncio.wait([flight.future])
