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
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from cachetier.dirlake import DirLake
from cachetier.lake import Lake
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


def _is_signed(scope: dict) -> bool:
    if b"X-Amz-Signature" in scope.get("query_string", b""):
        return True
    return any(k == b"authorization" for k, _ in scope["headers"])


class LakegateApp:
    """The ASGI app uvicorn serves."""

    def __init__(self, settings: Settings, *, lake: Lake | None = None, tenants: TenantDirectory | None = None):
        self.settings = settings
        self.lake = lake if lake is not None else build_lake(settings)
        self.tenants = tenants if tenants is not None else TenantDirectory.load(settings.tenants_file)
        self.s3 = S3Frontend(
            self.lake,
            self.tenants,
            host_suffixes=settings.host_suffixes,
            anonymous_buckets=settings.anonymous_buckets,
            max_skew=timedelta(seconds=settings.max_clock_skew),
            max_header_bytes=settings.max_header_bytes,
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
            }

        @api.get("/metrics")
        async def metrics() -> FastAPIResponse:
            return FastAPIResponse(generate_latest(), media_type=CONTENT_TYPE_LATEST)

        return api

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] == "lifespan":
            await self.api(scope, receive, send)
            return
        path = scope.get("path", "")
        if path.startswith("/_lakegate/") or (path == "/metrics" and not _is_signed(scope)):
            await self.api(scope, receive, send)
            return
        await self.s3(scope, receive, send)
