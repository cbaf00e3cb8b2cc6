"""The ASGI app: routes each request to the S3 front end or to lakegate's own endpoints, and runs
the node (``gateway.wiring``) in its lifespan.

    /_lakegate/v1/...       the peer API (gateway.peerapi): cluster HMAC only, never S3
    /_lakegate/admin/...    admin queries (FastAPI): the admin credential only (gateway.admin),
                            checked here before any route, so every admin path has it
    /_lakegate/...          lakegate's own API (FastAPI): health (health/live, health/ready:
                            gateway.health), open
    /metrics                Prometheus metrics (open, or the admin credential with
                            LAKEGATE_METRICS_AUTH=true), unless a tenant signed it
    everything else         S3 (gateway.s3.frontend)

Which /metrics is which: a request to /metrics signed with any key but the admin's (the key
named in the Authorization header or X-Amz-Credential) is S3, a GET of bucket "metrics"; an
unsigned one, one that names the admin key, or a bearer token, is the metrics. The key named
is only a routing hint: the admin check verifies the signature afterwards.

``create_app`` is the factory for ``uvicorn --factory gateway.app:create_app``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, HTTPException
from fastapi.responses import JSONResponse, Response as FastAPIResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from cachetier.cluster.wire import PREFIX as PEER_PREFIX
from cachetier.lake import Lake
from cachetier.telemetry.snapshots import CacheSnapshot
from gateway.admin import AdminGuard, check_not_a_tenant_key
from gateway.adminroutes import add_routes as add_admin_ops_routes
from gateway.drain import PROCESS_DRAIN, Drain
from gateway.process import tune_malloc
from gateway.s3.frontend import utcnow
from gateway.settings import Settings
from gateway.tenants import TenantDirectory
from gateway.wiring import Node, NodeStats, Shared, running_node


def _is_signed(scope: dict) -> bool:  # type: ignore[type-arg]
    if b"X-Amz-Signature" in scope.get("query_string", b""):
        return True
    return any(k == b"authorization" for k, _ in scope["headers"])


class LakegateApp:
    """The ASGI app uvicorn serves. Its node exists while the lifespan runs (``running``)."""

    def __init__(
        self,
        settings: Settings,
        *,
        lake: Lake | None = None,
        tenants: TenantDirectory | None = None,
        shared: Shared | None = None,
        drain: Drain = PROCESS_DRAIN,
    ):
        tune_malloc()  # before the first body buffer, however the app is served
        self.settings = settings
        self.tenants = tenants if tenants is not None else TenantDirectory.load(settings.server.tenants_file)
        check_not_a_tenant_key(settings.admin, (t.access_key for t in self.tenants.tenants))
        self.admin = AdminGuard(settings.admin, settings.server.frontend.max_skew, utcnow)
        self._lake = lake
        self._shared = shared
        self.drain = drain  # SIGTERM's (gateway.drain): tests pass their own
        self._node: Node | None = None
        self.api = self._api()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Node]:
        """The node, built and serving for the block (the lifespan; tests may enter it directly)."""
        async with running_node(self.settings, self.tenants, lake=self._lake, shared=self._shared,
                                drain=self.drain) as node:
            self._node = node
            try:
                yield node
            finally:
                self._node = None

    @property
    def node(self) -> Node:
        if self._node is None:
            raise RuntimeError("the node runs only inside the app's lifespan (LakegateApp.running)")
        return self._node

    def _api(self) -> FastAPI:
        @asynccontextmanager
        async def lifespan(_: FastAPI) -> AsyncIterator[None]:
            async with self.running():
                yield

        api = FastAPI(title="lakegate", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

        @api.get("/_lakegate/health")
        async def health() -> dict[str, str]:
            return {"status": "ok"}

        @api.get("/_lakegate/health/live")
        async def live() -> dict[str, str]:
            return {"status": "live"}

        @api.get("/_lakegate/health/ready")
        async def ready() -> JSONResponse:
            assert self.node.readiness is not None
            ok, doc = await self.node.readiness.check()
            return JSONResponse(doc, status_code=200 if ok else 503)

        @api.get("/_lakegate/admin/stats")
        async def stats() -> dict[str, object]:
            return _stats_json(self.node.stats())

        @api.get("/_lakegate/admin/cluster")
        async def cluster() -> dict[str, object]:
            if self.node.cluster is None:
                raise HTTPException(404, "this node is not in a cluster")
            # each worker keeps its own view (gateway.workers): say which one answered, of how many
            workers = self.settings.server.workers if self.node.board is not None else 1  # in-process: one
            return {**self.node.cluster.snapshot(), "worker_pid": os.getpid(), "workers": workers}

        @api.get("/_lakegate/admin/tenants")
        async def tenants() -> dict[str, object]:
            """Per tenant: weight, requests, bytes sent, lake bytes, queue delay, share, cache bytes."""
            return self.node.tenants_report()

        @api.get("/_lakegate/admin/sizing", response_model=None)
        async def sizing(format: str = "json") -> dict[str, object] | FastAPIResponse:
            """The L1/L2 split, its target, the miss costs and each tier's miss-ratio curve
            (``?format=png``: the curves drawn, the current sizes marked)."""
            report = self.node.sizing_report()
            if report is None:
                raise HTTPException(404, "the cache is off" if self.node.cache is None else "no sizing report yet")
            if format == "json":
                return report
            if format != "png":
                raise HTTPException(400, "format is json or png")
            try:
                from tools.cachecurve import draw

                png = await asyncio.to_thread(draw, report)
            except ImportError:
                raise HTTPException(501, "drawing needs matplotlib on the node (pip install matplotlib)") from None
            return FastAPIResponse(png, media_type="image/png")

        @api.get("/_lakegate/admin/replication")
        async def replication() -> dict[str, object]:
            """The write-back journal: ``dirty_bytes``, ``pending_objects``, ``lag_s`` per replica
            position (0: writes this node received), the thresholds, the counts."""
            report = await asyncio.to_thread(self.node.replication_report)
            if report is None:
                raise HTTPException(404, "the cache is off: no write-back journal")
            return report

        @api.get("/_lakegate/admin/replicas")
        async def replicas() -> dict[str, object]:
            """Per candidate (the lake's endpoints, a block's peer owners): ``score`` under the
            replica policy (lower is better), recent ``share`` of this worker's requests."""
            return self.node.replicas_report()

        @api.get("/_lakegate/admin/locate")
        async def locate(bucket: str, key: str, index: int = 0, etag: str | None = None) -> dict[str, object]:
            """Which nodes own block ``index`` of ``bucket/key`` (any version), and whether this
            node's stores hold that block of version ``etag`` (default: the cached version)."""
            if self.node.cache is None:
                raise HTTPException(404, "the cache is off")
            where = self.node.cache.locate(bucket, key, index, etag)
            return {"owners": list(where.owners), "etag": where.etag, "held": dict(where.held)}

        add_admin_ops_routes(api, lambda: self.node.admin_ops)  # warm, drop, cached (issue 16)

        @api.get("/metrics")
        async def metrics() -> FastAPIResponse:
            body = generate_latest() + generate_latest(self.node.registry)
            return FastAPIResponse(body, media_type=CONTENT_TYPE_LATEST)

        return api

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] == "lifespan":
            await self.api(scope, receive, send)
            return
        path = scope.get("path", "")
        if path.startswith(PEER_PREFIX):
            await self.node.peer_api(scope, receive, send)
            return
        metrics = path == "/metrics" and (not _is_signed(scope) or self.admin.claims_admin(scope))
        if path.startswith("/_lakegate/") or metrics:
            if path.startswith("/_lakegate/admin") or (metrics and self.settings.admin.metrics_auth):
                refusal = self.admin.refusal(scope)
                if refusal is not None:
                    await self.admin.deny(refusal, send)
                    return
            await self.api(scope, receive, send)
            return
        await self.node.s3(scope, receive, send)


def _stats_json(stats: NodeStats) -> dict[str, object]:
    return {"lake": stats.lake, "tenants": list(stats.tenants), "cache": _cache_json(stats.cache, stats.cluster)}


def _cache_json(cache: CacheSnapshot | None, cluster: dict[str, object] | None) -> dict[str, object] | None:
    if cache is None:
        return None
    doc: dict[str, object] = {"per_tenant": cache.per_tenant}
    for name, tier in cache.tiers.items():
        doc[name] = dataclasses.asdict(tier)  # capacity_bytes, used_bytes, hits, misses, evictions, corrupt
    doc["metadata_entries"] = cache.metadata_entries
    doc["background_tasks"] = cache.background_tasks
    doc["write_buffer"] = {"used_bytes": cache.write_buffered_bytes, "budget_bytes": cache.write_budget_bytes}
    if cluster is not None:
        doc["cluster"] = cluster
    return doc


def create_app() -> LakegateApp:
    """The app from the environment (and ``.env``), for ``uvicorn --factory``: an invalid setting
    or tenants file is one line on stderr and exit status 2, as from ``lakegate serve``."""
    from gateway.cli import load_settings, load_tenants  # the CLI owns how a bad setting is told

    settings = load_settings({})
    return LakegateApp(settings, tenants=load_tenants(settings))
