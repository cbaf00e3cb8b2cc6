"""SigV2 verification: the string to sign against the one botocore's HmacV1Auth and
HmacV1QueryAuth sign for many request shapes (path and virtual-host style, sub-resources,
metadata, awkward keys), and the errors of expired, tampered, foreign and malformed requests."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any
from urllib.parse import quote, urlsplit

import boto3
import botocore.auth
import pytest
from botocore.config import Config
from captured import AWKWARD_KEYS

from cachetier.errors import AccessDenied, InvalidArgument, InvalidRequest, S3Error
from gateway.s3 import sigv4
from gateway.s3.errors import InvalidAccessKeyId, RequestTimeTooSkewed, SignatureDoesNotMatch
from gateway.s3.sigv2 import (
    authenticate,
    canonical_amz_headers,
    canonical_subresources,
    carries_sigv2,
    sign,
    string_to_sign,
)
from gateway.s3.sigv4 import SignedRequest

SECRETS = {"AK": "SK", "AK2": "other-secret"}
ENDPOINT = "http://localhost:9000"


def secrets(access_key: str) -> str | None:
    return SECRETS.get(access_key)


class _Captured(Exception):
    pass


@pytest.fixture(scope="module")
def signed_strings() -> Iterator[list[str]]:
    """Every string botocore's HmacV1 signers sign while the module runs, last one last."""
    seen: list[str] = []
    original = botocore.auth.HmacV1Auth.sign_string

    def record(self: Any, string_to_sign: str) -> str:
        seen.append(string_to_sign)
        return original(self, string_to_sign)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(botocore.auth.HmacV1Auth, "sign_string", record)
        yield seen


def _client(style: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=ENDPOINT,
        region_name="us-east-1",
        aws_access_key_id="AK",
        aws_secret_access_key="SK",
        config=Config(signature_version="s3", s3={"addressing_style": style}, retries={"max_attempts": 1}),
    )


def from_prepared(request: Any) -> SignedRequest:
    """What the gateway receives: header values as their latin-1 wire characters."""
    url = urlsplit(request.url)
    headers = [
        (name.lower(), value.decode("latin-1") if isinstance(value, bytes) else value)
        for name, value in request.headers.items()
    ]
    headers.append(("host", url.netloc))
    return SignedRequest(request.method, url.path.encode(), url.query.encode(), headers)


def from_url(method: str, url: str, headers: list[tuple[str, str]] | None = None) -> SignedRequest:
    parts = urlsplit(url)
    return SignedRequest(method, parts.path.encode(), parts.query.encode(), [("host", parts.netloc), *(headers or [])])


@pytest.fixture(scope="module", params=["path", "virtual"])
def boto(request: pytest.FixtureRequest, signed_strings: list[str]) -> Callable[..., tuple[SignedRequest, str | None]]:
    """``boto(operation, **params)``: (the request boto3 would send, its virtual host's bucket)."""
    client = _client(request.param)
    box: dict[str, Any] = {}

    def capture(request: Any, **_: Any) -> None:
        box["request"] = request
        raise _Captured()

    client.meta.events.register("before-send.s3.*", capture)

    def call(operation: str, **params: Any) -> tuple[SignedRequest, str | None]:
        with pytest.raises(_Captured):
            getattr(client, operation)(**params)
        host = urlsplit(box["request"].url).hostname or ""
        return from_prepared(box["request"]), host.removesuffix(".localhost") if host != "localhost" else None

    return call



SHAPES: list[tuple[str, dict[str, Any]]] = [
    ("get_object", {"Key": "k"}),
    ("head_object", {"Key": "k"}),
    ("delete_object", {"Key": "k"}),
    ("put_object", {"Key": "k", "Body": b"data"}),
    ("put_object", {"Key": "k", "Body": b"x", "ContentType": "text/plain", "Metadata": {"a": "1", "b": "two  spaces"}}),
    ("put_object", {"Key": "k", "Body": b"x", "ContentMD5": base64.b64encode(hashlib.md5(b"x").digest()).decode()}),
    ("get_object", {"Key": "k", "VersionId": "v 1+2"}),
    ("get_object", {"Key": "k", "ResponseContentDisposition": 'attachment; filename="a b.txt"', "ResponseContentType": "x/y"}),
    ("get_object", {"Key": "k", "Range": "bytes=0-9", "IfMatch": '"e"'}),
    ("list_objects_v2", {"Prefix": "a b/", "Delimiter": "/"}),
    ("list_objects", {"Marker": "m"}),
    ("get_bucket_location", {}),
    ("head_bucket", {}),
    ("create_bucket", {}),
    ("delete_bucket", {}),
    ("create_multipart_upload", {"Key": "k", "Metadata": {"m": "v"}}),
    ("upload_part", {"Key": "k", "UploadId": "u/1=", "PartNumber": 3, "Body": b"p"}),
    ("list_parts", {"Key": "k", "UploadId": "u1"}),
    ("abort_multipart_upload", {"Key": "k", "UploadId": "u1"}),
    ("list_multipart_uploads", {}),
    ("copy_object", {"Key": "k", "CopySource": {"Bucket": "src", "Key": "a b"}}),
    ("delete_objects", {"Delete": {"Objects": [{"Key": "a"}]}}),
]


def _shape_id(shape: tuple[str, dict[str, Any]]) -> str:
    return shape[0] + ("-" + "-".join(sorted(shape[1])) if shape[1] else "")


def _assert_same_as_botocore(req: SignedRequest, host_bucket: str | None, botocore_signed: str) -> None:
    time = dict(req.headers)["date"]
    assert string_to_sign(req, time, host_bucket) == botocore_signed
    auth = authenticate(req, secrets, datetime.now(UTC), host_bucket=host_bucket)
    assert auth.access_key == "AK" and not auth.presigned and auth.payload_hash == "UNSIGNED-PAYLOAD"


@pytest.mark.parametrize("shape", SHAPES, ids=_shape_id)
def test_header_auth_signs_what_botocore_signs(boto: Any, signed_strings: list[str], shape: Any) -> None:
    operation, params = shape
    req, host_bucket = boto(operation, Bucket="bkt", **params)
    assert carries_sigv2(req)
    _assert_same_as_botocore(req, host_bucket, signed_strings[-1])


@pytest.mark.parametrize("key", AWKWARD_KEYS)
def test_header_auth_of_awkward_keys(boto: Any, signed_strings: list[str], key: str) -> None:
    for operation in ("get_object", "head_object", "delete_object"):
        req, host_bucket = boto(operation, Bucket="bkt", Key=key)
        _assert_same_as_botocore(req, host_bucket, signed_strings[-1])


@pytest.fixture(scope="module")
def presigner() -> Any:
    """boto3 on its defaults: its presigned URLs for s3 are SigV2."""
    return boto3.client(
        "s3", endpoint_url=ENDPOINT, region_name="us-east-1", aws_access_key_id="AK", aws_secret_access_key="SK"
    )


@pytest.mark.parametrize("key", AWKWARD_KEYS)
def test_presigned_url_of_awkward_keys(presigner: Any, signed_strings: list[str], key: str) -> None:
    now = datetime.now(UTC)
    params = {"Bucket": "bkt", "Key": key, "ResponseContentDisposition": f'attachment; filename="{key}"'}
    url = presigner.generate_presigned_url("get_object", Params=params, ExpiresIn=600)
    assert "AWSAccessKeyId=AK" in url and "X-Amz-" not in url  # the default is SigV2
    req = from_url("GET", url)
    expires = url.rsplit("Expires=", 1)[1]
    assert string_to_sign(req, expires, None, presigned=True) == signed_strings[-1]
    auth = authenticate(req, secrets, now)
    assert auth.presigned and auth.payload_hash == "UNSIGNED-PAYLOAD"
    with pytest.raises(AccessDenied, match="Request has expired"):
        authenticate(req, secrets, now + timedelta(seconds=601))
    with pytest.raises(SignatureDoesNotMatch):
        authenticate(from_url("PUT", url), secrets, now)
    tampered = url.replace("response-content-disposition=", "response-content-disposition=x")
    with pytest.raises(SignatureDoesNotMatch):
        authenticate(from_url("GET", tampered), secrets, now)


def test_presigned_put_signs_its_headers(presigner: Any) -> None:
    params = {"Bucket": "bkt", "Key": "k", "ContentType": "text/plain", "Metadata": {"owner": "me"}}
    url = presigner.generate_presigned_url("put_object", Params=params, ExpiresIn=60)
    assert "x-amz-meta-owner=me" in url  # botocore moves the signed x-amz-* header into the URL
    now = datetime.now(UTC)
    assert authenticate(from_url("PUT", url, [("content-type", "text/plain")]), secrets, now).presigned
    with pytest.raises(SignatureDoesNotMatch):
        authenticate(from_url("PUT", url, [("content-type", "text/html")]), secrets, now)
    with pytest.raises(SignatureDoesNotMatch):
        authenticate(from_url("PUT", url.replace("owner=me", "owner=you"), [("content-type", "text/plain")]), secrets, now)


def test_virtual_host_presigned_url() -> None:
    client = boto3.client(
        "s3", endpoint_url=ENDPOINT, region_name="us-east-1", aws_access_key_id="AK", aws_secret_access_key="SK",
        config=Config(s3={"addressing_style": "virtual"}),
    )  # fmt: skip
    url = client.generate_presigned_url("get_object", Params={"Bucket": "bkt", "Key": "a b"}, ExpiresIn=60)
    assert urlsplit(url).netloc == "bkt.localhost:9000"
    now = datetime.now(UTC)
    assert authenticate(from_url("GET", url), secrets, now, host_bucket="bkt").presigned
    with pytest.raises(SignatureDoesNotMatch):  # the bucket is part of what was signed
        authenticate(from_url("GET", url), secrets, now, host_bucket="other")


# ---- hand-built requests: the rules botocore does not exercise, and the errors ----

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
DATE = format_datetime(NOW, usegmt=True)


def signed(
    method: str = "GET",
    path: bytes = b"/bkt/k",
    query: bytes = b"",
    headers: tuple[tuple[str, str], ...] = (("date", DATE),),
    access_key: str = "AK",
    secret: str = "SK",
) -> SignedRequest:
    """A header-signed request, signed here as S3's developer guide says."""
    unsigned = SignedRequest(method, path, query, [("host", "localhost"), *headers])
    time = "" if "x-amz-date" in dict(headers) else dict(headers).get("date", "")
    signature = sign(secret, string_to_sign(unsigned, time, None).encode())
    return SignedRequest(method, path, query, [*unsigned.headers, ("authorization", f"AWS {access_key}:{signature}")])


def test_s3_documented_example() -> None:
    """The GET example of S3's REST authentication chapter (its published signature)."""
    req = SignedRequest(
        "GET",
        b"/photos/puppy.jpg",
        b"",
        [
            ("host", "awsexamplebucket1.us-west-1.s3.amazonaws.com"),
            ("date", "Tue, 27 Mar 2007 19:36:42 +0000"),
            ("authorization", "AWS AKIAIOSFODNN7EXAMPLE:qgk2+6Sv9/oM7G3qLEjTH1a1l1g="),
        ],
    )
    text = string_to_sign(req, "Tue, 27 Mar 2007 19:36:42 +0000", "awsexamplebucket1")
    assert text == "GET\n\n\nTue, 27 Mar 2007 19:36:42 +0000\n/awsexamplebucket1/photos/puppy.jpg"
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    assert sign(secret, text.encode()) == "qgk2+6Sv9/oM7G3qLEjTH1a1l1g="
    lookup = {"AKIAIOSFODNN7EXAMPLE": secret}.get
    when = datetime(2007, 3, 27, 19, 40, tzinfo=UTC)
    assert authenticate(req, lookup, when, host_bucket="awsexamplebucket1").access_key == "AKIAIOSFODNN7EXAMPLE"


def test_x_amz_date_empties_the_date_line() -> None:
    req = signed(headers=(("x-amz-date", DATE), ("date", "Mon, 01 Jan 2001 00:00:00 GMT")))
    assert string_to_sign(req, "", None).split("\n")[3] == ""
    assert authenticate(req, secrets, NOW).access_key == "AK"
    with pytest.raises(RequestTimeTooSkewed):  # x-amz-date, not Date, is the request's time
        authenticate(req, secrets, NOW + timedelta(minutes=16))


def test_clock_skew_of_header_requests() -> None:
    req = signed()
    assert authenticate(req, secrets, NOW + timedelta(minutes=14)) is not None
    assert authenticate(req, secrets, (NOW - timedelta(minutes=14)).replace(tzinfo=None)) is not None
    for off in (timedelta(minutes=16), -timedelta(minutes=16)):
        with pytest.raises(RequestTimeTooSkewed):
            authenticate(req, secrets, NOW + off)
    with pytest.raises(RequestTimeTooSkewed):
        authenticate(req, secrets, NOW + timedelta(minutes=2), max_skew=timedelta(minutes=1))


def test_canonical_amz_headers() -> None:
    headers = [("x-amz-meta-b", " 2 "), ("content-type", "x"), ("x-amz-meta-a", "1"), ("x-amz-meta-b", "3"),
               ("x-amz-meta-c", "a  b\r\n  c")]  # fmt: skip
    assert canonical_amz_headers(headers) == "x-amz-meta-a:1\nx-amz-meta-b:2,3\nx-amz-meta-c:a  b c\n"


def test_non_ascii_header_values() -> None:
    """botocore signs a header's characters as UTF-8 and sends them as latin-1; another client
    may send UTF-8 bytes and sign those bytes. Both verify (the gateway sees latin-1 characters)."""
    for wire in ("café", "日本".encode().decode("latin-1")):
        unsigned = SignedRequest("GET", b"/bkt/k", b"", [("host", "localhost"), ("date", DATE), ("x-amz-meta-n", wire)])
        text = string_to_sign(unsigned, DATE, None)
        for signed_bytes in (text.encode("utf-8"), text.encode("latin-1")):
            auth = ("authorization", f"AWS AK:{sign('SK', signed_bytes)}")
            assert authenticate(SignedRequest("GET", b"/bkt/k", b"", [*unsigned.headers, auth]), secrets, NOW)


def test_canonical_subresources() -> None:
    assert canonical_subresources(b"") == ""
    assert canonical_subresources(b"prefix=a&max-keys=2") == ""
    assert canonical_subresources(b"uploads") == "?uploads"
    assert canonical_subresources(b"uploads=") == "?uploads"  # as S3 reads it
    query = b"uploadId=a%2Fb&partNumber=2&x=1&response-content-type=a%20b"
    assert canonical_subresources(query) == "?partNumber=2&response-content-type=a b&uploadId=a/b"


def test_every_part_is_bound() -> None:
    req = signed("PUT", b"/bkt/a%20b", b"uploadId=u&partNumber=1", (("date", DATE), ("content-md5", "m"),
                 ("content-type", "t"), ("x-amz-meta-k", "v")))  # fmt: skip
    assert authenticate(req, secrets, NOW) is not None
    tampered = [
        SignedRequest("POST", req.raw_path, req.query_string, req.headers),
        SignedRequest(req.method, b"/bkt/a+b", req.query_string, req.headers),
        SignedRequest(req.method, b"/bkt/a b", req.query_string, req.headers),
        SignedRequest(req.method, req.raw_path, b"uploadId=u&partNumber=2", req.headers),
    ]
    for name, value in (("content-md5", "n"), ("content-type", "u"), ("x-amz-meta-k", "w"), ("x-amz-acl", "p")):
        tampered.append(SignedRequest(req.method, req.raw_path, req.query_string,
                                      [(n, v) for n, v in req.headers if n != name] + [(name, value)]))  # fmt: skip
    for bad in tampered:
        with pytest.raises(SignatureDoesNotMatch):
            authenticate(bad, secrets, NOW)
    # a query parameter S3 does not sign may change
    assert authenticate(SignedRequest(req.method, req.raw_path, req.query_string + b"&x=1", req.headers),
                        secrets, NOW) is not None  # fmt: skip


def test_unknown_and_foreign_keys() -> None:
    with pytest.raises(InvalidAccessKeyId):
        authenticate(signed(access_key="NOPE"), secrets, NOW)
    with pytest.raises(SignatureDoesNotMatch):  # another tenant's key, signed with my secret
        authenticate(signed(access_key="AK2"), secrets, NOW)
    assert authenticate(signed(access_key="AK2", secret="other-secret"), secrets, NOW).access_key == "AK2"


def _query(req: SignedRequest, query: bytes) -> SignedRequest:
    return SignedRequest(req.method, req.raw_path, query, req.headers)


def _presigned(expires: int, access_key: str = "AK", secret: str = "SK") -> SignedRequest:
    req = SignedRequest("GET", b"/bkt/k", b"", [("host", "localhost")])
    signature = sign(secret, string_to_sign(req, str(expires), None).encode())
    return _query(req, f"AWSAccessKeyId={access_key}&Expires={expires}&Signature={quote(signature, safe='')}".encode())


def test_presigned_expiry() -> None:
    expires = int(NOW.timestamp()) + 60
    req = _presigned(expires)
    assert authenticate(req, secrets, NOW).presigned
    assert authenticate(req, secrets, NOW + timedelta(seconds=60)).presigned
    with pytest.raises(AccessDenied, match="Request has expired"):
        authenticate(req, secrets, NOW + timedelta(seconds=61))
    with pytest.raises(SignatureDoesNotMatch):
        authenticate(_query(req, req.query_string.replace(b"Expires=", b"Expires=1")), secrets, NOW)
    with pytest.raises(InvalidAccessKeyId):
        authenticate(_presigned(expires, access_key="NOPE"), secrets, NOW)


QUERY_ERRORS: list[tuple[bytes, type[S3Error], str]] = [
    (b"AWSAccessKeyId=AK&Expires=9999999999", AccessDenied, "requires the Signature"),
    (b"Signature=x&Expires=9999999999", AccessDenied, "requires the Signature"),
    (b"AWSAccessKeyId=AK&Signature=x", AccessDenied, "requires the Signature"),
    (b"AWSAccessKeyId=AK&AWSAccessKeyId=AK&Signature=x&Expires=9999999999", AccessDenied, "requires"),
    (b"AWSAccessKeyId=AK&Signature=x&Expires=soon", AccessDenied, "Invalid date"),
    (b"AWSAccessKeyId=AK&Signature=x&Expires=-5", AccessDenied, "Invalid date"),
    (b"AWSAccessKeyId=AK&Signature=x&Expires=%D9%A1", AccessDenied, "Invalid date"),
    (b"AWSAccessKeyId=AK&Signature=%FF%FE&Expires=9999999999", SignatureDoesNotMatch, "does not match"),
    (b"AWSAccessKeyId=%FF&Signature=x&Expires=9999999999", InvalidAccessKeyId, "does not exist"),
]


@pytest.mark.parametrize(("query", "error", "message"), QUERY_ERRORS)
def test_malformed_presigned_urls(query: bytes, error: type[S3Error], message: str) -> None:
    req = SignedRequest("GET", b"/bkt/k", query, [("host", "localhost")])
    assert carries_sigv2(req)
    with pytest.raises(error, match=message):
        authenticate(req, secrets, NOW)


HEADER_ERRORS: list[tuple[list[tuple[str, str]], type[S3Error], str]] = [
    ([("authorization", "AWS "), ("date", DATE)], InvalidArgument, "Expected AwsAccessKeyId:signature"),
    ([("authorization", "AWS AK"), ("date", DATE)], InvalidArgument, "Expected"),
    ([("authorization", "AWS :sig"), ("date", DATE)], InvalidArgument, "Expected"),
    ([("authorization", "AWS AK:"), ("date", DATE)], InvalidArgument, "Expected"),
    ([("authorization", "AWS AK:sig")], AccessDenied, "valid Date or x-amz-date"),
    ([("authorization", "AWS AK:sig"), ("date", "yesterday")], AccessDenied, "valid Date"),
    ([("authorization", "AWS AK:sig"), ("date", DATE), ("x-amz-date", "bad")], AccessDenied, "valid Date"),
    ([("authorization", "AWS AK:sig\u00ff"), ("date", DATE)], SignatureDoesNotMatch, "does not match"),
    ([("authorization", "AWS AK:sig"), ("date", DATE)], SignatureDoesNotMatch, "does not match"),
]


@pytest.mark.parametrize(("headers", "error", "message"), HEADER_ERRORS)
def test_malformed_header_requests(headers: list[tuple[str, str]], error: type[S3Error], message: str) -> None:
    req = SignedRequest("GET", b"/bkt/k", b"", [("host", "localhost"), *headers])
    assert carries_sigv2(req)
    with pytest.raises(error, match=message):
        authenticate(req, secrets, NOW)


def test_one_mechanism_only() -> None:
    req = signed()
    for query in (b"Signature=x", b"X-Amz-Signature=x"):
        with pytest.raises(InvalidArgument, match="Only one auth mechanism"):
            authenticate(_query(req, query), secrets, NOW)


def test_which_requests_are_sigv2() -> None:
    host = [("host", "localhost")]
    assert carries_sigv2(SignedRequest("GET", b"/", b"", [*host, ("authorization", "AWS AK:s")]))
    assert not carries_sigv2(SignedRequest("GET", b"/", b"", [*host, ("authorization", "AWS4-HMAC-SHA256 C")]))
    assert not carries_sigv2(SignedRequest("GET", b"/", b"", host))  # anonymous
    assert not carries_sigv2(SignedRequest("GET", b"/", b"prefix=AWS", host))
    assert carries_sigv2(SignedRequest("GET", b"/", b"Signature=x", host))
    assert not carries_sigv2(SignedRequest("GET", b"/", b"Signature=x&X-Amz-Credential=c", host))  # SigV4's to refuse


def test_sigv4_still_refuses_sigv2_when_it_is_off() -> None:
    """With SigV2 off the front end hands SigV2 requests to SigV4's verifier: S3's 400."""
    for req in (signed(), _presigned(int(NOW.timestamp()) + 60)):
        with pytest.raises(InvalidRequest, match="Please use AWS4-HMAC-SHA256") as caught:
            sigv4.authenticate(req, secrets, NOW)
        assert caught.value.status == 400


def test_a_bucket_resource_with_or_without_its_slash() -> None:
    """botocore signs ``/bkt/`` for a request it sends to ``/bkt``; a client signing the path as
    sent (``/bkt``) verifies too."""
    unsigned = SignedRequest("GET", b"/bkt", b"location", [("host", "localhost"), ("date", DATE)])
    for slash in (True, False):
        text = string_to_sign(unsigned, DATE, None, bucket_slash=slash)
        assert text.endswith("/bkt/?location" if slash else "\n/bkt?location")
        auth = ("authorization", f"AWS AK:{sign('SK', text.encode())}")
        assert authenticate(SignedRequest("GET", b"/bkt", b"location", [*unsigned.headers, auth]), secrets, NOW)
