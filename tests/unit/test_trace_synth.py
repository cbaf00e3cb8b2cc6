"""The trace format and the synthetic trace generator: reuse and popularity match their
parameters, files round-trip, bad lines are named."""

from __future__ import annotations

import io
import math
from collections import Counter
from pathlib import Path

import pytest

from tools.replay.synth import KiB, MiB, SynthParams, splits, synthesize
from tools.replay.trace import (
    TraceFormatError,
    TraceRecord,
    parse_trace,
    read_trace,
    reuse_fraction,
    write_trace,
)

# one request per job (every file fits a split): many jobs, cheaply, for the statistics
ONE_SPLIT = {"size_median": 32 * KiB, "size_min": 1 * KiB, "size_max": 1 * MiB, "split_size": 1 * MiB}


def reread_ranks(records: list[TraceRecord]) -> list[tuple[int, int]]:
    """(rank, files read so far) of every re-read job, found from the trace alone: rank 1
    is the file first read most recently."""
    position: dict[tuple[str, str], int] = {}  # file -> when it was first read (0, 1, ...)
    events = []
    for job_records in _jobs(records):
        name = (job_records[0].bucket, job_records[0].key)
        if name in position:
            events.append((len(position) - position[name], len(position)))
        else:
            position[name] = len(position)
    return events


def _jobs(records: list[TraceRecord]) -> list[list[TraceRecord]]:
    by_job: dict[str, list[TraceRecord]] = {}
    for record in records:
        by_job.setdefault(record.job, []).append(record)
    return list(by_job.values())


def zipf_prefix(s: float, largest: int) -> list[float]:
    """prefix[m] = sum of k**-s for k in 1..m (Zipf's normalising constant over m ranks)."""
    prefix = [0.0]
    for k in range(1, largest + 1):
        prefix.append(prefix[-1] + k ** -s)
    return prefix


@pytest.mark.parametrize("reuse", [0.5, 0.75, 0.9])
def test_byte_reuse_matches_the_parameter(reuse: float) -> None:
    trace = synthesize(SynthParams(files=5000, requests=5000, reuse=reuse, seed=7, **ONE_SPLIT))
    assert not trace.stats.population_exhausted
    assert reuse_fraction(trace.records) == pytest.approx(reuse, abs=0.02)
    assert trace.stats.reuse == reuse_fraction(trace.records)


def test_byte_reuse_with_multi_split_files() -> None:
    """Files read as many ranged requests (heavy-tailed sizes): reuse still tracks."""
    params = SynthParams(files=400, requests=3000, size_median=1 * MiB, size_min=64 * KiB,
                         size_max=16 * MiB, split_size=512 * KiB, seed=3)
    trace = synthesize(params)
    assert any(r.byte_range is not None for r in trace.records)
    assert reuse_fraction(trace.records) == pytest.approx(0.75, abs=0.03)


@pytest.mark.parametrize("exponent", [0.8, 1.0, 1.3])
def test_reread_popularity_is_zipf_over_recency(exponent: float) -> None:
    """The share of re-reads that hit the top 1 and top 10 recent files matches what Zipf
    with this exponent gives (averaged over how many files were read at each re-read)."""
    trace = synthesize(SynthParams(files=20000, requests=20000, zipf=exponent, seed=11, **ONE_SPLIT))
    events = reread_ranks(trace.records)
    assert len(events) > 10000
    prefix = zipf_prefix(exponent, max(m for _, m in events))
    for top in (1, 10):
        observed = sum(rank <= top for rank, _ in events) / len(events)
        expected = sum(prefix[min(top, m)] / prefix[m] for _, m in events) / len(events)
        assert observed == pytest.approx(expected, rel=0.04), f"top {top}"


def test_fitted_zipf_exponent_matches() -> None:
    """Maximum likelihood over a grid of exponents lands within 0.05 of the parameter."""
    trace = synthesize(SynthParams(files=8000, requests=8000, zipf=1.1, seed=5, **ONE_SPLIT))
    events = reread_ranks(trace.records)

    def log_likelihood(s: float) -> float:
        prefix = zipf_prefix(s, max(m for _, m in events))
        return sum(-s * math.log(rank) - math.log(prefix[m]) for rank, m in events)

    grid = [0.7 + i * 0.02 for i in range(41)]
    best = max(grid, key=log_likelihood)
    assert best == pytest.approx(1.1, abs=0.05)


def test_popularity_shifts_over_time() -> None:
    """New data is hottest: the most re-read files of the trace's first and last quarters differ."""
    records = synthesize(SynthParams(files=2000, requests=4000, seed=2, **ONE_SPLIT)).records
    quarter = len(records) // 4
    early = Counter(r.key for r in records[:quarter]).most_common(5)
    late = Counter(r.key for r in records[-quarter:]).most_common(5)
    assert not {k for k, _ in early} & {k for k, _ in late}


def test_same_seed_same_trace_and_sizes_within_bounds() -> None:
    params = SynthParams(files=300, requests=600, tenants=3, seed=9, **ONE_SPLIT)
    first, again = synthesize(params), synthesize(params)
    assert first.records == again.records
    assert synthesize(SynthParams(files=300, requests=600, tenants=3, seed=10, **ONE_SPLIT)).records != first.records
    sizes = sorted(o.size for o in first.objects)
    assert params.size_min <= sizes[0] and sizes[-1] <= params.size_max
    assert sum(sizes) / len(sizes) > sizes[len(sizes) // 2]  # heavy right tail: mean above median
    assert {r.tenant for r in first.records} == {"tenant-0", "tenant-1", "tenant-2"}
    assert all(r.bucket == f"replay-{r.tenant}" for r in first.records)


def test_request_count_and_offsets() -> None:
    trace = synthesize(SynthParams(files=200, requests=333, seed=4, size_median=1 * MiB,
                                   size_min=64 * KiB, size_max=8 * MiB, split_size=256 * KiB))
    offsets = [r.offset for r in trace.records]
    assert len(trace.records) == 333 and offsets == sorted(offsets) and offsets[0] > 0
    assert trace.manifest()["total_bytes"] == sum(o.size for o in trace.data_set())


def test_splits_cover_the_file_exactly() -> None:
    trace = synthesize(SynthParams(files=1, requests=1, size_median=1000, size_min=1000, size_max=1000))
    obj = trace.objects[0]
    assert splits(obj, 1000) == [None]
    assert splits(obj, 300) == [(0, 299), (300, 599), (600, 899), (900, 999)]


def test_exhausted_population_is_reported() -> None:
    trace = synthesize(SynthParams(files=3, requests=100, seed=1, **ONE_SPLIT))
    assert trace.stats.population_exhausted and trace.stats.reuse > 0.9


@pytest.mark.parametrize("bad", [{"reuse": 1.0}, {"files": 0}, {"requests": None, "jobs": None},
                                 {"size_min": 10, "size_median": 5}, {"zipf": -1}])
def test_bad_parameters_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        SynthParams(**bad)  # type: ignore[arg-type]


RECORDS = [
    TraceRecord(0.0, "j1", "etl", "b", "k1", 0, 99, 1000),
    TraceRecord(0.5, "j1", "etl", "b", "dir/k,2 \"q\"", None, None, 20),
    TraceRecord(1.25, "j2", "ops", "b2", "k3"),
]


@pytest.mark.parametrize("name", ["trace.jsonl", "trace.csv"])
def test_trace_file_round_trip(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    write_trace(path, RECORDS)
    assert read_trace(path) == RECORDS


def test_expected_bytes_and_reuse_definition() -> None:
    assert RECORDS[0].expected_bytes == 100
    assert RECORDS[1].expected_bytes == 20
    assert RECORDS[2].expected_bytes is None
    assert TraceRecord(0, "j", "t", "b", "k", 900, 1999, 1000).expected_bytes == 100  # cut at the end
    trace = [TraceRecord(0, "j", "t", "b", "k", 0, 99, 1000), TraceRecord(1, "j", "t", "b", "k", 0, 99, 1000),
             TraceRecord(2, "j", "t", "b", "k", 0, 199, 1000)]  # an overlapping other range: not reuse
    assert reuse_fraction(trace) == pytest.approx(100 / 400)


@pytest.mark.parametrize(("text", "message"), [
    ('{"offset": 1, "job": "j", "tenant": "t", "bucket": "b"', "trace:2: not JSON"),
    ('[1, 2]', "trace:2: a record is a JSON object"),
    ('{"offset": 1, "job": "j", "tenant": "t", "bucket": "b"}', "trace:2: missing field 'key'"),
    ('{"offset": -1, "job": "j", "tenant": "t", "bucket": "b", "key": "k"}', "offset must be a number"),
    ('{"offset": "soon", "job": "j", "tenant": "t", "bucket": "b", "key": "k"}', "offset must be a number"),
    ('{"offset": 1, "job": 5, "tenant": "t", "bucket": "b", "key": "k"}', "job must be a string"),
    ('{"offset": 1, "job": "j", "tenant": "t", "bucket": "b", "key": "k", "first": 5}', "first and last"),
    ('{"offset": 1, "job": "j", "tenant": "t", "bucket": "b", "key": "k", "first": 5, "last": 1}',
     "first (5) is after last (1)"),
    ('{"offset": 1, "job": "j", "tenant": "t", "bucket": "b", "key": "k", "size": 1.5}', "size must be a whole"),
    ('{"offset": 1, "job": "j", "tenant": "t", "bucket": "b", "key": "k", "frist": 0}', "unknown field(s) ['frist']"),
])
def test_bad_jsonl_lines_name_line_and_problem(text: str, message: str) -> None:
    good = '{"offset": 0, "job": "j", "tenant": "t", "bucket": "b", "key": "k"}\n'
    with pytest.raises(TraceFormatError) as caught:
        list(parse_trace(io.StringIO(good + text + "\n"), "jsonl"))
    assert message in str(caught.value)


@pytest.mark.parametrize(("row", "message"), [
    ("x,j,t,b,k,,,", "trace:3: offset must be a number"),
    ("1,j,t,b,k,7,,", "trace:3: first and last"),
    ("1,j,t,b,k,a,b,", "trace:3: first must be a whole number"),
    ("1,j,t,b,k,,,,extra", "trace:3: more cells than header fields"),
    ("1,j,t,,k,,,", "trace:3: missing field 'bucket'"),
])
def test_bad_csv_rows_name_line_and_problem(row: str, message: str) -> None:
    text = "offset,job,tenant,bucket,key,first,last,size\n0,j,t,b,k,,,\n" + row + "\n"
    with pytest.raises(TraceFormatError) as caught:
        list(parse_trace(io.StringIO(text), "csv"))
    assert message in str(caught.value)


def test_unknown_csv_column_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("offset,job,tenant,bucket,key,duration\n0,j,t,b,k,3\n")
    with pytest.raises(TraceFormatError, match=r"t\.csv:2: unknown field\(s\) \['duration'\]"):
        read_trace(path)
    with pytest.raises(TraceFormatError, match="nope.jsonl"):
        read_trace(tmp_path / "nope.jsonl")
