"""The XML of S3's REST API as ``S3Lake`` reads it: a lake's answers parsed into the types of
:mod:`cachetier.lake`, with the quirks of the lakes met so far. The element shapes, escaping,
parsing and the request bodies ``S3Lake`` sends are :mod:`cachetier.lake.xmlshapes`, shared
with the gateway. A body that is not the XML expected raises ``LakeXMLError``; ``S3Lake`` maps
it at the lake boundary.
"""

from __future__ import annotations

from datetime import datetime
from urllib.parse import unquote_plus
from xml.etree.ElementTree import Element

from cachetier.lake import BucketInfo, DeleteOutcome, ListPage, PartsPage, UploadsPage
from cachetier.lake import xmlshapes
from cachetier.lake.xmlshapes import quoted, read_bool, read_int, read_timestamp

# A lake answer that is not the XML S3 documents (the shared parser's error, named for S3Lake).
LakeXMLError = xmlshapes.ShapeError


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
    root = xmlshapes.parse(body.lstrip())
    if root.tag == "Error":
        raise ErrorDocument(root.findtext("Code") or "", root.findtext("Message") or "")
    return root


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
    return [xmlshapes.read_bucket(b) for b in parse(body).iterfind("Buckets/Bucket")]


def parse_location(body: bytes) -> str:
    """``<LocationConstraint>`` text; an empty element (us-east-1 on AWS) is ``""``."""
    return (parse(body).text or "").strip()


def parse_list_objects(body: bytes, v2: bool) -> ListPage:
    root = parse(body)
    entries = [xmlshapes.read_contents(c, _decode) for c in root.iterfind("Contents")]
    prefixes = xmlshapes.read_common_prefixes(root, _decode)
    truncated = read_bool(root, "IsTruncated")
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
    return quoted(etag), read_timestamp(modified) if modified else None


def parse_delete_result(body: bytes) -> list[DeleteOutcome]:
    return xmlshapes.read_delete_outcomes(parse(body))


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
    truncated = read_bool(root, "IsTruncated")
    return PartsPage(
        parts=[xmlshapes.read_part(p) for p in root.iterfind("Part")],
        is_truncated=truncated,
        next_part_number_marker=read_int(root, "NextPartNumberMarker") if truncated else None,
        part_number_marker=read_int(root, "PartNumberMarker"),
        max_parts=read_int(root, "MaxParts", 1000),
    )


def parse_list_uploads(body: bytes) -> UploadsPage:
    root = parse(body)
    uploads = [xmlshapes.read_upload(u, _decode) for u in root.iterfind("Upload")]
    prefixes = xmlshapes.read_common_prefixes(root, _decode)
    truncated = read_bool(root, "IsTruncated")
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
