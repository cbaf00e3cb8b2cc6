"""The lake's SigV4 signer (awscrt) against two references, for every request shape S3Lake
signs: botocore's signature of the same request at the same time must be equal, and
lakegate's own S3-side verifier (gateway/s3/sigv4.py, which checks as RGW does: from the
wire bytes, path and query decoded and re-encoded) must accept what went on the wire.
S3Lake presigns nothing, so there is no presigned shape to check."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import UTC, datetime

import httpx2
import pytest

from cachetier.errors import S3Error
from cachetier.lake import CopySource, ListQuery, ObjectAttributes, UploadsQuery
from cachetier.lake.ranges import ByteRange
from cachetier.lake.s3.client import S3Lake
from cachetier.lake.s3.config import S3LakeConfig
from cachetier.lake.s3.signing import EMPTY_SHA256, UNSIGNED_PAYLOAD, BotocoreSigner, CrtSigner
from gateway.s3 import sigv4
from gateway.s3.errors import SignatureDoesNotMatch

ACCESS_KEY = "AKIDEXAMPLE"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
REGION = "eu-west-3"
HOST = "lake.test:7480"
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
# Keys S3 allows that signing gets wrong most easily.
KEYS = ["plain.txt", "a b", "ü/ñ é", "a+b", "~tilde", "100%", "%41", "a=b&c", "./..", "x//y", "dir/../k"]


class Recording:
    """CrtSigner, noting what it was asked to sign."""

    def __init__(self) -> None:
        self.inner = CrtSigner(ACCESS_KEY, SECRET_KEY, REGION)
        self.calls: list[tuple[str, str, dict[str, str], str, datetime]] = []

    def sign(
        self, method: str, target: str, headers: Mapping[str, str], payload_hash: str, now: datetime
    ) -> dict[str, str]:
        self.calls.append((method, target, dict(headers), payload_hash, now))
        return self.inner.sign(method, target, headers, payload_hash, now)


def test_same_signature_as_botocore_for_plain_shapes() -> None:
    crt, boto = CrtSigner(ACCESS_KEY, SECRET_KEY, REGION), BotocoreSigner(ACCESS_KEY, SECRET_KEY, REGION)
    shapes = [
        ("GET", "/b/k", {"host": HOST}, UNSIGNED_PAYLOAD),
        ("HEAD", "/b/k", {"host": HOST, "x-amz-checksum-mode": "ENABLED"}, UNSIGNED_PAYLOAD),
        ("PUT", "/b/k", {"host": HOST, "content-length": "5"}, hashlib.sha256(b"hello").hexdigest()),
        ("PUT", "/b/k", {"host": HOST, "content-length": "0"}, EMPTY_SHA256),
        ("DELETE", "/b/k%20x", {"host": HOST}, UNSIGNED_PAYLOAD),
        ("POST", "/b/k?uploads=", {"host": HOST, "content-type": "a/b"}, UNSIGNED_PAYLOAD),
        ("GET", "/b/k", {"host": HOST, "x-amz-meta-a": "  two  spaces "}, UNSIGNED_PAYLOAD),
    ]
    for method, target, headers, payload in shapes:
        assert crt.sign(method, target, headers, payload, NOW) == boto.sign(method, target, headers, payload, NOW)


def test_the_one_known_difference_non_ascii_whitespace_in_a_value() -> None:
    # botocore collapses Unicode whitespace (str.split()) in header values; awscrt, like a
    # server canonicalising bytes, collapses only ASCII spaces and tabs. So a value holding
    # U+00A0 signs differently; awscrt's is the byte-wise one. ASCII whitespace agrees.
    crt, boto = CrtSigner(ACCESS_KEY, SECRET_KEY, REGION), BotocoreSigner(ACCESS_KEY, SECRET_KEY, REGION)
    for value, same in ((" a \t b ", True), ("a\u00a0b", False)):
        headers = {"host": HOST, "x-amz-meta-m": value}
        signed = crt.sign("GET", "/b/k", headers, UNSIGNED_PAYLOAD, NOW)
        assert (signed == boto.sign("GET", "/b/k", headers, UNSIGNED_PAYLOAD, NOW)) is same


def test_signing_headers_are_the_three_sigv4_adds() -> None:
    signed = CrtSigner(ACCESS_KEY, SECRET_KEY, REGION).sign("GET", "/b/k", {"host": HOST}, UNSIGNED_PAYLOAD, NOW)
    assert signed["x-amz-date"] == "20260102T030405Z"
    assert signed["x-amz-content-sha256"] == UNSIGNED_PAYLOAD
    assert signed["authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/20260102/{REGION}/s3/")


async def _every_shape(lake: S3Lake) -> None:
    """One call of each S3Lake method, with awkward keys and query values; the answers are
    not S3's (every call fails to parse them): only the signed requests matter."""
    # header values are latin-1 str of the wire bytes (the ASGI convention): UTF-8 "ü é"
    attrs = ObjectAttributes(content_type="text/plain", metadata={"name": "ü é".encode().decode("latin-1")})
    awkward = "p r+e%f~ü/"
    calls: list[Callable[[], Awaitable[object]]] = [
        lake.list_buckets,
        lambda: lake.create_bucket("b", "eu-west-3"),
        lambda: lake.head_bucket("b"),
        lambda: lake.bucket_location("b"),
        lambda: lake.delete_bucket("b"),
        lambda: lake.list_objects("b", ListQuery(prefix=awkward, delimiter="/", v2=True, start_after="a b")),
        lambda: lake.list_objects("b", ListQuery(prefix=awkward, marker="m+n%", v2=False)),
        lambda: lake.list_multipart_uploads("b", UploadsQuery(prefix=awkward, key_marker="k m")),
        lambda: lake.put_object("b", "k", _body(b"hello"), 5, attrs),
        lambda: lake.delete_objects("b", ["a b", "ü"]),
        lambda: lake.copy_object(CopySource("b", "s r+c"), "b", "k", attrs),
        lambda: lake.create_multipart_upload("b", "k", attrs),
        lambda: lake.upload_part("b", "k", "2~id+/=", 7, _body(b"part"), 4),
        lambda: lake.upload_part_copy(CopySource("b", "s", range=ByteRange(0, 9)), "b", "k", "id", 2),
        lambda: lake.list_parts("b", "k", "id/+=", part_number_marker=3),
        lambda: lake.complete_multipart_upload("b", "k", "id", [(1, '"e"')]),
        lambda: lake.abort_multipart_upload("b", "k", "id"),
    ]
    for key in KEYS:
        calls.append(lambda key=key: lake.get_object("b", key, ByteRange(0, 9)))  # type: ignore[misc]
        calls.append(lambda key=key: lake.head_object("b", key))  # type: ignore[misc]
        calls.append(lambda key=key: lake.delete_object("b", key))  # type: ignore[misc]
    for call in calls:
        with contextlib.suppress(S3Error):
            await call()
    await lake.aclose()


async def _body(data: bytes) -> AsyncIterator[bytes]:
    yield data


def _signed_by_s3lake() -> tuple[Recording, list[httpx2.Request]]:
    sent: list[httpx2.Request] = []

    async def handler(request: httpx2.Request) -> httpx2.Response:
        await request.aread()
        sent.append(request)
        return httpx2.Response(200, content=b"")

    config = S3LakeConfig(f"http://{HOST}", ACCESS_KEY, SECRET_KEY, REGION, retries=0)
    lake = S3Lake(config, transport=httpx2.MockTransport(handler), clock=NOW.timestamp)
    recording = Recording()
    lake._signer = recording  # the signer is S3Lake's one seam for this check
    asyncio.run(_every_shape(lake))
    return recording, sent


def test_every_s3lake_shape_is_signed_as_botocore_signs_it() -> None:
    recording, _sent = _signed_by_s3lake()
    boto = BotocoreSigner(ACCESS_KEY, SECRET_KEY, REGION)
    assert len(recording.calls) == 50
    for method, target, headers, payload, now in recording.calls:
        assert now == NOW
        expected = boto.sign(method, target, headers, payload, now)
        assert recording.inner.sign(method, target, headers, payload, now) == expected, (method, target)


def test_every_s3lake_request_passes_the_s3_side_verifier() -> None:
    _recording, sent = _signed_by_s3lake()
    methods = {request.method for request in sent}
    assert methods == {"GET", "HEAD", "PUT", "POST", "DELETE"}
    for request in sent:
        context = sigv4.authenticate(_as_received(request), {ACCESS_KEY: SECRET_KEY}.get, NOW)
        assert context is not None and context.access_key == ACCESS_KEY, request.url
        payload = context.payload_hash
        if payload != UNSIGNED_PAYLOAD:
            assert payload == hashlib.sha256(request.content).hexdigest()


def test_the_verifier_catches_a_changed_request() -> None:
    _recording, sent = _signed_by_s3lake()
    request = next(r for r in sent if r.method == "GET" and b"range" in dict(r.headers.raw))
    tampered = _as_received(request)
    tampered = sigv4.SignedRequest(tampered.method, tampered.raw_path + b"x", tampered.query_string, tampered.headers)
    with pytest.raises(SignatureDoesNotMatch):
        sigv4.authenticate(tampered, {ACCESS_KEY: SECRET_KEY}.get, NOW)


def _as_received(request: httpx2.Request) -> sigv4.SignedRequest:
    """The request as the gateway's ASGI front end hands it to the verifier."""
    raw_path, _, query = request.url.raw_path.partition(b"?")
    headers = [(name.decode("latin-1").lower(), value.decode("latin-1")) for name, value in request.headers.raw]
    return sigv4.SignedRequest(request.method, raw_path, query, headers)
