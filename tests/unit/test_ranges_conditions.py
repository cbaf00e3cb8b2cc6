"""Range parsing and conditional-request rules, as S3 applies them."""

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cachetier.lake.conditions import Conditions
from cachetier.errors import InvalidRange, NotModified, PreconditionFailed
from cachetier.lake.ranges import ByteRange


@pytest.mark.parametrize(
    "header,size,expected",
    [
        ("bytes=0-9", 100, (0, 9)),
        ("bytes=90-200", 100, (90, 99)),
        ("bytes=10-", 100, (10, 99)),
        ("bytes=-10", 100, (90, 99)),
        ("bytes=-500", 100, (0, 99)),
        ("bytes=0-0", 1, (0, 0)),
    ],
)
def test_resolve(header, size, expected):
    assert ByteRange.parse(header).resolve(size) == expected


@pytest.mark.parametrize("header", [None, "", "items=0-1", "bytes=0-1,4-5", "bytes=5-1", "bytes=-", "bytes=a-b"])
def test_ignored_headers_mean_whole_object(header):
    assert ByteRange.parse(header) is None


@pytest.mark.parametrize("header,size", [("bytes=100-", 100), ("bytes=100-200", 100), ("bytes=-0", 100), ("bytes=0-", 0)])
def test_unsatisfiable(header, size):
    with pytest.raises(InvalidRange) as info:
        ByteRange.parse(header).resolve(size)
    assert info.value.status == 416
    assert info.value.headers["Content-Range"] == f"bytes */{size}"


@given(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(1, 10**6))
def test_resolved_range_is_inside_object(first, length, size):
    rng = ByteRange(first=first, last=first + length)
    if first >= size:
        with pytest.raises(InvalidRange):
            rng.resolve(size)
    else:
        start, end = rng.resolve(size)
        assert 0 <= start <= end < size and start == first


NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
ETAG = '"abc"'


def test_if_match():
    Conditions(if_match='"abc"').check(ETAG, NOW)
    Conditions(if_match="*").check(ETAG, NOW)
    with pytest.raises(PreconditionFailed):
        Conditions(if_match='"zzz"').check(ETAG, NOW)


def test_if_none_match_is_304_for_reads_412_for_copies():
    with pytest.raises(NotModified):
        Conditions(if_none_match="abc").check(ETAG, NOW)
    with pytest.raises(PreconditionFailed):
        Conditions(if_none_match='"abc"').check(ETAG, NOW, for_read=False)
    Conditions(if_none_match='"other"').check(ETAG, NOW)


def test_dates():
    with pytest.raises(NotModified):
        Conditions(if_modified_since=NOW).check(ETAG, NOW)
    Conditions(if_modified_since=NOW - timedelta(seconds=1)).check(ETAG, NOW)
    with pytest.raises(PreconditionFailed):
        Conditions(if_unmodified_since=NOW - timedelta(seconds=1)).check(ETAG, NOW)
    Conditions(if_unmodified_since=NOW).check(ETAG, NOW)


def test_precedence():
    # If-Match true wins over a failing If-Unmodified-Since (S3 / RFC 7232)
    Conditions(if_match=ETAG, if_unmodified_since=NOW - timedelta(days=1)).check(ETAG, NOW)
    # If-None-Match false (etag differs) wins over If-Modified-Since saying "not modified"
    Conditions(if_none_match='"x"', if_modified_since=NOW).check(ETAG, NOW)


def test_copy_source_conditions_fail_with_412():
    with pytest.raises(PreconditionFailed):
        Conditions(if_modified_since=NOW).check(ETAG, NOW, for_read=False)
