"""This node's tiers: L1, and L2 (the blocks it owns) when it is in a cluster. A block is read
from the first tier that has it; a read "asks" some tiers, whose counters see it, and only
probes the others; a store's OSError is a miss (or a block not kept), counted and logged here;
``policies.tiering`` says which tier keeps a fetched block. Imports ``cachetier.blocks``,
``cachetier.cluster`` (who owns a block), ``cachetier.telemetry``, ``cachetier.lake`` (types)
and ``policies``."""

from __future__ import annotations

import asyncio
import logging
from typing import cast

from cachetier.blocks.ids import BlockId, block_count
from cachetier.blocks.store import BlockStore, RegionStore
from cachetier.cluster.node import Cluster
from cachetier.context import current
from cachetier.lake import FileRegion, ObjectInfo, Piece
from cachetier.telemetry.counters import CacheStats
from policies import tiering

log = logging.getLogger("lakegate.readpath")

# Blocks of this size and more may be sent as regions of their files (sendfile): below it, a
# read and a write cost less than a thread hop to send a file.
REGION_MIN = 1024 * 1024

# L1 reads of blocks up to this size run on the event loop: a thread hop costs more than
# reading (and checksumming) a small file from the page cache (measured: 3 us at 4 KiB,
# 80 us at 1 MiB, 580 us at 4 MiB; an open, a read and a close cost ~7 us on this VM).
_INLINE_READ = 1024 * 1024


class Tiers:
    """L1 and the optional L2, with the error counters of ``stats``; ``cluster`` tells which
    blocks this node owns."""

    def __init__(
        self, l1: BlockStore, l2: BlockStore | None, stats: CacheStats, block_size: int, cluster: Cluster | None
    ) -> None:
        self.l1 = l1
        self.l2 = l2
        self.stats = stats
        self.block_size = block_size
        self.cluster = cluster
        # which tiers hand out file regions (an isinstance of a runtime Protocol is slow per read)
        self._files = {"l1": isinstance(l1, RegionStore), "l2": isinstance(l2, RegionStore)}

    def owned_here(self, bucket: str, key: str, index: int) -> bool:
        """Whether this node is block ``index``'s first owner (always, outside a cluster)."""
        if self.cluster is None:
            return True
        owners = self.cluster.owners(bucket, key, index)
        return not owners or owners[0].id == self.cluster.me.id

    def asked(self, info: ObjectInfo, index: int) -> tuple[str, ...]:
        """The tiers a client's block read asks on this node: L1, and L2 when this node is the
        block's owner. A non-owner's L2 (blocks kept from an earlier ring) is only probed: the
        read asks the owner's L2, which counts it there."""
        if self.l2 is None or not self.owned_here(info.bucket, info.key, index):
            return ("l1",)
        return ("l1", "l2")

    def holds(self, bid: BlockId) -> bool:
        """Whether a tier holds the block (an index lookup, no I/O)."""
        return bid in self.l1 or (self.l2 is not None and bid in self.l2)

    async def read(
        self, bid: BlockId, length: int, *, order: tuple[str, ...] = ("l1", "l2"), asked: tuple[str, ...] = ()
    ) -> tuple[bytes | None, str]:
        """The block from the first of this node's tiers in ``order`` that has it, and which
        tier that was. The tiers in ``asked`` count this look as one of their reads (a hit or a
        miss, so each tier's hits + misses is the block reads that asked it); the others are
        only probed, which their counters do not see."""
        for tier in order:
            store = self.l1 if tier == "l1" else self.l2
            if store is not None:
                data = await self._read_one(tier, store, bid, length, tier in asked)
                if data is not None:
                    return data, tier
        return None, ""

    async def read_piece(
        self, bid: BlockId, length: int, *, asked: tuple[str, ...] = (), region: bool = False
    ) -> tuple[Piece | None, str]:
        """``read``, but with ``region`` a block of ``REGION_MIN`` bytes or more in a store of
        files comes as a region of its open file, unread (sent with sendfile)."""
        if not region or length < REGION_MIN:
            return await self.read(bid, length, asked=asked)
        for tier in ("l1", "l2"):
            store = self.l1 if tier == "l1" else self.l2
            if store is None:
                continue
            found: Piece | None = None
            if self._files[tier]:  # a region of a block it checked, else read (and checked)
                found = self._region_one(tier, cast(RegionStore, store), bid, tier in asked)
            if found is None:
                found = await self._read_one(tier, store, bid, length, tier in asked)
            if found is not None:
                return found, tier
        return None, ""

    def _region_one(self, tier: str, store: RegionStore, bid: BlockId, asked: bool) -> FileRegion | None:
        try:  # an open, a read of the header and an fstat: inline
            return store.open_region(bid, counted=asked)
        except OSError as exc:
            self._failed(tier, "read" if asked else "look", bid, exc, logged=asked)
            return None

    async def probe(self, bid: BlockId) -> bytes | None:
        """The block if a tier has it, read in a thread and counted by none (a block stored
        while the reader that missed it looked)."""
        data, _ = await self.read(bid, _INLINE_READ + 1)
        return data

    async def _read_one(self, tier: str, store: BlockStore, bid: BlockId, length: int, asked: bool) -> bytes | None:
        """The block from one store, or None. A store that fails (EIO, a vanished directory) is
        a miss: the block comes from the next source, and the error is counted and logged."""
        try:
            if length <= _INLINE_READ:  # a miss: one failed open, no dearer than a look first
                return store.get(bid, counted=asked)
            if bid not in store:  # a miss costs no thread hop (an asked read still counts it)
                return store.get(bid) if asked else None
            return await asyncio.to_thread(store.get, bid, counted=asked)
        except OSError as exc:
            self._failed(tier, "read" if asked else "look", bid, exc, logged=asked)
            return None

    def keeper(self, owned_here: bool) -> BlockStore:
        """The store that keeps a fetched block (``policies.tiering``)."""
        tier = tiering.keeper(owned_here=owned_here, has_l2=self.l2 is not None)
        return self.l2 if tier is tiering.Tier.L2 and self.l2 is not None else self.l1

    def store(self, bucket: str, key: str, bid: BlockId, data: bytes, store: BlockStore | None = None) -> None:
        """Put a block into ``store`` (L1 by default), with the key's marker (blocking: call
        from a thread). A store that fails (a full disk) keeps nothing: counted and logged,
        never raised, as the reader or writer has what it needs."""
        store = self.l1 if store is None else store
        marker = BlockId.marker(bucket, key)
        try:
            if marker not in store:
                store.put(marker, b"")
            store.put(bid, data)
        except OSError as exc:
            self._failed("l2" if store is self.l2 else "l1", "store", bid, exc)

    def drop(self, info: ObjectInfo) -> None:
        """Delete the version's blocks from every tier (blocking: call from a thread)."""
        for index in range(block_count(info.size, self.block_size)):
            bid = BlockId.of(info.bucket, info.key, info.etag, index, self.block_size)
            for tier, store in (("l1", self.l1), ("l2", self.l2)):
                try:
                    if store is not None and bid in store:
                        store.delete(bid)
                except OSError as exc:  # unreachable once the key is written: eviction takes it
                    self._failed(tier, "delete", bid, exc)

    def _failed(self, tier: str, action: str, bid: BlockId, exc: OSError, *, logged: bool = True) -> None:
        """Count a cache disk's error, here, where it becomes a miss (or a block not kept), and
        log it once per block read: a probe's failure (``logged=False``) follows a read's that
        was logged. The block id names it, not the object's key."""
        self.stats.add(current.get().tenant, f"{tier}_errors")
        log.log(logging.WARNING if logged else logging.DEBUG,
                "%s %s of block %s failed: %s", tier.upper(), action, bid.hex, exc)
