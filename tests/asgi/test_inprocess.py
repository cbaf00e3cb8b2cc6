"""The in-process bridge itself (inprocess.AsgiBridge): what the conformance tier relies on.
A streamed response is readable while the app is still sending it, a file-like request body
reaches the app in pieces, an app that fails before answering fails the client's call, and
the app's lifespan runs at start and close.
"""

from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.awsrequest import AWSPreparedRequest
from inprocess import PIECE, AsgiBridge, Message, Receive, Send


class EchoApp:
    """Answers with the request body it counted, or, for GET, two pieces with a wait between:
    the second is sent only once the client has read the first (``first_read``)."""

    def __init__(self) -> None:
        self.first_read = threading.Event()
        self.lifespan: list[str] = []
        self.pieces: list[int] = []

    async def __call__(self, scope: Any, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["path"] == "/fail":
            raise RuntimeError("the app failed before answering")
        if scope["method"] == "GET":
            await send({"type": "http.response.start", "status": 200, "headers": [(b"x-a", b"1"), (b"x-a", b"2")]})
            await send({"type": "http.response.body", "body": b"first", "more_body": True})
            await asyncio.get_running_loop().run_in_executor(None, self.first_read.wait, 10)
            await send({"type": "http.response.body", "body": b"second"})
            return
        while True:
            message: Message = await receive()
            self.pieces.append(len(message.get("body", b"")))
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": str(sum(self.pieces)).encode()})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            phase = message["type"].removeprefix("lifespan.")
            self.lifespan.append(phase)
            await send({"type": f"lifespan.{phase}.complete"})
            if phase == "shutdown":
                return


@pytest.fixture
def app() -> EchoApp:
    return EchoApp()


@pytest.fixture
def bridge(app: EchoApp) -> Iterator[AsgiBridge]:
    served = AsgiBridge(app)
    served.start()
    yield served
    served.close()
    assert app.lifespan == ["startup", "shutdown"]


def request(method: str, path: str, body: Any = None) -> AWSPreparedRequest:
    return AWSPreparedRequest(method, f"http://localhost:21400{path}", {"Content-Type": "x/y"}, body, True)


def test_a_streamed_response_is_read_while_the_app_still_sends(app: EchoApp, bridge: AsgiBridge) -> None:
    response = bridge.send(request("GET", "/k"))
    assert (response.status_code, response.headers["x-a"]) == (200, "1, 2")
    assert response.raw.read(5) == b"first"  # the app waits for this read before it goes on
    app.first_read.set()
    assert response.raw.read() == b"second"


def test_a_file_like_request_body_reaches_the_app_in_pieces(app: EchoApp, bridge: AsgiBridge) -> None:
    body = io.BytesIO(b"x" * (3 * PIECE + 1))
    response = bridge.send(request("PUT", "/k", body))
    assert (response.status_code, response.content) == (201, str(3 * PIECE + 1).encode())
    assert app.pieces == [PIECE, PIECE, PIECE, 1, 0]


def test_an_app_failing_before_its_answer_fails_the_call(app: EchoApp, bridge: AsgiBridge) -> None:
    with pytest.raises(RuntimeError, match="before answering"):
        bridge.send(request("GET", "/fail"))
