"""``CachedLake``: a ``Lake`` that serves reads through the block cache (``ReadPath``) and keeps
it coherent on writes. The S3 handlers call it like any lake and know nothing of caching.

Writes go to the lake as before (write-through). Every write or delete of a key invalidates
its cached metadata at once, on this node and, in a cluster, on every live peer before the
write is acknowledged; blocks are keyed by ETag, so a new object has new blocks (the old
version's known blocks are dropped, not to wait for eviction). With ``cache_on_write``, a PUT
whose body fits ``cache_on_write_max`` is kept in memory while it streams to the lake and, once
the lake has answered with its ETag, enters L1 as blocks, so a job reading its own output hits;
the bodies kept at once are bounded node-wide (``cachetier.write.budget``).

With a ``WriteBack`` (issue 14), a write whose request context asks for write-back is taken by
it (journaled and replicated, the lake later: ``cachetier.write.writeback``), unless it falls
back to write-through; every write-through write of a key first supersedes the key's pending
write-back versions, so none of them reaches the lake after it. Reads see pending versions
through the lake this cache reads (``cachetier.write.pending``).

A conditional write (``If-None-Match: *``, ``If-Match``; a DeleteObject's ``If-Match`` too) is
always written through: only the lake can decide it atomically with the write. Should a version of the key acknowledged in
write-back still be on its way there, the lake would decide against an object the client no
longer sees, so the write is answered 409 ConditionalRequestConflict (retried by clients, decided
once the flusher has landed the version). A version acknowledged on another node reaches this
node's journal with its pending notice, before that node answers its client; a conditional write
racing that notice is concurrent with it, and either order is one S3 could give. The exception:
a live node the notice did not reach (counted as ``notice_failures``) decides as if the version
were not there until the flush.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Iterator

from cachetier.blocks.ids import BlockId
from cachetier.blocks.store import BlockStore
from cachetier.cluster.node import Cluster
from cachetier.errors import ConditionalRequestConflict, Unimplemented
from cachetier.lake.conditions import NO_CONDITIONS, Conditions
from cachetier.context import current
from cachetier.lake import (
    Body,
    BucketInfo,
    CopySource,
    DeleteOutcome,
    Lake,
    ListPage,
    ListQuery,
    ObjectAttributes,
    ObjectInfo,
    ObjectPart,
    ObjectStream,
    PartsPage,
    UploadsPage,
    UploadsQuery,
    WriteResult,
)
from cachetier.lake.ranges import ByteRange
from cachetier.read.path import ReadPath
from policies import admission
from cachetier.telemetry.snapshots import BlockLocation, CacheSnapshot, TierStats
from cachetier.write.budget import MemoryBudget
from cachetier.write.pending import merged_uploads
from cachetier.write.writeback import MODE_HEADER, UPLOAD_PREFIX, WriteBack


@dataclasses.dataclass(frozen=True)
class CacheOnWrite:
    """Whether a PUT's blocks enter L1, for bodies up to ``max_bytes`` (held in memory while
    they stream), with at most ``budget_bytes`` held at once on the node (past it a PUT is
    written through without being kept); the one place these defaults live."""

    enabled: bool = True
    max_bytes: int = 64 << 20
    budget_bytes: int = 256 << 20


class CachedLake:
    def __init__(
        self, lake: Lake, reads: ReadPath, on_write: CacheOnWrite = CacheOnWrite(), *, cluster: Cluster | None = None,
        writeback: WriteBack | None = None,
    ):
        self.lake = lake
        self.reads = reads
        self.cluster = cluster
        self.writeback = writeback
        self.limits = admission.SizeLimits(reads.limits.max_read, on_write.max_bytes, on_write.enabled)
        self.budget = MemoryBudget(on_write.budget_bytes)

    # ---- reads through the cache -----------------------------------------------------------

    async def head_object(self, bucket: str, key: str) -> ObjectInfo:
        return await self.reads.head(bucket, key)

    async def object_part(self, bucket: str, key: str, part_number: int) -> ObjectPart:
        # Where the part lies comes from the lake each time (one HEAD for S3Lake); its bytes
        # are then read as a range through the cache (see gateway/s3/handlers/obj.py).
        return await self.lake.object_part(bucket, key, part_number)

    async def get_object(
        self, bucket: str, key: str, range: ByteRange | None = None, conditions: Conditions = Conditions()
    ) -> ObjectStream:
        return await self.reads.open(bucket, key, range, conditions)

    # ---- writes: through to the lake, then invalidate (and maybe fill L1) -------------------

    async def put_object(
        self, bucket: str, key: str, body: Body, length: int, attrs: ObjectAttributes, content_md5: str | None = None,
        conditions: Conditions = NO_CONDITIONS,
    ) -> WriteResult:
        context = current.get()
        if self.writeback is not None:
            if conditions.for_write:
                await self._nothing_pending(bucket, key)  # then written through: the lake decides
            elif context.write.back:
                result = await self.writeback.put(bucket, key, body, length, attrs, content_md5, context.write,
                                                  context.tenant)
                if result is not None:
                    return result
            await self.writeback.supersede(bucket, key)
        result = await self._put_through(bucket, key, body, length, attrs, content_md5, conditions)
        if context.write.back:  # asked for write-back, fell back: the answer says so
            result = dataclasses.replace(result, headers={**result.headers, MODE_HEADER: "write-through"})
        return result

    async def _nothing_pending(self, bucket: str, key: str) -> None:
        """Before a conditional write in a node with write-back: the lake decides the condition,
        so no version of the key may be pending on its way there (the client has been told it
        is written; the lake does not know it yet). One is: 409 ConditionalRequestConflict, S3's
        answer to a conditional write that meets a write in progress (clients retry it), and
        the retry passes once the flusher has written the version to the lake."""
        assert self.writeback is not None
        if await self.writeback.latest(bucket, key) is not None:
            raise ConditionalRequestConflict(
                "A write of this key acknowledged in write-back has not reached the lake yet; retry.", resource=key)

    async def _put_through(
        self, bucket: str, key: str, body: Body, length: int, attrs: ObjectAttributes, content_md5: str | None,
        conditions: Conditions = NO_CONDITIONS,
    ) -> WriteResult:
        context = current.get()
        self.reads.invalidate(bucket, key)
        tenant = context.tenant
        keep = admission.admits_write(self.limits, length, no_cache=current.get().no_cache)
        if keep and not self.budget.reserve(length):
            keep = False  # the node holds enough bodies already: write through without keeping
            self.reads.stats.add(tenant, "write_skipped")
        kept: list[bytes] = []
        try:
            try:
                result = await self.lake.put_object(
                    bucket, key, _tee(body, kept) if keep else body, length, attrs, content_md5, conditions
                )
            finally:
                await self._written(bucket, [key])
            if keep and sum(map(len, kept)) == length:
                await asyncio.to_thread(self._store_blocks, bucket, key, result.etag, kept)
        finally:
            kept.clear()
            if keep:
                self.budget.release(length)
        return result

    async def _written(self, bucket: str, keys: list[str]) -> None:
        for key in keys:
            self.reads.invalidate(bucket, key)
        if self.cluster is not None:
            await self.cluster.broadcast_invalidate(bucket, keys)

    def _store_blocks(self, bucket: str, key: str, etag: str, chunks: list[bytes]) -> None:
        """Stores the body (``chunks``, emptied as it goes, so memory falls as blocks reach the
        disk rather than doubling for one joined copy) as the object's blocks."""
        size = self.reads.block_size
        stored = 0
        for index, data in enumerate(_blocks(chunks, size)):
            self.reads.store_block(bucket, key, BlockId.of(bucket, key, etag, index, size), data)
            stored += 1
        self.reads.stats.add(current.get().tenant, "write_blocks", stored)

    async def copy_object(
        self, source: CopySource, bucket: str, key: str, attrs: ObjectAttributes | None = None
    ) -> WriteResult:
        context = current.get()
        if self.writeback is not None:
            if context.write.back:
                result = await self._copy_back(source, bucket, key, attrs)
                if result is not None:
                    return result
            await self.writeback.supersede(bucket, key)
        try:
            return await self.lake.copy_object(source, bucket, key, attrs)
        finally:
            await self._written(bucket, [key])

    async def _copy_back(
        self, source: CopySource, bucket: str, key: str, attrs: ObjectAttributes | None
    ) -> WriteResult | None:
        """A copy in write-back: the source's bytes (through the cache, pending or not) as a PUT."""
        assert self.writeback is not None
        context = current.get()
        stream = await self.get_object(source.bucket, source.key, None, source.conditions)
        try:
            info = stream.info
            if attrs is None:  # the COPY directive: the source's own metadata (not its checksums)
                kept = {k: v for k, v in info.headers.items() if not k.startswith("x-amz-checksum-")}
                attrs = ObjectAttributes(info.content_type, dict(info.metadata), kept)
            return await self.writeback.put(bucket, key, stream.body, stream.length, attrs, None,  # type: ignore[arg-type]
                                            context.write, context.tenant)
        finally:
            await stream.aclose()

    async def delete_object(self, bucket: str, key: str, conditions: Conditions = NO_CONDITIONS) -> None:
        context = current.get()
        if self.writeback is not None:
            if conditions.for_write:
                await self._nothing_pending(bucket, key)  # then done through: the lake decides
            elif context.write.back and await self.writeback.delete(bucket, key, context.write, context.tenant):
                self.reads.invalidate(bucket, key)
                return
            await self.writeback.supersede(bucket, key)
        try:
            await self.lake.delete_object(bucket, key, conditions)
        finally:
            await self._written(bucket, [key])

    async def delete_objects(self, bucket: str, keys: list[str]) -> list[DeleteOutcome]:
        context = current.get()
        if self.writeback is not None:
            if context.write.back:
                outcomes = []
                for key in keys:
                    await self.delete_object(bucket, key)
                    outcomes.append(DeleteOutcome(key))
                return outcomes
            for key in keys:
                await self.writeback.supersede(bucket, key)
        try:
            return await self.lake.delete_objects(bucket, keys)
        finally:
            await self._written(bucket, keys)

    async def complete_multipart_upload(
        self, bucket: str, key: str, upload_id: str, parts: list[tuple[int, str]],
        conditions: Conditions = NO_CONDITIONS,
    ) -> WriteResult:
        if self.writeback is not None:
            if upload_id.startswith(UPLOAD_PREFIX):
                if conditions.for_write:  # its object is acknowledged before the lake sees it
                    raise Unimplemented("A conditional CompleteMultipartUpload needs an upload created in "
                                        "write-through (x-lakegate-write-mode: write-through).")
                return await self.writeback.complete_upload(bucket, key, upload_id, parts, current.get().write)
            if conditions.for_write:
                await self._nothing_pending(bucket, key)
            await self.writeback.supersede(bucket, key)
        try:
            return await self.lake.complete_multipart_upload(bucket, key, upload_id, parts, conditions)
        finally:
            await self._written(bucket, [key])

    async def delete_bucket(self, bucket: str) -> None:
        if self.writeback is not None:
            await self.writeback.before_delete_bucket(bucket)
        try:
            await self.lake.delete_bucket(bucket)
        finally:
            self.reads.meta.invalidate_bucket(bucket)
            if self.writeback is not None:
                self.writeback.forget_bucket(bucket)
            if self.cluster is not None:
                await self.cluster.broadcast_invalidate(bucket, None)

    # ---- everything else: straight to the lake ----------------------------------------------

    async def list_buckets(self) -> list[BucketInfo]:
        return await self.lake.list_buckets()

    async def create_bucket(self, bucket: str, location: str | None = None) -> None:
        await self.lake.create_bucket(bucket, location)

    async def head_bucket(self, bucket: str) -> None:
        await self.lake.head_bucket(bucket)

    async def bucket_location(self, bucket: str) -> str:
        return await self.lake.bucket_location(bucket)

    async def list_objects(self, bucket: str, query: ListQuery) -> ListPage:
        return await self.lake.list_objects(bucket, query)

    # multipart: an upload created in write-back (its id starts with UPLOAD_PREFIX) is this
    # node's journal's; it must be driven through this node (another node answers NoSuchUpload)

    def _journaled(self, upload_id: str) -> WriteBack | None:
        return self.writeback if self.writeback is not None and upload_id.startswith(UPLOAD_PREFIX) else None

    async def create_multipart_upload(self, bucket: str, key: str, attrs: ObjectAttributes) -> str:
        context = current.get()
        if self.writeback is not None and context.write.back:
            return await self.writeback.create_upload(bucket, key, attrs, context.tenant)
        return await self.lake.create_multipart_upload(bucket, key, attrs)

    async def upload_part(
        self, bucket: str, key: str, upload_id: str, part_number: int, body: Body, length: int,
        content_md5: str | None = None,
    ) -> WriteResult:
        if (wb := self._journaled(upload_id)) is not None:
            return await wb.upload_part(bucket, key, upload_id, part_number, body, length, content_md5)
        return await self.lake.upload_part(bucket, key, upload_id, part_number, body, length, content_md5)

    async def upload_part_copy(
        self, source: CopySource, bucket: str, key: str, upload_id: str, part_number: int
    ) -> WriteResult:
        if (wb := self._journaled(upload_id)) is not None:
            stream = await self.get_object(source.bucket, source.key, source.range, source.conditions)
            try:
                return await wb.upload_part(bucket, key, upload_id, part_number, stream.body,  # type: ignore[arg-type]
                                            stream.length, None)
            finally:
                await stream.aclose()
        return await self.lake.upload_part_copy(source, bucket, key, upload_id, part_number)

    async def abort_multipart_upload(self, bucket: str, key: str, upload_id: str) -> None:
        if (wb := self._journaled(upload_id)) is not None:
            return await wb.abort_upload(bucket, key, upload_id)
        await self.lake.abort_multipart_upload(bucket, key, upload_id)

    async def list_parts(
        self, bucket: str, key: str, upload_id: str, max_parts: int = 1000, part_number_marker: int = 0
    ) -> PartsPage:
        if (wb := self._journaled(upload_id)) is not None:
            return await wb.list_parts(bucket, key, upload_id, max_parts, part_number_marker)
        return await self.lake.list_parts(bucket, key, upload_id, max_parts, part_number_marker)

    async def list_multipart_uploads(self, bucket: str, query: UploadsQuery) -> UploadsPage:
        page = await self.lake.list_multipart_uploads(bucket, query)
        if self.writeback is None:
            return page
        flushes = await self.writeback.flush_uploads(bucket, page.uploads)
        mine = await self.writeback.uploads(bucket)
        if not mine and not flushes:
            return page
        visible = [u for u in page.uploads if u.upload_id not in flushes]
        return merged_uploads(dataclasses.replace(page, uploads=visible), mine, query)

    # ---- queries (the admin endpoints and /metrics) -----------------------------------------

    def tiers(self) -> dict[str, BlockStore]:
        tiers = {"l1": self.reads.store}
        if self.reads.l2 is not None:
            tiers["l2"] = self.reads.l2
        return tiers

    def snapshot(self) -> CacheSnapshot:
        return CacheSnapshot(
            per_tenant=self.reads.stats.snapshot(),
            tiers={name: TierStats.of(store) for name, store in self.tiers().items()},
            metadata_entries=len(self.reads.meta),
            background_tasks=self.reads.background,
            write_buffered_bytes=self.budget.used,
            write_budget_bytes=self.budget.capacity,
        )

    def locate(self, bucket: str, key: str, index: int, etag: str | None = None) -> BlockLocation:
        """Which nodes own block ``index`` of ``bucket/key``, and whether this node's tiers hold
        that block of version ``etag`` (default: the version whose metadata is cached)."""
        owners = self.cluster.owners(bucket, key, index) if self.cluster is not None else ()
        if etag is None:
            info = self.reads.meta.get(bucket, key)
            etag = info.etag if info is not None else None
        held: dict[str, bool] = {}
        if etag is not None:
            bid = BlockId.of(bucket, key, etag, index, self.reads.block_size)
            held = {name: bid in store for name, store in self.tiers().items()}
        return BlockLocation(tuple(m.id for m in owners), etag, held)

    async def aclose(self) -> None:
        """Stops the read path's background fetches; the lake, the stores and the cluster are
        closed by whoever opened them (``gateway.wiring``)."""
        await self.reads.aclose()


def _blocks(chunks: list[bytes], size: int) -> Iterator[bytes]:
    """Consecutive ``size``-byte blocks (the last shorter) of the bytes in ``chunks``, which are
    taken off the list as they are used. A chunk is cut through a memoryview, so one spanning
    several blocks is copied once, into them, not again for each remainder."""
    chunks.reverse()  # pop() from the end is O(1)
    block: list[bytes | memoryview] = []
    filled = 0
    while chunks:
        view = memoryview(chunks.pop())
        start = 0
        while start < len(view):
            piece = view[start : start + size - filled]
            block.append(piece)
            filled += len(piece)
            start += len(piece)
            if filled == size:
                yield b"".join(block)
                block, filled = [], 0
    if block:
        yield b"".join(block)


async def _tee(body: Body, kept: list[bytes]) -> AsyncIterator[bytes]:
    async for chunk in body:
        kept.append(chunk)
        yield chunk
