"""The write-back peer messages (cachetier/write/messages.py): round trips, and anything
malformed refused as one WireError (the peer API's 400), never a KeyError or TypeError."""

from __future__ import annotations

import json

import pytest

from cachetier.cluster.wire import WireError
from cachetier.write.journal import Version
from cachetier.write.messages import BodyRequest, Copy, Held, HeldQuery, Notice, version_doc, version_from

V = Version("b", "k/é", 7, "put", '"e"', 10, 1700000000.5, "text/plain", {"a": "1"}, {"cache-control": "no"},
            (5, 5), "t", ("n0", "n1", "n2"), 0, sync=2)


def test_a_version_travels_whole_and_lands_at_the_receivers_place() -> None:
    copy = Copy.from_query(Copy(V, "0" * 32).to_query(), "n1")
    assert copy.version.position == 1 and copy.md5 == "0" * 32
    assert version_doc(copy.version) == version_doc(V)
    notice = Notice.from_json(Notice.pending(V).to_json())
    assert notice.version is not None and notice.version.position == -1 and notice.seq == 7
    for kind in ("flushed", "supersede"):
        assert Notice.from_json(Notice(kind, "b", "k", 3).to_json()) == Notice(kind, "b", "k", 3)
    assert HeldQuery.from_json(HeldQuery("b", "k", 3).to_json()) == HeldQuery("b", "k", 3)
    assert Held.from_json(Held(True, False).to_json()) == Held(True, False)
    assert Held.from_json(b'{"held": false}') == Held(False, False)  # an answer without gone
    assert BodyRequest.from_query(BodyRequest("b", "k", 3, 0, 9).to_query()) == BodyRequest("b", "k", 3, 0, 9)


def test_a_copy_for_a_node_not_among_its_holders_is_refused() -> None:
    with pytest.raises(WireError):
        Copy.from_query(Copy(V, "0" * 32).to_query(), "n9")


@pytest.mark.parametrize("change", [
    {"kind": "append"}, {"seq": 0}, {"seq": "1"}, {"size": -1}, {"holders": []}, {"holders": ["x"] * 9},
    {"holders": [1]}, {"part_sizes": [1, 2]}, {"part_sizes": [True]}, {"last_modified": "now"},
    {"metadata": {"a": 1}}, {"content_type": 5}, {"bucket": ""}, {"sync": 0},
])
def test_a_malformed_version_is_a_wire_error(change: dict[str, object]) -> None:
    doc = version_doc(V) | change
    with pytest.raises(WireError):
        version_from(doc)


@pytest.mark.parametrize("body", [b"[]", b"{}", b'{"kind": "pending"}', b'{"kind": "flushed", "bucket": "b"}',
                                  b'{"kind": "x", "bucket": "b", "key": "k", "seq": 1}', b"not json"])
def test_a_malformed_notice_is_a_wire_error(body: bytes) -> None:
    with pytest.raises(WireError):
        Notice.from_json(body)


@pytest.mark.parametrize("query", ["", "bucket=b&key=k&seq=1&first=5&last=1", "bucket=b&key=k&seq=x&first=0&last=1"])
def test_a_malformed_body_request_is_a_wire_error(query: str) -> None:
    with pytest.raises(WireError):
        BodyRequest.from_query(query)


def test_a_copy_needs_a_hex_md5() -> None:
    query = Copy(V, "0" * 32).to_query().replace("0" * 32, "z" * 32)
    with pytest.raises(WireError):
        Copy.from_query(query, "n1")
    with pytest.raises(WireError):
        Copy.from_query("version=" + json.dumps({"holders": ["n1"]}), "n1")
