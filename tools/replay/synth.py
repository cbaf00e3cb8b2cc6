"""A Facebook-like trace generator: pure and seeded (same parameters, same trace).

The model (docs/replay.md has the long form):

- **Files**: ``files`` objects with lognormal sizes (median ``size_median``, shape
  ``size_sigma``) truncated to ``[size_min, size_max]``, spread over ``tenants`` tenants
  round robin, one bucket per tenant.
- **Jobs** arrive as a Poisson process (mean gap ``job_interval`` seconds). A job reads one
  file whole, as Hadoop mappers do: one request per ``split_size`` split (an aligned byte
  range), all arriving at the job's start; a file no larger than a split is one
  whole-object GET.
- **Reuse**: a job either reads the next never-read file (*fresh*) or re-reads a file that
  was read before (*re-read*). Before each job the generator compares the reused bytes so
  far with ``reuse`` x all bytes so far and picks re-read when reuse is short, so the
  trace's byte reuse (trace.reuse_fraction) tracks ``reuse`` to within about one job.
- **Popularity**: a re-read job picks a file by Zipf (exponent ``zipf``) over *recency*:
  the file first read most recently has rank 1. New data is hottest and cools as newer data
  arrives, so the popular set shifts over the trace, as in Facebook's traces.

When every file has been read, jobs can only re-read and reuse climbs above ``reuse``
(stats say so); give more ``files`` for a longer trace.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from tools.replay.trace import TraceRecord, reuse_fraction

KiB = 1024
MiB = 1024 * KiB


@dataclass(frozen=True)
class SynthParams:
    """What ``lakegate trace synth`` generates; the defaults are laptop-sized (1000
    requests reading 5.7 GiB of a 1.4 GiB data set)."""

    files: int = 200
    requests: int | None = 1000  # stop after this many requests (the last job cut short)...
    jobs: int | None = None  # ...or after this many jobs, whichever comes first
    seed: int = 1
    reuse: float = 0.75
    zipf: float = 1.0
    tenants: int = 1
    size_median: int = 8 * MiB
    size_sigma: float = 1.0
    size_min: int = 64 * KiB
    size_max: int = 64 * MiB
    split_size: int = 8 * MiB
    job_interval: float = 0.5
    bucket_prefix: str = "replay"

    def __post_init__(self) -> None:
        problems = list(self._problems())
        if problems:
            raise ValueError("; ".join(problems))

    def _problems(self) -> Iterator[str]:
        if self.files < 1:
            yield "files must be at least 1"
        if self.requests is None and self.jobs is None:
            yield "give requests or jobs (or both)"
        if (self.requests is not None and self.requests < 1) or (self.jobs is not None and self.jobs < 1):
            yield "requests and jobs must be at least 1"
        if not 0.0 <= self.reuse < 1.0:
            yield "reuse is a fraction in [0, 1)"
        if self.zipf < 0:
            yield "zipf must be >= 0 (0: uniform)"
        if self.tenants < 1:
            yield "tenants must be at least 1"
        if not 0 < self.size_min <= self.size_median <= self.size_max:
            yield "sizes need 0 < size_min <= size_median <= size_max"
        if self.size_sigma < 0 or self.split_size < 1 or self.job_interval < 0:
            yield "size_sigma, job_interval must be >= 0 and split_size >= 1"


@dataclass(frozen=True)
class DataObject:
    tenant: str
    bucket: str
    key: str
    size: int


@dataclass
class SynthStats:
    requests: int = 0
    jobs: int = 0
    fresh_jobs: int = 0
    reread_jobs: int = 0
    requested_bytes: int = 0
    reuse: float = 0.0
    files_read: int = 0
    population_exhausted: bool = False


@dataclass
class SynthTrace:
    params: SynthParams
    objects: list[DataObject]
    records: list[TraceRecord]
    stats: SynthStats = field(default_factory=SynthStats)

    def data_set(self) -> list[DataObject]:
        """The files the trace reads, in population order: what an upload stores (files
        never read would only cost upload time and lake space)."""
        wanted = {(r.bucket, r.key) for r in self.records}
        return [o for o in self.objects if (o.bucket, o.key) in wanted]

    def manifest(self) -> dict[str, Any]:
        """The data set as JSON, with the model's parameters and what the trace came out as."""
        objects = self.data_set()
        return {
            "params": asdict(self.params),
            "stats": asdict(self.stats),
            "buckets": sorted({o.bucket for o in objects}),
            "total_bytes": sum(o.size for o in objects),
            "objects": [asdict(o) for o in objects],
        }


def tenant_name(index: int) -> str:
    return f"tenant-{index}"


def population(params: SynthParams, rng: random.Random) -> list[DataObject]:
    """The files, sizes drawn in index order (so adding files keeps the first ones)."""
    objects = []
    for index in range(params.files):
        tenant = tenant_name(index % params.tenants)
        objects.append(DataObject(
            tenant=tenant,
            bucket=f"{params.bucket_prefix}-{tenant}",
            key=f"data/part-{index:05d}",
            size=_file_size(params, rng),
        ))
    return objects


def _file_size(params: SynthParams, rng: random.Random) -> int:
    """Lognormal, truncated by redrawing (clamping would pile files up at the bounds)."""
    for _ in range(100):
        size = round(rng.lognormvariate(math.log(params.size_median), params.size_sigma))
        if params.size_min <= size <= params.size_max:
            return size
    return min(max(size, params.size_min), params.size_max)


def splits(obj: DataObject, split_size: int) -> list[tuple[int, int] | None]:
    """The byte ranges mappers read a file in; None: one whole-object GET."""
    if obj.size <= split_size:
        return [None]
    return [(first, min(first + split_size, obj.size) - 1) for first in range(0, obj.size, split_size)]


class ZipfByRecency:
    """Samples rank k in 1..m with P(k) proportional to k**-s, for a growing m, in O(log m):
    the cumulative weights are computed once for the largest m."""

    def __init__(self, exponent: float, largest: int) -> None:
        self.cumulative = list(itertools.accumulate(k ** -exponent for k in range(1, largest + 1)))

    def share(self, top: int, m: int) -> float:
        """P(rank <= top) among m ranks: what a popularity test compares with."""
        return float(self.cumulative[min(top, m) - 1] / self.cumulative[m - 1])

    def sample(self, m: int, rng: random.Random) -> int:
        return bisect.bisect_left(self.cumulative, rng.random() * self.cumulative[m - 1], 0, m - 1) + 1


def synthesize(params: SynthParams) -> SynthTrace:
    """The trace for these parameters (deterministic in ``params.seed``)."""
    rng = random.Random(params.seed)
    objects = population(params, rng)
    zipf = ZipfByRecency(params.zipf, params.files)
    read_order: list[int] = []  # file indices by first read; the last one is rank 1
    trace = SynthTrace(params, objects, [])
    reused = total = 0
    offset = 0.0
    while not _finished(params, trace):
        offset += rng.expovariate(1 / params.job_interval) if params.job_interval else 0.0
        reread = bool(read_order) and (len(read_order) == params.files or reused < params.reuse * total)
        if reread:
            index = read_order[-zipf.sample(len(read_order), rng)]
            trace.stats.reread_jobs += 1
        else:
            index = len(read_order)  # files are read fresh in index order (sizes are iid)
            read_order.append(index)
            trace.stats.fresh_jobs += 1
        job_bytes = _add_job(params, trace, objects[index], offset)
        total += job_bytes
        reused += job_bytes if reread else 0
    trace.stats.requests = len(trace.records)
    trace.stats.jobs = trace.stats.fresh_jobs + trace.stats.reread_jobs
    trace.stats.requested_bytes = total
    trace.stats.reuse = reuse_fraction(trace.records)
    trace.stats.files_read = len(read_order)
    trace.stats.population_exhausted = len(read_order) == params.files
    return trace


def _finished(params: SynthParams, trace: SynthTrace) -> bool:
    jobs = trace.stats.fresh_jobs + trace.stats.reread_jobs
    return (params.requests is not None and len(trace.records) >= params.requests) or (
        params.jobs is not None and jobs >= params.jobs)


def _add_job(params: SynthParams, trace: SynthTrace, obj: DataObject, offset: float) -> int:
    """Append one job's requests (cut at ``params.requests``); returns the bytes they read."""
    job = f"job-{trace.stats.fresh_jobs + trace.stats.reread_jobs:05d}"
    added = 0
    for byte_range in splits(obj, params.split_size):
        if params.requests is not None and len(trace.records) >= params.requests:
            break
        first, last = byte_range if byte_range else (None, None)
        record = TraceRecord(round(offset, 6), job, obj.tenant, obj.bucket, obj.key, first, last, obj.size)
        trace.records.append(record)
        added += record.expected_bytes or 0
    return added
