"""DirLake: the embedded lake answers as S3 would (errors, listing, multipart, ETags) and keeps
its writes all-or-nothing. The tests about Lake semantics (those taking ``lakes``) run over
DirLake and over its in-memory twin MemoryLake, which is also checked against the Lake protocol
by exact signature; the rest are about DirLake's folder (a writer killed mid-write:
tests/component/test_crash_kill.py). Sync tests drive the async API with asyncio.run."""

from __future__ import annotations

import asyncio
import base64
import bisect
import hashlib
import inspect
import json
import os
import sqlite3
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from doubles import Clock, leftovers, md5_etag
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cachetier.lake.conditions import Conditions
from cachetier.lake.dirlake import MIN_PART_SIZE, DirLake, valid_bucket_name
from cachetier.lake.dirlake.listing import decode_token, encode_token, list_objects_page, prefix_end
from cachetier.errors import (
    BadDigest,
    BucketNotEmpty,
    EntityTooSmall,
    IncompleteBody,
    InvalidArgument,
    InvalidBucketName,
    InvalidDigest,
    InvalidPart,
    InvalidPartNumber,
    InvalidPartOrder,
    InvalidRange,
    InvalidRequest,
    KeyTooLongError,
    NoSuchBucket,
    NoSuchKey,
    NoSuchUpload,
    NotModified,
    PreconditionFailed,
)
from cachetier.lake import (
    CopySource,
    Lake,
    ListEntry,
    ListPage,
    ListQuery,
    ObjectAttributes,
    UploadsQuery,
)
from cachetier.lake.memory import MemoryLake
from cachetier.lake.ranges import ByteRange

T = TypeVar("T")
B = "bkt"


@dataclass(frozen=True)
class Opener:
    """Opens the lake a behaviour test runs on: a DirLake over ``root`` (a new instance each
    time, as after a restart), or, when ``memory`` is set, that MemoryLake (the twin)."""

    root: Path
    memory: MemoryLake | None = None

    @property
    def on_disk(self) -> bool:
        return self.memory is None

    def __call__(self) -> Lake:
        return DirLake(self.root) if self.memory is None else self.memory


LAKES = ["dir", "memory"]


def opener(kind: str, root: Path) -> Opener:
    return Opener(root) if kind == "dir" else Opener(root, MemoryLake(buckets=[B]))


def run(fn: Callable[[Any], Awaitable[T]], where: Path | Opener) -> T:
    """Run ``fn(lake)`` on a lake with bucket B (a fresh DirLake over a root, or what an Opener
    opens), then close it."""
    open_lake = where if isinstance(where, Opener) else Opener(where)

    async def main() -> T:
        lake = open_lake()
        try:
            if open_lake.on_disk and not (open_lake.root / B).exists():
                await lake.create_bucket(B)
            return await fn(lake)
        finally:
            await lake.aclose()

    return asyncio.run(main())


async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def put(lake: Lake, key: str, data: bytes = b"x", bucket: str = B, **attrs: Any) -> str:
    result = await lake.put_object(bucket, key, chunks(data), len(data), ObjectAttributes(**attrs))
    return result.etag


async def read(lake: Lake, key: str, bucket: str = B, **kw: Any) -> bytes:
    stream = await lake.get_object(bucket, key, **kw)
    try:
        return b"".join([c async for c in stream.body])
    finally:
        await stream.aclose()


def b64md5(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "lake"


@pytest.fixture(params=LAKES)
def lakes(request: pytest.FixtureRequest, root: Path) -> Opener:
    """Each lake a test about Lake semantics runs on: DirLake over ``root``, and the twin."""
    return opener(request.param, root)


# -- protocol, buckets ----------------------------------------------------------------------


def test_conforms_to_the_lake_protocol(root: Path) -> None:
    assert isinstance(DirLake(root), Lake) and isinstance(MemoryLake(), Lake)
    assert (root / ".tmp").is_dir() and (root / ".uploads").is_dir()


LAKE_METHODS = [name for name in vars(Lake) if not name.startswith("_") and callable(getattr(Lake, name))]


@pytest.mark.parametrize("cls", [DirLake, MemoryLake])
def test_each_lake_has_every_protocol_method_by_exact_signature(cls: type) -> None:
    assert {"get_object", "list_parts", "aclose"} <= set(LAKE_METHODS)  # found them all
    for name in LAKE_METHODS:
        assert inspect.signature(getattr(cls, name)) == inspect.signature(getattr(Lake, name)), name


def test_bucket_lifecycle(lakes: Opener) -> None:
    async def scenario(lake: Lake) -> None:
        await lake.create_bucket("zeta.b-1")
        await lake.create_bucket("alpha", location="eu-west-1")
        buckets = await lake.list_buckets()
        assert [b.name for b in buckets] == ["alpha", B, "zeta.b-1"]
        assert all(b.created.tzinfo is not None for b in buckets)
        assert await lake.bucket_location(B) == ""
        assert await lake.bucket_location("alpha") == "eu-west-1"
        await lake.head_bucket("alpha")
        await lake.create_bucket("alpha")  # re-creating one's own bucket: 200, as AWS us-east-1 and RGW
        assert await lake.bucket_location("alpha") == "eu-west-1"
        await put(lake, "k", bucket="alpha")
        with pytest.raises(BucketNotEmpty):
            await lake.delete_bucket("alpha")
        await lake.delete_object("alpha", "k")
        await lake.delete_bucket("alpha")
        for call in (lake.head_bucket, lake.delete_bucket, lake.bucket_location):
            with pytest.raises(NoSuchBucket):
                await call("alpha")
        with pytest.raises(NoSuchBucket):
            await lake.head_object("alpha", "k")
        assert [b.name for b in await lake.list_buckets()] == [B, "zeta.b-1"]

    run(scenario, lakes)


@pytest.mark.parametrize(
    "name",
    ["ab", "a" * 64, "Upper", "-ab", "ab-", ".uploads", ".tmp", "a..b", "192.168.1.1", "a_b", "a/b", "../x", "ab\n"],
)
def test_invalid_bucket_names(lakes: Opener, name: str) -> None:
    async def scenario(lake: Lake) -> None:
        with pytest.raises(InvalidBucketName):
            await lake.create_bucket(name)
        with pytest.raises(NoSuchBucket):  # elsewhere such a name is simply no bucket
            await lake.head_bucket(name)

    run(scenario, lakes)
    assert not valid_bucket_name(name)
    if lakes.on_disk:  # DirLake's folder holds only what it should
        assert sorted(os.listdir(lakes.root)) == [".tmp", ".uploads", B]


def test_delete_bucket_drops_its_uploads(lakes: Opener) -> None:
    async def scenario(lake: Lake) -> None:
        await lake.create_multipart_upload(B, "k", ObjectAttributes())
        await lake.delete_bucket(B)  # S3 counts only objects
        await lake.create_bucket(B)
        assert (await lake.list_multipart_uploads(B, UploadsQuery())).uploads == []
        assert not lakes.on_disk or os.listdir(lakes.root / ".uploads") == []

    run(scenario, lakes)


# -- objects ----------------------------------------------------------------------------------


def test_put_get_head_round_trip(lakes: Opener) -> None:
    data = os.urandom(3 * (1 << 20) + 5)
    headers = {"cache-control": "no-cache", "x-amz-checksum-crc32": "AAAAAA=="}

    async def scenario(lake: Lake) -> None:
        result = await lake.put_object(
            B, "dir/obj", chunks(data[:10], data[10:]), len(data),
            ObjectAttributes("text/plain", {"color": "blue"}, headers), content_md5=b64md5(data),
        )  # fmt: skip
        assert result.etag == md5_etag(data)
        assert result.headers == {"x-amz-checksum-crc32": "AAAAAA=="}
        info = await lake.head_object(B, "dir/obj")
        assert (info.size, info.etag, info.content_type) == (len(data), md5_etag(data), "text/plain")
        assert info.metadata == {"color": "blue"} and info.headers == headers
        assert info.last_modified == result.last_modified
        assert info.last_modified.tzinfo is not None and info.last_modified.microsecond == 0
        stream = await lake.get_object(B, "dir/obj")
        got = [c async for c in stream.body]
        await stream.aclose()
        assert b"".join(got) == data and max(map(len, got)) <= 1 << 20
        assert stream.content_range is None and stream.length == len(data)

    run(scenario, lakes)


def test_empty_object_and_default_content_type(lakes: Opener) -> None:
    async def scenario(lake: Lake) -> None:
        assert await put(lake, "empty", b"") == md5_etag(b"")
        info = await lake.head_object(B, "empty")
        assert (info.size, info.content_type) == (0, "binary/octet-stream")
        assert await read(lake, "empty") == b""
        with pytest.raises(InvalidRange):
            await lake.get_object(B, "empty", ByteRange(0))

    run(scenario, lakes)


def test_missing_objects_and_buckets(lakes: Opener) -> None:
    async def scenario(lake: Lake) -> None:
        with pytest.raises(NoSuchKey):
            await lake.head_object(B, "nope")
        with pytest.raises(NoSuchKey):
            await lake.get_object(B, "nope")
        with pytest.raises(NoSuchBucket):
            await lake.get_object("nobucket", "k")
        with pytest.raises(NoSuchBucket):
            await put(lake, "k", bucket="nobucket")

    run(scenario, lakes)


STRANGE_KEYS = [
    "a", "a/", "a/b", "a//b", "//", "with space", "plus+sign", "per%25cent", "eq=ual", "ünïcødé/ключ",
    "emoji\U0001f600", "../../etc/passwd", "/abs", "a/../../b", "..", ".", "~", ".tmp", ".uploads/x",
]  # fmt: skip


def test_strange_keys_coexist_and_list_back_exactly(lakes: Opener) -> None:
    async def scenario(lake: Lake) -> None:
        for i, key in enumerate(STRANGE_KEYS):
            await put(lake, key, str(i).encode())
        for i, key in enumerate(STRANGE_KEYS):
            assert await read(lake, key) == str(i).encode()
        page = await lake.list_objects(B, ListQuery())
        assert [e.key for e in page.entries] == sorted(STRANGE_KEYS, key=lambda k: k.encode())

    run(scenario, lakes)
    if lakes.on_disk:  # DirLake's folder holds only what it should
        # nothing outside root; inside, only the layout
        assert os.listdir(lakes.root.parent) == ["lake"]
        assert sorted(os.listdir(lakes.root)) == [".tmp", ".uploads", B]
        assert sorted(os.listdir(lakes.root / B)) == ["bucket.json", "data", "index.sqlite3"]
        assert not (lakes.root / "etc").exists() and not Path("/abs").exists()


def test_invalid_keys_create_nothing(lakes: Opener) -> None:
    async def scenario(lake: Lake) -> None:
        with pytest.raises(InvalidArgument):
            await put(lake, "nul\x00/../../x")
        for bad in ("", "lone surrogate \ud800"):
            with pytest.raises(InvalidArgument):
                await put(lake, bad)
        with pytest.raises(KeyTooLongError):
            await put(lake, "é" * 513)  # 1026 bytes
        await put(lake, "é" * 512)  # exactly 1024 bytes
        with pytest.raises(KeyTooLongError):
            await lake.head_object(B, "k" * 1025)

    run(scenario, lakes)
    if lakes.on_disk:  # DirLake's folder holds only what it should
        assert os.listdir(lakes.root.parent) == ["lake"] and leftovers(lakes.root) == []


def test_content_md5(lakes: Opener) -> None:
    async def scenario(lake: Lake) -> None:
        data = b"hello"
        attrs = ObjectAttributes()
        with pytest.raises(BadDigest):
            await lake.put_object(B, "k", chunks(data), 5, attrs, content_md5=b64md5(b"other"))
        for bad in ("not base64!", base64.b64encode(b"short").decode()):
            with pytest.raises(InvalidDigest):
                await lake.put_object(B, "k", chunks(data), 5, attrs, content_md5=bad)
        with pytest.raises(NoSuchKey):
            await lake.head_object(B, "k")
        await lake.put_object(B, "k", chunks(data), 5, attrs, content_md5=b64md5(data))

    run(scenario, lakes)
    if lakes.on_disk:  # DirLake's folder holds only what it should
        assert leftovers(lakes.root) == []


def test_failed_body_creates_and_replaces_nothing(lakes: Opener) -> None:
    class ClientGone(Exception):
        pass

    async def failing() -> AsyncIterator[bytes]:
        yield b"n" * (2 << 20)  # past one write batch, so bytes did reach the temp file
        raise ClientGone

    async def scenario(lake: Lake) -> None:
        etag = await put(lake, "kept", b"old")
        for key in ("kept", "new"):
            with pytest.raises(ClientGone):
                await lake.put_object(B, key, failing(), 4 << 20, ObjectAttributes())
        with pytest.raises(IncompleteBody):
            await lake.put_object(B, "kept", chunks(b"short"), 10, ObjectAttributes())
        assert await read(lake, "kept") == b"old"
        assert (await lake.head_object(B, "kept")).etag == etag
        with pytest.raises(NoSuchKey):
            await lake.head_object(B, "new")
        assert not isinstance(lake, DirLake) or lake.check() == []

    run(scenario, lakes)
    if lakes.on_disk:  # DirLake's folder holds only what it should
        assert leftovers(lakes.root) == []
        assert len(list((lakes.root / B / "data").glob("*/*"))) == 1  # the old object's file only


def test_ranges_and_conditions(lakes: Opener) -> None:
    data = bytes(range(100))
    later = datetime.now(UTC) + timedelta(days=1)
    earlier = datetime.now(UTC) - timedelta(days=1)

    async def scenario(lake: Lake) -> None:
        etag = await put(lake, "k", data)
        for rng, want in [(ByteRange(10, 19), data[10:20]), (ByteRange(90), data[90:]),
                          (ByteRange(None, suffix=5), data[-5:]), (ByteRange(95, 500), data[95:])]:  # fmt: skip
            assert await read(lake, "k", range=rng) == want
        stream = await lake.get_object(B, "k", ByteRange(10, 19))
        assert stream.content_range == (10, 19) and stream.length == 10
        await stream.aclose()  # never iterated: the file is closed all the same
        with pytest.raises(InvalidRange) as err:
            await lake.get_object(B, "k", ByteRange(100))
        assert err.value.size == 100 and err.value.status == 416  # Content-Range: bytes */100
        assert await read(lake, "k", conditions=Conditions(if_match=etag)) == data
        with pytest.raises(PreconditionFailed):
            await lake.get_object(B, "k", conditions=Conditions(if_match='"other"'))
        with pytest.raises(PreconditionFailed):
            await lake.get_object(B, "k", conditions=Conditions(if_unmodified_since=earlier))
        with pytest.raises(NotModified):
            await lake.get_object(B, "k", conditions=Conditions(if_none_match=etag))
        with pytest.raises(NotModified):
            await lake.get_object(B, "k", conditions=Conditions(if_modified_since=later))
        with pytest.raises(PreconditionFailed):  # conditions are checked before the range
            await lake.get_object(B, "k", ByteRange(500), Conditions(if_match='"other"'))

    run(scenario, lakes)


def test_overwrite_during_read_serves_the_old_bytes(lakes: Opener) -> None:
    old, new = b"o" * (3 << 20), b"n" * (3 << 20)

    async def scenario(lake: Lake) -> None:
        await put(lake, "k", old)
        stream = await lake.get_object(B, "k")
        first = await stream.body.__anext__()
        await put(lake, "k", new)
        rest = [c async for c in stream.body]
        await stream.aclose()
        assert first + b"".join(rest) == old
        assert await read(lake, "k") == new

    run(scenario, lakes)


def test_reopen_keeps_objects(root: Path) -> None:
    run(lambda lake: put(lake, "k", b"durable"), root)
    assert run(lambda lake: read(lake, "k"), root) == b"durable"


# -- copy, delete -----------------------------------------------------------------------------


def test_copy_object(lakes: Opener) -> None:
    async def scenario(lake: Lake) -> None:
        etag = await put(lake, "src", b"data", content_type="text/a", metadata={"m": "1"},
                         headers={"x-amz-checksum-sha256": "abc", "content-language": "fr"})  # fmt: skip
        result = await lake.copy_object(CopySource(B, "src"), B, "same")
        assert result.etag == etag and result.headers == {"x-amz-checksum-sha256": "abc"}
        info = await lake.head_object(B, "same")
        assert (info.content_type, info.metadata, info.headers["content-language"]) == ("text/a", {"m": "1"}, "fr")
        await lake.copy_object(CopySource(B, "src"), B, "replaced", ObjectAttributes("text/b", {"n": "2"}))
        info = await lake.head_object(B, "replaced")
        assert (info.content_type, info.metadata) == ("text/b", {"n": "2"})
        assert await read(lake, "replaced") == b"data"
        with pytest.raises(InvalidRequest):
            await lake.copy_object(CopySource(B, "src"), B, "src")
        await lake.copy_object(CopySource(B, "src"), B, "src", ObjectAttributes(metadata={"x": "y"}))
        assert (await lake.head_object(B, "src")).metadata == {"x": "y"}
        with pytest.raises(NoSuchKey):
            await lake.copy_object(CopySource(B, "missing"), B, "dst")
        with pytest.raises(NoSuchBucket):
            await lake.copy_object(CopySource(B, "src"), "nobucket", "dst")

    run(scenario, lakes)


@pytest.mark.parametrize(
    "conditions",
    [
        Conditions(if_match='"nope"'),
        Conditions(if_none_match="*"),
        Conditions(if_modified_since=datetime.now(UTC) + timedelta(days=1)),
        Conditions(if_unmodified_since=datetime.now(UTC) - timedelta(days=1)),
    ],
)
def test_copy_source_conditions_answer_412(lakes: Opener, conditions: Conditions) -> None:
    async def scenario(lake: Lake) -> None:
        await put(lake, "src")
        with pytest.raises(PreconditionFailed):
            await lake.copy_object(CopySource(B, "src", conditions), B, "dst")
        with pytest.raises(NoSuchKey):
            await lake.head_object(B, "dst")

    run(scenario, lakes)


def test_delete(lakes: Opener) -> None:
    async def scenario(lake: Lake) -> None:
        await put(lake, "a")
        await put(lake, "b")
        await lake.delete_object(B, "a")
        await lake.delete_object(B, "a")  # idempotent
        with pytest.raises(NoSuchKey):
            await lake.head_object(B, "a")
        with pytest.raises(NoSuchBucket):
            await lake.delete_object("nobucket", "a")
        outcomes = await lake.delete_objects(B, ["b", "missing", "k" * 1100])
        codes = [(o.key[:7], o.code) for o in outcomes]
        assert codes == [("b", None), ("missing", None), ("k" * 7, "KeyTooLongError")]
        assert (await lake.list_objects(B, ListQuery())).entries == []

    run(scenario, lakes)
    if lakes.on_disk:  # DirLake's folder holds only what it should
        assert list((lakes.root / B / "data").glob("*/*")) == []


# -- listing ----------------------------------------------------------------------------------


async def list_all(lake: Lake, query: ListQuery) -> tuple[list[str], list[ListPage]]:
    """Every key and common prefix, paging as a client would (NextMarker / token)."""
    pages = [await lake.list_objects(B, query)]
    while pages[-1].is_truncated:
        last = pages[-1]
        if query.v2:
            query = ListQuery(query.prefix, query.delimiter, query.max_keys, True,
                              continuation_token=last.next_continuation_token)  # fmt: skip
        else:
            query = ListQuery(query.prefix, query.delimiter, query.max_keys, marker=last.next_marker or "")
        pages.append(await lake.list_objects(B, query))
    items = [name for p in pages for name in sorted([e.key for e in p.entries] + p.common_prefixes)]
    return items, pages


def test_listing_with_delimiter_pages_across_common_prefixes(lakes: Opener) -> None:
    keys = ["a", "b/1", "b/2", "b/3", "c", "d/x/1", "d/y", "e"]

    async def scenario(lake: Lake) -> None:
        for key in keys:
            await put(lake, key)
        for v2 in (False, True):
            items, pages = await list_all(lake, ListQuery(delimiter="/", max_keys=2, v2=v2))
            assert items == ["a", "b/", "c", "d/", "e"]
            assert [p.common_prefixes for p in pages] == [["b/"], ["d/"], []]
            assert pages[0].next_marker == ("b/" if not v2 else None)
            items, _ = await list_all(lake, ListQuery(prefix="d/", delimiter="/", max_keys=1, v2=v2))
            assert items == ["d/x/", "d/y"]
        page = await lake.list_objects(B, ListQuery(delimiter="/", marker="b/2"))  # inside b/: skip b/
        assert [e.key for e in page.entries] == ["c", "e"] and page.common_prefixes == ["d/"]
        page = await lake.list_objects(B, ListQuery(max_keys=0))
        assert (page.entries, page.common_prefixes, page.is_truncated) == ([], [], False)
        page = await lake.list_objects(B, ListQuery(v2=True, start_after="c", max_keys=1))
        assert [e.key for e in page.entries] == ["d/x/1"] and page.is_truncated
        token = encode_token("d/y")  # a token decides over start_after
        page = await lake.list_objects(B, ListQuery(v2=True, start_after="a", continuation_token=token))
        assert [e.key for e in page.entries] == ["e"] and not page.is_truncated
        with pytest.raises(InvalidArgument):
            await lake.list_objects(B, ListQuery(v2=True, continuation_token="!!"))

    run(scenario, lakes)


def test_listing_is_in_utf8_byte_order(lakes: Opener) -> None:
    keys = ["z", "\uffff", "\U0001f600", "é", "A", "a", "a\x01", "~"]

    async def scenario(lake: Lake) -> None:
        for key in keys:
            await put(lake, key)
        items, _ = await list_all(lake, ListQuery(max_keys=3, v2=True))
        assert items == sorted(keys, key=lambda k: k.encode("utf-8"))
        assert items.index("\uffff") < items.index("\U0001f600")  # UTF-16 order would differ

    run(scenario, lakes)


def test_prefix_end_and_tokens() -> None:
    assert prefix_end("a/") == "a0"
    assert prefix_end("a\U0010ffff") == "b"
    assert prefix_end("\ud7ff") == "\ue000"
    assert prefix_end("\U0010ffff") is None
    assert decode_token(encode_token("ключ/🙂")) == "ключ/🙂"


def reference_listing(keys: set[str], prefix: str, delimiter: str, after: str = "") -> list[str]:
    """What S3 lists, the simple way: roll every key up, drop what the marker already passed."""
    items = set()
    for key in keys:
        if not key.startswith(prefix) or key <= after:
            continue
        cut = key.find(delimiter, len(prefix)) if delimiter else -1
        name = key if cut < 0 else key[: cut + len(delimiter)]
        if name > after:  # a common prefix at or before the marker was already listed
            items.add(name)
    return sorted(items)


_ALPHABET = st.sampled_from(["a", "b", "/", "é", "\U0001f600"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    keys=st.sets(st.text(_ALPHABET, min_size=1, max_size=5), max_size=20),
    data=st.data(),
)
@pytest.mark.parametrize("kind", LAKES)
def test_listing_matches_a_reference_model(kind: str, keys: set[str], data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:

        async def scenario(lake: Lake) -> None:
            for key in keys:
                await put(lake, key)
            for _ in range(3):
                prefix = data.draw(st.text(_ALPHABET, max_size=2), "prefix")
                delimiter = data.draw(st.sampled_from(["", "/", "b", "a/"]), "delimiter")
                max_keys = data.draw(st.integers(1, 4), "max_keys")
                v2 = data.draw(st.booleans(), "v2")
                items, pages = await list_all(lake, ListQuery(prefix, delimiter, max_keys, v2))
                assert items == reference_listing(keys, prefix, delimiter)
                assert all(len(p.entries) + len(p.common_prefixes) == max_keys for p in pages[:-1])
                after = data.draw(st.text(_ALPHABET, max_size=4), "marker")
                page = await lake.list_objects(B, ListQuery(prefix, delimiter, 1000, marker=after))
                assert sorted([e.key for e in page.entries] + page.common_prefixes) == reference_listing(
                    keys, prefix, delimiter, after
                )

        run(scenario, opener(kind, Path(tmp)))


def memory_scan(keys: set[str]) -> Callable[[str, bool, int], list[ListEntry]]:
    ordered = sorted(keys)
    when = datetime(2020, 1, 1, tzinfo=UTC)

    def scan(lower: str, inclusive: bool, limit: int) -> list[ListEntry]:
        start = (bisect.bisect_left if inclusive else bisect.bisect_right)(ordered, lower)
        return [ListEntry(k, 0, '""', when) for k in ordered[start : start + limit]]

    return scan


@settings(max_examples=60, deadline=None)
@given(
    keys=st.sets(st.text(_ALPHABET, min_size=1, max_size=8), max_size=300),
    prefix=st.text(_ALPHABET, max_size=2),
    delimiter=st.sampled_from(["", "/", "b", "a/"]),
    max_keys=st.sampled_from([1, 7, 50, 1000]),
)
def test_listing_pages_of_large_key_sets(keys: set[str], prefix: str, delimiter: str, max_keys: int) -> None:
    """The paging logic alone, over many keys: batches grow and shrink around prefix jumps."""
    scan, query, items = memory_scan(keys), ListQuery(prefix, delimiter, max_keys), []
    while True:
        page = list_objects_page(scan, query)
        items += sorted([e.key for e in page.entries] + page.common_prefixes)
        if not page.is_truncated:
            break
        query = ListQuery(prefix, delimiter, max_keys, marker=page.next_marker or "")
    assert items == reference_listing(keys, prefix, delimiter)


# -- multipart --------------------------------------------------------------------------------


def test_multipart_upload_round_trip(lakes: Opener) -> None:
    part1, part2 = os.urandom(MIN_PART_SIZE), b"tail"

    async def scenario(lake: Lake) -> None:
        attrs = ObjectAttributes("text/x", {"m": "v"}, {"x-amz-checksum-crc32": "AAAAAA==", "content-language": "en"})
        uid = await lake.create_multipart_upload(B, "mp", attrs)
        r1 = await lake.upload_part(B, "mp", uid, 1, chunks(part1), len(part1), content_md5=b64md5(part1))
        await lake.upload_part(B, "mp", uid, 2, chunks(b"replaced"), 8)
        r2 = await lake.upload_part(B, "mp", uid, 2, chunks(part2), len(part2))  # replaces part 2
        assert (r1.etag, r2.etag) == (md5_etag(part1), md5_etag(part2))
        page = await lake.list_parts(B, "mp", uid, max_parts=1)
        assert [p.part_number for p in page.parts] == [1] and page.is_truncated and page.next_part_number_marker == 1
        page = await lake.list_parts(B, "mp", uid, part_number_marker=1)
        assert [(p.part_number, p.size) for p in page.parts] == [(2, 4)] and not page.is_truncated
        result = await lake.complete_multipart_upload(B, "mp", uid, [(1, r1.etag), (2, r2.etag.strip('"'))])
        digests = hashlib.md5(part1).digest() + hashlib.md5(part2).digest()
        assert result.etag == f'"{hashlib.md5(digests).hexdigest()}-2"' and result.headers == {}
        info = await lake.head_object(B, "mp")
        assert (info.size, info.etag) == (len(part1) + 4, result.etag)
        assert (info.content_type, info.metadata) == ("text/x", {"m": "v"})
        assert info.headers == {"content-language": "en"}  # no checksums kept for multipart
        assert await read(lake, "mp") == part1 + part2
        with pytest.raises(NoSuchUpload):
            await lake.list_parts(B, "mp", uid)
        copied = await lake.copy_object(CopySource(B, "mp"), B, "mp-copy")
        assert copied.etag == result.etag  # a copy keeps the "-N" ETag
        assert not isinstance(lake, DirLake) or lake.check() == []

    run(scenario, lakes)
    if lakes.on_disk:  # DirLake's folder holds only what it should
        assert os.listdir(lakes.root / ".uploads") == [] and leftovers(lakes.root) == []


def test_object_parts_are_where_the_completed_upload_put_them(lakes: Opener) -> None:
    sizes = (MIN_PART_SIZE + 3, MIN_PART_SIZE, 7)  # all different, the last one small

    async def upload(lake: Lake) -> None:
        uid = await lake.create_multipart_upload(B, "mp", ObjectAttributes())
        done = []
        for number, size in enumerate(sizes, 1):
            r = await lake.upload_part(B, "mp", uid, number, chunks(b"p" * size), size)
            done.append((number, r.etag))
        await lake.complete_multipart_upload(B, "mp", uid, done)
        await put(lake, "single", b"0123456789")
        await put(lake, "empty", b"")

    async def parts(lake: Lake) -> None:  # after a restart, for DirLake
        spans = [await lake.object_part(B, "mp", n) for n in (1, 2, 3)]
        first2 = MIN_PART_SIZE + 3
        assert [(p.number, p.first, p.last, p.parts_count) for p in spans] == [
            (1, 0, first2 - 1, 3), (2, first2, first2 + MIN_PART_SIZE - 1, 3),
            (3, first2 + MIN_PART_SIZE, sum(sizes) - 1, 3),
        ]  # fmt: skip
        assert spans[0].info == await lake.head_object(B, "mp")
        for bad, error in ((4, InvalidPartNumber), (0, InvalidArgument), (10001, InvalidArgument)):
            with pytest.raises(error):
                await lake.object_part(B, "mp", bad)
        single = await lake.object_part(B, "single", 1)  # not uploaded in parts: one part, the whole
        assert (single.first, single.last, single.parts_count) == (0, 9, None)
        assert single.range is not None and single.range.resolve(10) == (0, 9)
        empty = await lake.object_part(B, "empty", 1)
        assert (empty.first, empty.last, empty.range) == (0, -1, None)
        with pytest.raises(InvalidPartNumber):
            await lake.object_part(B, "single", 2)
        with pytest.raises(NoSuchKey):
            await lake.object_part(B, "missing", 1)
        await lake.copy_object(CopySource(B, "mp"), B, "mp-copy")  # keeps the "-3" ETag, so its parts
        assert (await lake.object_part(B, "mp-copy", 3)).first == first2 + MIN_PART_SIZE
        assert not isinstance(lake, DirLake) or lake.check() == []

    run(upload, lakes)
    run(parts, lakes)


async def one_part_upload(lake: Lake) -> None:
    """Object "mp": a multipart upload of one 3-byte part, completed."""
    uid = await lake.create_multipart_upload(B, "mp", ObjectAttributes())
    r = await lake.upload_part(B, "mp", uid, 1, chunks(b"abc"), 3)
    await lake.complete_multipart_upload(B, "mp", uid, [(1, r.etag)])


def test_an_object_stored_before_part_sizes_were_recorded_is_a_single_part(root: Path) -> None:
    run(one_part_upload, root)
    with sqlite3.connect(root / B / "index.sqlite3") as db:  # the row as an older DirLake wrote it
        (attrs,) = db.execute("SELECT attrs FROM objects WHERE key = 'mp'").fetchone()
        old = json.loads(attrs)
        assert old.pop("parts") == [3]
        db.execute("UPDATE objects SET attrs = ? WHERE key = 'mp'", (json.dumps(old),))

    async def parts(lake: Lake) -> None:
        part = await lake.object_part(B, "mp", 1)
        assert (part.first, part.last, part.parts_count) == (0, 2, None)
        assert isinstance(lake, DirLake) and lake.check() == []

    run(parts, root)


def test_check_finds_part_sizes_that_do_not_add_up(root: Path) -> None:
    run(one_part_upload, root)
    with sqlite3.connect(root / B / "index.sqlite3") as db:
        (attrs,) = db.execute("SELECT attrs FROM objects WHERE key = 'mp'").fetchone()
        db.execute("UPDATE objects SET attrs = ? WHERE key = 'mp'", (json.dumps(json.loads(attrs) | {"parts": [2]}),))

    async def check(lake: Lake) -> list[str]:
        await lake.head_object(B, "mp")  # opens the bucket's index
        assert isinstance(lake, DirLake)
        return lake.check()

    assert run(check, root) == [f"{B}/mp: part sizes add up to 2, not 3"]


def test_multipart_completion_errors(lakes: Opener) -> None:
    async def scenario(lake: Lake) -> None:
        uid = await lake.create_multipart_upload(B, "mp", ObjectAttributes())
        e1 = (await lake.upload_part(B, "mp", uid, 1, chunks(b"small"), 5)).etag
        e2 = (await lake.upload_part(B, "mp", uid, 2, chunks(b"last"), 4)).etag
        with pytest.raises(InvalidPartOrder):
            await lake.complete_multipart_upload(B, "mp", uid, [(2, e2), (1, e1)])
        with pytest.raises(InvalidPart):
            await lake.complete_multipart_upload(B, "mp", uid, [(1, e1), (3, e2)])
        with pytest.raises(InvalidPart):
            await lake.complete_multipart_upload(B, "mp", uid, [(1, e2)])
        with pytest.raises(EntityTooSmall):
            await lake.complete_multipart_upload(B, "mp", uid, [(1, e1), (2, e2)])
        single = await lake.complete_multipart_upload(B, "mp", uid, [(2, e2)])  # a lone last part may be small
        assert single.etag.endswith('-1"') and await read(lake, "mp") == b"last"

    run(scenario, lakes)


def test_unknown_uploads(lakes: Opener) -> None:
    async def scenario(lake: Lake) -> None:
        uid = await lake.create_multipart_upload(B, "mp", ObjectAttributes())
        for bucket, key, upload_id in [(B, "other", uid), (B, "mp", "0" * 48), (B, "mp", "../../" + uid)]:
            with pytest.raises(NoSuchUpload):
                await lake.upload_part(bucket, key, upload_id, 1, chunks(b"x"), 1)
        with pytest.raises(NoSuchBucket):
            await lake.list_parts("nobucket", "mp", uid)
        with pytest.raises(InvalidArgument):
            await lake.upload_part(B, "mp", uid, 10001, chunks(b"x"), 1)
        await lake.abort_multipart_upload(B, "mp", uid)
        for call in (lake.abort_multipart_upload, lake.list_parts):
            with pytest.raises(NoSuchUpload):
                await call(B, "mp", uid)
        with pytest.raises(NoSuchUpload):
            await lake.complete_multipart_upload(B, "mp", uid, [(1, '"x"')])

    run(scenario, lakes)
    if lakes.on_disk:  # DirLake's folder holds only what it should
        assert leftovers(lakes.root) == []


def test_upload_part_copy(lakes: Opener) -> None:
    data = os.urandom(MIN_PART_SIZE + 100)

    async def scenario(lake: Lake) -> None:
        await put(lake, "src", data)
        uid = await lake.create_multipart_upload(B, "mp", ObjectAttributes())
        head = ByteRange(0, MIN_PART_SIZE - 1)
        first = await lake.upload_part_copy(CopySource(B, "src", range=head), B, "mp", uid, 1)
        assert first.etag == md5_etag(data[:MIN_PART_SIZE])
        with pytest.raises(InvalidRange):
            await lake.upload_part_copy(CopySource(B, "src", range=ByteRange(len(data))), B, "mp", uid, 2)
        with pytest.raises(PreconditionFailed):
            await lake.upload_part_copy(CopySource(B, "src", Conditions(if_none_match="*")), B, "mp", uid, 2)
        ranged = await lake.upload_part_copy(CopySource(B, "src", range=ByteRange(10, 19)), B, "mp", uid, 2)
        await lake.complete_multipart_upload(B, "mp", uid, [(1, first.etag), (2, ranged.etag)])
        assert await read(lake, "mp") == data[:MIN_PART_SIZE] + data[10:20]

    run(scenario, lakes)


def test_list_multipart_uploads(lakes: Opener) -> None:
    async def scenario(lake: Lake) -> None:
        ids = {}
        for key in ["b", "a/1", "a/2", "c", "b"]:
            ids.setdefault(key, []).append(await lake.create_multipart_upload(B, key, ObjectAttributes()))
        page = await lake.list_multipart_uploads(B, UploadsQuery())
        assert [(u.key, u.upload_id) for u in page.uploads] == [
            ("a/1", ids["a/1"][0]), ("a/2", ids["a/2"][0]), ("b", ids["b"][0]), ("b", ids["b"][1]), ("c", ids["c"][0])
        ]  # fmt: skip
        page = await lake.list_multipart_uploads(B, UploadsQuery(delimiter="/", max_uploads=2))
        assert page.common_prefixes == ["a/"] and [u.key for u in page.uploads] == ["b"] and page.is_truncated
        assert (page.next_key_marker, page.next_upload_id_marker) == ("b", ids["b"][0])
        page = await lake.list_multipart_uploads(
            B, UploadsQuery(delimiter="/", key_marker="b", upload_id_marker=ids["b"][0])
        )
        assert [u.upload_id for u in page.uploads] == [ids["b"][1], ids["c"][0]] and not page.is_truncated
        page = await lake.list_multipart_uploads(B, UploadsQuery(delimiter="/", key_marker="a/", max_uploads=1))
        assert [u.key for u in page.uploads] == ["b"] and page.common_prefixes == []
        page = await lake.list_multipart_uploads(B, UploadsQuery(prefix="a/"))
        assert [u.key for u in page.uploads] == ["a/1", "a/2"]
        assert (await lake.list_multipart_uploads(B, UploadsQuery(max_uploads=0))).uploads == []
        assert all(u.initiated.tzinfo is not None for u in page.uploads)

    run(scenario, lakes)


# -- the clock ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", LAKES)
def test_last_modified_and_upload_times_come_from_the_lakes_clock(kind: str, root: Path) -> None:
    clock = Clock()
    lake: Lake = DirLake(root, clock=clock) if kind == "dir" else MemoryLake(clock=clock)

    def at(seconds: int) -> datetime:
        return datetime.fromtimestamp(seconds, UTC)

    async def scenario() -> None:
        await lake.create_bucket(B)
        assert [b.created for b in await lake.list_buckets()] == [at(1000)]
        clock.now = 2000.5
        assert (await lake.put_object(B, "k", chunks(b"x"), 1, ObjectAttributes())).last_modified == at(2000)
        clock.now = 3000.0
        assert (await lake.copy_object(CopySource(B, "k"), B, "copy")).last_modified == at(3000)
        clock.now = 4000.0
        # a clock that stands still still gives one key's uploads ids in creation order
        uids = [await lake.create_multipart_upload(B, "mp", ObjectAttributes()) for _ in range(3)]
        uploads = (await lake.list_multipart_uploads(B, UploadsQuery())).uploads
        assert [u.upload_id for u in uploads] == uids and {u.initiated for u in uploads} == {at(4000)}
        clock.now = 5000.0
        part = await lake.upload_part(B, "mp", uids[0], 1, chunks(b"part"), 4)
        assert [p.last_modified for p in (await lake.list_parts(B, "mp", uids[0])).parts] == [at(5000)]
        clock.now = 6000.0
        completed = await lake.complete_multipart_upload(B, "mp", uids[0], [(1, part.etag)])
        assert completed.last_modified == at(6000)
        heads = [(await lake.head_object(B, key)).last_modified for key in ("copy", "k", "mp")]
        listed = [entry.last_modified for entry in (await lake.list_objects(B, ListQuery())).entries]
        assert heads == listed == [at(3000), at(2000), at(6000)]

    async def main() -> None:
        try:
            await scenario()
        finally:
            await lake.aclose()

    asyncio.run(main())


# -- recovery ---------------------------------------------------------------------------------


def test_start_up_removes_crash_leftovers(root: Path) -> None:
    run(lambda lake: put(lake, "k", b"kept"), root)
    (root / ".tmp" / "half-written").write_bytes(b"junk")
    fan = next((root / B / "data").iterdir())
    (fan / "deadbeef").write_bytes(b"never committed")
    DirLake(root)  # fresh leftovers may belong to another live instance: kept
    assert leftovers(root) == ["half-written"] and (fan / "deadbeef").exists()
    lake = DirLake(root, stale_after=0)
    assert leftovers(root) == [] and not (fan / "deadbeef").exists()
    assert lake.check() == []
    assert run(lambda lake: read(lake, "k"), root) == b"kept"
