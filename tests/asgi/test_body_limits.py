"""Issue 11 (bounded input): a stalled upload ends with S3's RequestTimeout after the body
timeout and leaves nothing in the lake or the cache; the peer API's body read is bounded in time
too. Driven at the ASGI level, with a client whose body stops half way and never resumes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from harness.endpoints import ALICE

from cachetier.errors import NoSuchKey
from cachetier.lake.memory import MemoryLake
from gateway.app import LakegateApp
from gateway.settings import Settings

BUCKET = "uploads"
Message = MutableMapping[str, Any]


@asynccontextmanager
async def app_with(tmp_path: Path, **settings: Any) -> AsyncIterator[tuple[LakegateApp, MemoryLake]]:
    (tmp_path / "tenants.toml").write_text(ALICE.to_toml())
    lake = MemoryLake()
    await lake.create_bucket(BUCKET)
    app = LakegateApp(
        Settings.load(_env_file=None, lake="dir:unused", tenants_file=tmp_path / "tenants.toml",
                      cache_dir=tmp_path / "cache", access_log=False, **settings),
        lake=lake,
    )
    async with app.running():
        yield app, lake


def put_scope(key: str, length: int) -> dict[str, Any]:
    request = AWSRequest("PUT", f"http://localhost/{BUCKET}/{key}", headers={"Content-Length": str(length)})
    request.context["client_config"] = Config(s3={"payload_signing_enabled": False})  # UNSIGNED-PAYLOAD
    S3SigV4Auth(Credentials(ALICE.access_key, ALICE.secret_key), "s3", "us-east-1").add_auth(request)
    headers = [(k.lower().encode(), v.encode()) for k, v in request.headers.items()]
    return {"type": "http", "method": "PUT", "path": f"/{BUCKET}/{key}", "raw_path": f"/{BUCKET}/{key}".encode(),
            "query_string": b"", "headers": headers + [(b"host", b"localhost")], "scheme": "http",
            "http_version": "1.1", "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 5000)}


def stalling_after(data: bytes) -> Any:
    """An ASGI receive that hands over ``data`` (more to come) and then never another byte."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": data, "more_body": True}
        await asyncio.Event().wait()  # the client went silent (not away: no disconnect either)
        raise AssertionError("unreachable")

    return receive


async def call(app: LakegateApp, scope: dict[str, Any], receive: Any) -> tuple[int, dict[bytes, bytes], bytes]:
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], dict(start["headers"]), body


def test_a_stalled_upload_is_answered_request_timeout_and_nothing_is_written(tmp_path: Path) -> None:
    async def main() -> None:
        async with app_with(tmp_path, body_timeout=0.3) as (app, lake):
            started = asyncio.get_running_loop().time()
            status, headers, body = await asyncio.wait_for(
                call(app, put_scope("stalled", 1 << 20), stalling_after(b"x" * 1000)), timeout=10)
            waited = asyncio.get_running_loop().time() - started
            assert status == 400 and b"<Code>RequestTimeout</Code>" in body
            assert headers.get(b"connection") == b"close"  # the rest of the body never comes
            assert 0.25 < waited < 5
            with pytest.raises(NoSuchKey):
                await lake.head_object(BUCKET, "stalled")
            assert app.node.stats().cache is not None and app.node.stats().cache.write_buffered_bytes == 0

    asyncio.run(main())


def test_a_slow_but_steady_upload_is_not_timed_out(tmp_path: Path) -> None:
    """The timeout is per wait for a byte, not for the whole body."""
    pieces = [b"y" * 100] * 6

    async def receive() -> Message:
        await asyncio.sleep(0.1)
        piece = pieces.pop()
        return {"type": "http.request", "body": piece, "more_body": bool(pieces)}

    async def main() -> None:
        async with app_with(tmp_path, body_timeout=0.3) as (app, lake):
            status, _, body = await call(app, put_scope("steady", 600), receive)
            assert status == 200, body
            assert (await lake.head_object(BUCKET, "steady")).size == 600

    asyncio.run(main())


def test_the_peer_api_does_not_wait_forever_for_a_body(tmp_path: Path) -> None:
    scope = {"type": "http", "method": "POST", "path": "/_lakegate/v1/heartbeat", "raw_path": b"/_lakegate/v1/heartbeat",
             "query_string": b"", "headers": [(b"content-length", b"5000")], "scheme": "http",
             "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 5000)}

    async def main() -> None:
        async with app_with(tmp_path, body_timeout=0.3) as (app, _):
            status, _, _ = await asyncio.wait_for(call(app, scope, stalling_after(b"{")), timeout=10)
            assert status == 408

    asyncio.run(main())
