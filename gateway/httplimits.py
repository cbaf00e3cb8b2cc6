"""Bounds on what one client may make the HTTP layer hold before the app sees a request
(``HttpLimits``, the one place their defaults live), and the answers past each bound.

The protocol (:mod:`gateway.httpserver`) applies them before parsing: a request head's bytes,
its header count and request line, the time a head may take to arrive, the time a connection may
sit idle or with a client that stopped reading, and the number of open connections. A refused
request never reaches the app; its answer is S3's error document on S3 paths and a plain status
on lakegate's own (``/_lakegate/...``, ``/metrics``), with ``Connection: close``.
"""

from __future__ import annotations

import dataclasses
import http
import os

from prometheus_client import Counter

from cachetier.errors import S3Error, SlowDown
from gateway.s3 import errors
from gateway.s3.config import FrontendConfig


@dataclasses.dataclass(frozen=True)
class HttpLimits:
    max_header_bytes: int = FrontendConfig.max_header_bytes  # request line + headers
    # 100 as Apache (LimitRequestFields) and Go's http.Server allow; an S3 request carries 10-25
    max_headers: int = 100
    # 8 KiB as nginx and Apache: a 1024-byte key percent-encoded (3 KiB) and a presigned query
    # fit; below max_header_bytes, so an overlong URL is answered as one
    max_request_line_bytes: int = 8192
    header_timeout: float = 10.0  # seconds from a head's first byte to its end
    idle_timeout: float = 30.0  # seconds a connection may wait with no request under way
    send_timeout: float = 60.0  # seconds a client may leave a response unread (writes paused)
    max_connections: int = 1000
    # after a refusal: what the client still sends is discarded this long / up to this many
    # bytes, so it reads the answer instead of a reset, then the connection is closed
    linger_seconds: float = 2.0
    linger_bytes: int = 4 << 20


@dataclasses.dataclass(frozen=True)
class Refusal:
    """Why the HTTP layer refused a request or connection: the S3 error and the plain status."""

    reason: str  # the metric's label
    s3_error: type[S3Error]
    plain: http.HTTPStatus


_TOO_LARGE = http.HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE
HEADER_SECTION_TOO_LARGE = Refusal("header_bytes", errors.RequestHeaderSectionTooLarge, _TOO_LARGE)
TOO_MANY_HEADERS = Refusal("headers", errors.RequestHeaderSectionTooLarge, _TOO_LARGE)  # S3 has no code for a count
REQUEST_LINE_TOO_LONG = Refusal("request_line", errors.InvalidURI, http.HTTPStatus.REQUEST_URI_TOO_LONG)
HEADER_TIMEOUT = Refusal("header_timeout", errors.RequestTimeout, http.HTTPStatus.REQUEST_TIMEOUT)
TOO_MANY_CONNECTIONS = Refusal("connections", SlowDown, http.HTTPStatus.SERVICE_UNAVAILABLE)

# the values of REFUSED's label: a Refusal's reason, or "send_timeout" for a connection aborted
# because its client stopped reading
REASONS = frozenset({r.reason for r in (HEADER_SECTION_TOO_LARGE, TOO_MANY_HEADERS, REQUEST_LINE_TOO_LONG,
                                        HEADER_TIMEOUT, TOO_MANY_CONNECTIONS)} | {"send_timeout"})
REFUSED = Counter("lakegate_http_refused_total", "requests and connections the HTTP layer refused or ended", ["reason"])


def is_s3_target(target: bytes) -> bool:
    """Whether a request target (as much of it as arrived) is an S3 path rather than lakegate's
    own; as the app routes it, except that a signed ``GET /metrics`` (S3's bucket "metrics")
    cannot be told apart before its headers, so it gets the plain answer."""
    path = target.split(b"?", 1)[0]
    return not (path.startswith(b"/_lakegate/") or path == b"/metrics")


def answer(refusal: Refusal, s3: bool) -> bytes:
    """The whole response for a refusal: S3's error document (as the front end renders it) or a
    plain status, with ``Connection: close``."""
    if s3:
        err = refusal.s3_error()
        request_id = os.urandom(8).hex().upper()
        body = errors.render(err, request_id)
        status = http.HTTPStatus(err.status)
        fields = [b"content-type: application/xml", b"x-amz-request-id: " + request_id.encode(),
                  b"x-amz-id-2: " + request_id.encode()]
    else:
        status = refusal.plain
        body = status.phrase.encode() + b"\n"
        fields = [b"content-type: text/plain; charset=utf-8"]
    head = [f"HTTP/1.1 {status.value} {status.phrase}".encode(), *fields,
            b"content-length: " + str(len(body)).encode(), b"connection: close"]
    return b"\r\n".join(head) + b"\r\n\r\n" + body
