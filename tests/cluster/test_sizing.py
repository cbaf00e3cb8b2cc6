"""Adaptive L1/L2 sizing (issue 13) on two real nodes (two worker processes each) over the real
RGW, in a shaped network namespace (benchmarks/netns.py): the directions D3N's slides show.

- High locality and a small working set: each node's clients read their own set of objects,
  every one owned by the other node (so L1 keeps them), 0.7 of a node's total: the split moves
  towards L1 (L1 holds the set, and the misses that went to the peer's L2 stop).
- Then a shared working set of 1.5 totals, read by both nodes' clients over a slow lake link
  (L2 misses made expensive): the split moves towards L2 (one copy in the cluster instead of
  one per node's L1, and a lake miss costs far more than a peer's).

The nodes run inside the namespace; the session's RGW stays outside, reached through a relay
that listens inside (benchmarks/relay.py's NetnsBridge), whose port is the shaped lake link;
peers talk over 127.0.0.2 (the cluster link). This test's own thread runs the clients and the
admin queries inside the namespace (``ShapedNetwork.call``). Epochs are short
(LAKEGATE_SIZING_INTERVAL=2) and every block is sampled (rate 1: the sets are a hundred
blocks, far too few for 1%). What is asserted are directions, with room: the split moves by the
step (0.1 of the total) per epoch at most, and the phases last many epochs.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from harness.clients import RawS3Client, run_async
from harness.cluster import LocalCluster
from harness.endpoints import ALICE, S3Endpoint, Target, empty_and_delete_bucket, unique_bucket_name
from harness.units import MiB

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/ is a folder of the repo

from benchmarks.netns import CLIENT_HOST, PEER_HOST, ShapedNetwork, available  # noqa: E402
from benchmarks.relay import NetnsBridge  # noqa: E402

pytestmark = pytest.mark.integration

BLOCK = 1 * MiB
TIER = 16 * MiB  # each node's L1 and L2 at start: the total is 32 MiB
TOTAL = 2 * TIER
LAKE_PORT = 7690  # the bridge's, inside the namespace
INTERVAL = 2.0
ENV = {
    "LAKEGATE_ACCESS_LOG": "false",
    "LAKEGATE_FAIRNESS": "off",
    "LAKEGATE_WORKERS": "2",
    "LAKEGATE_BLOCK_SIZE": str(BLOCK),
    "LAKEGATE_READAHEAD": "0",
    "LAKEGATE_SIZING": "adaptive",
    "LAKEGATE_SIZING_INTERVAL": str(INTERVAL),
    "LAKEGATE_SIZING_SAMPLE_RATE": "1",
    "LAKEGATE_SIZING_HALF_LIFE": "6",
}
CLIENTS = 3  # closed-loop readers per node
FAST_MBIT, SLOW_MBIT = 2000.0, 40.0


def _objects(prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{i:03d}" for i in range(count)]


def _every_worker_sees_both(nodes: LocalCluster, timeout: float = 60.0) -> None:
    """Until each node's answers (spread over its two workers, each with its own view of the
    ring) all show both nodes live: up() checks one answer per node, and a worker that has not
    heard from its peer yet owns every block in its own view."""
    deadline = time.monotonic() + timeout
    for node in nodes.node_ids:
        while not all(len(nodes.admin(node, "/_lakegate/admin/cluster")["live"]) == 2 for _ in range(8)):
            assert time.monotonic() < deadline, f"{node}'s workers do not all see both nodes"
            time.sleep(0.2)


def _owner(nodes: LocalCluster, bucket: str, key: str) -> str:
    return str(nodes.admin(nodes.node_ids[0], f"/_lakegate/admin/locate?bucket={bucket}&key={key}")["owners"][0])


def _sizing(nodes: LocalCluster, node: str) -> dict[str, Any]:
    return dict(nodes.admin(node, "/_lakegate/admin/sizing"))


async def _read(endpoints: Sequence[S3Endpoint], keys_of: Sequence[Sequence[str]], bucket: str, seconds: float,
                seed: int) -> int:
    """CLIENTS closed-loop readers per node, each GETting a random key of its node's keys."""
    rng = random.Random(seed)
    stop = time.monotonic() + seconds
    done = 0

    async def reader(client: RawS3Client, keys: Sequence[str]) -> None:
        nonlocal done
        while time.monotonic() < stop:
            status, _, _, _ = await client.get(bucket, rng.choice(keys))
            assert status == 200
            done += 1

    clients = [RawS3Client(endpoint) for endpoint in endpoints]
    try:
        await asyncio.gather(*(reader(client, keys) for client, keys in zip(clients, keys_of)
                               for _ in range(CLIENTS)))
    finally:
        for client in clients:
            await client.aclose()
    return done


def _phase(nodes: LocalCluster, keys_of: Sequence[Sequence[str]], bucket: str, seconds: float,
           seed: int) -> list[dict[str, Any]]:
    endpoints = nodes.endpoints(ALICE)
    run_async(_read(endpoints, keys_of, bucket, seconds, seed))
    time.sleep(INTERVAL * 1.5)  # one more epoch sees the end of the phase
    return [_sizing(nodes, node) for node in nodes.node_ids]


@pytest.fixture
def network() -> Any:
    why_not = available()
    if why_not:
        pytest.skip(f"no shaped network: {why_not}")
    net = ShapedNetwork(lake_mbit=FAST_MBIT, cluster_mbit=FAST_MBIT).start()
    try:
        yield net
    finally:
        net.stop()


def test_the_split_follows_locality_then_an_expensive_lake(rgw_target: Target, network: ShapedNetwork,
                                                           tmp_path: Path) -> None:
    lake = rgw_target.client()
    bucket = unique_bucket_name("sizing")
    lake.create_bucket(Bucket=bucket)
    body = os.urandom(BLOCK)
    local = _objects("local", 2 * 48)  # candidates, split by owner below
    shared = _objects("shared", int(1.5 * TOTAL // BLOCK))
    for key in (*local, *shared):
        lake.put_object(Bucket=bucket, Key=key, Body=body)
    bridge = NetnsBridge(network.name, rgw_target.endpoint.url, LAKE_PORT)
    bridge.start()
    network.shape_lake_port(LAKE_PORT)
    inside = S3Endpoint(bridge.url, rgw_target.endpoint.access_key, rgw_target.endpoint.secret_key,
                        rgw_target.endpoint.region)

    def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
        nodes = LocalCluster(inside, nodes=2, tenants=(ALICE,), host="0.0.0.0",  # noqa: S104 - in the namespace
                             advertise_host=PEER_HOST, client_host=CLIENT_HOST, env=ENV,
                             cache_capacity=str(TIER), l2_capacity=str(TIER), workdir=tmp_path)
        try:
            nodes.up()
            first, second = nodes.node_ids
            start = [_sizing(nodes, node) for node in nodes.node_ids]
            _every_worker_sees_both(nodes)
            owners = {key: _owner(nodes, bucket, key) for key in local}
            per_set = int(0.7 * TOTAL // BLOCK)
            # node1's clients read keys node2 owns, and the other way round: L1 keeps them
            mine = [[k for k in local if owners[k] == second][:per_set],
                    [k for k in local if owners[k] == first][:per_set]]
            assert all(len(keys) == per_set for keys in mine), "too few keys of each owner"
            local_end = _phase(nodes, mine, bucket, 24.0, seed=1)
            network.set_rate("lake", SLOW_MBIT)
            shared_end = _phase(nodes, [shared, shared], bucket, 40.0, seed=2)
            return start, local_end, shared_end
        finally:
            nodes.down()

    try:
        start, local_end, shared_end = network.call(scenario)
    finally:
        bridge.stop()
        empty_and_delete_bucket(lake, bucket)
        lake.close()
    summary = [(s["l1_capacity_bytes"] / TOTAL, a["l1_capacity_bytes"] / TOTAL, b["l1_capacity_bytes"] / TOTAL)
               for s, a, b in zip(start, local_end, shared_end)]
    print("L1 share of the total per node (start, after locality, after the shared set over a slow lake):",
          summary)
    for s, a, b in zip(start, local_end, shared_end):
        assert s["l1_capacity_bytes"] == TIER and s["total_bytes"] == TOTAL
        assert a["l1_capacity_bytes"] + a["l2_capacity_bytes"] == TOTAL
        assert a["l1_capacity_bytes"] >= 0.6 * TOTAL, (summary, a["history"][-6:])
        # at least two steps of 10% of the total (a step's bytes are rounded: compare with a hair's room)
        moved = (a["l1_capacity_bytes"] - b["l1_capacity_bytes"]) / TOTAL
        assert moved >= 0.2 - 1e-6, (summary, b["history"][-8:])
        assert b["l2_miss_cost_s"] is not None and b["l1_miss_cost_s"] is not None
        assert b["curves"]["l1"] and b["curves"]["l2"]
