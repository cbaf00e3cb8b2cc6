"""Bucket operations: create, head, delete, location, listings, multi-object delete."""

from __future__ import annotations

from cachetier.lake import ListQuery
from gateway.s3 import xml
from gateway.s3.handlers.common import Call, check_bucket_name, int_arg, url_encoding
from gateway.s3.response import Response


async def create_bucket(call: Call) -> Response:
    check_bucket_name(call.bucket)
    location = None
    if call.req.headers.get("content-length", "0") != "0":
        location = xml.parse_create_bucket(await call.body.read_all(xml.MAX_BODY))
    await call.lake.create_bucket(call.bucket, location)
    return Response(headers={"Location": f"/{call.bucket}"})


async def head_bucket(call: Call) -> Response:
    await call.lake.head_bucket(call.bucket)
    return Response()


async def delete_bucket(call: Call) -> Response:
    await call.lake.delete_bucket(call.bucket)
    return Response(status=204)


async def get_bucket_location(call: Call) -> Response:
    return Response.xml(xml.location(await call.lake.bucket_location(call.bucket)))


async def list_objects(call: Call) -> Response:
    q = call.req.query
    v2 = call.req.operation == "ListObjectsV2"
    query = ListQuery(
        prefix=q.get("prefix", ""),
        delimiter=q.get("delimiter", ""),
        max_keys=int_arg(q, "max-keys", 1000, 0, 1000),
        v2=v2,
        marker=q.get("marker", "") if not v2 else "",
        start_after=q.get("start-after", "") if v2 else "",
        continuation_token=q.get("continuation-token") if v2 else None,
    )
    encode = url_encoding(q)
    page = await call.lake.list_objects(call.bucket, query)
    owner = call.tenant.name if (not v2 or q.get("fetch-owner") == "true") else None
    return Response.xml(xml.list_objects(call.bucket, query, page, url_encode=encode, owner=owner))


async def delete_objects(call: Call) -> Response:
    keys, quiet = xml.parse_delete(await call.body.read_all(xml.MAX_BODY))
    outcomes = await call.lake.delete_objects(call.bucket, keys)
    return Response.xml(xml.delete_result(outcomes, quiet))
