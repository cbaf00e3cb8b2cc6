"""Multipart uploads: create, upload part (and part copy), complete, abort, list."""

from __future__ import annotations

from cachetier.errors import InvalidArgument, NoSuchUpload
from cachetier.lake import UploadsQuery
from gateway.s3 import xml
from gateway.s3.handlers.common import Call, attributes, check_key, copy_source, int_arg, url_encoding
from gateway.s3.headers import write_conditions
from gateway.s3.numbers import has_control
from gateway.s3.response import Response

_MAX_UPLOAD_ID = 1024  # S3's are ~100 characters; RGW's and DirLake's shorter


def _upload_id(call: Call) -> str:
    """The uploadId as sent; one no lake could have made (empty, huge, control characters) is
    NoSuchUpload before it reaches the lake."""
    upload_id = call.req.query["uploadId"]
    if not 0 < len(upload_id) <= _MAX_UPLOAD_ID or has_control(upload_id):
        raise NoSuchUpload(resource=upload_id[:_MAX_UPLOAD_ID])
    return upload_id


def _part_number(call: Call) -> int:
    n = int_arg(call.req.query, "partNumber", 0)
    if not 1 <= n <= 10000:
        raise InvalidArgument("Part number must be an integer between 1 and 10000, inclusive")
    return n


async def create(call: Call) -> Response:
    check_key(call.key)
    upload_id = await call.lake.create_multipart_upload(call.bucket, call.key, attributes(call.req.headers))
    return Response.xml(xml.initiate_multipart(call.bucket, call.key, upload_id))


async def upload_part(call: Call) -> Response:
    number = _part_number(call)
    payload, length = call.body.payload()
    result = await call.lake.upload_part(
        call.bucket, call.key, _upload_id(call), number, payload, length,
        content_md5=call.req.headers.get("content-md5"),
    )
    return Response(headers={"ETag": result.etag, **result.headers})


async def upload_part_copy(call: Call) -> Response:
    number = _part_number(call)
    source = copy_source(call, with_range=True)
    result = await call.lake.upload_part_copy(source, call.bucket, call.key, _upload_id(call), number)
    return Response.xml(xml.copy_result("CopyPartResult", result.etag, result.last_modified))


async def complete(call: Call) -> Response:
    upload_id = _upload_id(call)
    conditional = write_conditions(call.req.headers)
    parts = xml.parse_complete_multipart(await call.body.read_all(xml.MAX_BODY))
    result = await call.lake.complete_multipart_upload(call.bucket, call.key, upload_id, parts, conditions=conditional)
    host = call.req.headers.get("host", "")
    body = xml.complete_multipart(f"http://{host}/{call.bucket}/{call.key}", call.bucket, call.key, result.etag)
    resp = Response.xml(body)
    resp.headers.update(result.headers)
    return resp


async def abort(call: Call) -> Response:
    await call.lake.abort_multipart_upload(call.bucket, call.key, _upload_id(call))
    return Response(status=204)


async def list_parts(call: Call) -> Response:
    q = call.req.query
    upload_id = _upload_id(call)
    page = await call.lake.list_parts(
        call.bucket, call.key, upload_id,
        max_parts=int_arg(q, "max-parts", 1000, 0, 1000),
        part_number_marker=int_arg(q, "part-number-marker", 0),
    )
    return Response.xml(xml.list_parts(call.bucket, call.key, upload_id, page, call.tenant.name))


async def list_uploads(call: Call) -> Response:
    q = call.req.query
    query = UploadsQuery(
        prefix=q.get("prefix", ""),
        delimiter=q.get("delimiter", ""),
        key_marker=q.get("key-marker", ""),
        upload_id_marker=q.get("upload-id-marker", ""),
        max_uploads=int_arg(q, "max-uploads", 1000, 0, 1000),
    )
    encode = url_encoding(q)
    page = await call.lake.list_multipart_uploads(call.bucket, query)
    return Response.xml(xml.list_uploads(call.bucket, query, page, call.tenant.name, url_encode=encode))
