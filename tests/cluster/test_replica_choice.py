"""Replica choice (issue 15) on real nodes over the real RGWs (make test's Ceph runs two RGW
instances: S3_ENDPOINT_URLS), in a network namespace of the test's own (benchmarks/netns.py):
with LAKEGATE_REPLICA_POLICY=micromon a slow candidate is left within a few seconds of becoming
slow, and gets traffic back after it recovers.

- Lake endpoints: one node (cache off: every GET is a lake GET) whose lake is the two RGWs, each
  reached through a relay listening inside the namespace (benchmarks/relay.py NetnsBridge); the
  second relay then holds every response 300 ms (``set_delay``), then none again.
- An L2 owner (LAKEGATE_REPLICAS=2): three nodes; the clients read, through the third, keys both
  other nodes own, and the third's L1 is too small to keep them (so every read asks an owner);
  one owner's process is then slowed (stopped 80 ms of every 100), then let run.

Shares are counted from the reader's /_lakegate/admin/replicas (requests per candidate, sampled
per second). Asserted with room for a loaded 2-core machine: over a window of
several seconds that starts a few seconds after the change, and "most" is two thirds: under the
load of the whole suite the fast candidate's own latency rises, and C3's cubic queue term
sends a share to the slow one (measured 0.11 alone, 0.27 in a full run with a 150 ms delay).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from harness.clients import RawS3Client, run_async
from harness.cluster import LocalCluster
from harness.endpoints import ALICE, S3Endpoint, Target, empty_and_delete_bucket, unique_bucket_name
from harness.units import KiB

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/ is a folder of the repo

from benchmarks.netns import CLIENT_HOST, PEER_HOST, ShapedNetwork, available  # noqa: E402
from benchmarks.relay import NetnsBridge  # noqa: E402

pytestmark = pytest.mark.integration

BLOCK = 256 * KiB
ENV = {"LAKEGATE_ACCESS_LOG": "false", "LAKEGATE_FAIRNESS": "off", "LAKEGATE_WORKERS": "1",
       "LAKEGATE_REPLICA_POLICY": "micromon", "LAKEGATE_BLOCK_SIZE": str(BLOCK), "LAKEGATE_READAHEAD": "0"}
CLIENTS = 4


@pytest.fixture
def network() -> Any:
    why_not = available()
    if why_not:
        pytest.skip(f"no shaped network: {why_not}")
    net = ShapedNetwork(lake_mbit=4000, cluster_mbit=4000).start()
    try:
        yield net
    finally:
        net.stop()


@pytest.fixture
def rgws(rgw_target: Target) -> list[str]:
    urls = [u for u in os.environ.get("S3_ENDPOINT_URLS", "").split(",") if u]
    if len(urls) < 2:
        pytest.skip("needs two RGW instances (S3_ENDPOINT_URLS; make test starts them)")
    return urls[:2]


class Reader:
    """CLIENTS closed-loop readers of random ``keys`` through ``endpoint`` until stopped, in a
    thread of the namespace's thread."""

    def __init__(self, endpoint: S3Endpoint, bucket: str, keys: Sequence[str]) -> None:
        self.endpoint, self.bucket, self.keys = endpoint, bucket, list(keys)
        self.done = 0
        self.failed = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=lambda: run_async(self._run()), daemon=True)
        self._thread.start()

    async def _run(self) -> None:
        import random

        rng = random.Random(7)
        client = RawS3Client(self.endpoint)

        async def one() -> None:
            while not self._stop.is_set():
                status, _, _, _ = await client.get(self.bucket, rng.choice(self.keys))
                if status == 200:
                    self.done += 1
                else:
                    self.failed += 1

        try:
            await asyncio.gather(*(one() for _ in range(CLIENTS)))
        finally:
            await client.aclose()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)


def _requests(nodes: LocalCluster, node: str, part: str) -> dict[str, int]:
    report = nodes.admin(node, "/_lakegate/admin/replicas")
    assert report["policy"] == "micromon"
    return {name: int(row["requests"]) for name, row in report[part].items()}


def _share(nodes: LocalCluster, node: str, part: str, candidate: Callable[[str], bool], seconds: float
           ) -> tuple[float, int]:
    """The share of ``node``'s requests (in ``part``) that went to candidates ``candidate``
    says yes to, over the next ``seconds``; and how many requests that was."""
    before = _requests(nodes, node, part)
    time.sleep(seconds)
    after = _requests(nodes, node, part)
    delta = {name: after.get(name, 0) - before.get(name, 0) for name in after}
    total = sum(delta.values())
    return (sum(v for name, v in delta.items() if candidate(name)) / total if total else 0.0), total


def _upload(rgw_target: Target, prefix: str, count: int, size: int) -> tuple[Any, str, list[str]]:
    lake = rgw_target.client()
    bucket = unique_bucket_name(prefix)
    lake.create_bucket(Bucket=bucket)
    keys = [f"{prefix}-{i:03d}" for i in range(count)]
    body = os.urandom(size)
    for key in keys:
        lake.put_object(Bucket=bucket, Key=key, Body=body)
    return lake, bucket, keys


def test_a_slow_lake_endpoint_is_left_and_gets_traffic_back(rgw_target: Target, rgws: list[str],
                                                              network: ShapedNetwork, tmp_path: Path) -> None:
    lake, bucket, keys = _upload(rgw_target, "endpoints", 20, 64 * KiB)
    bridges = [NetnsBridge(network.name, rgws[0], 7690),
               NetnsBridge(network.name, rgws[1], 7691, delay_file=tmp_path / "delay")]
    bridges[1].set_delay(0)
    for bridge in bridges:
        bridge.start()
    inside = S3Endpoint(",".join(b.url for b in bridges), rgw_target.endpoint.access_key,
                        rgw_target.endpoint.secret_key, rgw_target.endpoint.region)
    slow_url = bridges[1].url

    def scenario() -> dict[str, tuple[float, int]]:
        (tmp_path / "nodes").mkdir()
        nodes = LocalCluster(inside, nodes=1, tenants=(ALICE,), standalone=True, host="0.0.0.0",  # noqa: S104
                             client_host=CLIENT_HOST, env={**ENV, "LAKEGATE_CACHE": "false"},
                             workdir=tmp_path / "nodes")
        reader = None
        try:
            nodes.up()
            node = nodes.node_ids[0]
            reader = Reader(nodes.endpoints(ALICE)[0], bucket, keys)
            reader.start()
            shares = {"before": _share(nodes, node, "lake", lambda n: n == slow_url, 4)}
            bridges[1].set_delay(0.3)
            time.sleep(3)  # a few seconds to leave it
            shares["slow"] = _share(nodes, node, "lake", lambda n: n == slow_url, 5)
            bridges[1].set_delay(0)
            time.sleep(4)  # probes see it recover
            shares["after"] = _share(nodes, node, "lake", lambda n: n == slow_url, 6)
            assert reader.failed == 0
            return shares
        finally:
            if reader is not None:
                reader.stop()
            nodes.down()

    try:
        shares = network.call(scenario)
    finally:
        for bridge in bridges:
            bridge.stop()
        empty_and_delete_bucket(lake, bucket)
        lake.close()
    print("share of lake requests to the second RGW (before, while slow, after):", shares)
    assert shares["before"][0] > 0.25, shares  # both are used while alike
    assert shares["slow"][0] < 1 / 3, shares  # most reads left the slow one
    assert shares["after"][0] > 0.2, shares  # and came back


def test_a_slowed_l2_owner_is_left_and_gets_traffic_back(rgw_target: Target, network: ShapedNetwork,
                                                          tmp_path: Path) -> None:
    lake, bucket, candidates = _upload(rgw_target, "owners", 120, BLOCK)
    bridge = NetnsBridge(network.name, rgw_target.endpoint.url, 7690)
    bridge.start()
    inside = S3Endpoint(bridge.url, rgw_target.endpoint.access_key, rgw_target.endpoint.secret_key,
                        rgw_target.endpoint.region)
    env = {**ENV, "LAKEGATE_REPLICAS": "2", "LAKEGATE_SIZING": "fixed"}

    def scenario() -> dict[str, tuple[float, int]]:
        (tmp_path / "nodes").mkdir()
        nodes = LocalCluster(inside, nodes=3, tenants=(ALICE,), host="0.0.0.0",  # noqa: S104 - in the namespace
                             advertise_host=PEER_HOST, client_host=CLIENT_HOST, env=env,
                             cache_capacity=str(2 * BLOCK), l2_capacity=str(256 * BLOCK), workdir=tmp_path / "nodes")
        reader = None
        stopper = None
        try:
            nodes.up()
            first, second, third = nodes.node_ids
            owned = []
            for key in candidates:
                owners = nodes.admin(third, f"/_lakegate/admin/locate?bucket={bucket}&key={key}")["owners"]
                if third not in owners:
                    owned.append(key)
            assert len(owned) >= 20, "too few keys both other nodes own"
            reader = Reader(nodes.endpoints(ALICE)[2], bucket, owned[:40])
            reader.start()
            time.sleep(3)  # both owners fetch their copies from the lake
            shares = {"before": _share(nodes, third, "peers", lambda n: n == second, 4)}
            stopper = Slowed(nodes.pids[second])
            stopper.start()
            time.sleep(3)
            shares["slow"] = _share(nodes, third, "peers", lambda n: n == second, 5)
            stopper.stop()
            time.sleep(4)
            shares["after"] = _share(nodes, third, "peers", lambda n: n == second, 6)
            assert reader.failed == 0
            return shares
        finally:
            if stopper is not None:
                stopper.stop()
            if reader is not None:
                reader.stop()
            nodes.down()

    try:
        shares = network.call(scenario)
    finally:
        bridge.stop()
        empty_and_delete_bucket(lake, bucket)
        lake.close()
    print("share of the third node's peer fetches to the slowed owner (before, while slowed, after):", shares)
    assert shares["before"][0] > 0.25, shares
    assert shares["slow"][0] < 1 / 3, shares
    assert shares["after"][0] > 0.2, shares


class Slowed:
    """A process stopped 80 ms of every 100 (SIGSTOP, SIGCONT) until ``stop``: slowed, not dead
    (its heartbeats still answer within the failure timeout)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            os.kill(self.pid, signal.SIGSTOP)
            self._stop.wait(0.08)
            os.kill(self.pid, signal.SIGCONT)
            self._stop.wait(0.02)
        os.kill(self.pid, signal.SIGCONT)

    def stop(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(5)
