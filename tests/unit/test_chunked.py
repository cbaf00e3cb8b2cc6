"""aws-chunked decoding: AWS's documented multi-chunk example, signed and unsigned trailers,
botocore's own encoder, and the rule that a corrupt body never yields its last byte."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import io
import itertools
import zlib
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime

import pytest
from botocore.httpchecksum import _CHECKSUM_CLS, AwsChunkedWrapper
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.s3.chunked import (
    SIGNED,
    SIGNED_TRAILER,
    UNSIGNED_TRAILER,
    decode_aws_chunked,
    announced_trailers,
)
from cachetier.errors import BadDigest, IncompleteBody, InvalidRequest, S3Error
from gateway.s3.errors import SignatureDoesNotMatch
from gateway.s3.sigv4 import AuthContext, SignedRequest, authenticate, signing_key

from captured import authenticate_sent, boto3_request

# ---- AWS docs: "Signature Calculation: Transferring Payload in Multiple Chunks" ----

AK = "AKIAIOSFODNN7EXAMPLE"
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
SEED = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"
CHUNK_SIGNATURES = (
    "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
    "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
    "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9",
)
SIGNED_HEADERS = (
    "content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;"
    "x-amz-decoded-content-length;x-amz-storage-class"
)
DOC_REQUEST = SignedRequest(
    "PUT",
    b"/examplebucket/chunkObject.txt",
    b"",
    [
        ("host", "s3.amazonaws.com"),
        ("x-amz-date", "20130524T000000Z"),
        ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
        (
            "authorization",
            f"AWS4-HMAC-SHA256 Credential={AK}/20130524/us-east-1/s3/aws4_request,"
            f"SignedHeaders={SIGNED_HEADERS},Signature={SEED}",
        ),
        ("x-amz-content-sha256", SIGNED),
        ("content-encoding", "aws-chunked"),
        ("x-amz-decoded-content-length", "66560"),
        ("content-length", "66824"),
    ],
)
DOC_PAYLOAD = b"a" * 66560


def doc_wire(signatures: tuple[str, ...] = CHUNK_SIGNATURES) -> bytes:
    first, second, final = signatures
    return (
        f"10000;chunk-signature={first}\r\n".encode() + b"a" * 65536 + b"\r\n"
        + f"400;chunk-signature={second}\r\n".encode() + b"a" * 1024 + b"\r\n"
        + f"0;chunk-signature={final}\r\n\r\n".encode()
    )  # fmt: skip


def doc_auth() -> AuthContext:
    auth = authenticate(DOC_REQUEST, {AK: SECRET}.get, datetime(2013, 5, 24, tzinfo=UTC))
    assert auth is not None and auth.signature == SEED
    return auth


# ---- helpers ----


async def pieces_of(data: bytes, cuts: list[int]) -> AsyncIterator[bytes]:
    edges = [0, *sorted({c % (len(data) + 1) for c in cuts}), len(data)]
    for start, end in itertools.pairwise(edges):
        yield data[start:end]


def decode(
    wire: bytes,
    *,
    mode: str,
    auth: AuthContext | None,
    length: int | None,
    names: list[str] = [],  # noqa: B006 - never mutated
    cuts: list[int] | None = None,
    trailers: dict[str, str] | None = None,
) -> tuple[list[bytes], S3Error | None]:
    """What a consumer received, and the error that ended the stream (if any)."""
    got: list[bytes] = []
    step = list(range(0, len(wire), 4096)) if cuts is None else cuts

    async def run() -> None:
        source = pieces_of(wire, step)
        async for piece in decode_aws_chunked(
            source,
            mode=mode,
            auth=auth,
            decoded_length=length,
            trailer_names=names,
            trailers=trailers,
        ):
            got.append(piece)

    try:
        asyncio.run(run())
    except S3Error as exc:
        return got, exc
    return got, None


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_aws_documented_example() -> None:
    wire = doc_wire()
    assert len(wire) == 66824  # the example's Content-Length
    got, error = decode(wire, mode=SIGNED, auth=doc_auth(), length=66560)
    assert error is None and b"".join(got) == DOC_PAYLOAD


@pytest.mark.parametrize("bad", [0, 1, 2])
def test_corrupt_chunk_signature_withholds_the_last_piece(bad: int) -> None:
    signatures = list(CHUNK_SIGNATURES)
    signatures[bad] = signatures[bad][::-1]
    got, error = decode(doc_wire(tuple(signatures)), mode=SIGNED, auth=doc_auth(), length=66560)
    assert isinstance(error, SignatureDoesNotMatch)
    assert sum(map(len, got)) < len(DOC_PAYLOAD)
    assert sum(map(len, got)) == (65536 if bad == 2 else 0)  # only verified, non-final data


# ---- signed and unsigned trailers, built by an encoder written from the spec ----

TRAILER_AUTH = AuthContext(
    access_key=AK,
    signing_key=signing_key(SECRET, "20130524", "us-east-1", "s3"),
    scope="20130524/us-east-1/s3/aws4_request",
    amz_date="20130524T000000Z",
    signature="106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e",
    payload_hash=SIGNED_TRAILER,
    presigned=False,
)


def crc32(data: bytes) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def encode(payload: bytes, size: int, mode: str, trailers: dict[str, str] | None = None) -> bytes:
    """An aws-chunked body as the AWS docs describe it."""
    key, previous, out = TRAILER_AUTH.signing_key, TRAILER_AUTH.signature, bytearray()
    for chunk in [payload[i : i + size] for i in range(0, len(payload), size)] + [b""]:
        if mode == UNSIGNED_TRAILER:
            out += f"{len(chunk):x}\r\n".encode()
        else:
            text = "\n".join(
                (
                    "AWS4-HMAC-SHA256-PAYLOAD",
                    TRAILER_AUTH.amz_date,
                    TRAILER_AUTH.scope,
                    previous,
                    sha(b""),
                    sha(chunk),
                )
            )
            previous = hmac.new(key, text.encode(), hashlib.sha256).hexdigest()
            out += f"{len(chunk):x};chunk-signature={previous}\r\n".encode()
        out += chunk + b"\r\n" if chunk else b""
    for name, value in (trailers or {}).items():
        out += f"{name}:{value}\r\n".encode()
    if mode == SIGNED_TRAILER:
        canonical = "".join(f"{n}:{v}\n" for n, v in sorted((trailers or {}).items()))
        text = "\n".join(
            (
                "AWS4-HMAC-SHA256-TRAILER",
                TRAILER_AUTH.amz_date,
                TRAILER_AUTH.scope,
                previous,
                sha(canonical.encode()),
            )
        )
        signature = hmac.new(key, text.encode(), hashlib.sha256).hexdigest()
        out += f"x-amz-trailer-signature:{signature}\r\n".encode()
    return bytes(out + b"\r\n")


PAYLOAD = bytes(range(256)) * 40 + b"tail"
CRC_NAME = "x-amz-checksum-crc32"


@pytest.mark.parametrize("mode", [SIGNED_TRAILER, UNSIGNED_TRAILER])
def test_trailer_modes_verify_and_expose_the_checksum(mode: str) -> None:
    trailers: dict[str, str] = {}
    wire = encode(PAYLOAD, 1000, mode, {CRC_NAME: crc32(PAYLOAD)})
    auth = TRAILER_AUTH if mode == SIGNED_TRAILER else None
    got, error = decode(
        wire,
        mode=mode,
        auth=auth,
        length=len(PAYLOAD),
        names=[CRC_NAME],
        trailers=trailers,
        cuts=[7, 1500, 5000],
    )
    assert error is None and b"".join(got) == PAYLOAD
    assert trailers == {CRC_NAME: crc32(PAYLOAD)}


def test_signed_payload_without_trailers() -> None:
    auth = AuthContext(**{**TRAILER_AUTH.__dict__, "payload_hash": SIGNED})
    got, error = decode(encode(PAYLOAD, 4096, SIGNED), mode=SIGNED, auth=auth, length=len(PAYLOAD))
    assert error is None and b"".join(got) == PAYLOAD


@pytest.mark.parametrize("mode", [SIGNED_TRAILER, UNSIGNED_TRAILER])
@pytest.mark.parametrize(
    ("trailers", "names", "error", "message"),
    [
        ({CRC_NAME: crc32(b"other")}, [CRC_NAME], BadDigest, "The CRC32 you specified did not match the calculated checksum."),
        ({CRC_NAME: "not base64!"}, [CRC_NAME], InvalidRequest, "trailing header is invalid"),
        ({}, [CRC_NAME], InvalidRequest, "differ"),
        ({CRC_NAME: crc32(PAYLOAD)}, [], InvalidRequest, "differ"),
        ({"x-amz-checksum-md4": "AAAA"}, ["x-amz-checksum-md4"], InvalidRequest, "not supported"),
        ({"x-amz-meta-a": "b"}, ["x-amz-meta-a"], InvalidRequest, "not supported"),
    ],
)  # fmt: skip
def test_trailer_errors(
    mode: str, trailers: dict[str, str], names: list[str], error: type[S3Error], message: str
) -> None:
    auth = TRAILER_AUTH if mode == SIGNED_TRAILER else None
    got, raised = decode(
        encode(PAYLOAD, 1000, mode, trailers),
        mode=mode,
        auth=auth,
        length=len(PAYLOAD),
        names=names,
    )
    assert isinstance(raised, error) and message in raised.message
    assert sum(map(len, got)) < len(PAYLOAD)


def test_tampered_signed_trailer() -> None:
    wire = encode(PAYLOAD, 1000, SIGNED_TRAILER, {CRC_NAME: crc32(PAYLOAD)})
    forged = wire.replace(crc32(PAYLOAD).encode(), crc32(b"x").encode())
    got, error = decode(
        forged, mode=SIGNED_TRAILER, auth=TRAILER_AUTH, length=len(PAYLOAD), names=[CRC_NAME]
    )
    assert isinstance(error, (SignatureDoesNotMatch, BadDigest)) and sum(map(len, got)) < len(
        PAYLOAD
    )
    unsigned = wire.split(b"x-amz-trailer-signature")[0] + b"\r\n"
    got, error = decode(
        unsigned, mode=SIGNED_TRAILER, auth=TRAILER_AUTH, length=len(PAYLOAD), names=[CRC_NAME]
    )
    assert isinstance(error, SignatureDoesNotMatch) and sum(map(len, got)) < len(PAYLOAD)


@pytest.mark.parametrize("mode", [SIGNED_TRAILER, UNSIGNED_TRAILER])
def test_every_truncation_is_incomplete_and_withheld(mode: str) -> None:
    payload = PAYLOAD[:300]
    wire = encode(payload, 100, mode, {CRC_NAME: crc32(payload)})
    auth = TRAILER_AUTH if mode == SIGNED_TRAILER else None
    for end in range(len(wire)):
        got, error = decode(
            wire[:end], mode=mode, auth=auth, length=len(payload), names=[CRC_NAME], cuts=[end // 2]
        )
        assert isinstance(error, IncompleteBody), (end, error)
        assert sum(map(len, got)) < len(payload), end


@pytest.mark.parametrize("length", [len(PAYLOAD) - 1, len(PAYLOAD) + 1, 0])
def test_decoded_length_mismatch(length: int) -> None:
    wire = encode(PAYLOAD, 1000, UNSIGNED_TRAILER, {CRC_NAME: crc32(PAYLOAD)})
    got, error = decode(wire, mode=UNSIGNED_TRAILER, auth=None, length=length, names=[CRC_NAME])
    assert isinstance(error, IncompleteBody) and sum(map(len, got)) < len(PAYLOAD)


def wire_with(mode: str, edit: Callable[[bytes], bytes]) -> bytes:
    return edit(encode(PAYLOAD[:50], 20, mode, {CRC_NAME: crc32(PAYLOAD[:50])}))


@pytest.mark.parametrize(
    ("mode", "edit"),
    [
        (SIGNED_TRAILER, lambda w: b"zz" + w[2:]),  # non-hex size
        (SIGNED_TRAILER, lambda w: w.replace(b";chunk-signature=", b";chunk-sig=", 1)),
        (SIGNED_TRAILER, lambda w: b"1000001;chunk-signature=" + b"0" * 64 + b"\r\n"),  # > 16 MiB
        (
            UNSIGNED_TRAILER,
            lambda w: w.replace(b"\r\n14\r\n", b"\r\r14\r\n", 1),
        ),  # chunk without CRLF
        (UNSIGNED_TRAILER, lambda w: w + b"junk"),
        (UNSIGNED_TRAILER, lambda w: b"14" + b" " * 5000),  # a line that never ends
        (
            UNSIGNED_TRAILER,
            lambda w: w.replace(b"x-amz-checksum-crc32:", b"x-amz-checksum-crc32=", 1),
        ),
    ],
)
def test_malformed_framing(mode: str, edit: Callable[[bytes], bytes]) -> None:
    auth = TRAILER_AUTH if mode == SIGNED_TRAILER else None
    got, error = decode(wire_with(mode, edit), mode=mode, auth=auth, length=50, names=[CRC_NAME])
    assert isinstance(error, InvalidRequest), error
    assert sum(map(len, got)) < 50


def test_mode_and_auth_must_agree() -> None:
    wire = encode(PAYLOAD, 1000, SIGNED)
    for mode, auth in [(SIGNED, None), ("UNSIGNED-PAYLOAD", None), (SIGNED, TRAILER_AUTH)]:
        got, error = decode(wire, mode=mode, auth=auth, length=None)
        assert isinstance(error, InvalidRequest) and not got


def test_blank_line_before_trailers_is_tolerated() -> None:
    wire = f"4\r\nabcd\r\n0\r\n\r\n{CRC_NAME}:{crc32(b'abcd')}\r\n\r\n".encode()
    got, error = decode(wire, mode=UNSIGNED_TRAILER, auth=None, length=4, names=[CRC_NAME])
    assert error is None and b"".join(got) == b"abcd"


def test_unsigned_chunks_stream_without_gathering() -> None:
    payload = b"z" * (1 << 20)
    wire = encode(payload, len(payload), UNSIGNED_TRAILER, {CRC_NAME: crc32(payload)})
    cuts = list(range(0, len(wire), 65536))
    got, error = decode(
        wire, mode=UNSIGNED_TRAILER, auth=None, length=len(payload), names=[CRC_NAME], cuts=cuts
    )
    assert error is None and b"".join(got) == payload
    assert max(map(len, got)) <= 65536  # one 1 MiB chunk, never held whole


@settings(max_examples=150, deadline=None)
@given(
    payload=st.binary(max_size=400),
    size=st.integers(1, 90),
    mode=st.sampled_from([SIGNED, SIGNED_TRAILER, UNSIGNED_TRAILER]),
    cuts=st.lists(st.integers(0, 10_000), max_size=30),
)
def test_any_fragmentation_decodes_identically(
    payload: bytes, size: int, mode: str, cuts: list[int]
) -> None:
    names = [] if mode == SIGNED else [CRC_NAME]
    trailers = {CRC_NAME: crc32(payload)} if names else None
    auth = (
        AuthContext(**{**TRAILER_AUTH.__dict__, "payload_hash": mode})
        if mode != UNSIGNED_TRAILER
        else None
    )
    seen: dict[str, str] = {}
    wire = encode(payload, size, mode, trailers)
    got, error = decode(
        wire, mode=mode, auth=auth, length=len(payload), names=names, cuts=cuts, trailers=seen
    )
    assert error is None and b"".join(got) == payload
    assert seen == (trailers or {})


# ---- botocore's own encoder, as boto3 uses it for STREAMING-UNSIGNED-PAYLOAD-TRAILER ----


@pytest.mark.parametrize("algorithm", ["crc32", "crc32c", "crc64nvme", "sha1", "sha256"])
def test_botocore_aws_chunked_wrapper(algorithm: str) -> None:
    name = f"x-amz-checksum-{algorithm}"
    wrapper = AwsChunkedWrapper(
        io.BytesIO(PAYLOAD),
        checksum_cls=_CHECKSUM_CLS[algorithm],
        checksum_name=name,
        chunk_size=1000,
    )
    wire = wrapper.read()
    trailers: dict[str, str] = {}
    got, error = decode(
        wire, mode=UNSIGNED_TRAILER, auth=None, length=len(PAYLOAD), names=[name], trailers=trailers
    )
    assert error is None and b"".join(got) == PAYLOAD
    assert trailers[name] == _CHECKSUM_CLS[algorithm]().handle(PAYLOAD)


def test_boto3_put_object_end_to_end() -> None:
    """boto3 over https sends aws-chunked with a crc32 trailer; we verify its signature,
    then decode its body."""
    sent = boto3_request("https://gateway.example", "put_object", Bucket="bkt", Key="dir/a key+1", Body=io.BytesIO(PAYLOAD))
    auth, headers = authenticate_sent(sent, {"AK": "SK"})
    assert auth is not None and auth.payload_hash == UNSIGNED_TRAILER
    head = dict(headers)
    names = announced_trailers(head["x-amz-trailer"])
    trailers: dict[str, str] = {}
    got, error = decode(
        sent.body.read(),
        mode=auth.payload_hash,
        auth=auth,
        length=int(head["x-amz-decoded-content-length"]),
        names=names,
        trailers=trailers,
    )
    assert error is None and b"".join(got) == PAYLOAD
    assert trailers == {CRC_NAME: crc32(PAYLOAD)}
