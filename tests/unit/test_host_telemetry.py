"""Host telemetry's pure parts: the sample's invariants, the twin (RecordedSource) and its
conformance to the real sampler's interface. The real HostSampler and LoopLag are tests/component/test_host_sampler.py."""

from __future__ import annotations

import inspect
import math

import pytest

from cachetier.telemetry.host import METRICS, HostSample, HostSampler, RecordedSource, TelemetrySource


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
