"""Issue 16 on three real nodes over the RGW: a node SIGTERMed says goodbye, and the others drop
it from their rings because of it (their failure timeout is set far beyond the test's wait, so
only the goodbye can explain the drop; counted as goodbyes_received), then keep serving S3.
Before that, each node's ready probe names the live set it joined. With one worker per node and
with two."""

from __future__ import annotations

import json
import signal
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from harness.cluster import StartCluster
from harness.endpoints import empty_and_delete_bucket, unique_bucket_name

FAILURE_TIMEOUT = "300"  # seconds: no node leaves a ring by silence during this test


def until(condition: Callable[[], bool], what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never: {what}")
        time.sleep(0.2)


def ready(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/_lakegate/health/ready", timeout=10) as response:
        doc: dict[str, Any] = json.loads(response.read())
        return doc


@pytest.mark.parametrize("workers", ["1", "2"], ids=["one-worker", "two-workers"])
def test_a_node_sigtermed_leaves_every_ring_by_its_goodbye(start_cluster: StartCluster, lake_s3: Any,
                                                           workers: str) -> None:
    """With two workers per node, the goodbye reaches one worker of each peer, which tells the
    other: every answer (each a new connection, spread over the workers) shows the node gone."""
    cluster = start_cluster(nodes=3, env={"LAKEGATE_FAILURE_TIMEOUT": FAILURE_TIMEOUT, "LAKEGATE_WORKERS": workers})
    try:
        everyone = ["node1", "node2", "node3"]

        def live(node_id: str) -> list[str]:
            views = {tuple(cluster.admin(node_id, "/_lakegate/admin/cluster")["live"]) for _ in range(8)}
            return list(views.pop()) if len(views) == 1 else []  # the workers disagree: not yet

        for node_id in everyone:
            until(lambda: live(node_id) == everyone, f"{node_id} sees all three nodes")
            until(lambda: ready(cluster.urls[node_id])["ring"]["live"] == everyone, f"{node_id} ready with all three")
        cluster.kill("node3", signal.SIGTERM, timeout=120)
        for node_id in ("node1", "node2"):
            until(lambda: live(node_id) == ["node1", "node2"], f"{node_id} dropped node3")
            # the worker the goodbye reached counts it, and publishes its counts each second
            until(lambda: cluster.admin_stats(node_id)["cache"]["cluster"]["counters"]["goodbyes_received"] >= 1,
                  f"{node_id} counted node3's goodbye", timeout=30)
            assert cluster.admin_stats(node_id)["cache"]["cluster"]["peers"]["node3"]["said_goodbye"] is True
        bucket = unique_bucket_name("goodbye")
        lake_s3.create_bucket(Bucket=bucket)
        try:
            for node_id in ("node1", "node2"):
                s3 = cluster.client(node_id)
                s3.put_object(Bucket=bucket, Key=node_id, Body=f"after node3 left, via {node_id}".encode())
                got = cluster.client("node1" if node_id == "node2" else "node2").get_object(Bucket=bucket, Key=node_id)
                assert got["Body"].read() == f"after node3 left, via {node_id}".encode()
        finally:
            empty_and_delete_bucket(lake_s3, bucket)
    finally:
        cluster.down()  # its nodes would otherwise run, idle, until the session ends (load on later tests)
