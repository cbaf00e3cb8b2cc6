"""Request headers read into the Lake interface's value types: ``Range`` (and
``x-amz-copy-source-range``) into a :class:`ByteRange`, the ``If-*`` headers (and their
``x-amz-copy-source-if-*`` twins) into :class:`Conditions`, HTTP dates into datetimes.

Each reads the way S3 does: what S3 ignores (a malformed or multi-range ``Range``, a date it
cannot parse) reads as absent, not as an error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from email.utils import parsedate_to_datetime

from cachetier.lake.conditions import Conditions
from cachetier.lake.ranges import ByteRange

_RANGE = re.compile(r"^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$")


def byte_range(header: str | None) -> ByteRange | None:
    """The range a header asks for, or None when S3 would ignore the header and serve the
    whole object (absent, malformed, multi-range, or last < first)."""
    if not header:
        return None
    m = _RANGE.match(header)
    if m is None:
        return None
    first, last = m.group(1), m.group(2)
    if first == "" and last == "":
        return None
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
    except (TypeError, ValueError, IndexError):
        return None


def conditions(headers: Mapping[str, str], prefix: str = "") -> Conditions:
    """The conditions of ``if-*`` headers (``prefix`` ``""``) or of a copy's
    ``x-amz-copy-source-if-*`` ones; ``headers`` has lower-case names."""
    return Conditions(
        if_match=headers.get(prefix + "if-match"),
        if_none_match=headers.get(prefix + "if-none-match"),
        if_modified_since=http_date(headers.get(prefix + "if-modified-since")),
        if_unmodified_since=http_date(headers.get(prefix + "if-unmodified-since")),
    )
