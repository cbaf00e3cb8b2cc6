"""S3 errors: the data plane's (:mod:`cachetier.errors`) plus the protocol's own (auth,
request syntax), rendered to S3 XML in exactly one place (:func:`render`). The data plane's
errors are imported from :mod:`cachetier.errors`, where they are defined, not through here.

    S3Error (cachetier.errors)
     ├── data plane: NoSuchKey, NoSuchBucket, InvalidRange, BadDigest, ServiceUnavailable, ...
     └── protocol (here): SignatureDoesNotMatch, InvalidAccessKeyId, RequestTimeTooSkewed,
         AuthorizationHeaderMalformed, MissingContentLength, XAmzContentSHA256Mismatch, ...
"""

from __future__ import annotations

from xml.sax.saxutils import escape

from cachetier.errors import S3Error


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
    """The S3 XML error document; the only place error XML is built."""
    parts = [
        '<?xml version="1.0" encoding="UTF-8"?>\n<Error>',
        f"<Code>{escape(err.code)}</Code>",
        f"<Message>{escape(err.message)}</Message>",
    ]
    if err.resource:
        parts.append(f"<Resource>{escape(err.resource)}</Resource>")
    parts.append(f"<RequestId>{request_id}</RequestId></Error>")
    return "".join(parts).encode()
