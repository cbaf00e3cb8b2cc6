"""S3 errors: the data plane's (:mod:`cachetier.errors`) plus the protocol's own (auth,
request syntax), rendered in exactly one place: the S3 XML document (:func:`render`) and the
response headers a data-plane error's fields stand for (:func:`response_headers`). The data
plane's errors are imported from :mod:`cachetier.errors`, where they are defined, not through here.

    S3Error (cachetier.errors)
     ├── data plane: NoSuchKey, NoSuchBucket, InvalidRange, BadDigest, ServiceUnavailable, ...
     └── protocol (here): SignatureDoesNotMatch, InvalidAccessKeyId, RequestTimeTooSkewed,
         AuthorizationHeaderMalformed, MissingContentLength, XAmzContentSHA256Mismatch, ...
"""

from __future__ import annotations

from cachetier.errors import InvalidRange, NotModified, S3Error
from cachetier.lake.xmlshapes import DECLARATION, element
from gateway.s3.response import http_date


class SignatureDoesNotMatch(S3Error):
    status = 403
    message = "The request signature we calculated does not match the signature you provided. Check your key and signing method."


class InvalidAccessKeyId(S3Error):
    status = 403
    message = "The AWS Access Key Id you provided does not exist in our records."


class RequestTimeTooSkewed(S3Error):
    status = 403
    message = "The difference between the request time and the current time is too large."


class AuthorizationHeaderMalformed(S3Error):
    status = 400
    message = "The authorization header is malformed."


class AuthorizationQueryParametersError(S3Error):
    status = 400
    message = "Query-string authentication requires the X-Amz-Algorithm, X-Amz-Credential, X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires parameters."


class MissingSecurityHeader(S3Error):
    status = 400
    message = "Your request is missing a required header."


class MissingContentLength(S3Error):
    status = 411
    message = "You must provide the Content-Length HTTP header."


class XAmzContentSHA256Mismatch(S3Error):
    status = 400
    message = "The provided 'x-amz-content-sha256' header does not match what was computed."


class InvalidEncryptionAlgorithmError(S3Error):
    status = 400


class RequestHeaderSectionTooLarge(S3Error):
    status = 400
    message = "Your request header section exceeds the maximum allowed size."


class RequestTimeout(S3Error):
    status = 400
    message = "Your socket connection to the server was not read from or written to within the timeout period."


class InvalidURI(S3Error):
    status = 400
    message = "Couldn't parse the specified URI."


def render(err: S3Error, request_id: str) -> bytes:
    """The S3 XML error document; the only place error XML is built. (No namespace: S3 gives
    its error documents none.)"""
    parts = [DECLARATION, "<Error>", element("Code", err.code), element("Message", err.message)]
    if err.resource:
        parts.append(element("Resource", err.resource))
    parts.append(f"<RequestId>{request_id}</RequestId></Error>")
    return "".join(parts).encode()


def response_headers(err: S3Error) -> dict[str, str]:
    """The headers S3 sends with an error besides its document: the object's size with a 416,
    what the client's copy of the object is with a 304."""
    if isinstance(err, InvalidRange) and err.size is not None:
        return {"Content-Range": f"bytes */{err.size}"}
    if isinstance(err, NotModified):
        headers = {}
        if err.etag is not None:
            headers["ETag"] = err.etag
        if err.last_modified is not None:
            headers["Last-Modified"] = http_date(err.last_modified)
        return headers
    return {}
