"""harness/ (shared by the tests and the benchmarks) over a folder lake, with real processes:
one gateway launcher, one cluster driver and the benchmarks' signing clients."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.clients import CLIENTS, gather_limited, make_client, run_async
from harness.cluster import LocalCluster
from harness.endpoints import ALICE, BENCH_TENANT, S3Endpoint, unique_bucket_name
from harness.gateway import Gateway
from harness.processes import CpuMeter, process_cpu_seconds


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    lake = f"dir:{tmp_path_factory.mktemp('lake')}"
    with Gateway(lake, tenants=(BENCH_TENANT, ALICE)) as gateway:
        yield gateway


def test_a_temp_gateway_answers_and_leaves_nothing_behind(tmp_path: Path) -> None:
    gateway = Gateway(f"dir:{tmp_path / 'lake'}")
    endpoint = gateway.start()
    workdir = gateway.workdir
    assert workdir is not None and (workdir / "cache").is_dir()
    assert endpoint == S3Endpoint(gateway.url, BENCH_TENANT.access_key, BENCH_TENANT.secret_key)
    assert gateway.admin_stats()["cache"] is not None
    assert process_cpu_seconds(gateway.pid) > 0
    gateway.stop()
    assert gateway.proc is not None and gateway.proc.returncode is not None
    assert not workdir.exists()
    gateway.stop()  # idempotent


def test_a_gateway_target_speaks_boto3_with_the_tenants_keys(gateway: Gateway) -> None:
    target = gateway.target("gw-dir", "dir", ALICE)
    assert (target.access_key, target.lake, target.via_gateway) == (ALICE.access_key, "dir", True)
    s3 = target.client()
    bucket = unique_bucket_name("harness")
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="k", Body=b"boto3")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"boto3"
    s3.close()
    assert "serve" in gateway.log_path.read_text().splitlines()[0]  # the command line heads the log


def test_a_failing_gateway_says_why(tmp_path: Path) -> None:
    gateway = Gateway(f"dir:{tmp_path / 'lake'}", extra_args=("--log-level", "nonsense"), workdir=tmp_path / "gw")
    with pytest.raises(RuntimeError, match="exited with code 2"):
        gateway.start()
    assert (tmp_path / "gw" / "lakegate.log").exists()  # a given workdir is kept


@pytest.mark.parametrize("kind", sorted(CLIENTS))
def test_the_signing_clients_put_get_list_and_delete(gateway: Gateway, kind: str) -> None:
    data = os.urandom(3 * 1024 * 1024 + 7)
    bucket = unique_bucket_name(kind)

    async def scenario() -> None:
        async with make_client(kind, gateway.endpoint(), max_connections=4) as client:
            await client.create_bucket(bucket)
            await gather_limited((client.put_checked(bucket, f"k{i}", data) for i in range(3)), 2)
            status, received, digest, body = await client.get(bucket, "k1", sha256=True, keep_body=True)
            assert (status, received, digest, body) == (200, len(data), hashlib.sha256(data).hexdigest(), data)
            assert sorted(await client.list_keys(bucket)) == ["k0", "k1", "k2"]
            await client.delete_bucket_with_objects(bucket)
            status, _, _ = await client.request("GET", client.url(bucket))
            assert status == 404

    meter = CpuMeter(include_self=True)
    meter.start()
    run_async(scenario())
    assert meter.stop() > 0


def test_a_timed_get_measures_the_first_byte_before_the_last(gateway: Gateway) -> None:
    async def scenario() -> None:
        async with make_client("raw", gateway.endpoint()) as client:
            await client.create_bucket("timed")
            await client.put_checked("timed", "k", b"x" * 100_000)
            timed = await client.timed_get("timed", "k", sha256=True)  # type: ignore[attr-defined]
            assert (timed.status, timed.received) == (200, 100_000)
            assert 0 < timed.ttfb <= timed.total

    run_async(scenario())


def test_a_local_cluster_of_two_converges_and_goes_down(tmp_path: Path) -> None:
    cluster = LocalCluster(f"dir:{tmp_path / 'lake'}", nodes=2, tenants=(ALICE,))
    try:
        cluster.up()  # returns once both nodes see each other on one ring
        assert cluster.node_ids == ["node1", "node2"]
        assert all(cluster.alive(node_id) for node_id in cluster.node_ids)
        assert [e.access_key for e in cluster.endpoints()] == [ALICE.access_key] * 2
        s3 = cluster.client("node2")
        s3.create_bucket(Bucket="shared")
        s3.put_object(Bucket="shared", Key="k", Body=b"v")
        assert cluster.client("node1").get_object(Bucket="shared", Key="k")["Body"].read() == b"v"
        assert cluster.totals() == cluster.totals([ALICE])
        workdir = cluster.workdir
    finally:
        cluster.down()
    assert workdir is not None and not workdir.exists()
