"""Write-back (issue 14) on three real nodes over the real RGW, with N = K = 2 (the cluster's
defaults; LAKEGATE_WRITE_MODE=write-back for every request).

The nodes reach the lake through a TCP relay the test starts (benchmarks/relay.py TcpRelay) and
stops to make the lake unreachable: stopping the session's RGW itself would break every other
test using it. The test talks to the RGW directly (boto3 to S3_ENDPOINT_URL) to see what the lake
really holds.

- Losing the receiving node: the relay is stopped, objects are PUT through node A (200s), A's
  flusher fails its first flush of each and, with a large LAKEGATE_WRITE_FLUSH_RETRY, would not
  try again for minutes; the relay is started again and every node reads the objects (GET, HEAD,
  ranged GET, ListObjectsV2) while the lake still has none of them; then A's process group is
  SIGKILLed, never restarted, and the surviving copy (the next node on the ring) flushes
  everything: the lake ends up with the acknowledged bytes and ETags, readable on the survivors
  all along.
- Lake down: with T = delta = 2 MiB the relay is stopped, PUTs through A are acknowledged while
  the journal stays within T + delta and then answered 503 SlowDown; the acknowledged objects
  read on every node meanwhile (GET, HEAD, ranged GET; not LIST: a list needs the lake's page);
  after the relay is back everything acknowledged reaches the lake and new writes are accepted
  again.

Every node runs two workers (one of them the flusher), and each PUT comes on a connection of its
own, so the kernel spreads them over both: the node's state (dirty bytes, lake health) must be
the node's, not a worker's. Waits poll with deadlines; counters read from the admin endpoint are
polled too (a worker publishes its counts to the others each second).
"""

from __future__ import annotations

import hashlib
import itertools
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from harness.cluster import LocalCluster
from harness.endpoints import ALICE, S3Endpoint, Target, empty_and_delete_bucket, unique_bucket_name
from harness.units import KiB, MiB

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/ is a folder of the repo

from benchmarks.relay import TcpRelay  # noqa: E402

pytestmark = pytest.mark.integration

BASE_PORT = int(os.environ.get("CLUSTER_BASE_PORT", "0"))
# two workers a node (one runs the flusher, both take writes), as on a 2-core machine by default
ENV = {"LAKEGATE_ACCESS_LOG": "false", "LAKEGATE_WRITE_MODE": "write-back", "LAKEGATE_WORKERS": "2"}
SOFT = DELTA = 2 * MiB
RELAY_PORTS = itertools.count(150)  # offsets from CLUSTER_BASE_PORT (the nodes: +0.., +20.., +40..)


def wait_until(condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout:.0f} s")
        time.sleep(interval)


def port(offset: int) -> int:
    return BASE_PORT + offset if BASE_PORT else 0


class Lake:
    """The relay the nodes reach the RGW through (stop/start: the lake gone/back), and the RGW
    itself (``direct``, boto3 past every node)."""

    def __init__(self, rgw: Target, relay_port: int) -> None:
        self.relay = TcpRelay(rgw.endpoint.url, relay_port)
        self.relay.start()
        self.relay_port = self.relay.port  # the same port again after a stop
        self.endpoint = S3Endpoint(self.relay.url, rgw.endpoint.access_key, rgw.endpoint.secret_key,
                                   rgw.endpoint.region)
        self.direct = rgw.client()

    def down(self) -> None:
        self.relay.stop()

    def up(self) -> None:
        self.relay.port = self.relay_port
        self.relay.start()

    def holds(self, bucket: str, key: str, data: bytes) -> bool:
        try:
            return bool(self.direct.get_object(Bucket=bucket, Key=key)["Body"].read() == data)
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("NoSuchKey", "404"):
                return False
            raise

    def absent(self, bucket: str, key: str) -> bool:
        try:
            self.direct.head_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            return exc.response["Error"]["Code"] in ("NoSuchKey", "404")
        return False

    def close(self) -> None:
        self.relay.stop()
        self.direct.close()


def nodes(lake: Lake, workdir: Path, env: dict[str, str], base_port: int) -> LocalCluster:
    return LocalCluster(lake.endpoint, nodes=3, tenants=(ALICE,), env={**ENV, **env},
                        up_args=("--base-port", str(base_port)), workdir=workdir)


@pytest.fixture
def lake_and_bucket(rgw_target: Target, request: pytest.FixtureRequest) -> Iterator[tuple[Lake, str]]:
    lake = Lake(rgw_target, port(next(RELAY_PORTS)))
    bucket = unique_bucket_name(request.node.originalname.removeprefix("test_"))
    lake.direct.create_bucket(Bucket=bucket)
    try:
        yield lake, bucket
    finally:
        empty_and_delete_bucket(lake.direct, bucket)
        lake.close()


def replication(cluster: LocalCluster, node: str) -> Any:
    return cluster.admin(node, "/_lakegate/admin/replication")


def read_everywhere(cluster: LocalCluster, node_ids: list[str], bucket: str, objects: dict[str, bytes],
                    etags: dict[str, str], listing: bool = True) -> None:
    """GET, HEAD, a ranged GET (and ListObjectsV2) of every object on every one of ``node_ids``."""
    for node in node_ids:
        client = cluster.client(node)
        for key, data in objects.items():
            got = client.get_object(Bucket=bucket, Key=key)
            assert got["Body"].read() == data, (node, key)
            assert got["ETag"] == etags[key], (node, key)
            head = client.head_object(Bucket=bucket, Key=key)
            assert (head["ContentLength"], head["ETag"]) == (len(data), etags[key]), (node, key)
            if not data:
                continue  # a range of an empty object is not satisfiable
            first, last = len(data) // 3, len(data) // 3 + 999
            ranged = client.get_object(Bucket=bucket, Key=key, Range=f"bytes={first}-{last}")
            assert ranged["Body"].read() == data[first:last + 1], (node, key)
        if listing:
            page = client.list_objects_v2(Bucket=bucket, Prefix="wb/")
            listed = {o["Key"]: (o["Size"], o["ETag"]) for o in page.get("Contents", [])}
            assert listed == {k: (len(v), etags[k]) for k, v in objects.items()}, node


def kill_group(cluster: LocalCluster, node: str) -> None:
    """SIGKILL to the node's process group (its workers too), for good."""
    pid = cluster.pids[node]
    os.killpg(os.getpgid(pid), signal.SIGKILL)
    wait_until(lambda: not cluster.alive(node), 15, f"{node} gone after SIGKILL")


def test_the_surviving_copy_flushes_what_the_dead_receiving_node_acknowledged(
    lake_and_bucket: tuple[Lake, str], tmp_path: Path
) -> None:
    lake, bucket = lake_and_bucket
    # A (node1) tries each flush once, with the lake gone, and then not for ten minutes
    cluster = nodes(lake, tmp_path, {"LAKEGATE_WRITE_FLUSH_RETRY": "600"}, port(0))
    try:
        cluster.up()
        a, b, c = cluster.node_ids
        assert replication(cluster, a)["defaults"] == {"replicas": 2, "sync_replicas": 2}
        objects = {"wb/small": os.urandom(100 * KiB), "wb/medium": os.urandom(1 * MiB + 7),
                   "wb/large": os.urandom(5 * MiB + 3), "wb/empty": b""}
        lake.down()
        etags = {key: cluster.client(a).put_object(Bucket=bucket, Key=key, Body=data)["ETag"]  # any worker
                 for key, data in objects.items()}
        assert etags == {key: f'"{hashlib.md5(data).hexdigest()}"' for key, data in objects.items()}  # noqa: S324
        wait_until(lambda: replication(cluster, a)["counters"]["flush_failures"] >= len(objects), 60,
                   "A's flusher failed each first flush")
        report = replication(cluster, a)
        assert report["pending_objects"] == len(objects) and report["counters"]["flushed"] == 0, report
        lake.up()

        read_everywhere(cluster, [a, b, c], bucket, objects, etags)
        assert all(lake.absent(bucket, key) for key in objects)  # the lake has none of them yet

        kill_group(cluster, a)
        survivors = [b, c]
        missing = dict(objects)

        def flushed() -> bool:
            for key in list(missing):
                if lake.holds(bucket, key, missing[key]):
                    del missing[key]
            read_everywhere(cluster, survivors, bucket, objects, etags)
            return not missing

        wait_until(flushed, 90, "every acknowledged object in the lake", interval=0.5)
        for key in objects:
            assert lake.direct.head_object(Bucket=bucket, Key=key)["ETag"] == etags[key], key
        read_everywhere(cluster, survivors, bucket, objects, etags)
        wait_until(lambda: all(replication(cluster, n)["pending_objects"] == 0 for n in survivors), 30,
                   "the survivors' journals drained")
        wait_until(lambda: sum(replication(cluster, n)["counters"]["flushed"] for n in survivors) == len(objects),
                   15, "one flush an object, by the survivors")  # (workers publish their counts each second)
    finally:
        cluster.down()


def test_a_lake_down_buffers_up_to_t_plus_delta_then_slows_writers_down(
    lake_and_bucket: tuple[Lake, str], tmp_path: Path
) -> None:
    lake, bucket = lake_and_bucket
    env = {"LAKEGATE_WRITE_DIRTY_SOFT": str(SOFT), "LAKEGATE_WRITE_DIRTY_DELTA": str(DELTA),
           "LAKEGATE_WRITE_FLUSH_RETRY": "0.5"}
    cluster = nodes(lake, tmp_path, env, port(20))
    size = 512 * KiB
    try:
        cluster.up()
        a, b, c = cluster.node_ids
        thresholds = replication(cluster, a)["thresholds"]
        assert thresholds == {"soft": SOFT, "delta": DELTA}
        lake.down()
        objects: dict[str, bytes] = {}
        etags: dict[str, str] = {}
        refused = []
        for i in range(3 * (SOFT + DELTA) // size):
            key, data = f"wb/{i:03d}", os.urandom(size)
            put = cluster.client(a, retries=False)  # a connection of its own: any of A's workers
            try:
                etags[key] = put.put_object(Bucket=bucket, Key=key, Body=data)["ETag"]
                objects[key] = data
            except ClientError as exc:
                refused.append((exc.response["ResponseMetadata"]["HTTPStatusCode"], exc.response["Error"]["Code"]))
                if len(refused) == 3:
                    break
            if i == 0:  # the flusher found the lake gone
                wait_until(lambda: replication(cluster, a)["counters"]["flush_failures"] >= 1, 30,
                           "a failed flush")
        assert refused == [(503, "SlowDown")] * 3, refused
        assert len(objects) == (SOFT + DELTA) // size, sorted(objects)  # accepted up to T + delta exactly
        read_everywhere(cluster, [a, b, c], bucket, objects, etags, listing=False)
        assert all(lake.absent(bucket, key) for key in objects)

        lake.up()
        missing = dict(objects)

        def flushed() -> bool:
            for key in list(missing):
                if lake.holds(bucket, key, missing[key]):
                    del missing[key]
            read_everywhere(cluster, [a, b, c], bucket, objects, etags)
            return not missing

        wait_until(flushed, 90, "every acknowledged object in the lake", interval=0.5)
        wait_until(lambda: replication(cluster, a)["pending_objects"] == 0, 30, "A's journal drained")
        accepted = replication(cluster, a)["counters"]["accepted"]
        after = os.urandom(size)
        etag = put.put_object(Bucket=bucket, Key="wb/after", Body=after)["ETag"]
        wait_until(lambda: replication(cluster, a)["counters"]["accepted"] == accepted + 1, 15,
                   "the new write taken in write-back")  # (other workers' counts are published each second)
        objects["wb/after"], etags["wb/after"] = after, etag
        read_everywhere(cluster, [a, b, c], bucket, objects, etags)
        wait_until(lambda: lake.holds(bucket, "wb/after", after), 60, "the new write in the lake", interval=0.3)
    finally:
        cluster.down()


def test_a_conditional_write_waits_for_the_write_back_version_to_reach_the_lake(
    lake_and_bucket: tuple[Lake, str], tmp_path: Path
) -> None:
    """A conditional write is decided by the lake, so while a version of its key acknowledged in
    write-back is on its way there (the lake unreachable here), every node answers it 409
    ConditionalRequestConflict, whichever worker takes it; once the version has landed, the
    retry is decided against it, written through."""
    lake, bucket = lake_and_bucket
    cluster = nodes(lake, tmp_path, {"LAKEGATE_WRITE_FLUSH_RETRY": "0.5"}, port(40))
    try:
        cluster.up()
        a = cluster.node_ids[0]
        lake.down()
        etag = cluster.client(a, retries=False).put_object(Bucket=bucket, Key="wb/log", Body=b"commit 1")["ETag"]
        for node in cluster.node_ids:
            for _ in range(2):  # connections of their own: both workers of the node, likely
                with pytest.raises(ClientError) as conflict:
                    cluster.client(node, retries=False).put_object(Bucket=bucket, Key="wb/log", Body=b"commit 2",
                                                                   IfMatch=etag)
                assert (conflict.value.response["ResponseMetadata"]["HTTPStatusCode"],
                        conflict.value.response["Error"]["Code"]) == (409, "ConditionalRequestConflict")
        lake.up()
        wait_until(lambda: lake.holds(bucket, "wb/log", b"commit 1"), 60, "the write-back version in the lake")
        wait_until(lambda: all(replication(cluster, n)["pending_objects"] == 0 for n in cluster.node_ids), 30,
                   "no node holding it pending")
        other = cluster.client(cluster.node_ids[2], retries=False)
        with pytest.raises(ClientError) as refused:
            other.put_object(Bucket=bucket, Key="wb/log", Body=b"commit 2", IfNoneMatch="*")
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
        swapped = other.put_object(Bucket=bucket, Key="wb/log", Body=b"commit 2", IfMatch=etag)
        assert swapped["ResponseMetadata"]["HTTPHeaders"]["x-lakegate-write-mode"] == "write-through"
        assert lake.holds(bucket, "wb/log", b"commit 2")  # in the lake when answered
        for node in cluster.node_ids:
            assert cluster.client(node).get_object(Bucket=bucket, Key="wb/log")["Body"].read() == b"commit 2"
    finally:
        cluster.down()
