"""S3 XML documents as the gateway speaks them: rendering responses and parsing request bodies.

The element shapes, escaping and parsing (defusedxml, so entity tricks cannot blow up memory)
are :mod:`cachetier.lake.xmlshapes`, shared with ``S3Lake``; what is here is how the gateway
assembles a whole answer (owners, url-encoding, markers) and that a request body which is not
the XML expected is ``MalformedXML``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from urllib.parse import quote

from cachetier.errors import MalformedXML
from cachetier.lake import DeleteOutcome, ListPage, ListQuery, PartsPage, UploadsPage, UploadsQuery
from cachetier.lake import xmlshapes
from cachetier.lake.xmlshapes import Encode, boolean, document, element, escape, timestamp

MAX_BODY = 1 << 20  # request XML documents are small; S3 also caps them


def _encoding(url_encode: bool) -> Encode:
    return (lambda s: quote(s, safe="/")) if url_encode else (lambda s: s)


def _who(tenant: str) -> str:
    return f"{element('ID', tenant)}{element('DisplayName', tenant)}"


def _owner(tenant: str) -> str:
    return f"<Owner>{_who(tenant)}</Owner>"


def list_buckets(buckets: Iterable[tuple[str, datetime]], tenant: str) -> bytes:
    items = "".join(xmlshapes.bucket(name, created) for name, created in buckets)
    return document("ListAllMyBucketsResult", [_owner(tenant), f"<Buckets>{items}</Buckets>"])


def location(region: str) -> bytes:
    return document("LocationConstraint", [escape(region)])


def list_objects(bucket: str, q: ListQuery, page: ListPage, *, url_encode: bool, owner: str | None) -> bytes:
    enc = _encoding(url_encode)
    out = [element("Name", bucket), element("Prefix", enc(q.prefix))]
    if q.v2:
        if q.continuation_token is not None:
            out.append(element("ContinuationToken", q.continuation_token))
        if q.start_after:
            out.append(element("StartAfter", enc(q.start_after)))
        out.append(element("KeyCount", len(page.entries) + len(page.common_prefixes)))
    else:
        out.append(element("Marker", enc(q.marker)))
    out.append(element("MaxKeys", q.max_keys))
    if q.delimiter:
        out.append(element("Delimiter", enc(q.delimiter)))
    if url_encode:
        out.append(element("EncodingType", "url"))
    out.append(element("IsTruncated", boolean(page.is_truncated)))
    if page.is_truncated:
        if q.v2 and page.next_continuation_token:
            out.append(element("NextContinuationToken", page.next_continuation_token))
        elif not q.v2 and q.delimiter and page.next_marker is not None:
            out.append(element("NextMarker", enc(page.next_marker)))
    owned = _owner(owner) if owner else ""
    out += [xmlshapes.contents(e, enc, owned) for e in page.entries]
    out += [xmlshapes.common_prefix(p, enc) for p in page.common_prefixes]
    return document("ListBucketResult", out)


def copy_result(root: str, etag: str, last_modified: datetime | None) -> bytes:
    lm = element("LastModified", timestamp(last_modified)) if last_modified else ""
    return document(root, [lm, element("ETag", etag)])


def initiate_multipart(bucket: str, key: str, upload_id: str) -> bytes:
    return document(
        "InitiateMultipartUploadResult", [element("Bucket", bucket), element("Key", key), element("UploadId", upload_id)]
    )


def complete_multipart(location_url: str, bucket: str, key: str, etag: str) -> bytes:
    return document(
        "CompleteMultipartUploadResult",
        [element("Location", location_url), element("Bucket", bucket), element("Key", key), element("ETag", etag)],
    )


def list_parts(bucket: str, key: str, upload_id: str, page: PartsPage, tenant: str) -> bytes:
    out = [
        element("Bucket", bucket),
        element("Key", key),
        element("UploadId", upload_id),
        f"<Initiator>{_who(tenant)}</Initiator>",
        _owner(tenant),
        element("StorageClass", "STANDARD"),
        element("PartNumberMarker", page.part_number_marker),
    ]
    if page.next_part_number_marker is not None:
        out.append(element("NextPartNumberMarker", page.next_part_number_marker))
    out += [element("MaxParts", page.max_parts), element("IsTruncated", boolean(page.is_truncated))]
    out += [xmlshapes.part(p) for p in page.parts]
    return document("ListPartsResult", out)


def list_uploads(bucket: str, q: UploadsQuery, page: UploadsPage, tenant: str, *, url_encode: bool) -> bytes:
    enc = _encoding(url_encode)
    out = [element("Bucket", bucket), element("KeyMarker", enc(q.key_marker)), element("UploadIdMarker", q.upload_id_marker)]
    if page.next_key_marker is not None:
        out.append(element("NextKeyMarker", enc(page.next_key_marker)))
    if page.next_upload_id_marker is not None:
        out.append(element("NextUploadIdMarker", page.next_upload_id_marker))
    out += [element("Prefix", enc(q.prefix))]
    if q.delimiter:
        out.append(element("Delimiter", enc(q.delimiter)))
    out += [element("MaxUploads", q.max_uploads), element("IsTruncated", boolean(page.is_truncated))]
    if url_encode:
        out.append(element("EncodingType", "url"))
    out += [xmlshapes.upload(u, enc, _who(tenant)) for u in page.uploads]
    out += [xmlshapes.common_prefix(p, enc) for p in page.common_prefixes]
    return document("ListMultipartUploadsResult", out)


def delete_result(outcomes: list[DeleteOutcome], quiet: bool) -> bytes:
    shown = (o for o in outcomes if not (quiet and o.code is None))  # quiet: only the failures
    return document("DeleteResult", [xmlshapes.delete_outcome(o) for o in shown])


# ---- request bodies -------------------------------------------------------------------------


@contextmanager
def _malformed() -> Iterator[None]:
    """A request body that is not the XML S3 documents is the client's MalformedXML."""
    try:
        yield
    except xmlshapes.ShapeError as exc:
        raise MalformedXML() from exc


def parse_complete_multipart(body: bytes) -> list[tuple[int, str]]:
    with _malformed():
        return xmlshapes.read_complete_request(body)


def parse_delete(body: bytes) -> tuple[list[str], bool]:
    with _malformed():
        return xmlshapes.read_delete_request(body)


def parse_create_bucket(body: bytes) -> str | None:
    with _malformed():
        return xmlshapes.read_create_bucket_request(body)
