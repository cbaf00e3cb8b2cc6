"""policies.admission: objects the cache takes in by size, on reads and on write-through."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from policies.admission import SizeLimits, admits_read, admits_write


def test_reads_up_to_the_limit_are_cached() -> None:
    limits = SizeLimits(max_read=100)
    assert admits_read(limits, 0) and admits_read(limits, 100)
    assert not admits_read(limits, 101)


def test_a_put_is_kept_only_when_enabled_not_empty_small_enough_and_not_bypassed() -> None:
    limits = SizeLimits(max_read=100, max_write=10, write_through=True)
    assert admits_write(limits, 1) and admits_write(limits, 10)
    assert not admits_write(limits, 0)
    assert not admits_write(limits, 11)
    assert not admits_write(limits, 5, no_cache=True)
    assert not admits_write(SizeLimits(100, 10, write_through=False), 5)


@given(length=st.integers(-1, 1 << 40), max_write=st.integers(0, 1 << 40))
def test_a_kept_put_fits_its_limit(length: int, max_write: int) -> None:
    if admits_write(SizeLimits(0, max_write, True), length):
        assert 0 < length <= max_write
