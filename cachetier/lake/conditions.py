"""Conditional requests (If-Match, If-None-Match, If-Modified-Since, If-Unmodified-Since) as a
value type of the Lake interface, evaluated the way S3 does against an object's ETag and
Last-Modified. Reading them from a request's headers is the gateway's (:mod:`gateway.s3.headers`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from cachetier.errors import NoSuchKey, NotModified, PreconditionFailed


def _etags(header: str) -> list[str]:
    return [t.strip().strip('"') for t in header.split(",") if t.strip()]


def _matches(header: str, etag: str) -> bool:
    """Whether an If-Match / If-None-Match value (ETags, quoted or not, or ``*``) names ``etag``."""
    wanted = _etags(header)
    return "*" in wanted or etag.strip('"') in wanted


@dataclass(frozen=True)
class Conditions:
    if_match: str | None = None
    if_none_match: str | None = None
    if_modified_since: datetime | None = None
    if_unmodified_since: datetime | None = None

    def __bool__(self) -> bool:
        return any(
            v is not None
            for v in (self.if_match, self.if_none_match, self.if_modified_since, self.if_unmodified_since)
        )

    def check(self, etag: str, last_modified: datetime, *, for_read: bool = True) -> None:
        """Raise PreconditionFailed (412) or NotModified (304) as S3 would.

        S3's precedence (RFC 7232 section 6): If-Match decides over If-Unmodified-Since, and
        If-None-Match decides over If-Modified-Since. Last-Modified has one-second resolution.
        """
        if (self.if_match is None and self.if_none_match is None
                and self.if_modified_since is None and self.if_unmodified_since is None):
            return  # most reads carry no condition: nothing to strip or compare
        lm = last_modified.replace(microsecond=0)
        if self.if_match is not None:
            if not _matches(self.if_match, etag):
                raise PreconditionFailed()
        elif self.if_unmodified_since is not None and lm > self.if_unmodified_since:
            raise PreconditionFailed()
        if self.if_none_match is not None:
            if _matches(self.if_none_match, etag):
                if for_read:
                    raise NotModified(etag=etag)
                raise PreconditionFailed()
        elif self.if_modified_since is not None and lm <= self.if_modified_since:
            if for_read:
                raise NotModified(etag=etag)
            raise PreconditionFailed()

    def check_write(self, etag: str | None) -> None:
        """A conditional write (PutObject, CompleteMultipartUpload) against the object's current
        ETag (None: there is none), as S3 decides it: ``If-None-Match: *`` fails on any object
        (412), ``If-Match`` on another ETag (412) or on no object (404 NoSuchKey). The dates have
        no meaning for a write (S3 ignores them), nor does If-None-Match with ETags (the gateway
        refuses it before: S3 answers 501)."""
        if self.if_none_match is not None and etag is not None:
            raise PreconditionFailed()
        if self.if_match is not None:
            if etag is None:
                raise NoSuchKey()
            if not _matches(self.if_match, etag):
                raise PreconditionFailed()

    def check_delete(self, etag: str | None) -> None:
        """A conditional DeleteObject (``If-Match``) against the object's current ETag (None:
        there is none): another ETag fails (412); no object is a success, as S3 answers it."""
        if self.if_match is not None and etag is not None and not _matches(self.if_match, etag):
            raise PreconditionFailed()

    @property
    def for_write(self) -> bool:
        """Whether a write has a condition to meet (If-Match or If-None-Match)."""
        return self.if_match is not None or self.if_none_match is not None


NO_CONDITIONS = Conditions()
