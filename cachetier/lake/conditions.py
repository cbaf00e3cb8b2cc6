"""Conditional requests (If-Match, If-None-Match, If-Modified-Since, If-Unmodified-Since),
evaluated the way S3 does against an object's ETag and Last-Modified."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime

from cachetier.errors import NotModified, PreconditionFailed


def _etags(header: str) -> list[str]:
    return [t.strip().strip('"') for t in header.split(",") if t.strip()]


def parse_http_date(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None  # S3 ignores a date it cannot parse


@dataclass(frozen=True)
class Conditions:
    if_match: str | None = None
    if_none_match: str | None = None
    if_modified_since: datetime | None = None
    if_unmodified_since: datetime | None = None

    @classmethod
    def from_headers(cls, get) -> Conditions:  # type: ignore[no-untyped-def]
        """``get`` looks a header up by lower-case name (a mapping's ``.get``)."""
        return cls(
            if_match=get("if-match"),
            if_none_match=get("if-none-match"),
            if_modified_since=parse_http_date(get("if-modified-since")),
            if_unmodified_since=parse_http_date(get("if-unmodified-since")),
        )

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
        tag = etag.strip('"')
        lm = last_modified.replace(microsecond=0)
        if self.if_match is not None:
            wanted = _etags(self.if_match)
            if "*" not in wanted and tag not in wanted:
                raise PreconditionFailed()
        elif self.if_unmodified_since is not None and lm > self.if_unmodified_since:
            raise PreconditionFailed()
        if self.if_none_match is not None:
            wanted = _etags(self.if_none_match)
            if "*" in wanted or tag in wanted:
                if for_read:
                    raise NotModified(headers={"ETag": etag})
                raise PreconditionFailed()
        elif self.if_modified_since is not None and lm <= self.if_modified_since:
            if for_read:
                raise NotModified(headers={"ETag": etag})
            raise PreconditionFailed()
