"""The admin operations' HTTP routes (``gateway.adminops``), on the app's FastAPI; the admin
credential is checked before any of them (``gateway.app``). A refused parameter is a 400 and a
missing thing a 404, each ``{"error": CODE, "message": ...}`` like the admin refusals.

    POST   /_lakegate/admin/warm?bucket=B[&prefix=P][&tenant=T]   202, the job (its ``id``)
    GET    /_lakegate/admin/warm                                  the node's jobs
    GET    /_lakegate/admin/warm/{id}                             one job's progress
    DELETE /_lakegate/admin/warm/{id}                             cancels it
    POST   /_lakegate/admin/drop?bucket=B[&prefix=P] | ?tenant=T[&bucket=B][&prefix=P]
    GET    /_lakegate/admin/cached?bucket=B[&prefix=P][&max_objects=N][&limit=N]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse

from cachetier.errors import S3Error
from gateway.adminops import AdminOps, BadRequest

WARM = "/_lakegate/admin/warm"


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": code, "message": message}, status_code=status)


def _integer(value: str | None, name: str) -> int | None:
    if value is None or value == "":
        return None
    if not value.isascii() or not value.isdigit() or len(value) > 9:
        raise BadRequest(f"{name} must be a whole number")
    return int(value)


def add_routes(api: FastAPI, admin_ops: Callable[[], AdminOps | None]) -> None:
    """The routes, over this worker's ``AdminOps`` (None: the cache is off, every route a 404)."""

    async def guarded(work: Callable[[AdminOps], Any], status: int = 200) -> Any:
        ops = admin_ops()
        if ops is None:
            return _error(404, "NotFound", "the cache is off: nothing to warm, drop or show")
        try:
            result = await work(ops)
        except BadRequest as exc:
            return _error(400, "InvalidArgument", str(exc))
        except S3Error as exc:  # the lake's answer to a listing (NoSuchBucket, ...)
            return _error(exc.status, exc.code, str(exc))
        if result is None:
            return _error(404, "NoSuchWarmJob", "no warm job with that id")
        return JSONResponse(result, status_code=status)

    async def value(result: Any) -> Any:
        return result

    @api.post(WARM, response_model=None)
    async def warm(bucket: str | None = None, prefix: str = "", tenant: str | None = None) -> Any:
        return await guarded(lambda ops: value(ops.start_warm(bucket, prefix, tenant)), status=202)

    @api.get(WARM, response_model=None)
    async def warm_jobs() -> Any:
        return await guarded(lambda ops: value({"jobs": ops.jobs()}))

    @api.get(WARM + "/{job_id}", response_model=None)
    async def warm_job(job_id: str) -> Any:
        return await guarded(lambda ops: value(ops.job(job_id)))

    @api.delete(WARM + "/{job_id}", response_model=None)
    async def warm_cancel(job_id: str) -> Any:
        return await guarded(lambda ops: value(ops.cancel(job_id)))

    @api.post("/_lakegate/admin/drop", response_model=None)
    async def drop(bucket: str | None = None, prefix: str = "", tenant: str | None = None) -> Any:
        return await guarded(lambda ops: ops.drop(bucket, prefix, tenant))

    @api.get("/_lakegate/admin/cached", response_model=None)
    async def cached(bucket: str | None = None, prefix: str = "", max_objects: str | None = None,
                     limit: str | None = None) -> Any:
        async def query(ops: AdminOps) -> Any:
            shown = _integer(limit, "limit")
            return await ops.cached(bucket, prefix, _integer(max_objects, "max_objects"),
                                    100 if shown is None else shown)

        return await guarded(query)
