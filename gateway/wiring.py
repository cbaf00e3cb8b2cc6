"""Wiring: builds one node from its settings in the app's lifespan, and closes it at the end.

``running_node`` opens each part on one ``contextlib.AsyncExitStack`` in dependency order, the
lake, the cluster (its peer client), the L1 and L2 stores, the read path (its background
fetches), the heartbeat task, and registers each part's close as soon as the part exists. So
whoever opens a thing closes it, in reverse order, at shutdown and also when start-up fails
half way (a store that cannot open closes the cluster and the lake opened before it).

At SIGTERM (``drain``: ``gateway.drain``, whose docstring has the whole shutdown order) the
node stops its heartbeats and says goodbye to its peers at once (``Departure``); when the
lifespan then ends, the write-back journal's flush (``Flusher.drain``, bounded) runs before
the flusher, the stores and the lake close. Without a drain (tests, embedders) the goodbye is
said as the node closes, and nothing waits for the journal.

A lake passed in by the caller (tests, embedders) is the caller's to close. So is ``shared``:
what a node's worker processes share (``gateway.workers``): the connection to the node's space
manager and the metadata write stamps. Without it the node is one process owning its stores.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from cachetier.blocks.spaceipc import RemoteSpace, SpaceConnection, socket_path
from cachetier.blocks.store import BlockStore, DiskBlockStore
from cachetier.cachedlake import CachedLake
from cachetier.context import current
from cachetier.cluster.membership import Membership
from cachetier.cluster.node import Cluster
from cachetier.cluster.client import PeerClient
from cachetier.cluster.ring import Member
from cachetier.lake import Lake
from cachetier.lake.dirlake import DirLake
from cachetier.lake.s3.client import S3Lake
from cachetier.read.generations import Generations
from cachetier.read.path import ReadPath
from cachetier.telemetry.counters import CacheStats
from cachetier.telemetry.choice import LakeChooser, Replicas
from cachetier.telemetry.host import HostSampler
from cachetier.telemetry.reuse import SIZING_SOCKET, ReuseHub, SizingProbe
from cachetier.telemetry.snapshots import CacheSnapshot
from cachetier.fairness.lake import metered
from cachetier.write.flusher import Flusher
from cachetier.write.journal import Journal
from cachetier.write.pending import pending_lake
from cachetier.write.peers import JournalOwner
from cachetier.write.writeback import WriteBack
from cachetier.cluster.wire import BlockRequest
from gateway.admission import NodeFairness, limited
from gateway.adminops import AdminOps
from gateway.drain import Departure, Drain, SharedGoodbyes
from gateway.health import Readiness, lake_probe
from gateway.fairpeer import FairnessMember, loop_lock
from gateway.loops.allocation import allocation_loop
from gateway.loops.placement import placement_loop
from gateway.loops.telemetry import NodeTelemetry, PeerScores, telemetry_loop
from gateway.loops.sizing import TierControl, initial_split, read_report, report_path, start_sizing
from gateway.loops.membership import heartbeat_loop, host_load
from gateway.metrics import (
    CacheCollector, ClusterCollector, DiskCollector, FairnessCollector, LakeCollector, SizingCollector,
    TelemetryCollector, WriteBackCollector,
)
from gateway.peerapi import Meter, PeerAPI
from gateway.workerstats import WorkerBoard, node_cache, node_counters, node_lake
from gateway.s3.frontend import S3Frontend
from gateway.s3.writemode import WriteModes
from gateway.settings import CacheSettings, ClusterSettings, LakeSettings, Settings
from gateway.tenants import TenantDirectory

log = logging.getLogger("lakegate.node")


@dataclasses.dataclass(frozen=True)
class Shared:
    """What this process shares with the node's other worker processes."""

    space: SpaceConnection  # the tiers' space manager, in the node's supervisor
    generations: Generations  # metadata write stamps, mapped by every worker
    board: WorkerBoard  # where the workers publish their counts (gateway.workerstats)


@dataclasses.dataclass(frozen=True)
class NodeStats:
    """What ``/_lakegate/admin/stats`` reports."""

    lake: str  # "s3" or "dir"
    tenants: tuple[str, ...]
    cache: CacheSnapshot | None  # None: the cache is off
    cluster: dict[str, object] | None  # None: not in a cluster


@dataclasses.dataclass(frozen=True)
class Node:
    """One running node: what the app routes requests to and what its admin endpoints ask."""

    settings: Settings
    tenants: TenantDirectory
    lake: Lake  # what the S3 handlers call: the cache in front of the lake, or the lake
    cache: CachedLake | None
    cluster: Cluster | None
    s3: S3Frontend
    peer_api: PeerAPI
    board: WorkerBoard | None = None  # with several workers: the others' counts
    fairness: NodeFairness | None = None  # tenant fairness (None: off, and no capacity set)
    fair_member: FairnessMember | None = None  # its side of the cluster's fairness loops
    telemetry: NodeTelemetry | None = None  # host micrometrics and anomaly reports (issue 15)
    lake_replicas: Replicas | None = None  # which endpoint of the lake (issue 15)
    peer_replicas: Replicas | None = None  # which of a block's peer owners
    writeback: WriteBack | None = None  # the write-back journal's intake (issue 14; None: the cache is off)
    lake_endpoints: Callable[[], dict[str, dict[str, int]]] | None = None  # an S3 lake's counts (this worker's)
    admin_ops: AdminOps | None = None  # warm, drop, cached (issue 16; None: the cache is off)
    readiness: Readiness | None = None  # /_lakegate/health/ready (issue 16)

    def replication_report(self) -> dict[str, object] | None:
        """``/_lakegate/admin/replication``: the node's journal and this worker's write-back counts
        (with several workers, the others' too: ``counters`` adds them)."""
        if self.writeback is None:
            return None
        report = self.writeback.report()
        if self.board is not None:
            report["counters"] = node_counters(report["counters"], self.board.others(), "writeback")  # type: ignore[arg-type]
        return report

    def replicas_report(self) -> dict[str, object]:
        """``/_lakegate/admin/replicas``: the policy, and per candidate (lake endpoints, peers)
        this worker's ``score`` and recent ``share`` of its requests, with the signals behind them."""
        return {
            "policy": self.settings.replica_policy,
            "lake": self.lake_replicas.report() if self.lake_replicas is not None else {},
            "peers": self.peer_replicas.report() if self.peer_replicas is not None else {},
        }
    registry: CollectorRegistry = dataclasses.field(init=False)  # /metrics: the node's counts

    def __post_init__(self) -> None:
        registry = CollectorRegistry(auto_describe=True)
        registry.register(CacheCollector(self.cache_snapshot))
        if self.fairness is not None:
            registry.register(FairnessCollector(self.tenants_report))
        if self.cluster is not None:
            registry.register(ClusterCollector(self.cluster, self.cluster_counters))
        if self.cache is not None:
            registry.register(SizingCollector(self.sizing_report))
        if self.telemetry is not None:
            registry.register(TelemetryCollector(self.telemetry.snapshot))
        if self.writeback is not None:
            registry.register(WriteBackCollector(self.replication_report))
        if self.lake_endpoints is not None:
            registry.register(LakeCollector(self.lake_stats))
        if self.cache is not None:
            registry.register(DiskCollector(self.settings.cache.directory))
        object.__setattr__(self, "registry", registry)

    def sizing_report(self) -> dict[str, object] | None:
        """``/_lakegate/admin/sizing``: the node's last sizing report (None: the cache is off,
        or no report yet), as its sizing loop wrote it (``gateway.loops.sizing``)."""
        if self.cache is None:
            return None
        return read_report(report_path(self.settings))

    def cache_snapshot(self) -> CacheSnapshot | None:
        """The cache's state and the node's counts (this worker's, and the others' last published)."""
        if self.cache is None:
            return None
        own = self.cache.snapshot()
        return own if self.board is None else node_cache(own, self.board.others())

    def others(self, part: str) -> list[dict[str, object]]:
        """The other workers' last published ``part`` (none with one worker)."""
        return board_part(self.board, part)

    def tenants_report(self) -> dict[str, object]:
        """``/_lakegate/admin/tenants``: the node's fairness per tenant (all workers)."""
        if self.fairness is None:
            return {"mode": "off", "tenants": {}}
        held: dict[str, int] = {}
        capacity = 0
        if self.cache is not None:
            for store in self.cache.tiers().values():
                capacity += store.capacity
                for tenant, size in store.held_bytes().items():
                    held[tenant] = held.get(tenant, 0) + size
        return self.fairness.tenants_json(self.others("fairness"), held, capacity)

    def lake_stats(self) -> dict[str, dict[str, int]]:
        """Per endpoint of the S3 lake: requests, errors, outstanding (all workers)."""
        own = self.lake_endpoints() if self.lake_endpoints is not None else {}
        return own if self.board is None else node_lake(own, self.board.others())

    def cluster_counters(self) -> dict[str, int]:
        if self.cluster is None:
            return {}
        own = self.cluster.counter_values()
        return own if self.board is None else node_counters(own, self.board.others(), "cluster")

    def publish(self) -> None:
        """This worker's own counts, for the node's other workers to add (``board``)."""
        if self.board is not None:
            own_cache = self.cache.snapshot() if self.cache is not None else None
            fairness = self.fairness.published() if self.fairness is not None else None
            if fairness is not None and self.fair_member is not None:
                fairness["partitions"] = self.fair_member.published()
            self.board.publish(own_cache, self.cluster.counter_values() if self.cluster is not None else None,
                               fairness=fairness,
                               telemetry=self.telemetry.published() if self.telemetry is not None else None,
                               writeback=self.writeback.counter_values() if self.writeback is not None else None,
                               lake=self.lake_endpoints() if self.lake_endpoints is not None else None)

    def stats(self) -> NodeStats:
        cluster = None
        if self.cluster is not None:
            cluster = {**self.cluster.snapshot(), "counters": self.cluster_counters()}
        return NodeStats(
            lake="s3" if self.settings.lake.s3 is not None else "dir",
            tenants=tuple(t.name for t in self.tenants.tenants),
            cache=self.cache_snapshot(),
            cluster=cluster,
        )


# ---- the parts, each opened with its close registered on ``stack`` ---------------------------


async def open_lake(stack: contextlib.AsyncExitStack, settings: LakeSettings, replicas: Replicas | None = None) -> Lake:
    """The lake; an S3 lake's endpoints chosen by ``replicas`` (default: round robin)."""
    lake: Lake
    if settings.s3 is not None:
        lake = S3Lake(settings.s3, chooser=LakeChooser(replicas) if replicas is not None else None)
    else:
        assert settings.directory is not None
        lake = DirLake(settings.directory)
    stack.push_async_callback(lake.aclose)
    return lake


def peer_client(me: Member, settings: ClusterSettings) -> PeerClient:
    """The one place a node's peer client is made."""
    return PeerClient(
        me,
        settings.secret,
        timeout=settings.peer_timeout,
        clock=time.time,  # HMAC stamps are wall-clock seconds (peers compare them)
        connect_timeout=min(1.0, settings.membership.failure_timeout / 3),
        verify_tls=str(settings.peer_ca_file) if settings.peer_ca_file else True,
    )


def build_cluster(settings: ClusterSettings, clock: Callable[[], float]) -> Cluster:
    """This node's ``Cluster``; the caller closes it (``aclose``)."""
    me = Member(settings.node_id, settings.url, settings.weight)
    membership = Membership(me, settings.membership, clock=clock)
    return Cluster(membership, peer_client(me, settings), seeds=list(settings.seeds), dns=settings.dns)


async def open_cluster(stack: contextlib.AsyncExitStack, settings: ClusterSettings) -> Cluster:
    cluster = build_cluster(settings, time.monotonic)
    stack.push_async_callback(cluster.aclose)
    return cluster


def open_store(
    stack: contextlib.AsyncExitStack, directory: Path, capacity: int, settings: CacheSettings,
    space: RemoteSpace | None = None, weights: Mapping[str, float] | None = None,
) -> BlockStore:
    """A tier's store; with ``space``, one whose capacity (and scrub) the node's space manager
    keeps. With ``weights`` (tenant -> weight), evictions are tenant-fair (a tenant over its
    weighted share of the bytes is evicted from first); without, plain LRU/LFU."""
    store = DiskBlockStore(directory, capacity, settings.eviction, space=space, scrub_rate=settings.scrub_rate,
                           fair=weights is not None)
    stack.callback(store.close)
    if weights is not None:
        store.set_weights(weights)  # node-wide through the space manager: every worker sets the same
    return store


async def open_cache(
    stack: contextlib.AsyncExitStack,
    settings: CacheSettings,
    lake: Lake,
    counters: CacheStats,
    cluster: Cluster | None = None,
    l2_capacity: int = 0,
    shared: Shared | None = None,
    weights: Mapping[str, float] | None = None,
    probe: SizingProbe | None = None,
    l1_capacity: int | None = None,
    replicas: Replicas | None = None,
    writeback: WriteBack | None = None,
) -> CachedLake:
    """The block cache in front of ``lake``: L1 under ``directory/l1``; in a cluster, also this
    node's share of L2 under ``directory/l2``; shared with the node's other workers through
    ``shared``. ``probe`` samples its reads for the node's sizing hub. ``l1_capacity``
    overrides the settings' (the split adaptive sizing starts from)."""

    def space(tier: str) -> RemoteSpace | None:
        return RemoteSpace(shared.space, tier) if shared is not None else None

    l1_bytes = settings.l1_capacity if l1_capacity is None else l1_capacity
    l1 = open_store(stack, settings.directory / "l1", l1_bytes, settings, space("l1"), weights)
    l2 = None
    if cluster is not None:
        l2 = open_store(stack, settings.directory / "l2", l2_capacity, settings, space("l2"), weights)
    generations = shared.generations if shared is not None else None
    reads = ReadPath(lake, l1, counters, settings.read, clock=time.monotonic, l2=l2, cluster=cluster,
                     generations=generations, probe=probe, replicas=replicas)
    cache = CachedLake(lake, reads, settings.on_write, cluster=cluster, writeback=writeback)
    stack.push_async_callback(cache.aclose)  # its background fetches, before the stores close
    return cache


def journal_path(settings: Settings) -> Path:
    return settings.cache.directory / "journal"


def recover_journal(settings: Settings) -> None:
    """The write-back journal made consistent after the node's last run (once per node start,
    before any request: leftovers of writes never acknowledged go, notices are dropped)."""
    if not settings.cache.enabled:
        return
    journal = Journal(journal_path(settings))
    try:
        found = journal.recover()
    finally:
        journal.close()
    if found.bodies or found.orphans:
        log.info("write-back journal: %d pending writes to flush, %d leftovers removed", found.bodies, found.orphans)


def open_writeback(stack: contextlib.AsyncExitStack, settings: Settings, lake: Lake, cluster: Cluster | None
                   ) -> WriteBack:
    """This process's write-back intake over the node's journal (the lake it flushes to is
    ``lake``; the read path gets its pending versions through ``pending_lake``)."""
    journal = Journal(journal_path(settings))
    stack.callback(journal.close)
    me = cluster.me.id if cluster is not None else "local"
    return WriteBack(journal, lake, settings.write.config(), me=me, cluster=cluster,
                     peers=cluster.client if cluster is not None else None)  # type: ignore[arg-type]


def start_flusher(stack: contextlib.AsyncExitStack, settings: Settings, writeback: WriteBack,
                  fairness: NodeFairness | None, tenants: TenantDirectory, board: WorkerBoard | None) -> Flusher:
    """The node's flusher, in the worker that holds the journal's flush lock; it yields to
    tenants' lake reads waiting on any of the node's workers."""
    waiting: Callable[[], bool] = lambda: False
    budget: Callable[[], float] = lambda: math.inf
    if fairness is not None:  # flushes yield to tenants' lake reads waiting for the lake budget
        waiting = lambda: fairness.lake_waiting(board_part(board, "fairness"))  # noqa: E731
        budget = lambda: fairness.capacity()["lake_bytes"]  # noqa: E731
    flusher = Flusher(writeback, budget=budget, foreground_waiting=waiting, tenant_weights=tenants.weights,
                      grace=2 * settings.cluster.membership.failure_timeout if settings.cluster is not None else 0.0)
    lock_dir = journal_path(settings) if settings.server.workers > 1 else None
    start_task(stack, loop_lock(lock_dir, flusher.run))
    return flusher


def drain_journal(stack: contextlib.AsyncExitStack, drain: Drain, flusher: Flusher, timeout: float) -> None:
    """When the node closes after SIGTERM: the journal flushed (at most ``timeout`` s), before
    the flusher stops (registered after it, so it runs first)."""

    async def flush() -> None:
        if drain.draining:
            await flusher.drain(timeout)

    stack.push_async_callback(flush)


def leave_ring(stack: contextlib.AsyncExitStack, cluster: Cluster, heartbeat: asyncio.Task[None],
               drain: Drain | None) -> None:
    """The goodbye: at SIGTERM, or as the node closes (before the cluster's client closes)."""
    departure = Departure(cluster, heartbeat)
    stack.push_async_callback(departure.leave)
    if drain is not None:
        start_task(stack, departure.on_drain(drain))


def sizing_probe(stack: contextlib.AsyncExitStack, settings: Settings, shared: Shared | None
                 ) -> tuple[SizingProbe, ReuseHub | None]:
    """This process's sampler of block reads, and the node's sizing hub when this process is
    the whole node (with several workers the supervisor runs the hub: ``gateway.workers``)."""
    sizing = settings.sizing
    if shared is not None:
        probe = SizingProbe(socket_path(settings.cache.directory, SIZING_SOCKET), sizing.sample_rate)
        stack.callback(probe.close)
        return probe, None
    hub = ReuseHub(sizing.sample_rate, sizing.memory)
    hub.start_draining()
    stack.callback(hub.close)
    return SizingProbe(None, sizing.sample_rate, hub), hub


def open_sizing(stack: contextlib.AsyncExitStack, settings: Settings, hub: ReuseHub, cache: CachedLake) -> None:
    """The node's sizing loop in this process, over ``hub``, driving its stores."""
    stack.callback(start_sizing(settings, {name: _control(store) for name, store in cache.tiers().items()}, hub))


def _control(store: BlockStore) -> TierControl:
    return TierControl(lambda: store.capacity, store.set_capacity)


def open_admin_ops(stack: contextlib.AsyncExitStack, settings: Settings, tenants: TenantDirectory,
                   cache: CachedLake | None, cluster: Cluster | None, fairness: NodeFairness | None,
                   board: WorkerBoard | None) -> AdminOps | None:
    """This worker's admin operations; a background warm yields to tenants' lake reads waiting
    on any of the node's workers (as the flusher does)."""
    if cache is None:
        return None
    waiting: Callable[[], bool] = lambda: False
    if fairness is not None:
        waiting = lambda: fairness.lake_waiting(board_part(board, "fairness"))  # noqa: E731
    ops = AdminOps(cache, settings.cache.directory / "admin" / "warm", tenants, settings.admin_ops,
                   cluster=cluster, lake_waiting=waiting)
    stack.push_async_callback(ops.aclose)
    return ops


def start_task(stack: contextlib.AsyncExitStack, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
    """``work`` as a background task, cancelled and awaited when ``stack`` closes."""
    task = asyncio.create_task(work)

    async def stop() -> None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    stack.push_async_callback(stop)
    return task


# ---- the node -------------------------------------------------------------------------------


async def publish_loop(node: Node, interval: float = 1.0) -> None:
    """Publish this worker's counts every ``interval`` seconds, and once more at the end."""
    try:
        while True:
            await asyncio.sleep(interval)
            _publish(node)
    finally:
        _publish(node)


def _publish(node: Node) -> None:
    try:
        node.publish()
    except OSError as exc:  # a full disk: the others miss this worker's counts until the next
        log.warning("could not publish this worker's counts: %s", exc)


def board_part(board: WorkerBoard | None, part: str) -> list[dict[str, object]]:
    """The other workers' last published ``part`` (none without a board: one worker)."""
    if board is None:
        return []
    return [doc[part] for doc in board.others() if isinstance(doc.get(part), dict)]  # type: ignore[misc]


async def fairness_loop(node: Node, fairness: NodeFairness, interval: float = 1.0) -> None:
    """Every ``interval``: this worker's fairness window into its totals, its part of the node
    re-split by the workers' demand (``gateway.admission``), and a leader's update another
    worker received picked up (``gateway.fairpeer``)."""
    while True:
        await asyncio.sleep(interval)
        try:
            fairness.tick(node.others("fairness") if node.board is not None else None)
            if node.fair_member is not None:
                node.fair_member.tick()
        except Exception:  # noqa: BLE001 - the loop must outlive one bad round
            log.exception("fairness round failed")


def fairness_loops(settings: Settings, tenants: TenantDirectory, cluster: Cluster, member: FairnessMember
                   ) -> Callable[[], Coroutine[Any, Any, None]]:
    """The leader's loops, as the settings' mode asks: weight allocation (with the lake budget
    and the caps split by demand; without WA the weights stay the tenants file's) and, with PP,
    partition placement. Each round does nothing on a node that does not lead."""
    fair = settings.fairness

    def unchanged(gw: Mapping[str, float], demand: Mapping[str, Mapping[str, float]],
                  current: Mapping[str, Mapping[str, float]], capacity: Mapping[str, float], *,
                  served: Mapping[str, float]) -> dict[str, dict[str, float]]:
        return {n: {t: current.get(n, {}).get(t, w) for t, w in gw.items()} for n in demand}

    async def run() -> None:
        loops = [allocation_loop(cluster, member, tenants.weights, fair.allocation_interval,
                                 allocate=None if fair.wa else unchanged, lake_bandwidth=fair.lake_bandwidth,
                                 limits=tenants.limits)]
        if fair.pp:
            loops.append(placement_loop(cluster, member, fair.placement_interval, fair.placement_moves))
        await asyncio.gather(*loops)

    return run


def _tenant_weight_on(fairness: NodeFairness | None) -> Callable[[str], float | None] | None:
    """The request's tenant's local weight on a node, as the fairness leader last set them all
    (Pisces RS: a candidate where the tenant weighs more serves it sooner); None without fairness."""
    if fairness is None:
        return None
    return lambda node: fairness.weight_on(node, current.get().tenant)


def _peer_meter(fairness: NodeFairness, member: FairnessMember) -> Meter:
    """What each piece of a block served to a peer costs: the owner's bytes sent, charged to the
    tenant the peer named, and counted as its partition's demand (placement's input)."""

    async def meter(request: BlockRequest, amount: int) -> None:
        await fairness.acquire(request.tenant, "client_bytes", amount)
        member.served_to_peer(request.bucket, request.key, request.index, request.tenant, amount)

    return meter


def _load(cache: CachedLake | None) -> Callable[[], dict[str, float]]:
    """What this node's heartbeats tell peers: the host's load and the cache's fill."""

    def fill() -> dict[str, float]:
        tiers = cache.tiers() if cache is not None else {}
        return {f"{name}_used_bytes": float(store.used_bytes()) for name, store in tiers.items()}

    return lambda: host_load(fill)


@asynccontextmanager
async def running_node(
    settings: Settings, tenants: TenantDirectory, *, lake: Lake | None = None, shared: Shared | None = None,
    drain: Drain | None = None,
) -> AsyncIterator[Node]:
    """The node, open for the block; everything it opened is closed on the way out. ``drain``:
    the process's SIGTERM (goodbye at once, the journal flushed at the end)."""
    async with contextlib.AsyncExitStack() as stack:
        lake_replicas = None  # the endpoints' choice, when this node opens an S3 lake itself
        if lake is None:
            if settings.lake.s3 is not None:
                lake_replicas = Replicas(settings.replica_policy)
            lake = await open_lake(stack, settings.lake, lake_replicas)
        lake_endpoints = lake.endpoint_stats if isinstance(lake, S3Lake) else None
        probe_lake = lake_probe(lake)  # the lake itself, not metered: probes are no tenant's
        fairness = None
        if settings.fairness.fq or limited(settings.fairness):
            seeds = len(settings.cluster.seeds) if settings.cluster is not None else 0
            fairness = NodeFairness(settings.fairness, tenants, workers=settings.server.workers, nodes=1 + seeds,
                                    directory=shared.board.directory if shared is not None else None)
            stack.callback(fairness.fairness.close)
            lake = metered(lake, fairness.acquire)  # every lake read charged to its tenant
        counters = CacheStats()
        telemetry = NodeTelemetry(HostSampler(settings.cache.directory))
        cache: CachedLake | None = None
        writeback: WriteBack | None = None
        cluster: Cluster | None = None
        peer_replicas: Replicas | None = None
        if settings.cache.enabled:
            if settings.cluster is not None:
                cluster = await open_cluster(stack, settings.cluster)
                membership = cluster.membership
                scores = PeerScores(lambda: {m.id: membership.anomalies(m.id) for m in membership.peers()},
                                    telemetry.reports)  # a peer unlike the others, not every busy one
                peer_replicas = Replicas(settings.replica_policy, anomaly=scores,
                                         weight=_tenant_weight_on(fairness))
            l2_capacity = settings.cluster.l2_capacity if settings.cluster is not None else 0
            weights = tenants.weights() if settings.fairness.occupancy else None
            l1_capacity, split_l2 = initial_split(settings)
            if settings.cluster is not None:
                l2_capacity = split_l2
            probe, hub = sizing_probe(stack, settings, shared)
            if shared is None:
                recover_journal(settings)  # this process is the whole node
            writeback = open_writeback(stack, settings, lake, cluster)
            cache = await open_cache(stack, settings.cache, pending_lake(lake, writeback), counters, cluster,
                                     l2_capacity, shared, weights, probe, l1_capacity, peer_replicas, writeback)
            writeback.invalidate = cache.reads.invalidate
            if hub is not None:
                open_sizing(stack, settings, hub, cache)
        load = _load(cache)
        secret = settings.cluster.secret if settings.cluster is not None else b""
        board = shared.board if shared is not None else None
        member = None
        meter = None
        if fairness is not None and cluster is not None and settings.fairness.fq:
            member = FairnessMember(fairness, cluster, lambda: board_part(board, "fairness"),
                                    board.directory if board is not None else None)
            meter = _peer_meter(fairness, member)
        telemetry.share_with(lambda: board_part(board, "telemetry"))
        start_task(stack, telemetry_loop(telemetry))
        journal_owner = None
        if writeback is not None:
            journal_owner = JournalOwner(writeback.me, writeback.journal, writeback.on_notice, writeback.on_copy)
            flusher = start_flusher(stack, settings, writeback, fairness, tenants, board)
            if drain is not None:
                drain_journal(stack, drain, flusher, settings.server.shutdown_flush_timeout)
        peer_api = PeerAPI(secret, cluster, cache.reads if cache is not None else None, load,
                           body_timeout=settings.server.frontend.body_timeout, fairness=member, meter=meter,
                           anomalies=telemetry.reports, journal=journal_owner)
        if cluster is not None:
            leave_ring(stack, cluster, start_task(stack, heartbeat_loop(cluster, load, telemetry)), drain)
            if board is not None and settings.server.workers > 1:  # a peer's goodbye reaches one worker
                goodbyes = SharedGoodbyes(board.directory / "goodbyes", cluster)
                start_task(stack, goodbyes.loop(cluster.heartbeat_interval))
        if member is not None and cluster is not None:
            lock_dir = board.directory if board is not None and settings.server.workers > 1 else None
            start_task(stack, loop_lock(lock_dir, fairness_loops(settings, tenants, cluster, member)))
        served = cache if cache is not None else lake
        write = settings.write
        s3 = S3Frontend(served, tenants, settings.server.frontend, fairness=fairness,
                        write_modes=WriteModes(write.mode, write.bucket_modes, write.max_replicas))
        node = Node(settings, tenants, served, cache, cluster, s3, peer_api, board=board, fairness=fairness,
                    fair_member=member, telemetry=telemetry,
                    lake_replicas=lake_replicas, peer_replicas=peer_replicas, writeback=writeback,
                    lake_endpoints=lake_endpoints,
                    admin_ops=open_admin_ops(stack, settings, tenants, cache, cluster, fairness, board),
                    readiness=Readiness(probe_lake, cluster, drain if drain is not None else Drain()))
        if fairness is not None:
            start_task(stack, fairness_loop(node, fairness))
        if node.board is not None:
            start_task(stack, publish_loop(node))
        yield node
