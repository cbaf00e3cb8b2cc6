"""policies.readahead: the blocks fetched ahead of a reader, within its range, or past it for a
sequential reader, never past the object."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from policies.readahead import Request, limit, window

BS = 4


def test_a_random_read_prefetches_within_its_own_range() -> None:
    request = Request(start=0, end=4 * BS - 1, size=100 * BS, block_size=BS)
    assert limit(request, 2) == 3
    assert list(window(0, 3, 2)) == [1, 2]
    assert list(window(2, 3, 2)) == [3]
    assert list(window(3, 3, 2)) == []


def test_a_sequential_read_prefetches_past_its_end_but_not_past_the_object() -> None:
    assert limit(Request(4 * BS, 6 * BS - 1, 100 * BS, BS, expected=4 * BS), 3) == 8
    assert limit(Request(4 * BS, 6 * BS - 1, 7 * BS, BS, expected=4 * BS), 3) == 6
    assert limit(Request(4 * BS, 6 * BS - 1, 100 * BS, BS, expected=3), 3) == 5  # not where the last ended


@given(start=st.integers(0, 400), length=st.integers(1, 400), extra=st.integers(0, 400),
       depth=st.integers(0, 8), sequential=st.booleans())
def test_the_window_stays_ahead_of_the_block_and_inside_the_object(
    start: int, length: int, extra: int, depth: int, sequential: bool
) -> None:
    end = start + length - 1
    size = end + 1 + extra
    request = Request(start, end, size, BS, expected=start if sequential else None)
    last = limit(request, depth)
    assert end // BS <= last <= (size - 1) // BS
    assert last <= end // BS + depth
    for index in range(start // BS, end // BS + 1):
        ahead = window(index, last, depth)
        assert len(ahead) <= depth
        assert all(index < i <= last for i in ahead)
