"""Tenant fairness (issue 12) across two real nodes over the real RGW: equal weights give equal
service whatever the offered load (and whatever the number of worker processes per node), a
tenant past its queue bound gets S3's 503 SlowDown while the others are served, a scan cannot
flush another tenant's hot set, and weights 3:1 split the service 3:1, as the admin endpoint
reports; with LAKEGATE_FAIRNESS=off (the control) the load decides the service instead.

The nodes' capacities are set small (LAKEGATE_NODE_REQUEST_RATE requests/s per node), so the
scheduler is what limits service, never the CPU of this 2-core machine: the clients offer ten
times more than the nodes serve. Served rates are counted by the clients, from their completed
requests over a window after a warm-up; hit ratios from the nodes' per-tenant counters
(/_lakegate/admin/stats, summed over the nodes). Clients are harness/clients.py's RawS3Client,
one connection per closed-loop worker, on one event loop. CLUSTER_BASE_PORT=P puts the nodes on
ports P, P+1 (the control's on P+10, P+11, the two-worker nodes' on P+20, P+21) instead of any
free ones.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import pytest
from harness.clients import RawS3Client, run_async
from harness.cluster import LocalCluster
from harness.endpoints import S3Endpoint, Target, Tenant
from harness.units import KiB, MiB

ALPHA = Tenant("alpha", "AKIDALPHA00000000001", "alpha-secret-0123456789", weight=1.0)
BETA = Tenant("beta", "AKIDBETA000000000001", "beta-secret-01234567890", weight=1.0)
GAMMA = Tenant("gamma", "AKIDGAMMA00000000001", "gamma-secret-0123456789", weight=3.0)  # 3x alpha

REQUEST_RATE = 50  # requests/s each node serves (LAKEGATE_NODE_REQUEST_RATE)
TENANT_QUEUE = 16  # requests a tenant may have queued on a node before SlowDown
FLOOD = 6 * TENANT_QUEUE  # past the queue bound even if a node admits a burst of a second's capacity
BLOCK = 1 * MiB
CACHE = 16 * MiB  # each node's L1 and L2 (LAKEGATE_CACHE_CAPACITY, LAKEGATE_L2_CAPACITY)
NODE_ENV = {
    "LAKEGATE_ACCESS_LOG": "false",
    "LAKEGATE_FAIRNESS": "all",
    "LAKEGATE_NODE_REQUEST_RATE": str(REQUEST_RATE),
    "LAKEGATE_TENANT_QUEUE": str(TENANT_QUEUE),
    "LAKEGATE_BLOCK_SIZE": str(BLOCK),
    "LAKEGATE_CACHE_CAPACITY": str(CACHE),
    "LAKEGATE_L2_CAPACITY": str(CACHE),
}
FOUR_TO_ONE = {ALPHA: 3, BETA: 12}  # connections per node: beta offers 4x alpha's load
WARMUP_S = 3.0
WINDOW_S = 8.0
SMALL = 1 * KiB
SMALL_KEYS = [f"small-{i}" for i in range(8)]
# the admin endpoint's fields per tenant (the contract)
TENANT_FIELDS = ("weight", "requests", "bytes_sent", "lake_bytes", "queue_delay_p99_s", "share", "cache_bytes")


def two_nodes(rgw_target: Target, tmp_path_factory: pytest.TempPathFactory, env: dict[str, str],
              port_offset: int = 0) -> LocalCluster:
    """Two clustered nodes with the tenants alpha, beta (weight 1) and gamma (weight 3), not yet
    up. CLUSTER_BASE_PORT picks the nodes' ports (+ ``port_offset``; default: any free ones)."""
    base_port = int(os.environ.get("CLUSTER_BASE_PORT", "0"))
    return LocalCluster(rgw_target.endpoint, nodes=2, tenants=(ALPHA, BETA, GAMMA), env=env,
                        up_args=("--base-port", str(base_port + port_offset if base_port else 0)),
                        workdir=tmp_path_factory.mktemp("fairness"))


@pytest.fixture(scope="module")
def cluster(rgw_target: Target, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The two nodes, their capacities small (NODE_ENV), fairness on (its default, ``all``)."""
    nodes = two_nodes(rgw_target, tmp_path_factory, NODE_ENV)
    try:
        yield nodes.up()
    finally:
        nodes.down()


def put_small_objects(lake_s3: Any, bucket: str, cluster: LocalCluster) -> str:
    """SMALL_KEYS in ``bucket``, each read once through every node (then they are hits)."""
    for key in SMALL_KEYS:
        lake_s3.put_object(Bucket=bucket, Key=key, Body=os.urandom(SMALL))
    for node in cluster.node_ids:
        client = cluster.client(node)
        for key in SMALL_KEYS:
            client.get_object(Bucket=bucket, Key=key)["Body"].read()
    return bucket


@pytest.fixture
def small_objects(lake_s3: Any, bucket: str, cluster: LocalCluster) -> str:
    return put_small_objects(lake_s3, bucket, cluster)


@pytest.fixture
def own_nodes(rgw_target: Target, tmp_path_factory: pytest.TempPathFactory, lake_s3: Any,
              bucket: str) -> Iterator[Callable[[dict[str, str], int], tuple[LocalCluster, str]]]:
    """``own_nodes(env, port_offset)``: two nodes of the test's own with ``env``, up now, down
    after the test, and ``bucket`` with the small objects read through them once."""
    started: list[LocalCluster] = []

    def start(env: dict[str, str], port_offset: int) -> tuple[LocalCluster, str]:
        nodes = two_nodes(rgw_target, tmp_path_factory, env, port_offset)
        started.append(nodes)
        nodes.up()
        return nodes, put_small_objects(lake_s3, bucket, nodes)

    yield start
    for nodes in started:
        nodes.down()


# -- closed-loop load ----------------------------------------------------------------------------


@dataclass
class Served:
    """What one tenant's clients saw: completion times of the 200s, other answers, errors."""

    done: list[float] = field(default_factory=list)
    bytes: int = 0
    other: list[str] = field(default_factory=list)  # non-200 answers, as "status code"
    errors: list[str] = field(default_factory=list)  # exceptions (a reset connection, a timeout)

    def in_window(self, start: float, end: float) -> int:
        return sum(1 for t in self.done if start <= t < end)


async def closed_loop(endpoint: S3Endpoint, bucket: str, keys: Sequence[str], until: float, served: Served,
                      offset: int) -> None:
    """GET ``keys`` in turn on one keep-alive connection, each as soon as the last is answered."""
    async with RawS3Client(endpoint, max_connections=1, timeout=30.0) as client:
        i = offset
        while time.monotonic() < until:
            try:
                status, headers, body = await client.request("GET", client.url(bucket, keys[i % len(keys)]))
            except (OSError, TimeoutError) as exc:
                served.errors.append(repr(exc))
                continue
            finally:
                i += 1
            if status == 200:
                served.done.append(time.monotonic())
                served.bytes += len(body)
            else:
                served.other.append(f"{status} {error_code(body)}")


def error_code(body: bytes) -> str:
    start, end = body.find(b"<Code>"), body.find(b"</Code>")
    return body[start + 6:end].decode(errors="replace") if 0 <= start < end else "?"


def backlog(cluster: LocalCluster, bucket: str, connections: dict[Tenant, int],
            seconds: float = WARMUP_S + WINDOW_S) -> tuple[dict[str, Served], float]:
    """Each tenant's closed loops, ``connections[tenant]`` per node, for ``seconds``; what each
    tenant saw and the monotonic time the load started."""
    served = {tenant.name: Served() for tenant in connections}

    async def main() -> float:
        start = time.monotonic()
        until = start + seconds
        loops = [closed_loop(endpoint, bucket, SMALL_KEYS, until, served[tenant.name], i)
                 for tenant, count in connections.items()
                 for endpoint in cluster.endpoints(tenant)
                 for i in range(count)]
        await asyncio.gather(*loops)
        return start

    start = run_async(main())
    return served, start


def window_rates(served: dict[str, Served], start: float, warmup: float = WARMUP_S) -> dict[str, float]:
    """Requests/s each tenant completed over the window after the warm-up."""
    lo, hi = start + warmup, start + warmup + WINDOW_S
    return {name: s.in_window(lo, hi) / WINDOW_S for name, s in served.items()}


def describe(served: dict[str, Served], rates: dict[str, float]) -> str:
    return "; ".join(f"{name}: {rates[name]:.1f} req/s, {len(s.other)} non-200 {sorted(set(s.other))[:3]}, "
                     f"{len(s.errors)} errors {s.errors[:2]}" for name, s in served.items())


def backlogged_rates(cluster: LocalCluster, bucket: str, connections: dict[Tenant, int], label: str,
                     warmup: float = WARMUP_S) -> dict[str, float]:
    """``backlog``, then each tenant's rate over the window (printed); every request answered 200."""
    served, start = backlog(cluster, bucket, connections, warmup + WINDOW_S)
    rates = window_rates(served, start, warmup)
    print(f"{label}: {describe(served, rates)}")
    assert all(not s.errors and not s.other for s in served.values()), describe(served, rates)
    return rates


# -- the tests -----------------------------------------------------------------------------------


def test_equal_weights_get_equal_service_when_one_tenant_offers_four_times_the_load(
    cluster: LocalCluster, small_objects: str
) -> None:
    rates = backlogged_rates(cluster, small_objects, FOUR_TO_ONE, "equal weights, 4x load")
    assert_equal_service(rates, cluster)


def assert_equal_service(rates: dict[str, float], cluster: LocalCluster, within: float = 0.10) -> None:
    low, high = min(rates.values()), max(rates.values())
    assert low > 0 and low / high >= 1 - within, f"served rates not within {within:.0%}: {rates}"
    # the scheduler, not the CPU, was the bottleneck: the nodes served about their capacity
    total, capacity = sum(rates.values()), REQUEST_RATE * len(cluster.node_ids)
    assert total <= 1.2 * capacity, f"{total:.0f} req/s served, {capacity} the capacity: not enforced"
    assert total >= 0.5 * capacity, f"{total:.0f} req/s served, {capacity} the capacity: not work-conserving"


def test_equal_weights_get_equal_service_with_two_worker_processes_per_node(
    own_nodes: Callable[[dict[str, str], int], tuple[LocalCluster, str]]
) -> None:
    """The node's capacity and its tenants' shares hold across its workers: the kernel spreads
    the connections over them unevenly (SO_REUSEPORT), a tenant's few may all land on one."""
    nodes, bucket = own_nodes({**NODE_ENV, "LAKEGATE_WORKERS": "2"}, 20)
    # the workers divide the node by what each published last second: a few seconds to settle
    rates = backlogged_rates(nodes, bucket, FOUR_TO_ONE, "equal weights, 4x load, 2 workers per node",
                             warmup=3 * WARMUP_S)
    # within 25%, not the single worker's 10%: measured 0.81-0.92 over seven runs (the low one in
    # a loaded CI run); without the division across workers it was 0.63, so this still fails
    # without it. The division counts a tenant with any request waiting on a worker as wanting
    # all it is given there, and one or two closed-loop connections on a worker are not
    # continuously backlogged, so what they leave goes to the other tenant there.
    assert_equal_service(rates, nodes, within=0.25)


@dataclass
class Flood:
    """One tenant's rounds of FLOOD requests at once on one node, each on its own connection;
    what it saw, and per 503 whether the node closed the connection with it."""

    endpoint: S3Endpoint
    bucket: str
    served: Served = field(default_factory=Served)
    closed_by_503: list[bool] = field(default_factory=list)

    async def run(self, rounds: int = 3) -> None:
        clients = [RawS3Client(self.endpoint, max_connections=1, timeout=30.0) for _ in range(FLOOD)]
        try:
            for _ in range(rounds):
                await asyncio.gather(*(self.one(c, SMALL_KEYS[i % len(SMALL_KEYS)]) for i, c in enumerate(clients)))
            # connections that got SlowDown still serve (or were closed cleanly and reopen)
            await asyncio.gather(*(self.one(c, SMALL_KEYS[0]) for c in clients[:TENANT_QUEUE // 2]))
        finally:
            for client in clients:
                await client.aclose()

    async def one(self, client: RawS3Client, key: str) -> None:
        try:
            status, headers, body = await client.request("GET", client.url(self.bucket, key))
        except (OSError, TimeoutError) as exc:  # a reset, a dropped connection: never
            self.served.errors.append(repr(exc))
            return
        if status == 200:
            self.served.done.append(time.monotonic())
            return
        self.served.other.append(f"{status} {error_code(body)}")
        if status == 503:
            self.closed_by_503.append(headers.get("connection", "").lower() == "close")


def test_a_tenant_over_its_queue_bound_gets_slowdown_and_the_other_tenant_is_served(
    cluster: LocalCluster, small_objects: str
) -> None:
    flood = Flood(cluster.endpoints(BETA)[0], small_objects)
    alpha, alpha_endpoint = Served(), cluster.endpoints(ALPHA)[0]

    async def main() -> None:
        flooding = asyncio.ensure_future(flood.run())
        await asyncio.sleep(0.2)  # alpha arrives with beta's queue full
        while not flooding.done():  # two closed loops on the same node, as long as the flood lasts
            until = time.monotonic() + 0.5
            await asyncio.gather(*(closed_loop(alpha_endpoint, small_objects, SMALL_KEYS, until, alpha, i)
                                   for i in range(2)))
        await flooding

    run_async(main())
    beta = flood.served
    report = (f"beta: {len(beta.done)} OK, {len(beta.other)} other {sorted(set(beta.other))}, errors {beta.errors[:3]}, "
              f"{sum(flood.closed_by_503)} of {len(flood.closed_by_503)} 503s closed the connection; "
              f"alpha: {len(alpha.done)} OK, other {alpha.other[:3]}, errors {alpha.errors[:3]}")
    print(f"queue bound: {report}")
    assert not beta.errors and not alpha.errors, f"a connection failed instead of an answer: {report}"
    assert beta.other, f"beta went past its queue bound without a SlowDown: {report}"
    assert set(beta.other) == {"503 SlowDown"}, f"beta's refusals are not all 503 SlowDown: {report}"
    assert alpha.done and not alpha.other, f"alpha's requests did not all succeed: {report}"


@dataclass
class HotSetAndScan:
    """Beta reads its hot set (one-block objects) in turn on node1; with ``scan`` on, alpha reads
    ``per_hot`` blocks of its scan object (ranged GETs, in order, round and round) after each."""

    cluster: LocalCluster
    bucket: str
    hot: Sequence[str]
    scan_blocks: int
    per_hot: int
    scanned: int = 0  # blocks alpha read so far

    async def passes(self, count: int, scan: bool) -> None:
        beta_endpoint, alpha_endpoint = self.cluster.endpoints(BETA)[0], self.cluster.endpoints(ALPHA)[0]
        async with RawS3Client(beta_endpoint, max_connections=1) as beta, \
                RawS3Client(alpha_endpoint, max_connections=1) as alpha:
            for _ in range(count):
                for key in self.hot:
                    status, received, _, _ = await beta.get(self.bucket, key)
                    assert (status, received) == (200, BLOCK), f"beta GET {key}: {status}"
                    for _ in range(self.per_hot if scan else 0):
                        await self.scan_one(alpha)

    async def scan_one(self, alpha: RawS3Client) -> None:
        index = self.scanned % self.scan_blocks
        self.scanned += 1
        lo = index * BLOCK
        status, _, body = await alpha.request("GET", alpha.url(self.bucket, "scan"),
                                              headers={"range": f"bytes={lo}-{lo + BLOCK - 1}"})
        assert status == 206, f"alpha's scan GET block {index}: {status} {body[:200]!r}"

    def beta_hit_ratio(self, count: int, scan: bool) -> tuple[float, int]:
        """Over ``count`` passes: 1 - beta's lake GETs (all nodes) / beta's block reads; the GETs."""
        before = self.cluster.totals([BETA]).get("lake_gets", 0)
        run_async(self.passes(count, scan))
        lake_gets = self.cluster.totals([BETA]).get("lake_gets", 0) - before
        return 1 - lake_gets / (count * len(self.hot)), lake_gets


def keys_owned_evenly(cluster: LocalCluster, bucket: str, per_node: int) -> list[str]:
    """Keys whose first block ``per_node`` of them each node owns (/_lakegate/admin/locate)."""
    keys: dict[str, list[str]] = {node: [] for node in cluster.node_ids}
    for i in range(200):
        key = f"hot-{i}"
        where = cluster.admin("node1", f"/_lakegate/admin/locate?{urlencode({'bucket': bucket, 'key': key})}")
        owned = keys[where["owners"][0]]
        if len(owned) < per_node:
            owned.append(key)
        if all(len(k) == per_node for k in keys.values()):
            return [key for pair in zip(*keys.values(), strict=True) for key in pair]  # owners alternate
    raise AssertionError(f"200 keys, not {per_node} owned by each node: {keys}")


def test_a_scan_larger_than_the_cache_leaves_another_tenants_hot_set_cached(
    cluster: LocalCluster, lake_s3: Any, bucket: str
) -> None:
    # beta's hot set: 6 one-block objects, 3 owned by each node, so each of the four stores
    # (node1's L1 and L2, node2's L2; node2's L1 sees no reads) holds 3 of them: under a fifth
    # of it, below beta's share however the idle gamma is counted
    hot = keys_owned_evenly(cluster, bucket, per_node=3)
    for key in hot:
        lake_s3.put_object(Bucket=bucket, Key=key, Body=os.urandom(BLOCK))
    scan_blocks = 6 * CACHE // BLOCK  # alpha's scan: 96 MiB, 1.5x all four stores of the cluster
    lake_s3.put_object(Bucket=bucket, Key="scan", Body=os.urandom(scan_blocks * BLOCK))
    # 8 scan blocks between two of beta's reads: its hot blocks' reuse distance is 54 blocks,
    # past any store's 16 (an LRU store alone loses the whole hot set)
    reads = HotSetAndScan(cluster, bucket, hot, scan_blocks, per_hot=8)
    run_async(reads.passes(1, scan=False))  # warm: beta's hot set in the cache
    solo, solo_gets = reads.beta_hit_ratio(5, scan=False)
    shared, shared_gets = reads.beta_hit_ratio(5, scan=True)  # 30 reads: 3 may miss, not 4
    report = (f"beta's hit ratio solo {solo:.2f} ({solo_gets} lake GETs), with alpha's scan {shared:.2f} "
              f"({shared_gets} lake GETs); alpha read {reads.scanned} blocks")
    print(f"scan: {report}")
    assert solo > 0.5, f"the hot set is not cached even alone: {report}"
    assert shared >= 0.9 * solo, f"alpha's scan flushed beta's hot set: {report}"


def tenants_view(cluster: LocalCluster, node: str) -> dict[str, dict[str, Any]]:
    """/_lakegate/admin/tenants of one node, as tenant name -> its fields (the document's
    ``tenants`` member when it has one, a list of rows with ``name``, or the mapping itself)."""
    doc = cluster.admin(node, "/_lakegate/admin/tenants")
    if isinstance(doc, dict) and "tenants" in doc:
        doc = doc["tenants"]
    if isinstance(doc, list):
        return {row.get("name") or row.get("tenant"): row for row in doc}
    assert isinstance(doc, dict), f"/_lakegate/admin/tenants: {doc!r}"
    return doc


def summed(cluster: LocalCluster, names: Sequence[str], fields: Sequence[str]) -> dict[str, dict[str, float]]:
    total = {name: {f: 0.0 for f in fields} for name in names}
    for node in cluster.node_ids:
        view = tenants_view(cluster, node)
        for name in names:
            for f in fields:
                total[name][f] += float(view[name][f])
    return total


def assert_admin_tenants_agree(cluster: LocalCluster, bucket: str) -> None:
    """/_lakegate/admin/tenants has every field for gamma and alpha on every node, weights 3:1,
    and its counts move as the clients of a short load of hits saw (nothing from the lake)."""
    names = [GAMMA.name, ALPHA.name]
    for node in cluster.node_ids:
        view = tenants_view(cluster, node)
        for name in names:
            missing = [f for f in TENANT_FIELDS if f not in view.get(name, {})]
            assert not missing, f"{node} /_lakegate/admin/tenants {name} lacks {missing}: {view.get(name)}"
            assert float(view[name]["queue_delay_p99_s"]) >= 0 and float(view[name]["cache_bytes"]) >= 0
        weights = float(view[GAMMA.name]["weight"]) / float(view[ALPHA.name]["weight"])
        assert 2.7 <= weights <= 3.3, f"{node} weights gamma/alpha {weights:.2f}: {view}"
    before = summed(cluster, names, ("requests", "bytes_sent", "lake_bytes"))
    again, _ = backlog(cluster, bucket, {GAMMA: 2, ALPHA: 2}, seconds=2.0)
    time.sleep(0.5)  # the last answers are counted once sent
    after = summed(cluster, names, ("requests", "bytes_sent", "lake_bytes"))
    for name in names:
        seen = again[name]
        requests = after[name]["requests"] - before[name]["requests"]
        sent = after[name]["bytes_sent"] - before[name]["bytes_sent"]
        answered = len(seen.done) + len(seen.other)
        assert abs(requests - answered) <= max(2, answered // 100), f"{name}: nodes counted {requests}, clients {answered}"
        assert seen.bytes <= sent <= seen.bytes + len(seen.done) * 2 * KiB, f"{name}: sent {sent}, received {seen.bytes}"
        assert after[name]["lake_bytes"] == before[name]["lake_bytes"], f"{name}: lake bytes for hits: {after[name]}"


def test_weights_three_to_one_split_the_service_three_to_one_as_the_admin_endpoint_reports(
    cluster: LocalCluster, small_objects: str
) -> None:
    rates = backlogged_rates(cluster, small_objects, {GAMMA: 8, ALPHA: 8}, "weights 3:1")
    ratio = rates[GAMMA.name] / max(rates[ALPHA.name], 1e-9)
    assert 2.7 <= ratio <= 3.3, f"gamma/alpha served {ratio:.2f}, not 3 +-10%: {rates}"
    assert_admin_tenants_agree(cluster, small_objects)


def test_with_fairness_off_the_tenant_offering_four_times_the_load_gets_more(
    own_nodes: Callable[[dict[str, str], int], tuple[LocalCluster, str]]
) -> None:
    """The control of the first test (LAKEGATE_FAIRNESS=off): what it measures is the
    scheduler's doing, closed loops without it are served about as their concurrency."""
    nodes, bucket = own_nodes({**NODE_ENV, "LAKEGATE_FAIRNESS": "off"}, 10)
    rates = backlogged_rates(nodes, bucket, FOUR_TO_ONE, "fairness off, 4x load")
    assert rates[BETA.name] >= 2 * rates[ALPHA.name], f"fairness off, yet equal service: {rates}"
