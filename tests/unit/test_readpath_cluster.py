"""The read path in a cluster (D3N's L2) without a network: two or three ReadPath nodes over one
in-memory lake, each with its own L1 and L2 and a real ``Cluster`` and ``Membership``; the
peer client is ``LoopbackPeers``, the checked twin ``MemoryPeers`` (which calls the owner node's
``Owner``, as the peer API does, and fails as PeerClient does: 412 -> PreconditionFailed, any other
error -> PeerUnavailable), told to fail a node before its first byte or after some bytes. The
nodes and the twin are in tests/doubles.py ("cluster of in-process nodes").
"""

from __future__ import annotations

import asyncio
import os

import pytest
from doubles import (
    BS,
    B,
    CountingLake,
    Fault,
    block_range,
    key_owned_by,
    memory_lake,
    nodes,
    put,
    read,
    run,
    settle,
    until,
)

from cachetier.blocks.ids import BlockId, block_count
from cachetier.lake.conditions import Conditions
from cachetier.errors import PreconditionFailed
from cachetier.lake.ranges import ByteRange
from cachetier.read.path import ObjectChanged


def bid(info_etag: str, key: str, index: int = 0) -> BlockId:
    return BlockId.of(B, key, info_etag, index, BS)


@pytest.fixture
def lake() -> CountingLake:
    """One lake for every node: a counting wrapper around the in-memory twin."""
    return CountingLake(memory_lake(B))


# ---- reads across nodes ------------------------------------------------------------------------


def test_a_non_owner_reads_a_block_from_its_owner_and_the_lake_once(lake: CountingLake) -> None:
    owner, reader, third = nodes(lake)
    key = key_owned_by(owner)
    data = os.urandom(BS)

    async def main() -> None:
        etag = await put(lake, key, data)
        assert (await read(reader.reads, key))[1] == data
        await settle([owner, reader, third])
        assert lake.gets == [(key, block_range(0, BS))]  # the owner's, for the reader
        assert lake.heads == [key]  # the reader's metadata: not a first-block GET, the block is not its own
        assert reader.peers.fetches == [(owner.member.id, key, 0)]
        assert bid(etag, key) in reader.l1 and bid(etag, key) not in reader.l2
        assert bid(etag, key) in owner.l2 and bid(etag, key) not in owner.l1

        # again, from anywhere: no lake GET
        assert (await read(reader.reads, key))[1] == data  # reader's L1
        assert (await read(third.reads, key))[1] == data  # owner's L2, over the peer API
        assert (await read(owner.reads, key))[1] == data  # its own L2
        await settle([owner, reader, third])
        assert len(lake.gets) == 1
        assert reader.counts()["hits"] == 1 and owner.counts()["l2_hits"] == 1
        assert owner.counts()["peer_hits"] == 1 and third.counts()["peer_fetches"] == 1

    run(main())


def test_the_owner_reads_its_own_blocks_from_the_lake_into_l2(lake: CountingLake) -> None:
    owner, other = nodes(lake, 2)
    key = key_owned_by(owner)
    data = os.urandom(BS)

    async def main() -> None:
        etag = await put(lake, key, data)
        assert (await read(owner.reads, key))[1] == data
        await settle([owner, other])
        assert lake.gets == [(key, block_range(0, BS))] and lake.heads == []  # a cold first-block GET
        assert bid(etag, key) in owner.l2 and bid(etag, key) not in owner.l1
        assert owner.peers.fetches == []

    run(main())


def test_a_multi_block_object_read_on_every_node_costs_one_lake_get_per_block(lake: CountingLake) -> None:
    cluster = nodes(lake, 3, readahead=2)
    data = os.urandom(9 * BS + 100)

    async def main() -> None:
        etag = await put(lake, "big", data)
        for node in cluster:
            assert (await read(node.reads, "big"))[1] == data
            await settle(cluster)
        assert sorted(r for _, r in lake.gets) == sorted(block_range(i, len(data)) for i in range(10))
        for index in range(10):  # each block in its owner's L2, and nowhere else's
            holders = [n.member.id for n in cluster if bid(etag, "big", index) in n.l2]
            assert holders == [cluster[0].cluster.owners(B, "big", index)[0].id]

    run(main())


def test_concurrent_readers_on_every_node_share_one_lake_get(lake: CountingLake) -> None:
    cluster = nodes(lake, 3)
    key = key_owned_by(cluster[1])
    data = os.urandom(BS)

    async def main() -> None:
        await put(lake, key, data)
        lake.hold_gets = asyncio.Event()
        readers = [asyncio.ensure_future(read(node.reads, key)) for node in cluster for _ in range(4)]
        await until(lambda: len(lake.gets) == 1)
        await asyncio.sleep(0.01)  # time for a second GET to go out, if one would
        lake.hold_gets.set()
        assert [body for _, body in await asyncio.gather(*readers)] == [data] * 12
        await settle(cluster)
        assert lake.gets == [(key, block_range(0, BS))]

    run(main())


def test_a_peer_asking_while_the_owners_cold_read_is_out_joins_it(lake: CountingLake) -> None:
    """The owner's cold read GETs its first block to learn the metadata; a peer asking for that
    block meanwhile must join that GET, not send a second one."""
    owner, reader = nodes(lake, 2)
    key = key_owned_by(owner)
    data = os.urandom(BS)

    async def main() -> None:
        await put(lake, key, data)
        lake.hold_gets = asyncio.Event()
        first = asyncio.ensure_future(read(owner.reads, key))
        await until(lambda: len(lake.gets) == 1)  # the owner's first-block GET is out
        second = asyncio.ensure_future(read(reader.reads, key))
        await until(lambda: reader.peers.fetches != [])  # the reader asked the owner
        await asyncio.sleep(0.01)
        lake.hold_gets.set()
        assert [(await first)[1], (await second)[1]] == [data, data]
        await settle([owner, reader])
        assert lake.gets == [(key, block_range(0, BS))]

    run(main())


# ---- owner failures ----------------------------------------------------------------------------


def test_an_owner_down_before_the_first_byte_is_replaced_by_the_lake(lake: CountingLake) -> None:
    owner, reader = nodes(lake, 2)
    key = key_owned_by(owner)
    data = os.urandom(BS)

    async def main() -> None:
        etag = await put(lake, key, data)
        reader.peers.faults[owner.member.id] = Fault(after=0)
        assert (await read(reader.reads, key))[1] == data
        await settle([owner, reader])
        assert lake.gets == [(key, block_range(0, BS))]  # the reader's own, the whole block
        assert bid(etag, key) in reader.l1 and bid(etag, key) not in owner.l2
        assert reader.cluster.counters["peer_fetch_failures"] == 1
        # the owner is now suspect: the next block it owns goes straight to the lake
        assert reader.cluster.owners(B, key, 0) == ()
        other = key_owned_by(owner, besides=key)
        await put(lake, other, data)
        assert (await read(reader.reads, other))[1] == data
        assert reader.peers.fetches == [(owner.member.id, key, 0)]

    run(main())


def test_an_owner_down_is_replaced_by_the_next_owner(lake: CountingLake) -> None:
    first, second, reader = nodes(lake, 3, replicas=2)
    key = key_owned_by(first, second=second)
    data = os.urandom(BS)

    async def main() -> None:
        etag = await put(lake, key, data)
        reader.peers.faults[first.member.id] = Fault(after=0)
        assert (await read(reader.reads, key))[1] == data
        await settle([first, second, reader])
        assert reader.peers.fetches == [(first.member.id, key, 0), (second.member.id, key, 0)]
        assert lake.gets == [(key, block_range(0, BS))]  # the second owner's
        assert bid(etag, key) in second.l2 and bid(etag, key) in reader.l1

    run(main())


@pytest.mark.parametrize("after", [1, 299, 300, 301, BS - 1])
@pytest.mark.parametrize("owner_has_it", [True, False], ids=["owner-l2", "owner-cold"])
def test_an_owner_failing_mid_block_leaves_only_the_rest_to_the_lake(
    lake: CountingLake, after: int, owner_has_it: bool
) -> None:
    owner, reader = nodes(lake, 2)
    index, lo = 1, BS
    key = key_owned_by(owner, index)
    data = os.urandom(3 * BS)

    async def main() -> None:
        etag = await put(lake, key, data)
        if owner_has_it:  # served from its L2 in one piece; else from its lake GET, in chunks
            assert (await read(owner.reads, key, ByteRange(lo, lo + BS - 1)))[1]
            await settle([owner, reader])
            lake.gets.clear()

        reader.peers.faults[owner.member.id] = Fault(after=after)
        _, body = await read(reader.reads, key, ByteRange(lo, lo + BS - 1))
        await settle([owner, reader])
        assert body == data[lo : lo + BS]
        rest = (key, f"bytes={lo + after}-{lo + BS - 1}")
        assert lake.gets == ([rest] if owner_has_it else [(key, block_range(index, len(data))), rest])
        assert reader.l1.get(bid(etag, key, index)) == data[lo : lo + BS]
        assert owner.l2.get(bid(etag, key, index)) == data[lo : lo + BS]  # the owner's own fetch completed

    run(main())


# ---- consistency -------------------------------------------------------------------------------


def test_an_object_changed_in_the_lake_is_read_new_after_one_retry(lake: CountingLake) -> None:
    """The reader's metadata is stale: the owner's GET with If-Match fails (412 over the peer
    API), the reader drops its metadata and retries once, as it does for L1."""
    owner, reader = nodes(lake, 2)
    key = key_owned_by(owner)
    old, new = os.urandom(BS), os.urandom(BS)

    async def main() -> None:
        old_etag = await put(lake, key, old)
        assert (await reader.reads.head(B, key)).etag == old_etag  # metadata cached, no block
        new_etag = await put(lake, key, new)

        stream, body = await read(reader.reads, key)
        await settle([owner, reader])
        assert (body, stream.info.etag) == (new, new_etag)
        assert [i for _, _, i in reader.peers.fetches] == [0, 0]  # the stale ask, then the retry
        assert bid(old_etag, key) not in owner.l2 and bid(new_etag, key) in owner.l2

    run(main())


def test_an_object_changed_after_the_first_byte_cuts_the_stream(lake: CountingLake) -> None:
    owner, reader = nodes(lake, 2)
    key = key_owned_by(owner, 1)
    old, new = os.urandom(2 * BS), os.urandom(2 * BS)

    async def main() -> None:
        await put(lake, key, old)
        assert (await read(reader.reads, key, ByteRange(0, BS - 1)))[1] == old[:BS]  # block 0 here
        await settle([owner, reader])
        await put(lake, key, new)

        stream = await reader.reads.open(B, key, None, Conditions())
        received = b""
        with pytest.raises((ObjectChanged, PreconditionFailed)):
            async for piece in stream.body:
                received += piece
        await stream.aclose()
        assert received == old[: len(received)] and len(received) >= 1  # old bytes only, then cut
        assert (await read(reader.reads, key))[1] == new

    run(main())


def test_invalidate_drops_the_known_versions_blocks_from_l1_and_l2(lake: CountingLake) -> None:
    owner, reader = nodes(lake, 2)
    data = os.urandom(4 * BS)

    async def main() -> None:
        etag = await put(lake, "k", data)
        for node in (owner, reader):
            assert (await read(node.reads, "k"))[1] == data
        await settle([owner, reader])
        blocks = [bid(etag, "k", i) for i in range(block_count(len(data), BS))]
        def held() -> list[BlockId]:
            return [b for b in blocks for node in (owner, reader) for store in (node.l1, node.l2) if b in store]

        assert set(held()) == set(blocks)

        await owner.cluster.broadcast_invalidate(B, ["k"])  # to the reader
        owner.reads.invalidate(B, "k")  # and here, as a write through this node does
        await settle([owner, reader])
        assert held() == []
        assert owner.reads.meta.get(B, "k") is None and reader.reads.meta.get(B, "k") is None
        assert owner.cluster.counters["invalidations_sent"] == 1

    run(main())


def test_an_owner_that_only_served_peers_drops_that_version_on_invalidation(lake: CountingLake) -> None:
    """The owner never read the key itself (no metadata of it), yet holds its blocks in L2 for
    the peers it served: an invalidation drops them too."""
    owner, reader = nodes(lake, 2)
    key = key_owned_by(owner)
    data = os.urandom(BS)

    async def main() -> None:
        etag = await put(lake, key, data)
        assert (await read(reader.reads, key))[1] == data
        await settle([owner, reader])
        assert bid(etag, key) in owner.l2 and owner.reads.meta.get(B, key) is None

        await reader.cluster.broadcast_invalidate(B, [key])  # a write through the reader
        await settle([owner, reader])
        assert bid(etag, key) not in owner.l2

    run(main())


# ---- the sizing loop's samples (issue 13) --------------------------------------------------------


def test_reads_are_sampled_per_tier_and_only_fills_from_a_cache_or_the_lake_are_timed(lake: CountingLake) -> None:
    """The reader's read of a block another node owns is L1's stream, the owner's serving of it
    L2's; a fill from the owner's L2 is an L1 miss's cost, the owner's lake fill an L2 miss's,
    and a peer's answer that the owner itself fetched from the lake is no L1 cost at all."""
    from cachetier.telemetry.reuse import ReuseHub, SizingProbe

    owner, reader, third = nodes(lake)
    hubs = {}
    for node in (owner, reader):
        hub = hubs[node] = ReuseHub(1.0, 1 << 20)
        node.reads.probe = node.reads.sources.probe = SizingProbe(None, 1.0, hub)
    cold = key_owned_by(owner)
    warm = key_owned_by(owner, besides=cold)

    async def main() -> None:
        await put(lake, cold, os.urandom(BS))
        await put(lake, warm, os.urandom(BS))
        await read(owner.reads, warm)  # the owner's own read: its L2 keeps the block
        await settle([owner, reader, third])
        await read(reader.reads, cold)  # the owner fetches it from the lake for the reader
        await read(reader.reads, warm)  # the owner has it
        await settle([owner, reader, third])

    run(main())
    mine, theirs = hubs[reader].snapshot().streams, hubs[owner].snapshot().streams
    assert mine["l1"].sampled_references == 2 and mine["l2"].sampled_references == 0
    assert theirs["l2"].sampled_references == 3 and theirs["l2"].sampled_hits == 1  # warm, for the reader
    assert mine["l1"].misses_timed == 1  # warm: from the owner's L2; cold's answer said "fetched"
    assert theirs["l2"].misses_timed == 2 and theirs["l1"].misses_timed == 0  # both lake fills
