"""The S3 front end as an ASGI app: request id, parsing, SigV4 (or SigV2), tenant rules,
dispatch to a handler, one place where S3 errors become XML, and the access log.

A raw ASGI app rather than framework routes: S3 routes on method + query subresources, and
this is the hot path of every request.
"""

from __future__ import annotations

import dataclasses

import functools
import itertools
import logging
import os
import time
from collections.abc import Callable
from datetime import datetime, timezone

from prometheus_client import Counter

from cachetier import context
from cachetier.errors import AccessDenied, InternalError, S3Error
from cachetier.fairness.admission import Admits
from cachetier.lake import Lake
from gateway.s3 import errors, sigv2, sigv4
from gateway.s3.body import RequestBody
from gateway.s3.config import FrontendConfig
from gateway.s3.handlers import HANDLERS
from gateway.s3.handlers.common import Call
from gateway.s3.request import S3Request, from_scope
from gateway.s3.response import ZERO_COPY, Charge, Response, send
from gateway.s3.sigv4 import AuthContext, SignedRequest
from gateway.s3.writemode import WRITE_OPERATIONS, WriteModes
from gateway.tenants import Tenant, TenantDirectory

log = logging.getLogger("lakegate.s3")
access_log = logging.getLogger("lakegate.access")

REQUESTS = Counter("lakegate_s3_requests_total", "S3 requests by operation and status", ["operation", "status"])
ERRORS = Counter("lakegate_s3_errors_total", "S3 error responses by code", ["code"])

_READ_OPERATIONS = frozenset({"GetObject", "HeadObject", "HeadBucket", "ListObjects", "ListObjectsV2"})


def _no_cache(headers: dict[str, str]) -> bool:
    """Cache-Control: no-cache (or Pragma: no-cache) on a request bypasses the cache."""
    cc = headers.get("cache-control", "").lower()
    return "no-cache" in cc or "no-store" in cc or headers.get("pragma", "").lower() == "no-cache"


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class S3Frontend:
    def __init__(
        self,
        lake: Lake,
        tenants: TenantDirectory,
        config: FrontendConfig = FrontendConfig(),
        *,
        clock: Callable[[], datetime] = utcnow,
        fairness: Admits | None = None,
        write_modes: WriteModes = WriteModes(),
    ) -> None:
        self.lake = lake
        self.write_modes = write_modes
        self.fairness = fairness  # admission and the bytes sent, in weighted fair order (None: off)
        self.tenants = tenants
        self.host_suffixes = config.host_suffixes
        self.anonymous_buckets = config.anonymous_buckets
        self.max_skew = config.max_skew
        self.max_header_bytes = config.max_header_bytes
        self.clock = clock
        self.access_log = config.access_log
        self.sigv2 = config.sigv2
        self.body_timeout = config.body_timeout
        # request ids: unique per process start + a counter (os.urandom per request costs a syscall)
        self._id_prefix = os.urandom(4).hex().upper()
        self._ids = itertools.count()
        # per request these would be built anew: a counter's child found by its labels (a lock and
        # a label check each time) and the data plane's frozen context; both are values, so kept
        # per (operation, status) and per (tenant, no-cache, zero-copy): as many as there are such
        self._counted: dict[tuple[str, int], Counter] = {}
        self._contexts: dict[tuple[str, bool, bool], context.RequestContext] = {}
        self._charges: dict[str, Charge] = {}  # per tenant: its bytes sent, charged as they leave

    async def __call__(self, scope, receive, send_) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return
        request_id = f"{self._id_prefix}{next(self._ids) & 0xFFFFFFFF:08X}"
        started = time.perf_counter()
        req: S3Request | None = None
        body: RequestBody | None = None
        try:
            req = from_scope(scope, self.host_suffixes)
            body = RequestBody(receive, req, timeout=self.body_timeout)
            resp = await self._handle(req, body, ZERO_COPY in scope.get("extensions", ()))
        except S3Error as err:
            resp = self._error(err, req, request_id)
        except Exception:  # a bug: log it with the request id, answer InternalError, keep serving
            log.exception("unhandled error in request %s", request_id)
            resp = self._error(InternalError(), req, request_id)
        if resp.status >= 300 and (body is None or body.unread):
            resp.headers["Connection"] = "close"
        head = scope["method"] == "HEAD"
        sent = 0
        charge = None
        if self.fairness is not None and req is not None and req.tenant is not None:
            charge = self._charge(req.tenant.name)
        try:
            sent = await send(send_, resp, request_id, head, charge)
        finally:
            op = req.operation if req is not None and req.operation else "Unknown"
            self._requests(op, resp.status).inc()
            if self.access_log and access_log.isEnabledFor(logging.INFO):
                access_log.info(
                    '%s %s "%s %s" %d %d %.1fms %s',
                    (scope.get("client") or ("-",))[0],
                    req.tenant.name if req is not None and req.tenant else "-",
                    scope["method"],
                    scope.get("path", ""),  # never the query string: it may hold a presigned signature
                    resp.status,
                    sent,
                    (time.perf_counter() - started) * 1000,
                    request_id,
                )

    async def _handle(self, req: S3Request, body: RequestBody, sends_files: bool = False) -> Response:
        size = 0
        for name, value in req.raw_headers:  # a loop, not sum(generator): it runs on every request
            size += len(name) + len(value) + 4
        if size > self.max_header_bytes:
            raise errors.RequestHeaderSectionTooLarge()
        auth = self._authenticate(req)
        if auth is None:
            req.tenant = self._anonymous(req)
        else:
            req.tenant = self.tenants.by_access_key(auth.access_key)
            if req.tenant is None:  # removed between signature check and here
                raise errors.InvalidAccessKeyId()
        if req.bucket and not req.tenant.may_use(req.bucket):
            raise AccessDenied(resource=req.resource)
        # on a PUT, Cache-Control is the object's own header, not a directive to us
        no_cache = req.method in ("GET", "HEAD") and _no_cache(req.headers)
        # a GET's hits as file regions, when the server sends files (gateway.httpserver)
        zero_copy = sends_files and req.operation == "GetObject"
        found = self._context(req.tenant.name, no_cache, zero_copy)
        if req.operation in WRITE_OPERATIONS:  # write-back or through, and its replication (issue 14)
            intent = self.write_modes.intent(req.headers, req.bucket, req.tenant.write_mode)
            if intent is not found.write:
                found = dataclasses.replace(found, write=intent)
        context.current.set(found)
        if self.fairness is not None:  # its turn among the tenants, or 503 SlowDown past its queue bound
            await self.fairness.acquire(req.tenant.name, "requests", 1)
        body.authenticated(auth)
        return await HANDLERS[req.operation](Call(self.lake, req, body, req.tenant))

    def _requests(self, operation: str, status: int) -> Counter:
        """The requests counter's child for ``operation`` and ``status``."""
        child = self._counted.get((operation, status))
        if child is None:
            child = self._counted[(operation, status)] = REQUESTS.labels(operation, str(status))
        return child

    def _charge(self, tenant: str) -> Charge:
        found = self._charges.get(tenant)
        if found is None:
            assert self.fairness is not None
            found = self._charges[tenant] = functools.partial(self.fairness.acquire, tenant, "client_bytes")
        return found

    def _context(self, tenant: str, no_cache: bool, zero_copy: bool) -> context.RequestContext:
        found = self._contexts.get((tenant, no_cache, zero_copy))
        if found is None:
            found = context.RequestContext(tenant, no_cache=no_cache, zero_copy=zero_copy)
            self._contexts[(tenant, no_cache, zero_copy)] = found
        return found

    def _authenticate(self, req: S3Request) -> AuthContext | None:
        """SigV4, or SigV2 when the request is signed that way and SigV2 is on (when it is off,
        SigV4's verifier answers a SigV2 request with S3's "not supported")."""
        signed = SignedRequest(req.method, req.raw_path, req.query_string, req.raw_headers)
        if self.sigv2 and sigv2.carries_sigv2(signed):
            host_bucket = req.bucket if req.virtual_host else None
            return sigv2.authenticate(
                signed, self.tenants.secret_for, self.clock(), max_skew=self.max_skew, host_bucket=host_bucket
            )
        return sigv4.authenticate(signed, self.tenants.secret_for, self.clock(), max_skew=self.max_skew)

    def _anonymous(self, req: S3Request) -> Tenant:
        """Unsigned requests: only reads of buckets the settings open to anonymous reads."""
        if req.bucket in self.anonymous_buckets and req.operation in _READ_OPERATIONS:
            return Tenant(name="anonymous", access_key="", secret_key="", buckets=(req.bucket,), anonymous=True)
        raise AccessDenied(resource=req.resource if req.bucket else None)

    def _error(self, err: S3Error, req: S3Request | None, request_id: str) -> Response:
        ERRORS.labels(err.code).inc()
        if err.resource is None and req is not None:
            err.resource = req.resource
        headers = errors.response_headers(err)
        if err.status == 304:
            return Response(status=304, headers=headers)
        headers["Content-Type"] = "application/xml"
        body = errors.render(err, request_id)
        if req is not None and req.method == "HEAD":
            return Response(status=err.status, headers=headers, length=0)
        return Response(status=err.status, headers=headers, body=body)
