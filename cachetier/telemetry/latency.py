"""Per-target request signals, from real requests: for each peer and each lake endpoint, how many
requests are outstanding and the moving averages of their latency and service time.

These are the per-request signals of replica choice (issue 15): C3 ranks by queue size times
service time, Envoy's least-request by outstanding requests, the dynamic snitch by a latency EWMA.
They react within a request or two, before a heartbeat's anomaly report can. ``latency_s`` is
measured here, start to finish; ``service_s`` is what the target reported it spent (a peer's
own timing), falling back to the latency when it reports none, so latency - service is the
network and queueing on the way.

A request that fails or raises (a timeout's cancellation too: a hung target must look slow, not
absent) counts as an error and its latency so far still enters the average.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class TargetStats:
    """One target's signals: ``latency_s``/``service_s`` are EWMAs (``None``: none finished yet),
    ``requests`` counts finished requests, ``last_used`` is the clock at the last start."""

    outstanding: int
    latency_s: float | None
    service_s: float | None
    requests: int
    errors: int
    last_used: float


_NEVER_USED = TargetStats(0, None, None, 0, 0, 0.0)


class _Target:
    __slots__ = ("outstanding", "latency_s", "service_s", "requests", "errors", "last_used")

    def __init__(self) -> None:
        self.outstanding = 0
        self.latency_s: float | None = None
        self.service_s: float | None = None
        self.requests = 0
        self.errors = 0
        self.last_used = 0.0

    def stats(self) -> TargetStats:
        return TargetStats(self.outstanding, self.latency_s, self.service_s, self.requests, self.errors, self.last_used)


class RequestTracker:
    """Outstanding requests and latency/service EWMAs per target (``alpha``: the weight of the
    newest request). Thread-safe (one lock: the event loop and worker threads both finish
    requests); O(1) per request."""

    def __init__(self, *, alpha: float = 0.2, clock: Callable[[], float] = time.monotonic) -> None:
        if not 0 < alpha <= 1:
            raise ValueError("alpha must be in (0, 1]")
        self._alpha = alpha
        self._clock = clock
        self._targets: dict[str, _Target] = {}
        self._lock = threading.Lock()

    def start(self, target: str) -> Callable[[bool, float | None], None]:
        """Begins a request to ``target``; returns its ``finish(ok, service_s)`` (a second call
        is a no-op)."""
        with self._lock:
            entry = self._targets.get(target)
            if entry is None:
                entry = self._targets[target] = _Target()
            started = self._clock()
            entry.outstanding += 1
            entry.last_used = started
        finished = False

        def finish(ok: bool, service_s: float | None) -> None:
            nonlocal finished
            with self._lock:
                if finished:
                    return
                finished = True
                self._finish(entry, ok, max(0.0, self._clock() - started), service_s)

        return finish

    def _finish(self, entry: _Target, ok: bool, latency: float, service_s: float | None) -> None:
        usable = service_s is not None and math.isfinite(service_s) and service_s >= 0
        service = service_s if usable and service_s is not None else latency
        entry.outstanding -= 1
        entry.requests += 1
        entry.errors += 0 if ok else 1
        entry.latency_s = self._ewma(entry.latency_s, latency)
        entry.service_s = self._ewma(entry.service_s, service)

    def _ewma(self, average: float | None, value: float) -> float:
        return value if average is None else average + self._alpha * (value - average)

    def stats(self, target: str) -> TargetStats:
        with self._lock:
            entry = self._targets.get(target)
            return entry.stats() if entry is not None else _NEVER_USED

    def snapshot(self) -> dict[str, TargetStats]:
        with self._lock:
            return {target: entry.stats() for target, entry in self._targets.items()}

    @contextlib.asynccontextmanager
    async def track(self, target: str) -> AsyncIterator[Callable[[float], None]]:
        """``async with tracker.track(t) as report_service:`` around one request; call
        ``report_service(seconds)`` when the target says how long it took. An exception (a
        cancellation too) finishes it as an error and propagates."""
        finish = self.start(target)
        reported: list[float] = []
        ok = False
        try:
            yield reported.append
            ok = True
        finally:
            finish(ok, reported[-1] if reported else None)
