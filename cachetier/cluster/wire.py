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
    POST goodbye        JSON {id, url, weight}: the sender is shutting down, drop it from the
                        ring now (not after the failure timeout); answered {ok: true}
    POST reports        JSON ReportsRequest; answered with a DemandReport (fairness, at the end)
    POST weights        JSON WeightsUpdate; answered {ok: true}
    POST partitions     JSON PartitionsUpdate; answered {ok: true}

Fields a message does not know are ignored, not refused: a newer node may add some, and
mixed-version nodes must still talk (the heartbeat answer's ``ring_version`` arrived that way).

Every request carries an HMAC-SHA256, keyed by the cluster secret, over its method, path,
query, body digest and every header the receiver acts on: the sender id, the time, a nonce and
the tenant a block is fetched for (``X-Lakegate-Node``, ``X-Lakegate-Time``,
``X-Lakegate-Nonce``, ``X-Lakegate-Tenant``; a header left out is signed as absent, so adding
one is a change too). Receivers refuse a request whose signature does not match, whose time is
more than ``MAX_SKEW`` seconds off, or whose nonce they have seen from that sender within the
window (``ReplayGuard``): a captured request is refused on its first replay, however soon.
Tenant credentials mean nothing here: a SigV4 ``Authorization`` header is not an HMAC of the
cluster secret, so it is refused like any other wrong signature. Signing and verifying take
``now`` (wall-clock seconds) from the caller: the stamp is compared across nodes.

This is a protocol change: a node from before the nonce sends none and signs neither nonce nor
tenant, so its requests are refused (403) by newer nodes, and the newer nodes' by it (their
signature covers more). Upgrade a cluster all at once, or expect the old and new halves not to
see each other (block reads then go to the lake; nothing is served wrong).

Several worker processes per node (issue 17): the replay memory is per process, so a replay
that reaches another worker of the receiving node than the original would be accepted. The
receiving node's workers must therefore share one memory: either the peer API is served by one
worker only, or the guard moves to a store the workers share (shared memory, or the parent
process). What is stored then wants to be small and fixed-size, which random nonces are not:
senders would then send a sequence per (sender, worker), the sender id becoming ``node/worker``
so each worker of the sender counts on its own without coordinating, and the receiver keeps per
such id a high-water mark and a bitmap of the last few thousand numbers below it (the IPsec
window); a worker's restart takes a fresh id (or a boot stamp in it), so numbers never repeat
under one id.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import heapq
import math
import secrets
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, Self
from urllib.parse import parse_qs, urlencode

from cachetier.blocks.ids import block_bounds, block_count
from cachetier.cluster.ring import Member

PREFIX = "/_lakegate/v1/"
BLOCK = PREFIX + "block"
HEARTBEAT = PREFIX + "heartbeat"
INVALIDATE = PREFIX + "invalidate"
GOODBYE = PREFIX + "goodbye"

NODE_HEADER = "x-lakegate-node"
TIME_HEADER = "x-lakegate-time"
SIGNATURE_HEADER = "x-lakegate-signature"
NONCE_HEADER = "x-lakegate-nonce"
TENANT_HEADER = "x-lakegate-tenant"  # the tenant a block is fetched for (fairness, stats)
CACHED_HEADER = "x-lakegate-cached"  # a block answer: 1 from the owner's stores, 0 fetched from the lake
_AUTH_HEADERS = (NODE_HEADER, TIME_HEADER, NONCE_HEADER)  # what ``sign`` adds
# the headers the signature covers, in the signed string's order: every one a receiver acts on
SIGNED_HEADERS = (*_AUTH_HEADERS, TENANT_HEADER)
_ABSENT = "\x00"  # how a signed header left out is signed: no HTTP header value holds a NUL
_MAX_NONCE = 64

MAX_SKEW = 60.0
_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_MAX_TENANT = 64


class WireError(ValueError):
    """A peer message that is not what the protocol says (400)."""


class PeerAuthError(WireError):
    """A peer request without a valid cluster HMAC (403)."""


# ---- authentication ----------------------------------------------------------------------------


def signature(
    secret: bytes, method: str, path: str, query: str, body_sha256: str, headers: Mapping[str, str]
) -> str:
    """The HMAC of one request: ``headers`` (lower-case names) give the ``SIGNED_HEADERS``."""
    signed = (headers.get(name, _ABSENT) for name in SIGNED_HEADERS)
    message = "\n".join((method.upper(), path, query, body_sha256, *signed)).encode("utf-8", "surrogatepass")
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def sign(
    secret: bytes, node: str, method: str, path: str, query: str = "", body: bytes = b"", *, now: float,
    headers: Mapping[str, str] | None = None, nonce: str | None = None, streamed: bool = False,
) -> dict[str, str]:
    """The headers to send with one peer request sent at ``now`` (wall-clock seconds): ``headers``
    (the request's own, such as its tenant; only ``SIGNED_HEADERS``, so none goes unsigned) and
    those that authenticate it, under a fresh random nonce unless ``nonce`` is given."""
    extra = dict(headers or {})
    unsigned = set(extra) - (set(SIGNED_HEADERS) - set(_AUTH_HEADERS))
    if unsigned:
        raise ValueError(f"headers the peer signature does not cover: {sorted(unsigned)}")
    sent = extra | {NODE_HEADER: node, TIME_HEADER: f"{now:.3f}", NONCE_HEADER: nonce or secrets.token_hex(16)}
    digest = STREAMED if streamed else _digest(body)
    return sent | {SIGNATURE_HEADER: signature(secret, method, path, query, digest, sent)}


def verify(
    secret: bytes, method: str, path: str, query: str, headers: Mapping[str, str], body: bytes, now: float,
    seen: ReplayGuard | None = None, streamed: bool = False,
) -> str:
    """The sending node's id, or PeerAuthError. ``headers`` have lower-case names. ``seen``
    remembers the nonces accepted so far and refuses a second use of one; only a one-off check
    (a test, a probe) may go without it. ``streamed``: the body is not in hand, and was signed
    as ``STREAMED`` (the route checks it against a digest its signed query names)."""
    node, stamp, nonce, given = (headers.get(h, "") for h in (NODE_HEADER, TIME_HEADER, NONCE_HEADER, SIGNATURE_HEADER))
    if not (node and stamp and nonce and given):
        raise PeerAuthError("missing peer signature")  # an old node's request too: it sends no nonce
    if len(nonce) > _MAX_NONCE:  # what the replay memory keeps stays small
        raise PeerAuthError("peer nonce too long")
    try:
        sent_at = float(stamp)
    except ValueError:
        raise PeerAuthError("bad peer time") from None
    if not math.isfinite(sent_at):  # a stamp of "nan" would pass any window
        raise PeerAuthError("bad peer time")
    expected = signature(secret, method, path, query, STREAMED if streamed else _digest(body), headers)
    if not hmac.compare_digest(expected, given):
        raise PeerAuthError("peer signature does not match")
    if abs(now - sent_at) > MAX_SKEW:
        raise PeerAuthError("peer request time too far from ours")
    if seen is not None:  # only once authenticated: no one without the secret adds to the memory
        seen.check(node, nonce, sent_at, now)
    return node


class ReplayGuard:
    """The nonces each sender used within the window, so that each is accepted once.

    A nonce is remembered until its stamp is more than ``MAX_SKEW`` old: from then on the time check
    refuses its request anyway. That alone bounds the memory by the senders' rate, which only
    holders of the cluster secret control (the guard is asked after the HMAC checks out); a hard
    cap, ``max_nonces`` over all senders, bounds it whatever they send. Past the cap the oldest
    nonce (by stamp) of the sender that holds the most is evicted, and that sender's *floor*
    rises to its stamp: a request of that sender stamped at or below its floor is refused as too
    old. So eviction never reopens a replay (an evicted nonce's request is below the floor), the
    flooding sender pays for its own flood (others keep their memory and floors), and what it
    costs is that this sender's requests delayed in flight behind a flood are refused, which
    callers already handle (a refused block is read from the lake, a heartbeat goes again).
    Refusing the new request instead would have refused the busiest peer's fresh traffic for
    as long as the flood lasts. ``max_senders`` bounds the senders: a new one past it is
    refused, since forgetting a sender would forget its floor.

    Pure apart from its own memory: the time is the ``now`` given to ``check``. About 200 bytes
    a nonce: the default cap is some 50 MB, room for 4,000 requests a second from all peers.
    """

    def __init__(self, *, max_nonces: int = 1 << 18, max_senders: int = 1024) -> None:
        self.max_nonces = max_nonces
        self.max_senders = max_senders
        self._senders: dict[str, _SenderNonces] = {}
        self._count = 0

    def __len__(self) -> int:
        """How many nonces are remembered."""
        return self._count

    def check(self, sender: str, nonce: str, sent_at: float, now: float) -> None:
        """Accept ``sender``'s ``nonce`` stamped ``sent_at`` (and remember it), or PeerAuthError."""
        self._expire(now)
        nonces = self._senders.get(sender)
        if nonces is None:
            if len(self._senders) >= self.max_senders:
                raise PeerAuthError("too many peers sending at once")
            nonces = self._senders[sender] = _SenderNonces()
        if sent_at <= nonces.floor:
            raise PeerAuthError("peer request older than the replay memory")
        if nonce in nonces.seen:
            raise PeerAuthError("peer request replayed")
        nonces.add(nonce, sent_at)
        self._count += 1
        if self._count > self.max_nonces:
            max(self._senders.values(), key=len).evict_oldest()
            self._count -= 1

    def _expire(self, now: float) -> None:
        # A receiver clock set back after expiry could accept a forgotten nonce's request again
        # within the window; wall clocks here are NTP-slewed, and the window is the bound as before.
        before = now - MAX_SKEW
        for sender, nonces in list(self._senders.items()):
            self._count -= nonces.expire(before)
            if not nonces.seen and nonces.floor < before:  # nothing left it could refuse
                del self._senders[sender]


class _SenderNonces:
    """One sender's remembered nonces, oldest stamp first, and its floor."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.by_stamp: list[tuple[float, str]] = []  # a heap: stamps do not arrive in order
        self.floor = -math.inf

    def __len__(self) -> int:
        return len(self.seen)

    def add(self, nonce: str, sent_at: float) -> None:
        self.seen.add(nonce)
        heapq.heappush(self.by_stamp, (sent_at, nonce))

    def expire(self, before: float) -> int:
        """Forget the nonces stamped before ``before``; how many went."""
        gone = 0
        while self.by_stamp and self.by_stamp[0][0] < before:
            self.seen.discard(heapq.heappop(self.by_stamp)[1])
            gone += 1
        return gone

    def evict_oldest(self) -> None:
        sent_at, nonce = heapq.heappop(self.by_stamp)
        self.seen.discard(nonce)
        self.floor = max(self.floor, sent_at)


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


MAX_ANOMALIES = 32  # reports one heartbeat carries at most
_MAX_METRIC = 48


@dataclass(frozen=True)
class AnomalyReport:
    """One of a node's micrometrics off (MicroMon, issue 15): which, how far (``severity`` >= 1:
    the value over its limit, or its deviation over the allowed one), for how long."""

    metric: str
    severity: float
    age_s: float

    def to_list(self) -> list[object]:
        return [self.metric, round(self.severity, 3), round(self.age_s, 1)]


def anomalies_json(reports: Sequence[AnomalyReport]) -> list[list[object]]:
    """What a heartbeat carries of its reports: ``[[metric, severity, age_s], ...]``."""
    return [report.to_list() for report in reports[:MAX_ANOMALIES]]


def _anomalies_doc(reports: Sequence[AnomalyReport]) -> dict[str, object]:
    """The ``anomalies`` field, left out when there are none (what older nodes sent)."""
    return {"anomalies": anomalies_json(reports)} if reports else {}


def _anomalies(doc: Mapping[str, object]) -> tuple[AnomalyReport, ...]:
    value = doc.get("anomalies")
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_ANOMALIES:
        raise WireError(f"anomalies must be a list of at most {MAX_ANOMALIES}")
    reports = []
    for item in value:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)
                and 0 < len(item[0]) <= _MAX_METRIC):
            raise WireError(f"an anomaly is [metric, severity, age_s], not {item!r}")
        severity, age = _number(item[1], "anomaly severity"), _number(item[2], "anomaly age")
        if not (math.isfinite(severity) and math.isfinite(age) and severity >= 0 and age >= 0):
            raise WireError(f"an anomaly's severity and age are finite and >= 0, not {item!r}")
        reports.append(AnomalyReport(item[0], severity, age))
    return tuple(reports)


# ---- messages ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Heartbeat:
    """POST heartbeat: the sender, its load (name -> figure) for the receiver's view, and its
    current anomaly reports (MicroMon: what is off, not the raw samples)."""

    member: Member
    load: Mapping[str, float] = field(default_factory=dict)
    anomalies: tuple[AnomalyReport, ...] = ()

    def to_json(self) -> bytes:
        return _dumps({**_member_doc(self.member), "load": dict(self.load), **_anomalies_doc(self.anomalies)})

    @classmethod
    def from_json(cls, body: bytes) -> Self:
        doc = json_object(body)
        return cls(member_from(doc), _load(doc), _anomalies(doc))


@dataclass(frozen=True)
class HeartbeatAnswer:
    """A heartbeat's answer: the node that answered, its load, and its ring's version (None
    from a node too old to send one)."""

    member: Member
    load: Mapping[str, float] = field(default_factory=dict)
    ring_version: str | None = None
    anomalies: tuple[AnomalyReport, ...] = ()

    def to_json(self) -> bytes:
        return _dumps({**_member_doc(self.member), "load": dict(self.load), "ring_version": self.ring_version,
                       **_anomalies_doc(self.anomalies)})

    @classmethod
    def from_json(cls, body: bytes) -> Self:
        doc = json_object(body)
        version = doc.get("ring_version")
        if version is not None and not isinstance(version, str):
            raise WireError(f"ring_version must be a string, not {version!r}")
        return cls(member_from(doc), _load(doc), version, _anomalies(doc))


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
class Goodbye:
    """POST goodbye: ``member`` leaves the cluster (SIGTERM's drain, ``gateway.health``); the
    receiver drops it from its ring at once. Only the member itself may say it: the receiver
    refuses a goodbye whose id is not the signed sender's."""

    member: Member

    def to_json(self) -> bytes:
        return _dumps(_member_doc(self.member))

    @classmethod
    def from_json(cls, body: bytes) -> Self:
        return cls(member_from(json_object(body)))


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
    """A block's answer, before its bytes: how many follow, and whether the owner had the block
    in its stores (``cached``; False: it is fetching it from the lake; None: not said, an older
    peer). The reader's miss cost counts only answers from the owner's cache: a lake fetch by
    the owner is the owner's L2 miss (issue 13)."""

    length: int
    cached: bool | None = None

    def headers(self) -> list[tuple[bytes, bytes]]:
        headers = [(b"content-type", b"application/octet-stream"), (b"content-length", str(self.length).encode())]
        if self.cached is not None:
            headers.append((CACHED_HEADER.encode(), b"1" if self.cached else b"0"))
        return headers

    @classmethod
    def from_headers(cls, headers: Mapping[str, str]) -> Self:
        try:
            length = int(headers["content-length"])
        except (KeyError, ValueError):
            raise WireError("a block answer needs its content-length") from None
        if length < 0:
            raise WireError(f"a block answer of {length} bytes")
        cached = headers.get(CACHED_HEADER)
        return cls(length, None if cached not in ("0", "1") else cached == "1")


# ---- fairness (issue 12): the leader's weight allocation (WA) and partition placement (PP) -------
#   POST reports     {window_s}: answered with the receiver's DemandReport over the last window_s
#   POST weights     WeightsUpdate: the receiver's local weights, lake share, hard limits
#   POST partitions  PartitionsUpdate: the partition -> owners table, planned on base_version
# Each update names its leader (the live node with the smallest id) and an epoch that grows
# with each of its rounds; a receiver applies it only from the leader it sees (see Follower in
# ``cachetier.cluster.follower``). Sizes are bounded: a map holds at most MAX_TENANTS tenants,
# a name (tenant or node id) at most MAX_NAME characters, every number is finite and >= 0.

WEIGHTS = PREFIX + "weights"
PARTITIONS = PREFIX + "partitions"
REPORTS = PREFIX + "reports"
# write-back (issue 14; the messages are cachetier.write.messages):
JOURNAL_COPY = PREFIX + "journal/copy"  # PUT: a durable copy in the receiver's journal (streamed body)
JOURNAL_NOTICE = PREFIX + "journal/notice"  # POST: pending, flushed, supersede
JOURNAL_HELD = PREFIX + "journal/held"  # POST: does the receiver still hold a version
JOURNAL_BODY = PREFIX + "journal/body"  # GET: bytes of a held version's body
STREAMED = "streamed"  # the body digest signed for a streamed body (its MD5 is in the signed query)

RESOURCES = ("requests", "client_bytes", "lake_bytes")  # what fair queuing shares (issue 12)
MAX_TENANTS = 1024
MAX_NAME = 64
MAX_PARTITIONS = 512  # partitions a report carries demand for (the busiest)
MAX_ROWS = 1 << 16  # rows of a partition table
MAX_OWNERS = 16  # owners of one partition
MAX_NODES = 256  # nodes a weights update names
_MAX_WINDOW = 3600.0

PerResource = Mapping[str, float]  # resource (one of RESOURCES) -> amount
PerTenant = Mapping[str, float]  # tenant -> amount


def _name(value: object, name: str) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_NAME:
        raise WireError(f"{name} must be a string of 1 to {MAX_NAME} characters, not {value!r}")
    return value


def _amount(value: object, name: str) -> float:
    number = _number(value, name)
    if not (math.isfinite(number) and number >= 0):
        raise WireError(f"{name} must be finite and >= 0, not {value!r}")
    return number


def _count(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise WireError(f"{name} must be an integer >= 0, not {value!r}")
    return value


def _mapping(value: object, name: str, bound: int = MAX_TENANTS) -> dict[str, object]:
    if not isinstance(value, dict):
        raise WireError(f"{name} must be an object, not {value!r}")
    if len(value) > bound:
        raise WireError(f"{name} holds {len(value)} entries, more than {bound}")
    return value


def _per_tenant(value: object, name: str) -> dict[str, float]:
    return {_name(t, f"{name} tenant"): _amount(v, f"{name}.{t}") for t, v in _mapping(value, name).items()}


def _per_resource(value: object, name: str) -> dict[str, float]:
    """Amounts by resource; resources this node does not know are ignored (a newer node's)."""
    doc = _mapping(value, name, bound=len(RESOURCES) * 4)
    return {r: _amount(v, f"{name}.{r}") for r, v in doc.items() if r in RESOURCES}


def _per_tenant_resource(value: object, name: str) -> dict[str, dict[str, float]]:
    return {_name(t, f"{name} tenant"): _per_resource(v, f"{name}.{t}") for t, v in _mapping(value, name).items()}


def _nested(table: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    return {k: dict(v) for k, v in table.items()}


class _Decodable(Protocol):
    @classmethod
    def from_json(cls, body: bytes) -> object: ...


def _checked(message: _Decodable, doc: Mapping[str, object]) -> bytes:
    """``doc`` encoded, once its receiver would take it: a sender's bug (a NaN weight, a long
    name) is a WireError here rather than a refusal on every peer."""
    try:
        body = json.dumps(doc, allow_nan=False).encode()
    except ValueError:
        raise WireError("a number that is not finite") from None
    type(message).from_json(body)
    return body


def _leader_epoch(doc: Mapping[str, object]) -> tuple[str, int]:
    return _name(doc.get("leader"), "leader"), _count(doc.get("epoch"), "epoch")


@dataclass(frozen=True)
class ReportsRequest:
    """POST reports: the leader asks for the receiver's demand over the last ``window_s`` seconds."""

    window_s: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.window_s) and 0 < self.window_s <= _MAX_WINDOW):
            raise WireError(f"window_s must be in (0, {_MAX_WINDOW:g}], not {self.window_s!r}")

    def to_json(self) -> bytes:
        return _dumps({"window_s": self.window_s})

    @classmethod
    def from_json(cls, body: bytes) -> Self:
        return cls(_number(json_object(body).get("window_s"), "window_s"))


@dataclass(frozen=True)
class DemandReport:
    """A node's answer to POST reports, over its last ``window_s`` seconds: per tenant per
    resource what it served and what was wanted (served plus what waited or was refused), as
    amounts over the window; its ``capacity`` per resource (units/s); its current local
    ``weights``; the demand of its busiest partitions (partition -> tenant -> client bytes
    wanted over the window, at most MAX_PARTITIONS, only those with demand); the version of the
    ring it has; and ``sequence``, its reports' count (a leader can tell a repeat)."""

    node: str
    sequence: int
    window_s: float
    served: Mapping[str, PerResource]
    wanted: Mapping[str, PerResource]
    capacity: PerResource
    weights: PerTenant
    partitions: Mapping[int, PerTenant]
    ring_version: str

    def to_json(self) -> bytes:
        return _checked(self, {
            "node": self.node, "sequence": self.sequence, "window_s": self.window_s,
            "served": _nested(self.served), "wanted": _nested(self.wanted), "capacity": dict(self.capacity),
            "weights": dict(self.weights), "ring_version": self.ring_version,
            "partitions": {str(p): dict(d) for p, d in self.partitions.items()},
        })

    @classmethod
    def from_json(cls, body: bytes) -> Self:
        doc = json_object(body)
        window = _amount(doc.get("window_s"), "window_s")
        partitions = {_partition(p): _per_tenant(d, f"partitions.{p}")
                      for p, d in _mapping(doc.get("partitions", {}), "partitions", MAX_PARTITIONS).items()}
        return cls(
            _name(doc.get("node"), "node"), _count(doc.get("sequence"), "sequence"), window,
            _per_tenant_resource(doc.get("served", {}), "served"), _per_tenant_resource(doc.get("wanted", {}), "wanted"),
            _per_resource(doc.get("capacity", {}), "capacity"), _per_tenant(doc.get("weights", {}), "weights"),
            partitions, _string(doc, "ring_version"))


def _partition(text: str) -> int:
    if not (text.isascii() and text.isdigit() and len(text) <= 8):
        raise WireError(f"a partition must be a number, not {text!r}")
    return int(text)


@dataclass(frozen=True)
class WeightsUpdate:
    """POST weights, from the ``leader`` in its round ``epoch``: the receiver's local weight per
    tenant, its share of the cluster's lake bandwidth (bytes/s; None: unlimited) and its share
    of each tenant's cluster-wide hard limits (tenant -> resource -> units/s). Answered
    Acknowledged, also when the receiver ignores it (not from the leader it sees, or stale)."""

    leader: str
    epoch: int
    weights: PerTenant
    lake_capacity: float | None = None
    limits: Mapping[str, PerResource] = field(default_factory=dict)
    cluster_mmr: float | None = None  # the min-max ratio the leader measured over the last window
    # every node's local weights of this round (node -> tenant -> weight), for replica choice by
    # the tenant's weight on each candidate (Pisces RS); left out when empty (older leaders)
    nodes: Mapping[str, PerTenant] = field(default_factory=dict)

    def to_json(self) -> bytes:
        doc: dict[str, object] = {"leader": self.leader, "epoch": self.epoch, "weights": dict(self.weights),
                                  "lake_capacity": self.lake_capacity, "limits": _nested(self.limits),
                                  "cluster_mmr": self.cluster_mmr}
        if self.nodes:
            doc["nodes"] = _nested(self.nodes)
        return _checked(self, doc)

    @classmethod
    def from_json(cls, body: bytes) -> Self:
        doc = json_object(body)
        leader, epoch = _leader_epoch(doc)
        lake, mmr = doc.get("lake_capacity"), doc.get("cluster_mmr")
        nodes = _mapping(doc.get("nodes", {}), "nodes", bound=MAX_NODES)
        return cls(leader, epoch, _per_tenant(doc.get("weights"), "weights"),
                   None if lake is None else _amount(lake, "lake_capacity"),
                   _per_tenant_resource(doc.get("limits", {}), "limits"),
                   None if mmr is None else _amount(mmr, "cluster_mmr"),
                   {_name(n, "nodes"): _per_tenant(w, f"nodes.{n}") for n, w in nodes.items()})


@dataclass(frozen=True)
class PartitionsUpdate:
    """POST partitions, from the ``leader`` in its round ``epoch``: the partition -> owner ids
    table (primary first) it planned on the ring of version ``base_version`` (the members' own
    consistent-hash plan); a receiver whose plan has another version does not apply it.
    Answered Acknowledged, applied or not."""

    leader: str
    epoch: int
    base_version: str
    table: tuple[tuple[str, ...], ...]

    def to_json(self) -> bytes:
        return _checked(self, {"leader": self.leader, "epoch": self.epoch, "base_version": self.base_version,
                       "table": [list(owners) for owners in self.table]})

    @classmethod
    def from_json(cls, body: bytes) -> Self:
        doc = json_object(body)
        leader, epoch = _leader_epoch(doc)
        rows = doc.get("table")
        if not isinstance(rows, list) or not 0 < len(rows) <= MAX_ROWS:
            raise WireError(f"table must be a list of 1 to {MAX_ROWS} rows")
        table = tuple(_owners(row) for row in rows)
        return cls(leader, epoch, _string(doc, "base_version"), table)


def _owners(row: object) -> tuple[str, ...]:
    if not isinstance(row, list) or not 0 < len(row) <= MAX_OWNERS or len(set(map(str, row))) != len(row):
        raise WireError(f"a partition's owners must be 1 to {MAX_OWNERS} distinct node ids, not {row!r}")
    return tuple(_name(owner, "owner") for owner in row)
