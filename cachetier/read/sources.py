"""Where a block this node's tiers miss comes from, as its single flight (``Fetches``): the
sources ``policies.selection`` plans over the block's owners (their L2 over the peer API, then
the lake), the lake's ranged GET with ``If-Match``, and the rest of a block from the lake when a
peer failed part way (bytes already received are kept). The owner's side, a block served to a
peer, is here too: never from another peer, so a block is one hop from its owner at most.
Imports ``cachetier.lake``, ``cachetier.blocks``, ``cachetier.cluster``, ``cachetier.telemetry``,
the read package's ``fetch``, ``metadata`` and ``tiers``, and ``policies.selection``."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from cachetier.blocks.ids import BlockId, block_bounds
from cachetier.blocks.store import BlockStore
from cachetier.cluster import wire
from cachetier.cluster.client import Answered, PeerUnavailable
from cachetier.cluster.node import Cluster
from cachetier.cluster.ring import Member
from cachetier.context import RequestContext, current
from cachetier.errors import PreconditionFailed
from cachetier.lake import Lake, ObjectInfo, ObjectStream
from cachetier.lake.conditions import Conditions
from cachetier.lake.ranges import ByteRange
from cachetier.read.fetch import BlockFetch, Fetches, ObjectChanged
from cachetier.read.metadata import MetadataCache
from cachetier.read.tiers import Tiers
from cachetier.telemetry.counters import CacheStats
from cachetier.telemetry.choice import Replicas
from cachetier.telemetry.reuse import SizingProbe
from policies import selection

log = logging.getLogger("lakegate.readpath")

Spawn = Callable[[Coroutine[Any, Any, None]], None]  # runs a coroutine as a background task


class Sources:
    """Starts and runs the fetches of blocks the tiers miss, one per block (``fetches``), each
    as its own background task (``spawn``), so a reader that goes away does not cancel it for
    the others."""

    def __init__(
        self, lake: Lake, tiers: Tiers, fetches: Fetches, meta: MetadataCache, stats: CacheStats,
        *, cluster: Cluster | None, spawn: Spawn, probe: SizingProbe | None = None,
        replicas: Replicas | None = None,
    ) -> None:
        self.lake = lake
        self.tiers = tiers
        self.fetches = fetches
        self.meta = meta
        self.stats = stats
        self.block_size = tiers.block_size
        self.cluster = cluster
        self.probe = probe  # the sizing loop's sampler: reads of owned blocks, fill timings
        self.replicas = replicas  # which of a block's peer owners to ask first (issue 15)
        self._spawn = spawn
        # versions whose blocks this node served to peers, which its metadata cache may not know
        self._served: OrderedDict[tuple[str, str], ObjectInfo] = OrderedDict()

    def start(
        self, info: ObjectInfo, index: int, bid: BlockId, ctx: RequestContext,
        opened: ObjectStream | None = None, *, for_peer: bool = False,
    ) -> BlockFetch:
        """Start fetching block ``index`` as its single flight; ``opened`` is the lake's answer
        that already carries its body (a cold key's first block), whose fetch then waits for
        the reader it was started for (not owned yet)."""
        fetch = BlockFetch(owned=opened is None)
        self.fetches.track(info, bid, fetch)
        self._spawn(self._run(info, index, bid, fetch, ctx, opened, for_peer=for_peer))
        return fetch

    async def _run(
        self, info: ObjectInfo, index: int, bid: BlockId, fetch: BlockFetch, ctx: RequestContext,
        opened: ObjectStream | None, *, for_peer: bool,
    ) -> None:
        """Fetch one block into ``fetch`` and then into a store. The entry stays in ``fetches``
        until the block is stored, so no reader can miss both and fetch it a second time."""
        try:
            data, store = None, None
            if opened is None:  # stored while a reader looked? (a probe: the reader counted its look)
                data = await self.tiers.probe(bid)
            if data is None:
                store = await self._fill(info, index, fetch, ctx, opened, for_peer)
            else:
                fetch.feed(data)
            fetch.finish()
            if store is not None and bid not in store:
                await asyncio.to_thread(self._keep, info, bid, fetch.chunks, store)
        except BaseException as exc:  # noqa: BLE001 - handed to every reader of this block
            if isinstance(exc, PreconditionFailed):
                self.meta.invalidate(info.bucket, info.key)
            fetch.finish(exc if isinstance(exc, Exception) else ObjectChanged("fetch cancelled"))
            if not isinstance(exc, Exception):
                raise
        finally:
            self.fetches.untrack(info, bid)

    def _keep(self, info: ObjectInfo, bid: BlockId, chunks: list[bytes], store: BlockStore) -> None:
        """Join a fetched block's chunks and store it (blocking: call from a thread). The join
        is here, not on the event loop: bytes.join copies a block of 1 MiB or more without the
        GIL, so hits go on meanwhile (measured: a fresh 4 MiB join takes ~1.7 ms)."""
        self.tiers.store(info.bucket, info.key, bid, _joined(chunks), store)

    async def _fill(
        self, info: ObjectInfo, index: int, fetch: BlockFetch, ctx: RequestContext,
        opened: ObjectStream | None, for_peer: bool,
    ) -> BlockStore:
        """Feed the block's bytes into ``fetch`` as they arrive, and say which store keeps them
        (``policies.tiering``): from the sources ``policies.selection`` plans, the block's
        owners that are other nodes, then the lake. A whole fill from one source is timed, as
        what a miss of the tier that keeps the block cost (the sizing loop's miss costs): a
        fetch from the owner's cache for L1, a lake fetch for the tier that keeps it; a peer's
        answer it fetched from the lake is the owner's L2 miss, not timed here."""
        keeper = self.tiers.keeper
        started = time.monotonic()
        if opened is not None or for_peer or self.cluster is None:
            await self._from_lake(info, index, fetch, ctx, opened)
            return self._timed(keeper(owned_here=True), started, fetch.size)
        owners = {m.id: m for m in self.cluster.owners(info.bucket, info.key, index)}
        for source in self._chosen(selection.sources(list(owners), self.cluster.me.id)):
            if isinstance(source, selection.FromLake):
                await self._from_lake(info, index, fetch, ctx, None)
                return self._timed(keeper(source.owned_here), started, fetch.size)
            member = owners[source.node_id]
            answers: list[tuple[wire.BlockAnswer, float]] = []
            begun = self.replicas.begin(member.id) if self.replicas is not None else 0.0
            try:
                await self._from_peer(member, info, index, fetch, ctx,
                                      lambda answer: answers.append((answer, time.monotonic())))
            except PeerUnavailable as exc:
                self._answered(member.id, False, begun, answers)
                log.info("block %s of %s/%s: owner %s failed (%s)", index, info.bucket, info.key, member.id, exc)
                self.cluster.suspect(member)
                if fetch.size:  # some bytes came: the rest from the lake
                    await self._from_lake(info, index, fetch, ctx, None)
                    return keeper(selection.after_partial_failure().owned_here)
                continue
            except BaseException:  # the lake's answer through the peer (412), a cancel: no peer fault
                self._answered(member.id, True, begun, answers)
                raise
            self._answered(member.id, True, begun, [])  # timed to the block's last byte
            store = keeper(owned_here=False)
            if answers and answers[0][0].cached is not False:  # (None: a peer that does not say)
                self._timed(store, started, fetch.size)
            return store
        raise AssertionError("unreachable: a plan ends with the lake")

    def _chosen(self, plan: tuple[selection.Source, ...]) -> list[selection.Source]:
        """The plan with its peers (those ahead of the lake) in the order ``replicas`` chooses."""
        peers = [s.node_id for s in plan if isinstance(s, selection.FromPeer)]
        if self.replicas is None or len(peers) < 2:
            return list(plan)
        return [*(selection.FromPeer(node) for node in self.replicas.order(peers)), plan[-1]]

    def _answered(self, node: str, ok: bool, begun: float,
                  answers: list[tuple[wire.BlockAnswer, float]]) -> None:
        """Tell ``replicas`` how the peer did: its latency to the answer's head when given (a
        failure, a cancel), else to now. A served block is timed to its last byte: an owner
        starved of CPU answers its head as soon as ever, and then streams slowly (issue 15)."""
        if self.replicas is not None:
            latency = (answers[0][1] if answers else time.monotonic()) - begun
            self.replicas.done(node, ok, latency)

    def _timed(self, store: BlockStore, started: float, size: int) -> BlockStore:
        """Tell the sizing loop what the miss of ``store``'s tier that this fill was cost."""
        if self.probe is not None:
            self.probe.miss("l2" if store is self.tiers.l2 else "l1", time.monotonic() - started, size)
        return store

    async def _from_peer(
        self, member: Member, info: ObjectInfo, index: int, fetch: BlockFetch, ctx: RequestContext,
        answered: Answered | None = None,
    ) -> None:
        assert self.cluster is not None
        lo, hi = block_bounds(index, info.size, self.block_size)
        self.stats.add(ctx.tenant, "peer_fetches")
        async for chunk in self.cluster.fetch_block(member, info, index, self.block_size, ctx.tenant, answered):
            if fetch.size + len(chunk) > hi - lo + 1:
                raise PeerUnavailable(f"{member.id} sent more than block {index}")
            first = not fetch.size
            fetch.feed(chunk)
            self.stats.add(ctx.tenant, "peer_bytes", len(chunk))
            if first:
                await _let_readers_run()
        if fetch.size != hi - lo + 1:
            raise PeerUnavailable(f"{member.id} sent {fetch.size} bytes of block {index}, expected {hi - lo + 1}")

    async def _from_lake(
        self, info: ObjectInfo, index: int, fetch: BlockFetch, ctx: RequestContext, stream: ObjectStream | None
    ) -> None:
        """The block from the lake into ``fetch``; when it already has its first bytes (from a
        peer that failed), only the rest."""
        lo, hi = block_bounds(index, info.size, self.block_size)
        if stream is None:
            self.stats.add(ctx.tenant, "lake_gets")
            stream = await self.lake.get_object(
                info.bucket, info.key, ByteRange(first=lo + fetch.size, last=hi), Conditions(if_match=info.etag)
            )
        try:
            async for chunk in stream.body:
                assert isinstance(chunk, bytes)  # a lake's stream: no file regions
                first = not fetch.size
                fetch.feed(chunk)
                self.stats.add(ctx.tenant, "lake_bytes", len(chunk))
                if first:
                    await _let_readers_run()
        finally:
            await stream.aclose()
        if fetch.size != hi - lo + 1:
            raise ObjectChanged(f"lake sent {fetch.size} bytes for block {index}, expected {hi - lo + 1}")

    async def serve(
        self, info: ObjectInfo, index: int, cached: Callable[[bool], None] | None = None
    ) -> AsyncIterator[bytes]:
        """Block ``index`` of ``info``'s version for a peer (this node is, or was, its owner):
        from L2 (or L1), else fetched from the lake once, however many peers ask, and kept in
        L2. Never from another peer. The version is remembered (``forget_served``).
        ``cached`` is told, before the first byte, whether the block was in a store here."""
        ctx = current.get()
        self._served[(info.bucket, info.key)] = info
        self._served.move_to_end((info.bucket, info.key))
        if len(self._served) > 10_000:
            self._served.popitem(last=False)
        bid = BlockId.of(info.bucket, info.key, info.etag, index, self.block_size)
        lo, hi = block_bounds(index, info.size, self.block_size)
        # a peer's read asks the owner's tier (L2); a write-through copy in L1 is only probed
        order = ("l2", "l1") if self.tiers.l2 is not None else ("l1",)
        data, _ = await self.tiers.read(bid, hi - lo + 1, order=order, asked=order[:1])
        if self.probe is not None:  # a read of this node's share of the L2 stream
            self.probe.reference(order[0], bid.hex, hi - lo + 1, ctx.tenant, data is not None)
        if cached is not None:
            cached(data is not None)
        if data is not None:
            self.stats.add(ctx.tenant, "peer_hits")
            yield data
            return
        fetch = self.fetches.get(bid)
        if fetch is None:
            self.stats.add(ctx.tenant, "misses")
            fetch = self.start(info, index, bid, ctx, for_peer=True)
        else:
            self.stats.add(ctx.tenant, "coalesced")
        async for piece in fetch.read(0, hi - lo + 1):
            yield piece

    def forget_served(self, bucket: str, key: str) -> ObjectInfo | None:
        """The key's version this node last served to peers, forgotten (the key was written)."""
        return self._served.pop((bucket, key), None)


def _joined(chunks: list[bytes]) -> bytes:
    """A block's bytes in one piece (a module function: tests see which thread joins)."""
    return b"".join(chunks)


async def _let_readers_run() -> None:
    """Yield to the event loop once. A block's bytes that are already buffered arrive without
    the fetch ever waiting, so without this its readers would get the first chunk only after
    the fetch has taken in everything buffered (measured: ~0.6 ms later on a cold 4 MiB block)."""
    await asyncio.sleep(0)
