"""S3 "flexible checksums" and the verifying stream for plain (non-chunked) request bodies.

Values travel as base64 of the big-endian digest, exactly as S3 and the SDKs send them in
``x-amz-checksum-<algorithm>`` headers or aws-chunked trailers. The algorithm table is data
(:data:`ALGORITHMS`); adding one is one row.

Every verifying stream here holds back the last piece of the body until all checks have
passed (:func:`hold_last`), so a consumer that streams to a lake never delivers the final
byte of a corrupt upload: the lake sees a short body and aborts it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import zlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from awscrt import checksums as crt

from cachetier.errors import BadDigest, IncompleteBody, InvalidDigest, InvalidRequest
from gateway.s3.errors import XAmzContentSHA256Mismatch

HEADER_PREFIX = "x-amz-checksum-"
# Headers that share the prefix but carry no checksum value.
_NOT_CHECKSUMS = frozenset({"algorithm", "type", "mode"})
_HEX_SHA256 = re.compile(r"[0-9a-fA-F]{64}")


class _Digest(Protocol):
    def update(self, data: bytes, /) -> None: ...
    def digest(self) -> bytes: ...


class _Crc:
    """An incremental CRC over a function ``f(data, previous) -> crc``."""

    def __init__(self, function: Callable[[bytes, int], int], width: int) -> None:
        self._function = function
        self._width = width
        self._value = 0

    def update(self, data: bytes, /) -> None:
        self._value = self._function(data, self._value)

    def digest(self) -> bytes:
        return self._value.to_bytes(self._width, "big")


class _XXHash:
    def __init__(self, make: Callable[[], crt.XXHash]) -> None:
        self._hash = make()

    def update(self, data: bytes, /) -> None:
        self._hash.update(data)

    def digest(self) -> bytes:
        return bytes(self._hash.finalize())


@dataclass(frozen=True)
class Algorithm:
    name: str  # as in the header name: "crc32"
    label: str  # as S3 names it in messages: "CRC32"
    size: int  # digest length in bytes
    new: Callable[[], _Digest]


ALGORITHMS: dict[str, Algorithm] = {
    a.name: a
    for a in (
        Algorithm("crc32", "CRC32", 4, lambda: _Crc(zlib.crc32, 4)),
        Algorithm("crc32c", "CRC32C", 4, lambda: _Crc(crt.crc32c, 4)),
        Algorithm("crc64nvme", "CRC64NVME", 8, lambda: _Crc(crt.crc64nvme, 8)),
        Algorithm("sha1", "SHA1", 20, hashlib.sha1),
        Algorithm("sha256", "SHA256", 32, hashlib.sha256),
        # Newer SDKs (botocore >= 1.38) offer these too; cheap to accept as data.
        Algorithm("sha512", "SHA512", 64, hashlib.sha512),
        Algorithm("xxhash64", "XXHASH64", 8, lambda: _XXHash(crt.XXHash.new_xxhash64)),
        Algorithm("xxhash3", "XXHASH3", 8, lambda: _XXHash(crt.XXHash.new_xxhash3_64)),
        Algorithm("xxhash128", "XXHASH128", 16, lambda: _XXHash(crt.XXHash.new_xxhash3_128)),
    )
}


def algorithm(name: str) -> Algorithm:
    """The algorithm for ``crc32`` or ``x-amz-checksum-crc32`` (any case); unknown ones are
    the client's error, as S3 answers."""
    key = name.strip().lower().removeprefix(HEADER_PREFIX)
    found = ALGORITHMS.get(key)
    if found is None:
        raise InvalidRequest(f"The checksum algorithm {name!r} is not supported.")
    return found


class Checksum:
    """An incremental checksum: ``update(bytes)`` then ``b64digest()``."""

    def __init__(self, name: str) -> None:
        self.algorithm = algorithm(name)
        self._digest = self.algorithm.new()

    def update(self, data: bytes) -> None:
        self._digest.update(data)

    def digest(self) -> bytes:
        return self._digest.digest()

    def b64digest(self) -> str:
        return base64.b64encode(self.digest()).decode("ascii")


def decode_value(alg: Algorithm, value: str, *, where: str = "header") -> bytes:
    """The raw digest a client sent; malformed values are InvalidRequest as in S3."""
    try:
        raw = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != alg.size:
        raise InvalidRequest(f"Value for {HEADER_PREFIX}{alg.name} {where} is invalid.")
    return raw


def check(checksum: Checksum, expected: bytes) -> None:
    """Raise BadDigest (S3's code and wording) unless ``checksum`` matches ``expected``."""
    if not hmac.compare_digest(checksum.digest(), expected):
        label = checksum.algorithm.label
        raise BadDigest(f"The {label} you specified did not match the calculated checksum.")


def checksums_from_headers(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """``{algorithm: base64 value}`` from ``x-amz-checksum-<alg>`` request headers, leaving
    out the look-alikes (``-algorithm``, ``-type``, ``-mode``) that carry no value."""
    found: dict[str, str] = {}
    for name, value in headers:
        lower = name.lower()
        if lower.startswith(HEADER_PREFIX):
            key = lower[len(HEADER_PREFIX) :]
            if key not in _NOT_CHECKSUMS:
                found[key] = value
    return found


async def hold_last(pieces: AsyncGenerator[bytes, None]) -> AsyncGenerator[bytes, None]:
    """Yield ``pieces`` one behind: the last one only once ``pieces`` has finished, which
    is after all of its end-of-body checks have passed."""
    pending: bytes | None = None
    try:
        async for piece in pieces:
            if not piece:
                continue
            if pending is not None:
                yield pending
            pending = piece
    finally:
        await pieces.aclose()
    if pending is not None:
        yield pending


@dataclass
class _Expected:
    md5: bytes | None
    sha256: bytes | None
    sums: list[tuple[Checksum, bytes]]

    @classmethod
    def parse(
        cls, content_md5: str | None, sha256_hex: str | None, checksums: dict[str, str]
    ) -> _Expected:
        md5 = None
        if content_md5 is not None:
            try:
                md5 = base64.b64decode(content_md5.strip(), validate=True)
            except (binascii.Error, ValueError):
                md5 = b""
            if len(md5) != 16:
                raise InvalidDigest()
        # Only a hex digest is a signed payload hash; UNSIGNED-PAYLOAD and friends are not.
        sha = (
            bytes.fromhex(sha256_hex) if sha256_hex and _HEX_SHA256.fullmatch(sha256_hex) else None
        )
        sums = []
        for name, value in checksums.items():
            alg = algorithm(name)
            sums.append((Checksum(alg.name), decode_value(alg, value)))
        return cls(md5, sha, sums)


async def _checked(
    source: AsyncIterator[bytes], content_length: int | None, expected: _Expected
) -> AsyncGenerator[bytes, None]:
    md5 = hashlib.md5(usedforsecurity=False) if expected.md5 is not None else None
    sha = hashlib.sha256() if expected.sha256 is not None else None
    total = 0
    async for piece in source:
        total += len(piece)
        if content_length is not None and total > content_length:
            raise InvalidRequest("The request body is longer than its Content-Length.")
        for digest in (md5, sha):
            if digest is not None:
                digest.update(piece)
        for checksum, _ in expected.sums:
            checksum.update(piece)
        yield piece
    if content_length is not None and total < content_length:
        raise IncompleteBody()
    if md5 is not None and not hmac.compare_digest(md5.digest(), expected.md5 or b""):
        raise BadDigest()
    if sha is not None and not hmac.compare_digest(sha.digest(), expected.sha256 or b""):
        raise XAmzContentSHA256Mismatch()
    for checksum, value in expected.sums:
        check(checksum, value)


async def verified(
    source: AsyncIterator[bytes],
    *,
    content_length: int | None,
    content_md5: str | None,
    sha256_hex: str | None,
    checksums: dict[str, str],
) -> AsyncIterator[bytes]:
    """``source`` passed through unchanged, checked against Content-Length, Content-MD5, the
    signed payload hash (when ``sha256_hex`` is a hex digest) and each ``x-amz-checksum-*``
    value (``checksums``: algorithm or header name -> base64). The last piece is yielded
    only after every check has passed; errors are raised during iteration."""
    expected = _Expected.parse(content_md5, sha256_hex, checksums)
    async for piece in hold_last(_checked(source, content_length, expected)):
        yield piece
