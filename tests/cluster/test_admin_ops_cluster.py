"""Issue 16's admin operations across three real nodes over the RGW: a warm through one node
fills the owner's L2 as a client's read would, and a drop through one node leaves the peers'
stores too (the Invalidate peer message)."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

from harness.cluster import LocalCluster
from harness.endpoints import admin_signed
from test_l2 import key_owned_by, locate, wait_converged, wait_until

NODES = ["node1", "node2", "node3"]


def admin_call(cluster: LocalCluster, node: str, method: str, path: str) -> dict[str, Any]:
    url = cluster.urls[node] + path
    request = urllib.request.Request(url, method=method, headers=dict(admin_signed(url, method).headers.items()))
    with urllib.request.urlopen(request, timeout=30) as response:
        return dict(json.load(response))


def test_warm_fills_the_owners_l2_and_drop_reaches_the_peers(cluster: LocalCluster, bucket: str,
                                                             lake_s3: Any) -> None:
    wait_converged(cluster, NODES)
    key = key_owned_by(cluster, bucket, "node3", prefix="warm/k")
    etag = lake_s3.put_object(Bucket=bucket, Key=key, Body=b"w" * (1 << 20))["ETag"]
    job = admin_call(cluster, "node1", "POST", f"/_lakegate/admin/warm?bucket={bucket}&prefix=warm%2F")
    deadline = time.monotonic() + 60
    while job["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.1)
        job = admin_call(cluster, "node1", "GET", f"/_lakegate/admin/warm/{job['id']}")
    assert job["state"] == "done" and job["objects_done"] == 1, job
    assert locate(cluster, "node1", bucket, key, etag=etag)["held"] == {"l1": True, "l2": False}
    assert locate(cluster, "node3", bucket, key, etag=etag)["held"] == {"l1": False, "l2": True}

    dropped = admin_call(cluster, "node1", "POST", f"/_lakegate/admin/drop?bucket={bucket}&prefix=warm%2F")
    assert dropped["blocks"] == 1 and dropped["peers"] == 2, dropped
    assert locate(cluster, "node1", bucket, key, etag=etag)["held"] == {"l1": False, "l2": False}
    wait_until(lambda: locate(cluster, "node3", bucket, key, etag=etag)["held"]["l2"] is False, 15)
