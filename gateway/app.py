"""App wiring: builds the lake and the S3 front end from settings, and routes each request to
the S3 front end or to lakegate's own endpoints (health, admin, metrics).

    /_lakegate/v1/...       the peer API (gateway.peerapi): cluster HMAC only, never S3
    /_lakegate/...          lakegate's own API (FastAPI): health, admin
    GET /metrics, unsigned  Prometheus metrics (a signed GET /metrics is S3: bucket "metrics")
    everything else         S3 (gateway.s3.frontend)
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from contextlib import asynccontextmanager
from datetime import timedelta

import httpx2 as httpx  # the maintained continuation of httpx, same API
from fastapi import FastAPI, HTTPException
from fastapi.responses import Response as FastAPIResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from cachetier.blocks.ids import BlockId
from cachetier.blocks.store import BlockStore, DiskBlockStore
from cachetier.cachedlake import CachedLake
from cachetier.telemetry.counters import CacheStats
from cachetier.cluster.node import Cluster
from cachetier.lake.dirlake import DirLake
from cachetier.lake import Lake
from cachetier.cluster.peers import PREFIX as PEER_PREFIX
from cachetier.read.path import ReadPath
from cachetier.lake.s3.client import S3Lake
from gateway.loops.membership import build_cluster, heartbeat_loop, host_load
from gateway.metrics import CacheCollector, ClusterCollector
from gateway.peerapi import PeerAPI
from gateway.process import tune_malloc
from gateway.s3.frontend import S3Frontend
from gateway.settings import Settings
from gateway.tenants import TenantDirectory


def build_lake(settings: Settings) -> Lake:
    if not settings.is_s3_lake:
        return DirLake(settings.lake[4:])
    return S3Lake(
        settings.lake,
        settings.lake_access_key,
        settings.lake_secret_key,
        settings.lake_region,
        timeout=httpx.Timeout(settings.lake_timeout, connect=settings.lake_connect_timeout),
        max_connections=settings.lake_max_connections,
        retries=settings.lake_retries,
    )


def build_cache(settings: Settings, lake: Lake, stats: CacheStats, cluster: Cluster | None = None) -> CachedLake:
    """The block cache in front of ``lake``: L1 under ``cache_dir/l1``; in a cluster, also this
    node's share of L2 under ``cache_dir/l2``."""
    store = DiskBlockStore(settings.cache_dir / "l1", int(settings.cache_capacity), settings.cache_eviction)
    l2 = None
    if cluster is not None:
        l2 = DiskBlockStore(settings.cache_dir / "l2", int(settings.l2_capacity), settings.cache_eviction)
    reads = ReadPath(
        lake,
        store,
        stats,
        block_size=int(settings.block_size),
        meta_ttl=settings.meta_ttl,
        readahead=settings.readahead,
        max_cached_object=int(settings.cache_max_object_size),
        clock=time.monotonic,
        l2=l2,
        cluster=cluster,
    )
    return CachedLake(
        lake, reads, cache_on_write=settings.cache_on_write, cache_on_write_max=int(settings.cache_on_write_max),
        cluster=cluster,
    )


def _is_signed(scope: dict) -> bool:
    if b"X-Amz-Signature" in scope.get("query_string", b""):
        return True
    return any(k == b"authorization" for k, _ in scope["headers"])


class LakegateApp:
    """The ASGI app uvicorn serves."""

    def __init__(self, settings: Settings, *, lake: Lake | None = None, tenants: TenantDirectory | None = None):
        tune_malloc()  # before the first body buffer, however the app is served
        self.settings = settings
        self.stats = CacheStats()
        self.lake_client = lake if lake is not None else build_lake(settings)
        self.cached: CachedLake | None = None
        self.lake: Lake = self.lake_client
        self.cluster = build_cluster(settings, time.monotonic) if settings.clustered and settings.cache else None
        if settings.cache:
            self.cached = self.lake = build_cache(settings, self.lake_client, self.stats, self.cluster)
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(CacheCollector(self.stats, *self._stores()))
        if self.cluster is not None:
            self.registry.register(ClusterCollector(self.cluster))
        self.peer_api = PeerAPI(
            settings.cluster_secret.get_secret_value().encode(),
            self.cluster,
            self.cached.reads if self.cached is not None else None,
            self._load,
        )
        self.tenants = tenants if tenants is not None else TenantDirectory.load(settings.tenants_file)
        self.s3 = S3Frontend(
            self.lake,
            self.tenants,
            host_suffixes=settings.host_suffixes,
            anonymous_buckets=settings.anonymous_buckets,
            max_skew=timedelta(seconds=settings.max_clock_skew),
            max_header_bytes=settings.max_header_bytes,
            access_log=settings.access_log,
        )
        self.api = self._api()

    def _api(self) -> FastAPI:
        @asynccontextmanager
        async def lifespan(_: FastAPI):  # type: ignore[no-untyped-def]
            heartbeats = None
            if self.cluster is not None:
                heartbeats = asyncio.create_task(heartbeat_loop(self.cluster, self._load))
            yield
            if heartbeats is not None:
                heartbeats.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await heartbeats
            await self.lake.aclose()

        api = FastAPI(title="lakegate", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

        @api.get("/_lakegate/health")
        async def health() -> dict[str, str]:
            return {"status": "ok"}

        @api.get("/_lakegate/admin/stats")
        async def stats() -> dict[str, object]:
            return {
                "lake": "s3" if self.settings.is_s3_lake else "dir",
                "tenants": [t.name for t in self.tenants.tenants],
                "cache": self._cache_stats(),
            }

        @api.get("/_lakegate/admin/cluster")
        async def cluster() -> dict[str, object]:
            if self.cluster is None:
                raise HTTPException(404, "this node is not in a cluster")
            return self.cluster.snapshot()

        @api.get("/_lakegate/admin/locate")
        async def locate(bucket: str, key: str, index: int = 0, etag: str | None = None) -> dict[str, object]:
            """Which nodes own block ``index`` of ``bucket/key`` (any version), and whether this
            node's stores hold that block of version ``etag`` (default: the cached version)."""
            if self.cached is None:
                raise HTTPException(404, "the cache is off")
            owners = self.cluster.owners(bucket, key, index) if self.cluster is not None else ()
            if etag is None:
                info = self.cached.reads.meta.get(bucket, key)
                etag = info.etag if info is not None else None
            held = {}
            if etag is not None:
                bid = BlockId.of(bucket, key, etag, index, self.cached.reads.block_size)
                held = {tier: bid in store for tier, store in zip(("l1", "l2"), self._stores()) if store is not None}
            return {"owners": [m.id for m in owners], "etag": etag, "held": held}

        @api.get("/metrics")
        async def metrics() -> FastAPIResponse:
            body = generate_latest() + generate_latest(self.registry)
            return FastAPIResponse(body, media_type=CONTENT_TYPE_LATEST)

        return api

    def _stores(self) -> tuple[BlockStore | None, BlockStore | None]:
        if self.cached is None:
            return None, None
        return self.cached.reads.store, self.cached.reads.l2

    def _load(self) -> dict[str, float]:
        l1, l2 = self._stores()
        return host_load(lambda: {f"{name}_used_bytes": float(s.used_bytes()) for name, s in (("l1", l1), ("l2", l2)) if s is not None})

    def _cache_stats(self) -> dict[str, object] | None:
        if self.cached is None:
            return None
        stats: dict[str, object] = {"per_tenant": self.stats.snapshot()}
        for name, store in zip(("l1", "l2"), self._stores()):
            if store is not None:
                stats[name] = {
                    "capacity_bytes": store.capacity,
                    "used_bytes": store.used_bytes(),
                    "hits": store.hits,
                    "misses": store.misses,
                    "evictions": store.evictions,
                    "corrupt": store.corrupt,
                }
        stats["metadata_entries"] = len(self.cached.reads.meta)
        stats["background_tasks"] = self.cached.reads.background
        if self.cluster is not None:
            stats["cluster"] = self.cluster.snapshot()
        return stats

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] == "lifespan":
            await self.api(scope, receive, send)
            return
        path = scope.get("path", "")
        if path.startswith(PEER_PREFIX):
            await self.peer_api(scope, receive, send)
            return
        if path.startswith("/_lakegate/") or (path == "/metrics" and not _is_signed(scope)):
            await self.api(scope, receive, send)
            return
        await self.s3(scope, receive, send)
