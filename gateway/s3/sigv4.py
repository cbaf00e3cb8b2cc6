"""AWS Signature Version 4 verification for incoming S3 requests (header and presigned).

The canonical request is built the way S3 builds it, not the generic SigV4 way: the path is
never normalised (``//`` and ``..`` are ordinary key bytes) and never double-encoded. S3
decodes each path segment and re-encodes it with only RFC 3986 unreserved characters kept,
which reproduces what any conforming client signed however it escaped the wire form (boto3
sends ``quote(key, safe='/~')``). The query is treated alike, and ``+`` means a literal plus.

Only AWS4-HMAC-SHA256 is accepted here; SigV2 (gateway/s3/sigv2.py) reaches this module only
when the front end has it switched off, and then gets S3's own "not supported" answer, as SigV4a
always does.
Secrets and signing keys never reach a message, a log line or a repr.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from urllib.parse import quote, unquote, unquote_to_bytes

from cachetier.errors import AccessDenied, InvalidArgument, InvalidRequest, S3Error
from gateway.s3.errors import (
    AuthorizationHeaderMalformed,
    AuthorizationQueryParametersError,
    InvalidAccessKeyId,
    RequestTimeTooSkewed,
    SignatureDoesNotMatch,
)
from gateway.s3.numbers import is_decimal

ALGORITHM = "AWS4-HMAC-SHA256"
SERVICE = "s3"
TERMINATOR = "aws4_request"
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
MAX_EXPIRES = 604800  # seven days, S3's limit for presigned URLs
# The payload hashes S3 accepts in x-amz-content-sha256 besides a hex digest.
PAYLOAD_MODES = frozenset({UNSIGNED_PAYLOAD, *(f"STREAMING-{m}" for m in (
    "AWS4-HMAC-SHA256-PAYLOAD", "AWS4-HMAC-SHA256-PAYLOAD-TRAILER", "UNSIGNED-PAYLOAD-TRAILER"
))})  # fmt: skip
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
_AMZ_DATE = re.compile(r"(\d{4})(\d\d)(\d\d)T(\d\d)(\d\d)(\d\d)Z", re.ASCII)  # [0-9], not any digit
_PATH_SAFE = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~/"
UNSUPPORTED_MECHANISM = (
    "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256."
)
ONE_MECHANISM = (
    "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, "
    "Signature query string parameter or the Authorization header should be specified"
)
# x-amz-* headers that may travel unsigned; S3 lets the payload hash go unsigned because
# it is part of the canonical request anyway.
_UNSIGNED_OK = frozenset({"x-amz-content-sha256"})


@dataclass(frozen=True)
class SignedRequest:
    method: str
    raw_path: bytes  # the path exactly as sent on the wire (percent-encoded), no query
    query_string: bytes  # raw query string as sent, without '?'
    headers: list[tuple[str, str]]  # lower-case names, values as sent (repeats allowed)


@dataclass(frozen=True)
class AuthContext:
    access_key: str
    signing_key: bytes = field(repr=False)  # kSigning, needed for chunk signatures
    scope: str  # "20130524/us-east-1/s3/aws4_request"
    amz_date: str  # "20130524T000000Z"
    signature: str  # the request's (seed) signature
    payload_hash: str  # x-amz-content-sha256 (header auth) or "UNSIGNED-PAYLOAD" (presigned)
    presigned: bool


@dataclass(frozen=True)
class _Claim:
    """What a request says about its own signature, before any check."""

    access_key: str
    date: str  # credential scope date, YYYYMMDD
    region: str
    amz_date: str
    signed_headers: str  # as sent, e.g. "host;x-amz-date"
    signature: str
    payload_hash: str

    @property
    def scope(self) -> str:
        return f"{self.date}/{self.region}/{SERVICE}/{TERMINATOR}"


# ---- the shared SigV4 functions (checked against AWS's published vectors) ----


def _reencode(raw: bytes | str) -> str:
    return quote(unquote_to_bytes(raw), safe="-_.~")


def canonical_uri(raw_path: bytes) -> str:
    """The canonical URI of a wire path, as S3 computes it (no normalisation)."""
    if not raw_path:
        return "/"
    if not raw_path.translate(None, _PATH_SAFE):
        return raw_path.decode("ascii")  # fast path: nothing to re-encode
    return "/".join(_reencode(segment) for segment in raw_path.split(b"/"))


def canonical_query(query_string: bytes, *, omit: str | None = None) -> str:
    """Parameters re-encoded, sorted by name then value; ``a`` and ``a=`` both give ``a=``."""
    pairs = []
    for part in query_string.split(b"&"):
        if part:
            name, _, value = part.partition(b"=")
            encoded = _reencode(name)
            if encoded != omit:
                pairs.append((encoded, _reencode(value)))
    pairs.sort()
    return "&".join(f"{name}={value}" for name, value in pairs)


def canonical_headers(headers: list[tuple[str, str]], signed: list[str]) -> str:
    """``name:value\\n`` per signed header; repeats joined by ',', whitespace runs collapsed."""
    values: dict[str, list[str]] = {name: [] for name in signed}
    for name, value in headers:
        found = values.get(name)
        if found is not None:
            found.append(" ".join(value.split()))
    return "".join(f"{name}:{','.join(values[name])}\n" for name in signed)


def canonical_request(
    req: SignedRequest, signed_headers: str, payload_hash: str, *, omit_query: str | None = None
) -> str:
    names = signed_headers.lower().split(";")
    return "\n".join(
        (
            req.method,
            canonical_uri(req.raw_path),
            canonical_query(req.query_string, omit=omit_query),
            canonical_headers(req.headers, names),
            signed_headers,
            payload_hash,
        )
    )


def wire_bytes(text: str) -> bytes:
    """The bytes a client signed. Header values arrive decoded as latin-1 (ASGI gives bytes),
    so latin-1 gives back exactly what was on the wire, non-ASCII bytes included."""
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:  # a caller that decoded as UTF-8
        return text.encode("utf-8")


def string_to_sign(amz_date: str, scope: str, canonical: str) -> str:
    digest = hashlib.sha256(wire_bytes(canonical)).hexdigest()
    return f"{ALGORITHM}\n{amz_date}\n{scope}\n{digest}"


@functools.lru_cache(maxsize=512)
def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    """kSigning; cached because it changes once a day per key and region."""
    key = hmac.digest(f"AWS4{secret}".encode(), date.encode(), "sha256")
    for part in (region, service, TERMINATOR):
        key = hmac.digest(key, part.encode(), "sha256")
    return key


def sign(key: bytes, text: str) -> str:
    return hmac.digest(key, text.encode("utf-8"), "sha256").hex()


def same_signature(expected: str, provided: str) -> bool:
    return hmac.compare_digest(expected.encode(), provided.encode("utf-8", "replace"))


# ---- parsing what the request claims ----


def headers_of(req: SignedRequest) -> dict[str, str]:
    """First value of each header; the canonical form still sees every repeat."""
    first: dict[str, str] = {}
    for name, value in req.headers:
        first.setdefault(name, value)
    return first


@functools.lru_cache(maxsize=1024)  # every request parses its time twice; a second's clients share one
def _parse_time(amz_date: str) -> datetime | None:
    m = _AMZ_DATE.fullmatch(amz_date)
    if m is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.groups())
    try:
        return datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError:
        return None


@dataclass(frozen=True)
class _Mechanism:
    """How errors are worded for one of the two ways of carrying a signature."""

    error: type[S3Error]
    prefix: str


_HEADER = _Mechanism(AuthorizationHeaderMalformed, "The authorization header is malformed;")
_QUERY = _Mechanism(
    AuthorizationQueryParametersError, "Error parsing the X-Amz-Credential parameter;"
)


def _parse_credential(value: str, amz_date: str, how: _Mechanism) -> tuple[str, str, str]:
    """(access key, date, region) from ``AK/YYYYMMDD/region/s3/aws4_request``."""
    parts = value.split("/")
    if len(parts) != 5 or not all(parts) or parts[4] != TERMINATOR:
        raise how.error(
            f"{how.prefix} the Credential is mal-formed; expecting "
            '"<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request".'
        )
    access_key, date, region, service, _ = parts
    if service != SERVICE:
        raise how.error(
            f'{how.prefix} incorrect service "{service}". This endpoint belongs to "s3".'
        )
    if date != amz_date[:8]:
        raise how.error(
            f'{how.prefix} Invalid credential date "{date}". '
            f'This date is not the same as X-Amz-Date: "{amz_date[:8]}".'
        )
    return access_key, date, region


def _parse_authorization(value: str) -> tuple[str, str, str]:
    """(Credential, SignedHeaders, Signature) of an ``AWS4-HMAC-SHA256 ...`` header."""
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise InvalidRequest(UNSUPPORTED_MECHANISM)
    fields: dict[str, str] = {}
    for item in rest.split(","):
        key, sep, val = item.strip().partition("=")
        if not sep or key in fields:
            fields.clear()
            break
        fields[key] = val.strip()
    if fields.keys() != {"Credential", "SignedHeaders", "Signature"}:
        raise AuthorizationHeaderMalformed(
            "The authorization header is malformed; the authorization header requires three "
            "components: Credential, SignedHeaders, and Signature."
        )
    return fields["Credential"], fields["SignedHeaders"], fields["Signature"]


def _header_time(headers: dict[str, str]) -> str:
    """The request time as an x-amz-date string; the Date header is the fallback."""
    amz_date = headers.get("x-amz-date")
    if amz_date is not None and _parse_time(amz_date) is not None:
        return amz_date
    if amz_date is None and "date" in headers:
        try:
            parsed = parsedate_to_datetime(headers["date"])
        except (TypeError, ValueError, OverflowError):  # a year past C's long: OverflowError
            parsed = None
        if parsed is not None and parsed.tzinfo is not None:
            return parsed.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    raise AccessDenied("AWS authentication requires a valid Date or x-amz-date header")


def _header_claim(headers: dict[str, str]) -> _Claim:
    credential, signed_headers, signature = _parse_authorization(headers["authorization"])
    amz_date = _header_time(headers)
    access_key, date, region = _parse_credential(credential, amz_date, _HEADER)
    payload_hash = headers.get("x-amz-content-sha256")
    if payload_hash is None:
        raise InvalidRequest("Missing required header for this request: x-amz-content-sha256")
    _check_payload_hash(payload_hash)
    return _Claim(access_key, date, region, amz_date, signed_headers, signature, payload_hash)


def _check_payload_hash(payload_hash: str) -> None:
    if payload_hash not in PAYLOAD_MODES and not _HEX64.fullmatch(payload_hash):
        raise InvalidArgument(
            "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-AWS4-HMAC-SHA256-PAYLOAD, "
            "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER, STREAMING-UNSIGNED-PAYLOAD-TRAILER "
            "or a valid sha256 value."
        )


def query_params(query_string: bytes) -> dict[str, list[str]]:
    params: dict[str, list[str]] = {}
    for part in query_string.split(b"&"):
        name, _, value = part.partition(b"=")
        params.setdefault(unquote(name.decode("latin-1")), []).append(
            unquote(value.decode("latin-1"))
        )
    return params


QUERY_AUTH = tuple(f"X-Amz-{p}" for p in (
    "Algorithm", "Credential", "Date", "Expires", "SignedHeaders", "Signature"
))  # fmt: skip


def _query_claim(params: dict[str, list[str]]) -> tuple[_Claim, int]:
    """The claim of a presigned URL and its X-Amz-Expires."""
    if any(len(params.get(name, ())) != 1 for name in QUERY_AUTH):
        raise AuthorizationQueryParametersError()
    value = {name: params[name][0] for name in QUERY_AUTH}
    if value["X-Amz-Algorithm"] != ALGORITHM:
        raise InvalidRequest(UNSUPPORTED_MECHANISM)
    amz_date = value["X-Amz-Date"]
    if _parse_time(amz_date) is None:
        raise AuthorizationQueryParametersError(
            "X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\""
        )
    expires = value["X-Amz-Expires"]
    if not is_decimal(expires) or not 1 <= int(expires) <= MAX_EXPIRES:
        raise AuthorizationQueryParametersError(
            "X-Amz-Expires must be between 1 and 604800 seconds (seven days)."
        )
    access_key, date, region = _parse_credential(value["X-Amz-Credential"], amz_date, _QUERY)
    # A client may sign a payload hash into the URL; otherwise it is UNSIGNED-PAYLOAD.
    payload = params.get("X-Amz-Content-Sha256", [UNSIGNED_PAYLOAD])[0]
    _check_payload_hash(payload)  # the body is read by this value (gateway.s3.body)
    signed, signature = value["X-Amz-SignedHeaders"], value["X-Amz-Signature"]
    return _Claim(access_key, date, region, amz_date, signed, signature, payload), int(expires)


# ---- the checks ----


def _check_time(claim: _Claim, now: datetime, max_skew: timedelta, expires: int | None) -> None:
    signed_at = _parse_time(claim.amz_date)
    assert signed_at is not None  # both claim parsers validated it
    now = now if now.tzinfo else now.replace(tzinfo=UTC)
    if expires is None:
        if abs(now - signed_at) > max_skew:
            raise RequestTimeTooSkewed()
    elif signed_at - now > max_skew:
        raise AccessDenied("Request is not valid yet")
    elif now > signed_at + timedelta(seconds=expires):
        raise AccessDenied("Request has expired")


def _check_signed_headers(req: SignedRequest, claim: _Claim, how: _Mechanism) -> None:
    names = claim.signed_headers.lower().split(";")
    if "host" not in names or not all(names):
        raise how.error("The signed headers must include host and no empty names.")
    signed = set(names)
    # Unsigned x-amz-* headers could change what a signed request does (copy source,
    # ACL, ...) without breaking its signature; S3 refuses them, and so do we.
    unsigned = sorted({n for n, _ in req.headers if n.startswith("x-amz-")} - signed - _UNSIGNED_OK)
    if unsigned:
        raise AccessDenied(
            "There were headers present in the request which were not signed: "
            + ", ".join(unsigned)
        )


def _verify(req: SignedRequest, claim: _Claim, secret: str, presigned: bool) -> AuthContext:
    key = signing_key(secret, claim.date, claim.region, SERVICE)
    omit = "X-Amz-Signature" if presigned else None
    canonical = canonical_request(req, claim.signed_headers, claim.payload_hash, omit_query=omit)
    expected = sign(key, string_to_sign(claim.amz_date, claim.scope, canonical))
    if not same_signature(expected, claim.signature):
        raise SignatureDoesNotMatch()
    return AuthContext(
        access_key=claim.access_key,
        signing_key=key,
        scope=claim.scope,
        amz_date=claim.amz_date,
        signature=expected,
        payload_hash=claim.payload_hash,
        presigned=presigned,
    )


def authenticate(
    req: SignedRequest,
    secret_for: Callable[[str], str | None],
    now: datetime,
    *,
    max_skew: timedelta = timedelta(minutes=15),
) -> AuthContext | None:
    """Verify the request's SigV4 signature; None when it carries no credentials at all.

    ``secret_for`` maps an access key to its secret (None if unknown); ``now`` is aware or
    naive UTC. Raises the S3 error a client of S3 would see."""
    headers = headers_of(req)
    params = query_params(req.query_string) if req.query_string else {}
    in_query = bool(params) and any(name in params for name in QUERY_AUTH)
    if "authorization" in headers and (in_query or "Signature" in params):
        raise InvalidArgument(ONE_MECHANISM)
    expires: int | None = None
    if "authorization" in headers:
        claim, how = _header_claim(headers), _HEADER
    elif in_query:
        (claim, expires), how = _query_claim(params), _QUERY
    elif "AWSAccessKeyId" in params or "Signature" in params:
        raise InvalidRequest(UNSUPPORTED_MECHANISM)  # a SigV2 presigned URL, SigV2 switched off
    else:
        return None
    secret = secret_for(claim.access_key)
    if secret is None:
        raise InvalidAccessKeyId()
    _check_time(claim, now, max_skew, expires)
    _check_signed_headers(req, claim, how)
    return _verify(req, claim, secret, presigned=expires is not None)
