"""``ReadConfig``: how the read path cuts objects into blocks and how far it trusts and reads
ahead, and the one place these defaults live (the gateway's settings take theirs from here)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class ReadConfig:
    block_size: int = 4 << 20  # objects are cached as blocks of this many bytes
    meta_ttl: float = 5.0  # seconds an object's metadata is trusted; 0 = always revalidate
    readahead: int = 2  # blocks fetched ahead for sequential readers
    max_cached_object: int = 4 << 30  # larger objects bypass the cache
