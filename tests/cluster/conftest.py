"""Cluster tier: several real `lakegate serve` processes over the real Ceph RGW.

The session-scoped `cluster` fixture runs `lakegate cluster up --nodes 3` in front of the RGW
that S3_ENDPOINT_URL / AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY name (`rgw_target`, from
tests/conftest.py), with the ALICE tenant, and `lakegate cluster down` at the end; its API is
harness/cluster.py's LocalCluster. Lake requests are counted from RGW's log with
harness/rgwlog.py (`rgw_log` fixture).
`start_cluster` starts further clusters (other sizes, `--standalone`, extra serve flags), each
stopped at the end of the session. Without S3_ENDPOINT_URL the tier is skipped, like the
integration tier; its tests carry the `integration` marker (they need the RGW; tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from harness.cluster import LocalCluster, StartCluster
from harness.endpoints import ALICE, Target, empty_and_delete_bucket, unique_bucket_name
from harness.rgwlog import RgwLog


@pytest.fixture(scope="session")
def start_cluster(rgw_target: Target, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StartCluster]:
    """``start_cluster(nodes=3, up_args=(...), env={...})``: a cluster up now, down at the end of
    the session (``env``: LAKEGATE_* variables of its nodes)."""
    started: list[LocalCluster] = []

    def start(nodes: int = 3, up_args: tuple[str, ...] = (), env: dict[str, str] | None = None) -> LocalCluster:
        # the nodes' access log stays on and up() does not wait for the ring (the tests wait
        # for what they need)
        cluster = LocalCluster(rgw_target.endpoint, nodes=nodes, tenants=(ALICE,), up_args=up_args, env=env or {},
                               converge=False, workdir=tmp_path_factory.mktemp("cluster"))
        started.append(cluster)
        return cluster.up()

    yield start
    for cluster in started:
        cluster.down()


@pytest.fixture(scope="session")
def cluster(start_cluster: StartCluster) -> LocalCluster:
    """Three nodes (node1..node3), each with the others as peers, over the RGW."""
    return start_cluster(nodes=3)


@pytest.fixture(scope="session")
def rgw_log(rgw_target: Target) -> RgwLog:
    """The RGW's access log, for counting lake requests (needs CEPH_CONF from s3.env)."""
    try:
        return RgwLog.from_environment()
    except RuntimeError as exc:
        pytest.skip(f"cannot count lake requests: {exc}")


@pytest.fixture
def lake_s3(rgw_target: Target) -> Iterator[Any]:
    """boto3 straight to the RGW, past every node."""
    client = rgw_target.client()
    yield client
    client.close()


@pytest.fixture
def bucket(lake_s3: Any, cluster: LocalCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh bucket, made in the lake itself, emptied and deleted afterwards."""
    name = unique_bucket_name(request.node.originalname.removeprefix("test_"))
    lake_s3.create_bucket(Bucket=name)
    yield name
    empty_and_delete_bucket(lake_s3, name)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """On a failure, show the end of each node's log."""
    report = yield
    cluster = getattr(item, "funcargs", {}).get("cluster")
    if report.failed and isinstance(cluster, LocalCluster) and cluster.state is not None:
        for node_id, tail in cluster.log_tails().items():
            report.sections.append((f"{node_id} log, last lines", tail))
    return report
