"""The fairness leader's messages (``cachetier.cluster.wire``: ReportsRequest, DemandReport,
WeightsUpdate, PartitionsUpdate): each survives its own encoding (hypothesis draws them), and
whatever is malformed or out of bounds is one WireError, on decoding and when a sender builds
one it would send."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cachetier.cluster import wire

names = st.text(min_size=1, max_size=wire.MAX_NAME)
amounts = st.floats(0, 1e15, allow_nan=False, allow_infinity=False)
per_resource = st.dictionaries(st.sampled_from(wire.RESOURCES), amounts)
per_tenant = st.dictionaries(names, amounts, max_size=6)
per_tenant_resource = st.dictionaries(names, per_resource, max_size=6)
epochs = st.integers(0, 1 << 62)

reports = st.builds(
    wire.DemandReport, names, st.integers(0, 1 << 40), st.floats(0.001, 3600), per_tenant_resource,
    per_tenant_resource, per_resource, per_tenant, st.dictionaries(st.integers(0, 1 << 20), per_tenant, max_size=5),
    st.text(max_size=20))
weights = st.builds(wire.WeightsUpdate, names, epochs, per_tenant, st.none() | amounts, per_tenant_resource)
tables = st.lists(st.lists(names, min_size=1, max_size=3, unique=True).map(tuple), min_size=1, max_size=8).map(tuple)
partitions = st.builds(wire.PartitionsUpdate, names, epochs, st.text(max_size=20), tables)


@given(st.floats(0.001, 3600))
def test_a_reports_request_round_trips(window: float) -> None:
    assert wire.ReportsRequest.from_json(wire.ReportsRequest(window).to_json()) == wire.ReportsRequest(window)


@given(reports)
def test_a_demand_report_round_trips(report: wire.DemandReport) -> None:
    assert wire.DemandReport.from_json(report.to_json()) == report


@given(weights)
def test_a_weights_update_round_trips(update: wire.WeightsUpdate) -> None:
    assert wire.WeightsUpdate.from_json(update.to_json()) == update


@given(partitions)
def test_a_partitions_update_round_trips(update: wire.PartitionsUpdate) -> None:
    assert wire.PartitionsUpdate.from_json(update.to_json()) == update


def test_the_fields_are_named_as_documented() -> None:
    update = wire.WeightsUpdate("n0", 7, {"a": 2.0}, None, {"a": {"requests": 10.0}})
    assert json.loads(update.to_json()) == {
        "leader": "n0", "epoch": 7, "weights": {"a": 2.0}, "lake_capacity": None, "limits": {"a": {"requests": 10.0}}, "cluster_mmr": None}
    rs = wire.WeightsUpdate("n0", 7, {"a": 2.0}, None, {}, None, {"n0": {"a": 2.0}, "n1": {"a": 0.5}})
    assert json.loads(rs.to_json())["nodes"] == {"n0": {"a": 2.0}, "n1": {"a": 0.5}}  # every node's (Pisces RS)
    assert wire.WeightsUpdate.from_json(rs.to_json()) == rs
    table = wire.PartitionsUpdate("n0", 8, "v1", (("n0", "n1"), ("n1",)))
    assert json.loads(table.to_json()) == {"leader": "n0", "epoch": 8, "base_version": "v1",
                                           "table": [["n0", "n1"], ["n1"]]}
    assert json.loads(wire.ReportsRequest(2.0).to_json()) == {"window_s": 2.0}


def test_unknown_fields_and_resources_are_ignored() -> None:
    body = json.dumps({"node": "n1", "sequence": 3, "window_s": 2, "ring_version": "v", "shiny": 1,
                       "wanted": {"a": {"requests": 5, "gpu_seconds": 9}}, "capacity": {"requests": 100}}).encode()
    report = wire.DemandReport.from_json(body)
    assert report.wanted == {"a": {"requests": 5.0}} and report.served == {} and report.partitions == {}
    assert report.capacity == {"requests": 100.0} and report.weights == {}


# ---- refusals ------------------------------------------------------------------------------------

REPORT: dict[str, Any] = {"node": "n1", "sequence": 1, "window_s": 2.0, "ring_version": "v",
                          "served": {}, "wanted": {"a": {"requests": 1.0}}, "capacity": {}, "weights": {"a": 1.0},
                          "partitions": {"3": {"a": 1.0}}}
WEIGHTS: dict[str, Any] = {"leader": "n0", "epoch": 1, "weights": {"a": 1.0}, "lake_capacity": None, "limits": {}}
PARTITIONS: dict[str, Any] = {"leader": "n0", "epoch": 1, "base_version": "v", "table": [["n0"], ["n1", "n0"]]}
LONG = "t" * (wire.MAX_NAME + 1)
MANY = {f"t{i}": 1.0 for i in range(wire.MAX_TENANTS + 1)}

BAD: list[tuple[Callable[[bytes], Any], dict[str, Any]]] = [
    *((wire.ReportsRequest.from_json, doc) for doc in (
        {}, {"window_s": 0}, {"window_s": -1}, {"window_s": "2"}, {"window_s": True}, {"window_s": 1e9})),
    *((wire.DemandReport.from_json, REPORT | change) for change in (
        {"node": ""}, {"node": LONG}, {"node": 3}, {"sequence": -1}, {"sequence": 1.5}, {"sequence": True},
        {"window_s": -2}, {"ring_version": None}, {"wanted": {"a": {"requests": -1}}},
        {"wanted": {"a": {"requests": "1"}}}, {"wanted": {"a": [1]}}, {"wanted": {LONG: {}}},
        {"wanted": {t: {} for t in MANY}}, {"weights": MANY}, {"weights": {"a": None}}, {"capacity": {"requests": -5}},
        {"partitions": {"x": {"a": 1.0}}}, {"partitions": {"-1": {}}}, {"partitions": {"1.5": {}}},
        {"partitions": {str(p): {} for p in range(wire.MAX_PARTITIONS + 1)}}, {"partitions": []})),
    *((wire.WeightsUpdate.from_json, WEIGHTS | change) for change in (
        {"leader": None}, {"leader": LONG}, {"epoch": -1}, {"epoch": "1"}, {"weights": None}, {"weights": MANY},
        {"weights": {"a": -1.0}}, {"lake_capacity": -1}, {"lake_capacity": "fast"}, {"limits": {"a": 5}},
        {"limits": {"a": {"requests": -1}}})),
    *((wire.PartitionsUpdate.from_json, PARTITIONS | change) for change in (
        {"leader": ""}, {"epoch": None}, {"base_version": 1}, {"table": []}, {"table": None}, {"table": [[]]},
        {"table": [["n0", "n0"]]}, {"table": [["n0", 1]]}, {"table": [[LONG]]}, {"table": ["n0"]},
        {"table": [[f"n{i}" for i in range(wire.MAX_OWNERS + 1)]]})),
]


@pytest.mark.parametrize(("decode", "doc"), BAD, ids=[f"{d.__qualname__.split('.')[0]}-{i}" for i, (d, _) in enumerate(BAD)])
def test_a_malformed_message_is_a_wire_error(decode: Callable[[bytes], Any], doc: dict[str, Any]) -> None:
    with pytest.raises(wire.WireError):
        decode(json.dumps(doc).encode())


@pytest.mark.parametrize("body", [b"", b"[]", b"nope", b'{"window_s": NaN}', b'{"window_s": Infinity}'])
def test_not_one_json_object_or_not_a_finite_number_is_a_wire_error(body: bytes) -> None:
    for decode in (wire.ReportsRequest.from_json, wire.DemandReport.from_json, wire.WeightsUpdate.from_json,
                   wire.PartitionsUpdate.from_json):
        with pytest.raises(wire.WireError):
            decode(body)


@pytest.mark.parametrize("build", [
    lambda: wire.WeightsUpdate("n0", 1, {"a": float("nan")}),
    lambda: wire.WeightsUpdate("n0", 1, {"a": float("inf")}),
    lambda: wire.WeightsUpdate("n0", 1, MANY),
    lambda: wire.WeightsUpdate("n0", 1, {"a": 1.0}, -3.0),
    lambda: wire.PartitionsUpdate(LONG, 1, "v", (("n0",),)),
    lambda: wire.PartitionsUpdate("n0", 1, "v", (("n0", "n0"),)),
    lambda: wire.DemandReport("n1", 0, 1.0, {}, {}, {}, {}, {-1: {}}, "v"),
    lambda: wire.ReportsRequest(float("nan")),
])
def test_a_sender_cannot_build_a_message_its_peers_would_refuse(build: Callable[[], Any]) -> None:
    with pytest.raises(wire.WireError):
        message = build()
        message.to_json()
