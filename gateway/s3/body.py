"""The request body as the data plane sees it: decoded (aws-chunked), verified (Content-MD5,
signed SHA-256, x-amz-checksum-*, length) and streamed, never held whole in memory.

A client that sends no body byte for ``timeout`` seconds while the request waits for one gets
S3's ``400 RequestTimeout`` (and the connection is closed): the upload fails like any cut body,
so nothing reaches the lake or the cache. Only time spent waiting for the client counts: while
the lake is slow to take bytes, the request is not waiting for the client.

Every check runs before the last byte is handed on (the verifiers hold the last piece back),
so a lake written from this stream never completes a corrupt or short upload.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from cachetier.errors import EntityTooLarge, IncompleteBody, InvalidArgument
from cachetier.lake import CHECKSUM_HEADERS
from gateway.s3 import checksums, numbers
from gateway.s3.chunked import decode_aws_chunked
from gateway.s3.config import FrontendConfig
from gateway.s3.errors import MissingContentLength, RequestTimeout
from gateway.s3.request import S3Request
from gateway.s3.sigv4 import UNSIGNED_PAYLOAD, AuthContext

MAX_OBJECT = 5 * 1024**4  # S3's largest object (and part upper bound is smaller, see below)
MAX_PUT = 5 * 1024**3  # S3's largest single PUT / part


class RequestBody:
    def __init__(  # type: ignore[no-untyped-def]
        self, receive, req: S3Request, auth: AuthContext | None = None, *, timeout: float = FrontendConfig.body_timeout
    ) -> None:
        self._receive = receive
        self._timeout = timeout
        self._req = req
        self._auth = auth
        self._consumed = False
        self.finished = False  # the client's last body byte has been received

    def authenticated(self, auth: AuthContext | None) -> None:
        self._auth = auth

    @property
    def unread(self) -> bool:
        """The request announced a body we have not read to the end; answering now needs
        ``Connection: close``, else the rest of the body (or, after ``Expect: 100-continue``, a
        body never sent) would be parsed as the next request on the connection."""
        h = self._req.headers
        announced = h.get("content-length", "0") != "0" or "transfer-encoding" in h
        return announced and not self.finished

    async def _wire(self) -> AsyncIterator[bytes]:
        """Raw bytes from the client; a client that goes away mid-body is IncompleteBody, one
        that sends nothing for ``timeout`` seconds RequestTimeout."""
        if self._consumed:
            raise RuntimeError("request body read twice")
        self._consumed = True
        while True:
            try:
                async with asyncio.timeout(self._timeout):
                    message = await self._receive()
            except TimeoutError:
                raise RequestTimeout() from None
            if message["type"] == "http.disconnect":
                raise IncompleteBody()
            chunk = message.get("body", b"")
            if chunk:
                yield chunk
            if not message.get("more_body", False):
                self.finished = True
                return

    def _payload_hash(self) -> str:
        """The payload hash the signature covers: the one rule for how the body is read. A
        STREAMING-* value means aws-chunked framing; anything else (a hex digest the body must
        hash to, or UNSIGNED-PAYLOAD) means a plain body, whatever Content-Encoding says (it is
        not signed, so it may not change what a signed hash means)."""
        if self._auth is not None:
            return self._auth.payload_hash
        return self._req.headers.get("x-amz-content-sha256", UNSIGNED_PAYLOAD)

    def payload(self, stored: dict[str, str] | None = None) -> tuple[AsyncIterator[bytes], int]:
        """(verified payload stream, its exact length). Checksums sent as trailers are added to
        ``stored`` (the object's headers) once verified, before the last byte is handed on."""
        h = self._req.headers
        wanted = {name: h[name] for name in CHECKSUM_HEADERS if name in h}
        stored = {} if stored is None else stored
        mode = self._payload_hash()
        if mode.startswith("STREAMING-"):
            length = _length(h.get("x-amz-decoded-content-length"))
            trailer_names = [t.strip().lower() for t in h.get("x-amz-trailer", "").split(",") if t.strip()]
            source = decode_aws_chunked(
                self._wire(), mode=mode, auth=self._auth, decoded_length=length, trailer_names=trailer_names,
                trailers=stored,
            )
            sha256_hex = None
        else:
            if "content-length" not in h:
                raise MissingContentLength()
            length = _length(h["content-length"])
            source = self._wire()
            sha256_hex = mode if len(mode) == 64 else None  # sigv4 checked it is hex
        if length > MAX_PUT:
            raise EntityTooLarge()
        stream = checksums.verified(
            source,
            content_length=length,
            content_md5=h.get("content-md5"),
            sha256_hex=sha256_hex,
            checksums=wanted,
        )
        return stream, length

    async def read_all(self, limit: int) -> bytes:
        """A small body (an XML document), verified like any other."""
        stream, length = self.payload()
        if length > limit:
            raise InvalidArgument(f"request body larger than {limit} bytes")
        return b"".join([chunk async for chunk in stream])


def _length(value: str | None) -> int:
    if value is None:
        raise MissingContentLength()
    return numbers.decimal(value, "Content-Length")
