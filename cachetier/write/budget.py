"""``MemoryBudget``: the node-wide bound on request bodies held in memory for cache-on-write.

A PUT whose body may enter L1 as blocks (``CacheOnWrite``) keeps the body in memory while it
streams to the lake, because its blocks are keyed by the ETag the lake answers at the end. Left
unbounded, many concurrent (or deliberately stalled) uploads hold their bodies at once: ten
stalled 64 MiB PUTs held about 530 MiB. Each such PUT therefore reserves its declared length
here before it keeps a byte; when the reservation does not fit, that PUT is written through to
the lake without being kept (cache-on-write is skipped, never the request), and a later read
fills L1 as any miss does. The reservation is returned once the blocks are stored or the PUT
fails, whichever way it fails.

Reserving the declared length up front (rather than growing as bytes arrive) keeps the bound
exact: what the node holds for cache-on-write never exceeds ``capacity``, whatever clients send
or withhold. One budget per process: with several worker processes (the node performance issue)
each worker's share is the node's budget divided by the workers.
"""

from __future__ import annotations

import threading


class MemoryBudget:
    """Bytes reserved out of ``capacity``; safe to use from any thread."""

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError("a memory budget cannot be negative")
        self.capacity = capacity
        self.used = 0
        self.refused = 0  # reservations that did not fit
        self._lock = threading.Lock()

    def reserve(self, amount: int) -> bool:
        """Take ``amount`` bytes if they fit; False (nothing taken) if not."""
        with self._lock:
            if self.used + amount > self.capacity:
                self.refused += 1
                return False
            self.used += amount
            return True

    def release(self, amount: int) -> None:
        with self._lock:
            if amount > self.used:
                raise ValueError(f"releasing {amount} bytes of a budget holding {self.used}")
            self.used -= amount
