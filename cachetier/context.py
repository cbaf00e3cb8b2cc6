"""What the data plane knows of the request it serves: the tenant (for per-tenant accounting)
and whether the client asked to bypass the cache. Set by the gateway per request; the Lake
interface stays free of HTTP notions."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class RequestContext:
    tenant: str = "-"
    no_cache: bool = False  # Cache-Control: no-cache / Pragma: no-cache on the request
    zero_copy: bool = False  # the GET's consumer sends file regions (cachetier.lake.FileRegion)


current: ContextVar[RequestContext] = ContextVar("lakegate_request", default=RequestContext())
