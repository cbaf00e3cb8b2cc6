"""Blocks: ids are stable, unambiguous names; the span and bounds arithmetic cuts objects and
byte ranges into blocks that cover them exactly."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cachetier.blocks.ids import (
    DEFAULT_BLOCK_SIZE,
    BlockId,
    block_bounds,
    block_count,
    block_span,
)


def test_block_id_is_a_stable_hex_value() -> None:
    a = BlockId.of("bucket", "key", '"etag"', 3)
    assert a == BlockId.of("bucket", "key", '"etag"', 3)
    assert hash(a) == hash(BlockId.of("bucket", "key", '"etag"', 3))
    assert len(a.hex) == 40 and int(a.hex, 16) >= 0
    assert str(a) == a.hex
    assert BlockId(a.hex) == a
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.hex = "0" * 40  # type: ignore[misc]


def test_block_id_pins_its_derivation() -> None:
    # Ids are persisted on SSD and exchanged between nodes: the derivation is a format, spelled
    # out here so that changing it (which empties every cache of a mixed-version cluster) is a
    # deliberate act.
    def field(text: str) -> bytes:
        raw = text.encode()
        return len(raw).to_bytes(8, "big") + raw

    message = field("bucket") + field("key") + field('"etag"') + (7).to_bytes(8, "big")
    message += DEFAULT_BLOCK_SIZE.to_bytes(8, "big")
    expected = hashlib.blake2b(message, digest_size=20, person=b"lakegate.block.1").hexdigest()
    assert BlockId.of("bucket", "key", '"etag"', 7).hex == expected
    assert BlockId.of("b", "k", '"e"', 0).hex == "1cf77b49c5c1b8606f92953a7c3b420b5f5c5e72"


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (("a", "bc", "e", 0), ("ab", "c", "e", 0)),
        (("b", "k", "ee", 0), ("b", "ke", "e", 0)),
        (("b", "k", "e", 0), ("b", "k", "e", 1)),
        (("b", "k", "e", 0), ("b", "k", "f", 0)),
        (("b", "", "ke", 0), ("b", "k", "e", 0)),
    ],
)
def test_block_id_fields_are_framed(one: tuple[str, str, str, int], other: tuple[str, str, str, int]) -> None:
    assert BlockId.of(*one) != BlockId.of(*other)


def test_block_id_depends_on_block_size() -> None:
    assert BlockId.of("b", "k", "e", 1, 1024) != BlockId.of("b", "k", "e", 1, 2048)


@pytest.mark.parametrize("text", ["", "0" * 39, "0" * 41, "G" * 40, "A" * 40])
def test_block_id_rejects_what_is_not_one(text: str) -> None:
    with pytest.raises(ValueError):
        BlockId(text)


def test_block_id_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        BlockId.of("b", "k", "e", -1)
    with pytest.raises(ValueError):
        BlockId.of("b", "k", "e", 0, 0)


def test_block_id_accepts_any_unicode_key() -> None:
    assert BlockId.of("b", "ключ/\U0001f600\udc80", "e", 0) != BlockId.of("b", "ключ", "e", 0)


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [(0, 0, range(1)), (0, 9, range(3)), (4, 7, range(1, 2)), (3, 4, range(2)), (8, 100, range(2, 26))],
)
def test_block_span(start: int, end: int, expected: range) -> None:
    assert block_span(start, end, 4) == expected


@pytest.mark.parametrize(("start", "end"), [(-1, 3), (5, 4)])
def test_block_span_rejects_a_non_range(start: int, end: int) -> None:
    with pytest.raises(ValueError):
        block_span(start, end, 4)


def test_block_bounds() -> None:
    assert [block_bounds(i, 10, 4) for i in range(3)] == [(0, 3), (4, 7), (8, 9)]  # last is short
    assert block_bounds(0, 3, 4) == (0, 2)  # smaller than a block: one block
    assert block_bounds(1, 8, 4) == (4, 7)
    assert block_bounds(0, 1, DEFAULT_BLOCK_SIZE) == (0, 0)


@pytest.mark.parametrize(("index", "size"), [(0, 0), (3, 10), (-1, 10), (2, 8)])
def test_block_bounds_rejects_a_block_the_object_lacks(index: int, size: int) -> None:
    with pytest.raises(ValueError):
        block_bounds(index, size, 4)


def test_block_count() -> None:
    assert [block_count(size, 4) for size in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]
    with pytest.raises(ValueError):
        block_count(-1, 4)
    with pytest.raises(ValueError):
        block_count(1, 0)


@st.composite
def ranges_in_objects(draw: st.DrawFn) -> tuple[int, int, int, int]:
    block_size = draw(st.integers(1, 64))
    size = draw(st.integers(1, 1000))
    start = draw(st.integers(0, size - 1))
    end = draw(st.integers(start, size - 1))
    return size, block_size, start, end


@settings(deadline=None)  # no timing: a loaded machine must not fail it
@given(ranges_in_objects())
def test_the_blocks_of_a_range_cover_it_exactly(case: tuple[int, int, int, int]) -> None:
    size, block_size, start, end = case
    covered: list[int] = []
    for index in block_span(start, end, block_size):
        first, last = block_bounds(index, size, block_size)
        piece = range(max(first, start), min(last, end) + 1)
        assert piece, "every block of the span holds part of the range"
        covered.extend(piece)
    assert covered == list(range(start, end + 1))  # in order, no gap, no overlap


@settings(deadline=None)
@given(st.integers(0, 2000), st.integers(1, 64))
def test_the_blocks_of_an_object_tile_it(size: int, block_size: int) -> None:
    bounds = [block_bounds(i, size, block_size) for i in range(block_count(size, block_size))]
    assert [b for first, last in bounds for b in range(first, last + 1)] == list(range(size))
    assert all(last - first + 1 == block_size for first, last in bounds[:-1])
    if size:
        assert block_span(0, size - 1, block_size) == range(len(bounds))


names = st.text(max_size=6)


@settings(deadline=None)
@given(st.tuples(names, names, names, st.integers(0, 3)), st.tuples(names, names, names, st.integers(0, 3)))
def test_distinct_fields_give_distinct_ids(one: tuple[str, str, str, int], other: tuple[str, str, str, int]) -> None:
    assert (BlockId.of(*one) == BlockId.of(*other)) == (one == other)
