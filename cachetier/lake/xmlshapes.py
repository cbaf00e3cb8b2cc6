"""The shapes of S3's XML, shared by both sides that speak it: the gateway renders responses and
parses request bodies (:mod:`gateway.s3.xml`), ``S3Lake`` builds request bodies and parses a
lake's answers (:mod:`cachetier.lake.s3.xml`). Each element that crosses between them (a
listing's ``<Contents>``, a ``<Part>``, an ``<Upload>``, a delete outcome, the request bodies)
is written and read here, next to each other, so the two sides cannot drift apart.

Rendering is plain string building (it is on the hot path of every listing). Parsing goes
through defusedxml (entity tricks cannot blow up memory) and ignores namespaces (Ceph RGW sends
its listings in S3's and its errors in none); a body that is not the expected XML raises
``ShapeError``, which each side maps to its own error. May import ``cachetier.lake`` only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from xml.etree.ElementTree import Element, ParseError

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import fromstring

from cachetier.errors import Unimplemented
from cachetier.lake import BucketInfo, DeleteOutcome, ListEntry, PartInfo, UploadInfo

NAMESPACE = "http://s3.amazonaws.com/doc/2006-03-01/"
DECLARATION = '<?xml version="1.0" encoding="UTF-8"?>\n'
_CONTROL = re.compile(r"[\x00-\x1f]")

Encode = Callable[[str], str]  # a key or prefix as a listing carries it (url-encoded or not)


class ShapeError(ValueError):
    """A body that is not the XML S3 documents."""


# -- writing ----------------------------------------------------------------------------------


def escape(text: str) -> str:
    """``text`` as XML character data. Control characters become character references, as
    S3 documents for keys: a literal CR would be read back as LF by any XML parser."""
    out = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    if _CONTROL.search(out):
        out = _CONTROL.sub(lambda m: f"&#{ord(m.group())};", out)
    return out


def element(name: str, value: object) -> str:
    return f"<{name}>{escape(str(value))}</{name}>"


def document(root: str, children: Iterable[str]) -> bytes:
    """A whole document: the declaration and ``root`` in S3's namespace around ``children``."""
    return (DECLARATION + f'<{root} xmlns="{NAMESPACE}">' + "".join(children) + f"</{root}>").encode()


def boolean(value: bool) -> str:
    return "true" if value else "false"


def timestamp(dt: datetime) -> str:
    """ISO 8601 with milliseconds, as S3 writes them in listings (``2024-05-01T12:00:00.000Z``)."""
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


# -- reading ----------------------------------------------------------------------------------


def parse(body: bytes) -> Element:
    """The root element of ``body``, namespaces stripped from every tag."""
    try:
        root: Element = fromstring(body)
    except (ParseError, DefusedXmlException, ValueError) as exc:
        raise ShapeError(f"malformed XML ({exc})") from exc
    for node in root.iter():
        if isinstance(node.tag, str) and node.tag.startswith("{"):
            node.tag = node.tag.split("}", 1)[1]
    return root


def parse_root(body: bytes, name: str) -> Element:
    """The root of ``body``, which must be a ``name`` element."""
    root = parse(body)
    if root.tag != name:
        raise ShapeError(f"<{root.tag}> where <{name}> was expected")
    return root


def read_timestamp(text: str | None) -> datetime:
    """An ISO 8601 timestamp from a listing, aware, in UTC."""
    if not text:
        raise ShapeError("no timestamp where S3 always sends one")
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError as exc:
        raise ShapeError(f"an invalid timestamp {text!r}") from exc
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def read_int(node: Element, path: str, default: int = 0) -> int:
    text = node.findtext(path)
    if not text:
        return default
    try:
        return int(text)
    except ValueError as exc:
        raise ShapeError(f"a non-integer {path} {text!r}") from exc


def read_bool(node: Element, path: str) -> bool:
    return (node.findtext(path) or "").strip().lower() == "true"


def quoted(etag: str) -> str:
    """An ETag as S3 sends it, in double quotes (Ceph RGW 16.2 leaves them off in copy
    results); an empty one stays empty."""
    etag = etag.strip()
    if not etag or (len(etag) >= 2 and etag.startswith('"') and etag.endswith('"')):
        return etag
    return f'"{etag}"'


# -- the elements of answers --------------------------------------------------------------------


def bucket(name: str, created: datetime) -> str:
    return f"<Bucket>{element('Name', name)}{element('CreationDate', timestamp(created))}</Bucket>"


def read_bucket(node: Element) -> BucketInfo:
    return BucketInfo(name=node.findtext("Name") or "", created=read_timestamp(node.findtext("CreationDate")))


def contents(entry: ListEntry, encode: Encode, owner: str) -> str:
    """A listing's ``<Contents>``; ``owner`` is the ``<Owner>`` element or ``""``."""
    return (
        "<Contents>"
        + element("Key", encode(entry.key))
        + element("LastModified", timestamp(entry.last_modified))
        + element("ETag", entry.etag)
        + element("Size", entry.size)
        + element("StorageClass", entry.storage_class)
        + owner
        + "</Contents>"
    )


def read_contents(node: Element, decode: Encode) -> ListEntry:
    return ListEntry(
        key=decode(node.findtext("Key") or ""),
        size=read_int(node, "Size"),
        etag=quoted(node.findtext("ETag") or ""),
        last_modified=read_timestamp(node.findtext("LastModified")),
        storage_class=node.findtext("StorageClass") or "STANDARD",
    )


def common_prefix(prefix: str, encode: Encode) -> str:
    return f"<CommonPrefixes>{element('Prefix', encode(prefix))}</CommonPrefixes>"


def read_common_prefixes(root: Element, decode: Encode) -> list[str]:
    return [decode(p.findtext("Prefix") or "") for p in root.iterfind("CommonPrefixes")]


def part(info: PartInfo) -> str:
    return (
        f"<Part>{element('PartNumber', info.part_number)}{element('LastModified', timestamp(info.last_modified))}"
        f"{element('ETag', info.etag)}{element('Size', info.size)}</Part>"
    )


def read_part(node: Element) -> PartInfo:
    return PartInfo(
        part_number=read_int(node, "PartNumber"),
        etag=quoted(node.findtext("ETag") or ""),
        size=read_int(node, "Size"),
        last_modified=read_timestamp(node.findtext("LastModified")),
    )


def upload(info: UploadInfo, encode: Encode, who: str) -> str:
    """A ``<Upload>`` of an uploads listing; ``who`` is the ID and DisplayName of its initiator
    and owner."""
    return (
        f"<Upload>{element('Key', encode(info.key))}{element('UploadId', info.upload_id)}"
        f"<Initiator>{who}</Initiator><Owner>{who}</Owner>{element('StorageClass', 'STANDARD')}"
        f"{element('Initiated', timestamp(info.initiated))}</Upload>"
    )


def read_upload(node: Element, decode: Encode) -> UploadInfo:
    return UploadInfo(
        key=decode(node.findtext("Key") or ""),
        upload_id=node.findtext("UploadId") or "",
        initiated=read_timestamp(node.findtext("Initiated")),
    )


def delete_outcome(outcome: DeleteOutcome) -> str:
    """A ``<Deleted>`` or ``<Error>`` element of a ``DeleteResult``."""
    if outcome.code is None:
        return f"<Deleted>{element('Key', outcome.key)}</Deleted>"
    return (
        f"<Error>{element('Key', outcome.key)}{element('Code', outcome.code)}"
        f"{element('Message', outcome.message or '')}</Error>"
    )


def read_delete_outcomes(root: Element) -> list[DeleteOutcome]:
    outcomes = []
    for node in root:
        if node.tag == "Deleted":
            outcomes.append(DeleteOutcome(key=node.findtext("Key") or ""))
        elif node.tag == "Error":
            outcomes.append(
                DeleteOutcome(
                    key=node.findtext("Key") or "",
                    code=node.findtext("Code") or "InternalError",
                    message=node.findtext("Message") or None,
                )
            )
    return outcomes


# -- request bodies -----------------------------------------------------------------------------


def delete_request(keys: list[str], quiet: bool = False) -> bytes:
    objects = (f"<Object>{element('Key', k)}</Object>" for k in keys)
    return document("Delete", [element("Quiet", boolean(quiet)), *objects])


_DELETE_CONDITIONS = ("ETag", "LastModifiedTime", "Size")


def read_delete_request(body: bytes) -> tuple[list[str], bool]:
    """(keys, quiet) of a multi-object ``<Delete>``: 1 to 1000 keys. An object named with a
    version or a condition (``VersionId`` other than ``null``, ``ETag``, ``LastModifiedTime``,
    ``Size``) is not built: 501, never deleted as if it were named by its key alone."""
    root = parse_root(body, "Delete")
    keys = []
    for obj in root.findall("Object"):
        key = obj.findtext("Key")
        if key is None:
            raise ShapeError("an <Object> without a <Key>")
        version = obj.findtext("VersionId")
        if (version is not None and version != "null") or any(obj.find(n) is not None for n in _DELETE_CONDITIONS):
            raise Unimplemented("DeleteObjects of a version, or with a condition, is not implemented.")
        keys.append(key)
    if not keys or len(keys) > 1000:
        raise ShapeError(f"{len(keys)} keys to delete, where S3 takes 1 to 1000")
    return keys, read_bool(root, "Quiet")


def complete_request(parts: list[tuple[int, str]]) -> bytes:
    listed = (f"<Part>{element('PartNumber', number)}{element('ETag', etag)}</Part>" for number, etag in parts)
    return document("CompleteMultipartUpload", listed)


_PART_NUMBER = re.compile(r"[0-9]{1,5}")


def read_complete_request(body: bytes) -> list[tuple[int, str]]:
    """The (part number, ETag) pairs of a ``<CompleteMultipartUpload>``: at least one."""
    root = parse_root(body, "CompleteMultipartUpload")
    parts = []
    for node in root.findall("Part"):
        number, etag = node.findtext("PartNumber"), node.findtext("ETag")
        # PartNumber as S3 reads it: 1 to 5 ASCII digits (int() alone takes "+1", "1_0", "١")
        if number is None or etag is None or not _PART_NUMBER.fullmatch(number.strip()):
            raise ShapeError("a <Part> without a PartNumber and an ETag")
        parts.append((int(number), etag.strip()))
    if not parts:
        raise ShapeError("no <Part>")
    return parts


def create_bucket_request(location: str) -> bytes:
    return document("CreateBucketConfiguration", [element("LocationConstraint", location)])


def read_create_bucket_request(body: bytes) -> str | None:
    """The ``LocationConstraint`` of a ``<CreateBucketConfiguration>``; None for an empty body."""
    if not body.strip():
        return None
    location = parse_root(body, "CreateBucketConfiguration").findtext("LocationConstraint")
    return location.strip() if location else None
