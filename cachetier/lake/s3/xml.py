"""The XML bodies of S3's REST API, as ``S3Lake`` reads and writes them: parsing a lake's
answers into the types of :mod:`cachetier.lake`, and building the few request bodies S3 takes.

Parsing ignores namespaces (Ceph RGW sends its listings in S3's and its errors in none) and
goes through defusedxml: a lake's answer is input like any other. A body that is not the XML
expected raises ``LakeXMLError``; ``S3Lake`` maps it at the lake boundary.
"""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import unquote_plus
from xml.etree.ElementTree import Element, ParseError

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import fromstring

from cachetier.lake import (
    BucketInfo,
    DeleteOutcome,
    ListEntry,
    ListPage,
    PartInfo,
    PartsPage,
    UploadInfo,
    UploadsPage,
)

S3_NAMESPACE = "http://s3.amazonaws.com/doc/2006-03-01/"
_DECLARATION = '<?xml version="1.0" encoding="UTF-8"?>'


class LakeXMLError(ValueError):
    """A lake answer that is not the XML S3 documents."""


class ErrorDocument(Exception):
    """A lake answer that is an S3 ``<Error>`` document: (code, message)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message


def parse(body: bytes) -> Element:
    """The root element of a lake's XML answer, namespaces stripped from every tag.

    Raises ``ErrorDocument`` for an ``<Error>`` root, whatever the status: S3 answers 200 to a
    copy or complete that fails after the status was sent, with the error as the body.
    """
    # S3 keeps a long copy or complete alive by sending whitespace before the XML
    # declaration, which a parser would reject.
    try:
        root = fromstring(body.lstrip())
    except (ParseError, DefusedXmlException) as exc:
        raise LakeXMLError(f"the lake sent malformed XML ({exc})") from exc
    for element in root.iter():
        if isinstance(element.tag, str) and element.tag.startswith("{"):
            element.tag = element.tag.split("}", 1)[1]
    if root.tag == "Error":
        raise ErrorDocument(root.findtext("Code") or "", root.findtext("Message") or "")
    return root


def parse_timestamp(text: str | None) -> datetime:
    """An ISO 8601 timestamp from a listing (``2024-05-01T12:00:00.000Z``), aware, in UTC."""
    if not text:
        raise LakeXMLError("the lake sent no timestamp where S3 always sends one")
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError as exc:
        raise LakeXMLError(f"the lake sent an invalid timestamp {text!r}") from exc
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def quoted(etag: str) -> str:
    """An ETag as S3 sends it, in double quotes (Ceph RGW 16.2 leaves them off in copy
    results); an empty one stays empty."""
    etag = etag.strip()
    if not etag or (len(etag) >= 2 and etag.startswith('"') and etag.endswith('"')):
        return etag
    return f'"{etag}"'


def _int(element: Element, path: str, default: int = 0) -> int:
    text = element.findtext(path)
    if not text:
        return default
    try:
        return int(text)
    except ValueError as exc:
        raise LakeXMLError(f"the lake sent a non-integer {path} {text!r}") from exc


def _bool(element: Element, path: str) -> bool:
    return (element.findtext(path) or "").strip().lower() == "true"


def _decode(text: str) -> str:
    """A key or prefix of a listing lakegate asked for with ``encoding-type=url`` (so keys
    with characters XML cannot carry survive). S3 encodes a space as ``+`` and a plus as
    ``%2B``, hence ``unquote_plus``, as botocore does. Decoding does not wait for the answer
    to echo ``<EncodingType>``: Ceph RGW 16.2 encodes upload listings without echoing it."""
    return unquote_plus(text)


def _next_marker(sent: str, last_key: str | None, last_prefix: str | None) -> str:
    """A listing's next key marker. S3 url-encodes it too, but Ceph RGW 16.2 sends it raw; as
    it is always the page's last key or common prefix, the raw form is kept when it is one."""
    if sent in (last_key, last_prefix):
        return sent
    return _decode(sent)


def parse_list_buckets(body: bytes) -> list[BucketInfo]:
    root = parse(body)
    return [
        BucketInfo(name=b.findtext("Name") or "", created=parse_timestamp(b.findtext("CreationDate")))
        for b in root.iterfind("Buckets/Bucket")
    ]


def parse_location(body: bytes) -> str:
    """``<LocationConstraint>`` text; an empty element (us-east-1 on AWS) is ``""``."""
    return (parse(body).text or "").strip()


def parse_list_objects(body: bytes, v2: bool) -> ListPage:
    root = parse(body)
    entries = [
        ListEntry(
            key=_decode(c.findtext("Key") or ""),
            size=_int(c, "Size"),
            etag=quoted(c.findtext("ETag") or ""),
            last_modified=parse_timestamp(c.findtext("LastModified")),
            storage_class=c.findtext("StorageClass") or "STANDARD",
        )
        for c in root.iterfind("Contents")
    ]
    prefixes = [_decode(p.findtext("Prefix") or "") for p in root.iterfind("CommonPrefixes")]
    truncated = _bool(root, "IsTruncated")
    next_marker = root.findtext("NextMarker")
    token = root.findtext("NextContinuationToken")
    if truncated and not v2 and next_marker:
        last_key = entries[-1].key if entries else None
        next_marker = _next_marker(next_marker, last_key, prefixes[-1] if prefixes else None)
    return ListPage(
        entries=entries,
        common_prefixes=prefixes,
        is_truncated=truncated,
        next_marker=next_marker if truncated and not v2 and next_marker else None,
        next_continuation_token=token if truncated and v2 and token else None,
    )


def parse_copy_result(body: bytes) -> tuple[str, datetime | None]:
    """(ETag, LastModified) of a ``CopyObjectResult`` or ``CopyPartResult``."""
    root = parse(body)
    etag = root.findtext("ETag")
    if not etag:
        raise LakeXMLError(f"the lake answered a copy with <{root.tag}> and no ETag")
    modified = root.findtext("LastModified")
    return quoted(etag), parse_timestamp(modified) if modified else None


def parse_delete_result(body: bytes) -> list[DeleteOutcome]:
    root = parse(body)
    outcomes = []
    for element in root:
        if element.tag == "Deleted":
            outcomes.append(DeleteOutcome(key=element.findtext("Key") or ""))
        elif element.tag == "Error":
            outcomes.append(
                DeleteOutcome(
                    key=element.findtext("Key") or "",
                    code=element.findtext("Code") or "InternalError",
                    message=element.findtext("Message") or None,
                )
            )
    return outcomes


def parse_upload_id(body: bytes) -> str:
    upload_id = parse(body).findtext("UploadId")
    if not upload_id:
        raise LakeXMLError("the lake answered CreateMultipartUpload without an UploadId")
    return upload_id


def parse_complete_etag(body: bytes) -> str:
    """The ETag of a ``CompleteMultipartUploadResult``; ``""`` when the lake left it empty
    (Ceph RGW 16.2 does)."""
    return quoted(parse(body).findtext("ETag") or "")


def parse_list_parts(body: bytes) -> PartsPage:
    root = parse(body)
    parts = [
        PartInfo(
            part_number=_int(p, "PartNumber"),
            etag=quoted(p.findtext("ETag") or ""),
            size=_int(p, "Size"),
            last_modified=parse_timestamp(p.findtext("LastModified")),
        )
        for p in root.iterfind("Part")
    ]
    truncated = _bool(root, "IsTruncated")
    return PartsPage(
        parts=parts,
        is_truncated=truncated,
        next_part_number_marker=_int(root, "NextPartNumberMarker") if truncated else None,
        part_number_marker=_int(root, "PartNumberMarker"),
        max_parts=_int(root, "MaxParts", 1000),
    )


def parse_list_uploads(body: bytes) -> UploadsPage:
    root = parse(body)
    uploads = [
        UploadInfo(
            key=_decode(u.findtext("Key") or ""),
            upload_id=u.findtext("UploadId") or "",
            initiated=parse_timestamp(u.findtext("Initiated")),
        )
        for u in root.iterfind("Upload")
    ]
    prefixes = [_decode(p.findtext("Prefix") or "") for p in root.iterfind("CommonPrefixes")]
    truncated = _bool(root, "IsTruncated")
    next_key = root.findtext("NextKeyMarker")
    if truncated and next_key:
        last_key = uploads[-1].key if uploads else None
        next_key = _next_marker(next_key, last_key, prefixes[-1] if prefixes else None)
    next_upload = root.findtext("NextUploadIdMarker")
    return UploadsPage(
        uploads=uploads,
        common_prefixes=prefixes,
        is_truncated=truncated,
        next_key_marker=next_key if truncated and next_key else None,
        next_upload_id_marker=next_upload if truncated and next_upload else None,
    )


def escape(text: str) -> str:
    """``text`` as XML character data. Control characters become character references, as
    S3 documents for keys: a literal CR would be read back as LF by any XML parser."""
    out = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    if any(ord(c) < 0x20 for c in out):
        out = "".join(f"&#{ord(c)};" if ord(c) < 0x20 else c for c in out)
    return out


def delete_request(keys: list[str]) -> bytes:
    objects = "".join(f"<Object><Key>{escape(k)}</Key></Object>" for k in keys)
    return f'{_DECLARATION}<Delete xmlns="{S3_NAMESPACE}"><Quiet>false</Quiet>{objects}</Delete>'.encode()


def complete_request(parts: list[tuple[int, str]]) -> bytes:
    listed = "".join(
        f"<Part><PartNumber>{number}</PartNumber><ETag>{escape(etag)}</ETag></Part>" for number, etag in parts
    )
    return (
        f'{_DECLARATION}<CompleteMultipartUpload xmlns="{S3_NAMESPACE}">{listed}</CompleteMultipartUpload>'
    ).encode()


def create_bucket_request(location: str) -> bytes:
    return (
        f'{_DECLARATION}<CreateBucketConfiguration xmlns="{S3_NAMESPACE}">'
        f"<LocationConstraint>{escape(location)}</LocationConstraint></CreateBucketConfiguration>"
    ).encode()
