"""Errors the data plane raises, each carrying the S3 error code and HTTP status that a client
must see. ``gateway/s3/errors.py`` adds the protocol-level errors and renders all of them to
S3 XML in one place. What a client must also be told (the object's size with a 416, its ETag
with a 304) is a typed field here; the gateway turns it into response headers.

    S3Error                      code, status, message, resource
     ├── NoSuchBucket, NoSuchKey, NoSuchUpload, BucketNotEmpty, ...   (404/409/400)
     ├── InvalidRange (416), PreconditionFailed (412), NotModified (304)
     ├── BadDigest, InvalidDigest, InvalidArgument, KeyTooLong, ...   (400)
     └── ServiceUnavailable / SlowDown (503): the lake is unreachable or failing

Third-party errors (httpx, OSError) are mapped at the lake boundary into these, with
``raise ... from exc``.
"""

from __future__ import annotations

from datetime import datetime


class S3Error(Exception):
    """An error with an S3 code; subclasses set ``status`` and a default ``message``."""

    status: int = 500
    message: str = "We encountered an internal error. Please try again."
    s3_code: str | None = None  # when the S3 code cannot be the class name

    def __init__(
        self,
        message: str | None = None,
        *,
        resource: str | None = None,
        code: str | None = None,
        status: int | None = None,
    ) -> None:
        self.message = message or type(self).message
        self.resource = resource
        # The code defaults to the class name (as in Swift's s3api); a lake error carrying a
        # code we have no class for keeps the lake's code and status.
        self.code = code or type(self).s3_code or type(self).__name__
        if status is not None:
            self.status = status
        super().__init__(f"{self.code}: {self.message}")


class InternalError(S3Error):
    status = 500


class ServiceUnavailable(S3Error):
    status = 503
    message = "The lake is unavailable. Please reduce your request rate and retry."


class SlowDown(S3Error):
    status = 503
    message = "Please reduce your request rate."


class NoSuchBucket(S3Error):
    status = 404
    message = "The specified bucket does not exist."


class NoSuchKey(S3Error):
    status = 404
    message = "The specified key does not exist."


class NoSuchUpload(S3Error):
    status = 404
    message = "The specified multipart upload does not exist."


class BucketNotEmpty(S3Error):
    status = 409
    message = "The bucket you tried to delete is not empty."


class ConditionalRequestConflict(S3Error):
    status = 409
    message = "A conflicting operation is in progress against this resource. Please try again."


class BucketAlreadyExists(S3Error):
    status = 409
    message = "The requested bucket name is not available."


class BucketAlreadyOwnedByYou(S3Error):
    status = 409
    message = "Your previous request to create the named bucket succeeded and you already own it."


class InvalidBucketName(S3Error):
    status = 400
    message = "The specified bucket is not valid."


class KeyTooLongError(S3Error):
    status = 400
    message = "Your key is too long."


class InvalidArgument(S3Error):
    status = 400
    message = "Invalid Argument."


class InvalidRequest(S3Error):
    status = 400
    message = "Invalid Request."


class InvalidRange(S3Error):
    status = 416
    message = "The requested range is not satisfiable."

    def __init__(self, message: str | None = None, *, size: int | None = None, resource: str | None = None) -> None:
        super().__init__(message, resource=resource)
        self.size = size  # the object's, when known: S3 tells it (Content-Range: bytes */size)


class PreconditionFailed(S3Error):
    status = 412
    message = "At least one of the pre-conditions you specified did not hold."


class NotModified(S3Error):
    status = 304
    message = "Not Modified."

    def __init__(
        self,
        message: str | None = None,
        *,
        etag: str | None = None,
        last_modified: datetime | None = None,
        resource: str | None = None,
    ) -> None:
        super().__init__(message, resource=resource)
        # what a 304 tells of the object the client already holds (S3 sends both headers)
        self.etag = etag
        self.last_modified = last_modified


class BadDigest(S3Error):
    status = 400
    message = "The Content-MD5 you specified did not match what we received."


class InvalidDigest(S3Error):
    status = 400
    message = "The Content-MD5 you specified is not valid."


class IncompleteBody(S3Error):
    status = 400
    message = "You did not provide the number of bytes specified by the Content-Length HTTP header."


class EntityTooSmall(S3Error):
    status = 400
    message = "Your proposed upload is smaller than the minimum allowed object size."


class EntityTooLarge(S3Error):
    status = 400
    message = "Your proposed upload exceeds the maximum allowed object size."


class InvalidPartNumber(S3Error):
    status = 416
    message = "The requested partnumber is not satisfiable"


class InvalidPart(S3Error):
    status = 400
    message = "One or more of the specified parts could not be found."


class InvalidPartOrder(S3Error):
    status = 400
    message = "The list of parts was not in ascending order."


class MalformedXML(S3Error):
    status = 400
    message = "The XML you provided was not well-formed or did not validate against our published schema."


class AccessDenied(S3Error):
    status = 403
    message = "Access Denied"


class MethodNotAllowed(S3Error):
    status = 405
    message = "The specified method is not allowed against this resource."


class Unimplemented(S3Error):
    s3_code = "NotImplemented"  # not the class name: that would shadow Python's NotImplemented
    status = 501
    message = "A header you provided implies functionality that is not implemented."


def from_lake(code: str, status: int, message: str | None, resource: str | None = None) -> S3Error:
    """The error for a code a lake answered with: our class when we have one, else a generic one
    carrying the lake's own code and status (so clients see what the lake said)."""
    cls = _BY_CODE.get(code)
    if cls is not None and cls.status == status:
        return cls(message or None, resource=resource)
    return S3Error(message or code, code=code or "InternalError", status=status, resource=resource)


def _subclasses(cls: type[S3Error]) -> list[type[S3Error]]:
    out = []
    for sub in cls.__subclasses__():
        out.append(sub)
        out.extend(_subclasses(sub))
    return out


_BY_CODE: dict[str, type[S3Error]] = {c.s3_code or c.__name__: c for c in _subclasses(S3Error)}
