"""GET / : ListBuckets, filtered to the buckets the tenant may use."""

from __future__ import annotations

from gateway.s3 import xml
from gateway.s3.handlers.common import Call
from gateway.s3.response import Response


async def list_buckets(call: Call) -> Response:
    buckets = await call.lake.list_buckets()
    visible = [(b.name, b.created) for b in buckets if call.tenant.may_use(b.name)]
    return Response.xml(xml.list_buckets(visible, call.tenant.name))
