"""Issue 12's admission through the whole app in-process: past a tenant's queue bound the answer
is S3's 503 SlowDown (an XML error, never a dropped request) while the queued requests are
served in turn; /_lakegate/admin/tenants and /metrics report per tenant what was admitted."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from harness.endpoints import ADMIN_ACCESS_KEY, ADMIN_SECRET_KEY, ALICE
from inprocess import AsgiBridge, lakegate_app
from prometheus_client.parser import text_string_to_metric_families
from test_admin import answer, signed

from cachetier.lake.memory import MemoryLake

FIELDS = {"weight", "requests", "bytes_sent", "lake_bytes", "queue_delay_p99_s", "share", "cache_bytes"}


@pytest.fixture(scope="module")
def bridge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AsgiBridge]:
    folder = tmp_path_factory.mktemp("fair")
    app = lakegate_app(folder, MemoryLake(), admin_access_key=ADMIN_ACCESS_KEY, admin_secret_key=ADMIN_SECRET_KEY,
                       node_request_rate=2.0, tenant_queue=2)
    served = AsgiBridge(app)
    served.start()
    yield served
    served.close()


def list_buckets() -> object:
    return signed("/", ALICE.access_key, ALICE.secret_key)


def test_past_its_queue_bound_a_tenant_gets_slowdown_and_the_queued_are_served(bridge: AsgiBridge) -> None:
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: answer(bridge, list_buckets()), range(8)))  # type: ignore[arg-type]
    statuses = sorted(status for status, _ in results)
    assert statuses.count(200) >= 3  # one at once (the bucket's bank), then the two queued in turn
    refused = [body for status, body in results if status == 503]
    assert refused and len(refused) + statuses.count(200) == 8
    assert all(b"<Code>SlowDown</Code>" in body for body in refused)


def test_the_admin_endpoint_and_metrics_count_the_tenant(bridge: AsgiBridge) -> None:
    status, body = answer(bridge, signed("/_lakegate/admin/tenants"))
    assert status == 200
    report = json.loads(body)
    alice = report["tenants"]["alice"]
    assert FIELDS <= set(alice)
    assert alice["requests"] >= 3 and alice["slowdowns"] >= 1 and alice["weight"] == 1.0
    assert report["capacity"]["requests"] == 2.0 and report["mode"] == "all"
    status, body = answer(bridge, signed("/metrics"))
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    requests = {s.labels["tenant"]: s.value for s in families["lakegate_tenant_requests"].samples
                if s.name.endswith("_total")}
    assert requests["alice"] >= 3
    assert "lakegate_tenant_queue_delay_seconds" in families
