"""``S3Lake`` over several endpoints on real sockets: each endpoint's requests on connections of
its own (its own pool), a port nobody listens on failed over to the other endpoint. And, when
S3_ENDPOINT_URLS names two or more RGW instances of one Ceph (deploy/ceph/start-ceph.sh with
CEPH_RGW_INSTANCES=2), the same against them: each RGW checks the signature made for it, and
both serve the same buckets."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import pytest

from cachetier.errors import NoSuchKey
from cachetier.lake import ListQuery, ObjectAttributes
from cachetier.lake.s3.client import S3Lake
from cachetier.lake.s3.config import S3LakeConfig

T = TypeVar("T")


def _dead_endpoint() -> str:
    """A local port nobody listens on (bound, then closed: refused until someone takes it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


class _TinyLake:
    """An HTTP server answering every request 200 with its own address as the body; notes the
    Host each request named and how many connections it was given."""

    def __init__(self) -> None:
        self.hosts: list[str] = []
        self.connections = 0
        self.url = ""
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> _TinyLake:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        body = self.url.encode()
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                lines = head.decode("latin-1").split("\r\n")
                self.hosts += [line[5:].strip() for line in lines if line.lower().startswith("host:")]
                writer.write(b'HTTP/1.1 200 OK\r\nETag: "e"\r\nLast-Modified: Wed, 01 May 2024 12:00:00 GMT\r\n'
                             b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def _read(lake: S3Lake, key: str) -> bytes:
    stream = await lake.get_object("bkt", key)
    try:
        return b"".join([chunk async for chunk in stream.body])  # type: ignore[union-attr]
    finally:
        await stream.aclose()


def test_each_endpoint_has_its_own_pool_and_requests_alternate() -> None:
    async def main() -> None:
        async with _TinyLake() as a, _TinyLake() as b:
            lake = S3Lake(S3LakeConfig(a.url, "AK", "SK", retries=0, endpoints=(a.url, b.url)))
            try:
                bodies = [await _read(lake, f"k{i}") for i in range(6)]
            finally:
                await lake.aclose()
            assert bodies == [a.url.encode(), b.url.encode()] * 3
            assert a.hosts == [a.url[7:]] * 3 and b.hosts == [b.url[7:]] * 3  # each signed for itself
            assert (a.connections, b.connections) == (1, 1)  # kept alive, each in its own pool

    asyncio.run(main())


def test_a_port_nobody_listens_on_fails_over_to_the_other_endpoint() -> None:
    async def main() -> None:
        async with _TinyLake() as live:
            dead = _dead_endpoint()
            lake = S3Lake(S3LakeConfig(dead, "AK", "SK", endpoints=(dead, live.url)))
            try:
                bodies = [await _read(lake, f"k{i}") for i in range(4)]
                stats = lake.endpoint_stats()
            finally:
                await lake.aclose()
            assert bodies == [live.url.encode()] * 4
            assert stats[live.url] == {"requests": 4, "errors": 0, "outstanding": 0}
            assert stats[dead] == {"requests": 2, "errors": 2, "outstanding": 0}  # its turns, refused

    asyncio.run(main())


# -- several RGW instances of one Ceph -------------------------------------------------------

_RGW_URLS = [url for url in os.environ.get("S3_ENDPOINT_URLS", "").split(",") if url]
needs_rgws = pytest.mark.skipif(len(_RGW_URLS) < 2, reason="S3_ENDPOINT_URLS names fewer than 2 RGW instances "
                                "(deploy/ceph/start-ceph.sh with CEPH_RGW_INSTANCES=2 writes it to s3.env)")


def _rgw_lake(*endpoints: str) -> S3Lake:
    keys = os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"]
    return S3Lake(S3LakeConfig(endpoints[0], *keys, endpoints=endpoints))


def _on_rgws(action: Callable[[S3Lake, str], Awaitable[T]], *endpoints: str) -> T:
    async def main() -> T:
        lake = _rgw_lake(*endpoints)
        bucket = f"lakeendpoints-{uuid.uuid4().hex[:12]}"
        await lake.create_bucket(bucket)
        try:
            return await action(lake, bucket)
        finally:
            for info in (await lake.list_objects(bucket, ListQuery())).entries:
                await lake.delete_object(bucket, info.key)
            await lake.delete_bucket(bucket)
            await lake.aclose()

    return asyncio.run(main())


@needs_rgws
def test_two_rgws_serve_the_same_bucket_each_checking_its_own_signature() -> None:
    first, second = _RGW_URLS[:2]

    async def action(lake: S3Lake, bucket: str) -> None:
        await lake.put_object(bucket, "k", _body(b"hello"), 5, ObjectAttributes())
        for endpoint in (first, second):  # each RGW alone: the object the other stored
            alone = _rgw_lake(endpoint)
            try:
                assert (await alone.head_object(bucket, "k")).size == 5
            finally:
                await alone.aclose()
        for _ in range(4):
            stream = await lake.get_object(bucket, "k")
            assert b"".join([c async for c in stream.body]) == b"hello"  # type: ignore[union-attr]
            await stream.aclose()
        stats = lake.endpoint_stats()
        assert all(s["errors"] == 0 and s["requests"] >= 3 for s in stats.values()), stats

    _on_rgws(action, first, second)


@needs_rgws
def test_a_dead_rgw_fails_over_and_a_404_is_not_asked_elsewhere() -> None:
    first, dead = _RGW_URLS[0], _dead_endpoint()

    async def action(lake: S3Lake, bucket: str) -> None:
        await lake.put_object(bucket, "k", _body(b"hello"), 5, ObjectAttributes())
        for _ in range(4):
            assert (await lake.head_object(bucket, "k")).etag
        before = lake.endpoint_stats()
        with pytest.raises(NoSuchKey):
            await lake.head_object(bucket, "missing")
        after = lake.endpoint_stats()
        # the live RGW's 404 is the answer: asked once, never again after the dead one's turn
        assert after[first]["requests"] - before[first]["requests"] == 1
        assert after[dead]["requests"] >= 2 and after[dead]["errors"] == after[dead]["requests"]

    _on_rgws(action, dead, first)


async def _body(data: bytes) -> AsyncIterator[bytes]:
    yield data
