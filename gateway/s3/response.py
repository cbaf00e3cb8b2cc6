"""What a handler returns, and sending it over ASGI (headers, bytes or a streamed object)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from email.utils import format_datetime
from datetime import datetime

from cachetier.lake import FileRegion, ObjectStream

# The ASGI zero-copy send extension (asgiref's spec), which gateway.httpserver implements: a
# region of an open file sent as it is. A server that offers it names it in scope["extensions"].
ZERO_COPY = "http.response.zerocopysend"

# waits for the turn of n more bytes to leave (cachetier.fairness: the tenant's share of the
# node's send rate), charged chunk by chunk so a large GET does not hold up small ones
Charge = Callable[[int], Awaitable[None]]


@functools.lru_cache(maxsize=4096)  # the same Last-Modified is formatted on every hit
def http_date(dt: datetime) -> str:
    return format_datetime(dt, usegmt=True)


@dataclass
class Response:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    stream: ObjectStream | None = None  # streamed instead of body
    length: int | None = None  # Content-Length when it is not len(body), e.g. for HEAD

    @classmethod
    def xml(cls, body: bytes, status: int = 200) -> Response:
        return cls(status=status, headers={"Content-Type": "application/xml"}, body=body)


async def send(send, resp: Response, request_id: str, head: bool, charge: Charge | None = None) -> int:  # type: ignore[no-untyped-def]
    """Send ``resp``; returns body bytes sent. Once the first body byte is out, a failure can
    only abort the connection (raised to the server), never turn into an error document.
    ``charge``: awaited before each body piece leaves, with its length."""
    length = resp.length
    if length is None:
        length = resp.stream.length if resp.stream is not None else len(resp.body)
    headers = [(b"x-amz-request-id", request_id.encode()), (b"x-amz-id-2", request_id.encode())]
    headers += [(k.lower().encode("latin-1"), v.encode("latin-1", "replace")) for k, v in resp.headers.items()]
    if resp.status not in (204, 304) and not (resp.status < 200):
        headers.append((b"content-length", str(length).encode()))
    await send({"type": "http.response.start", "status": resp.status, "headers": headers})
    if head or resp.status in (204, 304):
        if resp.stream is not None:
            await resp.stream.aclose()
        await send({"type": "http.response.body", "body": b""})
        return 0
    if resp.stream is None:
        if charge is not None and resp.body:
            await charge(len(resp.body))
        await send({"type": "http.response.body", "body": resp.body})
        return len(resp.body)
    sent = 0
    try:
        async for chunk in resp.stream.body:
            if isinstance(chunk, FileRegion):  # asked for by the request context (zero_copy)
                try:
                    if charge is not None:
                        await charge(len(chunk))
                    sent += len(chunk)
                    await send({"type": ZERO_COPY, "file": chunk, "offset": chunk.offset, "count": len(chunk),
                                "more_body": sent != length})
                finally:
                    chunk.close()
            elif chunk:
                if charge is not None:
                    await charge(len(chunk))
                sent += len(chunk)
                # the chunk that completes Content-Length ends the response: one ASGI message
                # (and server write path) less than an empty closing one; a byte past it fails
                # the server's send, as one past Content-Length did
                await send({"type": "http.response.body", "body": chunk, "more_body": sent != length})
    finally:
        await resp.stream.aclose()
    if sent != length:
        # the lake ended early: the client must see a broken response, not a short "success"
        raise ConnectionError(f"lake body ended after {sent} of {length} bytes")
    if length == 0:
        await send({"type": "http.response.body", "body": b""})
    return sent
