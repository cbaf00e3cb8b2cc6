"""S3 XML documents: rendering responses and parsing request bodies.

Rendering is plain string building (it is on the hot path of every listing); parsing request
bodies uses defusedxml so that entity tricks cannot blow up memory.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from urllib.parse import quote
from xml.etree.ElementTree import Element, ParseError
from xml.sax.saxutils import escape

from defusedxml import ElementTree as SafeET
from defusedxml.common import DefusedXmlException

from cachetier.errors import MalformedXML
from cachetier.lake import DeleteOutcome, ListPage, ListQuery, PartsPage, UploadsPage, UploadsQuery

XMLNS = "http://s3.amazonaws.com/doc/2006-03-01/"
HEAD = '<?xml version="1.0" encoding="UTF-8"?>\n'
MAX_BODY = 1 << 20  # request XML documents are small; S3 also caps them


def iso(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def _el(name: str, value: object) -> str:
    return f"<{name}>{escape(str(value))}</{name}>"


def _doc(root: str, body: Iterable[str]) -> bytes:
    return (HEAD + f'<{root} xmlns="{XMLNS}">' + "".join(body) + f"</{root}>").encode()


def _owner(tenant: str) -> str:
    return f"<Owner>{_el('ID', tenant)}{_el('DisplayName', tenant)}</Owner>"


def _bool(v: bool) -> str:
    return "true" if v else "false"


def list_buckets(buckets: Iterable[tuple[str, datetime]], tenant: str) -> bytes:
    items = "".join(f"<Bucket>{_el('Name', n)}{_el('CreationDate', iso(c))}</Bucket>" for n, c in buckets)
    return _doc("ListAllMyBucketsResult", [_owner(tenant), f"<Buckets>{items}</Buckets>"])


def location(region: str) -> bytes:
    return (HEAD + f'<LocationConstraint xmlns="{XMLNS}">{escape(region)}</LocationConstraint>').encode()


def list_objects(bucket: str, q: ListQuery, page: ListPage, *, url_encode: bool, owner: str | None) -> bytes:
    enc = (lambda s: quote(s, safe="/")) if url_encode else (lambda s: s)
    out = [_el("Name", bucket), _el("Prefix", enc(q.prefix))]
    if q.v2:
        if q.continuation_token is not None:
            out.append(_el("ContinuationToken", q.continuation_token))
        if q.start_after:
            out.append(_el("StartAfter", enc(q.start_after)))
        out.append(_el("KeyCount", len(page.entries) + len(page.common_prefixes)))
    else:
        out.append(_el("Marker", enc(q.marker)))
    out.append(_el("MaxKeys", q.max_keys))
    if q.delimiter:
        out.append(_el("Delimiter", enc(q.delimiter)))
    if url_encode:
        out.append(_el("EncodingType", "url"))
    out.append(_el("IsTruncated", _bool(page.is_truncated)))
    if page.is_truncated:
        if q.v2 and page.next_continuation_token:
            out.append(_el("NextContinuationToken", page.next_continuation_token))
        elif not q.v2 and q.delimiter and page.next_marker is not None:
            out.append(_el("NextMarker", enc(page.next_marker)))
    for e in page.entries:
        out.append(
            "<Contents>"
            + _el("Key", enc(e.key))
            + _el("LastModified", iso(e.last_modified))
            + _el("ETag", e.etag)
            + _el("Size", e.size)
            + _el("StorageClass", e.storage_class)
            + (_owner(owner) if owner else "")
            + "</Contents>"
        )
    for p in page.common_prefixes:
        out.append(f"<CommonPrefixes>{_el('Prefix', enc(p))}</CommonPrefixes>")
    return _doc("ListBucketResult", out)


def copy_result(root: str, etag: str, last_modified: datetime | None) -> bytes:
    lm = _el("LastModified", iso(last_modified)) if last_modified else ""
    return _doc(root, [lm, _el("ETag", etag)])


def initiate_multipart(bucket: str, key: str, upload_id: str) -> bytes:
    return _doc("InitiateMultipartUploadResult", [_el("Bucket", bucket), _el("Key", key), _el("UploadId", upload_id)])


def complete_multipart(location_url: str, bucket: str, key: str, etag: str) -> bytes:
    return _doc(
        "CompleteMultipartUploadResult",
        [_el("Location", location_url), _el("Bucket", bucket), _el("Key", key), _el("ETag", etag)],
    )


def list_parts(bucket: str, key: str, upload_id: str, page: PartsPage, tenant: str) -> bytes:
    out = [
        _el("Bucket", bucket),
        _el("Key", key),
        _el("UploadId", upload_id),
        f"<Initiator>{_el('ID', tenant)}{_el('DisplayName', tenant)}</Initiator>",
        _owner(tenant),
        _el("StorageClass", "STANDARD"),
        _el("PartNumberMarker", page.part_number_marker),
    ]
    if page.next_part_number_marker is not None:
        out.append(_el("NextPartNumberMarker", page.next_part_number_marker))
    out += [_el("MaxParts", page.max_parts), _el("IsTruncated", _bool(page.is_truncated))]
    for p in page.parts:
        out.append(
            f"<Part>{_el('PartNumber', p.part_number)}{_el('LastModified', iso(p.last_modified))}"
            f"{_el('ETag', p.etag)}{_el('Size', p.size)}</Part>"
        )
    return _doc("ListPartsResult", out)


def list_uploads(bucket: str, q: UploadsQuery, page: UploadsPage, tenant: str, *, url_encode: bool) -> bytes:
    enc = (lambda s: quote(s, safe="/")) if url_encode else (lambda s: s)
    out = [_el("Bucket", bucket), _el("KeyMarker", enc(q.key_marker)), _el("UploadIdMarker", q.upload_id_marker)]
    if page.next_key_marker is not None:
        out.append(_el("NextKeyMarker", enc(page.next_key_marker)))
    if page.next_upload_id_marker is not None:
        out.append(_el("NextUploadIdMarker", page.next_upload_id_marker))
    out += [_el("Prefix", enc(q.prefix))]
    if q.delimiter:
        out.append(_el("Delimiter", enc(q.delimiter)))
    out += [_el("MaxUploads", q.max_uploads), _el("IsTruncated", _bool(page.is_truncated))]
    if url_encode:
        out.append(_el("EncodingType", "url"))
    for u in page.uploads:
        who = f"{_el('ID', tenant)}{_el('DisplayName', tenant)}"
        out.append(
            f"<Upload>{_el('Key', enc(u.key))}{_el('UploadId', u.upload_id)}<Initiator>{who}</Initiator>"
            f"<Owner>{who}</Owner>{_el('StorageClass', 'STANDARD')}{_el('Initiated', iso(u.initiated))}</Upload>"
        )
    for p in page.common_prefixes:
        out.append(f"<CommonPrefixes>{_el('Prefix', enc(p))}</CommonPrefixes>")
    return _doc("ListMultipartUploadsResult", out)


def delete_result(outcomes: list[DeleteOutcome], quiet: bool) -> bytes:
    out = []
    for o in outcomes:
        if o.code is None:
            if not quiet:
                out.append(f"<Deleted>{_el('Key', o.key)}</Deleted>")
        else:
            out.append(f"<Error>{_el('Key', o.key)}{_el('Code', o.code)}{_el('Message', o.message or '')}</Error>")
    return _doc("DeleteResult", out)


# ---- request bodies -------------------------------------------------------------------------


def _parse(body: bytes, root: str) -> Element:
    try:
        doc = SafeET.fromstring(body)
    except (ParseError, DefusedXmlException, ValueError) as exc:
        raise MalformedXML() from exc
    if _local(doc.tag) != root:
        raise MalformedXML()
    return doc


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _children(el: Element, name: str) -> list[Element]:
    return [c for c in el if _local(c.tag) == name]


def _text(el: Element, name: str) -> str | None:
    found = _children(el, name)
    return (found[0].text or "") if found else None


def parse_complete_multipart(body: bytes) -> list[tuple[int, str]]:
    doc = _parse(body, "CompleteMultipartUpload")
    parts = []
    for part in _children(doc, "Part"):
        number, etag = _text(part, "PartNumber"), _text(part, "ETag")
        if number is None or etag is None or not number.strip().isdigit():
            raise MalformedXML()
        parts.append((int(number), etag.strip()))
    if not parts:
        raise MalformedXML()
    return parts


def parse_delete(body: bytes) -> tuple[list[str], bool]:
    doc = _parse(body, "Delete")
    keys = []
    for obj in _children(doc, "Object"):
        key = _text(obj, "Key")
        if key is None:
            raise MalformedXML()
        keys.append(key)
    if not keys or len(keys) > 1000:
        raise MalformedXML()
    return keys, (_text(doc, "Quiet") or "").strip().lower() == "true"


def parse_create_bucket(body: bytes) -> str | None:
    if not body.strip():
        return None
    doc = _parse(body, "CreateBucketConfiguration")
    loc = _text(doc, "LocationConstraint")
    return loc.strip() if loc else None
