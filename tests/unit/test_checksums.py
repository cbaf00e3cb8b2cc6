"""Flexible checksums against known values and botocore's implementations, and the verifying
stream for plain bodies (its errors, and that a corrupt body never yields its last byte)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
from collections.abc import AsyncIterator
from typing import Any

import pytest
from botocore.httpchecksum import _CHECKSUM_CLS
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.s3.checksums import (
    ALGORITHMS,
    Checksum,
    checksums_from_headers,
    verified,
)
from cachetier.errors import BadDigest, IncompleteBody, InvalidDigest, InvalidRequest, S3Error
from gateway.s3.errors import XAmzContentSHA256Mismatch

from captured import authenticate_sent, boto3_request

CHECK = b"123456789"  # the customary CRC check input


def b64(value: int, width: int) -> str:
    return base64.b64encode(value.to_bytes(width, "big")).decode()


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("crc32", b64(0xCBF43926, 4)),
        ("crc32c", b64(0xE3069283, 4)),
        ("crc64nvme", b64(0xAE8B14860A799888, 8)),
        ("sha1", base64.b64encode(hashlib.sha1(CHECK).digest()).decode()),
        ("sha256", base64.b64encode(hashlib.sha256(CHECK).digest()).decode()),
    ],
)
def test_known_values(name: str, expected: str) -> None:
    checksum = Checksum(name)
    checksum.update(CHECK[:4])
    checksum.update(CHECK[4:])
    assert checksum.b64digest() == expected


@settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=3000), split=st.integers(0, 3000))
def test_every_algorithm_agrees_with_botocore(data: bytes, split: int) -> None:
    for name, algorithm in ALGORITHMS.items():
        ours = Checksum(f"x-amz-checksum-{name}")
        ours.update(data[:split])
        ours.update(data[split:])
        assert ours.b64digest() == _CHECKSUM_CLS[name]().handle(data), name
        assert len(ours.digest()) == algorithm.size


def test_unknown_algorithm() -> None:
    with pytest.raises(InvalidRequest):
        Checksum("md4")


def test_checksums_from_headers_skips_look_alikes() -> None:
    headers = [
        ("x-amz-checksum-crc32", "AAAAAA=="),
        ("X-Amz-Checksum-SHA256", "x"),
        ("x-amz-checksum-algorithm", "CRC32"),
        ("x-amz-checksum-type", "FULL_OBJECT"),
        ("x-amz-checksum-mode", "ENABLED"),
        ("x-amz-sdk-checksum-algorithm", "CRC32"),
    ]
    assert checksums_from_headers(headers) == {"crc32": "AAAAAA==", "sha256": "x"}


# ---- the verifying stream ----

BODY = bytes(range(256)) * 64
MD5 = base64.b64encode(hashlib.md5(BODY).digest()).decode()
SHA256 = hashlib.sha256(BODY).hexdigest()
CRC32 = Checksum("crc32")
CRC32.update(BODY)


async def pieces(data: bytes, size: int = 1000) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def run(data: bytes, **checks: Any) -> tuple[list[bytes], S3Error | None]:
    """What a consumer received, and the error that ended the stream (if any)."""
    options: dict[str, Any] = {
        "content_length": len(BODY),
        "content_md5": None,
        "sha256_hex": None,
        "checksums": {},
    }
    options.update(checks)
    got: list[bytes] = []

    async def consume() -> None:
        async for piece in verified(pieces(data), **options):
            got.append(piece)

    try:
        asyncio.run(consume())
    except S3Error as exc:
        return got, exc
    return got, None


def test_all_checks_pass() -> None:
    got, error = run(
        BODY,
        content_md5=MD5,
        sha256_hex=SHA256.upper(),
        checksums={
            "x-amz-checksum-crc32": CRC32.b64digest(),
            "sha1": base64.b64encode(hashlib.sha1(BODY).digest()).decode(),
        },
    )
    assert error is None and b"".join(got) == BODY


def test_non_hex_payload_hashes_are_not_checked() -> None:
    for value in ("UNSIGNED-PAYLOAD", None):
        got, error = run(BODY, sha256_hex=value)
        assert error is None and b"".join(got) == BODY


@pytest.mark.parametrize(
    ("data", "checks", "error", "message"),
    [
        (BODY[:-1], {}, IncompleteBody, None),
        (BODY + b"x", {}, InvalidRequest, "longer"),
        (BODY, {"content_md5": "not base64"}, InvalidDigest, None),
        (BODY, {"content_md5": base64.b64encode(b"short").decode()}, InvalidDigest, None),
        (BODY, {"content_md5": base64.b64encode(hashlib.md5(b"x").digest()).decode()}, BadDigest, "Content-MD5"),
        (BODY, {"sha256_hex": hashlib.sha256(b"x").hexdigest()}, XAmzContentSHA256Mismatch, None),
        (BODY, {"checksums": {"crc32": "AAAAAA=="}}, BadDigest, "The CRC32 you specified did not match the calculated checksum."),
        (BODY, {"checksums": {"sha256": base64.b64encode(bytes(32)).decode()}}, BadDigest, "The SHA256 you specified"),
        (BODY, {"checksums": {"crc32": "AAAA"}}, InvalidRequest, "Value for x-amz-checksum-crc32 header is invalid."),
        (BODY, {"checksums": {"md4": "AAAAAA=="}}, InvalidRequest, "not supported"),
    ],
)  # fmt: skip
def test_errors_withhold_the_last_piece(
    data: bytes, checks: dict[str, Any], error: type[S3Error], message: str | None
) -> None:
    got, raised = run(data, **checks)
    assert isinstance(raised, error), raised
    if message is not None:
        assert message in raised.message
    assert sum(map(len, got)) < len(BODY)  # a lake streaming this never gets the whole body


def test_unknown_length_is_not_counted() -> None:
    got, error = run(BODY + b"more", content_length=None)
    assert error is None and b"".join(got) == BODY + b"more"


def test_empty_body() -> None:
    got, error = run(b"", content_length=0, sha256_hex=hashlib.sha256(b"").hexdigest())
    assert error is None and got == []


def test_boto3_plain_put_end_to_end() -> None:
    """boto3 over plain http signs the payload hash and sends a crc32 header: both verify."""
    sent = boto3_request("http://gateway.example", "put_object", Bucket="bkt", Key="k", Body=io.BytesIO(BODY), ContentMD5=MD5)
    auth, headers = authenticate_sent(sent, {"AK": "SK"})
    assert auth is not None and auth.payload_hash == SHA256
    head = dict(headers)
    sums = checksums_from_headers(headers)
    assert sums  # boto3 >= 1.36 always sends one
    body = sent.body.read() if hasattr(sent.body, "read") else sent.body
    got, error = run(
        body,
        content_length=int(head["content-length"]),
        content_md5=head.get("content-md5"),
        sha256_hex=auth.payload_hash,
        checksums=sums,
    )
    assert error is None and b"".join(got) == BODY
