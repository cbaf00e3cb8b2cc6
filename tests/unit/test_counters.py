"""CacheStats under concurrency: the event loop and worker threads add to the same counters
while snapshots are taken, and no addition is lost."""

from __future__ import annotations

import threading

from cachetier.telemetry.counters import COUNTERS, CacheStats

THREADS = 8
ADDS = 20_000


def test_additions_from_many_threads_are_all_counted() -> None:
    stats = CacheStats()
    start = threading.Barrier(THREADS + 1)
    names = list(COUNTERS)[:4]

    def hammer(worker: int) -> None:
        start.wait()
        for i in range(ADDS):
            # shared counters, and new tenants appearing while others snapshot
            stats.add("shared", names[i % len(names)])
            stats.add(f"tenant-{worker}-{i % 50}", "hits", 2)

    def snapshots() -> None:
        start.wait()
        try:
            while any(thread.is_alive() for thread in workers):
                stats.snapshot()
                stats.total("hits")
        except RuntimeError as exc:  # dictionary changed size during iteration
            failures.append(exc)

    failures: list[Exception] = []

    workers = [threading.Thread(target=hammer, args=(n,)) for n in range(THREADS)]
    reader = threading.Thread(target=snapshots)
    for thread in [*workers, reader]:
        thread.start()
    for thread in [*workers, reader]:
        thread.join()

    assert failures == []
    snapshot = stats.snapshot()
    assert snapshot["shared"] == {name: THREADS * ADDS // len(names) for name in names}
    assert stats.total("hits") == THREADS * ADDS // len(names) + 2 * THREADS * ADDS
    assert len(snapshot) == 1 + THREADS * 50


def test_a_snapshot_is_a_copy() -> None:
    stats = CacheStats()
    stats.add("t", "hits")
    snapshot = stats.snapshot()
    stats.add("t", "hits")
    assert snapshot == {"t": {"hits": 1}} and stats.snapshot() == {"t": {"hits": 2}}
