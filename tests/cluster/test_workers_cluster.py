"""Nodes of several worker processes in a cluster over the real RGW: each node is one member
(one id, one peer address, one ring position) whichever worker answers, and a block is fetched
from the lake once for the whole cluster, whichever worker of whichever node reads it."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit


from harness.cluster import LocalCluster, StartCluster
from harness.endpoints import empty_and_delete_bucket, unique_bucket_name
from harness.processes import listening_pids
from test_l2 import key_owned_by, locate, ring, wait_until

WORKERS = {"LAKEGATE_WORKERS": "2"}


def every_worker_sees(cluster: LocalCluster, node: str, live: list[str]) -> bool:
    """Asked over 12 fresh connections (spread over the node's workers by the kernel), every
    answer has the same live members and ring."""
    views = [ring(cluster, node) for _ in range(12)]
    return all(v["live"] == live for v in views) and len({v["ring_version"] for v in views}) == 1


def test_a_node_of_two_workers_is_one_member_and_fetches_each_block_once(
    start_cluster: StartCluster, lake_s3: Any, rgw_log: Any
) -> None:
    cluster = start_cluster(nodes=2, env=WORKERS)
    nodes = cluster.node_ids
    wait_until(lambda: all(len(listening_pids(pid, urlsplit(url).port or 0)) == 2
                           for pid, url in zip(cluster.pids.values(), cluster.urls.values())),
               60, 0.2)
    wait_until(lambda: all(every_worker_sees(cluster, n, sorted(nodes)) for n in nodes), 60, 0.5)
    bucket = unique_bucket_name("workers-cluster")
    lake_s3.create_bucket(Bucket=bucket)
    try:
        key = key_owned_by(cluster, bucket, nodes[1])
        data = os.urandom(3 << 20)
        etag = lake_s3.put_object(Bucket=bucket, Key=key, Body=data)["ETag"]
        mark = rgw_log.mark()
        for _ in range(6):  # fresh clients: their connections land on either worker of each node
            for node in nodes:
                client = cluster.client(node)
                assert client.get_object(Bucket=bucket, Key=key)["Body"].read() == data
                client.close()
        assert len(rgw_log.wait_for(mark, "GET", bucket, key, expected=1)) == 1  # by the owner, once
        assert locate(cluster, nodes[1], bucket, key, etag=etag)["held"]["l2"] is True
    finally:
        empty_and_delete_bucket(lake_s3, bucket)
        cluster.down()  # its nodes would otherwise run, idle, until the session ends (load on later tests)
