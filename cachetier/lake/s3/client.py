"""``S3Lake``: the :class:`~cachetier.lake.Lake` over any S3 endpoint (Ceph RGW, MinIO, AWS).

Requests are path-style (``/bucket/key``), signed with awscrt's SigV4 signer (``signing``), built
as httpx requests and sent straight to a pooled transport (HTTP/1.1): ``cachetier.net.transport``'s lean one
by default. No httpx client sits in between: its per-request cookie, auth and redirect handling
cost ~0.3 ms of CPU per lake request (profiled) and a lake needs none of them. Bodies stream both ways: uploads go out with
``UNSIGNED-PAYLOAD`` and an explicit Content-Length, downloads are handed over as they arrive.
A lake answer that is not a success becomes an ``S3Error`` (:func:`cachetier.errors.from_lake`);
an unreachable or failing lake becomes ``ServiceUnavailable`` or ``SlowDown``, after jittered
retries of the requests that are safe to repeat.

Header values are str holding the header's bytes as latin-1 (the ASGI convention), so
non-ASCII user metadata passes between client and lake byte for byte.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import random
import time
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import UTC, datetime
from typing import ParamSpec, TypeVar, cast
from urllib.parse import quote

import httpx2

from cachetier import errors
from cachetier.lake import xmlshapes
from cachetier.lake.s3.signing import UNSIGNED_PAYLOAD, CrtSigner, Signer
from cachetier.lake.conditions import NO_CONDITIONS, Conditions
from cachetier.lake.s3 import xml as s3xml
from cachetier.lake.s3.headers import (
    CHECKSUM_MODE,
    attribute_headers,
    condition_headers,
    copy_source_headers,
    http_datetime,
    int_header,
    lake_conditions,
    object_info,
    object_part,
    parse_content_range,
    range_header,
    response_headers,
    unsatisfied_size,
    write_condition_headers,
    write_result,
)
from cachetier.errors import (
    IncompleteBody,
    InvalidArgument,
    InvalidPartNumber,
    InvalidRange,
    NoSuchKey,
    NoSuchUpload,
    NotModified,
    PreconditionFailed,
    S3Error,
    ServiceUnavailable,
    SlowDown,
    Unimplemented,
    from_lake,
)
from cachetier.lake.s3.config import S3LakeConfig
from cachetier.lake.s3.endpoints import Endpoint, EndpointAttempt, EndpointChooser, RoundRobin, TrackedStream
from cachetier.net.transport import LakeTransport
from cachetier.lake import (
    Body,
    BucketInfo,
    CopySource,
    DeleteOutcome,
    ListPage,
    ListQuery,
    ObjectAttributes,
    ObjectInfo,
    ObjectPart,
    ObjectStream,
    PartsPage,
    UploadsPage,
    UploadsQuery,
    WriteResult,
)
from cachetier.lake.ranges import ByteRange
from policies import retry

_USER_AGENT = b"lakegate"

_IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "DELETE"})
# Statuses of a failing lake: retried when the request may be repeated, then 503.
_UNAVAILABLE = retry.UNAVAILABLE
# Errors raised before a single byte of the request left: always safe to retry.
_NEVER_SENT = (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout)
# The code S3 means by a status it answers without a body (HEAD, some proxies); the other
# statuses use their reason phrase (412 PreconditionFailed, 304 NotModified, ...).
_CODE_BY_STATUS = {301: "PermanentRedirect", 403: "AccessDenied", 416: "InvalidRange"}
P = ParamSpec("P")
T = TypeVar("T")


# connections to the lake kept for HEADs, besides LAKEGATE_LAKE_MAX_CONNECTIONS for the rest
_HEAD_CONNECTIONS = 8


class S3Lake:
    """A Lake on an S3 endpoint; see :mod:`cachetier.lake` for the contract it keeps."""

    # First retry delay in seconds, doubled per attempt and jittered (policies.retry).
    retry_base_delay = 0.1

    def __init__(
        self, config: S3LakeConfig, *, transport: httpx2.AsyncBaseTransport | None = None,
        clock: Callable[[], float] = time.time, timer: Callable[[], float] = time.monotonic,
        chooser: EndpointChooser | None = None,
    ) -> None:
        """``transport``, when given, carries the requests to every endpoint (a test's); else
        each endpoint gets pools of its own. ``clock`` is the signing time, ``timer`` what
        attempts' latencies are measured with."""
        self._signer: Signer = CrtSigner(config.access_key, config.secret_key, config.region)
        self._clock = clock
        self._timer = timer
        self._retries = config.retries
        self._timeouts = config.timeouts.as_dict()
        self._urls = config.endpoints
        self._decides_all = config.conditional_writes == "all"
        self._endpoints = {url: self._endpoint(url, config, transport) for url in config.endpoints}
        self.chooser: EndpointChooser = chooser if chooser is not None else RoundRobin()

    @staticmethod
    def _endpoint(url: str, config: S3LakeConfig, transport: httpx2.AsyncBaseTransport | None) -> Endpoint:
        if transport is not None:
            return Endpoint(url, transport, transport)
        return Endpoint(url, LakeTransport(max_connections=config.max_connections),
                        LakeTransport(max_connections=_HEAD_CONNECTIONS))

    def endpoint_stats(self) -> dict[str, dict[str, int]]:
        """Per endpoint URL: ``requests`` (attempts sent), ``errors`` (attempts the endpoint
        failed: connection errors, timeouts, 5xx, bodies broken mid-way), ``outstanding`` (in
        flight now)."""
        return {url: endpoint.counters.as_dict() for url, endpoint in self._endpoints.items()}

    async def aclose(self) -> None:
        closed: set[int] = set()
        for endpoint in self._endpoints.values():
            for transport in (endpoint.transport, endpoint.heads):
                if id(transport) not in closed:
                    closed.add(id(transport))
                    await transport.aclose()

    # -- buckets -----------------------------------------------------------------------------

    async def list_buckets(self) -> list[BucketInfo]:
        response = await self._request("GET", None)
        return _parsed(s3xml.parse_list_buckets, response.content)

    async def create_bucket(self, bucket: str, location: str | None = None) -> None:
        body = xmlshapes.create_bucket_request(location) if location else None
        await self._request("PUT", bucket, content=body, not_found="NoSuchBucket")

    async def head_bucket(self, bucket: str) -> None:
        await self._request("HEAD", bucket, not_found="NoSuchBucket")

    async def delete_bucket(self, bucket: str) -> None:
        await self._request("DELETE", bucket, not_found="NoSuchBucket")

    async def bucket_location(self, bucket: str) -> str:
        response = await self._request("GET", bucket, query={"location": None}, not_found="NoSuchBucket")
        return _parsed(s3xml.parse_location, response.content)

    async def list_objects(self, bucket: str, query: ListQuery) -> ListPage:
        params: dict[str, str | None] = {
            "encoding-type": "url",
            "max-keys": str(query.max_keys),
            "prefix": query.prefix or None,
            "delimiter": query.delimiter or None,
        }
        if query.v2:
            params["list-type"] = "2"
            params["start-after"] = query.start_after or None
            params["continuation-token"] = query.continuation_token
        else:
            params["marker"] = query.marker or None
        query_params = {name: value for name, value in params.items() if value is not None}
        response = await self._request("GET", bucket, query=query_params, not_found="NoSuchBucket")
        return _parsed(s3xml.parse_list_objects, response.content, query.v2)

    # -- objects -----------------------------------------------------------------------------

    async def head_object(self, bucket: str, key: str) -> ObjectInfo:
        response = await self._request("HEAD", bucket, key, headers=CHECKSUM_MODE)
        headers = response_headers(response)
        return object_info(bucket, key, headers, int_header(headers, "content-length"))

    async def object_part(self, bucket: str, key: str, part_number: int) -> ObjectPart:
        query = {"partNumber": str(part_number)}
        try:
            response = await self._request("HEAD", bucket, key, query=query)
        except InvalidRange:  # a HEAD's 416 has no body to name InvalidPartNumber
            raise InvalidPartNumber() from None
        return object_part(bucket, key, part_number, response.status_code, response_headers(response))

    async def get_object(
        self, bucket: str, key: str, range: ByteRange | None = None, conditions: Conditions = Conditions()
    ) -> ObjectStream:
        request_headers = {**CHECKSUM_MODE, **condition_headers(lake_conditions(conditions), "")}
        if range is not None:
            request_headers["range"] = range_header(range)
        try:
            response = await self._request("GET", bucket, key, headers=request_headers, stream=True)
        except InvalidRange as exc:
            if exc.size is None:  # Ceph RGW 16.2 leaves out the Content-Range S3 sends with 416
                with contextlib.suppress(S3Error):
                    exc.size = (await self.head_object(bucket, key)).size
            raise
        try:
            headers = response_headers(response)
            content_range = None
            if response.status_code == 206:
                first, last, size = parse_content_range(headers.get("content-range", ""))
                content_range = (first, last)
            else:
                size = int_header(headers, "content-length")
            info = object_info(bucket, key, headers, size)
            conditions.check(info.etag, info.last_modified)
        except BaseException:
            await response.aclose()
            raise
        return ObjectStream(info=info, content_range=content_range, body=_ResponseBody(response))

    async def put_object(
        self,
        bucket: str,
        key: str,
        body: Body,
        length: int,
        attrs: ObjectAttributes,
        content_md5: str | None = None,
        conditions: Conditions = NO_CONDITIONS,
    ) -> WriteResult:
        headers = attribute_headers(attrs) | write_condition_headers(conditions)
        if content_md5 is not None:
            headers["content-md5"] = content_md5
        response = await self._request("PUT", bucket, key, headers=headers, content=body, length=length)
        return write_result(response)

    async def copy_object(
        self, source: CopySource, bucket: str, key: str, attrs: ObjectAttributes | None = None
    ) -> WriteResult:
        headers = copy_source_headers(source)
        if attrs is not None:
            headers.update(attribute_headers(attrs))
            headers["x-amz-metadata-directive"] = "REPLACE"
        return await self._copy(bucket, key, {}, headers, "NoSuchKey")

    async def delete_object(self, bucket: str, key: str, conditions: Conditions = NO_CONDITIONS) -> None:
        self._decides("DeleteObject", conditions)
        await self._request("DELETE", bucket, key, headers=write_condition_headers(conditions))

    def _decides(self, operation: str, conditions: Conditions) -> None:
        """501 for a conditional ``operation`` the lake is not known to decide (it would do it
        ignoring the condition, as Ceph RGW 16.2 does all but PutObject's)."""
        if conditions.for_write and not self._decides_all:
            raise Unimplemented(f"This lake does not decide a conditional {operation} "
                                "(LAKEGATE_LAKE_CONDITIONAL_WRITES=all says it does).")

    async def delete_objects(self, bucket: str, keys: list[str]) -> list[DeleteOutcome]:
        body = xmlshapes.delete_request(keys)
        headers = {"content-md5": base64.b64encode(hashlib.md5(body).digest()).decode("ascii")}
        # Deleting the same keys twice answers the same: safe to retry.
        response = await self._request(
            "POST", bucket, query={"delete": None}, headers=headers, content=body, idempotent=True, not_found="NoSuchBucket"
        )
        return _parsed(s3xml.parse_delete_result, response.content)

    # -- multipart uploads -------------------------------------------------------------------

    async def create_multipart_upload(self, bucket: str, key: str, attrs: ObjectAttributes) -> str:
        response = await self._request(
            "POST", bucket, key, query={"uploads": None}, headers=attribute_headers(attrs), not_found="NoSuchBucket"
        )
        return _parsed(s3xml.parse_upload_id, response.content)

    async def upload_part(
        self,
        bucket: str,
        key: str,
        upload_id: str,
        part_number: int,
        body: Body,
        length: int,
        content_md5: str | None = None,
    ) -> WriteResult:
        headers = {"content-md5": content_md5} if content_md5 is not None else {}
        query = {"partNumber": str(part_number), "uploadId": upload_id}
        response = await self._request(
            "PUT", bucket, key, query=query, headers=headers, content=body, length=length, not_found="NoSuchUpload"
        )
        return write_result(response)

    async def upload_part_copy(
        self, source: CopySource, bucket: str, key: str, upload_id: str, part_number: int
    ) -> WriteResult:
        if "%" in source.key or source.conditions:
            return await self._upload_part_through(source, bucket, key, upload_id, part_number)
        headers = copy_source_headers(source)
        if source.range is not None:
            headers["x-amz-copy-source-range"] = await self._copy_range(source, source.range)
        query = {"partNumber": str(part_number), "uploadId": upload_id}
        return await self._copy(bucket, key, query, headers, "NoSuchUpload")

    async def _upload_part_through(
        self, source: CopySource, bucket: str, key: str, upload_id: str, part_number: int
    ) -> WriteResult:
        """UploadPartCopy as a GET of the source streamed into UploadPart, where Ceph RGW 16.2
        gets the copy wrong: it ignores an UploadPartCopy's copy-source conditions, and it
        url-decodes its x-amz-copy-source twice, so a key with "%" copies another object or
        (a "%" not before two hex digits) aborts the RGW process. The GET checks the
        conditions atomically with the read."""
        outside = InvalidArgument("The x-amz-copy-source-range is not within the source object.")
        try:
            stream = await self.get_object(source.bucket, source.key, source.range, source.conditions)
        except NotModified:
            raise PreconditionFailed() from None  # S3 answers 412 to every failed copy condition
        except InvalidRange:
            raise outside from None
        try:
            if source.range is not None and source.range.last is not None and source.range.last >= stream.info.size:
                raise outside  # a GET serves what exists, a copy range must exist
            body = cast(Body, stream.body)  # this lake's own GET: bytes, no file regions
            return await self.upload_part(bucket, key, upload_id, part_number, body, stream.length)
        finally:
            await stream.aclose()

    async def _copy(
        self, bucket: str, key: str, query: dict[str, str], headers: dict[str, str], not_found: str
    ) -> WriteResult:
        """CopyObject or UploadPartCopy. Without a body to consume, repeating one is harmless."""
        try:
            response = await self._request(
                "PUT", bucket, key, query=query, headers=headers, idempotent=True, not_found=not_found
            )
        except NotModified:
            # Ceph RGW 16.2 answers a failed x-amz-copy-if-none-match with 304; S3 says 412.
            raise PreconditionFailed() from None
        etag, last_modified = _parsed(s3xml.parse_copy_result, response.content)
        return WriteResult(etag=etag, last_modified=last_modified, headers=write_result(response).headers)

    async def _copy_range(self, source: CopySource, range: ByteRange) -> str:
        """``bytes=first-last``, the only form UploadPartCopy takes; an open or suffix range
        is resolved against the source's size (one HEAD)."""
        if range.first is not None and range.last is not None:
            return range_header(range)
        size = (await self.head_object(source.bucket, source.key)).size
        try:
            first, last = range.resolve(size)
        except InvalidRange:
            raise InvalidArgument("The x-amz-copy-source-range is not within the source object.") from None
        return f"bytes={first}-{last}"

    async def complete_multipart_upload(
        self, bucket: str, key: str, upload_id: str, parts: list[tuple[int, str]],
        conditions: Conditions = NO_CONDITIONS,
    ) -> WriteResult:
        self._decides("CompleteMultipartUpload", conditions)
        body = xmlshapes.complete_request(parts)
        response = await self._request(
            "POST", bucket, key, query={"uploadId": upload_id}, content=body, not_found="NoSuchUpload",
            headers=write_condition_headers(conditions),
        )
        etag = _parsed(s3xml.parse_complete_etag, response.content)
        result = write_result(response)
        if etag:
            return WriteResult(etag=etag, headers=result.headers)
        # Ceph RGW 16.2 answers with an empty <ETag/>: the object's HEAD has it. (Should a
        # writer replace the object in between, this reports the newer ETag.)
        info = await self.head_object(bucket, key)
        return WriteResult(etag=info.etag, last_modified=info.last_modified, headers=result.headers)

    async def abort_multipart_upload(self, bucket: str, key: str, upload_id: str) -> None:
        await self._request("DELETE", bucket, key, query={"uploadId": upload_id}, not_found="NoSuchUpload")

    async def list_parts(
        self, bucket: str, key: str, upload_id: str, max_parts: int = 1000, part_number_marker: int = 0
    ) -> PartsPage:
        query = {"uploadId": upload_id, "max-parts": str(max_parts)}
        if part_number_marker:
            query["part-number-marker"] = str(part_number_marker)
        try:
            response = await self._request("GET", bucket, key, query=query, not_found="NoSuchUpload")
        except NoSuchKey:
            raise NoSuchUpload() from None  # Ceph RGW 16.2 says NoSuchKey for an unknown upload
        return _parsed(s3xml.parse_list_parts, response.content)

    async def list_multipart_uploads(self, bucket: str, query: UploadsQuery) -> UploadsPage:
        params = {
            "uploads": None,
            "encoding-type": "url",
            "max-uploads": str(query.max_uploads),
            "prefix": query.prefix,
            "delimiter": query.delimiter,
            "key-marker": query.key_marker,
            "upload-id-marker": query.upload_id_marker,
        }
        params = {name: value for name, value in params.items() if value != ""}
        response = await self._request("GET", bucket, query=params, not_found="NoSuchBucket")
        return _parsed(s3xml.parse_list_uploads, response.content)

    # -- requests ----------------------------------------------------------------------------

    async def _request(
        self,
        method: str,
        bucket: str | None,
        key: str | None = None,
        *,
        query: Mapping[str, str | None] | None = None,
        headers: Mapping[str, str] | None = None,
        content: bytes | Body | None = None,
        length: int | None = None,
        idempotent: bool | None = None,
        stream: bool = False,
        not_found: str = "NoSuchKey",
    ) -> httpx2.Response:
        """Send a signed request, retrying what may be retried; the successful response,
        read unless ``stream``. ``not_found`` is the code of a 404 without a body (HEAD)."""
        if content is not None and not isinstance(content, bytes) and length == 0:
            # An empty body has no last byte to hold back: the lake would store the object as
            # soon as the headers arrive. Run the body's checks (they raise at its end) first.
            async for _chunk in content:
                raise IncompleteBody("The body is longer than its declared length.")
            content = b""
        upload: _Upload | None = None
        payload: bytes | _Upload | None
        if content is None or isinstance(content, bytes):
            payload = content
        else:
            payload = upload = _Upload(content, length or 0)
        retryable = method in _IDEMPOTENT_METHODS if idempotent is None else idempotent
        backoff = retry.Backoff(self._retries, self.retry_base_delay)
        order = [self._endpoints[url] for url in self.chooser.order(self._urls)]
        for number in range(self._retries + 1):
            endpoint = order[number % len(order)]
            elsewhere = order[(number + 1) % len(order)] is not endpoint
            request = self._signed(endpoint, method, bucket, key, query or {}, dict(headers or {}), payload, length)
            attempt = EndpointAttempt(endpoint, self.chooser, self._timer)
            try:
                response = await self._send(endpoint, request)
                attempt.answered(response.status_code not in _UNAVAILABLE)
                wait = retry.delay(backoff, retry.Attempt(number, response.status_code, retryable), random.random())
                if wait is None:
                    return await _answer(response, method, not_found, stream, attempt)
                await response.aclose()
                attempt.release()
            except httpx2.TransportError as exc:
                if upload is not None and upload.error is not None:
                    attempt.release()  # not the endpoint's failure: nothing to tell its chooser
                    raise  # the caller's body failed: its exception, unchanged
                attempt.failed()
                unsent = isinstance(exc, _NEVER_SENT) and (upload is None or not upload.started)
                wait = retry.delay(backoff, retry.Attempt(number, None, retryable, unsent, elsewhere), random.random())
                if wait is None:
                    raise ServiceUnavailable(f"The lake is unreachable ({type(exc).__name__}).") from exc
            except BaseException:
                attempt.release()
                raise
            await asyncio.sleep(wait)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _send(self, endpoint: Endpoint, request: httpx2.Request) -> httpx2.Response:
        """``request`` through the endpoint's transport; the response's body is not read yet."""
        request.extensions["timeout"] = self._timeouts
        response = await endpoint.transport_for(request.method).handle_async_request(request)
        response.request = request
        return response

    def _signed(
        self,
        endpoint: Endpoint,
        method: str,
        bucket: str | None,
        key: str | None,
        query: Mapping[str, str | None],
        headers: dict[str, str],
        content: bytes | _Upload | None,
        length: int | None,
    ) -> httpx2.Request:
        path = "/" if bucket is None else "/" + quote(bucket, safe="")
        if key is not None:
            path += "/" + quote(key, safe="/~")
        query_string = "&".join(
            quote(name, safe="-_.~") + ("" if value is None else "=" + quote(value, safe="-_.~"))
            for name, value in sorted(query.items())
        )
        suffix = "?" + query_string if query_string else ""
        headers["host"] = endpoint.host  # each endpoint is signed for as itself
        if isinstance(content, bytes):
            headers["content-length"] = str(len(content))
        elif content is not None:
            headers["content-length"] = str(length)
        elif method in ("PUT", "POST"):
            headers["content-length"] = "0"
        wire = {name: _wire_value(value) for name, value in headers.items()}
        signed = {name: _signed_value(name, value) for name, value in wire.items()}
        payload_hash = hashlib.sha256(content).hexdigest() if isinstance(content, bytes) else UNSIGNED_PAYLOAD
        now = datetime.fromtimestamp(self._clock(), UTC)
        for name, value in self._signer.sign(method, path + suffix, signed, payload_hash, now).items():
            wire[name] = value.encode("ascii")
        # unsigned, and not added by httpx for a Request sent as is: bodies pass through as
        # stored (no transfer compression), and the lake's log can tell lakegate's requests
        wire.setdefault("accept-encoding", b"identity")
        wire.setdefault("user-agent", _USER_AGENT)
        # httpx drops "." and ".." path segments (legal in S3 keys); escaped, they reach the
        # lake, which decodes the path before checking the signature over it.
        url = httpx2.URL(endpoint.origin + _escape_dot_segments(path) + suffix)
        return httpx2.Request(method, url, headers=[(n.encode("ascii"), v) for n, v in wire.items()], content=content)


async def _answer(
    response: httpx2.Response, method: str, not_found: str, stream: bool, attempt: EndpointAttempt
) -> httpx2.Response:
    """The final answer of a request: its error raised, or the response, read unless ``stream``
    (then its endpoint counts it outstanding until its body is read or closed)."""
    if response.status_code >= 300:
        raise await _lake_error(response, method, not_found)
    if stream:
        response.stream = TrackedStream(response.stream, attempt)
    else:
        await response.aread()
        attempt.release()
    return response


async def _lake_error(response: httpx2.Response, method: str, not_found: str) -> S3Error:
    """The error a failed response stands for (the response is closed)."""
    status = response.status_code
    code, message = "", ""
    try:
        if method != "HEAD" and status != 304:
            body = await response.aread()
            try:
                s3xml.parse(body)
            except s3xml.ErrorDocument as document:
                code, message = document.code, document.message
            except s3xml.LakeXMLError:
                pass  # a proxy's HTML page, say: the status alone tells
    finally:
        await response.aclose()
    if status in _UNAVAILABLE:
        if code == "SlowDown":
            return SlowDown()
        return ServiceUnavailable(f"The lake is failing (it answered {status} {code or 'without a code'}).")
    if not code:
        code = not_found if status == 404 else _CODE_BY_STATUS.get(status, "")
        code = code or httpx2.codes.get_reason_phrase(status).replace(" ", "") or "InternalError"
    error = from_lake(code, status, message or None)
    headers = response_headers(response)
    if isinstance(error, InvalidRange):
        error.size = unsatisfied_size(headers)
    elif isinstance(error, NotModified):
        error.etag = headers.get("etag")
        error.last_modified = http_datetime(headers.get("last-modified"))
    return error


class _Upload:
    """An upload body, sent at most once. It notes whether sending began (a request that
    never started may be retried), keeps what the caller's iterator raised (so it propagates
    unchanged), and fails the upload if the byte count is not the declared length, so the
    lake never stores a short or long object."""

    def __init__(self, body: Body, length: int) -> None:
        self._body = body
        self._length = length
        self.started = False
        self.error: Exception | None = None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        self.started = True
        sent = 0
        try:
            async for chunk in self._body:
                sent += len(chunk)
                if sent > self._length:
                    raise IncompleteBody("The body is longer than its declared length.")
                yield chunk
            if sent < self._length:
                raise IncompleteBody()
        except Exception as exc:
            self.error = exc
            raise


class _ResponseBody:
    """A GET's body as it arrives. Reading to the end or ``aclose()`` frees the connection."""

    def __init__(self, response: httpx2.Response) -> None:
        self._response = response
        self._chunks = response.aiter_raw()  # raw: a stored Content-Encoding is not undone

    def __aiter__(self) -> _ResponseBody:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await self._chunks.__anext__()
        except StopAsyncIteration:
            await self.aclose()
            raise
        except httpx2.TransportError as exc:
            await self.aclose()
            raise ServiceUnavailable(f"The lake connection broke mid-object ({type(exc).__name__}).") from exc

    async def aclose(self) -> None:
        await self._chunks.aclose()
        await self._response.aclose()


# -- header values and paths on the wire (the header mapping is cachetier.lake.s3.headers) ---


def _wire_value(value: str) -> bytes:
    try:
        return value.encode("latin-1")  # the bytes an ASGI server decoded
    except UnicodeEncodeError:
        return value.encode("utf-8")  # real unicode, from Python code


def _signed_value(name: str, value: bytes) -> str:
    # SigV4 hashes the canonical request as UTF-8, so the value it signs must be the
    # wire bytes read as UTF-8.
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArgument(f"The value of header {name} is not UTF-8.") from None


def _escape_dot_segments(path: str) -> str:
    segments = path.split("/")
    if "." not in segments and ".." not in segments:
        return path
    return "/".join(s.replace(".", "%2E") if s in (".", "..") else s for s in segments)


def _parsed(parse: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``parse(*args)`` of a successful answer's body, its failures mapped to lake errors."""
    try:
        return parse(*args, **kwargs)
    except s3xml.ErrorDocument as exc:
        raise _embedded_error(exc.code, exc.message) from None
    except s3xml.LakeXMLError as exc:
        raise ServiceUnavailable("The lake sent a response lakegate cannot read.") from exc


def _embedded_error(code: str, message: str) -> S3Error:
    """The error of a 200 answer with an ``<Error>`` body: the status is the one S3 gives the
    code (ours when we have a class for it, else 500 as for an internal error)."""
    known = getattr(errors, code, None)
    status = known.status if isinstance(known, type) and issubclass(known, S3Error) else 500
    if code == "SlowDown":
        return SlowDown()
    if status in _UNAVAILABLE:
        return ServiceUnavailable(f"The lake failed after accepting the request ({code or 'no code'}).")
    return from_lake(code, status, message or None)
