"""Host micrometrics: what this node's machine is doing, sampled about once a second.

MicroMon (Kandula et al.) scores replicas from *micrometrics*: low-level host signals that show a
node is about to be slow before its request latency does (a saturated CPU, an SSD busy flushing,
a congested NIC). ``HostSampler`` takes them from psutil, and from /proc where psutil has no call;
the anomaly reports (issue 15, item 3) turn them into compact deviations carried on heartbeats.

Each sample's ``metrics`` maps these names to finite values >= 0 (rates: per second since the
previous ``sample()``, 0 on the first call):

    cpu_percent             time the CPUs were busy (not idle, not iowait), % of all CPUs'
                            time (psutil.cpu_times deltas)
    iowait_percent          time the CPUs sat idle with disk I/O outstanding, % (same source)
    run_queue               runnable tasks per core, the sampler itself not counted
                            (/proc/loadavg's running field / os.cpu_count())
    disk_busy_percent       % of the interval the cache directory's block device had I/O in
                            flight (psutil.disk_io_counters(perdisk=True) busy_time delta)
    disk_read_bytes_per_s   bytes read from that device per second
    disk_write_bytes_per_s  bytes written to it per second
    disk_read_latency_s     mean time a read spent in the device's queue and service: read_time
                            delta / read_count delta (0 when no reads)
    disk_write_latency_s    the same for writes
    page_cache_bytes        the kernel's page cache (/proc/meminfo Cached)
    dirty_bytes             page-cache bytes not yet on disk (/proc/meminfo Dirty + Writeback)
    net_bytes_per_s         bytes sent + received per second, all interfaces but lo (lo alone
                            when there is no other: a loopback-only host or network namespace)
    net_drops_per_s         packets dropped per second on them (dropin + dropout)
    net_retransmits_per_s   TCP segments retransmitted per second (/proc/net/snmp RetransSegs)
    rss_bytes               this process's resident memory
    loop_lag_s              how late the event loop runs a timer (``LoopLag``): set by the caller,
                            ``sample.with_metrics({"loop_lag_s": lag.take()})``, as the sampler
                            runs off the loop (psutil reads block)

The cache device: the block device of the cache directory (os.stat st_dev -> /sys/dev/block/
MAJ:MIN -> its name; a partition's parent disk, as the whole disk's queue is what is busy). When
the directory is on no block device (overlayfs, tmpfs, btrfs's anonymous devices) the busiest disk
of each interval stands in for it. A source that fails (a container without /sys/block, a /proc
file not readable) leaves its metrics out of ``metrics``, logged once at debug; ``sample()`` never
raises.

The twin: ``RecordedSource`` replays constructed samples, so the anomaly and selection tests run
without a host; both conform to ``TelemetrySource`` (tests/unit/test_host_telemetry.py).

Cost, measured on lakegate's 2-core dev VM (tests/component/test_host_sampler.py prints it): one
``HostSampler.sample()`` took 930-1030 us with the machine loaded (load 2-5), half of it in psutil's
disk and network counters: 0.1% of a core at one sample a second.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple, Protocol, TypeVar

import psutil

log = logging.getLogger(__name__)
_T = TypeVar("_T")

METRICS = (
    "cpu_percent", "iowait_percent", "run_queue", "disk_busy_percent", "disk_read_bytes_per_s",
    "disk_write_bytes_per_s", "disk_read_latency_s", "disk_write_latency_s", "page_cache_bytes",
    "dirty_bytes", "net_bytes_per_s", "net_drops_per_s", "net_retransmits_per_s", "rss_bytes",
    "loop_lag_s",
)


@dataclass(frozen=True)
class HostSample:
    """One sample of the host: ``t`` in monotonic seconds, ``metrics`` by the names of ``METRICS``
    (those whose source failed are absent). Every value is finite and >= 0, checked here."""

    t: float
    metrics: Mapping[str, float]

    def __post_init__(self) -> None:
        bad = {name: value for name, value in self.metrics.items() if not (math.isfinite(value) and value >= 0)}
        if bad:
            raise ValueError(f"host metrics must be finite and >= 0: {bad}")
        object.__setattr__(self, "metrics", MappingProxyType(dict(self.metrics)))

    def with_metrics(self, extra: Mapping[str, float]) -> HostSample:
        """This sample with ``extra`` added (or replaced): how the caller adds ``loop_lag_s``."""
        return HostSample(self.t, {**self.metrics, **extra})


class TelemetrySource(Protocol):
    """Where host samples come from: the real host (``HostSampler``) or a recording."""

    def sample(self) -> HostSample:
        """The host now; rates are deltas since the previous call (0 on the first)."""
        ...


class RecordedSource:
    """The twin of ``HostSampler``: hands out ``samples`` in order, then holds the last one
    (or starts over, with ``cycle=True``)."""

    def __init__(self, samples: Sequence[HostSample], *, cycle: bool = False) -> None:
        if not samples:
            raise ValueError("a RecordedSource needs at least one sample")
        self._samples = tuple(samples)
        self._cycle = cycle
        self._next = 0

    def sample(self) -> HostSample:
        taken = self._samples[self._next]
        if self._next + 1 < len(self._samples):
            self._next += 1
        elif self._cycle:
            self._next = 0
        return taken


class _Totals(NamedTuple):
    """Cumulative counters of one moment, the base of the next sample's rates."""

    t: float
    cpu: tuple[float, float, float] | None  # total, busy, iowait seconds
    disks: dict[str, tuple[int, int, int, int, int, int, int]] | None  # name -> (busy ms, rd B, wr B, rd ms, rd n, wr ms, wr n)
    nics: dict[str, tuple[int, int]] | None  # name -> (bytes, drops)
    retransmits: int | None


class HostSampler:
    """``TelemetrySource`` over psutil and /proc; ``cache_dir`` chooses the disk that is watched.
    Not thread-safe: one sampling loop calls it (off the event loop: its reads block briefly)."""

    def __init__(self, cache_dir: str | os.PathLike[str], *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._cores = os.cpu_count() or 1
        self._failed: set[str] = set()
        self._disk = self._guard("disk device", lambda: block_device_of(cache_dir))
        self._process = psutil.Process()
        self._previous: _Totals | None = None

    @property
    def disk(self) -> str | None:
        """The block device watched (``None``: the busiest disk of each interval)."""
        return self._disk

    def sample(self) -> HostSample:
        now = self._totals()
        before = self._previous
        self._previous = now
        metrics: dict[str, float] = {}
        dt = now.t - before.t if before is not None else 0.0
        rated = before if before is not None and dt > 0 else None
        self._add_cpu(metrics, now, rated)
        self._add_disk(metrics, now, rated, dt)
        self._add_net(metrics, now, rated, dt)
        for name, read in (("run_queue", self._run_queue), ("rss_bytes", self._rss)):
            value = self._guard(name, read)
            if value is not None:
                metrics[name] = value
        metrics.update(self._guard("/proc/meminfo", _memory) or {})
        return HostSample(now.t, {name: value for name, value in metrics.items() if math.isfinite(value)})

    def _guard(self, what: str, read: Callable[[], _T]) -> _T | None:
        """``read()``, or ``None`` when it fails; each source's failure is logged once."""
        try:
            return read()
        except (OSError, ValueError, KeyError, IndexError, AttributeError, psutil.Error) as exc:
            if what not in self._failed:
                self._failed.add(what)
                log.debug("host telemetry: %s unavailable, its metrics left out: %r", what, exc)
            return None

    def _totals(self) -> _Totals:
        return _Totals(self._clock(), self._guard("cpu times", _cpu_times), self._guard("disk counters", _disk_counters),
                       self._guard("network counters", _nic_counters), self._guard("/proc/net/snmp", _retransmits))

    def _add_cpu(self, metrics: dict[str, float], now: _Totals, before: _Totals | None) -> None:
        if now.cpu is None:
            return
        if before is None or before.cpu is None or now.cpu[0] <= before.cpu[0]:
            metrics.update(cpu_percent=0.0, iowait_percent=0.0)
            return
        total, busy, iowait = (max(0.0, a - b) for a, b in zip(now.cpu, before.cpu, strict=True))
        metrics["cpu_percent"] = min(100.0, 100.0 * busy / total)
        metrics["iowait_percent"] = min(100.0, 100.0 * iowait / total)

    def _add_disk(self, metrics: dict[str, float], now: _Totals, before: _Totals | None, dt: float) -> None:
        if not now.disks:
            return
        if before is None or before.disks is None:
            metrics.update(dict.fromkeys(_DISK_METRICS, 0.0))
            return
        deltas = {name: tuple(max(0, a - b) for a, b in zip(counters, before.disks[name], strict=True))
                  for name, counters in now.disks.items() if name in before.disks}
        # the cache's disk, else (on no block device, or one psutil does not list) the busiest
        busiest = max(deltas, key=lambda disk: deltas[disk][0], default=None)
        name = self._disk if self._disk in deltas else busiest
        if name is None:
            return
        busy_ms, read_b, write_b, read_ms, reads, write_ms, writes = deltas[name]
        metrics["disk_busy_percent"] = min(100.0, busy_ms / 10.0 / dt)  # ms per s / 10 = %
        metrics["disk_read_bytes_per_s"] = read_b / dt
        metrics["disk_write_bytes_per_s"] = write_b / dt
        metrics["disk_read_latency_s"] = read_ms / 1000.0 / reads if reads else 0.0
        metrics["disk_write_latency_s"] = write_ms / 1000.0 / writes if writes else 0.0

    def _add_net(self, metrics: dict[str, float], now: _Totals, before: _Totals | None, dt: float) -> None:
        if now.nics is not None:
            if before is None or before.nics is None:
                metrics.update(net_bytes_per_s=0.0, net_drops_per_s=0.0)
            else:
                common = now.nics.keys() & before.nics.keys()  # an interface that came or went has no delta
                metrics["net_bytes_per_s"] = sum(max(0, now.nics[n][0] - before.nics[n][0]) for n in common) / dt
                metrics["net_drops_per_s"] = sum(max(0, now.nics[n][1] - before.nics[n][1]) for n in common) / dt
        if now.retransmits is not None:
            previous = before.retransmits if before is not None else None
            metrics["net_retransmits_per_s"] = max(0, now.retransmits - previous) / dt if previous is not None else 0.0

    def _run_queue(self) -> float:
        running = int(Path("/proc/loadavg").read_text().split()[3].split("/")[0])
        return max(0, running - 1) / self._cores  # the reading thread is running: not a queue

    def _rss(self) -> float:
        return float(self._process.memory_info().rss)


_DISK_METRICS = ("disk_busy_percent", "disk_read_bytes_per_s", "disk_write_bytes_per_s",
                 "disk_read_latency_s", "disk_write_latency_s")


def block_device_of(path: str | os.PathLike[str]) -> str | None:
    """The name of the whole disk that holds ``path`` (its nearest existing ancestor), as psutil
    names it ("vda", "nvme0n1"), or ``None`` when it is on no block device."""
    existing = Path(path).absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    device = existing.stat().st_dev
    sys_path = Path(f"/sys/dev/block/{os.major(device)}:{os.minor(device)}")
    if os.major(device) == 0 or not sys_path.exists():
        return None
    resolved = sys_path.resolve()
    return resolved.parent.name if (resolved / "partition").exists() else resolved.name


def _cpu_times() -> tuple[float, float, float]:
    times = psutil.cpu_times()
    # as psutil's own cpu_percent: user and nice already include guest time
    total = sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)
    iowait = getattr(times, "iowait", 0.0)
    return total, total - times.idle - iowait, iowait


def _disk_counters() -> dict[str, tuple[int, int, int, int, int, int, int]]:
    return {name: (getattr(io, "busy_time", 0), io.read_bytes, io.write_bytes, io.read_time, io.read_count,
                   io.write_time, io.write_count)
            for name, io in psutil.disk_io_counters(perdisk=True).items()}


def _nic_counters() -> dict[str, tuple[int, int]]:
    nics = psutil.net_io_counters(pernic=True)
    chosen = {name: io for name, io in nics.items() if name != "lo"} or nics
    return {name: (io.bytes_sent + io.bytes_recv, io.dropin + io.dropout) for name, io in chosen.items()}


def _retransmits() -> int:
    lines = [line.split() for line in Path("/proc/net/snmp").read_text().splitlines() if line.startswith("Tcp:")]
    header, values = lines[0], lines[1]
    return int(values[header.index("RetransSegs")])


def _memory() -> dict[str, float]:
    kib: dict[str, int] = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("Cached", "Dirty", "Writeback"):
            kib[name] = int(rest.split()[0])
    return {"page_cache_bytes": 1024.0 * kib["Cached"], "dirty_bytes": 1024.0 * (kib["Dirty"] + kib["Writeback"])}


class LoopLag:
    """Event-loop lag: how much later than asked a ``sleep(interval)`` wakes, the maximum over
    the period since the last ``take()``. A loop blocked for B seconds shows a lag between
    B - interval and B, so a short interval sees short stalls (cost: one timer per interval)."""

    def __init__(self, interval: float = 0.1) -> None:
        if not interval > 0:
            raise ValueError("LoopLag needs an interval > 0")
        self._interval = interval
        self._max = 0.0

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time() + self._interval
            await asyncio.sleep(self._interval)
            self._max = max(self._max, loop.time() - asked)

    def take(self) -> float:
        lag, self._max = self._max, 0.0
        return lag
