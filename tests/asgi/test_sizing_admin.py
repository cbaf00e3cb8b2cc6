"""/_lakegate/admin/sizing and the sizing metrics through the whole app in-process (issue 13):
the admin credential only; JSON with the contract's names and the L1 curve of the reads this
node served; ``?format=png`` draws it; /metrics carries the split and the predictions. A node
alone: fixed sizing by default (L1 keeps LAKEGATE_CACHE_CAPACITY), adaptive gives L1 the total.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.endpoints import ADMIN_ACCESS_KEY, ADMIN_SECRET_KEY, ALICE, Tenant
from inprocess import AsgiBridge, lakegate_app
from test_admin import answer, denied, signed, unsigned

from cachetier.lake.memory import MemoryLake

SIZING = "/_lakegate/admin/sizing"
MiB = 1 << 20


def _bridge(folder: Path, **overrides: object) -> Iterator[AsgiBridge]:
    served = AsgiBridge(lakegate_app(folder, MemoryLake(), admin_access_key=ADMIN_ACCESS_KEY,
                                     admin_secret_key=ADMIN_SECRET_KEY, block_size=str(MiB), cache_capacity="16MiB",
                                     l2_capacity="8MiB", sizing_interval=0.2, sizing_sample_rate=1,
                                     cache_on_write=False, **overrides))
    served.start()
    yield served
    served.close()


@pytest.fixture(scope="module")
def fixed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AsgiBridge]:
    yield from _bridge(tmp_path_factory.mktemp("sizing-fixed"))


@pytest.fixture(scope="module")
def adaptive(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AsgiBridge]:
    yield from _bridge(tmp_path_factory.mktemp("sizing-adaptive"), sizing="adaptive")


def _report(bridge: AsgiBridge) -> dict[str, Any]:
    status, body = answer(bridge, signed(SIZING))
    assert status == 200, body
    return dict(json.loads(body))


def _read_some(bridge: AsgiBridge) -> None:
    s3 = bridge_client(bridge)
    if "sized" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket="sized")
        for i in range(6):
            s3.put_object(Bucket="sized", Key=f"k{i}", Body=bytes([i]) * MiB)
    for _ in range(3):
        for i in range(6):
            assert len(s3.get_object(Bucket="sized", Key=f"k{i}")["Body"].read()) == MiB


def bridge_client(bridge: AsgiBridge, tenant: Tenant = ALICE) -> Any:
    import boto3
    from botocore.config import Config

    client = boto3.client("s3", endpoint_url="http://localhost:21401", aws_access_key_id=tenant.access_key,
                          aws_secret_access_key=tenant.secret_key, region_name="us-east-1",
                          config=Config(s3={"addressing_style": "path"}))
    client.meta.events.register_last("before-send.s3", bridge.send)
    return client


def _wait_for_curve(bridge: AsgiBridge) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        report = _report(bridge)
        if (report["curves"]["l1"] and report["streams"]["l1"]["sampled_references"] == 0 and report["epochs"] > 1
                and report["l1_miss_cost_s"] is not None):
            return report  # an epoch after the reads (its window empty again), their fills' cost in

        assert time.monotonic() < deadline, report
        time.sleep(0.1)


def test_the_sizing_report_needs_the_admin_credential(fixed: AsgiBridge) -> None:
    assert "admin credential" in denied(fixed, unsigned(SIZING))
    denied(fixed, signed(SIZING, ALICE.access_key, ALICE.secret_key))


def test_a_node_alone_keeps_its_l1_capacity_and_shows_its_curve(fixed: AsgiBridge) -> None:
    start = _report(fixed)
    assert start["mode"] == "fixed" and start["l1_capacity_bytes"] == 16 * MiB and start["l2_capacity_bytes"] == 0
    for name in ("l1_capacity_bytes", "l2_capacity_bytes", "target_l1_bytes", "l1_miss_cost_s", "l2_miss_cost_s",
                 "curves"):
        assert name in start
    _read_some(fixed)
    report = _wait_for_curve(fixed)
    assert report["l1_capacity_bytes"] == 16 * MiB  # fixed: never resized
    assert report["curves"]["l2"] == [] and report["l2_curve"] == []
    assert isinstance(report["l1_miss_cost_s"], float) and report["l1_miss_cost_s"] > 0  # the lake fills, timed
    curve = report["curves"]["l1"]
    # six blocks read three times each: past 6 MiB only the six cold misses of 18 reads remain
    beyond = next(r for s, r in curve if s >= 7 * MiB)
    assert beyond == pytest.approx(6 / 18, abs=0.02)
    assert curve[0][1] == pytest.approx(1.0)


def test_the_curve_as_a_png(fixed: AsgiBridge) -> None:
    _read_some(fixed)
    _wait_for_curve(fixed)
    status, body = answer(fixed, signed(SIZING + "?format=png"))
    assert status == 200 and body.startswith(b"\x89PNG\r\n\x1a\n")
    status, _ = answer(fixed, signed(SIZING + "?format=gif"))
    assert status == 400


def test_the_metrics_carry_the_split(fixed: AsgiBridge) -> None:
    _read_some(fixed)
    _wait_for_curve(fixed)
    status, body = answer(fixed, unsigned("/metrics"))
    assert status == 200
    text = body.decode()
    assert "lakegate_sizing_total_bytes 1.6777216e+07" in text
    assert 'lakegate_sizing_predicted_hit_ratio{tier="l1"}' in text
    assert "lakegate_sizing_epochs_total" in text


def test_adaptive_sizing_alone_gives_l1_the_total(adaptive: AsgiBridge) -> None:
    report = _report(adaptive)
    assert report["mode"] == "adaptive" and report["l1_capacity_bytes"] == 24 * MiB
    assert report["total_bytes"] == 24 * MiB
