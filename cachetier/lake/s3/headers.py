"""The lake's own header protocol, as ``S3Lake`` speaks it: the request headers that carry
object attributes, conditions, copy sources and ranges to the lake, and the lake's response
headers read back into :class:`ObjectInfo`, :class:`WriteResult` and error fields.

(Reading a *client's* request headers is the gateway's: :mod:`gateway.s3.headers`.) Header
values are str holding the header's bytes as latin-1, as in :mod:`cachetier.lake.s3.client`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime
from urllib.parse import quote

import httpx2

from cachetier.errors import InvalidPartNumber, ServiceUnavailable, Unimplemented
from cachetier.lake import STORED_HEADERS, CopySource, ObjectAttributes, ObjectInfo, ObjectPart, WriteResult
from cachetier.lake.conditions import Conditions
from cachetier.lake.ranges import ByteRange
from cachetier.lake.xmlshapes import quoted

# Response headers kept in ObjectInfo.headers besides STORED_HEADERS and x-amz-checksum-*.
_INFO_HEADERS = ("x-amz-version-id", "x-amz-storage-class", "x-amz-mp-parts-count")
# Asks S3 to return stored checksums on GET/HEAD (AWS only does when asked).
CHECKSUM_MODE = {"x-amz-checksum-mode": "ENABLED"}


def response_headers(response: httpx2.Response) -> dict[str, str]:
    """The response headers, lower-case names, values as latin-1 str (repeats joined)."""
    out: dict[str, str] = {}
    for raw_name, raw_value in response.headers.raw:
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        out[name] = f"{out[name]}, {value}" if name in out else value
    return out


def _is_stored(name: str) -> bool:
    return name in STORED_HEADERS or name.startswith("x-amz-checksum-")


def attribute_headers(attrs: ObjectAttributes) -> dict[str, str]:
    """Request headers that store ``attrs``. Other ``attrs.headers`` (anything not a stored
    representation header, checksum or storage class) are not forwarded to the lake."""
    headers = {}
    if attrs.content_type is not None:
        headers["content-type"] = attrs.content_type
    for name, value in attrs.metadata.items():
        headers["x-amz-meta-" + name.lower()] = value
    for name, value in attrs.headers.items():
        if _is_stored(name.lower()) or name.lower() == "x-amz-storage-class":
            headers[name.lower()] = value
    return headers


def _http_date(value: datetime) -> str:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return format_datetime(value.astimezone(UTC), usegmt=True)


def condition_headers(conditions: Conditions, prefix: str) -> dict[str, str]:
    """``if-*`` headers (``prefix`` ``""``) or their ``x-amz-copy-source-if-*`` twins."""
    headers = {}
    if conditions.if_match is not None:
        headers[prefix + "if-match"] = conditions.if_match
    if conditions.if_none_match is not None:
        headers[prefix + "if-none-match"] = conditions.if_none_match
    if conditions.if_modified_since is not None:
        headers[prefix + "if-modified-since"] = _http_date(conditions.if_modified_since)
    if conditions.if_unmodified_since is not None:
        headers[prefix + "if-unmodified-since"] = _http_date(conditions.if_unmodified_since)
    return headers


def write_condition_headers(conditions: Conditions) -> dict[str, str]:
    """A conditional write's ``If-Match`` / ``If-None-Match: *`` for the lake, which decides it
    (atomically, where it implements conditional writes: AWS S3, MinIO, Ceph RGW's PUT)."""
    headers = {}
    if conditions.if_match is not None:
        tags = conditions.if_match.strip()
        # Ceph RGW 16.2 compares a write's If-Match with its ETag unquoted (a quoted one always
        # fails): one ETag goes without its quotes, as AWS S3 takes it too
        headers["if-match"] = tags if "," in tags else tags.strip('"')
    if conditions.if_none_match is not None:
        headers["if-none-match"] = conditions.if_none_match
    return headers


def lake_conditions(conditions: Conditions) -> Conditions:
    """The conditions a GET sends the lake; ``get_object`` checks all of them again on the
    answer. Ceph RGW 16.2 compares If-Match / If-None-Match as one opaque string, failing
    ``*`` and lists of ETags: those stay here, with the date each one overrides."""

    def plain(etags: str | None) -> bool:
        return etags is not None and "," not in etags and etags.strip() != "*"

    if_match = conditions.if_match if plain(conditions.if_match) else None
    if_none_match = conditions.if_none_match if plain(conditions.if_none_match) else None
    return Conditions(
        if_match=if_match,
        if_none_match=if_none_match,
        if_unmodified_since=conditions.if_unmodified_since if conditions.if_match is None else None,
        if_modified_since=conditions.if_modified_since if conditions.if_none_match is None else None,
    )


def copy_source_headers(source: CopySource) -> dict[str, str]:
    headers = {"x-amz-copy-source": f"/{quote(source.bucket, safe='')}/{quote(source.key, safe='/~')}"}
    headers.update(condition_headers(source.conditions, "x-amz-copy-source-"))
    # Ceph RGW 16.2 ignores the documented x-amz-copy-source-if-* and reads x-amz-copy-if-*
    # instead; S3 ignores x-amz headers it does not know, so both are sent.
    headers.update(condition_headers(source.conditions, "x-amz-copy-"))
    return headers


def int_header(headers: Mapping[str, str], name: str) -> int:
    try:
        return int(headers[name])
    except (KeyError, ValueError):
        raise ServiceUnavailable(f"The lake sent no valid {name}.") from None


def parse_content_range(value: str) -> tuple[int, int, int]:
    """(first, last, size) of ``bytes first-last/size``."""
    try:
        unit, _, spec = value.strip().partition(" ")
        span, _, size = spec.partition("/")
        first, _, last = span.partition("-")
        if unit != "bytes":
            raise ValueError(unit)
        return int(first), int(last), int(size)
    except ValueError:
        raise ServiceUnavailable("The lake sent an invalid Content-Range.") from None


def http_datetime(value: str | None) -> datetime | None:
    """An HTTP date header's time, aware, in UTC; None when absent or unparseable."""
    try:
        parsed = parsedate_to_datetime(value) if value else None
    except (TypeError, ValueError):
        parsed = None
    if parsed is None:
        return None
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def last_modified(headers: Mapping[str, str]) -> datetime:
    # S3 always sends one; a lake that does not is "just now"
    return http_datetime(headers.get("last-modified")) or datetime.now(UTC)


def unsatisfied_size(headers: Mapping[str, str]) -> int | None:
    """The object size a 416's ``Content-Range: bytes */size`` tells, if it does."""
    unit, _, spec = headers.get("content-range", "").strip().partition(" ")
    span, _, size = spec.partition("/")
    if unit != "bytes" or span != "*" or not size.isdigit():
        return None
    return int(size)


def range_header(range: ByteRange) -> str:
    """``range`` as a ``Range`` (or ``x-amz-copy-source-range``) header's value."""
    if range.suffix is not None:
        return f"bytes=-{range.suffix}"
    return f"bytes={range.first}-{'' if range.last is None else range.last}"


def object_info(bucket: str, key: str, headers: Mapping[str, str], size: int) -> ObjectInfo:
    return ObjectInfo(
        bucket=bucket,
        key=key,
        size=size,
        etag=quoted(headers.get("etag", "")),
        last_modified=last_modified(headers),
        content_type=headers.get("content-type", "binary/octet-stream"),
        metadata={n[len("x-amz-meta-") :]: v for n, v in headers.items() if n.startswith("x-amz-meta-")},
        headers={n: v for n, v in headers.items() if _is_stored(n) or n in _INFO_HEADERS},
    )


def object_part(bucket: str, key: str, number: int, status: int, headers: Mapping[str, str]) -> ObjectPart:
    """The part a HEAD ``?partNumber=`` answered for: 206 with the part's Content-Range (and
    x-amz-mp-parts-count when the object has parts), as S3 answers; or 200 with the whole object,
    from a lake that ignores partNumber (Ceph RGW releases before it implemented partNumber on
    GET/HEAD; which release that was is unverified here)."""
    if status == 206:
        first, last, size = parse_content_range(headers.get("content-range", ""))
        count = headers.get("x-amz-mp-parts-count")
        parts = int_header(headers, "x-amz-mp-parts-count") if count is not None else None
        return ObjectPart(object_info(bucket, key, headers, size), number, first, last, parts)
    info = object_info(bucket, key, headers, int_header(headers, "content-length"))
    if number == 1:
        # Part 1 is the whole object: as AWS answers for an object not uploaded in parts, and, for
        # one that was, what the lake itself serves (with no parts count, an SDK's multipart
        # download then reads it whole, as it would from the lake directly).
        return ObjectPart(info, 1, 0, info.size - 1, None)
    if "-" in info.etag:  # uploaded in parts, but the lake did not say where they lie
        raise Unimplemented("The lake does not serve an object's parts by number.")
    raise InvalidPartNumber()


def write_result(response: httpx2.Response) -> WriteResult:
    headers = response_headers(response)
    kept = {n: v for n, v in headers.items() if n.startswith("x-amz-checksum-") or n == "x-amz-version-id"}
    return WriteResult(etag=quoted(headers.get("etag", "")), headers=kept)
