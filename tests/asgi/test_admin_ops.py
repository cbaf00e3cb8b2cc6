"""Issue 16's admin operations through the whole app in-process: warm a prefix (then a GET of it
asks the lake nothing), its progress and cancel, drop by prefix and by tenant, what is cached
for a prefix; the admin credential only (a tenant's key is refused); bad parameters are a 400
with a JSON error.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from harness.endpoints import ALICE, Tenant, admin_signed, tenants_toml
from inprocess import AsgiBridge, lakegate_app
from test_admin import ENDPOINT
from test_sizing_admin import bridge_client

from cachetier.lake import ObjectStream
from cachetier.lake.conditions import Conditions
from cachetier.lake.memory import MemoryLake
from cachetier.lake.ranges import ByteRange

MiB = 1 << 20
BOB = Tenant("bob", "AKIDBOB0000000000001", "bob-secret-0123456789", buckets=("bobs-*",))
WARM = "/_lakegate/admin/warm"


class CountingLake(MemoryLake):
    """A MemoryLake that counts its GETs and can hold them (``hold.clear()``)."""

    def __init__(self) -> None:
        super().__init__()
        self.gets = 0
        self.hold: asyncio.Event | None = None

    async def get_object(self, bucket: str, key: str, range: ByteRange | None = None,
                         conditions: Conditions = Conditions()) -> ObjectStream:
        self.gets += 1
        if self.hold is not None:
            await self.hold.wait()
        return await super().get_object(bucket, key, range, conditions)


@pytest.fixture(scope="module")
def lake() -> CountingLake:
    return CountingLake()


@pytest.fixture(scope="module")
def bridge(tmp_path_factory: pytest.TempPathFactory, lake: CountingLake) -> Iterator[AsgiBridge]:
    from harness.endpoints import ADMIN_ACCESS_KEY, ADMIN_SECRET_KEY

    folder = tmp_path_factory.mktemp("admin-ops")
    served = AsgiBridge(lakegate_app(folder, lake, tenants_toml=tenants_toml([ALICE, BOB]),
                                     admin_access_key=ADMIN_ACCESS_KEY, admin_secret_key=ADMIN_SECRET_KEY,
                                     block_size=str(MiB), cache_capacity="64MiB", cache_on_write=False,
                                     warm_concurrency=2))
    served.start()
    s3 = bridge_client(served)
    s3.create_bucket(Bucket="warmed")
    for key, size in (("data/a", 3 * MiB), ("data/b", MiB + MiB // 2), ("other/c", MiB), ("slow/d", MiB)):
        s3.put_object(Bucket="warmed", Key=key, Body=bytes([len(key)]) * size)
    bob = bridge_client(served, BOB)
    bob.create_bucket(Bucket="bobs-data")
    bob.put_object(Bucket="bobs-data", Key="x", Body=b"x" * (2 * MiB))
    yield served
    served.close()


def call(bridge: AsgiBridge, method: str, path: str, **keys: str) -> tuple[int, dict[str, Any]]:
    request = admin_signed(f"{ENDPOINT}{path}", method, **keys).prepare()
    response = bridge.send(request)
    return response.status_code, dict(json.loads(response.content))


def wait_job(bridge: AsgiBridge, job_id: str, state: str = "done") -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status, doc = call(bridge, "GET", f"{WARM}/{job_id}")
        assert status == 200, doc
        if doc["state"] != "running":
            assert doc["state"] == state, doc
            return doc
        time.sleep(0.05)
    raise AssertionError(f"warm job {job_id} still running")


def warm(bridge: AsgiBridge, query: str) -> dict[str, Any]:
    status, doc = call(bridge, "POST", f"{WARM}?{query}")
    assert status == 202, doc
    assert doc["state"] == "running" and len(doc["id"]) == 16
    return wait_job(bridge, doc["id"])


def test_warm_then_a_get_asks_the_lake_nothing(bridge: AsgiBridge, lake: CountingLake) -> None:
    done = warm(bridge, "bucket=warmed&prefix=data%2F")
    assert (done["objects_total"], done["objects_done"], done["error_count"]) == (2, 2, 0)
    assert done["bytes_total"] == done["bytes_done"] == 3 * MiB + MiB + MiB // 2
    assert done["tenant"] == "lakegate-warm" and done["background"] is True
    before = lake.gets
    s3 = bridge_client(bridge)
    assert len(s3.get_object(Bucket="warmed", Key="data/a")["Body"].read()) == 3 * MiB
    assert len(s3.get_object(Bucket="warmed", Key="data/b", Range="bytes=1-10")["Body"].read()) == 10
    assert lake.gets == before
    status, jobs = call(bridge, "GET", WARM)
    assert status == 200 and done["id"] in [j["id"] for j in jobs["jobs"]]


def test_cached_shows_blocks_per_tier(bridge: AsgiBridge) -> None:
    warm(bridge, "bucket=warmed&prefix=data%2F&tenant=alice")
    status, doc = call(bridge, "GET", "/_lakegate/admin/cached?bucket=warmed&prefix=data%2F")
    assert status == 200, doc
    assert doc["tiers"]["l1"] == {"objects": 2, "blocks": 5, "bytes": 3 * MiB + MiB + MiB // 2}
    assert doc["objects_examined"] == doc["objects_cached"] == 2 and doc["truncated"] is False
    assert {o["key"]: o["cached"]["l1"] for o in doc["objects"]} == {"data/a": 3, "data/b": 2}
    status, bounded = call(bridge, "GET", "/_lakegate/admin/cached?bucket=warmed&max_objects=1&limit=0")
    assert status == 200 and bounded["truncated"] is True and bounded["objects_examined"] == 1
    assert bounded["objects"] == []


def test_drop_a_prefix(bridge: AsgiBridge, lake: CountingLake) -> None:
    warm(bridge, "bucket=warmed&prefix=data%2F")
    status, dropped = call(bridge, "POST", "/_lakegate/admin/drop?bucket=warmed&prefix=data%2F")
    assert status == 200, dropped
    assert (dropped["objects"], dropped["blocks"], dropped["bytes"]) == (2, 5, 3 * MiB + MiB + MiB // 2)
    _, doc = call(bridge, "GET", "/_lakegate/admin/cached?bucket=warmed&prefix=data%2F")
    assert doc["tiers"]["l1"]["blocks"] == 0 and doc["objects_cached"] == 0
    before = lake.gets
    assert len(bridge_client(bridge).get_object(Bucket="warmed", Key="data/b")["Body"].read()) == MiB + MiB // 2
    assert lake.gets > before  # from the lake again: nothing of it was left here
    status, again = call(bridge, "POST", "/_lakegate/admin/drop?bucket=warmed&prefix=nothing%2F")
    assert status == 200 and again["blocks"] == 0


def test_drop_a_tenant(bridge: AsgiBridge) -> None:
    warm(bridge, "bucket=bobs-data&tenant=bob")
    warm(bridge, "bucket=warmed&prefix=other%2F")
    status, dropped = call(bridge, "POST", "/_lakegate/admin/drop?tenant=bob")
    assert status == 200, dropped
    assert dropped["buckets"] == ["bobs-data"] and (dropped["objects"], dropped["blocks"]) == (1, 2)
    _, alice = call(bridge, "GET", "/_lakegate/admin/cached?bucket=warmed&prefix=other%2F")
    assert alice["tiers"]["l1"]["blocks"] == 1  # another tenant's bucket is untouched


def test_cancel_a_warm(bridge: AsgiBridge, lake: CountingLake) -> None:
    call(bridge, "POST", "/_lakegate/admin/drop?bucket=warmed&prefix=slow%2F")
    lake.hold = asyncio.Event()  # the lake's GETs wait: the job stays running
    try:
        status, doc = call(bridge, "POST", f"{WARM}?bucket=warmed&prefix=slow%2F")
        assert status == 202
        status, cancelled = call(bridge, "DELETE", f"{WARM}/{doc['id']}")
        assert status == 200 and cancelled["cancel_requested"] is True
        wait_job(bridge, doc["id"], "cancelled")
    finally:
        hold, lake.hold = lake.hold, None
        bridge._run(_set(hold))  # type: ignore[attr-defined]


async def _set(event: asyncio.Event) -> None:
    event.set()


def test_a_tenant_key_is_refused(bridge: AsgiBridge) -> None:
    keys = {"access_key": ALICE.access_key, "secret_key": ALICE.secret_key}
    for method, path in (("POST", f"{WARM}?bucket=warmed"), ("POST", "/_lakegate/admin/drop?bucket=warmed"),
                         ("GET", "/_lakegate/admin/cached?bucket=warmed"), ("GET", WARM)):
        status, doc = call(bridge, method, path, **keys)
        assert status == 403 and doc["error"] == "AccessDenied"


@pytest.mark.parametrize(("method", "path", "status"), [
    ("POST", WARM, 400),
    ("POST", f"{WARM}?bucket=warmed&tenant=nobody", 400),
    ("POST", f"{WARM}?bucket=warmed&tenant=bob", 400),  # not one of bob's buckets
    ("POST", f"{WARM}?bucket=a%2Fb", 400),
    ("GET", f"{WARM}/not-an-id", 400),
    ("GET", f"{WARM}/0123456789abcdef", 404),
    ("DELETE", f"{WARM}/0123456789abcdef", 404),
    ("POST", "/_lakegate/admin/drop", 400),
    ("POST", "/_lakegate/admin/drop?tenant=nobody", 400),
    ("GET", "/_lakegate/admin/cached", 400),
    ("GET", "/_lakegate/admin/cached?bucket=warmed&max_objects=many", 400),
    ("GET", "/_lakegate/admin/cached?bucket=warmed&max_objects=0", 400),
    ("GET", "/_lakegate/admin/cached?bucket=warmed&limit=5000", 400),
    ("GET", "/_lakegate/admin/cached?bucket=no-such-bucket", 404),
])
def test_bad_parameters(bridge: AsgiBridge, method: str, path: str, status: int) -> None:
    answered, doc = call(bridge, method, path)
    assert answered == status, doc
    assert set(doc) == {"error", "message"} and doc["message"]


def test_a_missing_bucket_fails_the_job(bridge: AsgiBridge) -> None:
    status, doc = call(bridge, "POST", f"{WARM}?bucket=no-such-bucket")
    assert status == 202
    failed = wait_job(bridge, doc["id"], "failed")
    assert failed["error_count"] == 1 and "NoSuchBucket" in failed["errors"][0]


def _lake_bytes(bridge: AsgiBridge) -> dict[str, int]:
    status, report = call(bridge, "GET", "/_lakegate/admin/tenants")
    assert status == 200, report
    return {name: row["lake_bytes"] for name, row in report["tenants"].items()}


def test_a_warm_is_charged_to_its_tenant_in_the_lake_fairness(bridge: AsgiBridge) -> None:
    call(bridge, "POST", "/_lakegate/admin/drop?bucket=warmed")
    before = _lake_bytes(bridge)
    warm(bridge, "bucket=warmed&prefix=other%2F&tenant=alice")
    warm(bridge, "bucket=warmed&prefix=data%2F")
    after = _lake_bytes(bridge)
    assert after["alice"] - before.get("alice", 0) == MiB  # other/c, in alice's turn
    assert after["lakegate-warm"] - before.get("lakegate-warm", 0) == 3 * MiB + MiB + MiB // 2
    assert after["bob"] == before["bob"]
