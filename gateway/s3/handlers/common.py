"""What handlers share: the per-request context, header <-> attribute mapping, argument parsing."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import unquote

from cachetier.errors import (
    AccessDenied,
    InvalidArgument,
    InvalidBucketName,
    InvalidRequest,
    KeyTooLongError,
    Unimplemented,
)
from cachetier.lake import CHECKSUM_HEADERS, STORED_HEADERS, CopySource, Lake, ObjectAttributes, ObjectInfo
from gateway.s3 import numbers
from gateway.s3.body import RequestBody
from gateway.s3.headers import byte_range, conditions
from gateway.s3.request import S3Request
from gateway.s3.response import Response, http_date
from gateway.tenants import Tenant


@dataclass
class Call:
    """One S3 call as a handler sees it."""

    lake: Lake
    req: S3Request
    body: RequestBody
    tenant: Tenant

    @property
    def bucket(self) -> str:
        return self.req.bucket

    @property
    def key(self) -> str:
        return self.req.key


Handler = Callable[[Call], Awaitable[Response]]

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_IP = re.compile(r"^\d+\.\d+\.\d+\.\d+$")


def check_bucket_name(name: str) -> None:
    if not _BUCKET.match(name) or ".." in name or _IP.match(name) or ".-" in name or "-." in name:
        raise InvalidBucketName(resource=f"/{name}")


def check_key(key: str) -> None:
    if len(key.encode()) > 1024:
        raise KeyTooLongError()


def int_arg(q: dict[str, str], name: str, default: int, lo: int = 0, hi: int | None = None) -> int:
    raw = q.get(name)
    if raw is None or raw == "":
        return default
    value = numbers.decimal(raw, name)
    if value < lo:
        raise InvalidArgument(f"{name} must be at least {lo}")
    return min(value, hi) if hi is not None else value


def url_encoding(q: dict[str, str]) -> bool:
    enc = q.get("encoding-type")
    if enc is None:
        return False
    if enc.lower() != "url":
        raise InvalidArgument("Invalid Encoding Method specified in Request")
    return True


def attributes(headers: dict[str, str], *, with_checksums: bool = False) -> ObjectAttributes:
    """What a PUT / CreateMultipartUpload / REPLACE copy sets on the object. With checksums, the
    x-amz-checksum-* headers are included (``RequestBody.payload`` verifies them and adds
    trailing ones to the same dict when the body ends)."""
    meta = {k[11:]: v for k, v in headers.items() if k.startswith("x-amz-meta-")}
    stored = {k: headers[k] for k in STORED_HEADERS if k in headers}
    # the aws-chunked content-coding belongs to the transfer, not to the object
    enc = stored.get("content-encoding")
    if enc is not None:
        kept = [e for e in (p.strip() for p in enc.split(",")) if e and e.lower() != "aws-chunked"]
        if kept:
            stored["content-encoding"] = ",".join(kept)
        else:
            del stored["content-encoding"]
    if with_checksums:
        stored.update((k, headers[k]) for k in CHECKSUM_HEADERS if k in headers)
    return ObjectAttributes(
        content_type=headers.get("content-type"),
        metadata=meta,
        headers=stored,
    )


def object_headers(info: ObjectInfo, req: S3Request, *, served: tuple[int, int] | None) -> dict[str, str]:
    """Response headers describing an object, as S3 sends them on GET and HEAD (names in
    lower case, so that a response-* override replaces the stored header, not adds to it);
    ``served`` is the inclusive byte range answered with 206, None for the whole object."""
    h = {
        "last-modified": http_date(info.last_modified),
        "etag": info.etag,
        "content-type": info.content_type,
        "accept-ranges": "bytes",
    }
    checksum_mode = req.headers.get("x-amz-checksum-mode", "").upper() == "ENABLED"
    for name, value in info.headers.items():
        if name in CHECKSUM_HEADERS and not (checksum_mode and served is None):
            continue
        h[name] = value
    for name, value in info.metadata.items():
        h[f"x-amz-meta-{name}"] = value
    for param, header in _OVERRIDES.items():
        if param in req.query:
            h[header] = req.query[param]  # checked by check_overrides
    if served is not None:
        h["content-range"] = f"bytes {served[0]}-{served[1]}/{info.size}"
    return h


_OVERRIDES = {f"response-{name}": name for name in (
    "content-type", "content-language", "expires", "cache-control", "content-disposition", "content-encoding"
)}


def check_overrides(call: Call) -> None:
    """Refuse what the response-* overrides may not do, before the object is read: S3 honours
    them on signed requests only (an anonymous reader of a public bucket may not make it serve
    an object as, say, inline HTML), and no value may break the header it is echoed into."""
    asked = _OVERRIDES.keys() & call.req.query.keys()
    if asked and call.tenant.anonymous:
        raise InvalidRequest("Request specific response headers cannot be used for anonymous GET requests.")
    for param in sorted(asked):
        numbers.header_value(call.req.query[param], param)


def copy_source(call: Call, *, with_range: bool) -> CopySource:
    raw = call.req.headers["x-amz-copy-source"]
    path, _, version = raw.partition("?")
    if version:
        raise Unimplemented("lakegate does not support versioned copy sources")
    bucket, _, key = unquote(path).lstrip("/").partition("/")
    if not bucket or not key:
        raise InvalidArgument("Copy Source must mention the source bucket and key: sourcebucket/sourcekey")
    if not call.tenant.may_use(bucket):
        raise AccessDenied(resource=f"/{bucket}/{key}")
    h = call.req.headers
    cond = conditions(h, "x-amz-copy-source-")
    rng = None
    if with_range and "x-amz-copy-source-range" in h:
        rng = byte_range(h["x-amz-copy-source-range"])
        if rng is None or rng.suffix is not None or rng.last is None:
            raise InvalidArgument("The x-amz-copy-source-range value must be of the form bytes=first-last")
    return CopySource(bucket=bucket, key=key, conditions=cond, range=rng)
