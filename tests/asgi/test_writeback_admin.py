"""Issue 14's write-back through the whole app in-process (a node alone: N = K = 1, the journal
in <cache dir>/journal), over a DirLake whose writes of keys under ``held/`` wait while the test
holds them, so "the lake does not have it yet" is a state the test controls, not a race:

- ``x-lakegate-write-mode: write-back`` on one PutObject: acknowledged, then GET, HEAD, a
  ranged GET and ListObjectsV2 see it while the lake has nothing; once released, the flusher
  puts it in the lake with the ETag the client got;
- invalid write headers are 400 InvalidArgument;
- a tenant's ``write_mode`` (tenants file) and a bucket rule (LAKEGATE_WRITE_MODE_BUCKETS)
  write back with no header;
- /_lakegate/admin/replication needs the admin credential and reports dirty_bytes,
  pending_objects and lag_s; /metrics has lakegate_writeback_dirty_bytes and
  lakegate_writeback_accepted_total.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.awsrequest import AWSPreparedRequest
from conformance import raises_s3_error
from conftest import ENDPOINT, InProcessTarget
from harness.endpoints import ADMIN_ACCESS_KEY, ADMIN_SECRET_KEY, ALICE, Tenant, admin_signed
from inprocess import AsgiBridge, lakegate_app
from prometheus_client.parser import text_string_to_metric_families

from cachetier.lake.conditions import NO_CONDITIONS, Conditions
from cachetier.errors import NoSuchKey
from cachetier.lake import Body, ObjectAttributes, WriteResult
from cachetier.lake.dirlake import DirLake

BOB = Tenant("bob", "AKIDBOBWRITEBACK0001", "bob-secret-0123456789")  # write_mode = "write-back"
REPLICATION = "/_lakegate/admin/replication"
HELD = "held/"  # the lake's writes of these keys wait while HeldLake.release is clear
DEADLINE_S = 60.0


class HeldLake(DirLake):
    """DirLake whose PutObjects of keys under HELD wait until ``release`` is set."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.release = threading.Event()
        self.release.set()

    async def put_object(self, bucket: str, key: str, body: Body, length: int, attrs: ObjectAttributes,
                         content_md5: str | None = None, conditions: Conditions = NO_CONDITIONS) -> WriteResult:
        while key.startswith(HELD) and not self.release.is_set():
            await asyncio.sleep(0.01)
        return await super().put_object(bucket, key, body, length, attrs, content_md5, conditions)


class Node:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.lake = HeldLake(folder / "lake")
        app = lakegate_app(
            folder, self.lake, tenants_toml=ALICE.to_toml() + "\n" + BOB.to_toml() + 'write_mode = "write-back"\n',
            admin_access_key=ADMIN_ACCESS_KEY, admin_secret_key=ADMIN_SECRET_KEY,
            write_mode_buckets="scratch-*=write-back",
        )
        self.bridge = AsgiBridge(app)
        self.target = InProcessTarget(name="wb-admin", endpoint_url=ENDPOINT, access_key=ALICE.access_key,
                                      secret_key=ALICE.secret_key, lake="dir", via_gateway=True, bridge=self.bridge)

    def client(self, headers: dict[str, str] | None = None, tenant: Tenant = ALICE) -> Any:
        """A boto3 client of ``tenant`` whose PutObjects carry ``headers``."""
        client = self.target.client(access_key=tenant.access_key, secret_key=tenant.secret_key, retries=False)
        if headers:
            def add(request: AWSPreparedRequest, **_: Any) -> None:
                for name, value in headers.items():  # botocore's HTTPHeaders has no update()
                    request.headers[name] = value

            client.meta.events.register("before-sign.s3.PutObject", add)
        return client

    def get(self, request: AWSPreparedRequest) -> tuple[int, bytes]:
        response = self.bridge.send(request)
        return response.status_code, response.content

    def replication(self) -> dict[str, Any]:
        status, body = self.get(admin_signed(f"{ENDPOINT}{REPLICATION}").prepare())
        assert status == 200, body
        report: dict[str, Any] = json.loads(body)
        return report

    def accepted(self) -> int:
        return int(self.replication()["counters"]["accepted"])

    def in_lake(self, bucket: str, key: str) -> str | None:
        """The lake's ETag of the key (a second DirLake on the folder: the gateway's is untouched)."""
        try:
            return asyncio.run(DirLake(self.folder / "lake").head_object(bucket, key)).etag
        except NoSuchKey:
            return None


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    made = Node(tmp_path_factory.mktemp("wb-admin"))
    made.bridge.start()
    yield made
    made.lake.release.set()
    made.bridge.close()


def _poll(what: str, done: Any) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not done():
        assert time.monotonic() < deadline, f"not within {DEADLINE_S:.0f} s: {what}"
        time.sleep(0.02)


def _metrics(node: Node) -> dict[str, float]:
    status, body = node.get(AWSPreparedRequest("GET", f"{ENDPOINT}/metrics", {}, b"", True))
    assert status == 200
    return {sample.name: sample.value for family in text_string_to_metric_families(body.decode())
            for sample in family.samples}


def test_a_write_back_put_is_read_before_the_lake_has_it_and_reaches_it_after_the_flush(node: Node) -> None:
    s3 = node.client({"x-lakegate-write-mode": "write-back"})
    bucket, key, data = "wb-one", f"{HELD}obj.bin", os.urandom(3000)
    s3.create_bucket(Bucket=bucket)
    node.lake.release.clear()
    put = s3.put_object(Bucket=bucket, Key=key, Body=data, ContentType="application/x-wb", Metadata={"m": "1"},
                        ChecksumAlgorithm="SHA256")
    etag = f'"{hashlib.md5(data).hexdigest()}"'  # noqa: S324 - S3's ETag
    assert put["ETag"] == etag

    plain = node.client()  # the reads carry no header
    assert plain.get_object(Bucket=bucket, Key=key)["Body"].read() == data
    head = plain.head_object(Bucket=bucket, Key=key)
    assert (head["ETag"], head["ContentLength"], head["ContentType"], head["Metadata"]) == (
        etag, 3000, "application/x-wb", {"m": "1"})
    ranged = plain.get_object(Bucket=bucket, Key=key, Range="bytes=1000-1999")
    assert (ranged["ContentRange"], ranged["Body"].read()) == ("bytes 1000-1999/3000", data[1000:2000])
    listed = plain.list_objects_v2(Bucket=bucket)["Contents"]
    assert [(o["Key"], o["Size"], o["ETag"]) for o in listed] == [(key, 3000, etag)]
    assert node.in_lake(bucket, key) is None  # acknowledged and read, the lake has nothing yet

    report = node.replication()
    assert report["pending_objects"] == 1 and report["dirty_bytes"] >= 3000
    assert set(report["lag_s"]) == {"0"}  # this node received it
    metrics = _metrics(node)
    assert metrics["lakegate_writeback_dirty_bytes"] >= 3000
    assert metrics["lakegate_writeback_accepted_total"] >= 1

    node.lake.release.set()
    _poll("the flush reaches the lake", lambda: node.in_lake(bucket, key) == etag)
    _poll("the journal drops the flushed write", lambda: node.replication()["pending_objects"] == 0)
    assert plain.get_object(Bucket=bucket, Key=key)["Body"].read() == data


@pytest.mark.parametrize("headers", [
    {"x-lakegate-write-mode": "later"},
    {"x-lakegate-write-mode": "write-back", "x-lakegate-replicas": "0"},
    {"x-lakegate-write-mode": "write-back", "x-lakegate-replicas": "99"},
    {"x-lakegate-write-mode": "write-back", "x-lakegate-replicas": "x"},
    {"x-lakegate-write-mode": "write-back", "x-lakegate-replicas": "2", "x-lakegate-sync-replicas": "3"},
    {"x-lakegate-sync-replicas": "0"},
], ids=["mode-later", "replicas-0", "replicas-99", "replicas-x", "sync-above-replicas", "sync-0"])
def test_invalid_write_headers_are_invalid_argument(node: Node, headers: dict[str, str]) -> None:
    s3 = node.client(headers)
    s3.create_bucket(Bucket="wb-invalid")
    accepted = node.accepted()
    with raises_s3_error(400, "InvalidArgument"):
        s3.put_object(Bucket="wb-invalid", Key="k", Body=b"x")
    assert node.accepted() == accepted
    assert node.in_lake("wb-invalid", "k") is None


def test_without_a_header_writes_go_through(node: Node) -> None:
    s3 = node.client()
    s3.create_bucket(Bucket="wb-through")
    accepted = node.accepted()
    s3.put_object(Bucket="wb-through", Key="k", Body=b"through")
    assert node.accepted() == accepted
    assert node.in_lake("wb-through", "k") is not None  # in the lake before the answer


@pytest.mark.parametrize("tenant, bucket", [(BOB, "bob-bucket"), (ALICE, "scratch-alice")],
                         ids=["tenant-write-mode", "bucket-rule"])
def test_a_tenant_or_bucket_in_write_back_writes_back_without_a_header(node: Node, tenant: Tenant,
                                                                       bucket: str) -> None:
    s3 = node.client(tenant=tenant)
    s3.create_bucket(Bucket=bucket)
    accepted = node.accepted()
    node.lake.release.clear()
    try:
        s3.put_object(Bucket=bucket, Key=f"{HELD}k", Body=b"written back")
        assert node.accepted() == accepted + 1
        assert node.in_lake(bucket, f"{HELD}k") is None
        assert s3.get_object(Bucket=bucket, Key=f"{HELD}k")["Body"].read() == b"written back"
    finally:
        node.lake.release.set()
    _poll("the flush reaches the lake", lambda: node.in_lake(bucket, f"{HELD}k") is not None)


def test_a_header_overrides_the_bucket_rule(node: Node) -> None:
    s3 = node.client({"x-lakegate-write-mode": "write-through"})
    s3.create_bucket(Bucket="scratch-through")
    accepted = node.accepted()
    s3.put_object(Bucket="scratch-through", Key="k", Body=b"x")
    assert node.accepted() == accepted
    assert node.in_lake("scratch-through", "k") is not None


def test_the_replication_report_needs_the_admin_credential(node: Node) -> None:
    status, body = node.get(AWSPreparedRequest("GET", f"{ENDPOINT}{REPLICATION}", {}, b"", True))
    assert status == 403 and json.loads(body)["error"] == "AccessDenied"
    tenant_signed = admin_signed(f"{ENDPOINT}{REPLICATION}", access_key=ALICE.access_key,
                                 secret_key=ALICE.secret_key).prepare()
    assert node.get(tenant_signed)[0] == 403
    report = node.replication()
    assert {"dirty_bytes", "pending_objects", "lag_s"} <= set(report)
    assert isinstance(report["dirty_bytes"], int) and isinstance(report["lag_s"], dict)
    assert report["defaults"] == {"replicas": 1, "sync_replicas": 1}  # a node alone: N = K = 1
