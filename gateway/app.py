"""App wiring: builds the lake and the S3 front end from settings, and routes each request to
the S3 front end or to lakegate's own endpoints (health, admin, metrics).

    /_lakegate/...          lakegate's own API (FastAPI): health, admin
    GET /metrics, unsigned  Prometheus metrics (a signed GET /metrics is S3: bucket "metrics")
    everything else         S3 (gateway.s3.frontend)
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from datetime import timedelta

import httpx
from fastapi import FastAPI
from fastapi.responses import Response as FastAPIResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

import time

from cachetier.blockstore import DiskBlockStore
from cachetier.cachedlake import CachedLake
from cachetier.cachestats import CacheStats
from cachetier.dirlake import DirLake
from cachetier.lake import Lake
from cachetier.readpath import ReadPath
from gateway.metrics import CacheCollector
from cachetier.s3lake import S3Lake
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


def build_cache(settings: Settings, lake: Lake, stats: CacheStats) -> CachedLake:
    """The L1 block cache in front of ``lake``: blocks on disk under ``cache_dir/l1``."""
    store = DiskBlockStore(settings.cache_dir / "l1", int(settings.cache_capacity), settings.cache_eviction)
    reads = ReadPath(
        lake,
        store,
        stats,
        block_size=int(settings.block_size),
        meta_ttl=settings.meta_ttl,
        readahead=settings.readahead,
        max_cached_object=int(settings.cache_max_object_size),
        clock=time.monotonic,
    )
    return CachedLake(
        lake, reads, cache_on_write=settings.cache_on_write, cache_on_write_max=int(settings.cache_on_write_max)
    )


def _is_signed(scope: dict) -> bool:
    if b"X-Amz-Signature" in scope.get("query_string", b""):
        return True
    return any(k == b"authorization" for k, _ in scope["headers"])


class LakegateApp:
    """The ASGI app uvicorn serves."""

    def __init__(self, settings: Settings, *, lake: Lake | None = None, tenants: TenantDirectory | None = None):
        self.settings = settings
        self.stats = CacheStats()
        self.lake_client = lake if lake is not None else build_lake(settings)
        self.cached: CachedLake | None = None
        self.lake: Lake = self.lake_client
        if settings.cache:
            self.cached = self.lake = build_cache(settings, self.lake_client, self.stats)
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(CacheCollector(self.stats, self.cached.reads.store if self.cached else None))
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
            yield
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

        @api.get("/metrics")
        async def metrics() -> FastAPIResponse:
            body = generate_latest() + generate_latest(self.registry)
            return FastAPIResponse(body, media_type=CONTENT_TYPE_LATEST)

        return api

    def _cache_stats(self) -> dict[str, object] | None:
        if self.cached is None:
            return None
        store = self.cached.reads.store
        return {
            "per_tenant": self.stats.snapshot(),
            "l1": {
                "capacity_bytes": store.capacity,
                "used_bytes": store.used_bytes(),
                "hits": store.hits,
                "misses": store.misses,
                "evictions": store.evictions,
                "corrupt": store.corrupt,
            },
            "metadata_entries": len(self.cached.reads.meta),
        }

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] == "lifespan":
            await self.api(scope, receive, send)
            return
        path = scope.get("path", "")
        if path.startswith("/_lakegate/") or (path == "/metrics" and not _is_signed(scope)):
            await self.api(scope, receive, send)
            return
        await self.s3(scope, receive, send)
