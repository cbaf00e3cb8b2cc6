"""SigV4 verification: AWS's published vectors, S3's documented examples, and requests that
boto3 itself signed (header auth and presigned URLs) for awkward keys."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, urlsplit

import boto3
import pytest
from awscrt import auth as crt_auth
from awscrt import http as crt_http
from botocore.config import Config
from captured import AWKWARD_KEYS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cachetier.errors import AccessDenied, InvalidArgument, InvalidRequest, S3Error
from gateway.s3.errors import (
    AuthorizationHeaderMalformed,
    AuthorizationQueryParametersError,
    InvalidAccessKeyId,
    RequestTimeTooSkewed,
    SignatureDoesNotMatch,
)
from gateway.s3 import sigv4
from gateway.s3.sigv4 import (
    EMPTY_SHA256,
    SignedRequest,
    authenticate,
    canonical_query,
    canonical_request,
    canonical_uri,
    sign,
    signing_key,
    string_to_sign,
)

# ---- AWS's generic aws-sig-v4-test-suite (service "service", not S3) ----

SUITE_SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
SUITE_DATE = "20150830T123600Z"
SUITE_SCOPE = "20150830/us-east-1/service/aws4_request"
SUITE_HOST = ("host", "example.amazonaws.com")
SUITE_TIME = ("x-amz-date", SUITE_DATE)
FORM_SHA256 = "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e"  # "Param1=value1"

SUITE = {
    "get-vanilla": ("GET", b"/", b"", [], "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
    "get-unreserved": (
        "GET",
        b"/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
        b"",
        [],
        "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f",
    ),
    "get-vanilla-query-order-key-case": (
        "GET", b"/", b"Param2=value2&Param1=value1", [],
        "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500",
    ),
    "get-vanilla-query-order-value": (
        "GET", b"/", b"Param1=value2&Param1=value1", [],
        "5772eed61e12b33fae39ee5e7012498b51d56abc0abb7c60486157bd471c4694",
    ),
    "get-vanilla-utf8-query": (
        "GET", b"/", b"%E1%88%B4=bar", [],
        "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04",
    ),
    "get-vanilla-utf8-query (raw bytes on the wire)": (
        "GET", b"/", "\u1234=bar".encode(), [],
        "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04",
    ),
    "get-header-key-duplicate": (
        "GET", b"/", b"", [("my-header1", "value2"), ("my-header1", "value2"), ("my-header1", "value1")],
        "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea",
    ),
    "get-header-value-order": (
        "GET", b"/", b"", [("my-header1", v) for v in ("value4", "value1", "value3", "value2")],
        "08c7e5a9acfcfeb3ab6b2185e75ce8b1deb5e634ec47601a50643f830c755c01",
    ),
    "get-header-value-trim": (
        "GET", b"/", b"", [("my-header1", " value1"), ("my-header2", '"a   b   c"')],
        "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736",
    ),
    "post-x-www-form-urlencoded": (
        "POST", b"/", b"", [("content-type", "application/x-www-form-urlencoded")],
        "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a",
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(SUITE))
def test_generic_suite_vectors(name: str) -> None:
    method, path, query, extra, expected = SUITE[name]
    headers = [SUITE_HOST, *extra, SUITE_TIME]
    signed = ";".join(sorted({n for n, _ in headers}))
    payload = FORM_SHA256 if method == "POST" else EMPTY_SHA256
    canonical = canonical_request(SignedRequest(method, path, query, headers), signed, payload)
    key = signing_key(SUITE_SECRET, "20150830", "us-east-1", "service")
    assert sign(key, string_to_sign(SUITE_DATE, SUITE_SCOPE, canonical)) == expected


def test_derived_signing_key_matches_aws_docs() -> None:
    key = signing_key(SUITE_SECRET, "20150830", "us-east-1", "iam")
    assert key.hex() == "c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9"


@pytest.mark.parametrize(
    ("wire", "canonical"),
    [
        (b"/example space/", "/example%20space/"),  # get-space
        ("/\u1234".encode(), "/%E1%88%B4"),  # get-utf8
        (b"/%e1%88%b4", "/%E1%88%B4"),  # lower-case escapes are upper-cased
        (b"", "/"),
        # S3, unlike the generic suite, never normalises: these are key bytes.
        (b"//example//", "//example//"),
        (b"/a/./b/../c", "/a/./b/../c"),
        (b"/a%2Fb", "/a%2Fb"),  # an escaped slash stays inside its segment
        (b"/b/a+b!*'()$", "/b/a%2Bb%21%2A%27%28%29%24"),
        (b"/b/100%25", "/b/100%25"),
    ],
)
def test_canonical_uri_is_s3s(wire: bytes, canonical: str) -> None:
    assert canonical_uri(wire) == canonical


@pytest.mark.parametrize(
    ("query", "canonical"),
    [
        (b"lifecycle", "lifecycle="),
        (b"b&a=1", "a=1&b="),
        (b"a=1=2", "a=1%3D2"),
        (b"x=a.b&x=a%2Fb", "x=a%2Fb&x=a.b"),
        (b"q=a+b", "q=a%2Bb"),  # '+' is a plus, not a space
        (b"q=a%20b&&", "q=a%20b"),
        (b"a=10&a=9", "a=10&a=9"),  # byte order, not numeric
    ],
)
def test_canonical_query(query: bytes, canonical: str) -> None:
    assert canonical_query(query) == canonical


# ---- the S3 examples of "Signature Calculations for the Authorization Header" ----

S3_AK = "AKIAIOSFODNN7EXAMPLE"
S3_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
S3_TIME = datetime(2013, 5, 24, tzinfo=UTC)
S3_HOST = ("host", "examplebucket.s3.amazonaws.com")
S3_SCOPE = f"{S3_AK}/20130524/us-east-1/s3/aws4_request"
PUT_SHA256 = "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072"


def secrets(request_key: str) -> str | None:
    return {S3_AK: S3_SECRET, "AK": "SK"}.get(request_key)


def s3_example(
    method: str, path: bytes, query: bytes, extra: list[tuple[str, str]], signed: str, sig: str
) -> SignedRequest:
    auth = f"AWS4-HMAC-SHA256 Credential={S3_SCOPE},SignedHeaders={signed},Signature={sig}"
    headers = [S3_HOST, ("x-amz-date", "20130524T000000Z"), *extra, ("authorization", auth)]
    return SignedRequest(method, path, query, headers)


S3_EXAMPLES = {
    "GET Object": s3_example(
        "GET", b"/test.txt", b"", [("range", "bytes=0-9"), ("x-amz-content-sha256", EMPTY_SHA256)],
        "host;range;x-amz-content-sha256;x-amz-date",
        "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
    ),
    "PUT Object": s3_example(
        "PUT", b"/test%24file.text", b"",
        [("date", "Fri, 24 May 2013 00:00:00 GMT"), ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
         ("x-amz-content-sha256", PUT_SHA256)],
        "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class",
        "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd",
    ),
    "GET Bucket Lifecycle": s3_example(
        "GET", b"/", b"lifecycle", [("x-amz-content-sha256", EMPTY_SHA256)],
        "host;x-amz-content-sha256;x-amz-date",
        "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543",
    ),
    "Get Bucket (List Objects)": s3_example(
        "GET", b"/", b"max-keys=2&prefix=J", [("x-amz-content-sha256", EMPTY_SHA256)],
        "host;x-amz-content-sha256;x-amz-date",
        "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7",
    ),
}  # fmt: skip

PRESIGNED_EXAMPLE = SignedRequest(
    "GET",
    b"/test.txt",
    b"X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1"
    b"%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host"
    b"&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
    [S3_HOST],
)


@pytest.mark.parametrize("name", sorted(S3_EXAMPLES))
def test_s3_documented_examples(name: str) -> None:
    req = S3_EXAMPLES[name]
    auth = authenticate(req, secrets, S3_TIME)
    assert auth is not None and not auth.presigned
    assert auth.access_key == S3_AK and auth.scope == "20130524/us-east-1/s3/aws4_request"
    assert auth.signature in dict(req.headers)["authorization"]
    assert auth.signing_key == signing_key(S3_SECRET, "20130524", "us-east-1", "s3")
    assert S3_SECRET not in repr(auth) and auth.signing_key.hex() not in repr(auth)


def test_s3_documented_presigned_example() -> None:
    auth = authenticate(PRESIGNED_EXAMPLE, secrets, S3_TIME + timedelta(hours=23))
    assert auth is not None and auth.presigned and auth.payload_hash == "UNSIGNED-PAYLOAD"
    assert auth.signature == "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"


def test_presigned_expiry_and_not_yet_valid() -> None:
    with pytest.raises(AccessDenied, match="Request has expired"):
        authenticate(PRESIGNED_EXAMPLE, secrets, S3_TIME + timedelta(seconds=86401))
    with pytest.raises(AccessDenied, match="not valid yet"):
        authenticate(PRESIGNED_EXAMPLE, secrets, S3_TIME - timedelta(minutes=16))
    assert authenticate(PRESIGNED_EXAMPLE, secrets, S3_TIME - timedelta(minutes=14)) is not None


def with_query(req: SignedRequest, old: bytes, new: bytes) -> SignedRequest:
    return SignedRequest(req.method, req.raw_path, req.query_string.replace(old, new), req.headers)


def with_header(req: SignedRequest, name: str, value: str | None) -> SignedRequest:
    headers = [(n, v) for n, v in req.headers if n != name]
    return SignedRequest(
        req.method,
        req.raw_path,
        req.query_string,
        headers + ([(name, value)] if value is not None else []),
    )


@pytest.mark.parametrize(
    ("old", "new", "error"),
    [
        (b"Expires=86400", b"Expires=604801", AuthorizationQueryParametersError),
        (b"Expires=86400", b"Expires=0", AuthorizationQueryParametersError),
        (b"Expires=86400", b"Expires=1e3", AuthorizationQueryParametersError),
        (b"Expires=86400", b"Expires=86401", SignatureDoesNotMatch),
        (b"%2Fs3%2F", b"%2Fec2%2F", AuthorizationQueryParametersError),
        (b"aws4_request", b"aws5_request", AuthorizationQueryParametersError),
        (
            b"Date=20130524T",
            b"Date=20130525T",
            AuthorizationQueryParametersError,
        ),  # scope date differs
        (b"SignedHeaders=host", b"SignedHeaders=range", AuthorizationQueryParametersError),
        (b"AKIAIOSFODNN7EXAMPLE", b"AKIAUNKNOWN", InvalidAccessKeyId),
        (b"AWS4-HMAC-SHA256", b"AWS4-ECDSA-P256-SHA256", InvalidRequest),
        (
            b"&X-Amz-Signature=",
            b"&X-Amz-Signature=aa&X-Amz-Signature=",
            AuthorizationQueryParametersError,
        ),
        (b"X-Amz-Date=20130524T000000Z&", b"", AuthorizationQueryParametersError),
        (b"test.txt", b"test.txt", None),
    ],
)
def test_presigned_errors(old: bytes, new: bytes, error: type[S3Error] | None) -> None:
    req = with_query(PRESIGNED_EXAMPLE, old, new)
    if error is None:
        assert authenticate(req, secrets, S3_TIME) is not None
    else:
        with pytest.raises(error):
            authenticate(req, secrets, S3_TIME)


GET_OBJECT = S3_EXAMPLES["GET Object"]


@pytest.mark.parametrize(
    ("name", "value", "error"),
    [
        ("range", "bytes=0-10", SignatureDoesNotMatch),
        ("host", "otherbucket.s3.amazonaws.com", SignatureDoesNotMatch),
        ("x-amz-content-sha256", None, InvalidRequest),
        ("x-amz-content-sha256", "not-a-hash", InvalidArgument),
        ("x-amz-date", None, AccessDenied),  # no Date header to fall back on either
        ("x-amz-date", "20130524", AccessDenied),
        ("x-amz-acl", "public-read", AccessDenied),  # unsigned x-amz-* header
        ("authorization", "AWS AKIAIOSFODNN7EXAMPLE:frJIUN8DYpKDtOLCwo//yllqDzg=", InvalidRequest),
        ("authorization", "AWS4-ECDSA-P256-SHA256 Credential=x, SignedHeaders=host, Signature=00", InvalidRequest),
        ("authorization", "AWS4-HMAC-SHA256 Credential=x/y", AuthorizationHeaderMalformed),
        ("authorization", f"AWS4-HMAC-SHA256 Credential={S3_SCOPE}, SignedHeaders=range, Signature=00", AuthorizationHeaderMalformed),
        ("authorization", f"AWS4-HMAC-SHA256 Credential={S3_SCOPE.replace('/s3/', '/iam/')}, SignedHeaders=host, Signature=00", AuthorizationHeaderMalformed),
        ("authorization", f"AWS4-HMAC-SHA256 Credential={S3_SCOPE.replace('AKIAIOSFODNN7EXAMPLE', 'NOBODY')}, SignedHeaders=host, Signature=00", InvalidAccessKeyId),
        ("x-amzn-trace-id", "Root=1", None),  # not x-amz-*; may travel unsigned
    ],
)  # fmt: skip
def test_header_auth_errors(name: str, value: str | None, error: type[S3Error] | None) -> None:
    req = with_header(GET_OBJECT, name, value)
    if error is None:
        assert authenticate(req, secrets, S3_TIME) is not None
    else:
        with pytest.raises(error):
            authenticate(req, secrets, S3_TIME)


def test_wrong_secret_and_clock_skew() -> None:
    with pytest.raises(SignatureDoesNotMatch) as caught:
        authenticate(GET_OBJECT, lambda _: "not-the-secret", S3_TIME)
    assert "not-the-secret" not in str(caught.value)
    for skew in (timedelta(minutes=16), -timedelta(minutes=16)):
        with pytest.raises(RequestTimeTooSkewed):
            authenticate(GET_OBJECT, secrets, S3_TIME + skew)
    assert authenticate(GET_OBJECT, secrets, (S3_TIME + timedelta(minutes=14)).replace(tzinfo=None))


def test_cached_keys_and_times_still_verify_every_request() -> None:
    """The signing key (per secret, date, region, service) and the parsed request time are
    cached, bounded; the signature is still computed and compared on every request."""
    signing_key.cache_clear()
    assert authenticate(GET_OBJECT, secrets, S3_TIME) is not None
    assert authenticate(GET_OBJECT, secrets, S3_TIME) is not None
    assert signing_key.cache_info().hits >= 1 and signing_key.cache_info().maxsize == 512
    tampered = SignedRequest(GET_OBJECT.method, GET_OBJECT.raw_path + b"x", GET_OBJECT.query_string, GET_OBJECT.headers)
    with pytest.raises(SignatureDoesNotMatch):  # same key, same time, from the caches: still checked
        authenticate(tampered, secrets, S3_TIME)
    with pytest.raises(SignatureDoesNotMatch):  # another secret for that key and date: another entry
        authenticate(GET_OBJECT, lambda _: "not-the-secret", S3_TIME)
    parsed = sigv4._parse_time.cache_info()  # type: ignore[attr-defined]
    assert parsed.maxsize is not None and parsed.hits >= 1


def test_date_header_fallback() -> None:
    req = with_header(
        with_header(GET_OBJECT, "x-amz-date", None), "date", "Fri, 24 May 2013 00:00:00 GMT"
    )
    # The x-amz-date header was signed and is gone, so the signature must fail, but only
    # after the Date header was accepted as the request time.
    with pytest.raises(SignatureDoesNotMatch):
        authenticate(req, secrets, S3_TIME)
    with pytest.raises(RequestTimeTooSkewed):
        authenticate(req, secrets, S3_TIME + timedelta(hours=1))


def test_anonymous_and_mixed_mechanisms() -> None:
    assert authenticate(SignedRequest("GET", b"/b/k", b"x=1", [S3_HOST]), secrets, S3_TIME) is None
    with pytest.raises(InvalidRequest, match="AWS4-HMAC-SHA256"):  # SigV2 presigned
        authenticate(
            SignedRequest("GET", b"/k", b"AWSAccessKeyId=A&Expires=1&Signature=x", [S3_HOST]),
            secrets,
            S3_TIME,
        )
    lone = SignedRequest("GET", b"/k", b"X-Amz-Signature=00", [S3_HOST])
    with pytest.raises(AuthorizationQueryParametersError):
        authenticate(lone, secrets, S3_TIME)
    mixed = SignedRequest("GET", b"/test.txt", PRESIGNED_EXAMPLE.query_string, GET_OBJECT.headers)
    with pytest.raises(InvalidArgument):
        authenticate(mixed, secrets, S3_TIME)


# ---- requests signed by boto3 itself ----


class _Captured(Exception):
    pass


def _client(endpoint: str) -> Any:
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="eu-west-3",
        aws_access_key_id="AK",
        aws_secret_access_key="SK",
        config=Config(
            signature_version="s3v4", s3={"addressing_style": "path"}, retries={"max_attempts": 1}
        ),
    )
    return client


@pytest.fixture(scope="module")
def boto() -> Callable[..., SignedRequest]:
    """``boto(operation, **params)``: the request boto3 would send, captured before sending."""
    client = _client("http://127.0.0.1:9000")
    box: dict[str, Any] = {}

    def capture(request: Any, **_: Any) -> None:
        box["request"] = request
        raise _Captured()

    client.meta.events.register("before-send.s3.*", capture)

    def call(operation: str, **params: Any) -> SignedRequest:
        with pytest.raises(_Captured):
            getattr(client, operation)(**params)
        return from_prepared(box["request"])

    return call


def from_prepared(request: Any) -> SignedRequest:
    url = urlsplit(request.url)
    headers = [
        (name.lower(), value.decode() if isinstance(value, bytes) else value)
        for name, value in request.headers.items()
    ]
    return SignedRequest(request.method, url.path.encode(), url.query.encode(), headers)


def from_url(method: str, url: str) -> SignedRequest:
    parts = urlsplit(url)
    return SignedRequest(
        method, parts.path.encode(), parts.query.encode(), [("host", parts.netloc)]
    )


@pytest.mark.parametrize("key", AWKWARD_KEYS)
def test_boto3_header_auth_round_trip(boto: Callable[..., SignedRequest], key: str) -> None:
    now = datetime.now(UTC)
    for req in (
        boto("get_object", Bucket="bkt", Key=key, Range="bytes=0-9"),
        boto("put_object", Bucket="bkt", Key=key, Body=b"hello", Metadata={"m": "v  w"}),
        boto("list_objects_v2", Bucket="bkt", Prefix=key, Delimiter="/", StartAfter=key),
        boto("copy_object", Bucket="bkt", Key=key, CopySource={"Bucket": "src", "Key": key}),
    ):
        auth = authenticate(req, secrets, now)
        assert auth is not None and auth.access_key == "AK" and not auth.presigned
        assert auth.scope.endswith("/eu-west-3/s3/aws4_request")
        tampered = with_header(
            req, "x-amz-date", dict(req.headers)["x-amz-date"].replace("T", "T0")[:16]
        )
        with pytest.raises((SignatureDoesNotMatch, AccessDenied)):
            authenticate(tampered, secrets, now)
        with pytest.raises(SignatureDoesNotMatch):
            authenticate(req, lambda _: "SK2", now)


def test_boto3_copy_source_is_bound(boto: Callable[..., SignedRequest]) -> None:
    req = boto("copy_object", Bucket="bkt", Key="k", CopySource={"Bucket": "src", "Key": "k"})
    with pytest.raises(SignatureDoesNotMatch):
        authenticate(with_header(req, "x-amz-copy-source", "secret/k"), secrets, datetime.now(UTC))


def test_boto3_query_is_bound(boto: Callable[..., SignedRequest]) -> None:
    req = boto("list_objects_v2", Bucket="bkt", Prefix="a")
    with pytest.raises(SignatureDoesNotMatch):
        authenticate(with_query(req, b"prefix=a", b"prefix=b"), secrets, datetime.now(UTC))


@pytest.fixture(scope="module")
def presigner() -> Any:
    return _client("https://gateway.example:8443")


@pytest.mark.parametrize("key", AWKWARD_KEYS)
def test_boto3_presigned_round_trip(presigner: Any, key: str) -> None:
    now = datetime.now(UTC)
    url = presigner.generate_presigned_url(
        "get_object",
        Params={
            "Bucket": "bkt",
            "Key": key,
            "ResponseContentDisposition": f'attachment; filename="{key}"',
        },
        ExpiresIn=600,
    )
    auth = authenticate(from_url("GET", url), secrets, now)
    assert auth is not None and auth.presigned and auth.payload_hash == "UNSIGNED-PAYLOAD"
    with pytest.raises(AccessDenied, match="expired"):
        authenticate(from_url("GET", url), secrets, now + timedelta(seconds=700))
    with pytest.raises(SignatureDoesNotMatch):
        authenticate(from_url("PUT", url), secrets, now)
    with pytest.raises(SignatureDoesNotMatch):
        authenticate(
            from_url(
                "GET",
                url.replace("response-content-disposition=", "response-content-disposition=x"),
            ),
            secrets,
            now,
        )


def test_boto3_presigned_put_signs_its_headers(presigner: Any) -> None:
    url = presigner.generate_presigned_url(
        "put_object",
        Params={"Bucket": "bkt", "Key": "k", "ContentType": "text/plain"},
        ExpiresIn=60,
    )
    req = from_url("PUT", url)
    now = datetime.now(UTC)
    assert "content-type" in urlsplit(url).query  # X-Amz-SignedHeaders=content-type;host
    assert authenticate(with_header(req, "content-type", "text/plain"), secrets, now) is not None
    with pytest.raises(SignatureDoesNotMatch):
        authenticate(with_header(req, "content-type", "text/html"), secrets, now)
    # An x-amz-* header the URL's signer never saw is refused, as S3 does.
    with pytest.raises(AccessDenied, match="not signed"):
        authenticate(with_header(req, "x-amz-copy-source", "other/key"), secrets, now)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(key=st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=40))
def test_boto3_round_trip_any_key(
    boto: Callable[..., SignedRequest], presigner: Any, key: str
) -> None:
    now = datetime.now(UTC)
    assert authenticate(boto("head_object", Bucket="bkt", Key=key), secrets, now) is not None
    assert authenticate(boto("list_objects_v2", Bucket="bkt", Prefix=key), secrets, now) is not None
    url = presigner.generate_presigned_url("get_object", Params={"Bucket": "bkt", "Key": key})
    assert authenticate(from_url("GET", url), secrets, now) is not None


def crt_signed(
    method: str, target: str, headers: list[tuple[str, str]], now: datetime
) -> SignedRequest:
    """A request signed by the AWS CRT (a second, independent signer), as an ASGI server would
    hand it over: header bytes decoded as latin-1."""
    request = crt_http.HttpRequest(method, target, crt_http.HttpHeaders(headers))
    config = crt_auth.AwsSigningConfig(
        algorithm=crt_auth.AwsSigningAlgorithm.V4,
        signature_type=crt_auth.AwsSignatureType.HTTP_REQUEST_HEADERS,
        credentials_provider=crt_auth.AwsCredentialsProvider.new_static("AK", "SK"),
        region="ap-south-1",
        service="s3",
        date=now,
        use_double_uri_encode=False,  # S3's rules
        should_normalize_uri_path=False,
        signed_body_value=EMPTY_SHA256,
        signed_body_header_type=crt_auth.AwsSignedBodyHeaderType.X_AMZ_CONTENT_SHA_256,
    )
    signed = crt_auth.aws_sign_request(request, config).result()
    url = urlsplit(signed.path)
    wire = [(n.lower(), v.encode().decode("latin-1")) for n, v in signed.headers]
    return SignedRequest(method, url.path.encode(), url.query.encode(), wire)


@pytest.mark.parametrize("key", AWKWARD_KEYS)
def test_awscrt_signer_agrees(key: str) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    target = "/bkt/" + quote(key, safe="/~") + "?prefix=a%20b&list-type=2&flag"
    # a raw UTF-8 header value, as non-boto clients send user metadata
    req = crt_signed("GET", target, [("host", "h:1"), ("x-amz-meta-note", "über  café")], now)
    assert authenticate(req, secrets, now) is not None
    with pytest.raises(SignatureDoesNotMatch):
        authenticate(with_header(req, "x-amz-meta-note", "uber cafe"), secrets, now)


def test_the_signing_key_is_derived_once_per_key_and_day(boto: Callable[..., SignedRequest]) -> None:
    """What keeps verification cheap (its speed is measured in benchmarks/hot_path.py, not here):
    the four HMACs of the signing key run once per key, day and region, not per request."""
    req = boto("put_object", Bucket="bkt", Key="dir/some object name.parquet", Body=b"x")
    now = datetime.now(UTC)
    sigv4.signing_key.cache_clear()
    for _ in range(50):
        authenticate(req, secrets, now)
    info = sigv4.signing_key.cache_info()
    assert info.misses == 1 and info.hits == 49, info
