"""Issue 16's probes through the whole app in-process: /_lakegate/health/live answers while the
app serves; /_lakegate/health/ready is 200 with the lake reachable, 503 naming each failed
condition (the lake's folder gone, the node draining); both open (no credential); the old
/_lakegate/health as before. And SIGTERM's journal flush: a write-back PUT whose flush is still
under way when the drain starts reaches the lake before the node closes.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
from pathlib import Path
from typing import Any

import httpx2
import pytest
from harness.endpoints import ALICE, REGION
from inprocess import AsgiBridge, lakegate_app

from cachetier.lake.conditions import NO_CONDITIONS, Conditions
from cachetier.lake import Body, ObjectAttributes, WriteResult
from cachetier.lake.memory import MemoryLake
from cachetier.write.flusher import Flusher
from gateway.app import LakegateApp
from gateway.drain import Drain

ENDPOINT = "http://localhost:21400"  # never connected to


async def probe(app: LakegateApp, path: str) -> tuple[int, Any]:
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url=ENDPOINT) as client:
        resp = await client.get(path)
    return resp.status_code, resp.json()


async def ready_status(app: LakegateApp, want: int) -> Any:
    """The ready probe's body once it answers ``want`` (its lake check is cached ~2 s)."""
    for _ in range(200):
        status, doc = await probe(app, "/_lakegate/health/ready")
        if status == want:
            return doc
        await asyncio.sleep(0.1)
    raise AssertionError(f"ready never answered {want}: {status} {doc}")


def fresh_app(folder: Path, **overrides: object) -> LakegateApp:
    app = lakegate_app(folder, **overrides)
    app.drain = Drain()  # this test's, not the process's
    return app


def test_live_and_ready_answer_200_without_a_credential(tmp_path: Path) -> None:
    app = fresh_app(tmp_path)

    async def main() -> None:
        async with app.running():
            assert await probe(app, "/_lakegate/health/live") == (200, {"status": "live"})
            assert await probe(app, "/_lakegate/health") == (200, {"status": "ok"})
            status, doc = await probe(app, "/_lakegate/health/ready")
            assert (status, doc) == (200, {"status": "ready", "lake": "reachable"})

    asyncio.run(main())


def test_ready_is_503_naming_the_lake_when_its_folder_is_gone(tmp_path: Path) -> None:
    app = fresh_app(tmp_path)

    async def main() -> None:
        async with app.running():
            await ready_status(app, 200)
            shutil.rmtree(tmp_path / "lake")
            doc = await ready_status(app, 503)
            assert doc["status"] == "not ready" and set(doc["failed"]) == {"lake"}
            assert "not there" in doc["failed"]["lake"]
            assert await probe(app, "/_lakegate/health/live") == (200, {"status": "live"})
            (tmp_path / "lake").mkdir()
            await ready_status(app, 200)

    asyncio.run(main())


def test_ready_is_503_draining_from_the_moment_the_drain_starts(tmp_path: Path) -> None:
    app = fresh_app(tmp_path)

    async def main() -> None:
        async with app.running():
            await ready_status(app, 200)
            app.drain.start()
            status, doc = await probe(app, "/_lakegate/health/ready")
            assert status == 503 and doc["status"] == "draining" and set(doc["failed"]) == {"draining"}
            assert await probe(app, "/_lakegate/health/live") == (200, {"status": "live"})

    asyncio.run(main())


class HeldLake(MemoryLake):
    """A lake whose puts wait until ``release`` is set (in the app's loop)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release: asyncio.Event | None = None

    async def put_object(self, bucket: str, key: str, body: Body, length: int, attrs: ObjectAttributes,
                         content_md5: str | None = None, conditions: Conditions = NO_CONDITIONS) -> WriteResult:
        self.release = self.release or asyncio.Event()
        self.entered.set()
        await self.release.wait()
        return await super().put_object(bucket, key, body, length, attrs, content_md5, conditions)


def test_a_write_back_put_is_flushed_to_the_lake_before_a_draining_node_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lake holds the flush until the drain's flush has begun (without it, the node's close
    would cancel the flusher and the write would stay in the journal)."""
    lake = HeldLake()
    original = Flusher.drain

    async def draining(self: Flusher, timeout: float, poll: float = 0.2) -> int:
        assert lake.release is not None
        lake.release.set()
        return await original(self, timeout, poll)

    monkeypatch.setattr(Flusher, "drain", draining)
    app = lakegate_app(tmp_path, lake, write_mode="write-back")
    app.drain = Drain()
    bridge = AsgiBridge(app)
    bridge.start()
    try:
        s3 = ALICE_client(bridge)
        s3.create_bucket(Bucket="held")
        s3.put_object(Bucket="held", Key="k", Body=b"pending until the drain")
        assert lake.entered.wait(30)
        app.drain.start()
    finally:
        bridge.close()
    got = asyncio.run(_read(lake, "held", "k"))
    assert got == b"pending until the drain"


def ALICE_client(bridge: AsgiBridge) -> Any:  # noqa: N802 - the tenant's name
    import boto3
    from botocore.config import Config

    client = boto3.client("s3", endpoint_url=ENDPOINT, region_name=REGION, aws_access_key_id=ALICE.access_key,
                          aws_secret_access_key=ALICE.secret_key,
                          config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))
    client.meta.events.register_last("before-send.s3", bridge.send)
    return client


async def _read(lake: MemoryLake, bucket: str, key: str) -> bytes:
    stream = await lake.get_object(bucket, key)
    try:
        return b"".join([bytes(piece) async for piece in stream.body])  # type: ignore[union-attr]
    finally:
        await stream.aclose()
