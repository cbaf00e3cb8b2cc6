"""AWS Signature Version 2 verification for incoming S3 requests: the ``Authorization: AWS
AK:signature`` header and presigned URLs (``AWSAccessKeyId``, ``Signature``, ``Expires``), which
boto3's ``generate_presigned_url`` and ``aws s3 presign`` give by default.

The string to sign is S3's (the REST authentication chapter of the S3 developer guide), checked
against what botocore's HmacV1Auth and HmacV1QueryAuth sign: the verb, Content-MD5,
Content-Type, the time (the Date header, empty when x-amz-date is sent, or Expires in a URL),
the x-amz-* headers, then the resource: the virtual host's bucket as ``/bucket``, the path as
sent (still percent-encoded) and the sub-resources S3 signs, sorted, with decoded values.

SigV2 signs no payload: the AuthContext says UNSIGNED-PAYLOAD (so a signed aws-chunked body is
refused), and a Content-MD5 is still checked against the body by body.py.
Secrets never reach a message, a log line or a repr.
"""

from __future__ import annotations

import base64
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from urllib.parse import unquote

from cachetier.errors import AccessDenied, InvalidArgument
from gateway.s3.errors import InvalidAccessKeyId, RequestTimeTooSkewed, SignatureDoesNotMatch
from gateway.s3.sigv4 import (
    ONE_MECHANISM,
    QUERY_AUTH,
    UNSIGNED_PAYLOAD,
    AuthContext,
    SignedRequest,
    headers_of,
    query_params,
    wire_bytes,
)

PREFIX = "AWS "  # an Authorization header of SigV2
QUERY_PARAMETERS = ("AWSAccessKeyId", "Signature", "Expires")
# The sub-resources S3 signs (its developer guide), with those botocore also signs; a request
# naming one lakegate does not implement is refused before its signature is read (request.py).
SIGNED_SUBRESOURCES = frozenset(
    "acl cors delete lifecycle location logging notification partNumber policy requestPayment "
    "restore tagging torrent uploadId uploads versionId versioning versions website "
    "response-content-type response-content-language response-expires response-cache-control "
    "response-content-disposition response-content-encoding "
    "accelerate analytics defaultObjectAcl inventory metrics object-lock replication select "
    "select-type storageClass".split()
)


@dataclass(frozen=True)
class _Claim:
    """What a SigV2 request says about its own signature, before any check."""

    access_key: str
    signature: str
    time: str  # the string to sign's time line: Date, "" (x-amz-date sent) or Expires
    presigned: bool


def carries_sigv2(req: SignedRequest) -> bool:
    """The request is signed the SigV2 way (a mixed request is SigV2's to refuse only when its
    Authorization header is SigV2's)."""
    authorization = headers_of(req).get("authorization")
    if authorization is not None:
        return authorization.lstrip().startswith(PREFIX)
    if not req.query_string:
        return False
    params = query_params(req.query_string)
    if any(name in params for name in QUERY_AUTH):
        return False  # SigV4's, with its own errors
    return "AWSAccessKeyId" in params or "Signature" in params


# ---- the string to sign ----


def canonical_amz_headers(headers: list[tuple[str, str]]) -> str:
    """``name:value\\n`` per x-amz-* header, sorted; values of repeats joined by ','. Each value
    is trimmed and line folds become one space; inner runs of spaces stay, as clients sign them."""
    values: dict[str, list[str]] = {}
    for name, value in headers:
        if name.startswith("x-amz-"):
            unfolded = " ".join(line.strip() for line in value.splitlines())
            values.setdefault(name, []).append(unfolded.strip())
    return "".join(f"{name}:{','.join(values[name])}\n" for name in sorted(values))


def canonical_subresources(query_string: bytes) -> str:
    """``?name[=value]&...`` of the signed sub-resources, sorted by name (stable), values
    decoded; an empty value signs as the bare name, as S3 reads ``?uploads=``."""
    found = []
    for part in query_string.split(b"&"):
        name, _, value = part.decode("latin-1").partition("=")
        if name in SIGNED_SUBRESOURCES:
            found.append((name, unquote(value)))
    if not found:
        return ""
    found.sort(key=lambda pair: pair[0])
    return "?" + "&".join(f"{name}={value}" if value else name for name, value in found)


def canonical_resource(req: SignedRequest, host_bucket: str | None, *, bucket_slash: bool = True) -> str:
    """The resource signed. A bucket's is ``/bucket/``: botocore sends ``/bucket`` but signs
    ``/bucket/``, and S3 accepts it; ``bucket_slash`` False gives ``/bucket`` as sent, for clients
    that sign the path as they send it."""
    path = req.raw_path.decode("latin-1") or "/"
    if host_bucket:
        path = f"/{host_bucket}{path}"
    if bucket_slash and _names_bucket(path):
        path += "/"
    return path + canonical_subresources(req.query_string)


def _names_bucket(path: str) -> bool:
    return path.count("/") == 1 and path != "/"


def string_to_sign(
    req: SignedRequest, time: str, host_bucket: str | None, *, presigned: bool = False, bucket_slash: bool = True
) -> str:
    """S3's SigV2 string to sign; ``time`` is its Date line (Date, "" or Expires)."""
    headers = headers_of(req)
    amz = req.headers
    if presigned:  # botocore moves the x-amz-* headers it signed into the URL; RGW reads them there too
        params = query_params(req.query_string) if req.query_string else {}
        amz = amz + [(name.lower(), v) for name, vs in params.items() if name.lower().startswith("x-amz-") for v in vs]
    return "\n".join(
        (
            req.method,
            headers.get("content-md5", "").strip(),
            headers.get("content-type", "").strip(),
            time,
            canonical_amz_headers(amz) + canonical_resource(req, host_bucket, bucket_slash=bucket_slash),
        )
    )


def sign(secret: str, text: bytes) -> str:
    return base64.b64encode(hmac.digest(secret.encode("utf-8"), text, "sha1")).decode("ascii")


def _candidates(req: SignedRequest, claim: _Claim, host_bucket: str | None) -> set[bytes]:
    """The bytes a client may have signed. The text as UTF-8 (botocore: a latin-1 header byte is
    its character, signed as UTF-8), or header values as their wire bytes (a client that sent
    UTF-8 bytes and signed them): the same unless a header carries non-ASCII. A bucket's
    resource with and without its final slash: the same unless the path is a bare ``/bucket``."""
    slashes = (True, False) if _names_bucket(req.raw_path.decode("latin-1")) and not host_bucket else (True,)
    texts = [string_to_sign(req, claim.time, host_bucket, presigned=claim.presigned, bucket_slash=s) for s in slashes]
    return {text.encode("utf-8") for text in texts} | {wire_bytes(text) for text in texts}


# ---- parsing and checking what the request claims ----


def _header_claim(headers: dict[str, str], now: datetime, max_skew: timedelta) -> _Claim:
    credential = headers["authorization"].strip()[len(PREFIX) :].strip()
    access_key, _, signature = credential.rpartition(":")
    if not access_key or not signature:
        raise InvalidArgument("AWS authorization header is invalid.  Expected AwsAccessKeyId:signature")
    amz_date = headers.get("x-amz-date")
    signed_at = _http_time(amz_date if amz_date is not None else headers.get("date"))
    if signed_at is None:
        raise AccessDenied("AWS authentication requires a valid Date or x-amz-date header")
    if abs(now - signed_at) > max_skew:
        raise RequestTimeTooSkewed()
    time = "" if amz_date is not None else headers["date"].strip()
    return _Claim(access_key, signature, time, presigned=False)


def _http_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)  # "-0000": UTC


def _query_claim(params: dict[str, list[str]], now: datetime) -> _Claim:
    if any(len(params.get(name, ())) != 1 for name in QUERY_PARAMETERS):
        raise AccessDenied("Query-string authentication requires the Signature, Expires and AWSAccessKeyId parameters")
    access_key, signature, expires = (params[name][0] for name in QUERY_PARAMETERS)
    if not expires.isascii() or not expires.isdigit():
        raise AccessDenied(f"Invalid date (should be seconds since epoch): {expires}")
    if now.timestamp() > int(expires):
        raise AccessDenied("Request has expired")
    return _Claim(access_key, signature, expires, presigned=True)


def authenticate(
    req: SignedRequest,
    secret_for: Callable[[str], str | None],
    now: datetime,
    *,
    max_skew: timedelta = timedelta(minutes=15),
    host_bucket: str | None = None,
) -> AuthContext:
    """Verify a request for which :func:`carries_sigv2` holds. ``host_bucket``: the bucket a
    virtual-host style Host names (None for path style); ``now`` aware or naive UTC. Raises the
    S3 error a client of S3 would see."""
    now = now if now.tzinfo else now.replace(tzinfo=UTC)
    headers = headers_of(req)
    params = query_params(req.query_string) if req.query_string else {}
    if "authorization" in headers:
        if "Signature" in params or any(name in params for name in QUERY_AUTH):
            raise InvalidArgument(ONE_MECHANISM)
        claim = _header_claim(headers, now, max_skew)
    else:
        claim = _query_claim(params, now)
    secret = secret_for(claim.access_key)
    if secret is None:
        raise InvalidAccessKeyId()
    provided = claim.signature.encode("utf-8", "replace")
    # every candidate is computed and compared, so the time taken does not say which matched
    matches = [hmac.compare_digest(sign(secret, c).encode(), provided) for c in _candidates(req, claim, host_bucket)]
    if not any(matches):
        raise SignatureDoesNotMatch()
    return AuthContext(
        access_key=claim.access_key,
        signing_key=b"",  # SigV2 has no chunk signatures to check with it
        scope="",
        amz_date="",
        signature=claim.signature,
        payload_hash=UNSIGNED_PAYLOAD,
        presigned=claim.presigned,
    )
