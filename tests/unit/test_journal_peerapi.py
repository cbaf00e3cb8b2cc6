"""The write-back journal's peer routes (issue 14) through the real peer API and the real
``PeerClient`` over httpx's ASGITransport: a streamed copy is committed only with the cluster
HMAC and a body matching the MD5 its signed query names; notices, held and body reads; and
``PeerClient`` and ``MemoryPeers`` both implement ``JournalPeers`` by exact signature."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest
from doubles import B, memory_lake, nodes

from cachetier.cluster.client import PeerClient, PeerUnavailable
from cachetier.cluster.memory import MemoryPeers
from cachetier.cluster.ring import Member
from cachetier.cluster.wire import JOURNAL_COPY, sign
from cachetier.write.journal import Journal, Version
from cachetier.write.messages import BodyRequest, Copy, HeldQuery, Notice
from cachetier.write.peers import JournalOwner, JournalPeers, NotHeld
from gateway.peerapi import PeerAPI

SECRET = b"cluster-secret-0123456789"
ME = Member("n0", "http://n0:9000")


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()  # noqa: S324


async def pieces(data: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(data), 1000):
        yield data[start : start + 1000]


def setup(tmp_path: Path) -> tuple[Journal, PeerClient, list[Notice]]:
    node = nodes(memory_lake(B), 1)[0]
    journal = Journal(tmp_path / "journal")
    seen: list[Notice] = []

    async def on_notice(notice: Notice, sender: str) -> None:
        seen.append(notice)

    async def on_copy(version: Version) -> None:
        pass

    owner = JournalOwner(node.member.id, journal, on_notice, on_copy)
    api = PeerAPI(SECRET, node.cluster, node.reads, dict, journal=owner)
    client = PeerClient(Member("n9", "http://n9:9000"), SECRET, timeout=5.0, clock=time.time,
                        transport=httpx2.ASGITransport(app=api))
    return journal, client, seen


def version(holders: tuple[str, ...], size: int) -> Version:
    return Version(B, "k", 5, "put", '"e"', size, 1.0, holders=holders, position=0)


def test_a_copy_is_committed_and_its_body_read_back(tmp_path: Path) -> None:
    journal, client, seen = setup(tmp_path)
    data = bytes(range(256)) * 40

    async def main() -> None:
        member = Member("n0", "http://n0:9000")
        await client.journal_copy(member, Copy(version(("n9", "n0"), len(data)), md5(data)), pieces(data), 5.0)
        held = journal.latest(B, "k")
        assert held is not None and held.position == 1 and held.md5 == md5(data)
        assert (await client.journal_held(member, HeldQuery(B, "k", 5), 5.0)).held
        got = b"".join([p async for p in client.journal_body(member, BodyRequest(B, "k", 5, 100, 2099))])
        assert got == data[100:2100]
        with pytest.raises(NotHeld):
            _ = [p async for p in client.journal_body(member, BodyRequest(B, "k", 6, 0, 1))]
        await client.journal_notice(member, Notice("flushed", B, "k", 5), 5.0)
        assert seen == [Notice("flushed", B, "k", 5)]
        await client.aclose()

    asyncio.run(main())


def test_a_copy_whose_body_is_not_the_signed_one_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    journal, client, _ = setup(tmp_path)

    async def main() -> None:
        member = Member("n0", "http://n0:9000")
        with pytest.raises(PeerUnavailable, match="400"):
            await client.journal_copy(member, Copy(version(("n9", "n0"), 5), md5(b"other")), pieces(b"hello"), 5.0)
        assert journal.latest(B, "k") is None and journal.check() == []
        await client.aclose()

    asyncio.run(main())


def test_an_unsigned_or_replayed_copy_is_refused(tmp_path: Path) -> None:
    journal, client, _ = setup(tmp_path)

    async def main() -> None:
        api = client.client._transport.app  # type: ignore[attr-defined]
        query = Copy(version(("n9", "n0"), 5), md5(b"hello")).to_query()
        signed = sign(SECRET, "n9", "PUT", JOURNAL_COPY, query, now=time.time(), streamed=True)
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=api), base_url="http://n0:9000") as http:
            unsigned = await http.put(f"{JOURNAL_COPY}?{query}", content=b"hello")
            assert unsigned.status_code == 403
            first = await http.put(f"{JOURNAL_COPY}?{query}", content=b"hello", headers=signed)
            again = await http.put(f"{JOURNAL_COPY}?{query}", content=b"hello", headers=signed)
        assert (first.status_code, again.status_code) == (200, 403)
        await client.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("name", ["journal_copy", "journal_notice", "journal_held", "journal_body"])
def test_the_client_and_its_twin_implement_journal_peers_by_signature(name: str) -> None:
    wanted = inspect.signature(getattr(JournalPeers, name))
    assert inspect.signature(getattr(PeerClient, name)) == wanted
    assert inspect.signature(getattr(MemoryPeers, name)) == wanted
