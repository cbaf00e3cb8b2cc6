"""What the data plane knows of the request it serves: the tenant (for per-tenant accounting)
whether the client asked to bypass the cache, and how a write is to be made. Set by the gateway per request; the Lake
interface stays free of HTTP notions."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class WriteIntent:
    """How a write is to be made (issue 14): write-back or through, and its replication (None:
    the node's defaults). From the request's x-lakegate-* headers, the bucket's and the
    tenant's write mode (``gateway.s3.writemode``)."""

    back: bool = False
    replicas: int | None = None  # N: copies on cache nodes before the lake has it
    sync_replicas: int | None = None  # K: copies durable before the answer


WRITE_THROUGH = WriteIntent()


@dataclass(frozen=True)
class RequestContext:
    tenant: str = "-"
    no_cache: bool = False  # Cache-Control: no-cache / Pragma: no-cache on the request
    zero_copy: bool = False  # the GET's consumer sends file regions (cachetier.lake.FileRegion)
    write: WriteIntent = WRITE_THROUGH


current: ContextVar[RequestContext] = ContextVar("lakegate_request", default=RequestContext())
