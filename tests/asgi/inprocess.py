"""boto3 into an ASGI app in-process: no server, no socket.

``AsgiBridge`` runs the app (and its lifespan) on an event loop in a background thread, and its
``send`` is a botocore ``before-send`` handler: it turns each prepared request into an ASGI
call and answers with an ``AWSResponse``, so botocore never opens a connection. Bodies stream
both ways: the request body is read from botocore's body (bytes or a file-like object, e.g.
aws-chunked) piece by piece as the app asks for it, and the response body reaches the client
as the app sends it (a queue between the loop and the caller's thread), so a streamed GET is
read while the app is still sending, as over a socket. ``lakegate_app`` is the app it serves,
built from Settings as `lakegate serve` builds it, with ALICE as the one tenant.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import queue
import threading
from collections.abc import Callable, Coroutine, Iterator, MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from harness.endpoints import ALICE

from cachetier.lake import Lake
from gateway.app import LakegateApp
from gateway.settings import Settings

Message = MutableMapping[str, Any]
Receive = Callable[[], Coroutine[Any, Any, Message]]
Send = Callable[[Message], Coroutine[Any, Any, None]]
ASGIApp = Callable[[MutableMapping[str, Any], Receive, Send], Coroutine[Any, Any, None]]

PIECE = 64 * 1024  # request body pieces handed to the app
TIMEOUT_S = 120.0  # a response head the app never sends fails the test instead of hanging it
_END = object()  # after the last response body piece


class _ResponseBody(io.RawIOBase):
    """The response body as botocore reads it from urllib3: ``read``/``readinto`` and ``stream``,
    fed by the app from the loop thread through ``pieces``."""

    def __init__(self, pieces: queue.Queue[object]) -> None:
        super().__init__()
        self._pieces = pieces
        self._buffer = b""
        self._ended = False
        self._position = 0

    def readable(self) -> bool:
        return True

    def _fill(self) -> bool:
        """At least one unread byte in the buffer, unless the body has ended."""
        while not self._buffer and not self._ended:
            piece = self._pieces.get(timeout=TIMEOUT_S)
            if piece is _END:
                self._ended = True
            elif isinstance(piece, BaseException):
                self._ended = True
                raise piece  # the app failed after its head was sent: a cut body
            else:
                assert isinstance(piece, bytes)
                self._buffer = piece
        return bool(self._buffer)

    def readinto(self, target: Any) -> int:
        if not self._fill():
            return 0
        size = min(len(target), len(self._buffer))
        target[:size] = self._buffer[:size]
        self._buffer = self._buffer[size:]
        self._position += size
        return size

    def read(self, amt: int | None = None) -> bytes:
        """Up to ``amt`` bytes (all the rest if None), as urllib3's response reads."""
        if amt is None or amt < 0:
            return b"".join(iter(lambda: self.read(PIECE), b""))
        return super().read(amt) or b""

    def stream(self, amt: int = PIECE) -> Iterator[bytes]:
        while piece := self.read(amt):
            yield piece

    def tell(self) -> int:
        return self._position


class _Exchange:
    """One request's state on the loop side: the body still to hand to the app, and where the
    response goes (its head to a future, its body pieces to a queue)."""

    def __init__(self, body: Any) -> None:
        self._body = body
        self._body_done = body is None or body == b""
        self.head: concurrent.futures.Future[tuple[int, dict[str, str]]] = concurrent.futures.Future()
        self.pieces: queue.Queue[object] = queue.Queue()
        self.finished = asyncio.Event()

    def _next_piece(self) -> bytes:
        body = self._body
        if isinstance(body, (bytes, bytearray)):
            self._body = b""
            return bytes(body)
        if isinstance(body, str):
            self._body = b""
            return body.encode()
        piece = body.read(PIECE)
        return piece.encode() if isinstance(piece, str) else bytes(piece)

    async def receive(self) -> Message:
        if self._body_done:
            await self.finished.wait()  # the client "disconnects" once the response is over
            return {"type": "http.disconnect"}
        piece = self._next_piece()
        self._body_done = not piece or isinstance(self._body, bytes)
        return {"type": "http.request", "body": piece, "more_body": not self._body_done}

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            headers: dict[str, str] = {}
            for name, value in message.get("headers", []):
                key, text = name.decode("latin-1").lower(), value.decode("latin-1")
                headers[key] = f"{headers[key]}, {text}" if key in headers else text  # as urllib3 joins them
            self.head.set_result((int(message["status"]), headers))
        elif message["type"] == "http.response.body":
            if message.get("body"):
                self.pieces.put(bytes(message["body"]))
            if not message.get("more_body", False):
                self.end()

    def end(self, error: BaseException | None = None) -> None:
        if not self.head.done():
            self.head.set_exception(error or RuntimeError("the app sent no response"))
        elif not self.finished.is_set():
            self.pieces.put(_END if error is None else error)
        self.finished.set()


def _scope(request: AWSPreparedRequest, state: dict[str, Any]) -> dict[str, Any]:
    url = urlsplit(request.url)
    headers = [
        (name.lower().encode("latin-1"), value if isinstance(value, bytes) else str(value).encode("latin-1"))
        for name, value in request.headers.items()
    ]
    if not any(name == b"host" for name, _ in headers):  # urllib3 adds it from the URL
        headers.append((b"host", url.netloc.encode("latin-1")))
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": url.scheme,
        "path": unquote(url.path),
        "raw_path": url.path.encode("latin-1"),
        "query_string": url.query.encode("latin-1"),
        "root_path": "",
        "headers": headers,
        "server": (url.hostname or "localhost", url.port or (443 if url.scheme == "https" else 80)),
        "client": ("127.0.0.1", 0),
        "state": dict(state),
    }


class AsgiBridge:
    """Serves ``app`` to botocore clients in-process; ``start`` runs its lifespan start-up,
    ``close`` its shutdown. Register ``send`` as a client's last ``before-send`` handler."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="asgi-bridge", daemon=True)
        self._state: dict[str, Any] = {}
        self._lifespan: asyncio.Queue[Message] | None = None
        self._lifespan_events: asyncio.Queue[Message] | None = None
        self._lifespan_task: asyncio.Future[None] | None = None

    def _run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(TIMEOUT_S)

    def start(self) -> None:
        self._thread.start()
        self._run(self._start())

    async def _start(self) -> None:
        self._lifespan, self._lifespan_events = asyncio.Queue(), asyncio.Queue()
        scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": self._state}
        self._lifespan_task = asyncio.ensure_future(self.app(scope, self._lifespan.get, self._lifespan_events.put))
        await self._lifespan.put({"type": "lifespan.startup"})
        answer = await self._lifespan_events.get()
        if answer["type"] != "lifespan.startup.complete":
            raise RuntimeError(f"the app did not start: {answer}")

    def close(self) -> None:
        try:
            self._run(self._stop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(TIMEOUT_S)
            self._loop.close()

    async def _stop(self) -> None:
        assert self._lifespan is not None and self._lifespan_events is not None
        await self._lifespan.put({"type": "lifespan.shutdown"})
        answer = await self._lifespan_events.get()
        if answer["type"] != "lifespan.shutdown.complete":
            raise RuntimeError(f"the app did not shut down cleanly: {answer}")

    async def _serve(self, scope: dict[str, Any], exchange: _Exchange) -> None:
        try:
            await self.app(scope, exchange.receive, exchange.send)
        except BaseException as exc:  # handed to the client's thread, as a broken connection would be
            exchange.end(exc)
        else:
            exchange.end()

    def send(self, request: AWSPreparedRequest, **_: Any) -> AWSResponse:
        """botocore's ``before-send``: the app's answer to ``request``."""
        exchange = _Exchange(request.body)
        asyncio.run_coroutine_threadsafe(self._serve(_scope(request, self._state), exchange), self._loop)
        status, headers = exchange.head.result(TIMEOUT_S)
        return AWSResponse(request.url, status, headers, _ResponseBody(exchange.pieces))


def lakegate_app(folder: Path, lake: Lake | None = None, *, tenants_toml: str = ALICE.to_toml(),
                 **overrides: object) -> LakegateApp:
    """The app as `lakegate serve` builds it; ``lake`` None: its folder lake in ``folder``;
    ``tenants_toml``: its tenants file (ALICE alone); ``overrides``: settings besides these
    (``sigv2=False``)."""
    tenants = folder / "tenants.toml"
    tenants.write_text(tenants_toml)
    settings = Settings.load(
        _env_file=None,  # a developer's .env must not change the app
        lake=f"dir:{folder / 'lake'}",
        tenants_file=tenants,
        cache_dir=folder / "cache",
        virtual_host_suffixes="localhost",
        access_log=False,
        **overrides,
    )
    return LakegateApp(settings, lake=lake)
