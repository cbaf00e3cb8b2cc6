"""Admission by object size: which objects the cache takes in.

An object larger than ``max_read`` bypasses the cache on reads (its blocks would evict more
than they are worth); a PUT is kept as blocks while it streams to the lake (write-through
caching) only when enabled, not empty and no larger than ``max_write``, since its body is held
in memory until the lake answers.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SizeLimits:
    """The object sizes the cache admits (settings, taken as values)."""

    max_read: int
    max_write: int = 0
    write_through: bool = False


def admits_read(limits: SizeLimits, size: int) -> bool:
    """Whether a read of an object of ``size`` bytes goes through the cache."""
    return size <= limits.max_read


def admits_write(limits: SizeLimits, length: int, *, no_cache: bool = False) -> bool:
    """Whether a PUT of ``length`` bytes enters the cache once the lake has it; ``no_cache``:
    the request asked to bypass the cache."""
    return limits.write_through and 0 < length <= limits.max_write and not no_cache
