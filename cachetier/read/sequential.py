"""Sequential readers: where each object version's previous request ended, so that a request
that continues there is read ahead past its own end (``policies.readahead`` decides how far).
Imports ``cachetier.lake`` (types) and ``policies.readahead``."""

from __future__ import annotations

from collections import OrderedDict

from cachetier.lake import ObjectInfo
from policies import readahead


class SequentialReaders:
    """The next offset expected of each of the last ``max_entries`` versions read."""

    def __init__(self, block_size: int, depth: int, max_entries: int = 10_000) -> None:
        self.block_size = block_size
        self.depth = depth  # blocks read ahead
        self._max = max_entries
        self._next_offset: OrderedDict[tuple[str, str, str], int] = OrderedDict()

    def limit(self, info: ObjectInfo, start: int, end: int) -> int:
        """The last block index read-ahead may reach for the request for bytes [start, end],
        which this remembers as the version's latest."""
        tag = (info.bucket, info.key, info.etag)
        expected = self._next_offset.pop(tag, None)
        self._next_offset[tag] = end + 1
        if len(self._next_offset) > self._max:
            self._next_offset.popitem(last=False)
        request = readahead.Request(start, end, info.size, self.block_size, expected)
        return readahead.limit(request, self.depth)
