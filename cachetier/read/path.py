"""The read path (D3N's L1): a byte range -> the blocks that cover it -> each from this node's
tiers (``tiers``) or, on a miss, from its sources (``sources``: the owner's L2 in a cluster, else
one ranged lake GET of exactly that block), streamed to the client as it arrives. ``ReadPath``
coordinates; the pieces live next to it:

- Single flight: readers of a block on its way join that one fetch (``fetch``); readers of a key
  whose metadata is on its way join that lookup (``metadata``). Each runs as its own task, so a
  reader that goes away does not cancel it for the others.
- Read-ahead (``policies.readahead``): while block i is served, blocks i+1..i+N of the range are
  fetched; a request that continues where the previous one on the object ended is sequential
  (``sequential``), and gets N blocks past its own end fetched too.
- Consistency: blocks are keyed by ETag, and every block GET carries ``If-Match: <etag>``; an
  object changed in the lake under a cached ETag fails that GET (412) instead of mixing bytes.
  Before the first byte is sent, that retries once with fresh metadata; after it, the response
  is cut (the client sees a broken transfer, never wrong bytes).
- Memory: at most the blocks in flight (readers x (1 + read-ahead)) are held, never an object.

Imports the read package's modules, ``cachetier.lake``, ``blocks``, ``cluster``, ``telemetry``
and ``policies``.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from cachetier.blocks.ids import BlockId, block_bounds, block_span
from cachetier.blocks.store import BlockStore
from cachetier.cluster.node import Cluster
from cachetier.context import RequestContext, current
from cachetier.errors import InvalidRange, NoSuchKey, PreconditionFailed
from cachetier.lake import FileRegion, Lake, ObjectInfo, ObjectStream, Served
from cachetier.lake.conditions import Conditions
from cachetier.lake.ranges import ByteRange
from cachetier.read.config import ReadConfig
from cachetier.read.fetch import BlockFetch, Fetches, ObjectChanged
from cachetier.read.generations import Generations
from cachetier.read.metadata import MetadataCache, MetadataFlights
from cachetier.read.sequential import SequentialReaders
from cachetier.read.sources import Sources
from cachetier.read.tiers import Tiers
from cachetier.telemetry.counters import CacheStats
from cachetier.telemetry.choice import Replicas
from cachetier.telemetry.reuse import SizingProbe
from policies import admission, readahead


# A hot block's id (a blake2b and a validated dataclass) is the same on every hit: computed once
# per (bucket, key, etag, index, block size) among the last 4096 read, as ids are values.
_block_id = functools.lru_cache(maxsize=4096)(BlockId.of)


class ReadPath:
    """The coordinator: metadata discovery, a GET's blocks (from ``tiers``, else a fetch from
    ``sources``), read-ahead, invalidation after writes, and the background tasks."""

    def __init__(
        self,
        lake: Lake,
        store: BlockStore,
        stats: CacheStats,
        config: ReadConfig = ReadConfig(),
        *,
        clock: Callable[[], float],
        l2: BlockStore | None = None,
        cluster: Cluster | None = None,
        generations: Generations | None = None,
        probe: SizingProbe | None = None,
        replicas: Replicas | None = None,
    ) -> None:
        self.lake = lake
        self.cluster = cluster
        self.stats = stats
        self.block_size = config.block_size
        self.readahead = config.readahead
        self.limits = admission.SizeLimits(max_read=config.max_cached_object)  # the read side only
        self.meta = MetadataCache(config.meta_ttl, clock, generations=generations)
        self.tiers = Tiers(store, l2, stats, config.block_size, cluster)
        self.fetches = Fetches()
        self.probe = probe  # samples the blocks clients read, for the tiers' miss-ratio curves
        self.sources = Sources(lake, self.tiers, self.fetches, self.meta, stats, cluster=cluster, spawn=self._spawn,
                               probe=probe, replicas=replicas)
        self._lookups = MetadataFlights(self.meta)
        self._sequential = SequentialReaders(config.block_size, config.readahead)
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def store(self) -> BlockStore:
        """L1."""
        return self.tiers.l1

    @property
    def l2(self) -> BlockStore | None:
        return self.tiers.l2

    def store_block(self, bucket: str, key: str, bid: BlockId, data: bytes, store: BlockStore | None = None) -> None:
        """Put a block into ``store`` (L1 by default): ``Tiers.store`` (blocking: call from a thread)."""
        self.tiers.store(bucket, key, bid, data, store)

    # ---- metadata ---------------------------------------------------------------------------

    async def head(self, bucket: str, key: str, first_block: int | None = None) -> ObjectInfo:
        """The object's metadata: from the metadata cache, else from the lake.

        ``first_block`` is the block a GET starts with. When this store has never held a
        block of the key (no marker), a miss asks the lake for that block instead of a HEAD:
        the ranged GET's answer carries the metadata too, and its body becomes that block's
        fetch, so a cold read costs one round trip to its first byte, not two. When blocks may
        be cached (after a restart, an expired TTL, a write-through), a HEAD revalidates them."""
        ctx = current.get()
        if not ctx.no_cache:
            info = self.meta.get(bucket, key)
            if info is not None:
                self.stats.add(ctx.tenant, "meta_hits")
                return info
        self.stats.add(ctx.tenant, "meta_misses")
        if first_block is not None and not self._cold_here(bucket, key, first_block):
            first_block = None
        return await self._lookups.join(bucket, key, lambda: self._discover(bucket, key, first_block, ctx))

    async def _discover(self, bucket: str, key: str, first_block: int | None, ctx: RequestContext) -> ObjectInfo:
        info = None
        if first_block is not None:
            info = await self._first_block(bucket, key, first_block, ctx)
        return info if info is not None else await self.lake.head_object(bucket, key)

    async def _first_block(self, bucket: str, key: str, index: int, ctx: RequestContext) -> ObjectInfo | None:
        """GET block ``index`` and keep its body as that block's fetch. None when the answer
        cannot serve as one (a range past the end, an empty object): a HEAD then. An object too
        large to cache costs this one cut-short GET on its first read (then its metadata is
        cached, and reads of it go straight to the lake)."""
        lo = index * self.block_size
        try:
            stream = await self.lake.get_object(bucket, key, ByteRange(first=lo, last=lo + self.block_size - 1))
        except InvalidRange:
            return None
        info = stream.info
        if not admission.admits_read(self.limits, info.size):  # will bypass: the metadata is all we need
            await stream.aclose()
            return info
        if not lo < info.size or stream.content_range != block_bounds(index, info.size, self.block_size):
            await stream.aclose()
            return None
        bid = BlockId.of(bucket, key, info.etag, index, self.block_size)
        if bid in self.fetches or self.tiers.holds(bid):
            await stream.aclose()
            return info
        self.stats.add(ctx.tenant, "lake_gets")
        self.sources.start(info, index, bid, ctx, opened=stream)
        return info

    def _cold_here(self, bucket: str, key: str, index: int) -> bool:
        """Whether a cold read of the key may take its metadata from block ``index``'s lake GET:
        no store here has held a block of it, and the block is not another node's to fetch."""
        if self.meta.known(bucket, key) is not None:
            # read here before (its metadata expired): its blocks may be cached even when their
            # marker was evicted (markers are never hit, so LRU takes them first), and a
            # first-block GET of a held block is cut short, its bytes on the lake link wasted
            return False
        if self.tiers.holds(BlockId.marker(bucket, key)) or self.fetches.any_of(bucket, key):
            return False  # (a block on its way, e.g. for a peer: a first-block GET would repeat it)
        return self.tiers.owned_here(bucket, key, index)

    def invalidate(self, bucket: str, key: str) -> None:
        """Forget the key's metadata, and any HEAD in flight for it: a read that starts after a
        write must not join a HEAD that may have been answered before the write.

        The blocks of the versions this node knew are dropped too (in the background): the one
        in its metadata cache, and the one it last served to peers as their owner. They are
        unreachable once the key is written, and would only wait for eviction."""
        known = [self.meta.invalidate(bucket, key), self.sources.forget_served(bucket, key)]
        self._lookups.forget(bucket, key)
        for old in {info.etag: info for info in known if info is not None and info.size > 0}.values():
            self._spawn(asyncio.to_thread(self.tiers.drop, old))

    # ---- GET --------------------------------------------------------------------------------

    async def open(self, bucket: str, key: str, rng: ByteRange | None, conditions: Conditions) -> ObjectStream:
        ctx = current.get()
        if ctx.no_cache:
            return await self._bypass(bucket, key, rng, conditions, ctx)
        for _ in (1, 2):
            try:
                info = await self.head(bucket, key, self._starting_block(rng))
            except NoSuchKey:
                # A HEAD's 404 has no body: it cannot tell a missing key from a missing bucket.
                # A plain GET answers with the lake's own error (or the object, if it just came).
                return await self._bypass(bucket, key, rng, conditions, ctx)
            if not admission.admits_read(self.limits, info.size):
                return await self._bypass(bucket, key, rng, conditions, ctx)
            conditions.check(info.etag, info.last_modified)
            content_range = rng.resolve(info.size) if rng is not None else None
            if info.size == 0:
                return ObjectStream(info, None, _empty())
            start, end = content_range or (0, info.size - 1)
            stream = ObjectStream(info, content_range, self._stream(info, start, end, ctx))
            try:  # the first piece before any header is sent: a stale ETag can still be retried
                return await stream.started()
            except (ObjectChanged, PreconditionFailed, NoSuchKey):
                self.meta.invalidate(bucket, key)
        # Changed again between the fresh HEAD and its first block (writers replacing the key
        # as fast as it is read, e.g. a commit log's compare and swap): the lake serves one
        # version whole, as S3 would, rather than the reader getting an error for a race.
        return await self._bypass(bucket, key, rng, conditions, ctx)

    def _starting_block(self, rng: ByteRange | None) -> int | None:
        """The block a GET starts with, when it is known before the size (not for a suffix)."""
        if rng is None:
            return 0
        return None if rng.first is None else rng.first // self.block_size

    async def _bypass(
        self, bucket: str, key: str, rng: ByteRange | None, conditions: Conditions, ctx: RequestContext
    ) -> ObjectStream:
        stream = await self.lake.get_object(bucket, key, rng, conditions)
        self.stats.add(ctx.tenant, "bypass")
        self.stats.add(ctx.tenant, "bytes_bypassed", stream.length)
        return stream

    async def _stream(self, info: ObjectInfo, start: int, end: int, ctx: RequestContext) -> Served:
        span = block_span(start, end, self.block_size)
        ahead_limit = self._sequential.limit(info, start, end)
        for index in span:
            ahead = readahead.window(index, ahead_limit, self.readahead)
            lo, hi = block_bounds(index, info.size, self.block_size)
            a, b = max(start, lo) - lo, min(end, hi) - lo + 1
            bid = _block_id(info.bucket, info.key, info.etag, index, self.block_size)
            asked = self.tiers.asked(info, index)
            data, tier = await self.tiers.read_piece(bid, hi - lo + 1, asked=asked, region=ctx.zero_copy)
            if self.probe is not None:  # the stream of the tier that keeps this block: L2 if it is ours
                self.probe.reference(asked[-1], bid.hex, hi - lo + 1, ctx.tenant, data is not None)
            if data is not None:
                self._prefetch(info, ahead, ctx)
                self.stats.add(ctx.tenant, "hits" if tier == "l1" else "l2_hits")
                self.stats.add(ctx.tenant, f"bytes_from_{tier}", b - a)
                if isinstance(data, FileRegion):
                    yield data.slice(a, b)
                else:
                    yield data[a:b] if (a, b) != (0, len(data)) else data
                continue
            pieces = self._fetch_for(info, index, bid, ctx).read(a, b)
            async for piece in pieces:
                self.stats.add(ctx.tenant, "bytes_from_lake", len(piece))
                yield piece
                break
            # read-ahead once this block's first bytes are out: signing and sending the next
            # GETs on the event loop would otherwise delay them (time to first byte)
            self._prefetch(info, ahead, ctx)
            async for piece in pieces:
                self.stats.add(ctx.tenant, "bytes_from_lake", len(piece))
                yield piece

    def _fetch_for(self, info: ObjectInfo, index: int, bid: BlockId, ctx: RequestContext) -> BlockFetch:
        """The fetch a client's read of a block the tiers miss reads: the one on its way (the
        read is coalesced), else a new one (a miss). A fetch metadata discovery started for
        this very read is its own: a miss too."""
        fetch = self.fetches.get(bid)
        if fetch is None:
            self.stats.add(ctx.tenant, "misses")
            return self.sources.start(info, index, bid, ctx)
        if not fetch.owned:
            self.stats.add(ctx.tenant, "misses")
            fetch.owned = True
        else:
            self.stats.add(ctx.tenant, "coalesced")
        return fetch

    def _prefetch(self, info: ObjectInfo, indexes: range, ctx: RequestContext) -> None:
        for index in indexes:
            bid = BlockId.of(info.bucket, info.key, info.etag, index, self.block_size)
            if bid not in self.fetches:
                self._spawn(self._prefetch_one(info, index, bid, ctx))

    async def _prefetch_one(self, info: ObjectInfo, index: int, bid: BlockId, ctx: RequestContext) -> None:
        if bid in self.fetches or self.tiers.holds(bid):  # index lookups, no I/O
            return
        if bid not in self.fetches:
            self.stats.add(ctx.tenant, "prefetches")
            self.sources.start(info, index, bid, ctx)

    async def serve_block(
        self, info: ObjectInfo, index: int, cached: Callable[[bool], None] | None = None
    ) -> AsyncIterator[bytes]:
        """Block ``index`` of ``info``'s version for a peer (``Sources.serve``)."""
        # a cold read here may be GETting this very block: join it, not race it
        await self._lookups.settled(info.bucket, info.key)
        async for piece in self.sources.serve(info, index, cached):
            yield piece

    @property
    def background(self) -> int:
        """Tasks still running in the background: block fetches (a block stays in flight
        until it is stored) and drops of invalidated blocks."""
        return len(self._tasks)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def _empty() -> AsyncIterator[bytes]:
    return
    yield b""  # an async generator that yields nothing

