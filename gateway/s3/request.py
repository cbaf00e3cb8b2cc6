"""An incoming S3 request, read from the ASGI scope: bucket and key (path-style or
virtual-host-style), query, headers, and the S3 operation it names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote

from cachetier.errors import MethodNotAllowed, Unimplemented
from gateway.s3.errors import InvalidURI
from gateway.tenants import Tenant

# Subresources lakegate does not implement; S3 names them in the query string.
_UNSUPPORTED = frozenset(
    "acl policy cors lifecycle versioning tagging website logging notification replication "
    "encryption object-lock retention legal-hold torrent restore select accelerate analytics "
    "inventory metrics requestPayment ownershipControls publicAccessBlock intelligent-tiering "
    "policyStatus attributes versions".split()
)

# Request headers that ask for what lakegate does not implement, by prefix. Dropped, they would
# change what the client asked for without a word (an object stored unencrypted, unlocked or
# untagged, an SSE-C object readable without its key): refused, as the subresources are.
_UNSUPPORTED_HEADERS = (
    "x-amz-server-side-encryption",  # SSE-S3, SSE-KMS, SSE-C (-customer-*), and bucket keys
    "x-amz-copy-source-server-side-encryption",  # SSE-C of a copy's source
    "x-amz-object-lock-",  # mode, retain-until-date, legal-hold
    "x-amz-tagging",  # and x-amz-tagging-directive
)
_UNSUPPORTED_HEADER_ADVICE = {
    "x-amz-server-side-encryption": "; for encryption at rest, set the lake bucket's default encryption",
}


@dataclass
class S3Request:
    method: str
    bucket: str
    key: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names; repeated headers joined with ","
    raw_headers: list[tuple[str, str]]
    raw_path: bytes
    query_string: bytes
    operation: str = ""
    tenant: Tenant | None = None
    extra: dict[str, object] = field(default_factory=dict)
    virtual_host: bool = False  # the bucket came from the Host header (SigV2 signs it as /bucket)

    @property
    def resource(self) -> str:
        if not self.bucket:
            return "/"
        return f"/{self.bucket}/{self.key}" if self.key else f"/{self.bucket}"


def from_scope(scope: Mapping[str, Any], host_suffixes: tuple[str, ...]) -> S3Request:
    raw_headers = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in scope["headers"]]
    headers: dict[str, str] = {}
    for k, v in raw_headers:
        headers[k] = f"{headers[k]},{v}" if k in headers else v
    raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
    query_string: bytes = scope.get("query_string", b"")
    try:
        path = unquote(raw_path.decode("ascii"), errors="strict")
        query = dict(parse_qsl(query_string.decode("ascii"), keep_blank_values=True, errors="strict")) if query_string else {}
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidURI() from exc
    host_bucket = _bucket_from_host(headers.get("host", ""), host_suffixes)
    if host_bucket is not None:
        bucket, key = host_bucket, path[1:]
    else:
        bucket, _, key = path[1:].partition("/")
    req = S3Request(
        method=scope["method"],
        bucket=bucket,
        key=key,
        query=query,
        headers=headers,
        raw_headers=raw_headers,
        raw_path=raw_path,
        query_string=query_string,
        virtual_host=host_bucket is not None,
    )
    req.operation = operation(req)
    return req


def _bucket_from_host(host: str, suffixes: tuple[str, ...]) -> str | None:
    """``bucket.suffix[:port]`` -> bucket, for virtual-host-style requests."""
    name = host.rsplit(":", 1)[0].lower() if not host.startswith("[") else ""
    for suffix in suffixes:
        if name.endswith("." + suffix):
            return name[: -len(suffix) - 1]
    return None


def operation(req: S3Request) -> str:
    """The S3 operation a request names, as in the S3 API reference."""
    q, m = req.query, req.method
    if not req.bucket:
        if m in ("GET", "HEAD"):
            return "ListBuckets"
        raise MethodNotAllowed(resource="/")
    if _UNSUPPORTED & q.keys():
        raise Unimplemented(f"lakegate does not implement the {sorted(_UNSUPPORTED & q.keys())[0]} subresource")
    _refuse_unsupported_headers(req.headers)
    if q.get("versionId", "null") != "null":  # "null" names the one version an unversioned key has
        raise Unimplemented("lakegate does not implement object versions (versionId).", resource="versionId")
    if not req.key:
        return _bucket_operation(m, q)
    return _object_operation(m, q, "x-amz-copy-source" in req.headers)


def _refuse_unsupported_headers(headers: Mapping[str, str]) -> None:
    """501 NotImplemented for a header of ``_UNSUPPORTED_HEADERS`` (``x-amz-bucket-object-lock-
    enabled: true`` too): S3's answer to "a header you provided implies functionality that is not
    implemented", naming the header."""
    for name in headers:
        if name.startswith("x-amz-") and name.startswith(_UNSUPPORTED_HEADERS):
            family = next(prefix for prefix in _UNSUPPORTED_HEADERS if name.startswith(prefix))
            raise Unimplemented(f"lakegate does not implement {name}{_UNSUPPORTED_HEADER_ADVICE.get(family, '')}.",
                                resource=name)
    if headers.get("x-amz-bucket-object-lock-enabled", "").strip().lower() == "true":
        raise Unimplemented("lakegate does not implement object lock.", resource="x-amz-bucket-object-lock-enabled")


def _bucket_operation(m: str, q: dict[str, str]) -> str:
    if m == "GET":
        if "location" in q:
            return "GetBucketLocation"
        if "uploads" in q:
            return "ListMultipartUploads"
        return "ListObjectsV2" if q.get("list-type") == "2" else "ListObjects"
    if m == "POST" and "delete" in q:
        return "DeleteObjects"
    table = {"PUT": "CreateBucket", "HEAD": "HeadBucket", "DELETE": "DeleteBucket"}
    if m in table:
        return table[m]
    raise MethodNotAllowed()


def _object_operation(m: str, q: dict[str, str], copy: bool) -> str:
    part = "uploadId" in q and "partNumber" in q
    if m == "PUT":
        if part:
            return "UploadPartCopy" if copy else "UploadPart"
        return "CopyObject" if copy else "PutObject"
    if m == "GET":
        return "ListParts" if "uploadId" in q else "GetObject"
    if m == "HEAD":
        return "HeadObject"
    if m == "POST":
        if "uploads" in q:
            return "CreateMultipartUpload"
        if "uploadId" in q:
            return "CompleteMultipartUpload"
    if m == "DELETE":
        return "AbortMultipartUpload" if "uploadId" in q else "DeleteObject"
    raise MethodNotAllowed()
