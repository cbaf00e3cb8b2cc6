"""``WriteBack``: D3N's write-back with Pfimbi's replication (issue 14), the intake side. A write
in write-back mode is journaled on this node (fsynced), copied synchronously to K - 1 more
nodes' journals, announced to every live node, and only then acknowledged; the lake gets it
later from the flusher (``cachetier.write.flusher``).

What a 200 means, by the request's replication (``x-lakegate-replicas: N``,
``x-lakegate-sync-replicas: K``): the object is durable (fsynced) in K journals on K distinct
nodes, this one first and then the next nodes on the ring for the key; every live node knows
it is pending, so GET, HEAD and LIST on any node see it; and it reaches the lake unless all K
nodes lose their disks. Copies K + 1 .. N are made afterwards, in the background, best effort.

When a write cannot be taken in write-back it is written through instead (the caller does it,
``put`` returns None): the journal is past T + delta (policies/replication.py), or fewer than
K nodes are live to hold it. With the lake down as well, past T + delta is 503 SlowDown.
When K copies could not be made after the local commit (a peer failed mid-copy), the version is
flushed to the lake before the answer, as a write-through would have been.

Order per key: each version takes a sequence number above every one this node knows of the key
(every acknowledged one, since its notice reached every live node before its 200). A notice of
a newer version drops the older ones on every node and stops a flush of them in flight (the
lake's write is all or nothing, so a stopped flush leaves nothing); the notice is answered only
once no such flush runs. So the lake never sees an older version after a newer one was
acknowledged. A write-through write of a key with pending versions supersedes them the same way
before it goes to the lake.

Several workers: the journal (its sqlite index and body files) is the node's, shared by all;
each worker runs this intake for the requests it serves; one worker at a time (a file lock)
runs the flusher.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import dataclasses
import hashlib
import logging
import os
import secrets
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from cachetier.cluster.client import PeerUnavailable
from cachetier.cluster.node import Cluster
from cachetier.cluster.ring import Member
from cachetier.context import WriteIntent
from cachetier.errors import (
    BadDigest, BucketNotEmpty, EntityTooSmall, InvalidPart, InvalidPartOrder, NoSuchUpload, ServiceUnavailable, SlowDown,
)
from cachetier.lake import Body, Lake, ObjectAttributes, PartInfo, PartsPage, UploadInfo, WriteResult
from cachetier.write.journal import Journal, Staged, Upload, Version
from cachetier.write.messages import Copy, Notice
from cachetier.write.peers import JournalPeers, file_pieces
from policies import replication

log = logging.getLogger("lakegate.write")

MODE_HEADER = "x-lakegate-write-mode"  # on a write's answer: how it was taken (a fallback says write-through)
UPLOAD_PREFIX = "lgwb-"  # upload ids of write-back multipart uploads (the lake never sees them)
MIN_PART = 5 << 20  # S3's (and RGW's default) smallest part but the last
_WRITE_PIECE = 1 << 20
_FEED_DEPTH = 8  # pieces queued for a synchronous copy at most
_FEED_PIECE = 128 << 10  # bytes handed to a copy at a time (a client's chunks joined)

# counter name -> help text (exported as lakegate_writeback_<name>_total)
COUNTERS = {
    "accepted": "writes acknowledged in write-back (journaled, K copies)",
    "accepted_bytes": "bytes of writes acknowledged in write-back",
    "fallbacks": "write-back writes written through instead (journal past T + delta, or fewer than K nodes)",
    "slowdowns": "write-back writes refused with SlowDown (journal past T + delta, lake down)",
    "copy_failures": "synchronous copies a peer did not take (the write was flushed before its answer)",
    "copies_received": "copies of other nodes' writes committed in this node's journal",
    "notices_sent": "pending, flushed and supersede notices sent to peers",
    "notice_failures": "notices a peer did not acknowledge",
    "superseded": "pending versions dropped because a newer write of the key was acknowledged",
    "flushed": "versions written to the lake by this node",
    "flushed_bytes": "bytes written to the lake by this node's flusher",
    "flush_failures": "flushes that failed (retried)",
    "flush_aborted": "flushes stopped because the key was overwritten meanwhile",
    "async_copies": "background copies (beyond K) made",
    "async_copy_failures": "background copies that failed or were held back above T",
}


@dataclass(frozen=True)
class WriteBackConfig:
    """The node's write-back settings (``gateway.settings.WriteSettings`` makes one)."""

    replicas: int = 1  # N when the request does not say
    sync_replicas: int = 1  # K when the request does not say
    max_replicas: int = 3
    thresholds: replication.Thresholds = replication.Thresholds(1 << 30, 512 << 20)
    copy_timeout: float = 30.0
    notice_timeout: float = 2.0
    flush_concurrency: int = 4
    flush_retry: float = 1.0
    position_weights: tuple[float, ...] = replication.POSITION_WEIGHTS
    flow_control: bool = True  # False (the benchmark's ablation): every slot, FIFO, no yielding, no hold above T


class LakeHealth:
    """Whether the lake answered the flusher lately, for every worker of the node: the flusher
    (one worker) sets it, a marker file in the journal's directory while the lake is down, and
    every worker's intake reads it (a stat; without a directory, this process's own flag)."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self._marker = None if directory is None else os.path.join(directory, "lake-down")
        self._up = True

    @property
    def up(self) -> bool:
        return self._up if self._marker is None else not os.path.exists(self._marker)

    def set(self, up: bool) -> None:
        if up == self._up and self._marker is None:
            return
        self._up = up
        if self._marker is None:
            return
        if up:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._marker)
        elif not os.path.exists(self._marker):
            with open(self._marker, "w"):
                pass


def etag_of(md5_hex: str) -> str:
    return f'"{md5_hex}"'


def multipart_etag(part_etags: list[str]) -> str:
    """S3's ETag of an object completed from parts: the MD5 of their MD5s, a dash, their count."""
    digest = hashlib.md5(b"".join(binascii.unhexlify(e.strip('"')) for e in part_etags))  # noqa: S324 - S3's ETag
    return f'"{digest.hexdigest()}-{len(part_etags)}"'


class WriteBack:
    """This worker's write-back intake and the node's pending writes, as the read path asks."""

    def __init__(
        self, journal: Journal, lake: Lake, config: WriteBackConfig, *, me: str,
        cluster: Cluster | None = None, peers: JournalPeers | None = None,
        invalidate: Callable[[str, str], None] = lambda bucket, key: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.journal = journal
        self.lake = lake
        self.config = config
        self.me = me
        self.cluster = cluster
        self.peers = peers
        self.invalidate = invalidate  # forget this node's cached metadata of a key (every worker's)
        self.clock = clock
        self.counters: Counter[str] = Counter()
        self.lake_health = LakeHealth(journal.directory)
        self.wake = asyncio.Event()  # the flusher's, when it runs in this worker
        self._buckets: dict[str, float] = {}  # bucket -> until when it is known to exist

    # ---- what a request asks ------------------------------------------------------------------

    def replication(self, intent: WriteIntent) -> tuple[int, int]:
        """(N, K) for a request: its own, else the node's defaults; K <= N <= max."""
        n = intent.replicas if intent.replicas is not None else self.config.replicas
        k = intent.sync_replicas if intent.sync_replicas is not None else min(self.config.sync_replicas, n)
        n = max(1, min(n, self.config.max_replicas))
        return n, max(1, min(k, n))

    def holders(self, bucket: str, key: str, n: int) -> list[Member]:
        """This node, then the next live nodes on the ring for the key, ``n`` at most."""
        if self.cluster is None:
            return []
        live = {m.id: m for m in self.cluster.membership.live()}
        ordered = [m for m in self.cluster.owners(bucket, key, 0) if m.id in live]
        ordered += sorted((m for m in live.values() if m not in ordered),
                          key=lambda m: hashlib.blake2b(f"{bucket}\0{key}\0{m.id}".encode(), digest_size=8).digest())
        return [m for m in ordered if m.id != self.me][: n - 1]

    async def _seq(self, bucket: str, key: str) -> int:
        last = await asyncio.to_thread(self.journal.last_seq, bucket, key)
        return max(time.time_ns(), last + 1)

    async def check_bucket(self, bucket: str) -> None:
        """NoSuchBucket now, as the lake would answer, not at the flush (a bucket seen in the last
        five minutes is not asked again; with the lake down, a write is taken unchecked)."""
        if self._buckets.get(bucket, 0.0) > time.monotonic():
            return
        try:
            await self.lake.head_bucket(bucket)
        except (ServiceUnavailable, SlowDown):
            return
        self._buckets[bucket] = time.monotonic() + 300.0

    def forget_bucket(self, bucket: str) -> None:
        """After a DeleteBucket: the next write-back write to ``bucket`` asks the lake again."""
        self._buckets.pop(bucket, None)

    async def _admit(self, length: int, k: int, bucket: str, key: str, n: int) -> list[Member] | None:
        """The peers to hold copies (the first K - 1 synchronously), or None: write it through."""
        await self.check_bucket(bucket)
        dirty = await asyncio.to_thread(self.journal.dirty_bytes)
        decision = replication.intake(dirty, length, self.config.thresholds, self.lake_health.up)
        if decision is replication.Intake.SLOW_DOWN:
            self.counters["slowdowns"] += 1
            raise SlowDown("The write-back journal is full and the lake is not answering.")
        peers = self.holders(bucket, key, n)
        if decision is replication.Intake.WRITE_THROUGH or len(peers) < k - 1:
            self.counters["fallbacks"] += 1
            return None
        return peers

    # ---- PUT, DELETE, COPY (as a PUT of the source's bytes) ----------------------------------

    async def put(
        self, bucket: str, key: str, body: Body, length: int, attrs: ObjectAttributes,
        content_md5: str | None, intent: WriteIntent, tenant: str,
    ) -> WriteResult | None:
        """The write, acknowledged in write-back; None (body untouched): write it through.

        The synchronous copies stream to their peers as the body arrives (each a bounded feed: a
        slow peer slows the upload), so a copy costs the write little more than its last piece
        and the peer's fsync. The last piece reaches them only once the whole body was checked
        (length, Content-MD5), so a body that fails leaves no copy anywhere; a copy whose peer
        got other bytes (its answered MD5) counts as failed."""
        n, k = self.replication(intent)
        peers = await self._admit(length, k, bucket, key, n)
        if peers is None:
            return None
        sync = peers[: k - 1]
        draft = self._version(bucket, key, await self._seq(bucket, key), "put", "", length, attrs, tenant, peers, n, k)
        feeds = [_Feed() for _ in sync]
        for member, feed in zip(sync, feeds):
            feed.start(self._stream_copy(member, draft, feed))
        try:
            staged, last = await self._stage(body, feeds)
            try:
                if staged.size != length:
                    raise BadDigest("The body's length is not the one declared.")
                md5 = staged.md5_hex()
                if content_md5 is not None and _md5_b64(md5) != content_md5.strip():
                    raise BadDigest()
                version = dataclasses.replace(draft, etag=etag_of(md5))
                for feed in feeds:  # checked: the copies may complete
                    await feed.finish(last)
                await asyncio.to_thread(self.journal.commit, version, staged)
            except BaseException:
                await asyncio.to_thread(staged.abort)
                raise
        except BaseException:
            for feed in feeds:
                feed.fail()
            if any(feed.finished for feed in feeds):  # a copy may have committed: drop it there
                await self.notify_all(Notice("supersede", bucket, key, draft.seq + 1),
                                      only={m.id for m in sync})
            await asyncio.gather(*(feed.task for feed in feeds if feed.task), return_exceptions=True)
            raise
        await self._supersede_local(version)  # after the commit: see _supersede_local
        answers = await asyncio.gather(*(feed.task for feed in feeds if feed.task), return_exceptions=True)
        failed = [a if isinstance(a, BaseException) else ValueError(f"the copy got other bytes (MD5 {a})")
                  for a in answers if isinstance(a, BaseException) or a != md5]
        await self._settle(version, failed, {m.id for m in sync})
        return WriteResult(version.etag, _datetime(version.last_modified),
                           {**_checksums(attrs), MODE_HEADER: "write-back"})

    async def _stream_copy(self, member: Member, draft: Version, feed: _Feed) -> str:
        assert self.peers is not None
        return await self.peers.journal_copy(member, Copy(draft), feed.pieces(), self.config.copy_timeout)

    async def delete(self, bucket: str, key: str, intent: WriteIntent, tenant: str) -> bool:
        """A delete taken in write-back (False: do it through)."""
        n, k = self.replication(intent)
        peers = await self._admit(0, k, bucket, key, n)
        if peers is None:
            return False
        version = self._version(bucket, key, await self._seq(bucket, key), "delete", "", 0, ObjectAttributes(),
                                tenant, peers, n, k)
        await asyncio.to_thread(self.journal.commit, version, None)
        await self._supersede_local(version)
        await self._replicate(version, hashlib.md5(b"").hexdigest(), peers[: k - 1])  # noqa: S324
        return True

    def _version(self, bucket: str, key: str, seq: int, kind: str, etag: str, size: int, attrs: ObjectAttributes,
                 tenant: str, peers: list[Member], n: int, k: int, part_sizes: tuple[int, ...] = ()) -> Version:
        return Version(
            bucket=bucket, key=key, seq=seq, kind=kind, etag=etag, size=size, last_modified=self.clock(),
            content_type=attrs.content_type, metadata=dict(attrs.metadata), headers=dict(attrs.headers),
            part_sizes=part_sizes, tenant=tenant, holders=(self.me, *(m.id for m in peers[: n - 1])), position=0,
            sync=min(k, 1 + len(peers)),
        )

    async def _stage(self, body: Body, feeds: Sequence[_Feed] = ()) -> tuple[Staged, bytes | None]:
        """The body in a journal tmp file, written a piece (about 1 MiB) at a time in a thread,
        and handed to ``feeds`` in pieces of ``_FEED_PIECE`` or more but the last, which is
        returned (for the feeds, once the caller checked the whole)."""
        staged = await asyncio.to_thread(self.journal.stage)
        held: bytes | None = None  # the latest feed piece, not yet handed on
        try:
            batch: list[bytes] = []
            size = 0
            fed: list[bytes] = []
            fed_size = 0
            async for chunk in body:
                batch.append(chunk)
                size += len(chunk)
                if feeds:
                    fed.append(chunk)
                    fed_size += len(chunk)
                    if fed_size >= _FEED_PIECE:
                        if held is not None:
                            for feed in feeds:
                                await feed.put(held)
                        held, fed, fed_size = b"".join(fed), [], 0
                if size >= _WRITE_PIECE:
                    await asyncio.to_thread(staged.write, b"".join(batch))
                    batch, size = [], 0
            if batch:
                await asyncio.to_thread(staged.write, b"".join(batch))
            if fed:  # the tail joins the held piece: the last piece is all that follows
                if held is not None:
                    for feed in feeds:
                        await feed.put(held)
                held = b"".join(fed)
        except BaseException:
            await asyncio.to_thread(staged.abort)
            raise
        return staged, held

    async def _replicate(self, version: Version, md5: str, sync: list[Member]) -> None:
        """The synchronous copies of a committed version (its body read back from the journal),
        then ``_settle``."""
        results = await asyncio.gather(*(self._copy(m, version, md5) for m in sync), return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        await self._settle(version, failed, {m.id for m in sync})

    async def _settle(self, version: Version, failed: list[BaseException], copied: set[str]) -> None:
        """After the copies: the notices to every other live node; if a copy failed, the
        version goes to the lake before the answer (or the write fails: nothing stays)."""
        if failed:
            self.counters["copy_failures"] += len(failed)
            log.warning("write-back copy of %s/%s failed (%s): writing it to the lake now", version.bucket,
                        version.key, failed[0])
            bucket, key = version.bucket, version.key
            await self.notify_all(Notice("supersede", bucket, key, version.seq))  # older versions elsewhere stop first
            try:
                await self._flush_now(version)
            finally:  # the copies that did commit go: the lake has the version now, or the write failed
                await self.notify_all(Notice("supersede", bucket, key, version.seq + 1), only=copied)
            self.invalidate(bucket, key)
            return
        await self.notify_all(Notice.pending(version), skip=copied)
        self.invalidate(version.bucket, version.key)
        self.counters["accepted"] += 1
        self.counters["accepted_bytes"] += version.size
        self.wake.set()

    async def _copy(self, member: Member, version: Version, md5: str) -> None:
        assert self.peers is not None
        body = file_pieces(self.journal, version) if version.size else _empty()
        await self.peers.journal_copy(member, Copy(version, md5), body, self.config.copy_timeout)

    async def _flush_now(self, version: Version) -> None:
        """``version`` to the lake at once (a write-back that could not get its K copies)."""
        from cachetier.write.flusher import write_to_lake  # the flusher's one way to the lake

        try:
            await write_to_lake(self.lake, self.journal, version)
        except BaseException:
            await asyncio.to_thread(self.journal.remove, version.bucket, version.key, version.seq)
            raise
        await asyncio.to_thread(self.journal.remove, version.bucket, version.key, version.seq)

    # ---- multipart uploads in write-back ------------------------------------------------------

    async def create_upload(self, bucket: str, key: str, attrs: ObjectAttributes, tenant: str) -> str:
        await self.check_bucket(bucket)
        upload_id = f"{UPLOAD_PREFIX}{secrets.token_hex(16)}"
        doc = {"content_type": attrs.content_type, "metadata": dict(attrs.metadata), "headers": dict(attrs.headers)}
        await asyncio.to_thread(self.journal.create_upload, upload_id, bucket, key, doc, tenant, self.clock())
        return upload_id

    async def _upload(self, bucket: str, key: str, upload_id: str) -> Upload:
        upload = await asyncio.to_thread(self.journal.upload, upload_id)
        if upload is None or (upload.bucket, upload.key) != (bucket, key):
            raise NoSuchUpload()
        return upload

    async def upload_part(self, bucket: str, key: str, upload_id: str, number: int, body: Body, length: int,
                          content_md5: str | None) -> WriteResult:
        await self._upload(bucket, key, upload_id)
        staged, _ = await self._stage(body)
        try:
            if staged.size != length:
                raise BadDigest("The body's length is not the one declared.")
            if content_md5 is not None and _md5_b64(staged.md5_hex()) != content_md5.strip():
                raise BadDigest()
            etag = await asyncio.to_thread(self.journal.commit_part, upload_id, number, staged)
        except BaseException:
            await asyncio.to_thread(staged.abort)
            raise
        return WriteResult(etag, _datetime(self.clock()))

    async def complete_upload(self, bucket: str, key: str, upload_id: str, parts: list[tuple[int, str]],
                              intent: WriteIntent) -> WriteResult:
        """The upload's object, acknowledged once assembled, journaled and copied (as a PUT)."""
        upload = await self._upload(bucket, key, upload_id)
        held = {number: (etag, size) for number, etag, size, _ in await asyncio.to_thread(self.journal.parts, upload_id)}
        numbers = [number for number, _ in parts]
        if not parts or numbers != sorted(set(numbers)):
            raise InvalidPartOrder()
        for number, etag in parts:
            if number not in held or held[number][0].strip('"') != etag.strip().strip('"'):
                raise InvalidPart()
        sizes = tuple(held[number][1] for number in numbers)
        if any(size < MIN_PART for size in sizes[:-1]):
            raise EntityTooSmall()
        n, k = self.replication(intent)
        attrs = ObjectAttributes(upload.attrs.get("content_type"), upload.attrs.get("metadata", {}),  # type: ignore[arg-type]
                                 upload.attrs.get("headers", {}))  # type: ignore[arg-type]
        peers = self.holders(bucket, key, n)
        if len(peers) < k - 1:
            peers = []  # not enough nodes: journaled here, flushed before the answer (below)
        staged = await asyncio.to_thread(self.journal.assemble, upload_id, numbers)
        try:
            etag = multipart_etag([held[number][0] for number in numbers])
            version = self._version(bucket, key, await self._seq(bucket, key), "put", etag, sum(sizes), attrs,
                                    upload.tenant, peers, n, k, part_sizes=sizes)
            md5 = staged.md5_hex()
            await asyncio.to_thread(self.journal.commit, version, staged)
            await self._supersede_local(version)  # after the commit: see _supersede_local
        except BaseException:
            await asyncio.to_thread(staged.abort)
            raise
        await asyncio.to_thread(self.journal.drop_upload, upload_id)
        if k > 1 and not peers:  # fewer than K nodes: to the lake before the answer
            await self._settle(version, [LookupError(f"fewer than {k} nodes are live")], set())
        else:
            await self._replicate(version, md5, peers[: k - 1])
        return WriteResult(etag, _datetime(version.last_modified))

    async def abort_upload(self, bucket: str, key: str, upload_id: str) -> None:
        await self._upload(bucket, key, upload_id)
        await asyncio.to_thread(self.journal.drop_upload, upload_id)

    async def list_parts(self, bucket: str, key: str, upload_id: str, max_parts: int, marker: int) -> PartsPage:
        await self._upload(bucket, key, upload_id)
        rows = [r for r in await asyncio.to_thread(self.journal.parts, upload_id) if r[0] > marker]
        page = [PartInfo(number, etag, size, _datetime(modified)) for number, etag, size, modified in rows[:max_parts]]
        truncated = len(rows) > max_parts
        return PartsPage(page, truncated, page[-1].part_number if truncated and page else None, marker, max_parts)

    async def uploads(self, bucket: str) -> list[UploadInfo]:
        rows = await asyncio.to_thread(self.journal.uploads, bucket)
        return [UploadInfo(u.key, u.upload_id, _datetime(u.created)) for u in rows]

    async def before_delete_bucket(self, bucket: str) -> None:
        """Before a DeleteBucket: BucketNotEmpty while an object of the bucket is pending (the lake
        does not have it yet, and would drop it); this node's pending deletes in it go to the lake
        first (the lake still holds those objects, and would refuse)."""
        latest: list[Version] = []
        after = ""
        while page := await asyncio.to_thread(self.journal.listing, bucket, "", after, 1000):
            latest += page
            after = page[-1].key
        if any(v.kind != "delete" for v in latest) or len(await asyncio.to_thread(self.journal.uploads, bucket)):
            raise BucketNotEmpty(resource=bucket)
        for version in latest:
            if version.local:
                await self._flush_now(version)
                await self.notify_all(Notice("flushed", bucket, version.key, version.seq))

    async def flush_uploads(self, bucket: str, uploads: list[UploadInfo]) -> set[str]:
        """The ids of those lake uploads that are flushes (``flusher.write_to_lake``) of pending
        multipart versions: every lake upload of a key whose newest pending version has parts.
        ListMultipartUploads does not show them: the client never created them (and its abort
        would fail the flush). A client's own write-through upload of such a key is hidden too
        until the flush ends (the lake's upload ids cannot tell the two apart)."""

        def flushes() -> set[str]:
            latest: dict[str, Version | None] = {}
            for upload in uploads:
                if upload.key not in latest:
                    latest[upload.key] = self.journal.latest(bucket, upload.key)
            mine = self.journal.lake_uploads(bucket)  # this node's, also just completed
            return {u.upload_id for u in uploads if u.upload_id in mine or (
                (v := latest[u.key]) is not None and v.part_sizes)}

        return await asyncio.to_thread(flushes) if uploads else set()

    # ---- order per key -------------------------------------------------------------------------

    async def _supersede_local(self, version: Version) -> None:
        """Drop this node's older versions of the key, waiting for a flush of one in flight.
        A write of this node calls it once ``version`` is committed, never before: a crash (or a
        failed commit) in between must leave the last acknowledged version pending, not none
        (both pending, the flusher writes them in seq order, so the lake ends with the newer)."""
        gone = await asyncio.to_thread(self.journal.remove, version.bucket, version.key, version.seq - 1)
        self.counters["superseded"] += sum(1 for v in gone if v.local)
        await self._flushes_settled(version.bucket, version.key, version.seq)

    async def _flushes_settled(self, bucket: str, key: str, seq: int) -> None:
        deadline = time.monotonic() + self.config.copy_timeout
        while any(s < seq for s in await asyncio.to_thread(self.journal.flushing, bucket, key)):
            if time.monotonic() > deadline:
                log.warning("a flush of %s/%s did not stop in %.0f s", bucket, key, self.config.copy_timeout)
                return
            await asyncio.sleep(0.02)

    async def supersede(self, bucket: str, key: str) -> None:
        """Before a write-through write of the key: no pending version of it may reach the lake
        after it (nothing to do, and no message, when none is known)."""
        if not await asyncio.to_thread(self.journal.versions, bucket, key):
            return
        seq = await self._seq(bucket, key)
        stub = Version(bucket, key, seq, "delete")
        await self._supersede_local(stub)
        await self.notify_all(Notice("supersede", bucket, key, seq))

    async def on_notice(self, notice: Notice, sender: str) -> None:
        """A peer's notice (the journal route's handler). A pending notice of a version already
        flushed or overtaken here (a re-announcement that crossed the flush) is ignored by the
        journal's "gone" mark."""
        if notice.kind == "flushed":
            await self.flushed(notice.bucket, notice.key, notice.seq)
        else:
            await self._supersede_local(Version(notice.bucket, notice.key, notice.seq, "delete"))
            if notice.version is not None:
                await asyncio.to_thread(self.journal.note, notice.version)
        self.invalidate(notice.bucket, notice.key)

    async def flushed(self, bucket: str, key: str, seq: int) -> None:
        """The lake has ``seq`` of the key: it and older versions go."""
        await asyncio.to_thread(self.journal.remove, bucket, key, seq)

    async def on_copy(self, version: Version) -> None:
        """A copy of a peer's write is about to be committed here."""
        await self._supersede_local(version)
        self.invalidate(version.bucket, version.key)
        self.counters["copies_received"] += 1

    async def notify_all(self, notice: Notice, skip: set[str] | frozenset[str] = frozenset(),
                         only: set[str] | None = None) -> None:
        """``notice`` to every live peer (but those in ``skip``; only those in ``only``, if given)."""
        if self.cluster is None or self.peers is None:
            return
        members = [m for m in self.cluster.membership.peers() if m.id not in skip and (only is None or m.id in only)]
        results = await asyncio.gather(
            *(self.peers.journal_notice(m, notice, self.config.notice_timeout) for m in members), return_exceptions=True)
        self.counters["notices_sent"] += len(members)
        for member, result in zip(members, results):
            if isinstance(result, PeerUnavailable):
                self.counters["notice_failures"] += 1
                log.warning("%s notice of %s/%s not acknowledged by %s: %s", notice.kind, notice.bucket, notice.key,
                            member.id, result)
            elif isinstance(result, BaseException):
                raise result

    # ---- what the read path asks ---------------------------------------------------------------

    async def latest(self, bucket: str, key: str) -> Version | None:
        return await asyncio.to_thread(self.journal.latest, bucket, key)

    def counter_values(self) -> dict[str, int]:
        return {name: self.counters[name] for name in COUNTERS}

    def report(self) -> dict[str, object]:
        """``/_lakegate/admin/replication``: the node's journal (dirty bytes, pending objects, lag
        per replica position) and this worker's counts."""
        now = self.clock()
        positions = self.journal.positions()
        return {
            "dirty_bytes": self.journal.dirty_bytes(),
            "pending_objects": self.journal.pending_objects(),
            "lag_s": {str(p): round(max(0.0, now - oldest), 3) for p, (_, _, oldest) in sorted(positions.items())},
            "positions": {str(p): {"objects": o, "bytes": b} for p, (o, b, _) in sorted(positions.items())},
            "thresholds": {"soft": self.config.thresholds.soft, "delta": self.config.thresholds.delta},
            "lake_up": self.lake_health.up,
            "defaults": {"replicas": self.config.replicas, "sync_replicas": self.config.sync_replicas},
            "counters": self.counter_values(),
        }


class _Feed:
    """The body as it arrives, for one synchronous copy: a bounded queue (a slow peer slows
    the upload, no body piles up in memory) that its copy task reads; ``fail`` makes the copy's
    body raise, so the peer discards it."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue(maxsize=_FEED_DEPTH)
        self.task: asyncio.Task[str] | None = None
        self.finished = False

    def start(self, copy: Coroutine[Any, Any, str]) -> None:
        self.task = asyncio.ensure_future(copy)

    async def put(self, item: bytes | BaseException | None) -> None:
        """``item`` for the copy, unless its task already ended (a failed peer stalls nothing)."""
        if self.task is None or self.task.done():
            return
        if not self.queue.full():
            self.queue.put_nowait(item)
            return
        putter = asyncio.ensure_future(self.queue.put(item))
        await asyncio.wait({putter, self.task}, return_when=asyncio.FIRST_COMPLETED)
        if not putter.done():
            putter.cancel()

    async def finish(self, last: bytes | None) -> None:
        if last is not None:
            await self.put(last)
        await self.put(None)
        self.finished = True

    def fail(self) -> None:
        try:
            self.queue.put_nowait(ConnectionAbortedError("the write failed: this copy is void"))
        except asyncio.QueueFull:
            if self.task is not None:
                self.task.cancel()

    async def pieces(self) -> AsyncIterator[bytes]:
        while True:
            item = await self.queue.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item


async def _empty() -> AsyncIterator[bytes]:
    return
    yield b""


def _md5_b64(md5_hex: str) -> str:
    return base64.b64encode(binascii.unhexlify(md5_hex)).decode()


def _datetime(epoch: float) -> datetime:
    return datetime.fromtimestamp(int(epoch), tz=timezone.utc)


def _checksums(attrs: ObjectAttributes) -> Mapping[str, str]:
    """The checksum headers a PUT's answer carries (the client's, verified by the body)."""
    return {name: value for name, value in attrs.headers.items() if name.startswith("x-amz-checksum-")}
