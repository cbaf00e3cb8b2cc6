"""Object operations: head, get, put, copy, delete."""

from __future__ import annotations

from cachetier.errors import InvalidArgument, InvalidRequest, Unimplemented
from gateway.s3 import xml
from gateway.s3.handlers.common import Call, attributes, check_key, check_overrides, copy_source, object_headers
from gateway.s3.headers import byte_range, conditions
from gateway.s3.response import Response


def _no_part_number(call: Call) -> None:
    if "partNumber" in call.req.query:
        raise Unimplemented("lakegate does not support reading an object by part number")


async def head_object(call: Call) -> Response:
    _no_part_number(call)
    check_overrides(call)
    info = await call.lake.head_object(call.bucket, call.key)
    conditions(call.req.headers).check(info.etag, info.last_modified)
    rng = byte_range(call.req.headers.get("range"))
    if rng is None:
        return Response(headers=object_headers(info, call.req, served=None), length=info.size)
    start, end = rng.resolve(info.size)
    headers = object_headers(info, call.req, served=(start, end))
    return Response(status=206, headers=headers, length=end - start + 1)


async def get_object(call: Call) -> Response:
    _no_part_number(call)
    check_overrides(call)
    rng = byte_range(call.req.headers.get("range"))
    stream = await call.lake.get_object(call.bucket, call.key, rng, conditions(call.req.headers))
    stream = await stream.started()  # the head goes out with the first bytes
    headers = object_headers(stream.info, call.req, served=stream.content_range)
    return Response(status=200 if stream.content_range is None else 206, headers=headers, stream=stream)


async def put_object(call: Call) -> Response:
    check_key(call.key)
    attrs = attributes(call.req.headers, with_checksums=True)
    payload, length = call.body.payload(stored=attrs.headers)  # type: ignore[arg-type]
    result = await call.lake.put_object(
        call.bucket, call.key, payload, length, attrs, content_md5=call.req.headers.get("content-md5")
    )
    return Response(headers={"ETag": result.etag, **result.headers})


async def copy_object(call: Call) -> Response:
    check_key(call.key)
    source = copy_source(call, with_range=False)
    directive = call.req.headers.get("x-amz-metadata-directive", "COPY").upper()
    if directive not in ("COPY", "REPLACE"):
        raise InvalidArgument("Unknown metadata directive.")
    attrs = attributes(call.req.headers) if directive == "REPLACE" else None
    if attrs is None and (source.bucket, source.key) == (call.bucket, call.key):
        raise InvalidRequest(
            "This copy request is illegal because it is trying to copy an object to itself without "
            "changing the object's metadata, storage class, website redirect location or encryption attributes."
        )
    result = await call.lake.copy_object(source, call.bucket, call.key, attrs)
    return Response.xml(xml.copy_result("CopyObjectResult", result.etag, result.last_modified))


async def delete_object(call: Call) -> Response:
    await call.lake.delete_object(call.bucket, call.key)
    return Response(status=204)
