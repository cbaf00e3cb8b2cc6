"""The peer wire protocol (``cachetier.cluster.wire``): every message survives its own encoding
(hypothesis draws them), what is malformed is one ``WireError`` whatever is wrong with it, and the
HMAC refuses what was changed, forged, stale or replayed, at the ``now`` given."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlencode

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cachetier.cluster import wire
from cachetier.cluster.ring import Member

SECRET = b"cluster-secret-0123456789"
NOW = 1_800_000_000.0
V = TypeVar("V")

# ---- round trips -------------------------------------------------------------------------------

texts = st.text(max_size=40)
url_texts = texts.filter(lambda s: not s.endswith("/"))  # a member's URL is kept without its "/"
finite = st.floats(allow_nan=False, allow_infinity=False)
members = st.builds(Member, texts, url_texts, finite)
loads = st.dictionaries(texts, finite, max_size=5)
query_texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)  # a query is UTF-8


@st.composite
def block_requests(draw: st.DrawFn) -> wire.BlockRequest:
    size = draw(st.integers(1, 1 << 50))
    block_size = draw(st.integers(1, 1 << 30))
    index = draw(st.integers(0, (size + block_size - 1) // block_size - 1))
    bucket, key, etag = draw(query_texts), draw(query_texts), draw(query_texts)
    tenant = draw(st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=64))
    return wire.BlockRequest(bucket, key, etag, size, index, block_size, tenant)


@given(members, loads)
def test_a_heartbeat_round_trips(member: Member, load: dict[str, float]) -> None:
    message = wire.Heartbeat(member, load)
    assert wire.Heartbeat.from_json(message.to_json()) == message


@given(members, loads, st.none() | texts)
def test_a_heartbeat_answer_round_trips(member: Member, load: dict[str, float], version: str | None) -> None:
    message = wire.HeartbeatAnswer(member, load, version)
    assert wire.HeartbeatAnswer.from_json(message.to_json()) == message


@given(texts, st.none() | st.lists(texts, max_size=5).map(tuple))
def test_an_invalidation_round_trips(bucket: str, keys: tuple[str, ...] | None) -> None:
    message = wire.Invalidate(bucket, keys)
    assert wire.Invalidate.from_json(message.to_json()) == message


def test_an_acknowledgement_round_trips() -> None:
    assert wire.Acknowledged.from_json(wire.Acknowledged().to_json()) == wire.Acknowledged()


@given(block_requests())
def test_a_block_request_round_trips(message: wire.BlockRequest) -> None:
    assert wire.BlockRequest.from_query(message.to_query(), message.headers()) == message
    assert 1 <= message.length <= message.block_size


@given(st.integers(0, 1 << 40))
def test_a_block_answer_round_trips(length: int) -> None:
    headers = {k.decode(): v.decode() for k, v in wire.BlockAnswer(length).headers()}
    assert wire.BlockAnswer.from_headers(headers) == wire.BlockAnswer(length)


@given(texts, st.sampled_from(["GET", "POST"]), texts, texts, st.binary(max_size=64),
       st.floats(-wire.MAX_SKEW + 0.01, wire.MAX_SKEW - 0.01))
def test_a_signed_request_verifies_within_the_window(
    node: str, method: str, path: str, query: str, body: bytes, skew: float
) -> None:
    headers = wire.sign(SECRET, node or "n", method, path, query, body, now=NOW)
    assert wire.verify(SECRET, method, path, query, headers, body, NOW + skew) == (node or "n")


def test_what_the_old_nodes_send_is_what_the_messages_say() -> None:
    """The JSON fields and query names are today's: mixed-version nodes keep talking."""
    me = Member("n1", "http://n1:9000", 2.0)
    assert json.loads(wire.Heartbeat(me, {"cpu": 1.0}).to_json()) == {
        "id": "n1", "url": "http://n1:9000", "weight": 2.0, "load": {"cpu": 1.0}}
    assert json.loads(wire.HeartbeatAnswer(me, {}, "v1").to_json()) == {
        "id": "n1", "url": "http://n1:9000", "weight": 2.0, "load": {}, "ring_version": "v1"}
    assert json.loads(wire.Invalidate("b", ("k",)).to_json()) == {"bucket": "b", "keys": ["k"]}
    assert json.loads(wire.Acknowledged().to_json()) == {"ok": True}
    request = wire.BlockRequest("b", "a/b c", '"e"', 10, 1, 4, "alice")
    assert request.to_query() == "bucket=b&key=a%2Fb+c&etag=%22e%22&size=10&index=1&block_size=4"
    assert request.headers() == {"x-lakegate-tenant": "alice"}


def test_unknown_fields_are_ignored_and_old_answers_read() -> None:
    """A newer node may add fields; an answer without ring_version or load still reads."""
    body = b'{"id": "n", "url": "http://n/", "load": null, "shiny": [1, 2]}'
    assert wire.Heartbeat.from_json(body) == wire.Heartbeat(Member("n", "http://n"), {})
    assert wire.HeartbeatAnswer.from_json(body).ring_version is None
    assert wire.BlockRequest.from_query("bucket=b&key=k&etag=e&size=3&index=0&block_size=4&new=1", {}).tenant == "-"


def test_a_long_tenant_is_cut_to_64_characters() -> None:
    request = wire.BlockRequest.from_query("bucket=b&key=k&etag=e&size=3&index=0&block_size=4",
                                           {"x-lakegate-tenant": "t" * 100})
    assert request.tenant == "t" * 64


# ---- rejections --------------------------------------------------------------------------------

JSON_MESSAGES: list[Callable[[bytes], Any]] = [
    wire.Heartbeat.from_json, wire.HeartbeatAnswer.from_json, wire.Invalidate.from_json, wire.Acknowledged.from_json,
]
NOT_AN_OBJECT = [b"", b"{", b"nope", b"\xff\xfe", b"[1, 2]", b"null", b'"s"', b"7",
                 b'{"id": "n", "url": "u"} trailing junk', b'{"ok": true}{"ok": true}']


@pytest.mark.parametrize("decode", JSON_MESSAGES, ids=lambda d: d.__qualname__.split(".")[0])
@pytest.mark.parametrize("body", NOT_AN_OBJECT)
def test_a_body_that_is_not_one_json_object_is_a_wire_error(decode: Callable[[bytes], Any], body: bytes) -> None:
    with pytest.raises(wire.WireError):
        decode(body)


def _without(doc: dict[str, V], name: str) -> dict[str, V]:
    return {k: v for k, v in doc.items() if k != name}


HEARTBEAT = {"id": "n", "url": "http://n", "weight": 1.0, "load": {"cpu": 1.0}}
BAD_HEARTBEATS = [
    _without(HEARTBEAT, "id"), _without(HEARTBEAT, "url"),
    HEARTBEAT | {"id": 1}, HEARTBEAT | {"id": None}, HEARTBEAT | {"url": ["u"]},
    HEARTBEAT | {"weight": "x"}, HEARTBEAT | {"weight": True}, HEARTBEAT | {"weight": None},
    HEARTBEAT | {"load": [1, 2]}, HEARTBEAT | {"load": "busy"}, HEARTBEAT | {"load": {"cpu": "high"}},
    HEARTBEAT | {"load": {"cpu": None}}, HEARTBEAT | {"load": {"cpu": False}},
]


@pytest.mark.parametrize("doc", BAD_HEARTBEATS, ids=repr)
def test_a_malformed_heartbeat_or_answer_is_a_wire_error(doc: dict[str, object]) -> None:
    for decode in (wire.Heartbeat.from_json, wire.HeartbeatAnswer.from_json):
        with pytest.raises(wire.WireError):
            decode(json.dumps(doc).encode())


def test_a_ring_version_that_is_not_a_string_is_a_wire_error() -> None:
    with pytest.raises(wire.WireError):
        wire.HeartbeatAnswer.from_json(json.dumps(HEARTBEAT | {"ring_version": 3}).encode())


@pytest.mark.parametrize("doc", [{"keys": ["a"]}, {"bucket": "b"} | {"keys": "a"}, {"bucket": 1, "keys": None},
                                 {"bucket": "b", "keys": ["a", 1]}, {"bucket": "b", "keys": {"a": 1}}], ids=repr)
def test_a_malformed_invalidation_is_a_wire_error(doc: dict[str, object]) -> None:
    with pytest.raises(wire.WireError):
        wire.Invalidate.from_json(json.dumps(doc).encode())


@pytest.mark.parametrize("doc", [{}, {"ok": False}, {"ok": 1}, {"error": "no"}], ids=repr)
def test_anything_but_ok_true_is_not_an_acknowledgement(doc: dict[str, object]) -> None:
    with pytest.raises(wire.WireError):
        wire.Acknowledged.from_json(json.dumps(doc).encode())


BLOCK = {"bucket": "b", "key": "k", "etag": '"e"', "size": "10", "index": "1", "block_size": "4"}
BAD_BLOCKS = [
    *(_without(BLOCK, name) for name in BLOCK),
    BLOCK | {"size": "ten"}, BLOCK | {"index": "1.5"}, BLOCK | {"block_size": ""},
    BLOCK | {"index": "-1"}, BLOCK | {"index": "3"}, BLOCK | {"size": "0"}, BLOCK | {"size": "-4"},
    BLOCK | {"block_size": "0"}, BLOCK | {"block_size": "-4"},
]


@pytest.mark.parametrize("params", BAD_BLOCKS, ids=repr)
def test_a_malformed_block_request_is_a_wire_error(params: dict[str, str]) -> None:
    with pytest.raises(wire.WireError):
        wire.BlockRequest.from_query(urlencode(params), {})


@pytest.mark.parametrize("headers", [{}, {"content-length": "many"}, {"content-length": "-1"}], ids=repr)
def test_a_block_answer_without_a_length_is_a_wire_error(headers: dict[str, str]) -> None:
    with pytest.raises(wire.WireError):
        wire.BlockAnswer.from_headers(headers)


# ---- the HMAC ----------------------------------------------------------------------------------

PATH, BODY = wire.HEARTBEAT, json.dumps(HEARTBEAT).encode()


def _verify(
    headers: dict[str, str], now: float = NOW, secret: bytes = SECRET, seen: wire.ReplayGuard | None = None
) -> str:
    return wire.verify(secret, "POST", PATH, "", headers, BODY, now, seen)


def test_signing_uses_the_now_it_is_given() -> None:
    assert wire.sign(SECRET, "n2", "POST", PATH, "", BODY, now=NOW)[wire.TIME_HEADER] == f"{NOW:.3f}"


@pytest.mark.parametrize(
    "forge",
    [
        lambda h: h | {wire.SIGNATURE_HEADER: "0" * 64},
        lambda h: h | {wire.SIGNATURE_HEADER: h[wire.SIGNATURE_HEADER].upper()},
        lambda h: h | {wire.NODE_HEADER: "n3"},
        lambda h: h | {wire.TIME_HEADER: f"{NOW + 1:.3f}"},
        lambda h: h | {wire.TIME_HEADER: "nan"},
        lambda h: h | {wire.TIME_HEADER: "soon"},
        lambda h: _without(h, wire.SIGNATURE_HEADER),
        lambda h: h | {wire.NONCE_HEADER: "0" * 32},
        lambda h: h | {wire.TENANT_HEADER: "alice"},
    ],
    ids=["zeros", "upper-case", "other-node", "other-time", "nan", "not-a-time", "unsigned", "other-nonce",
         "added-tenant"],
)
def test_a_forged_signature_is_refused(forge: Callable[[dict[str, str]], dict[str, str]]) -> None:
    with pytest.raises(wire.PeerAuthError):
        _verify(forge(wire.sign(SECRET, "n2", "POST", PATH, "", BODY, now=NOW)))


def test_a_signature_of_another_secret_is_refused() -> None:
    with pytest.raises(wire.PeerAuthError):
        _verify(wire.sign(b"another secret", "n2", "POST", PATH, "", BODY, now=NOW))


def test_a_stamp_of_nan_is_refused_even_when_signed() -> None:
    """Only a holder of the secret could sign one, but no window may be skipped."""
    headers = wire.sign(SECRET, "n2", "POST", PATH, "", BODY, now=NOW)
    stamp = "nan"
    headers[wire.TIME_HEADER] = stamp
    headers[wire.SIGNATURE_HEADER] = wire.signature(SECRET, "POST", PATH, "", hashlib.sha256(BODY).hexdigest(), headers)
    with pytest.raises(wire.PeerAuthError, match="time"):
        _verify(headers)


@pytest.mark.parametrize("sent_at", [NOW - wire.MAX_SKEW - 1, NOW + wire.MAX_SKEW + 1, 1_000_000_000.0])
def test_a_stale_or_early_request_is_refused(sent_at: float) -> None:
    with pytest.raises(wire.PeerAuthError, match="time"):
        _verify(wire.sign(SECRET, "n2", "POST", PATH, "", BODY, now=sent_at))


def test_a_replay_is_refused_within_the_window_and_after_it() -> None:
    """The same signed request again: refused by the nonce memory within MAX_SKEW of its stamp,
    by the time check after it (when the memory has forgotten it)."""
    seen = wire.ReplayGuard()
    headers = wire.sign(SECRET, "n2", "POST", PATH, "", BODY, now=NOW)
    assert _verify(dict(headers), now=NOW + 1, seen=seen) == "n2"
    for now in (NOW + 1, NOW + 2, NOW + wire.MAX_SKEW - 0.5):
        with pytest.raises(wire.PeerAuthError, match="replayed"):
            _verify(dict(headers), now=now, seen=seen)
    with pytest.raises(wire.PeerAuthError, match="time"):
        _verify(dict(headers), now=NOW + wire.MAX_SKEW + 0.5, seen=seen)
    later = wire.sign(SECRET, "n2", "POST", PATH, "", BODY, now=NOW + wire.MAX_SKEW + 0.5)
    assert _verify(later, now=NOW + wire.MAX_SKEW + 0.5, seen=seen) == "n2"
    assert len(seen) == 1  # the first nonce forgotten: the time check refuses its request alone


def test_a_fresh_request_is_accepted_alongside_a_refused_replay() -> None:
    """Each request the client signs has its own nonce: the same message again, signed again, is
    not a replay; nor is another sender's use of the same nonce."""
    seen = wire.ReplayGuard()
    first = wire.sign(SECRET, "n2", "POST", PATH, "", BODY, now=NOW)
    again = wire.sign(SECRET, "n2", "POST", PATH, "", BODY, now=NOW)
    assert first[wire.NONCE_HEADER] != again[wire.NONCE_HEADER]
    assert _verify(first, seen=seen) == "n2" and _verify(again, seen=seen) == "n2"
    with pytest.raises(wire.PeerAuthError, match="replayed"):
        _verify(first, seen=seen)
    other = wire.sign(SECRET, "n3", "POST", PATH, "", BODY, now=NOW, nonce=first[wire.NONCE_HEADER])
    assert _verify(other, seen=seen) == "n3"


def test_a_refused_signature_adds_nothing_to_the_memory() -> None:
    seen = wire.ReplayGuard()
    forged = wire.sign(b"another secret", "n2", "POST", PATH, "", BODY, now=NOW)
    with pytest.raises(wire.PeerAuthError, match="match"):
        _verify(forged, seen=seen)
    assert len(seen) == 0


def test_the_tenant_header_is_signed() -> None:
    """The tenant a block is fetched for is signed: changed, added or dropped, it is refused."""
    query = wire.BlockRequest("b", "k", '"e"', 10, 1, 4, "alice").to_query()
    headers = wire.sign(SECRET, "n2", "GET", wire.BLOCK, query, now=NOW, headers={wire.TENANT_HEADER: "alice"})
    assert headers[wire.TENANT_HEADER] == "alice"
    assert wire.verify(SECRET, "GET", wire.BLOCK, query, headers, b"", NOW) == "n2"
    untenanted = wire.sign(SECRET, "n2", "GET", wire.BLOCK, query, now=NOW)
    for forged in (headers | {wire.TENANT_HEADER: "bob"}, _without(headers, wire.TENANT_HEADER),
                   untenanted | {wire.TENANT_HEADER: "alice"}, untenanted | {wire.TENANT_HEADER: ""}):
        with pytest.raises(wire.PeerAuthError, match="match"):
            wire.verify(SECRET, "GET", wire.BLOCK, query, forged, b"", NOW)


def test_only_signed_headers_can_be_sent_signed() -> None:
    with pytest.raises(ValueError, match="does not cover"):
        wire.sign(SECRET, "n2", "GET", wire.BLOCK, now=NOW, headers={"x-lakegate-priority": "high"})


@pytest.mark.parametrize("nonce", ["", "n" * 65])
def test_a_missing_or_oversized_nonce_is_refused(nonce: str) -> None:
    """An old node's request has no nonce (and its signature covers neither nonce nor tenant)."""
    headers = wire.sign(SECRET, "n2", "POST", PATH, "", BODY, now=NOW, nonce=nonce or None)
    headers = headers | {wire.NONCE_HEADER: nonce} if nonce else _without(headers, wire.NONCE_HEADER)
    with pytest.raises(wire.PeerAuthError, match="missing|too long"):
        _verify(headers)


def test_the_nonce_memory_forgets_after_max_skew() -> None:
    """The guard on a fake clock: a nonce is kept while its stamp is within MAX_SKEW of now, and
    forgotten after, when the time check refuses its request anyway; an idle sender goes too."""
    seen = wire.ReplayGuard()
    seen.check("n2", "a", NOW, now=NOW)
    seen.check("n2", "b", NOW + 10, now=NOW + 10)
    with pytest.raises(wire.PeerAuthError, match="replayed"):
        seen.check("n2", "a", NOW, now=NOW + wire.MAX_SKEW)
    seen.check("n3", "c", NOW + wire.MAX_SKEW + 1, now=NOW + wire.MAX_SKEW + 1)
    assert len(seen) == 2  # "a" went
    seen.check("n3", "d", NOW + wire.MAX_SKEW + 20, now=NOW + wire.MAX_SKEW + 20)
    assert len(seen) == 2 and list(seen._senders) == ["n3"]  # "b" went, and with it n2


def test_the_nonce_memory_is_bounded_under_a_flood_and_never_reopens_a_replay() -> None:
    """Distinct valid requests past the cap evict the flooding sender's oldest nonces and raise
    its floor: the memory stays at the cap, the evicted nonces' requests are still refused (as too
    old), the sender's fresh requests and the other senders' memory are untouched."""
    seen = wire.ReplayGuard(max_nonces=100)
    seen.check("quiet", "q", NOW, now=NOW)
    for i in range(10_000):
        seen.check("loud", f"n{i}", NOW + i / 1000, now=NOW + i / 1000)
        assert len(seen) <= 100
    now = NOW + 10
    with pytest.raises(wire.PeerAuthError, match="older"):
        seen.check("loud", "n0", NOW, now=now)  # evicted, within the window: refused all the same
    with pytest.raises(wire.PeerAuthError, match="replayed"):
        seen.check("loud", "n9999", NOW + 9.999, now=now)
    with pytest.raises(wire.PeerAuthError, match="replayed"):
        seen.check("quiet", "q", NOW, now=now)  # the quiet sender kept its memory
    seen.check("loud", "fresh", now, now=now)
    seen.check("quiet", "q2", NOW + 5, now=now)  # and its floor: a slow request of its own passes
    assert len(seen) == 100


def test_the_senders_are_bounded_too() -> None:
    seen = wire.ReplayGuard(max_senders=2)
    seen.check("n1", "a", NOW, now=NOW)
    seen.check("n2", "a", NOW, now=NOW)
    with pytest.raises(wire.PeerAuthError, match="too many"):
        seen.check("n3", "a", NOW, now=NOW)
    seen.check("n3", "a", NOW + wire.MAX_SKEW + 1, now=NOW + wire.MAX_SKEW + 1)  # once the others expired


def test_an_evicted_senders_floor_outlives_its_last_nonce() -> None:
    """A sender whose only nonce was evicted keeps its floor until the window passes it."""
    seen = wire.ReplayGuard(max_nonces=1)
    seen.check("n1", "a", NOW, now=NOW)
    seen.check("n2", "b", NOW + 1, now=NOW + 1)  # past the cap: n1's "a" evicted (ties: the first)
    with pytest.raises(wire.PeerAuthError, match="older|replayed"):
        seen.check("n1", "a", NOW, now=NOW + 2)


def test_every_wire_error_is_one_type() -> None:
    assert issubclass(wire.PeerAuthError, wire.WireError) and issubclass(wire.WireError, ValueError)


def test_a_block_answer_says_whether_the_owner_had_the_block() -> None:
    for cached in (True, False, None):
        headers = {k.decode(): v.decode() for k, v in wire.BlockAnswer(5, cached).headers()}
        assert wire.BlockAnswer.from_headers(headers) == wire.BlockAnswer(5, cached)
    odd = wire.BlockAnswer.from_headers({"content-length": "5", wire.CACHED_HEADER: "maybe"})
    assert odd.cached is None  # an older (or odd) peer says nothing


def test_heartbeats_carry_anomaly_reports_compactly() -> None:
    me = Member("n1", "http://n1:9000")
    reports = (wire.AnomalyReport("iowait_percent", 2.5, 3.0), wire.AnomalyReport("loop_lag_s", 1.2, 0.5))
    beat = wire.Heartbeat(me, {"cpu": 1.0}, reports)
    assert wire.Heartbeat.from_json(beat.to_json()) == beat
    assert json.loads(beat.to_json())["anomalies"] == [["iowait_percent", 2.5, 3.0], ["loop_lag_s", 1.2, 0.5]]
    answer = wire.HeartbeatAnswer(me, {}, "v1", reports)
    assert wire.HeartbeatAnswer.from_json(answer.to_json()) == answer
    for bad in ([["m", -1, 0]], [["m", 1]], [[1, 1, 1]], [["", 1, 1]], [["m", 1, float("inf")]],
                [["m" * 49, 1, 1]], [["m", 1, 1]] * (wire.MAX_ANOMALIES + 1), "x"):
        body = json.dumps({"id": "n1", "url": "http://n1:9000", "anomalies": bad}).encode()
        with pytest.raises(wire.WireError):
            wire.Heartbeat.from_json(body)
