"""S3Lake over several endpoints of one lake, against an ``httpx2.MockTransport`` that answers
for each host: the chooser's order is followed (round robin by default), each request is signed
for the endpoint it goes to, connection failures and 5xx move retries to the next endpoint, a
4xx is the lake's answer (not retried elsewhere), streamed bodies stay where they were answered,
and per-endpoint counters. The settings' comma-separated ``LAKEGATE_LAKE``. No network."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TypeVar

import httpx2
import pytest

from cachetier.errors import NoSuchKey, ServiceUnavailable
from cachetier.lake import ObjectAttributes
from cachetier.lake.s3.client import S3Lake
from cachetier.lake.s3.config import S3LakeConfig
from cachetier.lake.s3.endpoints import EndpointChooser, RoundRobin
from gateway.settings import Settings, SettingsError
from tests.unit.test_s3lake import ACCESS_KEY, ETAG, LAST_MODIFIED, SECRET_KEY, Stream, verify_sigv4

T = TypeVar("T")
A, B = "http://rgw-a.test:7480", "http://rgw-b.test:7481"
ROOT = Path(__file__).resolve().parents[2]
Behaviour = Callable[[httpx2.Request], httpx2.Response]


def run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        return await coro

    return asyncio.run(main())


def ok(request: httpx2.Request) -> httpx2.Response:
    headers = {"etag": ETAG, "last-modified": LAST_MODIFIED, "content-length": "5"}
    if request.method == "HEAD":
        return httpx2.Response(200, headers=headers)
    return httpx2.Response(200, headers=headers, stream=Stream(b"he", b"llo"))


def refused(request: httpx2.Request) -> httpx2.Response:
    raise httpx2.ConnectError("connection refused", request=request)


class Lake:
    """An S3Lake on endpoints A and B, each answering with its behaviour; what reached whom."""

    def __init__(self, behaviours: dict[str, Behaviour], chooser: EndpointChooser | None = None, retries: int = 3) -> None:
        self.seen: list[tuple[str, str]] = []  # (endpoint, method) of each request that arrived

        async def handler(request: httpx2.Request) -> httpx2.Response:
            endpoint = f"{request.url.scheme}://{request.url.netloc.decode()}"
            # signed for the endpoint it goes to: the Host the signature covers is its own
            assert request.headers["host"] == request.url.netloc.decode()
            verify_sigv4(request, "us-east-1")
            response = behaviours[endpoint](request)  # a refused connection: not seen
            self.seen.append((endpoint, request.method))
            return response

        config = S3LakeConfig(A, ACCESS_KEY, SECRET_KEY, retries=retries, endpoints=(A, B))
        self.lake = S3Lake(config, transport=httpx2.MockTransport(handler), chooser=chooser, timer=iter(range(1000)).__next__)
        self.lake.retry_base_delay = 0.0

    def __call__(self, action: Callable[[S3Lake], Awaitable[T]]) -> T:
        async def main() -> T:
            try:
                return await action(self.lake)
            finally:
                await self.lake.aclose()

        return run(main())


class Recording:
    """A chooser with a fixed order that keeps what it is told."""

    def __init__(self, order: Sequence[str]) -> None:
        self.fixed = list(order)
        self.told: list[tuple[str, bool, float]] = []

    def order(self, endpoints: Sequence[str]) -> Sequence[str]:
        assert list(endpoints) == [A, B]
        return self.fixed

    def done(self, endpoint: str, ok: bool, latency_s: float) -> None:
        self.told.append((endpoint, ok, latency_s))


async def heads(lake: S3Lake, n: int) -> None:
    for i in range(n):
        await lake.head_object("bkt", f"k{i}")


def test_the_config_names_every_endpoint_and_keeps_the_first_as_endpoint() -> None:
    assert S3LakeConfig(A, "ak", "sk").endpoints == (A,)
    assert S3LakeConfig(A, "ak", "sk", endpoints=(A, B)).endpoint == A
    for endpoints in [(B, A), (A, A), (A, "https://rgw-b.test:7481"), (A, "http://rgw-b.test/path")]:
        with pytest.raises(ValueError):
            S3LakeConfig(A, "ak", "sk", endpoints=endpoints)


def test_round_robin_starts_each_request_at_the_next_endpoint() -> None:
    chooser = RoundRobin()
    assert [list(chooser.order("abc")) for _ in range(4)] == [list("abc"), list("bca"), list("cab"), list("abc")]


def test_requests_alternate_between_endpoints_each_signed_for_its_own() -> None:
    lake = Lake({A: ok, B: ok})
    lake(lambda s3: heads(s3, 4))
    assert lake.seen == [(A, "HEAD"), (B, "HEAD"), (A, "HEAD"), (B, "HEAD")]
    stats = lake.lake.endpoint_stats()
    assert stats == {A: {"requests": 2, "errors": 0, "outstanding": 0}, B: {"requests": 2, "errors": 0, "outstanding": 0}}


def test_a_dead_endpoints_requests_fail_over_to_the_other() -> None:
    chooser = Recording([A, B])
    lake = Lake({A: refused, B: ok}, chooser)
    lake(lambda s3: heads(s3, 3))
    assert [endpoint for endpoint, _ in lake.seen] == [B, B, B]  # what reached a server
    assert [(endpoint, good) for endpoint, good, _ in chooser.told] == [(A, False), (B, True)] * 3
    assert all(latency > 0 for _, _, latency in chooser.told)
    assert lake.lake.endpoint_stats()[A] == {"requests": 3, "errors": 3, "outstanding": 0}


def test_an_unsent_write_fails_over_too_but_a_sent_one_does_not() -> None:
    async def put(s3: S3Lake) -> None:
        await s3.put_object("bkt", "k", b"data", 4, ObjectAttributes())  # type: ignore[arg-type]

    lake = Lake({A: refused, B: lambda r: httpx2.Response(200, headers={"etag": ETAG})}, Recording([A, B]))
    lake(put)
    assert lake.seen == [(B, "PUT")]
    failing = Lake({A: lambda r: httpx2.Response(503), B: ok}, Recording([A, B]))
    with pytest.raises(ServiceUnavailable):
        failing(put)
    assert failing.seen == [(A, "PUT")]  # a PUT that may have been applied is not repeated


def test_a_5xx_is_retried_on_the_next_endpoint() -> None:
    lake = Lake({A: lambda r: httpx2.Response(503), B: ok}, Recording([A, B]))
    lake(lambda s3: heads(s3, 1))
    assert lake.seen == [(A, "HEAD"), (B, "HEAD")]
    assert lake.lake.endpoint_stats()[A]["errors"] == 1


def test_a_404_is_the_lakes_answer_not_retried_elsewhere() -> None:
    chooser = Recording([A, B])
    lake = Lake({A: lambda r: httpx2.Response(404), B: ok}, chooser)
    with pytest.raises(NoSuchKey):
        lake(lambda s3: heads(s3, 1))
    assert lake.seen == [(A, "HEAD")]
    assert [(endpoint, good) for endpoint, good, _ in chooser.told] == [(A, True)]
    assert lake.lake.endpoint_stats()[A] == {"requests": 1, "errors": 0, "outstanding": 0}


def test_retries_go_round_the_order_until_they_run_out() -> None:
    lake = Lake({A: refused, B: refused}, Recording([A, B]), retries=3)
    with pytest.raises(ServiceUnavailable):
        lake(lambda s3: heads(s3, 1))
    stats = lake.lake.endpoint_stats()
    assert (stats[A]["requests"], stats[B]["requests"]) == (2, 2)


def test_a_streamed_body_stays_on_its_endpoint_and_is_outstanding_until_read() -> None:
    lake = Lake({A: ok, B: ok})

    async def get(s3: S3Lake) -> tuple[bytes, list[dict[str, int]]]:
        stream = await s3.get_object("bkt", "k")
        during = [s3.endpoint_stats()[A]]
        data = b"".join([chunk async for chunk in stream.body])  # type: ignore[union-attr]
        await stream.aclose()
        return data, [*during, s3.endpoint_stats()[A]]

    data, (during, after) = lake(get)
    assert data == b"hello" and lake.seen == [(A, "GET")]
    assert (during["outstanding"], after["outstanding"]) == (1, 0)


def test_a_body_broken_mid_way_counts_as_its_endpoints_error() -> None:
    class Broken(Stream):
        async def __aiter__(self):  # type: ignore[no-untyped-def,override]
            yield b"he"
            raise httpx2.ReadError("connection reset")

    def broken(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"etag": ETAG, "content-length": "5"}, stream=Broken())

    lake = Lake({A: broken, B: ok})

    async def get(s3: S3Lake) -> None:
        stream = await s3.get_object("bkt", "k")
        async for _chunk in stream.body:  # type: ignore[union-attr]
            pass

    with pytest.raises(ServiceUnavailable):
        lake(get)
    assert lake.seen == [(A, "GET")]  # a body under way is not fetched again elsewhere
    assert lake.lake.endpoint_stats()[A] == {"requests": 1, "errors": 1, "outstanding": 0}


def test_a_stream_closed_unread_is_no_longer_outstanding() -> None:
    lake = Lake({A: ok, B: ok})

    async def get(s3: S3Lake) -> int:
        stream = await s3.get_object("bkt", "k")
        await stream.aclose()
        return s3.endpoint_stats()[A]["outstanding"]

    assert lake(get) == 0


# -- settings --------------------------------------------------------------------------------


def _load(tmp_path: Path, lake: str) -> Settings:
    return Settings.load(_env_file=None, lake=lake, lake_access_key="ak", lake_secret_key="sk",
                         cache_dir=tmp_path / "cache", tenants_file=ROOT / "deploy" / "tenants.example.toml")


def test_the_lake_setting_takes_several_endpoints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in __import__("os").environ if n.startswith("LAKEGATE_")]:
        monkeypatch.delenv(name)
    s3 = _load(tmp_path, f"{A}, {B}").lake.s3
    assert s3 is not None and (s3.endpoint, s3.endpoints) == (A, (A, B))
    single = _load(tmp_path, A).lake.s3
    assert single is not None and single.endpoints == (A,)
    for bad in [f"{A},ftp://x", f"{A},https://rgw-b.test:7481", f"{A},", f"{A},{A}", f"{A},http://h/p"]:
        with pytest.raises(SettingsError, match="^LAKEGATE_LAKE: "):
            _load(tmp_path, bad)
