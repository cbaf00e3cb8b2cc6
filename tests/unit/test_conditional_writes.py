"""Conditional writes (PutObject and CompleteMultipartUpload with If-None-Match: * or If-Match):
the check as S3 decides it, the headers read as S3 reads them, and the two lakes lakegate
implements itself deciding them atomically with the write, whatever else writes the key."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cachetier.errors import NoSuchKey, PreconditionFailed, Unimplemented
from cachetier.lake import ListQuery, ObjectAttributes
from cachetier.lake.conditions import NO_CONDITIONS, Conditions
from cachetier.lake.dirlake import DirLake
from cachetier.lake.memory import MemoryLake
from gateway.s3.headers import delete_conditions, write_conditions

B = "bucket"
CREATE = Conditions(if_none_match="*")
ETAG = '"0123456789abcdef0123456789abcdef"'


@pytest.mark.parametrize(("conditions", "current", "raised"), [
    (CREATE, None, None),
    (CREATE, ETAG, PreconditionFailed),
    (Conditions(if_match=ETAG), ETAG, None),
    (Conditions(if_match=ETAG.strip('"')), ETAG, None),  # quoted or not, as S3 compares them
    (Conditions(if_match='"other", ' + ETAG), ETAG, None),  # a list: any of them
    (Conditions(if_match='"other"'), ETAG, PreconditionFailed),
    (Conditions(if_match=ETAG), None, NoSuchKey),  # S3: 404, there is nothing to match
    (Conditions(if_match="*"), ETAG, None),
    (Conditions(if_match="*"), None, NoSuchKey),
    (NO_CONDITIONS, ETAG, None),
])
def test_a_write_condition_is_decided_as_s3_decides_it(
    conditions: Conditions, current: str | None, raised: type[Exception] | None
) -> None:
    if raised is None:
        conditions.check_write(current)
    else:
        with pytest.raises(raised):
            conditions.check_write(current)


@pytest.mark.parametrize(("if_match", "current", "raised"), [
    (ETAG, ETAG, None),
    ('"other"', ETAG, PreconditionFailed),
    ('"other"', None, None),  # S3: no object, nothing to keep: 204
    ("*", ETAG, None),
])
def test_a_delete_condition_is_decided_as_s3_decides_it(if_match: str, current: str | None,
                                                        raised: type[Exception] | None) -> None:
    conditions = Conditions(if_match=if_match)
    if raised is None:
        conditions.check_delete(current)
    else:
        with pytest.raises(raised):
            conditions.check_delete(current)


def test_a_writes_headers_read_as_s3_reads_them() -> None:
    assert write_conditions({}) is NO_CONDITIONS
    assert not write_conditions({"if-modified-since": "Wed, 21 Oct 2015 07:28:00 GMT"}).for_write  # ignored
    assert write_conditions({"if-none-match": "*"}) == CREATE
    assert write_conditions({"if-none-match": ' "*" '}) == CREATE
    assert write_conditions({"if-match": ETAG}) == Conditions(if_match=ETAG)
    with pytest.raises(Unimplemented) as refused:  # S3 takes * only on a write
        write_conditions({"if-none-match": ETAG})
    assert (refused.value.status, refused.value.code) == (501, "NotImplemented")
    assert delete_conditions({}) is NO_CONDITIONS
    assert delete_conditions({"if-match": ETAG}) == Conditions(if_match=ETAG)
    for name in ("x-amz-if-match-size", "x-amz-if-match-last-modified-time"):  # not built: never ignored
        with pytest.raises(Unimplemented):
            delete_conditions({name: "5"})


async def _body(data: bytes) -> AsyncIterator[bytes]:
    yield data


def _etag(data: bytes) -> str:
    return f'"{hashlib.md5(data).hexdigest()}"'  # noqa: S324


async def _put(lake: MemoryLake | DirLake, key: str, data: bytes, conditions: Conditions = NO_CONDITIONS) -> str:
    result = await lake.put_object(B, key, _body(data), len(data), ObjectAttributes(), conditions=conditions)
    return result.etag


async def _read(lake: MemoryLake | DirLake, key: str) -> bytes:
    stream = await lake.get_object(B, key)
    return b"".join([bytes(p) async for p in stream.body])  # type: ignore[union-attr]


def _lake(tmp_path: Path, kind: str) -> MemoryLake | DirLake:
    if kind == "memory":
        return MemoryLake(buckets=[B])
    folder = DirLake(tmp_path / "lake")
    asyncio.run(folder.create_bucket(B))
    return folder


@pytest.mark.parametrize("kind", ["memory", "dir"])
def test_a_conditional_put_leaves_the_object_as_it_was_when_its_condition_fails(tmp_path: Path, kind: str) -> None:
    lake = _lake(tmp_path, kind)

    async def main() -> None:
        first = await _put(lake, "k", b"first", CREATE)
        with pytest.raises(PreconditionFailed):
            await _put(lake, "k", b"second", CREATE)
        with pytest.raises(PreconditionFailed):
            await _put(lake, "k", b"second", Conditions(if_match=_etag(b"something else")))
        with pytest.raises(NoSuchKey):
            await _put(lake, "absent", b"x", Conditions(if_match=first))
        assert await _read(lake, "k") == b"first"
        assert await _put(lake, "k", b"third", Conditions(if_match=first)) == _etag(b"third")  # compare and swap
        assert await _read(lake, "k") == b"third"
        assert [e.key for e in (await lake.list_objects(B, ListQuery(v2=True))).entries] == ["k"]

    asyncio.run(main())


@pytest.mark.parametrize("kind", ["memory", "dir"])
def test_a_conditional_delete_keeps_an_object_that_changed(tmp_path: Path, kind: str) -> None:
    lake = _lake(tmp_path, kind)

    async def main() -> None:
        first = await _put(lake, "k", b"first")
        await _put(lake, "k", b"second")
        with pytest.raises(PreconditionFailed):
            await lake.delete_object(B, "k", conditions=Conditions(if_match=first))
        assert await _read(lake, "k") == b"second"
        await lake.delete_object(B, "k", conditions=Conditions(if_match=_etag(b"second")))
        with pytest.raises(NoSuchKey):
            await _read(lake, "k")
        await lake.delete_object(B, "k", conditions=Conditions(if_match=first))  # nothing there: done

    asyncio.run(main())


@pytest.mark.parametrize("kind", ["memory", "dir"])
def test_a_conditional_complete_that_fails_keeps_the_upload_and_the_object(tmp_path: Path, kind: str) -> None:
    lake = _lake(tmp_path, kind)

    async def main() -> None:
        await _put(lake, "k", b"there already")
        upload = await lake.create_multipart_upload(B, "k", ObjectAttributes())
        part = await lake.upload_part(B, "k", upload, 1, _body(b"part"), 4)
        with pytest.raises(PreconditionFailed):
            await lake.complete_multipart_upload(B, "k", upload, [(1, part.etag)], conditions=CREATE)
        assert await _read(lake, "k") == b"there already"
        assert [p.part_number for p in (await lake.list_parts(B, "k", upload)).parts] == [1]  # still there
        current = (await lake.head_object(B, "k")).etag
        result = await lake.complete_multipart_upload(B, "k", upload, [(1, part.etag)],
                                                      conditions=Conditions(if_match=current))
        assert result.etag.endswith('-1"') and await _read(lake, "k") == b"part"

    asyncio.run(main())


def test_racing_creates_through_two_folder_lakes_on_one_root_leave_exactly_one_winner(tmp_path: Path) -> None:
    """Two DirLakes on one root, as a node's workers are: 16 concurrent If-None-Match: * PUTs of
    one key; the check and the write are one sqlite write transaction, so one of them wins."""
    root = tmp_path / "lake"
    first, second = DirLake(root), DirLake(root)

    async def main() -> None:
        await first.create_bucket(B)
        bodies = [f"writer {n}".encode() for n in range(16)]
        outcomes = await asyncio.gather(
            *(_put(first if n % 2 else second, "k", data, CREATE) for n, data in enumerate(bodies)),
            return_exceptions=True)
        won = [bodies[n] for n, outcome in enumerate(outcomes) if isinstance(outcome, str)]
        assert len(won) == 1, outcomes
        assert all(isinstance(o, PreconditionFailed) for o in outcomes if not isinstance(o, str))
        assert await _read(first, "k") == await _read(second, "k") == won[0]

    asyncio.run(main())
