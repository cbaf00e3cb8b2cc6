"""Values the hot GET path reuses instead of building per request are the values it built:
the shared no-conditions value, the cached block ids, the "*" bucket pattern."""

from __future__ import annotations

import fnmatch
from datetime import UTC, datetime

import pytest

from cachetier.blocks.ids import BlockId
from cachetier.errors import NotModified
from cachetier.lake.conditions import Conditions
from cachetier.read import path
from gateway.s3.headers import conditions
from gateway.tenants import Tenant

WHEN = datetime(2026, 1, 1, tzinfo=UTC)


def test_no_if_headers_give_one_shared_empty_conditions() -> None:
    assert conditions({}) is conditions({"range": "bytes=0-1"}) == Conditions()
    assert conditions({}, "x-amz-copy-source-") == Conditions()
    assert conditions({"if-none-match": '"e"'}) == Conditions(if_none_match='"e"')
    assert conditions({"x-amz-copy-source-if-match": '"e"'}, "x-amz-copy-source-").if_match == '"e"'
    Conditions().check('"e"', WHEN)  # nothing to check
    with pytest.raises(NotModified):
        Conditions(if_none_match='"e"').check('"e"', WHEN)


def test_block_ids_are_cached_values() -> None:
    path._block_id.cache_clear()
    first = path._block_id("b", "k", '"e"', 3, 1 << 20)
    assert first == BlockId.of("b", "k", '"e"', 3, 1 << 20) == path._block_id("b", "k", '"e"', 3, 1 << 20)
    assert path._block_id("b", "k", '"f"', 3, 1 << 20) != first
    info = path._block_id.cache_info()
    assert info.hits == 1 and info.maxsize == 4096


@pytest.mark.parametrize("bucket", ["b", "", "a\nb", "x.y-z", "*"])
def test_the_any_bucket_pattern_matches_as_fnmatch_does(bucket: str) -> None:
    tenant = Tenant("t", "AK", "SK")
    assert tenant.may_use(bucket) is fnmatch.fnmatchcase(bucket, "*") is True
    assert Tenant("t", "AK", "SK", buckets=("a*",)).may_use(bucket) is fnmatch.fnmatchcase(bucket, "a*")
