"""``gateway.s3.response.send`` over ASGI: a streamed body's last chunk ends the response (no
empty closing message), a body that ends short or runs long never passes for a whole one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from doubles import run

from cachetier.lake import ObjectInfo, ObjectStream
from gateway.s3.response import Response, send

INFO = ObjectInfo("b", "k", 6, '"e"', datetime(2026, 1, 1, tzinfo=UTC))


async def _pieces(*pieces: bytes) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece


def _sent(*pieces: bytes, size: int = 6) -> tuple[list[dict[str, Any]], int | BaseException]:
    messages: list[dict[str, Any]] = []

    async def collect(message: dict[str, Any]) -> None:
        messages.append(message)

    async def main() -> int | BaseException:
        info = ObjectInfo("b", "k", size, '"e"', INFO.last_modified)
        try:
            return await send(collect, Response(stream=ObjectStream(info, None, _pieces(*pieces))), "ID", False)
        except ConnectionError as exc:
            return exc

    return messages, run(main())


def test_the_chunk_that_completes_the_length_ends_the_response() -> None:
    messages, sent = _sent(b"abc", b"", b"def")
    assert sent == 6
    bodies = [(m["body"], m.get("more_body", False)) for m in messages[1:]]
    assert bodies == [(b"abc", True), (b"def", False)]
    assert (b"content-length", b"6") in messages[0]["headers"]


def test_an_empty_object_still_ends_with_one_empty_message() -> None:
    messages, sent = _sent(size=0)
    assert sent == 0 and [(m["body"], m.get("more_body", False)) for m in messages[1:]] == [(b"", False)]


@pytest.mark.parametrize("pieces", [(b"abc",), (b"abc", b"de")])
def test_a_short_body_never_ends_the_response(pieces: tuple[bytes, ...]) -> None:
    messages, outcome = _sent(*pieces)
    assert isinstance(outcome, ConnectionError)
    assert all(m.get("more_body") for m in messages[1:])  # the server cuts the connection
