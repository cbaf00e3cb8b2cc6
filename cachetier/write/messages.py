"""The write-back messages between nodes (issue 14), with validating JSON encodings: a journaled
version as it travels (a copy to a peer journal, a notice to every node), and the notices that
keep every node's view of the pending writes true. Paths are in ``cachetier.cluster.wire``;
every request is signed with the cluster HMAC like the rest of the peer API.

    PUT  journal/copy?version=<JSON>&md5=<hex>   the body: a durable copy in the receiver's journal
                                                 (answered {ok, md5} once committed: fsynced; md5
                                                 empty: streamed, the sender checks the answer's)
    POST journal/notice  {kind, version | bucket, key, seq}
         pending    a write acknowledged elsewhere: forget cached metadata, drop older versions
                    of the key (and stop flushing them), remember where the body is
         flushed    the lake has the version: drop it and every older one of the key
         supersede  a write-through write of the key follows: drop the pending versions before
                    seq (answered once no flush of them is still running here)
    POST journal/held    {bucket, key, seq}: answered {held: bool, gone: bool} (gone: flushed
                         or overtaken there)
    GET  journal/body?bucket=&key=&seq=&first=&last=   bytes of a version's body from its holder

A copy's body is not covered by the HMAC digest (it streams, and may be gigabytes): the signed
query names its MD5, which the receiver checks before it commits, or (a copy streamed while the
client's body still arrives) the receiver answers the MD5 it got and the sender checks it
before the 200, dropping the copy (a supersede notice) when it differs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Self
from urllib.parse import parse_qs, urlencode

from cachetier.cluster.wire import WireError, json_object
from cachetier.write.journal import Version

KINDS = ("put", "delete")
NOTICES = ("pending", "flushed", "supersede")
MAX_HOLDERS = 8
MAX_PARTS = 10000
_MAX_TEXT = 8192  # a name or header value (S3 keys are at most 1024 bytes, metadata 2 KiB)
_MAX_MAP = 128
_MAX_SEQ = 1 << 63


def _text(doc: Mapping[str, object], name: str, *, empty: bool = True) -> str:
    value = doc.get(name)
    if not isinstance(value, str) or len(value) > _MAX_TEXT or (not empty and not value):
        raise WireError(f"{name} must be a string")
    return value


def _int(doc: Mapping[str, object], name: str, low: int = 0, high: int = _MAX_SEQ) -> int:
    value = doc.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise WireError(f"{name} must be an integer in {low}..{high}")
    return value


def _strings(doc: Mapping[str, object], name: str) -> dict[str, str]:
    value = doc.get(name, {})
    if not isinstance(value, dict) or len(value) > _MAX_MAP or not all(
        isinstance(k, str) and isinstance(v, str) and len(k) + len(v) < _MAX_TEXT for k, v in value.items()
    ):
        raise WireError(f"{name} must be an object of strings")
    return dict(value)


def version_doc(version: Version) -> dict[str, object]:
    """``version`` as it travels (its place among the holders is the receiver's own)."""
    return {
        "bucket": version.bucket, "key": version.key, "seq": version.seq, "kind": version.kind,
        "etag": version.etag, "size": version.size, "last_modified": version.last_modified,
        "content_type": version.content_type, "metadata": dict(version.metadata),
        "headers": dict(version.headers), "part_sizes": list(version.part_sizes), "tenant": version.tenant,
        "holders": list(version.holders), "sync": version.sync,
    }


def version_from(doc: Mapping[str, object], position: int = -1) -> Version:
    """The version ``doc`` describes, as this node keeps it: at ``position`` among its holders
    (-1: a notice, the body elsewhere). Anything malformed is WireError."""
    kind = _text(doc, "kind")
    if kind not in KINDS:
        raise WireError(f"kind must be one of {KINDS}")
    holders = doc.get("holders")
    if not isinstance(holders, list) or not 0 < len(holders) <= MAX_HOLDERS or not all(
        isinstance(h, str) and 0 < len(h) <= 64 for h in holders
    ):
        raise WireError(f"holders must be 1..{MAX_HOLDERS} node ids")
    parts = doc.get("part_sizes", [])
    if not isinstance(parts, list) or len(parts) > MAX_PARTS or not all(
        isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts
    ):
        raise WireError("part_sizes must be a list of sizes")
    modified = doc.get("last_modified")
    if isinstance(modified, bool) or not isinstance(modified, (int, float)) or not 0 <= modified < 1e11:
        raise WireError("last_modified must be epoch seconds")
    content_type = doc.get("content_type")
    if content_type is not None and (not isinstance(content_type, str) or len(content_type) > _MAX_TEXT):
        raise WireError("content_type must be a string or null")
    size = _int(doc, "size", 0, 5 << 40)
    if parts and sum(parts) != size:
        raise WireError("part_sizes do not add up to size")
    return Version(
        bucket=_text(doc, "bucket", empty=False), key=_text(doc, "key", empty=False), seq=_int(doc, "seq", 1),
        kind=kind, etag=_text(doc, "etag"), size=size, last_modified=float(modified),
        content_type=content_type, metadata=_strings(doc, "metadata"), headers=_strings(doc, "headers"),
        part_sizes=tuple(parts), tenant=_text(doc, "tenant")[:64] or "-", holders=tuple(holders),
        position=position, sync=_int(doc, "sync", 1, MAX_HOLDERS) if "sync" in doc else 1,
    )


@dataclass(frozen=True)
class Copy:
    """PUT journal/copy: ``version``'s body follows, ``md5`` (hex) of its bytes when known
    before it is sent; "" for a copy streamed as the client's body arrives, checked by its
    sender against the MD5 the receiver answers (``Copied``) before the write is acknowledged.
    A put's ``etag`` "" means the body's MD5 (the receiver fills it in)."""

    version: Version
    md5: str = ""

    def to_query(self) -> str:
        return urlencode({"version": json.dumps(version_doc(self.version)), "md5": self.md5})

    @classmethod
    def from_query(cls, query: str, me: str) -> Self:
        """The copy, kept by this node ``me`` (which must be one of its holders)."""
        params = parse_qs(query, keep_blank_values=True)
        try:
            doc = json_object(params["version"][0].encode())
            md5 = params["md5"][0]
        except (KeyError, IndexError):
            raise WireError("a copy needs version and md5") from None
        holders = doc.get("holders")
        if not isinstance(holders, list) or me not in holders:
            raise WireError(f"this node ({me}) is not among the copy's holders")
        if md5 and (len(md5) != 32 or any(c not in "0123456789abcdef" for c in md5)):
            raise WireError("md5 must be 32 hex digits (or empty: streamed)")
        return cls(version_from(doc, holders.index(me)), md5)


@dataclass(frozen=True)
class Copied:
    """The answer to a copy: committed, with the MD5 of the body as the receiver got it."""

    md5: str

    def to_json(self) -> bytes:
        return json.dumps({"ok": True, "md5": self.md5}).encode()

    @classmethod
    def from_json(cls, body: bytes) -> Self:
        doc = json_object(body)
        md5 = doc.get("md5", "")
        if doc.get("ok") is not True or not isinstance(md5, str):
            raise WireError("not a copy's answer")
        return cls(md5)


@dataclass(frozen=True)
class Notice:
    """POST journal/notice (see the module docstring). ``version`` for pending; ``bucket``,
    ``key``, ``seq`` for the others."""

    kind: str
    bucket: str
    key: str
    seq: int
    version: Version | None = None

    @classmethod
    def pending(cls, version: Version) -> Self:
        return cls("pending", version.bucket, version.key, version.seq, version)

    def to_json(self) -> bytes:
        doc: dict[str, object] = {"kind": self.kind, "bucket": self.bucket, "key": self.key, "seq": self.seq}
        if self.version is not None:
            doc["version"] = version_doc(self.version)
        return json.dumps(doc).encode()

    @classmethod
    def from_json(cls, body: bytes) -> Self:
        doc = json_object(body)
        kind = _text(doc, "kind")
        if kind not in NOTICES:
            raise WireError(f"kind must be one of {NOTICES}")
        if kind == "pending":
            inner = doc.get("version")
            if not isinstance(inner, dict):
                raise WireError("a pending notice needs its version")
            version = version_from(inner)
            return cls(kind, version.bucket, version.key, version.seq, version)
        return cls(kind, _text(doc, "bucket", empty=False), _text(doc, "key", empty=False), _int(doc, "seq"))


@dataclass(frozen=True)
class HeldQuery:
    """POST journal/held: whether the receiver still holds ``bucket/key`` at ``seq``."""

    bucket: str
    key: str
    seq: int

    def to_json(self) -> bytes:
        return json.dumps({"bucket": self.bucket, "key": self.key, "seq": self.seq}).encode()

    @classmethod
    def from_json(cls, body: bytes) -> Self:
        doc = json_object(body)
        return cls(_text(doc, "bucket", empty=False), _text(doc, "key", empty=False), _int(doc, "seq"))


@dataclass(frozen=True)
class Held:
    """The answer to journal/held: the version is in the receiver's journal (``held``), or
    the receiver flushed it or saw it overtaken (``gone``); neither: it never had it."""

    held: bool
    gone: bool = False

    def to_json(self) -> bytes:
        return json.dumps({"held": self.held, "gone": self.gone}).encode()

    @classmethod
    def from_json(cls, body: bytes) -> Self:
        doc = json_object(body)
        held, gone = doc.get("held"), doc.get("gone", False)
        if not isinstance(held, bool) or not isinstance(gone, bool):
            raise WireError("held and gone must be true or false")
        return cls(held, gone)


@dataclass(frozen=True)
class BodyRequest:
    """GET journal/body: bytes ``first`` to ``last`` (inclusive) of a held version's body."""

    bucket: str
    key: str
    seq: int
    first: int
    last: int

    def to_query(self) -> str:
        return urlencode({"bucket": self.bucket, "key": self.key, "seq": self.seq, "first": self.first,
                          "last": self.last})

    @classmethod
    def from_query(cls, query: str) -> Self:
        params = parse_qs(query, keep_blank_values=True)
        try:
            one = {name: params[name][0] for name in ("bucket", "key", "seq", "first", "last")}
            seq, first, last = int(one["seq"]), int(one["first"]), int(one["last"])
        except (KeyError, IndexError, ValueError):
            raise WireError("a body request needs bucket, key, seq, first, last") from None
        if not 0 <= first <= last + 1 or seq < 1:
            raise WireError("bad body range")
        return cls(one["bucket"], one["key"], seq, first, last)
