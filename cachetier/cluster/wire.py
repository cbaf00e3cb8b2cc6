"""The peer wire protocol: the peer API's paths, one frozen dataclass per message with its
validating JSON (or query) encoding, and the cluster HMAC that authenticates every request.

Both sides speak only these types: ``cachetier.cluster.client`` sends them, ``gateway.peerapi``
decodes them and hands them to ``cachetier.cluster.owner``. Whatever is malformed (not JSON, a
missing field, a wrong type) is one ``WireError``, never a KeyError, TypeError or
JSONDecodeError from deep inside a handler.

    WireError                a malformed peer message (the peer API answers 400)
     └── PeerAuthError       no valid cluster HMAC, or a time too far from ours (403)

The peer API, under ``/_lakegate/v1/``:

    GET  block?bucket=&key=&etag=&size=&index=&block_size=   one block, from the owner's L2
         (header x-lakegate-tenant)                           or fetched by it from the lake
    POST heartbeat      JSON {id, url, weight, load}; answered {id, url, weight, load, ring_version}
    POST invalidate     JSON {bucket, keys}: forget the keys' metadata and blocks (keys null:
                        the whole bucket's metadata); answered {ok: true}

Fields a message does not know are ignored, not refused: a newer node may add some, and
mixed-version nodes must still talk (the heartbeat answer's ``ring_version`` arrived that way).

Every request carries an HMAC-SHA256, keyed by the cluster secret, over its method, path,
query, body digest, sender id and time (``X-Lakegate-Node``, ``X-Lakegate-Time``,
``X-Lakegate-Signature``). Receivers refuse a request whose signature does not match or whose
time is more than ``MAX_SKEW`` seconds off, so a captured request replays for that long at
most. Tenant credentials mean nothing here: a SigV4 ``Authorization`` header is not an HMAC of
the cluster secret, so it is refused like any other wrong signature. Signing and verifying take
``now`` (wall-clock seconds) from the caller: the stamp is compared across nodes.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Self
from urllib.parse import parse_qs, urlencode

from cachetier.blocks.ids import block_bounds, block_count
from cachetier.cluster.ring import Member

PREFIX = "/_lakegate/v1/"
BLOCK = PREFIX + "block"
HEARTBEAT = PREFIX + "heartbeat"
INVALIDATE = PREFIX + "invalidate"

NODE_HEADER = "x-lakegate-node"
TIME_HEADER = "x-lakegate-time"
SIGNATURE_HEADER = "x-lakegate-signature"
TENANT_HEADER = "x-lakegate-tenant"  # the tenant a block is fetched for (fairness, stats); unsigned

MAX_SKEW = 60.0
_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_MAX_TENANT = 64


class WireError(ValueError):
    """A peer message that is not what the protocol says (400)."""


class PeerAuthError(WireError):
    """A peer request without a valid cluster HMAC (403)."""


# ---- authentication ----------------------------------------------------------------------------


def signature(secret: bytes, method: str, path: str, query: str, body_sha256: str, node: str, stamp: str) -> str:
    message = "\n".join((method.upper(), path, query, body_sha256, node, stamp)).encode("utf-8", "surrogatepass")
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def sign(
    secret: bytes, node: str, method: str, path: str, query: str = "", body: bytes = b"", *, now: float
) -> dict[str, str]:
    """The headers that authenticate one peer request sent at ``now`` (wall-clock seconds)."""
    stamp = f"{now:.3f}"
    return {
        NODE_HEADER: node,
        TIME_HEADER: stamp,
        SIGNATURE_HEADER: signature(secret, method, path, query, _digest(body), node, stamp),
    }


def verify(
    secret: bytes, method: str, path: str, query: str, headers: Mapping[str, str], body: bytes, now: float
) -> str:
    """The sending node's id, or PeerAuthError. ``headers`` have lower-case names."""
    node, stamp, given = (headers.get(h, "") for h in (NODE_HEADER, TIME_HEADER, SIGNATURE_HEADER))
    if not (node and stamp and given):
        raise PeerAuthError("missing peer signature")
    try:
        skew = abs(now - float(stamp))
    except ValueError:
        raise PeerAuthError("bad peer time") from None
    if math.isnan(skew):  # a stamp of "nan" would pass any window
        raise PeerAuthError("bad peer time")
    expected = signature(secret, method, path, query, _digest(body), node, stamp)
    if not hmac.compare_digest(expected, given):
        raise PeerAuthError("peer signature does not match")
    if skew > MAX_SKEW:
        raise PeerAuthError("peer request time too far from ours")
    return node


def _digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest() if body else _EMPTY_SHA256


# ---- field validation --------------------------------------------------------------------------


def json_object(body: bytes) -> dict[str, object]:
    """``body`` as a JSON object, or WireError."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):  # JSONDecodeError is a ValueError
        raise WireError("body is not JSON") from None
    if not isinstance(doc, dict):
        raise WireError("body is not a JSON object")
    return doc


def _dumps(doc: Mapping[str, object]) -> bytes:
    return json.dumps(doc).encode()


def _string(doc: Mapping[str, object], name: str) -> str:
    value = doc.get(name)
    if not isinstance(value, str):
        raise WireError(f"{name} must be a string, not {value!r}")
    return value


def _number(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise WireError(f"{name} must be a number, not {value!r}")
    return float(value)


def _load(doc: Mapping[str, object]) -> dict[str, float]:
    value = doc.get("load")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise WireError(f"load must be an object, not {value!r}")
    return {name: _number(v, f"load.{name}") for name, v in value.items()}


def member_from(doc: Mapping[str, object]) -> Member:
    """The member a heartbeat (or its answer) names: ``id``, ``url`` and ``weight`` (default 1)."""
    weight = _number(doc.get("weight", 1.0), "weight")
    return Member(_string(doc, "id"), _string(doc, "url").rstrip("/"), weight)


def _member_doc(member: Member) -> dict[str, object]:
    return {"id": member.id, "url": member.url, "weight": member.weight}


# ---- messages ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Heartbeat:
    """POST heartbeat: the sender, and its load (name -> figure) for the receiver's view."""

    member: Member
    load: Mapping[str, float] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return _dumps({**_member_doc(self.member), "load": dict(self.load)})

    @classmethod
    def from_json(cls, body: bytes) -> Self:
        doc = json_object(body)
        return cls(member_from(doc), _load(doc))


@dataclass(frozen=True)
class HeartbeatAnswer:
    """A heartbeat's answer: the node that answered, its load, and its ring's version (None
    from a node too old to send one)."""

    member: Member
    load: Mapping[str, float] = field(default_factory=dict)
    ring_version: str | None = None

    def to_json(self) -> bytes:
        return _dumps({**_member_doc(self.member), "load": dict(self.load), "ring_version": self.ring_version})

    @classmethod
    def from_json(cls, body: bytes) -> Self:
        doc = json_object(body)
        version = doc.get("ring_version")
        if version is not None and not isinstance(version, str):
            raise WireError(f"ring_version must be a string, not {version!r}")
        return cls(member_from(doc), _load(doc), version)


@dataclass(frozen=True)
class Invalidate:
    """POST invalidate: forget ``keys`` of ``bucket`` (their metadata and blocks); ``keys``
    None: the whole bucket's metadata."""

    bucket: str
    keys: tuple[str, ...] | None

    def to_json(self) -> bytes:
        return _dumps({"bucket": self.bucket, "keys": None if self.keys is None else list(self.keys)})

    @classmethod
    def from_json(cls, body: bytes) -> Self:
        doc = json_object(body)
        keys = doc.get("keys")
        if keys is not None and not (isinstance(keys, list) and all(isinstance(k, str) for k in keys)):
            raise WireError(f"keys must be a list of strings or null, not {keys!r}")
        return cls(_string(doc, "bucket"), None if keys is None else tuple(keys))


@dataclass(frozen=True)
class Acknowledged:
    """The answer to a message that needs no more than "done": ``{"ok": true}``."""

    def to_json(self) -> bytes:
        return _dumps({"ok": True})

    @classmethod
    def from_json(cls, body: bytes) -> Self:
        if json_object(body).get("ok") is not True:
            raise WireError("not an acknowledgement")
        return cls()


_BLOCK_FIELDS = ("bucket", "key", "etag", "size", "index", "block_size")


@dataclass(frozen=True)
class BlockRequest:
    """GET block: block ``index`` (of ``block_size`` bytes) of the object version ``etag`` of
    ``size`` bytes, fetched for ``tenant``. Sent as a query (the block is the answer's body)."""

    bucket: str
    key: str
    etag: str
    size: int
    index: int
    block_size: int
    tenant: str = "-"

    def __post_init__(self) -> None:
        if self.size <= 0 or self.block_size <= 0 or not 0 <= self.index < block_count(self.size, self.block_size):
            raise WireError(f"no block {self.index} of {self.block_size} bytes in an object of {self.size} bytes")

    @property
    def length(self) -> int:
        """How many bytes the block has (the last one of an object may be short)."""
        lo, hi = block_bounds(self.index, self.size, self.block_size)
        return hi - lo + 1

    def to_query(self) -> str:
        return urlencode({name: getattr(self, name) for name in _BLOCK_FIELDS})

    def headers(self) -> dict[str, str]:
        return {TENANT_HEADER: self.tenant}

    @classmethod
    def from_query(cls, query: str, headers: Mapping[str, str]) -> Self:
        """The request in ``query`` (repeated fields: the first counts), its tenant from ``headers``."""
        params = parse_qs(query, keep_blank_values=True)
        try:
            one = {name: params[name][0] for name in _BLOCK_FIELDS}
            size, index, block_size = int(one["size"]), int(one["index"]), int(one["block_size"])
        except (KeyError, ValueError):
            raise WireError("a block request needs bucket, key, etag, size, index, block_size") from None
        tenant = headers.get(TENANT_HEADER, "-")[:_MAX_TENANT]
        return cls(one["bucket"], one["key"], one["etag"], size, index, block_size, tenant)


@dataclass(frozen=True)
class BlockAnswer:
    """A block's answer, before its bytes: how many follow."""

    length: int

    def headers(self) -> list[tuple[bytes, bytes]]:
        return [(b"content-type", b"application/octet-stream"), (b"content-length", str(self.length).encode())]

    @classmethod
    def from_headers(cls, headers: Mapping[str, str]) -> Self:
        try:
            length = int(headers["content-length"])
        except (KeyError, ValueError):
            raise WireError("a block answer needs its content-length") from None
        if length < 0:
            raise WireError(f"a block answer of {length} bytes")
        return cls(length)


# ---- room for the coming mechanisms (not served yet: the peer API answers 404) -----------------
# Each will be a frozen dataclass here with to_json/from_json, routed in gateway.peerapi:
#   POST weights     the allocation loop's per-node local weights (Pisces WA)   {ring_version, weights}
#   POST partitions  the placement loop's partition -> node table (Pisces PP)  {version, table}
#   POST reports     per-tenant demand and telemetry anomaly reports (MicroMon) {node, demand, anomalies}
#   POST journal     a write-back journal append on a replica (Pfimbi)          {tenant, bucket, key, ...}
WEIGHTS = PREFIX + "weights"
PARTITIONS = PREFIX + "partitions"
REPORTS = PREFIX + "reports"
JOURNAL = PREFIX + "journal"
