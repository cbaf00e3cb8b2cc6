"""Admission at run time: tasks wait here for their tenant's turn, as ``policies.fairness`` decides.

``await fairness.acquire(tenant, resource, amount)`` before using ``amount`` of a resource: one
``requests`` unit when a request is admitted, a chunk's bytes before sending it to the client
(``client_bytes``) or fetching it from the lake (``lake_bytes``). Which tenant a coalesced lake
fetch is charged to, once, is the caller's business (the lake boundary's), not this module's.

- Fast path: when the policy grants at once, ``acquire`` returns without awaiting anything (no
  task switch, no future). Measured (timeit, 200k ``await acquire(...)`` in one coroutine less
  an empty loop, min of 5, 2-core dev VM): 0.9 us on an unlimited resource, 1.1 us on a finite
  one, 1.4 us with a tenant limit too; 3-6 us while the machine ran at load 7.
- Queued: the task awaits a future; one timer (``loop.call_at``) at the policy's ``wake_at``
  (plus ``timer_slack``) runs ``decide`` and resolves the granted items' futures. The slack
  batches a saturated lane: 1 ms late, 10k requests/s are decided ~1000 times a second, in
  batches of ~10, rather than 10k times one by one. A cancelled waiter's item is
  cancelled in the policy, so it holds no place in the queue.
- Refused (the tenant's queue is at its bound): ``QueueFull``, an S3 ``503 SlowDown``.

State is per process: a node that runs W worker processes gives each worker's queue 1/W of the
node's capacity and limits (connections are spread evenly over the workers by the kernel), so
the node as a whole keeps its capacity whatever W is.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from cachetier.errors import SlowDown
from policies.fairness import Decision, FairQueue, TenantWindow

# Queue delay buckets, seconds (Prometheus' default buckets, finer at the low end).
DELAY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


# The most bytes one item takes: PIECE_TIME of the lane's rate, at least PIECE (64 KiB is 11 ms
# of a 6 MB/s lane; at 1.25 GB/s a piece is 2.5 MB, so a 4 MiB hit costs 2 grants, not 64).
PIECE = 64 << 10
PIECE_TIME = 0.002


class Admits(Protocol):
    """Whatever waits for a tenant's turn to use some of a resource (``Fairness`` and wrappers)."""

    async def acquire(self, tenant: str, resource: str, amount: float) -> None: ...


class QueueFull(SlowDown):
    """A tenant's admission queue is at its bound: S3's 503 SlowDown, with the tenant named."""

    s3_code = "SlowDown"

    def __init__(self, tenant: str) -> None:
        super().__init__()
        self.tenant = tenant


@dataclass(frozen=True, slots=True)
class TenantStats:
    """A tenant on this process: served totals, what is queued now, SlowDowns, and the delay of
    its admitted requests (``delay_buckets``: cumulative counts per upper bound, the last one
    math.inf, as Prometheus' histogram; ``delay_p99``: estimated from them)."""

    requests: float
    client_bytes: float
    lake_bytes: float
    queued: int
    backlog: dict[str, float]
    refused: int
    delay_buckets: tuple[tuple[float, int], ...]
    delay_count: int
    delay_sum: float
    delay_p99: float


class _Histogram:
    """Queue delays of requests that waited (those admitted at once are counted at snapshot)."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(DELAY_BUCKETS) + 1)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(DELAY_BUCKETS, seconds)] += 1
        self.total += seconds


@dataclass(slots=True)
class _Waiter:
    future: asyncio.Future[None]
    tenant: str
    resource: str
    since: float


class Fairness:
    """One process's admission: a FairQueue, the tasks waiting on it and the timer that drives it."""

    def __init__(
        self, queue: FairQueue, *, clock: Callable[[], float] = time.monotonic, timer_slack: float = 0.001
    ) -> None:
        self._queue = queue
        self._clock = clock
        self._slack = timer_slack
        queue.take_window(clock())  # the first demand window starts now
        self._waiters: dict[int, _Waiter] = {}
        self._delays: dict[str, _Histogram] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf
        self._pieces: dict[str, float] = {}
        self._size_pieces()

    def _size_pieces(self) -> None:
        """Bytes per item on each finite byte lane (unlimited lanes and requests: never split)."""
        self._pieces = {r: max(PIECE, self._queue.rate(r) * PIECE_TIME) for r in ("client_bytes", "lake_bytes")
                        if math.isfinite(self._queue.rate(r))}

    def waiting(self, resource: str) -> bool:
        """Whether any tenant has ``resource`` queued now (write-back's flusher asks: foreground
        lake reads wait for the lake link)."""
        return any(resource in queued for queued in self._queue.backlog().values())

    async def acquire(self, tenant: str, resource: str, amount: float) -> None:
        """Wait for ``tenant``'s turn to use ``amount`` of ``resource``; QueueFull past its bound.
        Bytes are taken in items of at most a piece each (``PIECE``, ``PIECE_TIME``), in turn: an
        item once granted holds its lane until the node's rate has carried it (the bucket's debt), so a 4 MiB chunk
        as one item would hold up every small response behind it by its whole transfer time (a
        request-bound tenant beside a bandwidth-bound one got a third of its share so, measured)."""
        piece = self._pieces.get(resource, math.inf)
        while amount > piece:
            await self._acquire(tenant, resource, piece)
            amount -= piece
        await self._acquire(tenant, resource, amount)

    async def _acquire(self, tenant: str, resource: str, amount: float) -> None:
        sent = self._queue.submit(tenant, resource, amount, self._clock())
        if sent.granted:
            return
        if sent.item is None:
            raise QueueFull(tenant)
        await self._wait(tenant, resource, sent.item)

    def grant_due(self) -> None:
        """Grant what is due now and set the timer for the next decision (the timer calls this;
        so does a test that moves a fake clock)."""
        now = self._clock()
        self._resolve(self._queue.decide(now), now)

    def close(self) -> None:
        """Stop the timer (waiters stay waiting; for shutdown and tests)."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = None, math.inf

    # -- settings and figures: the policy's, with the clock ------------------------------------

    def set_capacity(self, capacity: Mapping[str, float]) -> None:
        self._queue.set_capacity(capacity, self._clock())
        self._size_pieces()
        self.grant_due()

    def set_weights(self, weights: Mapping[str, float]) -> None:
        self._queue.set_weights(weights)

    def set_limits(self, limits: Mapping[str, Mapping[str, float]]) -> None:
        self._queue.set_limits(limits, self._clock())
        self.grant_due()

    def take_window(self) -> dict[str, TenantWindow]:
        return self._queue.take_window(self._clock())

    def snapshot(self) -> dict[str, TenantStats]:
        """Per tenant seen so far: totals, queue now, SlowDowns and the admission delay histogram."""
        backlog = self._queue.backlog()
        stats = {}
        for tenant, totals in self._queue.totals().items():
            histogram = self._delays.get(tenant, _Histogram())
            waited = sum(histogram.counts)
            # Requests granted at once waited 0 s: the hot path does not count them, totals do.
            at_once = max(0, int(totals.served["requests"]) - waited)
            counts = [histogram.counts[0] + at_once, *histogram.counts[1:]]
            cumulative = tuple(zip((*DELAY_BUCKETS, math.inf), itertools.accumulate(counts), strict=True))
            queued = backlog.get(tenant, {})
            stats[tenant] = TenantStats(
                requests=totals.served["requests"],
                client_bytes=totals.served["client_bytes"],
                lake_bytes=totals.served["lake_bytes"],
                queued=int(queued.get("requests", 0)),
                backlog=queued,
                refused=totals.refused,
                delay_buckets=cumulative,
                delay_count=waited + at_once,
                delay_sum=histogram.total,
                delay_p99=quantile(cumulative, 0.99),
            )
        return stats

    # -- inside --------------------------------------------------------------------------------

    async def _wait(self, tenant: str, resource: str, item: int) -> None:
        self._loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = self._loop.create_future()
        self._waiters[item] = _Waiter(future, tenant, resource, self._clock())
        self.grant_due()  # its turn may be now (the round had room, only the fast path had not)
        try:
            await future
        except asyncio.CancelledError:
            if self._waiters.pop(item, None) is not None:
                self._queue.cancel(item, self._clock())
                self.grant_due()
            raise

    def _resolve(self, decision: Decision, now: float) -> None:
        for item in decision.granted:
            waiter = self._waiters.pop(item, None)
            if waiter is None or waiter.future.done():
                continue  # its task was cancelled as it was granted: the grant is spent
            if waiter.resource == "requests":
                self._delays.setdefault(waiter.tenant, _Histogram()).observe(now - waiter.since)
            waiter.future.set_result(None)
        self._arm(decision.wake_at, now)

    def _arm(self, wake_at: float | None, now: float) -> None:
        """One timer, at the earliest time the policy asked for."""
        if wake_at is None:
            self.close()
            return
        if self._loop is None or (self._timer is not None and self._timer_at <= wake_at):
            return
        self.close()
        self._timer_at = wake_at
        delay = max(0.0, wake_at - now) + self._slack
        self._timer = self._loop.call_at(self._loop.time() + delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer, self._timer_at = None, math.inf
        self.grant_due()


def quantile(cumulative: tuple[tuple[float, int], ...], q: float) -> float:
    """Prometheus' histogram_quantile: linear within the bucket the q-th observation falls in
    (0.0 with no observations; the last finite bound when it falls in the +Inf bucket)."""
    total = cumulative[-1][1] if cumulative else 0
    if not total:
        return 0.0
    rank, lower, below = q * total, 0.0, 0
    for upper, count in cumulative:
        if count >= rank:
            if math.isinf(upper):
                return lower
            return lower + (upper - lower) * (rank - below) / max(1, count - below)
        lower, below = upper, count
    return lower
