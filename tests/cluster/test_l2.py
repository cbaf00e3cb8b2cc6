"""D3N's L2 across three real nodes over the real RGW: a block is fetched from the lake once for
the whole cluster, by its owner; a node's death costs clients nothing; writes through one node
are never read stale through another; the peer API takes only the cluster's HMAC.

Lake requests are counted in RGW's own log (harness/rgwlog.py).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from harness.cluster import LocalCluster
from harness.endpoints import ALICE

from cachetier.blocks.ids import block_count
from cachetier.cluster.wire import sign

BLOCK = 4 << 20
FAILURE_TIMEOUT_S = 3.0  # the nodes' default LAKEGATE_FAILURE_TIMEOUT
HEARTBEAT_S = 1.0


def locate(cluster: LocalCluster, node: str, bucket: str, key: str, index: int = 0, etag: str | None = None) -> Any:
    query = {"bucket": bucket, "key": key, "index": index} | ({"etag": etag} if etag else {})
    return cluster.admin(node, f"/_lakegate/admin/locate?{urllib.parse.urlencode(query)}")


def ring(cluster: LocalCluster, node: str) -> Any:
    return cluster.admin(node, "/_lakegate/admin/cluster")


def wait_until(condition: Any, timeout: float, interval: float = 0.05) -> float:
    """Seconds until ``condition()`` held; fails after ``timeout``."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            pytest.fail(f"condition not met within {timeout} s")
        time.sleep(interval)
    return time.monotonic() - start


def wait_converged(cluster: LocalCluster, nodes: list[str], timeout: float = 20.0) -> None:
    def converged() -> bool:
        views = [ring(cluster, n) for n in nodes]
        return all(v["live"] == sorted(nodes) for v in views) and len({v["ring_version"] for v in views}) == 1

    wait_until(converged, timeout, 0.2)


def key_owned_by(cluster: LocalCluster, bucket: str, owner: str, prefix: str = "k") -> str:
    for i in range(1000):
        key = f"{prefix}-{i}"
        if locate(cluster, "node1", bucket, key)["owners"][0] == owner:
            return key
    raise AssertionError(f"no key owned by {owner}")


@pytest.fixture(autouse=True)
def _all_nodes_live(cluster: LocalCluster) -> None:
    """Every test starts from three live nodes that agree on the ring."""
    for node in cluster.node_ids:
        if not cluster.alive(node):
            cluster.restart(node)
    wait_converged(cluster, cluster.node_ids)


def test_a_block_lands_in_the_readers_l1_and_the_owners_l2_and_other_nodes_read_it_from_there(
    cluster: LocalCluster, bucket: str, lake_s3: Any, rgw_log: Any
) -> None:
    key = key_owned_by(cluster, bucket, "node3")
    data = os.urandom(1 << 20)
    etag = lake_s3.put_object(Bucket=bucket, Key=key, Body=data)["ETag"]

    mark = rgw_log.mark()
    assert cluster.client("node1").get_object(Bucket=bucket, Key=key)["Body"].read() == data
    assert len(rgw_log.wait_for(mark, "GET", bucket, key, expected=1)) == 1
    assert locate(cluster, "node1", bucket, key, etag=etag)["held"] == {"l1": True, "l2": False}
    assert locate(cluster, "node3", bucket, key, etag=etag)["held"] == {"l1": False, "l2": True}

    mark = rgw_log.mark()
    served_before = cluster.admin_stats("node3")["cache"]["cluster"]["counters"]["peer_served"]
    assert cluster.client("node2").get_object(Bucket=bucket, Key=key)["Body"].read() == data
    assert rgw_log.wait_for(mark, "GET", bucket, key, expected=0) == []  # no lake GET: node3's L2
    assert cluster.admin_stats("node3")["cache"]["cluster"]["counters"]["peer_served"] == served_before + 1
    assert locate(cluster, "node2", bucket, key, etag=etag)["held"]["l1"] is True


def test_a_working_set_read_on_every_node_costs_one_lake_get_per_block(
    cluster: LocalCluster, bucket: str, lake_s3: Any, rgw_log: Any
) -> None:
    sizes = [256 << 10] * 70 + [BLOCK + (512 << 10)] * 20 + [2 * BLOCK + 1] * 10  # 100 objects
    objects = {f"ws/{i:03d}": os.urandom(size) for i, size in enumerate(sizes)}
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda kv: lake_s3.put_object(Bucket=bucket, Key=kv[0], Body=kv[1]), objects.items()))
    blocks = sum(block_count(len(v), BLOCK) for v in objects.values())

    mark = rgw_log.mark()
    clients = {node: cluster.client(node, retries=False) for node in cluster.node_ids}

    def read_all(node: str) -> int:
        wrong = 0
        for key, data in objects.items():
            wrong += clients[node].get_object(Bucket=bucket, Key=key)["Body"].read() != data
        return wrong

    with ThreadPoolExecutor(3) as pool:  # every node reads the whole set, all at the same time
        assert sum(pool.map(read_all, cluster.node_ids)) == 0
    gets = rgw_log.wait_for(mark, "GET", bucket, expected=blocks)
    assert len(gets) == blocks, f"{len(gets)} lake GETs for {blocks} blocks read on 3 nodes"


def test_a_killed_node_costs_clients_nothing_leaves_the_ring_and_rejoins(
    cluster: LocalCluster, bucket: str, lake_s3: Any
) -> None:
    objects = {key_owned_by(cluster, bucket, owner, f"kill-{owner}"): os.urandom(BLOCK + 4096)
               for owner in cluster.node_ids}
    for key, data in objects.items():
        lake_s3.put_object(Bucket=bucket, Key=key, Body=data)
    stop = threading.Event()
    results: dict[str, list[int]] = {"node1": [0, 0], "node3": [0, 0]}  # [ok, failed]

    def loop(node: str) -> None:
        s3 = cluster.client(node, retries=False)  # a failure must show, not be retried
        while not stop.is_set():
            for key, data in objects.items():
                try:
                    ok = s3.get_object(Bucket=bucket, Key=key, ResponseCacheControl="x")["Body"].read() == data
                except Exception:  # noqa: BLE001 - every failure counts
                    ok = False
                results[node][0 if ok else 1] += 1

    readers = [threading.Thread(target=loop, args=(node,)) for node in results]
    for reader in readers:
        reader.start()
    try:
        time.sleep(1.0)
        cluster.kill("node2", signal.SIGKILL)
        killed = time.monotonic()
        dropped = wait_until(lambda: all("node2" not in ring(cluster, n)["live"] for n in ("node1", "node3")), 15.0)
        dropped_after = time.monotonic() - killed
        time.sleep(1.0)  # reads go on without node2
        cluster.restart("node2")
        wait_converged(cluster, cluster.node_ids)
        time.sleep(1.0)  # and with it again
    finally:
        stop.set()
        for reader in readers:
            reader.join()
    assert results["node1"][1] == 0 and results["node3"][1] == 0, results
    assert results["node1"][0] > 0 and results["node3"][0] > 0
    # the failure detector's timeout, plus a heartbeat round and slack for a loaded machine
    assert dropped <= dropped_after <= FAILURE_TIMEOUT_S + HEARTBEAT_S + 2.0, dropped_after


def test_an_overwrite_through_one_node_is_never_read_stale_through_another(
    cluster: LocalCluster, bucket: str
) -> None:
    writer, readers = cluster.client("node1"), [cluster.client("node2"), cluster.client("node3")]
    key = "overwritten"
    for version in range(5):
        body = f"version {version} ".encode() * (1000 + version)
        writer.put_object(Bucket=bucket, Key=key, Body=body)
        for s3 in readers:  # right after the PUT's answer, with metadata cached from the last round
            assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body
            assert s3.head_object(Bucket=bucket, Key=key)["ContentLength"] == len(body)
            assert s3.get_object(Bucket=bucket, Key=key, Range="bytes=0-9")["Body"].read() == body[:10]
    writer.delete_object(Bucket=bucket, Key=key)
    for s3 in readers:
        with pytest.raises(s3.exceptions.NoSuchKey):
            s3.get_object(Bucket=bucket, Key=key)


def _peer_request(url: str, headers: dict[str, str], method: str = "POST", body: bytes = b"") -> int:
    request = urllib.request.Request(url, data=body if method == "POST" else None, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_peer_api_takes_only_the_cluster_hmac(cluster: LocalCluster) -> None:
    url = cluster.urls["node1"]
    path = "/_lakegate/v1/heartbeat"
    body = json.dumps({"id": "intruder", "url": "http://127.0.0.1:1", "weight": 1.0, "load": {}}).encode()
    json_type = {"content-type": "application/json"}
    assert _peer_request(url + path, json_type, body=body) == 403  # no HMAC
    forged = sign(b"not the cluster secret, at all", "node2", "POST", path, "", body, now=time.time())
    assert _peer_request(url + path, forged | json_type, body=body) == 403
    stale = sign(cluster.secret.encode(), "node2", "POST", path, "", body, now=1_000_000_000.0)
    assert _peer_request(url + path, stale | json_type, body=body) == 403

    # a tenant's valid SigV4 signature means nothing on the peer API
    block = url + "/_lakegate/v1/block?" + urllib.parse.urlencode(
        {"bucket": "b", "key": "k", "etag": '"e"', "size": 1, "index": 0, "block_size": BLOCK})
    aws = AWSRequest(method="GET", url=block)
    SigV4Auth(Credentials(ALICE.access_key, ALICE.secret_key), "s3", "us-east-1").add_auth(aws)
    assert _peer_request(block, dict(aws.headers.items()), method="GET") == 403

    # ... while the cluster's own HMAC is accepted (so the refusals above are about the HMAC)
    good = sign(cluster.secret.encode(), "node2", "POST", path, "", json.dumps(
        {"id": "node2", "url": cluster.urls["node2"], "weight": 1.0, "load": {}}).encode(), now=time.time())
    assert _peer_request(url + path, good | json_type, body=json.dumps(
        {"id": "node2", "url": cluster.urls["node2"], "weight": 1.0, "load": {}}).encode()) == 200
    assert "intruder" not in ring(cluster, "node1")["peers"]
