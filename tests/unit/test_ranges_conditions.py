"""Ranges resolved against an object and conditional-request rules, as S3 applies them.
(Reading both from request headers is tested in test_request.py.)"""

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cachetier.errors import InvalidRange, NotModified, PreconditionFailed
from cachetier.lake.conditions import Conditions
from cachetier.lake.ranges import ByteRange


@given(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(1, 10**6))
def test_resolved_range_is_inside_object(first, length, size):
    rng = ByteRange(first=first, last=first + length)
    if first >= size:
        with pytest.raises(InvalidRange):
            rng.resolve(size)
    else:
        start, end = rng.resolve(size)
        assert 0 <= start <= end < size and start == first


def test_unsatisfiable_range_tells_the_size():
    with pytest.raises(InvalidRange) as info:
        ByteRange(first=None, suffix=0).resolve(7)
    assert info.value.size == 7


NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
ETAG = '"abc"'


def test_if_match():
    Conditions(if_match='"abc"').check(ETAG, NOW)
    Conditions(if_match="*").check(ETAG, NOW)
    with pytest.raises(PreconditionFailed):
        Conditions(if_match='"zzz"').check(ETAG, NOW)


def test_if_none_match_is_304_for_reads_412_for_copies():
    with pytest.raises(NotModified) as info:
        Conditions(if_none_match="abc").check(ETAG, NOW)
    assert info.value.etag == ETAG
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
