"""Object metadata (HEAD results) cached with a TTL.

A fresh entry answers HEAD and conditional requests without the lake; an expired one is
revalidated by a HEAD. Writes and deletes through the gateway invalidate at once. Blocks are
keyed by ETag, so a changed ETag makes every old block unreachable.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from cachetier.lake import ObjectInfo


class MetadataCache:
    def __init__(self, ttl: float, clock: Callable[[], float], max_entries: int = 100_000) -> None:
        self.ttl = ttl
        self._clock = clock
        self._max = max_entries
        self._entries: OrderedDict[tuple[str, str], tuple[ObjectInfo, float]] = OrderedDict()

    def get(self, bucket: str, key: str) -> ObjectInfo | None:
        if self.ttl <= 0:
            return None
        hit = self._entries.get((bucket, key))
        if hit is None:
            return None
        info, expires = hit
        if self._clock() >= expires:
            del self._entries[(bucket, key)]
            return None
        self._entries.move_to_end((bucket, key))
        return info

    def put(self, info: ObjectInfo) -> None:
        if self.ttl <= 0:
            return
        self._entries[(info.bucket, info.key)] = (info, self._clock() + self.ttl)
        self._entries.move_to_end((info.bucket, info.key))
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def invalidate(self, bucket: str, key: str) -> ObjectInfo | None:
        """Forget the key; returns what was cached for it (fresh or not)."""
        hit = self._entries.pop((bucket, key), None)
        return hit[0] if hit is not None else None

    def invalidate_bucket(self, bucket: str) -> None:
        for k in [k for k in self._entries if k[0] == bucket]:
            del self._entries[k]

    def __len__(self) -> int:
        return len(self._entries)
