"""Host telemetry's pure parts: the sample's invariants, the twin (RecordedSource) and its
conformance to the real sampler's interface, and the per-target RequestTracker on a fake clock.
The real HostSampler and LoopLag are tests/component/test_host_sampler.py."""

from __future__ import annotations

import asyncio
import inspect
import math
import threading

import pytest

from cachetier.telemetry.host import METRICS, HostSample, HostSampler, RecordedSource, TelemetrySource
from cachetier.telemetry.latency import RequestTracker, TargetStats


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def sample(t: float, **metrics: float) -> HostSample:
    return HostSample(t, metrics)


# --- HostSample and the twin ---


def test_a_sample_refuses_negative_or_non_finite_values() -> None:
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError):
            sample(1.0, cpu_percent=bad)


def test_a_sample_is_immutable_and_adds_the_loop_lag_as_a_new_sample() -> None:
    taken = sample(1.0, cpu_percent=5.0)
    with pytest.raises(TypeError):
        taken.metrics["cpu_percent"] = 9.0  # type: ignore[index]
    lagged = taken.with_metrics({"loop_lag_s": 0.25})
    assert dict(lagged.metrics) == {"cpu_percent": 5.0, "loop_lag_s": 0.25}
    assert lagged.t == 1.0 and "loop_lag_s" not in taken.metrics


def test_the_metric_names_are_the_issues() -> None:
    assert set(METRICS) == {
        "cpu_percent", "iowait_percent", "run_queue", "disk_busy_percent", "disk_read_bytes_per_s",
        "disk_write_bytes_per_s", "disk_read_latency_s", "disk_write_latency_s", "page_cache_bytes",
        "dirty_bytes", "net_bytes_per_s", "net_drops_per_s", "net_retransmits_per_s", "rss_bytes", "loop_lag_s",
    }


def test_the_twin_replays_in_order_then_holds_the_last() -> None:
    samples = [sample(1.0, cpu_percent=10.0), sample(2.0, cpu_percent=90.0)]
    source = RecordedSource(samples)
    assert [source.sample() for _ in range(4)] == [samples[0], samples[1], samples[1], samples[1]]


def test_the_twin_cycles_when_asked() -> None:
    samples = [sample(1.0, run_queue=1.0), sample(2.0, run_queue=2.0)]
    source = RecordedSource(samples, cycle=True)
    assert [source.sample().t for _ in range(5)] == [1.0, 2.0, 1.0, 2.0, 1.0]


def test_the_twin_needs_a_sample() -> None:
    with pytest.raises(ValueError):
        RecordedSource([])


def test_the_twin_and_the_sampler_conform_to_the_source_protocol() -> None:
    def take(source: TelemetrySource) -> HostSample:
        return source.sample()

    assert take(RecordedSource([sample(1.0)])).t == 1.0
    assert inspect.signature(RecordedSource.sample) == inspect.signature(HostSampler.sample)
    assert inspect.signature(RecordedSource.sample) == inspect.signature(TelemetrySource.sample)


# --- RequestTracker ---


def test_a_target_never_used_has_empty_stats() -> None:
    assert RequestTracker().stats("peer-a") == TargetStats(0, None, None, 0, 0, 0.0)


def test_outstanding_counts_started_requests_until_they_finish() -> None:
    clock = FakeClock()
    tracker = RequestTracker(clock=clock)
    first, second = tracker.start("a"), tracker.start("a")
    assert tracker.stats("a").outstanding == 2 and tracker.stats("a").last_used == 100.0
    first(True, None)
    assert tracker.stats("a").outstanding == 1
    second(True, None)
    assert tracker.stats("a").outstanding == 0 and tracker.stats("a").requests == 2


def test_latency_and_service_are_ewmas_seeded_by_the_first_request() -> None:
    clock = FakeClock()
    tracker = RequestTracker(alpha=0.5, clock=clock)
    finish = tracker.start("a")
    clock.now += 0.1
    finish(True, 0.04)
    stats = tracker.stats("a")
    assert stats.latency_s == pytest.approx(0.1) and stats.service_s == pytest.approx(0.04)
    finish = tracker.start("a")
    clock.now += 0.3
    finish(True, 0.08)
    stats = tracker.stats("a")
    assert stats.latency_s == pytest.approx(0.2) and stats.service_s == pytest.approx(0.06)


def test_service_falls_back_to_the_latency_when_not_reported_or_nonsense() -> None:
    clock = FakeClock()
    tracker = RequestTracker(alpha=1.0, clock=clock)
    for reported in (None, -1.0, math.nan):
        finish = tracker.start("a")
        clock.now += 0.2
        finish(True, reported)
        assert tracker.stats("a").service_s == pytest.approx(0.2)


def test_errors_are_counted_and_still_enter_the_latency() -> None:
    clock = FakeClock()
    tracker = RequestTracker(alpha=1.0, clock=clock)
    finish = tracker.start("a")
    clock.now += 2.0
    finish(False, None)
    stats = tracker.stats("a")
    assert (stats.errors, stats.requests, stats.outstanding) == (1, 1, 0)
    assert stats.latency_s == pytest.approx(2.0)


def test_finishing_twice_is_a_no_op() -> None:
    clock = FakeClock()
    tracker = RequestTracker(alpha=0.5, clock=clock)
    other = tracker.start("a")
    finish = tracker.start("a")
    clock.now += 0.1
    finish(False, None)
    clock.now += 5.0
    finish(False, None)
    finish(True, 9.0)
    stats = tracker.stats("a")
    assert (stats.outstanding, stats.requests, stats.errors) == (1, 1, 1)
    assert stats.latency_s == pytest.approx(0.1)
    other(True, None)
    assert tracker.stats("a").outstanding == 0


def test_snapshot_holds_every_target_apart() -> None:
    clock = FakeClock()
    tracker = RequestTracker(clock=clock)
    tracker.start("a")
    finish = tracker.start("b")
    clock.now += 1.0
    finish(True, None)
    snapshot = tracker.snapshot()
    assert set(snapshot) == {"a", "b"}
    assert snapshot["a"].outstanding == 1 and snapshot["a"].requests == 0
    assert snapshot["b"].outstanding == 0 and snapshot["b"].latency_s == pytest.approx(1.0)


def test_the_tracker_loses_no_request_across_threads() -> None:
    tracker = RequestTracker(clock=FakeClock())
    per_thread, threads = 2000, 8
    barrier = threading.Barrier(threads)

    def work(index: int) -> None:
        barrier.wait()
        for i in range(per_thread):
            tracker.start(f"t{i % 3}")(i % 5 != 0, None)

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    snapshot = tracker.snapshot()
    assert sum(stats.requests for stats in snapshot.values()) == per_thread * threads
    assert sum(stats.errors for stats in snapshot.values()) == per_thread * threads // 5
    assert all(stats.outstanding == 0 for stats in snapshot.values())


def test_track_reports_the_service_time_and_finishes_ok() -> None:
    clock = FakeClock()
    tracker = RequestTracker(alpha=1.0, clock=clock)

    async def request() -> None:
        async with tracker.track("lake-1") as report_service:
            assert tracker.stats("lake-1").outstanding == 1
            clock.now += 0.5
            report_service(0.125)

    asyncio.run(request())
    stats = tracker.stats("lake-1")
    assert (stats.outstanding, stats.requests, stats.errors) == (0, 1, 0)
    assert stats.latency_s == pytest.approx(0.5) and stats.service_s == pytest.approx(0.125)


def test_track_counts_an_exception_or_a_cancellation_as_an_error() -> None:
    clock = FakeClock()
    tracker = RequestTracker(alpha=1.0, clock=clock)

    async def failing() -> None:
        async with tracker.track("peer"):
            clock.now += 0.3
            raise ConnectionError("reset")

    async def hung() -> None:
        async with tracker.track("peer"):
            clock.now += 3.0
            await asyncio.Event().wait()

    async def main() -> None:
        with pytest.raises(ConnectionError):
            await failing()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0):
                await hung()

    asyncio.run(main())
    stats = tracker.stats("peer")
    assert (stats.outstanding, stats.requests, stats.errors) == (0, 2, 2)
    assert stats.latency_s == pytest.approx(3.0)
