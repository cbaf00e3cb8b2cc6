"""GetObject ``?partNumber=N`` through the cache: the handler maps the part to its byte range and
reads it as a range GET, so a part's blocks are the blocks of that range, cached once for both."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from doubles import B, BS, Clock, CountingLake, read, run

from cachetier.blocks.store import MemoryBlockStore
from cachetier.cachedlake import CachedLake
from cachetier.errors import ServiceUnavailable
from cachetier.lake import ObjectAttributes, ObjectPart
from cachetier.lake.dirlake import MIN_PART_SIZE
from cachetier.lake.memory import MemoryLake
from cachetier.lake.ranges import ByteRange
from cachetier.read.config import ReadConfig
from cachetier.read.path import ReadPath
from cachetier.telemetry.counters import CacheStats
from gateway.s3.handlers.common import Call
from gateway.s3.handlers.obj import get_object
from gateway.s3.request import S3Request
from gateway.tenants import Tenant

TAIL = b"t" * (3 * BS + 10)  # part 2: a few blocks


TENANT = Tenant("t", "AKPARTREADS", "secret")  # a signed caller (overrides are checked per tenant)


async def _one_piece(data: bytes) -> Any:
    yield data


async def _upload(lake: MemoryLake) -> None:
    uid = await lake.create_multipart_upload(B, "mp", ObjectAttributes())
    first = await lake.upload_part(B, "mp", uid, 1, _one_piece(b"h" * MIN_PART_SIZE), MIN_PART_SIZE)
    second = await lake.upload_part(B, "mp", uid, 2, _one_piece(TAIL), len(TAIL))
    await lake.complete_multipart_upload(B, "mp", uid, [(1, first.etag), (2, second.etag)])


def _part_request(number: int) -> S3Request:
    query = {"partNumber": str(number)}
    return S3Request("GET", B, "mp", query, {}, [], f"/{B}/mp".encode(), f"partNumber={number}".encode(), "GetObject")


def test_a_part_read_shares_its_blocks_with_range_reads() -> None:
    async def main() -> None:
        inner = MemoryLake(buckets=[B])
        await _upload(inner)
        lake = CountingLake(inner)
        reads = ReadPath(lake, MemoryBlockStore(1 << 30), CacheStats(), ReadConfig(block_size=BS, readahead=0),
                         clock=Clock())
        cached = CachedLake(lake, reads)
        total = MIN_PART_SIZE + len(TAIL)
        assert (await read(cached, "mp", ByteRange(MIN_PART_SIZE, total - 1)))[1] == TAIL
        fetched = list(lake.gets)
        assert fetched  # the range was read from the lake, once
        response = await get_object(Call(cached, _part_request(2), None, TENANT))  # type: ignore[arg-type]
        assert response.stream is not None
        body = b"".join([piece async for piece in response.stream.body])
        assert (response.status, body, lake.gets) == (206, TAIL, fetched)  # no lake GET: all cached
        assert response.headers["content-range"] == f"bytes {MIN_PART_SIZE}-{total - 1}/{total}"
        assert response.headers["x-amz-mp-parts-count"] == "2"

    run(main())


class StalePartLake(CachedLake):
    """Answers where a part lies from an older version of the object ``stale`` times: as if it
    was overwritten between the part's lookup and its read."""

    def __init__(self, lake: Any, reads: ReadPath, stale: int) -> None:
        super().__init__(lake, reads)
        self.stale = stale

    async def object_part(self, bucket: str, key: str, part_number: int) -> ObjectPart:
        part = await super().object_part(bucket, key, part_number)
        if self.stale > 0:
            self.stale -= 1
            return dataclasses.replace(part, info=dataclasses.replace(part.info, etag='"older-2"'))
        return part


def _stale_lake(stale: int) -> Any:
    async def build() -> StalePartLake:
        inner = MemoryLake(buckets=[B])
        await _upload(inner)
        reads = ReadPath(inner, MemoryBlockStore(1 << 30), CacheStats(), ReadConfig(block_size=BS), clock=Clock())
        return StalePartLake(inner, reads, stale)

    return build()


def test_a_part_of_an_object_overwritten_meanwhile_is_looked_up_again() -> None:
    async def main() -> None:
        lake = await _stale_lake(stale=2)
        response = await get_object(Call(lake, _part_request(2), None, TENANT))  # type: ignore[arg-type]
        assert response.stream is not None
        assert b"".join([piece async for piece in response.stream.body]) == TAIL and lake.stale == 0

    run(main())


def test_an_object_that_keeps_changing_under_a_part_read_is_unavailable() -> None:
    async def main() -> None:
        lake = await _stale_lake(stale=10)
        with pytest.raises(ServiceUnavailable):
            await get_object(Call(lake, _part_request(2), None, TENANT))  # type: ignore[arg-type]

    run(main())
