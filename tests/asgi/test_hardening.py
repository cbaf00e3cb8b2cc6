"""Issue 11's hostile-input cases through the whole app in-process: a signed payload hash that
framing headers cannot bypass, numbers and echoed text read strictly (4xx, never a 500 or an
empty reply), and anonymous readers held to GET, HEAD and listing without response-* overrides.

Raw requests are signed by botocore's own signer and then altered the way an attacker on the
path (or a confused client) would alter them, and reach the app through the same bridge boto3 uses.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import boto3
import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSPreparedRequest, AWSRequest, AWSResponse
from botocore.config import Config
from botocore.credentials import Credentials
from harness.endpoints import ALICE
from inprocess import AsgiBridge

from cachetier.lake.memory import MemoryLake
from gateway.app import LakegateApp
from gateway.settings import Settings

ENDPOINT = "http://localhost:21400"  # never connected to: the bridge answers
PUBLIC = "public-data"
PRIVATE = "private-data"


@pytest.fixture(scope="module")
def bridge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AsgiBridge]:
    folder: Path = tmp_path_factory.mktemp("hardening")
    (folder / "tenants.toml").write_text(ALICE.to_toml())
    settings = Settings.load(
        _env_file=None,
        lake=f"dir:{folder / 'lake'}",  # replaced by the MemoryLake below
        tenants_file=folder / "tenants.toml",
        cache_dir=folder / "cache",
        anonymous_read_buckets=PUBLIC,
        access_log=False,
    )
    served = AsgiBridge(LakegateApp(settings, lake=MemoryLake()))
    served.start()
    yield served
    served.close()


@pytest.fixture(scope="module")
def s3(bridge: AsgiBridge) -> Iterator[Any]:
    client = boto3.client(
        "s3", endpoint_url=ENDPOINT, region_name="us-east-1",
        aws_access_key_id=ALICE.access_key, aws_secret_access_key=ALICE.secret_key,
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}),
    )
    client.meta.events.register_last("before-send.s3", bridge.send)
    for name in (PUBLIC, PRIVATE):
        client.create_bucket(Bucket=name)
    client.put_object(Bucket=PUBLIC, Key="page", Body=b"<b>old</b>", ContentType="text/plain")
    yield client
    client.close()


class _Signer(S3SigV4Auth):
    """botocore's S3 signer, with a payload hash of the test's choosing when it gives one."""

    def __init__(self, payload_hash: str | None) -> None:
        super().__init__(Credentials(ALICE.access_key, ALICE.secret_key), "s3", "us-east-1")
        self._payload_hash = payload_hash

    def payload(self, request: AWSRequest) -> str:
        return self._payload_hash or str(super().payload(request))


def signed(
    method: str, path: str, headers: dict[str, str], body: bytes = b"", *, payload_hash: str | None = None
) -> AWSPreparedRequest:
    """A request as botocore signs it (x-amz-content-sha256 the hash of ``body`` by default)."""
    request = AWSRequest(method, f"{ENDPOINT}{path}", headers=headers, data=body)
    _Signer(payload_hash).add_auth(request)
    return request.prepare()


def unsigned(method: str, path: str, headers: dict[str, str] | None = None) -> AWSPreparedRequest:
    return AWSPreparedRequest(method, f"{ENDPOINT}{path}", headers or {}, b"", True)


def answer(bridge: AsgiBridge, request: AWSPreparedRequest) -> tuple[int, bytes, Any]:
    response: AWSResponse = bridge.send(request)
    return response.status_code, response.content, response.headers


def chunked(data: bytes) -> bytes:
    """``data`` as an unsigned aws-chunked body, one chunk and the terminator."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n0\r\n\r\n"


# ---- item 3: one rule for the payload hash ----


def test_an_unsigned_aws_chunked_encoding_cannot_replace_a_signed_body(s3: Any, bridge: AsgiBridge) -> None:
    signed_body, other = b"what alice signed", b"<script>what was stored instead</script>"
    request = signed("PUT", f"/{PRIVATE}/swapped", {"x-amz-decoded-content-length": str(len(other))}, signed_body)
    assert request.headers["x-amz-content-sha256"] == hashlib.sha256(signed_body).hexdigest()
    request.headers["Content-Encoding"] = "aws-chunked"  # not signed
    request.body = chunked(other)
    request.headers["Content-Length"] = str(len(request.body))
    status, body, _ = answer(bridge, request)
    assert status == 400 and b"<Code>XAmzContentSHA256Mismatch</Code>" in body
    with pytest.raises(s3.exceptions.NoSuchKey):
        s3.get_object(Bucket=PRIVATE, Key="swapped")


def test_a_signed_digest_with_an_aws_chunked_encoding_reads_the_body_as_sent(s3: Any, bridge: AsgiBridge) -> None:
    """Content-Encoding does not frame the body: the bytes that hash to the signed digest are the object."""
    raw = chunked(b"abc")
    request = signed("PUT", f"/{PRIVATE}/plain", {"Content-Encoding": "aws-chunked"}, raw)
    status, _, _ = answer(bridge, request)
    assert status == 200
    stored = s3.get_object(Bucket=PRIVATE, Key="plain")
    assert stored["Body"].read() == raw and "ContentEncoding" not in stored


def test_boto3_streaming_uploads_still_work(s3: Any) -> None:
    """boto3's own aws-chunked uploads (STREAMING-UNSIGNED-PAYLOAD-TRAILER over a file object)."""
    s3.put_object(Bucket=PRIVATE, Key="streamed", Body=io.BytesIO(b"x" * 100_000))
    assert s3.get_object(Bucket=PRIVATE, Key="streamed")["Body"].read() == b"x" * 100_000


@pytest.mark.parametrize("header", ["x-amz-decoded-content-length", "x-amz-trailer"])
def test_streaming_framing_headers_must_be_signed(bridge: AsgiBridge, header: str) -> None:
    raw = chunked(b"abc")
    request = signed("PUT", f"/{PRIVATE}/framed", {"Content-Encoding": "aws-chunked"}, raw,
                     payload_hash="STREAMING-UNSIGNED-PAYLOAD-TRAILER")
    request.headers[header] = "3" if header == "x-amz-decoded-content-length" else "x-amz-checksum-crc32"
    status, body, _ = answer(bridge, request)
    assert status == 403 and b"<Code>AccessDenied</Code>" in body


# ---- item 5: numbers and echoed text parsed strictly ----


@pytest.mark.parametrize("header", ["If-Modified-Since", "If-Unmodified-Since"])
def test_a_conditional_date_with_a_huge_year_is_ignored(bridge: AsgiBridge, header: str) -> None:
    request = signed("GET", f"/{PUBLIC}/page", {header: "Mon, 01 Jan 99999999999999999999999 00:00:00 GMT"})
    assert answer(bridge, request)[:2] == (200, b"<b>old</b>")


def test_a_date_header_with_a_huge_year_is_access_denied_without_credentials_checked(bridge: AsgiBridge) -> None:
    request = signed("GET", f"/{PUBLIC}/page", {})
    del request.headers["X-Amz-Date"]
    request.headers["Date"] = "Mon, 01 Jan 99999999999999999999999 00:00:00 GMT"
    status, body, _ = answer(bridge, request)
    assert status == 403 and b"<Code>AccessDenied</Code>" in body


@pytest.mark.parametrize("expires", ["%C2%B2", "%D9%A1", "%2B60", "%2060", "1_000", "9" * 40, "-1"])
def test_presigned_expires_that_is_not_ascii_digits_is_a_400(s3: Any, bridge: AsgiBridge, expires: str) -> None:
    url = s3.generate_presigned_url("get_object", Params={"Bucket": PUBLIC, "Key": "page"}, ExpiresIn=60)
    assert "X-Amz-Expires=60" in url
    tampered = url.replace("X-Amz-Expires=60", f"X-Amz-Expires={expires}")
    status, body, _ = answer(bridge, AWSPreparedRequest("GET", tampered, {}, b"", True))
    assert status == 400 and b"AuthorizationQueryParametersError" in body


def test_presigned_date_in_non_ascii_digits_is_a_400(s3: Any, bridge: AsgiBridge) -> None:
    url = s3.generate_presigned_url("get_object", Params={"Bucket": PUBLIC, "Key": "page"}, ExpiresIn=60)
    arabic = "".join(chr(0x660 + int(c)) if c.isdigit() else c for c in "20260101T000000Z")
    start = url.index("X-Amz-Date=") + len("X-Amz-Date=")
    tampered = url[:start] + quote(arabic) + url[start + 16:]
    status, body, _ = answer(bridge, AWSPreparedRequest("GET", tampered, {}, b"", True))
    assert status == 400 and b"AuthorizationQueryParametersError" in body


@pytest.mark.parametrize("value", ["%2B5", "%205", "1_0", "%D9%A1", "%C2%B2", "1" * 30, "-1", "0x10"])
@pytest.mark.parametrize("param", ["max-keys", "max-uploads"])
def test_list_numbers_that_are_not_ascii_digits_are_invalid_argument(
    s3: Any, bridge: AsgiBridge, param: str, value: str
) -> None:
    query = f"{param}={value}" + ("&uploads" if param == "max-uploads" else "")
    status, body, _ = answer(bridge, signed("GET", f"/{PRIVATE}?{query}", {}))
    assert status == 400 and b"<Code>InvalidArgument</Code>" in body


@pytest.mark.parametrize("value", ["%2B1", "%D9%A1", "%C2%B2", "1" * 30])
def test_part_numbers_that_are_not_ascii_digits_are_invalid_argument(s3: Any, bridge: AsgiBridge, value: str) -> None:
    upload = s3.create_multipart_upload(Bucket=PRIVATE, Key="mp")["UploadId"]
    status, body, _ = answer(bridge, signed("PUT", f"/{PRIVATE}/mp?partNumber={value}&uploadId={upload}", {}, b"x"))
    assert status == 400 and b"<Code>InvalidArgument</Code>" in body
    status, body, _ = answer(bridge, signed("GET", f"/{PRIVATE}/mp?uploadId={upload}&part-number-marker={value}", {}))
    assert status == 400 and b"<Code>InvalidArgument</Code>" in body
    s3.abort_multipart_upload(Bucket=PRIVATE, Key="mp", UploadId=upload)


@pytest.mark.parametrize("number", ["+1", "١", "²", "1" * 30, "1_0"])
def test_complete_with_a_part_number_not_in_ascii_digits_is_malformed_xml(
    s3: Any, bridge: AsgiBridge, number: str
) -> None:
    upload = s3.create_multipart_upload(Bucket=PRIVATE, Key="mp")["UploadId"]
    etag = s3.upload_part(Bucket=PRIVATE, Key="mp", UploadId=upload, PartNumber=1, Body=b"x")["ETag"]
    part = f"<Part><PartNumber>{number}</PartNumber><ETag>{etag}</ETag></Part>"
    doc = f"<CompleteMultipartUpload>{part}</CompleteMultipartUpload>"
    status, body, _ = answer(bridge, signed("POST", f"/{PRIVATE}/mp?uploadId={upload}", {}, doc.encode()))
    assert status == 400 and b"<Code>MalformedXML</Code>" in body
    s3.abort_multipart_upload(Bucket=PRIVATE, Key="mp", UploadId=upload)


def test_an_upload_id_with_control_characters_is_no_such_upload(bridge: AsgiBridge) -> None:
    status, body, _ = answer(bridge, signed("GET", f"/{PRIVATE}/mp?uploadId=a%0D%0Ab", {}))
    assert status == 404 and b"<Code>NoSuchUpload</Code>" in body


@pytest.mark.parametrize("length", ["+3", " 3", "3_0", "١", "²", "9" * 30])
def test_a_content_length_that_is_not_ascii_digits_is_a_4xx(bridge: AsgiBridge, length: str) -> None:
    request = signed("PUT", f"/{PRIVATE}/cl", {}, b"abc")
    request.headers["Content-Length"] = length.encode().decode("latin-1")
    status, body, _ = answer(bridge, request)
    assert 400 <= status < 500 and b"<Code>" in body


@pytest.mark.parametrize("length", ["+3", "3_0", "0x3", "9" * 30])
def test_a_decoded_content_length_that_is_not_ascii_digits_is_invalid_argument(bridge: AsgiBridge, length: str) -> None:
    raw = chunked(b"abc")
    request = signed(
        "PUT", f"/{PRIVATE}/dcl",
        {"x-amz-decoded-content-length": length.encode().decode("latin-1"), "Content-Encoding": "aws-chunked"},
        raw, payload_hash="STREAMING-UNSIGNED-PAYLOAD-TRAILER",
    )
    status, body, _ = answer(bridge, request)
    assert status == 400 and b"<Code>InvalidArgument</Code>" in body


@pytest.mark.parametrize("rng", [
    pytest.param("bytes=١-٢", id="arabic-digits"),
    pytest.param("bytes=0-" + "9" * 5000, id="5000-digits"),  # past int()'s own limit: a ValueError
    pytest.param("bytes=-" + "9" * 30, id="30-digit-suffix"),
])  # fmt: skip
def test_a_range_with_non_ascii_or_huge_numbers_is_ignored(s3: Any, rng: str) -> None:
    """S3 serves the whole object for a Range header it cannot read; never a 500."""
    got = s3.get_object(Bucket=PUBLIC, Key="page", Range=rng)
    assert got["ResponseMetadata"]["HTTPStatusCode"] == 200 and got["Body"].read() == b"<b>old</b>"


@pytest.mark.parametrize("value", ["text%2Fhtml%0D%0AX-Evil%3A1", "a%0Ab", "a%00b", "a%7Fb"])
def test_a_response_override_with_control_characters_is_invalid_argument(bridge: AsgiBridge, value: str) -> None:
    for method in ("GET", "HEAD"):
        status, body, _ = answer(bridge, signed(method, f"/{PUBLIC}/page?response-content-type={value}", {}))
        assert status == 400
        if method == "GET":
            assert b"<Code>InvalidArgument</Code>" in body


def test_a_signed_response_override_is_honoured(s3: Any) -> None:
    got = s3.get_object(Bucket=PUBLIC, Key="page", ResponseContentType="text/html; charset=utf-8")
    assert got["ContentType"] == "text/html; charset=utf-8"


# ---- item 6: anonymous requests ----


def test_an_anonymous_read_of_a_public_bucket_is_served(bridge: AsgiBridge) -> None:
    assert answer(bridge, unsigned("GET", f"/{PUBLIC}/page"))[:2] == (200, b"<b>old</b>")
    assert answer(bridge, unsigned("HEAD", f"/{PUBLIC}/page"))[0] == 200
    assert answer(bridge, unsigned("GET", f"/{PUBLIC}?list-type=2"))[0] == 200


@pytest.mark.parametrize("param", ["response-content-type=text/html", "response-content-disposition=inline",
                                   "response-cache-control=no-store"])
def test_anonymous_requests_get_no_response_overrides(bridge: AsgiBridge, param: str) -> None:
    status, body, headers = answer(bridge, unsigned("GET", f"/{PUBLIC}/page?{param}"))
    assert status == 400 and b"<Code>InvalidRequest</Code>" in body
    assert headers.get("content-type") == "application/xml"
    assert answer(bridge, unsigned("HEAD", f"/{PUBLIC}/page?{param}"))[0] == 400


@pytest.mark.parametrize(("method", "path"), [
    ("PUT", f"/{PUBLIC}/page"), ("DELETE", f"/{PUBLIC}/page"), ("POST", f"/{PUBLIC}/page?uploads"),
    ("GET", f"/{PUBLIC}?uploads"), ("GET", f"/{PUBLIC}?location"), ("PUT", f"/{PUBLIC}/x?partNumber=1&uploadId=u"),
    ("POST", f"/{PUBLIC}?delete"), ("DELETE", f"/{PUBLIC}"), ("PUT", "/anonymous-new"), ("GET", "/"),
    ("GET", f"/{PRIVATE}/page"), ("GET", f"/{PRIVATE}"),
])  # fmt: skip
def test_anonymous_requests_beyond_reading_a_public_bucket_are_access_denied(
    s3: Any, bridge: AsgiBridge, method: str, path: str
) -> None:
    status, body, _ = answer(bridge, unsigned(method, path))
    assert status == 403 and b"<Code>AccessDenied</Code>" in body
    assert s3.get_object(Bucket=PUBLIC, Key="page")["Body"].read() == b"<b>old</b>"


HOSTILE = ["%2B1", "%201", "1_0", "%D9%A1", "%C2%B2", "%EF%BC%91", "9" * 30, "9" * 5000, "-0", "0x1", "%00", "%0D%0A"]


@pytest.mark.parametrize("value", HOSTILE)
@pytest.mark.parametrize("template", [
    "GET /{b}?max-keys={v}", "GET /{b}?list-type=2&max-keys={v}", "GET /{b}?uploads&max-uploads={v}",
    "GET /{b}/k?uploadId={v}", "GET /{b}/k?uploadId=u&max-parts={v}", "GET /{b}/k?uploadId=u&part-number-marker={v}",
    "PUT /{b}/k?uploadId=u&partNumber={v}", "GET /{b}/page?response-expires={v}",
    "DELETE /{b}/k?uploadId={v}",
])  # fmt: skip
def test_no_hostile_number_in_a_query_is_a_5xx(bridge: AsgiBridge, template: str, value: str) -> None:
    method, path = template.format(b=PUBLIC, v=value).split(" ")
    status, body, _ = answer(bridge, signed(method, path, {}, b"x" if method == "PUT" else b""))
    assert 200 <= status < 500, body
