"""Request headers read into the Lake interface's value types: ``Range`` (and
``x-amz-copy-source-range``) into a :class:`ByteRange`, the ``If-*`` headers (and their
``x-amz-copy-source-if-*`` twins) into :class:`Conditions`, a write's ``If-Match`` /
``If-None-Match: *`` into the conditions of a conditional write, HTTP dates into datetimes.

Each reads the way S3 does: what S3 ignores (a malformed or multi-range ``Range``, a date it
cannot parse) reads as absent, not as an error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from email.utils import parsedate_to_datetime

from cachetier.errors import Unimplemented
from cachetier.lake.conditions import NO_CONDITIONS, Conditions
from cachetier.lake.ranges import ByteRange
from gateway.s3.numbers import MAX_DIGITS

# ASCII only: with re.ASCII, \d and \s are [0-9] and ASCII whitespace, not any Unicode digit or space
_RANGE = re.compile(r"^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$", re.ASCII)


def byte_range(header: str | None) -> ByteRange | None:
    """The range a header asks for, or None when S3 would ignore the header and serve the
    whole object (absent, malformed, multi-range, last < first, or a number past 19 digits)."""
    if not header:
        return None
    m = _RANGE.match(header)
    if m is None:
        return None
    first, last = m.group(1), m.group(2)
    if first == "" and last == "":
        return None
    if len(first) > MAX_DIGITS or len(last) > MAX_DIGITS:
        return None  # no object is that large: read as malformed, like any other garbage
    if first == "":
        return ByteRange(first=None, suffix=int(last))
    if last != "" and int(last) < int(first):
        return None
    return ByteRange(first=int(first), last=int(last) if last != "" else None)


def http_date(value: str | None) -> datetime | None:
    """An HTTP date header's time, or None when absent or unparseable (S3 ignores it then)."""
    if not value:
        return None
    try:
        return parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):  # a year past C's long: OverflowError
        return None


_NO_CONDITIONS = Conditions()


def conditions(headers: Mapping[str, str], prefix: str = "") -> Conditions:
    """The conditions of ``if-*`` headers (``prefix`` ``""``) or of a copy's
    ``x-amz-copy-source-if-*`` ones; ``headers`` has lower-case names."""
    p = prefix
    if (p + "if-match" not in headers and p + "if-none-match" not in headers
            and p + "if-modified-since" not in headers and p + "if-unmodified-since" not in headers):
        return _NO_CONDITIONS  # most reads: one shared value (frozen) rather than one each
    return Conditions(
        if_match=headers.get(prefix + "if-match"),
        if_none_match=headers.get(prefix + "if-none-match"),
        if_modified_since=http_date(headers.get(prefix + "if-modified-since")),
        if_unmodified_since=http_date(headers.get(prefix + "if-unmodified-since")),
    )


def delete_conditions(headers: Mapping[str, str]) -> Conditions:
    """A conditional DeleteObject's ``If-Match``. Its size and time twins
    (``x-amz-if-match-size``, ``x-amz-if-match-last-modified-time``) are not built: 501, never
    ignored (ignored, the delete would take an object the client meant to keep)."""
    for name in ("x-amz-if-match-size", "x-amz-if-match-last-modified-time"):
        if name in headers:
            raise Unimplemented(f"DeleteObject with {name} is not implemented.", resource=name)
    if_match = headers.get("if-match")
    return NO_CONDITIONS if if_match is None else Conditions(if_match=if_match)


def write_conditions(headers: Mapping[str, str]) -> Conditions:
    """The conditions of a conditional write (PutObject, CompleteMultipartUpload): ``If-Match``
    (an ETag, a list of them, or ``*``) and ``If-None-Match``, of which S3 takes ``*`` only (any
    other value: 501 NotImplemented, as S3 answers). ``If-Modified-Since`` and
    ``If-Unmodified-Since`` mean nothing to a write: ignored, as S3 does."""
    if_match, if_none_match = headers.get("if-match"), headers.get("if-none-match")
    if if_match is None and if_none_match is None:
        return NO_CONDITIONS
    if if_none_match is not None and if_none_match.strip().strip('"') != "*":
        raise Unimplemented("If-None-Match on a write takes * only.", resource="If-None-Match")
    return Conditions(if_match=if_match, if_none_match=None if if_none_match is None else "*")
