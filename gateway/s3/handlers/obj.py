"""Object operations: head, get, put, copy, delete.

GET and HEAD with ``?partNumber=N`` answer part N of a multipart object as S3 does: 206 with the
part's Content-Range and ``x-amz-mp-parts-count``; part 1 of an object not uploaded in parts is
the whole object (206 with Content-Range, no parts count), following AWS. What Ceph RGW answers
is not verified here: releases before it implemented partNumber on GET/HEAD ignore it and send
the whole object with 200 (S3Lake copes, see lake/s3/headers.py object_part). An empty object
has no range to send: its part 1 is answered 200. The part is read as a range GET, so its
blocks are the cache's blocks of that range.
"""

from __future__ import annotations

from cachetier.errors import InvalidArgument, InvalidRequest, ServiceUnavailable, Unimplemented
from cachetier.lake import ObjectPart, ObjectStream
from gateway.s3 import xml
from gateway.s3.handlers.common import (
    Call, attributes, check_key, check_overrides, copy_source, int_arg, object_headers,
)
from gateway.s3.headers import byte_range, conditions, delete_conditions, write_conditions
from gateway.s3.response import Response

# A part's place is looked up, then its bytes read: an overwrite in between is read again.
_PART_READS = 3


def _part_number(call: Call) -> int | None:
    """The ``partNumber`` a GET or HEAD asks for, None for the whole object."""
    if "partNumber" not in call.req.query:
        return None
    number = int_arg(call.req.query, "partNumber", 0)
    if not 1 <= number <= 10000:
        raise InvalidArgument("Part number must be an integer between 1 and 10000, inclusive")
    if "range" in call.req.headers:
        raise InvalidRequest("Cannot specify both Range header and partNumber query parameter")
    return number


def _part_headers(call: Call, part: ObjectPart, served: tuple[int, int] | None) -> dict[str, str]:
    headers = object_headers(part.info, call.req, served=served)
    if part.parts_count is not None:
        headers["x-amz-mp-parts-count"] = str(part.parts_count)
    return headers


async def _head_part(call: Call, number: int) -> Response:
    part = await call.lake.object_part(call.bucket, call.key, number)
    conditions(call.req.headers).check(part.info.etag, part.info.last_modified)
    served = None if part.range is None else (part.first, part.last)
    headers = _part_headers(call, part, served)
    return Response(status=206 if served else 200, headers=headers, length=part.last - part.first + 1)


async def _open_part(call: Call, number: int) -> tuple[ObjectPart, ObjectStream]:
    """Part ``number``'s place and its bytes, both of the same version of the object."""
    for _ in range(_PART_READS):
        part = await call.lake.object_part(call.bucket, call.key, number)
        stream = await call.lake.get_object(call.bucket, call.key, part.range, conditions(call.req.headers))
        if stream.info.etag == part.info.etag:
            return part, stream
        await stream.aclose()  # overwritten meanwhile: the part may lie elsewhere now
    raise ServiceUnavailable("The object kept changing while its part was read.")


async def _get_part(call: Call, number: int) -> Response:
    part, stream = await _open_part(call, number)
    stream = await stream.started()
    headers = _part_headers(call, part, stream.content_range)
    return Response(status=200 if stream.content_range is None else 206, headers=headers, stream=stream)


async def head_object(call: Call) -> Response:
    check_overrides(call)
    number = _part_number(call)
    if number is not None:
        return await _head_part(call, number)
    info = await call.lake.head_object(call.bucket, call.key)
    conditions(call.req.headers).check(info.etag, info.last_modified)
    rng = byte_range(call.req.headers.get("range"))
    if rng is None:
        return Response(headers=object_headers(info, call.req, served=None), length=info.size)
    start, end = rng.resolve(info.size)
    headers = object_headers(info, call.req, served=(start, end))
    return Response(status=206, headers=headers, length=end - start + 1)


async def get_object(call: Call) -> Response:
    check_overrides(call)
    number = _part_number(call)
    if number is not None:
        return await _get_part(call, number)
    rng = byte_range(call.req.headers.get("range"))
    stream = await call.lake.get_object(call.bucket, call.key, rng, conditions(call.req.headers))
    stream = await stream.started()  # the head goes out with the first bytes
    headers = object_headers(stream.info, call.req, served=stream.content_range)
    return Response(status=200 if stream.content_range is None else 206, headers=headers, stream=stream)


async def put_object(call: Call) -> Response:
    check_key(call.key)
    attrs = attributes(call.req.headers, with_checksums=True)
    conditional = write_conditions(call.req.headers)  # before the body: a 501 reads none of it
    payload, length = call.body.payload(stored=attrs.headers)  # type: ignore[arg-type]
    result = await call.lake.put_object(
        call.bucket, call.key, payload, length, attrs, content_md5=call.req.headers.get("content-md5"),
        conditions=conditional,
    )
    return Response(headers={"ETag": result.etag, **result.headers})


async def copy_object(call: Call) -> Response:
    check_key(call.key)
    if "if-match" in call.req.headers or "if-none-match" in call.req.headers:
        # a condition on the copy's destination (not its x-amz-copy-source-if-*): not built, and
        # never ignored (an ignored If-None-Match: * would overwrite what it was to protect)
        raise Unimplemented("CopyObject with If-Match or If-None-Match is not implemented.")
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
    await call.lake.delete_object(call.bucket, call.key, conditions=delete_conditions(call.req.headers))
    return Response(status=204)
