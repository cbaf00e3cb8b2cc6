"""What one hot 4 KiB GET costs lakegate, stage by stage, in-process: no socket, no client.

The app is built as tests/asgi/inprocess.py builds it (a folder lake, the cache on, one tenant),
served by ``LakegateHttpProtocol`` on a fake transport (as tests/doubles.py's ``FakeTransport``)
with uvicorn's ``Config`` loaded as ``lakegate serve`` loads it (so its middleware is there too),
on uvloop when installed, as uvicorn picks it. One SigV4-signed GET of a 4 KiB object (an L1 hit
every time after the first) is fed to the protocol as bytes and awaited until its response is
written; the signature is verified on every request as always.

Three measurements, each the minimum over ``--runs`` runs of ``--requests`` requests (this
machine is noisy; the minimum is the run least disturbed):

    total_us        CPU time per request, nothing instrumented (total_wall_us: wall time)
    bare_us         the same protocol and transport serving an app that answers 4 KiB at once
                    (the floor: what the server costs without lakegate), runs interleaved
                    with total_us's
    calls_per_request  Python and C calls per request (cProfile): noise-free, the cuts' proxy
    stages_us       wall time per request and stage, from timing wrappers around each stage's
                    function (exclusive: a stage's time without the stages inside it); the
                    wrappers cost a little, so their sum (instrumented_us) is above total_us

    PYTHONPATH=$PWD .venv/bin/python -m benchmarks.hot_path [--runs 7] [--requests 2000]

One JSON object on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import functools
import json
import pstats
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle
from uvicorn.server import ServerState

from harness.endpoints import ALICE, REGION

BUCKET, KEY = "hot", "obj-4k"
SIZE = 4096
HOST = "127.0.0.1:7700"

# ---- the fake transport: what would go on the wire, dropped (tests/doubles.py's, lighter) ----


class _Transport:
    def __init__(self) -> None:
        self.written = 0
        self.last = b""

    def write(self, data: bytes) -> None:
        if data:
            self.written += len(data)
            self.last = data

    def writelines(self, list_of_data: list[bytes]) -> None:
        self.write(b"".join(list_of_data))

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 7700)}.get(name, default)


# ---- requests --------------------------------------------------------------------------------


def _signed(method: str, path: str, body: bytes = b"") -> bytes:
    """A SigV4-signed request as it arrives on the wire (UNSIGNED-PAYLOAD, as the benchmarks' clients)."""
    request = AWSRequest(method=method, url=f"http://{HOST}{path}", headers={"host": HOST}, data=body)
    request.headers["x-amz-content-sha256"] = "UNSIGNED-PAYLOAD"
    S3SigV4Auth(Credentials(ALICE.access_key, ALICE.secret_key), "s3", REGION).add_auth(request)
    headers = dict(request.headers.items())
    if body or method == "PUT":
        headers["content-length"] = str(len(body))
    lines = [f"{method} {path} HTTP/1.1"] + [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class Connection:
    """One keep-alive connection of the protocol ``lakegate serve`` runs, on a fake transport."""

    def __init__(self, app: Any) -> None:
        from gateway.httpserver import LakegateHttpProtocol

        # as uvicorn.run(...) in gateway/cli.py builds it (its defaults otherwise)
        config = Config(app=app, lifespan="off", ws="none", access_log=False, server_header=False)
        config.load()
        state = ServerState()
        state.default_headers = [(b"date", b"Tue, 01 Dec 2026 13:00:00 GMT")]  # the server's ticker sets it
        self.transport = _Transport()
        self.protocol = LakegateHttpProtocol(config, state, {}, asyncio.get_running_loop())
        self.protocol.connection_made(self.transport)  # type: ignore[arg-type]

    async def exchange(self, raw: bytes) -> None:
        self.protocol.data_received(raw)
        for task in list(self.protocol.tasks):
            await task

    async def status(self, raw: bytes) -> bytes:
        self.transport.last = b""
        await self.exchange(raw)
        await asyncio.sleep(0)  # a head held for the end of the turn
        return self.transport.last


async def _bare_app(scope: Any, receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]) -> None:
    """The floor: a 4 KiB answer with the headers of a GET's, from memory."""
    await send({"type": "http.response.start", "status": 200, "headers": _BARE_HEADERS})
    await send({"type": "http.response.body", "body": _BARE_BODY})


_BARE_BODY = b"x" * SIZE
_BARE_HEADERS = [
    (b"x-amz-request-id", b"0123456789ABCDEF"), (b"x-amz-id-2", b"0123456789ABCDEF"),
    (b"last-modified", b"Tue, 01 Dec 2026 13:00:00 GMT"), (b"etag", b'"0123456789abcdef0123456789abcdef"'),
    (b"content-type", b"binary/octet-stream"), (b"accept-ranges", b"bytes"), (b"content-length", b"4096"),
]  # fmt: skip


# ---- stages: timing wrappers, exclusive of the stages nested in them ---------------------------


class Stages:
    """Accumulates each stage's exclusive time: a stage's wrapper takes off the time of the
    stages that ran inside it."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}
        self._stack: list[float] = []  # per open stage: time spent in stages nested in it

    def _enter(self) -> float:
        self._stack.append(0.0)
        return time.perf_counter()

    def _leave(self, name: str, started: float) -> None:
        spent = time.perf_counter() - started
        nested = self._stack.pop()
        self.totals[name] = self.totals.get(name, 0.0) + spent - nested
        if self._stack:
            self._stack[-1] += spent

    def sync(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = self._enter()
            try:
                return fn(*args, **kwargs)
            finally:
                self._leave(name, started)

        return timed

    def coro(self, name: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        """For coroutines that do not suspend on a hot hit (checked: the run fails if one does,
        as then the stack would interleave)."""

        @functools.wraps(fn)
        async def timed(*args: Any, **kwargs: Any) -> Any:
            started = self._enter()
            depth = len(self._stack)
            try:
                return await fn(*args, **kwargs)
            finally:
                assert len(self._stack) == depth, f"{name} interleaved with another stage"
                self._leave(name, started)

        return timed


@contextlib.contextmanager
def _patched(target: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(target, name)
    setattr(target, name, value)
    try:
        yield
    finally:
        setattr(target, name, old)


@contextlib.contextmanager
def instrumented(stages: Stages, app: Any) -> Iterator[None]:
    """Wraps each stage's function; the app's outer call is "server" (uvicorn's cycle and the
    loop), the rest is named for what it does."""
    from cachetier.blocks import files as files_module
    from gateway.httpserver import LakegateHttpProtocol
    from gateway.s3 import frontend, handlers, sigv4
    from gateway.s3.handlers import obj

    node = app.node
    reads = node.cache.reads
    l1 = reads.tiers.l1
    patches = [
        (LakegateHttpProtocol, "data_received", stages.sync("http_parse", LakegateHttpProtocol.data_received)),
        (RequestResponseCycle, "run_asgi", stages.coro("server_cycle", RequestResponseCycle.run_asgi)),
        (RequestResponseCycle, "send", stages.coro("asgi_send", RequestResponseCycle.send)),
        (type(app), "__call__", stages.coro("routing", type(app).__call__)),
        (type(node.s3), "__call__", stages.coro("frontend_other", type(node.s3).__call__)),
        (frontend, "from_scope", stages.sync("request_parse", frontend.from_scope)),
        (type(node.s3), "_authenticate", stages.sync("sigv4_verify", type(node.s3)._authenticate)),
        (type(node.s3), "_handle", stages.coro("tenant_admission", type(node.s3)._handle)),
        (handlers.HANDLERS, "GetObject", None),  # a dict: set below
        (frontend, "send", stages.coro("response_send", frontend.send)),
        (reads, "open", stages.coro("read_path", reads.open)),
        (reads, "head", stages.coro("metadata", reads.head)),
        (reads.tiers, "read_piece", stages.coro("l1_lookup", reads.tiers.read_piece)),
        (l1, "get", stages.sync("l1_read", l1.get)),
        (l1.files, "read", stages.sync("l1_file_read", l1.files.read)),
        (files_module, "crc32c", stages.sync("checksum", files_module.crc32c)),
    ]
    with contextlib.ExitStack() as stack:
        for target, name, value in patches:
            if isinstance(target, dict):
                old = target[name]
                target[name] = stages.coro("get_handler", obj.get_object)
                stack.callback(target.__setitem__, name, old)
            else:
                stack.enter_context(_patched(target, name, value))
        del sigv4
        yield


# ---- running ---------------------------------------------------------------------------------


async def _per_request(connection: Connection, raw: bytes, requests: int) -> tuple[float, float]:
    """(CPU, wall) microseconds per request. CPU time is the headline: other processes on the
    machine stretch wall time far more than they do this process's CPU time."""
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(requests):
        await connection.exchange(raw)
    return (time.process_time() - cpu) / requests * 1e6, (time.perf_counter() - wall) / requests * 1e6


async def _measure(app: Any, runs: int, requests: int) -> dict[str, Any]:
    async with app.running():
        connection = Connection(app)
        for method, path, body in (("PUT", f"/{BUCKET}", b""), ("PUT", f"/{BUCKET}/{KEY}", b"y" * SIZE)):
            head = await connection.status(_signed(method, path, body))
            assert head.startswith(b"HTTP/1.1 200"), head[:300]
        get = _signed("GET", f"/{BUCKET}/{KEY}")
        answer = await connection.status(get)
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"y" * SIZE), answer[:300]
        before = _hits(app)
        await _per_request(connection, get, 200)  # warm
        assert _hits(app) - before == 200, "every GET must be an L1 hit"

        bare = Connection(_bare_app)
        totals, bares = [], []
        for _ in range(runs):  # interleaved, so that a noisy moment hits both
            totals.append(await _per_request(connection, get, requests))
            bares.append(await _per_request(bare, get, requests))
        best: dict[str, float] = {}
        instrumented_totals = []
        for _ in range(runs):
            stages = Stages()
            with instrumented(stages, app):
                instrumented_totals.append((await _per_request(connection, get, requests))[1])
            for name, seconds in stages.totals.items():
                value = seconds / requests * 1e6
                best[name] = min(best.get(name, value), value)
        calls = await _calls_per_request(connection, get, 500)
        cpu, bare_cpu = min(t[0] for t in totals), min(b[0] for b in bares)
        return {
            "total_us": round(cpu, 1),
            "bare_us": round(bare_cpu, 1),
            "ratio_to_bare": round(cpu / bare_cpu, 2),
            "total_wall_us": round(min(t[1] for t in totals), 1),
            "bare_wall_us": round(min(b[1] for b in bares), 1),
            "instrumented_us": round(min(instrumented_totals), 1),
            "calls_per_request": calls,
            "stages_us": {name: round(value, 1) for name, value in sorted(best.items(), key=lambda kv: -kv[1])},
            "runs": runs,
            "requests": requests,
            "python": sys.version.split()[0],
            "loop": type(asyncio.get_running_loop()).__module__,
        }


async def _calls_per_request(connection: Connection, raw: bytes, requests: int) -> float:
    """Python and C function calls per request (cProfile's count): not a time, but the same
    on a loaded machine as on an idle one, so a cut's effect shows through any noise."""
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(requests):
        await connection.exchange(raw)
    profile.disable()
    return round(pstats.Stats(profile).total_calls / requests, 1)  # type: ignore[attr-defined]


def _hits(app: Any) -> int:
    stats = app.node.cache.snapshot().per_tenant
    return sum(int(counters.get("hits", 0)) for counters in stats.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from asgi.inprocess import lakegate_app  # noqa: E402  (tests/ is not a package on the path)

    with tempfile.TemporaryDirectory(prefix="hot-path-") as folder:
        # metadata stays warm (no HEAD in a run), and no scrub thread reads blocks meanwhile
        app = lakegate_app(Path(folder), meta_ttl=3600, scrub_rate=0)
        try:
            import uvloop

            runner: Callable[[Any], Any] = uvloop.run
        except ImportError:
            runner = asyncio.run
        result = runner(_measure(app, args.runs, args.requests))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
