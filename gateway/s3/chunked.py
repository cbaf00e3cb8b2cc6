"""Decoding of ``Content-Encoding: aws-chunked`` request bodies (the three STREAMING-* modes).

Wire format (signed modes carry ``;chunk-signature=<hex>``, unsigned ones do not)::

    <hex size>;chunk-signature=<sig> CRLF <data> CRLF      ... repeated ...
    0;chunk-signature=<sig> CRLF
    (<trailer name>:<value> CRLF)* [x-amz-trailer-signature:<sig> CRLF] CRLF

Memory stays bounded: a signed chunk is buffered whole (at most :data:`MAX_SIGNED_CHUNK`)
because its data may only be released once its signature has checked; unsigned chunks
stream through in the pieces they arrive in, whatever their size (CRT-based clients send a
whole part as one chunk). The last piece is held back until the terminating chunk, the
trailers and every check have passed (:func:`gateway.s3.checksums.hold_last`).
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncGenerator, AsyncIterator

from cachetier.errors import IncompleteBody, InvalidRequest
from gateway.s3.checksums import HEADER_PREFIX, Checksum, check, decode_value, hold_last
from gateway.s3.errors import SignatureDoesNotMatch
from gateway.s3.numbers import is_hexadecimal
from gateway.s3.sigv4 import EMPTY_SHA256, AuthContext, same_signature, sign, wire_bytes

SIGNED = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
SIGNED_TRAILER = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
UNSIGNED_TRAILER = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
MODES = frozenset({SIGNED, SIGNED_TRAILER, UNSIGNED_TRAILER})
TRAILER_SIGNATURE = "x-amz-trailer-signature"

MAX_SIGNED_CHUNK = 16 * 1024 * 1024
MAX_UNSIGNED_CHUNK = 5 * 1024**3  # S3's largest single PUT; beyond it the size is garbage
_MAX_LINE = 4096  # a chunk header is ~90 bytes
_MAX_TRAILERS = 16 * 1024


def chunk_string_to_sign(auth: AuthContext, previous: str, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    lines = ("AWS4-HMAC-SHA256-PAYLOAD", auth.amz_date, auth.scope, previous, EMPTY_SHA256, digest)
    return "\n".join(lines)


def trailer_string_to_sign(auth: AuthContext, previous: str, trailers: dict[str, str]) -> str:
    canonical = "".join(f"{name}:{trailers[name]}\n" for name in sorted(trailers))
    digest = hashlib.sha256(wire_bytes(canonical)).hexdigest()
    return f"AWS4-HMAC-SHA256-TRAILER\n{auth.amz_date}\n{auth.scope}\n{previous}\n{digest}"


def announced_trailers(header: str | None) -> list[str]:
    """The names an ``x-amz-trailer`` header announces, lower-cased."""
    return [n.strip().lower() for n in (header or "").split(",") if n.strip()]


class _Wire:
    """A buffered reader of CRLF lines and byte runs over an async byte source."""

    def __init__(self, source: AsyncIterator[bytes]) -> None:
        self._source = source.__aiter__()
        self._buffer = bytearray()

    async def _fill(self) -> bool:
        try:
            piece = await self._source.__anext__()
        except StopAsyncIteration:
            return False
        self._buffer += piece
        return True

    async def line(self, limit: int) -> bytes:
        searched = 0
        while (end := self._buffer.find(b"\r\n", searched)) < 0:
            if len(self._buffer) > limit:
                raise InvalidRequest("An aws-chunked line is too long.")
            searched = max(0, len(self._buffer) - 1)
            if not await self._fill():
                raise IncompleteBody()
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 2]
        return line

    async def exactly(self, size: int) -> bytes:
        while len(self._buffer) < size:
            if not await self._fill():
                raise IncompleteBody()
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    async def pieces(self, size: int) -> AsyncGenerator[bytes, None]:
        """``size`` bytes in the pieces they arrive in, without gathering them."""
        while size:
            if not self._buffer and not await self._fill():
                raise IncompleteBody()
            piece = bytes(self._buffer[:size])
            del self._buffer[: len(piece)]
            size -= len(piece)
            yield piece

    async def at_end(self) -> bool:
        while not self._buffer:
            if not await self._fill():
                return True
        return False


def _parse_chunk_header(line: bytes, signed: bool) -> tuple[int, str | None]:
    """(size, chunk signature) of ``<hex>[;chunk-signature=<sig>]``."""
    size_text, _, extension = line.partition(b";")
    size_text = size_text.strip(b" \t")
    if not is_hexadecimal(size_text.decode("latin-1"), 16):
        raise InvalidRequest("An aws-chunked chunk header is malformed.")
    size = int(size_text, 16)
    if not signed:
        return size, None  # extensions mean nothing without signatures
    name, _, signature = extension.strip().partition(b"=")
    if name != b"chunk-signature" or len(signature) != 64:
        raise InvalidRequest("An aws-chunked chunk header lacks its chunk-signature.")
    return size, signature.decode("ascii", "replace")


class _Decoder:
    """One body's decoding state: signature chain, running checksums, byte count."""

    def __init__(
        self,
        wire: _Wire,
        mode: str,
        auth: AuthContext | None,
        decoded_length: int | None,
        names: list[str],
    ) -> None:
        if mode not in MODES:
            raise InvalidRequest(f"Unsupported aws-chunked payload mode {mode!r}.")
        self.signed = mode != UNSIGNED_TRAILER
        if self.signed and (auth is None or auth.payload_hash != mode):
            raise InvalidRequest("A signed aws-chunked body needs a request signed for it.")
        self.wire, self.mode, self.auth = wire, mode, auth
        self.previous = auth.signature if auth is not None else ""
        self.decoded_length = decoded_length
        self.names = [n.lower() for n in names]
        if mode == SIGNED and self.names:
            raise InvalidRequest("Trailers need a *-TRAILER payload mode.")
        self.sums = {name: _trailer_checksum(name) for name in self.names}
        self.total = 0

    def _account(self, data: bytes) -> None:
        self.total += len(data)
        if self.decoded_length is not None and self.total > self.decoded_length:
            raise IncompleteBody("The decoded body is longer than x-amz-decoded-content-length.")
        for checksum in self.sums.values():
            checksum.update(data)

    def _verify_chunk(self, signature: str | None, data: bytes) -> None:
        if self.auth is None or signature is None:
            return
        expected = sign(self.auth.signing_key, chunk_string_to_sign(self.auth, self.previous, data))
        if not same_signature(expected, signature):
            raise SignatureDoesNotMatch()
        self.previous = expected

    async def _chunk(self, size: int, signature: str | None) -> AsyncGenerator[bytes, None]:
        if self.signed:
            if size > MAX_SIGNED_CHUNK:
                raise InvalidRequest("An aws-chunked chunk is larger than 16 MiB.")
            data = await self.wire.exactly(size)
            self._verify_chunk(signature, data)
            self._account(data)
            yield data
        else:
            if size > MAX_UNSIGNED_CHUNK:
                raise InvalidRequest("An aws-chunked chunk is larger than 5 GiB.")
            async for piece in self.wire.pieces(size):
                self._account(piece)
                yield piece
        if await self.wire.exactly(2) != b"\r\n":
            raise InvalidRequest("An aws-chunked chunk does not end with CRLF.")

    async def pieces(self, trailers_out: dict[str, str] | None) -> AsyncGenerator[bytes, None]:
        while True:
            size, signature = _parse_chunk_header(await self.wire.line(_MAX_LINE), self.signed)
            if size == 0:
                break
            async for piece in self._chunk(size, signature):
                yield piece
        self._verify_chunk(signature, b"")  # the terminating chunk is signed too
        trailers = await self._trailers()
        if not await self.wire.at_end():
            raise InvalidRequest("There is data after the end of the aws-chunked body.")
        if self.decoded_length is not None and self.total != self.decoded_length:
            raise IncompleteBody()
        for name, checksum in self.sums.items():
            check(
                checksum, decode_value(checksum.algorithm, trailers[name], where="trailing header")
            )
        if trailers_out is not None:
            trailers_out.update(trailers)

    async def _trailer_lines(self) -> list[bytes]:
        lines: list[bytes] = []
        while True:
            line = await self.wire.line(_MAX_TRAILERS)
            if line:
                lines.append(line)
                if sum(map(len, lines)) > _MAX_TRAILERS:
                    raise InvalidRequest("The aws-chunked trailers are too long.")
            # Some encoders put a blank line between the last chunk and its trailers.
            elif lines or not self.names or await self.wire.at_end():
                return lines

    async def _trailers(self) -> dict[str, str]:
        trailers: dict[str, str] = {}
        for line in await self._trailer_lines():
            name, sep, value = line.decode("latin-1").partition(":")
            name = name.strip().lower()
            if not sep or name in trailers:
                raise InvalidRequest("An aws-chunked trailer is malformed.")
            trailers[name] = value.strip()
        signature = trailers.pop(TRAILER_SIGNATURE, None)
        if trailers.keys() != set(self.names):
            raise InvalidRequest("The trailers sent differ from those x-amz-trailer announced.")
        if self.mode == SIGNED_TRAILER:
            assert self.auth is not None  # checked in __init__
            text = trailer_string_to_sign(self.auth, self.previous, trailers)
            expected = sign(self.auth.signing_key, text)
            if signature is None or not same_signature(expected, signature):
                raise SignatureDoesNotMatch()
        return trailers


def _trailer_checksum(name: str) -> Checksum:
    if not name.startswith(HEADER_PREFIX):
        raise InvalidRequest(f"The trailer {name!r} is not supported.")
    return Checksum(name)


async def decode_aws_chunked(
    source: AsyncIterator[bytes],
    *,
    mode: str,
    auth: AuthContext | None,
    decoded_length: int | None,
    trailer_names: list[str],
    trailers: dict[str, str] | None = None,
) -> AsyncIterator[bytes]:
    """The decoded payload of an aws-chunked body, verified as it goes.

    ``mode`` is the x-amz-content-sha256 value; signed modes need the ``auth`` that
    :func:`gateway.s3.sigv4.authenticate` returned. ``decoded_length`` is
    x-amz-decoded-content-length (None: not checked); ``trailer_names`` what x-amz-trailer
    announced (see :func:`announced_trailers`). Once everything has verified, ``trailers`` (if
    given) is filled with the trailer values, e.g. ``{"x-amz-checksum-crc32": "..."}``,
    before the final piece is yielded. Errors are raised during iteration."""
    decoder = _Decoder(_Wire(source), mode, auth, decoded_length, trailer_names)
    async for piece in hold_last(decoder.pieces(trailers)):
        yield piece
