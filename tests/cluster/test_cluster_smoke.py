"""The cluster tier's harness works: three nodes over the RGW, each an S3 endpoint of its own,
restartable, and gone after `lakegate cluster down`."""

from __future__ import annotations

import signal
from typing import Any

from harness.cluster import LocalCluster, StartCluster
from harness.rgwlog import RgwLog

from tools.localcluster import is_node_process


def test_three_nodes_each_serve_put_and_get_over_the_rgw(cluster: LocalCluster, bucket: str,
                                                         lake_s3: Any) -> None:
    assert cluster.node_ids == ["node1", "node2", "node3"]
    assert len(set(cluster.urls.values())) == 3 and len(set(cluster.pids.values())) == 3
    assert all(row["up"] for row in cluster.status().values())
    for node_id in cluster.node_ids:
        s3 = cluster.client(node_id)
        body = f"written through {node_id}".encode()
        s3.put_object(Bucket=bucket, Key=node_id, Body=body)
        assert s3.get_object(Bucket=bucket, Key=node_id)["Body"].read() == body
        assert lake_s3.get_object(Bucket=bucket, Key=node_id)["Body"].read() == body  # it is in the RGW
        assert cluster.admin_stats(node_id)["lake"] == "s3"


def test_lake_requests_of_a_node_are_counted(cluster: LocalCluster, bucket: str, lake_s3: Any,
                                             rgw_log: RgwLog) -> None:
    lake_s3.put_object(Bucket=bucket, Key="small", Body=b"x" * 1000)
    s3 = cluster.client("node1")
    mark = rgw_log.mark()
    assert s3.get_object(Bucket=bucket, Key="small")["Body"].read() == b"x" * 1000
    assert rgw_log.count(mark, "GET", bucket, "small", expected=1) == 1
    mark = rgw_log.mark()
    assert s3.get_object(Bucket=bucket, Key="small")["Body"].read() == b"x" * 1000  # node1's L1
    assert rgw_log.count(mark, "GET", bucket, "small", expected=0) == 0


def test_a_killed_node_restarts_with_its_first_command_line(cluster: LocalCluster, bucket: str) -> None:
    before = cluster.node("node2")
    argv = list(before.argv)
    cluster.kill("node2", signal.SIGKILL)
    assert not cluster.alive("node2")
    cluster.restart("node2")
    after = cluster.node("node2")
    assert after.pid != before.pid and after.argv == argv and cluster.alive("node2")
    s3 = cluster.client("node2")
    s3.put_object(Bucket=bucket, Key="k", Body=b"after restart")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"after restart"


def test_cluster_down_leaves_no_process(start_cluster: StartCluster) -> None:
    own = start_cluster(nodes=3)
    nodes = [own.node(node_id) for node_id in own.node_ids]
    assert all(is_node_process(n) for n in nodes)
    own.down()
    assert not any(is_node_process(n) for n in nodes)
    assert not (own.dir / "cluster.json").exists()
