"""The peer wire protocol (``cachetier.cluster.wire``): every message survives its own encoding
(hypothesis draws them), what is malformed is one ``WireError`` whatever is wrong with it, and the
HMAC refuses what was changed, forged, stale or replayed outside the window, at the ``now`` given."""

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


def _verify(headers: dict[str, str], now: float = NOW, secret: bytes = SECRET) -> str:
    return wire.verify(secret, "POST", PATH, "", headers, BODY, now)


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
    ],
    ids=["zeros", "upper-case", "other-node", "other-time", "nan", "not-a-time", "unsigned"],
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
    headers |= {wire.TIME_HEADER: stamp, wire.SIGNATURE_HEADER: wire.signature(
        SECRET, "POST", PATH, "", hashlib.sha256(BODY).hexdigest(), "n2", stamp)}
    with pytest.raises(wire.PeerAuthError, match="time"):
        _verify(headers)


@pytest.mark.parametrize("sent_at", [NOW - wire.MAX_SKEW - 1, NOW + wire.MAX_SKEW + 1, 1_000_000_000.0])
def test_a_stale_or_early_request_is_refused(sent_at: float) -> None:
    with pytest.raises(wire.PeerAuthError, match="time"):
        _verify(wire.sign(SECRET, "n2", "POST", PATH, "", BODY, now=sent_at))


def test_a_replay_is_refused_once_outside_the_window() -> None:
    """The same signed request again: accepted within MAX_SKEW of its stamp (the protocol keeps
    no nonces), refused after."""
    headers = wire.sign(SECRET, "n2", "POST", PATH, "", BODY, now=NOW)
    assert _verify(dict(headers), now=NOW + wire.MAX_SKEW - 0.5) == "n2"
    with pytest.raises(wire.PeerAuthError, match="time"):
        _verify(dict(headers), now=NOW + wire.MAX_SKEW + 0.5)


def test_every_wire_error_is_one_type() -> None:
    assert issubclass(wire.PeerAuthError, wire.WireError) and issubclass(wire.WireError, ValueError)
