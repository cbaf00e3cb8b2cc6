"""Read-ahead (D3N's prefetching of sequential reads): which blocks to fetch before they are asked.

While block i of a request is served, blocks i+1..i+depth are fetched, up to a limit: the
request's own last block, or ``depth`` blocks past it when the request is sequential (it starts
exactly where the previous request on the same object version ended), up to the object's last
block. The caller keeps the state (where each object's last request ended).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Request:
    """A read of bytes ``start..end`` (inclusive) of an object of ``size`` bytes in blocks of
    ``block_size``; ``expected``: where the previous read of that object ended + 1, if any."""

    start: int
    end: int
    size: int
    block_size: int
    expected: int | None = None


def limit(request: Request, depth: int) -> int:
    """The last block index read-ahead may reach for ``request``."""
    last = request.end // request.block_size
    if request.expected == request.start:
        return min(last + depth, (request.size - 1) // request.block_size)
    return last


def window(index: int, limit: int, depth: int) -> range:
    """The blocks to fetch ahead while block ``index`` is served (empty when none)."""
    return range(index + 1, min(index + depth, limit) + 1)
