"""Write-back (issue 14) without a network: three in-process nodes, each with its own journal
(real files and sqlite in a tmp directory), ``WriteBack``, ``PendingLake`` under its read path,
``CachedLake`` and ``Flusher``, over one in-memory lake; peers are the checked twin
``MemoryPeers`` calling each node's ``JournalOwner`` (the code the peer API runs). Flushes are
driven by calling the flusher's rounds, so nothing here depends on timing."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from doubles import B, BS, Clock, memory_lake

from cachetier.lake.conditions import NO_CONDITIONS, Conditions
from cachetier.blocks.store import MemoryBlockStore
from cachetier.cachedlake import CachedLake
from cachetier.cluster.config import MembershipConfig
from cachetier.cluster.memory import MemoryPeers
from cachetier.cluster.membership import Membership
from cachetier.cluster.node import Cluster
from cachetier.cluster.owner import Owner
from cachetier.cluster.ring import Member
from cachetier.context import RequestContext, WriteIntent, current
from cachetier.errors import (
    BadDigest, BucketNotEmpty, ConditionalRequestConflict, NoSuchBucket, NoSuchKey, PreconditionFailed, SlowDown,
    Unimplemented,
)
from cachetier.lake import Body, ListQuery, ObjectAttributes, UploadsQuery, WriteResult
from cachetier.lake.memory import MemoryLake
from cachetier.lake.ranges import ByteRange
from cachetier.read.config import ReadConfig
from cachetier.read.path import ReadPath
from cachetier.telemetry.counters import CacheStats
from cachetier.write.flusher import Flusher
from cachetier.write.journal import Journal, Version
from cachetier.write.pending import pending_lake
from cachetier.write.peers import JournalOwner
from cachetier.write.writeback import MIN_PART, MODE_HEADER, WriteBack, WriteBackConfig
from policies.replication import Thresholds

BACK = WriteIntent(back=True)


class Node:
    def __init__(self, name: str, lake: MemoryLake, directory: Path, owners: dict[str, Owner],
                 journals: dict[str, JournalOwner], clock: Clock, config: WriteBackConfig) -> None:
        self.member = Member(name, f"http://{name}:9000")
        self.membership = Membership(self.member, MembershipConfig(64, 1, failure_timeout=30.0), clock=clock)
        self.peers = MemoryPeers(self.member, owners, journals=journals)
        self.cluster = Cluster(self.membership, self.peers, seeds=[])
        self.journal = Journal(directory / name)
        self.wb = WriteBack(self.journal, lake, config, me=name, cluster=self.cluster, peers=self.peers)
        self.reads = ReadPath(pending_lake(lake, self.wb), MemoryBlockStore(1 << 30), CacheStats(),
                              ReadConfig(block_size=BS, meta_ttl=60.0, readahead=0), clock=clock,
                              l2=MemoryBlockStore(1 << 30), cluster=self.cluster)
        self.wb.invalidate = self.reads.invalidate
        self.cache = CachedLake(pending_lake(lake, self.wb), self.reads, cluster=self.cluster, writeback=self.wb)
        self.flusher = Flusher(self.wb, grace=0.0)
        owners[self.member.url] = Owner(self.cluster, self.reads, dict)
        journals[self.member.url] = JournalOwner(name, self.journal, self.wb.on_notice, self.wb.on_copy)


def cluster(tmp_path: Path, lake: MemoryLake, count: int = 3, **config: object) -> tuple[list[Node], Clock]:
    clock = Clock()
    owners: dict[str, Owner] = {}
    journals: dict[str, JournalOwner] = {}
    settings = WriteBackConfig(**{"replicas": 2, "sync_replicas": 2, **config})  # type: ignore[arg-type]
    made = [Node(f"n{i}", lake, tmp_path, owners, journals, clock, settings) for i in range(count)]
    for node in made:
        for other in made:
            node.membership.heard_from(other.member)
    return made, clock


def kill(dead: Node, others: list[Node], clock: Clock) -> None:
    """``dead`` stops: the others stop hearing from it, and its peer calls fail."""
    clock.now += 31
    for node in others:
        node.peers.down.add(dead.member.id)
        for other in others:
            node.membership.heard_from(other.member)
        node.membership.tick()


async def body(data: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(data), 1000):
        yield data[start : start + 1000]


async def put(node: Node, key: str, data: bytes, intent: WriteIntent = BACK) -> str:
    current.set(RequestContext("t", write=intent))
    result = await node.cache.put_object(B, key, body(data), len(data), ObjectAttributes("text/plain", {"a": "1"}))
    return result.etag


async def multipart(node: Node, key: str, parts: list[bytes]) -> WriteResult:
    """A multipart upload of ``parts`` in write-back through ``node``, completed."""
    current.set(RequestContext("t", write=BACK))
    upload = await node.cache.create_multipart_upload(B, key, ObjectAttributes())
    etags = [(n, (await node.cache.upload_part(B, key, upload, n, body(p), len(p))).etag)
             for n, p in enumerate(parts, 1)]
    return await node.cache.complete_multipart_upload(B, key, upload, etags)


async def get(node: Node, key: str, rng: ByteRange | None = None) -> bytes:
    stream = await node.cache.get_object(B, key, rng)
    try:
        return b"".join([bytes(p) async for p in stream.body])  # type: ignore[arg-type]
    finally:
        await stream.aclose()


async def in_lake(lake: MemoryLake, key: str) -> bytes | None:
    try:
        stream = await lake.get_object(B, key)
    except NoSuchKey:
        return None
    return b"".join([bytes(p) async for p in stream.body])  # type: ignore[arg-type]


async def flush_all(nodes: list[Node]) -> None:
    """Flusher rounds on every node until none has work running or startable."""
    for _ in range(50):
        for node in nodes:
            await node.flusher.round()
        running = [task for node in nodes for _, task in node.flusher.running.values()]
        if not running:
            if not any(node.journal.local_versions() and node.flusher.retry_at == {} for node in nodes):
                return
        await asyncio.gather(*running, return_exceptions=True)


def md5(data: bytes) -> str:
    return f'"{hashlib.md5(data).hexdigest()}"'  # noqa: S324


@pytest.fixture
def lake() -> MemoryLake:
    return memory_lake(B)


def test_a_write_back_put_is_acknowledged_before_the_lake_has_it_and_read_everywhere(
        tmp_path: Path, lake: MemoryLake) -> None:
    nodes, _ = cluster(tmp_path, lake)
    data = os.urandom(3 * BS + 17)

    async def main() -> None:
        assert await put(nodes[0], "k", data) == md5(data)
        assert await in_lake(lake, "k") is None
        for node in nodes:  # read-your-writes on every node, whole and ranged, HEAD too
            assert await get(node, "k") == data
            assert await get(node, "k", ByteRange(BS, 2 * BS)) == data[BS : 2 * BS + 1]
            info = await node.cache.head_object(B, "k")
            assert (info.etag, info.size, info.content_type, dict(info.metadata)) == (md5(data), len(data),
                                                                                      "text/plain", {"a": "1"})
            page = await node.cache.list_objects(B, ListQuery(v2=True))
            assert [(e.key, e.etag) for e in page.entries] == [("k", md5(data))]
        holders = [n for n in nodes if n.journal.pending_objects()]
        assert len(holders) == 2 and nodes[0] in holders  # K = 2: this node and the next on the ring
        await flush_all(nodes)
        assert await in_lake(lake, "k") == data
        assert (await lake.head_object(B, "k")).etag == md5(data)  # the ETag the client got
        assert [n.journal.versions(B, "k") for n in nodes] == [[], [], []]  # copies and notices dropped
        assert await get(nodes[2], "k") == data

    asyncio.run(main())


def test_a_later_put_is_never_overtaken_by_an_earlier_flush(tmp_path: Path, lake: MemoryLake) -> None:
    nodes, _ = cluster(tmp_path, lake)

    async def main() -> None:
        await put(nodes[0], "k", b"first")
        await put(nodes[1], "k", b"second")  # another node: the first is superseded everywhere
        await put(nodes[2], "k", b"third", WriteIntent())  # write-through: supersedes the pending
        assert await in_lake(lake, "k") == b"third"
        await flush_all(nodes)
        assert await in_lake(lake, "k") == b"third"
        for node in nodes:
            assert await get(node, "k") == b"third"

    asyncio.run(main())


def test_a_pending_delete_hides_the_key_and_reaches_the_lake(tmp_path: Path, lake: MemoryLake) -> None:
    nodes, _ = cluster(tmp_path, lake)

    async def main() -> None:
        await put(nodes[0], "k", b"x", WriteIntent())
        current.set(RequestContext("t", write=BACK))
        await nodes[1].cache.delete_object(B, "k")
        assert await in_lake(lake, "k") == b"x"
        for node in nodes:
            with pytest.raises(NoSuchKey):
                await node.cache.head_object(B, "k")
            assert (await node.cache.list_objects(B, ListQuery())).entries == []
        await flush_all(nodes)
        assert await in_lake(lake, "k") is None

    asyncio.run(main())


def test_the_surviving_copy_flushes_when_the_receiving_node_dies(tmp_path: Path, lake: MemoryLake) -> None:
    nodes, clock = cluster(tmp_path, lake)
    data = os.urandom(2 * BS)

    async def main() -> None:
        await put(nodes[0], "k", data)
        survivors = nodes[1:]
        kill(nodes[0], survivors, clock)
        assert await get(survivors[1], "k") == data  # still readable: from the surviving copy
        await flush_all(survivors)
        assert await in_lake(lake, "k") == data

    asyncio.run(main())


def test_multipart_in_write_back_keeps_the_parts_etag(tmp_path: Path, lake: MemoryLake) -> None:
    nodes, _ = cluster(tmp_path, lake)
    parts = [os.urandom(MIN_PART), os.urandom(100)]

    async def main() -> None:
        result = await multipart(nodes[0], "mp", parts)
        assert result.etag.endswith('-2"')
        whole = b"".join(parts)
        edge = ByteRange(MIN_PART - 2 * BS, MIN_PART + 50)  # across the parts' boundary (1 KiB blocks)
        assert await get(nodes[2], "mp", edge) == whole[MIN_PART - 2 * BS : MIN_PART + 51]
        part = await nodes[1].cache.object_part(B, "mp", 2)
        assert (part.first, part.last, part.parts_count) == (MIN_PART, MIN_PART + 99, 2)
        await flush_all(nodes)
        assert (await lake.head_object(B, "mp")).etag == result.etag
        assert await in_lake(lake, "mp") == b"".join(parts)

    asyncio.run(main())


def test_past_t_plus_delta_writes_fall_back_and_slow_down_with_the_lake_down(
        tmp_path: Path, lake: MemoryLake) -> None:
    nodes, _ = cluster(tmp_path, lake, 1, replicas=1, sync_replicas=1, thresholds=Thresholds(100, 100))

    async def main() -> None:
        await put(nodes[0], "a", b"x" * 150)  # within T + delta: journaled
        assert await in_lake(lake, "a") is None
        await put(nodes[0], "b", b"y" * 100)  # past it: written through
        assert await in_lake(lake, "b") == b"y" * 100
        assert nodes[0].wb.counters["fallbacks"] == 1
        nodes[0].wb.lake_health.set(False)
        with pytest.raises(SlowDown):
            await put(nodes[0], "c", b"z" * 100)

    asyncio.run(main())


def test_a_returning_copy_does_not_flush_what_was_flushed_while_it_was_away(tmp_path: Path, lake: MemoryLake) -> None:
    nodes, _ = cluster(tmp_path, lake)
    receiver = nodes[0]

    async def main() -> None:
        await put(receiver, "k", b"v1")
        copy = next(n for n in nodes[1:] if n.journal.pending_objects())
        receiver.peers.down.add(copy.member.id)  # away: it misses the flushed notice
        await flush_all([receiver])
        assert await in_lake(lake, "k") == b"v1" and copy.journal.pending_objects() == 1
        await put(nodes[0], "k", b"v2", WriteIntent())  # a newer write-through while it is away
        receiver.peers.down.discard(copy.member.id)
        copy.journal.recover()  # it restarts: its copy is unverified
        copy.flusher = Flusher(copy.wb, grace=0.0)
        await flush_all(nodes)
        assert copy.journal.pending_objects() == 0  # dropped, not flushed again over v2
        assert await in_lake(lake, "k") == b"v2"

    asyncio.run(main())


def test_a_bucket_with_pending_writes_is_not_empty(tmp_path: Path, lake: MemoryLake) -> None:
    nodes, _ = cluster(tmp_path, lake)

    async def main() -> None:
        await put(nodes[0], "k", b"x")
        with pytest.raises(BucketNotEmpty):
            await nodes[2].cache.delete_bucket(B)  # a node that only knows it by its notice
        await flush_all(nodes)
        await lake.delete_object(B, "k")
        await nodes[2].cache.delete_bucket(B)

    asyncio.run(main())


def test_the_lake_found_down_by_the_flushing_worker_slows_down_every_worker_of_the_node(
        tmp_path: Path, lake: MemoryLake) -> None:
    """A node of two workers: each its own WriteBack over the node's one journal; only one runs
    the flusher, yet past T + delta the other's writers get SlowDown too, not a write-through."""
    nodes, _ = cluster(tmp_path, lake, 1, replicas=1, sync_replicas=1, thresholds=Thresholds(100, 100))
    config = nodes[0].wb.config
    other = WriteBack(Journal(tmp_path / "n0"), lake, config, me="n0")
    nodes[0].wb.lake_health.set(False)  # the flusher's worker found the lake down
    assert other.lake_health.up is False
    current.set(RequestContext("t", write=BACK))

    async def main() -> None:
        with pytest.raises(SlowDown):
            await other.put(B, "c", body(b"z" * 250), 250, ObjectAttributes(), None, BACK, "t")
        nodes[0].wb.lake_health.set(True)
        assert other.lake_health.up is True
        assert await other.put(B, "d", body(b"z" * 250), 250, ObjectAttributes(), None, BACK, "t") is None

    asyncio.run(main())


def test_a_body_that_fails_leaves_no_copy_on_any_node(tmp_path: Path, lake: MemoryLake) -> None:
    """The synchronous copy streams as the body arrives; a body that fails (here at its very
    end, as a checksum checked on the last piece does) leaves nothing on this node or its peer."""
    nodes, _ = cluster(tmp_path, lake)

    async def failing() -> AsyncIterator[bytes]:
        for _ in range(40):
            yield b"x" * 1000
        raise BadDigest()

    async def main() -> None:
        current.set(RequestContext("t", write=BACK))
        with pytest.raises(BadDigest):
            await nodes[0].cache.put_object(B, "k", failing(), 40_000, ObjectAttributes())
        for node in nodes:
            assert node.journal.versions(B, "k") == [] and node.journal.check() == []
        assert await in_lake(lake, "k") is None
        await put(nodes[0], "k", b"after")  # the key works as before
        assert await get(nodes[1], "k") == b"after"

    asyncio.run(main())


def test_delete_bucket_is_refused_while_an_object_is_pending_and_sends_pending_deletes_first(
        tmp_path: Path, lake: MemoryLake) -> None:
    nodes, _ = cluster(tmp_path, lake)

    async def main() -> None:
        await put(nodes[0], "old", b"x", WriteIntent())  # in the lake
        await put(nodes[0], "new", b"y")  # pending: the lake's bucket holds "old" only
        with pytest.raises(BucketNotEmpty):
            await nodes[1].cache.delete_bucket(B)
        current.set(RequestContext("t", write=BACK))
        await nodes[0].cache.delete_object(B, "old")
        await nodes[0].cache.delete_object(B, "new")  # both deletes pending: the bucket is empty
        await nodes[0].cache.delete_bucket(B)  # not BucketNotEmpty from the lake, that still held "old"
        with pytest.raises(NoSuchBucket):
            await lake.head_bucket(B)
        assert [n.journal.pending_objects() for n in nodes] == [0, 0, 0]

    asyncio.run(main())


def test_list_multipart_uploads_does_not_show_the_flush_of_a_pending_multipart_object(
        tmp_path: Path, lake: MemoryLake) -> None:
    nodes, _ = cluster(tmp_path, lake)
    parts = [os.urandom(MIN_PART), os.urandom(100)]

    async def main() -> None:
        await multipart(nodes[0], "mp", parts)
        await lake.create_multipart_upload(B, "mp", ObjectAttributes())  # the flusher's, in flight
        theirs = await lake.create_multipart_upload(B, "other", ObjectAttributes())  # a client's
        for node in nodes:  # every node knows "mp" is pending
            page = await node.cache.list_multipart_uploads(B, UploadsQuery())
            assert [(u.key, u.upload_id) for u in page.uploads] == [("other", theirs)]

    asyncio.run(main())


def test_a_write_back_put_to_a_bucket_deleted_meanwhile_is_no_such_bucket(tmp_path: Path, lake: MemoryLake) -> None:
    nodes, _ = cluster(tmp_path, lake)

    async def main() -> None:
        await put(nodes[0], "k", b"x")  # this node has seen the bucket exist
        await flush_all(nodes)
        await put(nodes[0], "k", b"", WriteIntent())
        current.set(RequestContext("t"))
        await nodes[0].cache.delete_object(B, "k")
        await nodes[0].cache.delete_bucket(B)
        with pytest.raises(NoSuchBucket):  # not acknowledged, to fail at the flush
            await put(nodes[0], "k", b"y")
        assert nodes[0].journal.pending_objects() == 0

    asyncio.run(main())


@pytest.mark.parametrize("delimiter", ["", "/"])
def test_list_multipart_uploads_pages_the_lakes_and_the_journals_uploads_as_one(
        tmp_path: Path, lake: MemoryLake, delimiter: str) -> None:
    nodes, _ = cluster(tmp_path, lake)
    cache = nodes[0].cache

    async def main() -> None:
        made = []
        for key, back in [("a", False), ("b", True), ("c", False), ("d", True), ("p/1", True), ("p/2", False),
                          ("q/1", True)]:
            current.set(RequestContext("t", write=BACK if back else WriteIntent()))
            made.append((key, await cache.create_multipart_upload(B, key, ObjectAttributes())))
        rolled = [(k, u) for k, u in sorted(made) if not delimiter or "/" not in k]
        prefixes = ["p/", "q/"] if delimiter else []
        for size in (1, 2, 3, 1000):
            uploads: list[tuple[str, str]] = []
            seen: list[str] = []
            marker, upload_marker = "", ""
            for _ in range(20):
                page = await cache.list_multipart_uploads(B, UploadsQuery(
                    delimiter=delimiter, key_marker=marker, upload_id_marker=upload_marker, max_uploads=size))
                assert len(page.uploads) + len(page.common_prefixes) <= size
                uploads += [(u.key, u.upload_id) for u in page.uploads]
                seen += page.common_prefixes
                if not page.is_truncated:
                    break
                marker, upload_marker = page.next_key_marker or "", page.next_upload_id_marker or ""
            assert (uploads, seen) == (rolled, prefixes), size

    asyncio.run(main())


class HeldPutLake(MemoryLake):
    """A memory lake whose PUTs, once their body is read, wait for ``release``: a flush the lake
    finishes (and stamps) later, as RGW stamps an object when its PUT completes."""

    def __init__(self, clock: list[float]) -> None:
        super().__init__(buckets=[B], clock=lambda: clock[0])
        self.entered, self.release = asyncio.Event(), asyncio.Event()

    async def put_object(self, bucket: str, key: str, body: Body, length: int, attrs: ObjectAttributes,
                         content_md5: str | None = None, conditions: Conditions = NO_CONDITIONS) -> WriteResult:
        data = b"".join([bytes(p) async for p in body])
        self.entered.set()
        await self.release.wait()
        return await super().put_object(bucket, key, _pieces(data), length, attrs, content_md5, conditions)


async def _pieces(data: bytes) -> AsyncIterator[bytes]:
    yield data


def test_a_write_acknowledged_while_an_older_flush_ends_is_flushed_after_a_restart(tmp_path: Path) -> None:
    """Alone (no cluster): v1's flush reaches the lake just after v2 was acknowledged, and the
    node is killed before v2's flush. The lake's Last-Modified is then later than v2's, which
    does not make v1 newer: the restarted node flushes v2."""
    now = [1000.9]
    lake = HeldPutLake(now)

    def node() -> tuple[Journal, WriteBack, Flusher]:
        journal = Journal(tmp_path / "journal", sync=False)
        wb = WriteBack(journal, lake, WriteBackConfig(), me="local", clock=lambda: now[0])
        return journal, wb, Flusher(wb, grace=0.0)

    async def write(wb: WriteBack, data: bytes) -> None:
        assert await wb.put(B, "k", body(data), len(data), ObjectAttributes(), None, BACK, "t") is not None

    async def main() -> None:
        journal, wb, flusher = node()
        await write(wb, b"first")
        await flusher.round()
        await lake.entered.wait()  # v1's flush has sent its body
        now[0] = 1000.95
        second = asyncio.create_task(write(wb, b"second"))  # v2 committed, v1 dropped, then it
        while [v.etag for v in journal.versions(B, "k")] != [md5(b"second")]:  # waits for v1's flush
            await asyncio.sleep(0.01)
        now[0] = 1001.1
        lake.release.set()  # v1's PUT completes, stamped 1001
        await second  # acknowledged
        await asyncio.gather(*(task for _, task in flusher.running.values()))
        assert journal.pending_objects() == 1  # v2, not flushed yet: the node is killed now
        journal.close()
        with Journal(tmp_path / "journal", sync=False) as restarted:
            restarted.recover()
        journal, _, flusher = node()
        for _ in range(10):
            await flusher.round()
            await asyncio.gather(*(task for _, task in flusher.running.values()))
        assert await in_lake(lake, "k") == b"second"
        assert journal.pending_objects() == 0

    asyncio.run(main())


@pytest.mark.parametrize("kind", ["put", "delete"])
def test_a_write_whose_commit_fails_leaves_the_last_acknowledged_one_pending(
        tmp_path: Path, lake: MemoryLake, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """v2's journal commit fails (a full disk; kill -9 at that step is the same): v1, acknowledged,
    is still in the journal and reaches the lake. (v1 was dropped before v2 was committed.)"""
    journal = Journal(tmp_path / "journal", sync=False)
    wb = WriteBack(journal, lake, WriteBackConfig(), me="local")
    flusher = Flusher(wb, grace=0.0)

    def full(*args: object) -> None:
        raise OSError(28, "No space left on device")

    async def main() -> None:
        assert await wb.put(B, "k", body(b"first"), 5, ObjectAttributes(), None, BACK, "t") is not None
        monkeypatch.setattr(journal, "commit", full)
        with pytest.raises(OSError):
            if kind == "put":
                await wb.put(B, "k", body(b"second"), 6, ObjectAttributes(), None, BACK, "t")
            else:
                await wb.delete(B, "k", BACK, "t")
        monkeypatch.undo()
        assert [v.etag for v in journal.versions(B, "k")] == [md5(b"first")]
        for _ in range(5):
            await flusher.round()
            await asyncio.gather(*(task for _, task in flusher.running.values()))
        assert await in_lake(lake, "k") == b"first"

    asyncio.run(main())


def test_a_flush_whose_version_is_superseded_before_it_opens_the_body_is_aborted_not_a_lake_failure(
        tmp_path: Path, lake: MemoryLake, monkeypatch: pytest.MonkeyPatch) -> None:
    """A newer write drops the version between the flusher's check and its opening the body:
    the flush is aborted (the lake did not fail: it is not marked down, nothing is retried)."""
    journal = Journal(tmp_path / "journal", sync=False)
    wb = WriteBack(journal, lake, WriteBackConfig(), me="local")
    flusher = Flusher(wb, grace=0.0)
    begin = journal.begin_flush

    def superseded_meanwhile(version: Version, pid: int) -> bool:
        begun = begin(version, pid)
        journal.remove(B, "k", version.seq)
        return begun

    async def main() -> None:
        assert await wb.put(B, "k", body(b"first"), 5, ObjectAttributes(), None, BACK, "t") is not None
        monkeypatch.setattr(journal, "begin_flush", superseded_meanwhile)
        await flusher.round()
        await asyncio.gather(*(task for _, task in flusher.running.values()))
        assert (wb.lake_health.up, wb.counters["flush_failures"], wb.counters["flush_aborted"]) == (True, 0, 1)
        assert flusher.retry_at == {}

    asyncio.run(main())


def test_a_write_on_another_node_is_answered_only_once_a_flush_of_the_older_version_ended(
        tmp_path: Path) -> None:
    """node0 is flushing v1 (its PUT held in the lake) when node1 takes v2: node1's notice drops
    v1 on node0 and is answered once that flush ended, so v1 can no longer land after v2.
    (The wait read the flush marks after removing their rows, and never waited.)"""
    lake = HeldPutLake([1000.0])
    nodes, _ = cluster(tmp_path, lake)

    async def main() -> None:
        await put(nodes[0], "k", b"first")
        await nodes[0].flusher.round()
        await lake.entered.wait()  # node0's flush of v1 has sent its body
        second = asyncio.create_task(put(nodes[1], "k", b"second"))
        while any(v.etag == md5(b"first") for v in nodes[0].journal.versions(B, "k")):
            await asyncio.sleep(0.01)  # the notice of v2 reached node0
        for _ in range(20):
            await asyncio.sleep(0.01)
        answered_before_the_flush_ended = second.done()
        lake.release.set()
        await second
        await flush_all(nodes)
        assert await in_lake(lake, "k") == b"second"
        assert not answered_before_the_flush_ended

    asyncio.run(main())


def test_a_flush_upload_stays_hidden_from_listings_after_it_completed(tmp_path: Path, lake: MemoryLake) -> None:
    """A listing that raced a multipart flush's completion (the lake listed the upload, the
    pending version is gone) still hides it: the flusher records its lake uploads."""
    from datetime import datetime, timezone

    from cachetier.lake import UploadInfo

    nodes, _ = cluster(tmp_path, lake, 1, replicas=1, sync_replicas=1)
    wb = nodes[0].wb
    wb.journal.record_lake_upload("lake-upload-1", B, "mp")
    listed = [UploadInfo("mp", "lake-upload-1", datetime.now(timezone.utc)),
              UploadInfo("mp", "clients-own", datetime.now(timezone.utc))]
    assert asyncio.run(wb.flush_uploads(B, listed)) == {"lake-upload-1"}


def test_the_pacer_holds_background_bytes_to_a_tenth_of_the_budget_while_reads_wait() -> None:
    from cachetier.write.flusher import Pacer

    now = [0.0]
    waiting = [True]
    slept: list[float] = []
    pacer = Pacer(lambda: waiting[0], lambda: 1000.0, lambda: 0, Thresholds(1 << 20, 1 << 20), clock=lambda: now[0])

    async def main() -> None:
        real_sleep = asyncio.sleep

        async def fake_sleep(seconds: float) -> None:
            slept.append(seconds)
            now[0] += seconds
            await real_sleep(0)

        asyncio.sleep = fake_sleep  # type: ignore[assignment]
        try:
            for _ in range(3):
                await pacer(100)  # 100 bytes at 100 bytes/s: a second apart
            waiting[0] = False
            await pacer(10_000)  # nobody waits: at once
        finally:
            asyncio.sleep = real_sleep  # type: ignore[assignment]
        assert slept == [pytest.approx(1.0), pytest.approx(1.0)]

    asyncio.run(main())


def test_a_failed_copy_sends_the_write_to_the_lake_and_leaves_no_copy_or_older_version_behind(
        tmp_path: Path, lake: MemoryLake, monkeypatch: pytest.MonkeyPatch) -> None:
    """A synchronous copy that fails: the version goes to the lake before the 200 (after the
    older pending versions of the key stopped everywhere), and no node keeps a copy or notice;
    the node that missed the notices drops its stale copy once it checks with the receiver."""
    from cachetier.write import flusher

    monkeypatch.setattr(flusher, "_RECHECK_S", 0.0)
    nodes, _ = cluster(tmp_path, lake)

    async def main() -> None:
        await put(nodes[1], "k", b"old")  # pending on n1 and its copy holder
        receiver = nodes[0]
        copy_holder = receiver.wb.holders(B, "k", 2)[0]
        receiver.peers.down.add(copy_holder.id)  # its copy fails
        await put(receiver, "k", b"new")
        assert await in_lake(lake, "k") == b"new" and receiver.wb.counters["copy_failures"] == 1
        receiver.peers.down.discard(copy_holder.id)
        await flush_all(nodes)
        assert await in_lake(lake, "k") == b"new"  # the older version never lands after it
        for node in nodes:
            await node.flusher.round()  # the copy holder checks its copies with their receivers
        assert [n.journal.versions(B, "k") for n in nodes] == [[], [], []]

    asyncio.run(main())


def test_a_conditional_write_is_decided_by_the_lake_never_against_a_pending_version(
        tmp_path: Path, lake: MemoryLake) -> None:
    """A conditional write is written through (the lake decides it, atomically); while a
    version of the key acknowledged in write-back is on its way to the lake, every node answers
    it 409 ConditionalRequestConflict, and the retry after the flush is decided against it."""
    nodes, _ = cluster(tmp_path, lake)
    create = Conditions(if_none_match="*")

    async def conditional(node: Node, key: str, data: bytes, conditions: Conditions) -> WriteResult:
        current.set(RequestContext("t", write=BACK))
        return await node.cache.put_object(B, key, body(data), len(data), ObjectAttributes(), conditions=conditions)

    async def main() -> None:
        etag = await put(nodes[0], "k", b"acknowledged")
        for node in nodes:
            with pytest.raises(ConditionalRequestConflict):
                await conditional(node, "k", b"other", create)
            with pytest.raises(ConditionalRequestConflict):
                await conditional(node, "k", b"other", Conditions(if_match=etag))
            with pytest.raises(ConditionalRequestConflict):
                await node.cache.delete_object(B, "k", conditions=Conditions(if_match=etag))
        assert await in_lake(lake, "k") is None  # nothing written, the pending version kept
        await flush_all(nodes)
        with pytest.raises(PreconditionFailed):
            await conditional(nodes[1], "k", b"other", create)
        result = await conditional(nodes[2], "k", b"swapped", Conditions(if_match=etag))
        assert result.headers[MODE_HEADER] == "write-through" and await in_lake(lake, "k") == b"swapped"
        assert await get(nodes[0], "k") == b"swapped"
        await conditional(nodes[0], "new", b"created", create)
        assert await in_lake(lake, "new") == b"created"  # through, though write-back was asked
        upload = await nodes[0].cache.create_multipart_upload(B, "mp", ObjectAttributes())
        part = await nodes[0].cache.upload_part(B, "mp", upload, 1, body(b"p"), 1)
        with pytest.raises(Unimplemented):  # a write-back upload's object is acknowledged before the lake has it
            await nodes[0].cache.complete_multipart_upload(B, "mp", upload, [(1, part.etag)], conditions=create)

    asyncio.run(main())
