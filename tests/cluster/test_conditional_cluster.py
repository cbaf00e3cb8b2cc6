"""Conditional writes across the three nodes of the cluster over the RGW: writers on different
nodes increment one counter by compare and swap (If-Match), each reading it through its own
node, whose cache must not hand it an ETag another node's write replaced; a write one node
acknowledged is what every node then reads, and no increment is lost. A create (If-None-Match:
*) that another node's write beat is refused on every node."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from botocore.exceptions import ClientError
from harness.cluster import LocalCluster
from harness.endpoints import increment_by_swap

INCREMENTS = 6  # each node's writer
ATTEMPTS = 200  # a writer's bound: a stale ETag served by a cache would retry until it expired


def lost(error: ClientError) -> bool:
    """The write lost to another (412; RGW 16 answers a race inside RADOS 500, passed on as 503)."""
    return int(error.response["ResponseMetadata"]["HTTPStatusCode"]) in (412, 503)


def test_compare_and_swap_through_every_node_loses_no_increment(cluster: LocalCluster, bucket: str) -> None:
    first = cluster.client(cluster.node_ids[0])
    first.put_object(Bucket=bucket, Key="counter", Body=b"0")
    for node_id in cluster.node_ids:  # each node has it cached before the race
        assert cluster.client(node_id).get_object(Bucket=bucket, Key="counter")["Body"].read() == b"0"

    def writer(node_id: str) -> int:
        return increment_by_swap(cluster.client(node_id, retries=False), bucket, "counter", INCREMENTS, ATTEMPTS, lost)

    with ThreadPoolExecutor(len(cluster.node_ids)) as pool:
        retried = sum(pool.map(writer, cluster.node_ids))
    total = INCREMENTS * len(cluster.node_ids)
    print(f"{total} increments over {len(cluster.node_ids)} nodes, {retried} retried")
    for node_id in cluster.node_ids:
        assert cluster.client(node_id).get_object(Bucket=bucket, Key="counter")["Body"].read() == str(total).encode()

    cluster.client(cluster.node_ids[1]).put_object(Bucket=bucket, Key="claim", Body=b"node 2's", IfNoneMatch="*")
    for node_id in cluster.node_ids:
        try:
            cluster.client(node_id).put_object(Bucket=bucket, Key="claim", Body=b"late", IfNoneMatch="*")
            raise AssertionError(f"{node_id} let a create overwrite another node's")
        except ClientError as error:
            assert int(error.response["ResponseMetadata"]["HTTPStatusCode"]) == 412
        assert cluster.client(node_id).get_object(Bucket=bucket, Key="claim")["Body"].read() == b"node 2's"
