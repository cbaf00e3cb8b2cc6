"""The real HostSampler (psutil and /proc on this machine) and LoopLag on a real event loop.
Only lower bounds on what busy work must show: a loaded machine can only add to them."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from pathlib import Path

import psutil
import pytest

from cachetier.telemetry import host
from cachetier.telemetry.host import METRICS, HostSampler, LoopLag, block_device_of

# everything but the caller's loop lag, when psutil and /proc answer (Linux, not a bare container)
SAMPLED = set(METRICS) - {"loop_lag_s"}


def test_a_sample_has_the_named_metrics_finite_and_not_negative(tmp_path: Path) -> None:
    sampler = HostSampler(tmp_path)
    first, second = sampler.sample(), sampler.sample()
    for taken in (first, second):
        assert set(taken.metrics) <= SAMPLED
        assert all(math.isfinite(value) and value >= 0 for value in taken.metrics.values()), taken.metrics
    missing = SAMPLED - set(second.metrics)
    # the disk's metrics may be missing where the kernel shows no block statistics; nothing else
    assert missing <= {name for name in SAMPLED if name.startswith("disk_")}, missing
    assert first.metrics.get("cpu_percent") == 0.0 and first.metrics.get("net_bytes_per_s") == 0.0  # no rate yet
    assert second.t >= first.t
    assert second.metrics["rss_bytes"] > 1_000_000 and second.metrics["page_cache_bytes"] > 0


def test_busy_work_shows_in_cpu_and_in_the_cache_disks_writes(tmp_path: Path) -> None:
    sampler = HostSampler(tmp_path / "cache")  # not made yet: its nearest existing parent decides
    sampler.sample()
    begun = time.monotonic()
    with open(tmp_path / "blob", "wb") as blob:
        chunk = os.urandom(1 << 20)
        for _ in range(50):
            blob.write(chunk)
        blob.flush()
        os.fsync(blob.fileno())
    while time.monotonic() - begun < 0.3:  # and some CPU
        pass
    after = sampler.sample()
    assert after.metrics["cpu_percent"] > 0
    if "disk_write_bytes_per_s" not in after.metrics:
        pytest.skip(f"no block-device statistics on this machine (cache disk {sampler.disk!r}): disk metrics absent")
    if sampler.disk is None:
        pytest.skip("the cache directory is on no block device: the busiest disk stands in, not checked")
    # 50 MiB reached the device within the interval (fsync); metadata and journal only add to it
    interval = after.t - begun
    assert after.metrics["disk_write_bytes_per_s"] * interval > 25 * (1 << 20), (sampler.disk, after.metrics)
    assert after.metrics["disk_busy_percent"] > 0 and after.metrics["disk_write_latency_s"] > 0


def test_the_cache_device_is_a_whole_disk_that_psutil_knows(tmp_path: Path) -> None:
    disk = block_device_of(tmp_path)
    if disk is None:
        pytest.skip(f"{tmp_path} is on no block device here")
    assert disk in psutil.disk_io_counters(perdisk=True)
    assert not (Path("/sys/block") / disk / "partition").exists()


def test_a_source_that_fails_leaves_its_metrics_out_and_is_logged_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def denied(*args: object, **kwargs: object) -> object:
        raise psutil.AccessDenied()

    def no_file() -> int:
        raise FileNotFoundError("/proc/net/snmp")

    monkeypatch.setattr(psutil, "disk_io_counters", denied)
    monkeypatch.setattr(psutil, "net_io_counters", denied)
    monkeypatch.setattr(host, "_retransmits", no_file)
    sampler = HostSampler(tmp_path)
    with caplog.at_level(logging.DEBUG, logger=host.__name__):
        taken = [sampler.sample() for _ in range(3)]
    gone = {name for name in SAMPLED if name.startswith(("disk_", "net_"))}
    assert all(not gone & set(sample.metrics) for sample in taken)
    assert "cpu_percent" in taken[-1].metrics and "rss_bytes" in taken[-1].metrics
    assert len([record for record in caplog.records if "unavailable" in record.getMessage()]) == 3


def test_the_cost_of_one_sample(tmp_path: Path) -> None:
    sampler = HostSampler(tmp_path)
    rounds = 50
    begun = time.perf_counter()
    for _ in range(rounds):
        sampler.sample()
    cost_us = (time.perf_counter() - begun) / rounds * 1e6
    print(f"HostSampler.sample(): {cost_us:.0f} us")  # the figure in host.py's docstring
    assert cost_us > 0


def test_loop_lag_sees_the_loop_blocked() -> None:
    async def main() -> tuple[float, float]:
        lag = LoopLag(interval=0.02)  # short: a stall of B shows as at least B - interval
        task = asyncio.create_task(lag.run())
        await asyncio.sleep(0.05)
        lag.take()
        time.sleep(0.2)  # blocks the loop: the point of the test
        await asyncio.sleep(0.1)
        seen, again = lag.take(), lag.take()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return seen, again

    seen, again = asyncio.run(main())
    assert seen >= 0.15
    assert again == 0.0  # take() resets
