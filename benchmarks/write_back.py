"""Write-back with flow-controlled asynchronous replication (issue 14: D3N write-back, Pfimbi):
write-through vs write-back without flow control vs write-back with flow control, in one run,
on the same DFSIO-like job mix.

Everything runs in a network namespace of its own (benchmarks/netns.py), with a Ceph of its own
there: the lake link (RGW's port) shaped to ``--lake-mbit``, the cluster link (peers, 127.0.0.2)
``--cluster-mbit`` (faster), clients unshaped. Each config gets 3 fresh nodes (fresh cache and
journal folders; LAKEGATE_WORKERS=1, no readahead, LAKEGATE_LAKE_BANDWIDTH a little under the
shaped lake rate, so foreground lake reads queue on the lake budget and the flusher sees them
waiting), then, the same in every config (same keys, sizes, seeds):

* writers: ``--jobs`` jobs, job j on node j mod 3, each PUTting ``--files`` files of
  ``--file-mib`` MiB one after another (a DFSIO write task). A job's completion: its first
  request's start to its last 200.
* readers of other data: ``--readers`` closed-loop clients (spread over the nodes) GETting whole
  objects of 1-4 MiB (seeded sizes) pre-loaded into the lake before the timed part, each object
  read once per config (so every read is cold and crosses the lake link), from the writers'
  start for ``--read-seconds`` (or until the writers finish, if later).
* write mode by LAKEGATE_WRITE_MODE on the nodes (N = K = 2, the cluster default);
  ``write-back-no-fc`` has LAKEGATE_WRITE_FLOW_CONTROL=false.

After the load, the journals drain: every node's /_lakegate/admin/replication polled until
``pending_objects`` is 0 everywhere (drain time: from the last writer's 200). The replica
completion timeline: per object, its 200 (ack) and when the lake first answered a HEAD for it
(the driver HEADs every acknowledged, not-yet-seen key directly at the RGW, through the shaped
lake link, every ``POLL_S``). Lake bytes: the tc lake class's counter from the load's start to
the end of the drain. Targets (Pfimbi / the issue): average job completion of write-back (FC)
>= 18% faster than write-through's, PUT p50 of write-back (FC) <= 0.2x write-through's,
foreground read p99 with flow control <= 0.5x without.

    sudo .venv/bin/python -m benchmarks.write_back [--quick]

Progress on stderr; one JSON object on stdout, also written to docs/benchmarks/write_back.json
(quick: benchmarks/results/write_back_quick.json); PNGs write_back_jobs.png, write_back_reads.png,
write_back_timeline.png next to it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.replica_choice import Target
from harness.clients import run_async
from harness.endpoints import BENCH_TENANT, S3Endpoint
from harness.processes import log
from harness.results import RESULTS_DIR, emit_result, git_revision, machine_info, percentile, rounded
from harness.units import MiB

NAME = "write_back"
NODES = 3
CONFIGS = ("write-through", "write-back-no-fc", "write-back-fc")
WRITE_BUCKET = "wb-jobs"
READ_BUCKET = "wb-other"
POLL_S = 0.25  # the lake HEAD poller's period
DRAIN_TIMEOUT_S = 240.0
BASE_PORT = 25000  # node ports: BASE + 10 * config index + node index

TARGET_JOB_SPEEDUP_MIN = 0.18  # 1 - avg job completion (write-back FC) / write-through's
TARGET_PUT_P50_MAX = 0.2  # PUT p50 write-back (FC) / write-through
TARGET_READ_P99_MAX = 0.5  # foreground read p99, FC / no FC


# -- pure: the plan, the summaries, the targets (tests/unit/test_writeback_bench.py) ------------------


@dataclass(frozen=True)
class Request:
    """One timed request: seconds since the load started; ``ok`` a 200."""

    job: str  # a writer job's name, or "reader"
    key: str
    start: float
    end: float
    ok: bool
    bytes: int = 0

    @property
    def latency(self) -> float:
        return self.end - self.start


def writer_jobs(jobs: int, files: int, nodes: Sequence[str], prefix: str = "") -> dict[str, tuple[str, list[str]]]:
    """Job name -> (its node, its keys in order): job j on node j mod len(nodes)."""
    return {f"job{j}": (nodes[j % len(nodes)], [f"{prefix}job{j}/part-{f:04d}" for f in range(files)])
            for j in range(jobs)}


def read_sizes(count: int, seed: int, low: int = 1 * MiB, high: int = 4 * MiB) -> list[int]:
    """The readers' objects' sizes: uniform in [low, high], whole KiB, seeded."""
    rng = random.Random(seed)
    return [rng.randrange(low // 1024, high // 1024 + 1) * 1024 for _ in range(count)]


def latency_summary(values: Sequence[float]) -> dict[str, Any]:
    v = list(values)
    return {"n": len(v), "p50_ms": rounded(percentile(v, 50) * 1e3), "p99_ms": rounded(percentile(v, 99) * 1e3),
            "p999_ms": rounded(percentile(v, 99.9) * 1e3),
            "mean_ms": rounded(sum(v) / len(v) * 1e3) if v else float("nan")}


def job_completions(requests: Sequence[Request]) -> dict[str, Any]:
    """Each writer job's completion (its first request's start to its last 200) and the average;
    a job with a failed request is named in ``failed`` (its time still counts to its last 200)."""
    per: dict[str, list[Request]] = {}
    for r in requests:
        if r.job != "reader":
            per.setdefault(r.job, []).append(r)
    jobs = {}
    for job, reqs in sorted(per.items()):
        ok = [r.end for r in reqs if r.ok]
        jobs[job] = rounded(max(ok) - min(r.start for r in reqs)) if ok else float("nan")
    finite = [v for v in jobs.values() if v == v]
    return {"jobs_s": jobs, "avg_s": rounded(sum(finite) / len(finite)) if finite else float("nan"),
            "max_s": rounded(max(finite)) if finite else float("nan"),
            "failed": sorted(j for j, reqs in per.items() if not all(r.ok for r in reqs))}


def replica_timeline(acks: Mapping[str, float], landed: Mapping[str, float]) -> dict[str, Any]:
    """Per acknowledged object (by ack time): when it was acknowledged and when the lake had it
    (None: not seen), and the lag's summary."""
    rows: list[dict[str, Any]] = [{"key": k, "ack_s": rounded(a, 3), "lake_s": rounded(landed[k], 3) if k in landed else None,
             "lag_s": rounded(max(0.0, landed[k] - a), 3) if k in landed else None}
            for k, a in sorted(acks.items(), key=lambda item: (item[1], item[0]))]
    lags = [float(r["lag_s"]) for r in rows if r["lag_s"] is not None]
    return {"objects": rows, "landed": len(lags), "acknowledged": len(rows),
            "lag_p50_s": rounded(percentile(lags, 50), 3), "lag_max_s": rounded(max(lags), 3) if lags else None,
            "last_landed_s": rounded(max(landed[k] for k in acks if k in landed), 3) if lags else None}


def background_reads(gets: Sequence[Request], drained_at: float, writers_done: float) -> list[float]:
    """The latencies of the reads begun while background work ran: before ``drained_at`` (every
    journal empty), or ``writers_done`` when nothing drained (write-through)."""
    until = drained_at if drained_at == drained_at else writers_done
    return [r.latency for r in gets if r.ok and r.start < until]


def all_drained(reports: Mapping[str, Mapping[str, Any]]) -> bool:
    """Every node's journal empty (``pending_objects`` 0; a missing report is not drained)."""
    return bool(reports) and all(int(r.get("pending_objects", 1)) == 0 for r in reports.values())


def _ratio(a: float, b: float) -> float:
    return a / b if b and a == a and b == b else float("nan")


def targets(summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The issue's three targets from each config's summary (``jobs.avg_s``, ``put.p50_ms``,
    ``reads.p99_ms``), and the ratios beside them."""
    wt, nofc, fc = (summaries[c] for c in CONFIGS)
    job_ratio = _ratio(fc["jobs"]["avg_s"], wt["jobs"]["avg_s"])
    checks = [
        Target("job_completion_speedup_fc_vs_write_through", 1 - job_ratio, TARGET_JOB_SPEEDUP_MIN, True),
        Target("put_p50_fc_over_write_through", _ratio(fc["put"]["p50_ms"], wt["put"]["p50_ms"]), TARGET_PUT_P50_MAX, False),
        Target("read_p99_fc_over_no_fc", _ratio(fc["reads_background"]["p99_ms"], nofc["reads_background"]["p99_ms"]),
               TARGET_READ_P99_MAX, False),
    ]
    out: dict[str, Any] = {t.name: t.as_dict() for t in checks}
    out["all_met"] = all(t.met for t in checks)
    out["ratios"] = {
        "avg_job_completion_fc_over_write_through": rounded(job_ratio),
        "avg_job_completion_no_fc_over_write_through": rounded(_ratio(nofc["jobs"]["avg_s"], wt["jobs"]["avg_s"])),
        "put_p50_no_fc_over_write_through": rounded(_ratio(nofc["put"]["p50_ms"], wt["put"]["p50_ms"])),
        "read_p99_no_fc_over_write_through": rounded(_ratio(nofc["reads"]["p99_ms"], wt["reads"]["p99_ms"])),
        "read_p99_fc_over_write_through": rounded(_ratio(fc["reads"]["p99_ms"], wt["reads"]["p99_ms"])),
        "read_p999_fc_over_no_fc": rounded(_ratio(fc["reads"]["p999_ms"], nofc["reads"]["p999_ms"])),
        "read_p99_whole_window_fc_over_no_fc": rounded(_ratio(fc["reads"]["p99_ms"], nofc["reads"]["p99_ms"])),
        "drain_fc_over_no_fc": rounded(_ratio(fc["drain_s"], nofc["drain_s"])),
    }
    return out


def node_env(config: str, lake_budget: str, soft: str, delta: str) -> dict[str, str]:
    """The nodes' environment for one config (the same but the write mode and flow control)."""
    env = {"LAKEGATE_ACCESS_LOG": "false", "LAKEGATE_WORKERS": "1", "LAKEGATE_READAHEAD": "0",
           "LAKEGATE_LAKE_BANDWIDTH": lake_budget, "LAKEGATE_WRITE_DIRTY_SOFT": soft,
           "LAKEGATE_WRITE_DIRTY_DELTA": delta}
    if config == "write-through":
        env["LAKEGATE_WRITE_MODE"] = "write-through"
    else:
        env["LAKEGATE_WRITE_MODE"] = "write-back"
        env["LAKEGATE_WRITE_FLOW_CONTROL"] = "true" if config == "write-back-fc" else "false"
    return env


# -- load ------------------------------------------------------------------------------------------


@dataclass
class Load:
    requests: list[Request] = field(default_factory=list)
    acks: dict[str, float] = field(default_factory=dict)  # key -> its PUT's 200, s since start
    landed: dict[str, float] = field(default_factory=dict)  # key -> the lake's first 200 to a HEAD
    errors: dict[str, int] = field(default_factory=dict)
    writers_done: float = float("nan")
    reads_exhausted: bool = False
    t0: float = 0.0  # the load's start, on the event loop's clock
    drained_at: float = float("nan")  # every journal empty after the writers, s since the start
    dirty: list[dict[str, float]] = field(default_factory=list)  # {"t": s, node: dirty bytes}
    reports: dict[str, Any] = field(default_factory=dict)  # the last /_lakegate/admin/replication per node
    poller: asyncio.Task[None] | None = None  # the lake HEAD poller, still running after the load
    link: Any = None  # the tc counters' LinkCounters over the load and the drain

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


def _client(url: str, connections: int) -> Any:
    from harness.clients import RawS3Client

    return RawS3Client(S3Endpoint(url, BENCH_TENANT.access_key, BENCH_TENANT.secret_key), max_connections=connections)


async def _writer(s3: Any, job: str, keys: Sequence[str], body: bytes, out: Load, t0: float) -> None:
    loop = asyncio.get_running_loop()
    for key in keys:
        started = loop.time() - t0
        try:
            status, _ = await s3.put(WRITE_BUCKET, key, body)
        except (OSError, ConnectionError, TimeoutError) as exc:
            status = 0
            out.error(f"put {type(exc).__name__}")
        ended = loop.time() - t0
        out.requests.append(Request(job, key, started, ended, status == 200, len(body)))
        if status == 200:
            out.acks[key] = ended
        elif status:
            out.error(f"put {status}")


async def _reader(s3: Any, queue: list[tuple[str, int]], out: Load, t0: float, until: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    while not until.is_set():
        if not queue:
            out.reads_exhausted = True
            return
        key, _ = queue.pop(0)
        started = loop.time() - t0
        try:
            status, received, _ = await s3.get_with_prefix(READ_BUCKET, key, keep=0)
        except (OSError, ConnectionError, TimeoutError) as exc:
            status, received = 0, 0
            out.error(f"get {type(exc).__name__}")
        ended = loop.time() - t0
        out.requests.append(Request("reader", key, started, ended, status == 200, received))
        if status not in (0, 200):
            out.error(f"get {status}")
            await asyncio.sleep(0.05)


async def _poll_lake(lake: S3Endpoint, out: Load, t0: float, stop: asyncio.Event) -> None:
    """HEAD each acknowledged key not yet seen in the lake, every POLL_S, until ``stop``."""
    from harness.clients import RawS3Client

    loop = asyncio.get_running_loop()
    s3 = RawS3Client(lake, max_connections=8)
    sem = asyncio.Semaphore(8)

    async def head(key: str) -> None:
        async with sem:
            try:
                status, _, _ = await s3.request("HEAD", s3.url(WRITE_BUCKET, key))
            except (OSError, ConnectionError, TimeoutError):
                return
            if status == 200 and key not in out.landed:
                out.landed[key] = loop.time() - t0

    try:
        while True:
            begun = loop.time()
            waiting = [k for k in list(out.acks) if k not in out.landed]
            if waiting:
                await asyncio.gather(*(head(k) for k in waiting))
            if stop.is_set() and all(k in out.landed for k in out.acks):
                return
            await asyncio.sleep(max(0.0, POLL_S - (loop.time() - begun)))
    finally:
        await s3.aclose()


async def run_load(urls: Sequence[str], lake: S3Endpoint, jobs: Mapping[str, tuple[str, list[str]]],
                   node_urls: Mapping[str, str], body: bytes, reads: Sequence[tuple[str, int]], readers: int,
                   read_seconds: float, lake_seen: asyncio.Event) -> Load:
    """The writers and the readers, from one start; the lake poller keeps going until
    ``lake_seen`` is set (by the caller, once the journals drained) and every ack has landed."""
    out = Load()
    loop = asyncio.get_running_loop()
    writers = {job: _client(node_urls[node], 2) for job, (node, _) in jobs.items()}
    reader_clients = [_client(urls[i % len(urls)], 2) for i in range(readers)]
    queue = list(reads)
    stop_reading = asyncio.Event()
    t0 = out.t0 = loop.time()
    out.poller = asyncio.create_task(_poll_lake(lake, out, t0, lake_seen))
    done = asyncio.Event()
    watcher = asyncio.create_task(_watch(node_urls, out, done, DRAIN_TIMEOUT_S))
    reader_tasks = [asyncio.create_task(_reader(c, queue, out, t0, stop_reading)) for c in reader_clients]
    try:
        await asyncio.gather(*(_writer(writers[job], job, keys, body, out, t0) for job, (_, keys) in jobs.items()))
        out.writers_done = loop.time() - t0
        done.set()
        await asyncio.sleep(max(0.0, read_seconds - out.writers_done))
        stop_reading.set()
        await asyncio.gather(*reader_tasks)
        await watcher
    finally:
        stop_reading.set()
        watcher.cancel()
        for c in [*writers.values(), *reader_clients]:
            await c.aclose()
    return out


# -- one config: fresh nodes, the load, the drain ------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace, lake: S3Endpoint, net: Any, reads: list[tuple[str, int]]) -> None:
        self.args, self.lake, self.net, self.reads = args, lake, net, reads
        self.body = random.Random(args.seed).randbytes(args.file_mib * MiB)

    def env(self, config: str) -> dict[str, str]:
        a = self.args
        return node_env(config, a.lake_budget, a.dirty_soft, a.dirty_delta)

    def run(self, index: int, config: str) -> dict[str, Any]:
        from benchmarks.netns import CLIENT_HOST, PEER_HOST
        from harness.cluster import LocalCluster

        a = self.args
        nodes = LocalCluster(self.lake, nodes=NODES, env=self.env(config), host="0.0.0.0",  # noqa: S104 - in the namespace
                             advertise_host=PEER_HOST, client_host=CLIENT_HOST, cache_capacity=a.l1, l2_capacity=a.l2,
                             up_args=("--base-port", str(BASE_PORT + 10 * index)))
        log(f"{config}: starting {NODES} nodes")
        try:
            nodes.up()
            jobs = writer_jobs(a.jobs, a.files, nodes.node_ids, prefix=f"{config}/")
            started = time.monotonic()
            out, drain_s, reports, idle = run_async(self._drive(nodes, jobs))
            wall = time.monotonic() - started
        finally:
            nodes.down()
        puts = [r for r in out.requests if r.job != "reader"]
        gets = [r for r in out.requests if r.job == "reader"]
        summary = {
            "jobs": job_completions(puts),
            "put": latency_summary([r.latency for r in puts if r.ok]),
            "reads": latency_summary([r.latency for r in gets if r.ok]),
            # the reads that ran beside background work: begun before every journal was empty
            # (write-through: before the writers finished); after it, all configs read alike
            "reads_background": latency_summary(background_reads(gets, out.drained_at, out.writers_done)),
            "read_mib": rounded(sum(r.bytes for r in gets if r.ok) / MiB, 1),
            "read_mib_per_s": rounded(sum(r.bytes for r in gets if r.ok) / MiB / max(r.end for r in gets), 2) if gets else 0.0,
            "idle_put": latency_summary(idle),
            "writers_done_s": rounded(out.writers_done),
            "drain_s": rounded(drain_s),
            "lake_bytes_tc": out.link.lake, "cluster_bytes_tc": out.link.cluster,
            "errors": out.errors, "reads_exhausted": out.reads_exhausted,
        }
        timeline = replica_timeline(out.acks, out.landed)
        log(f"{config}: idle PUT {summary['idle_put']['p50_ms']} ms; jobs avg {summary['jobs']['avg_s']} s (max {summary['jobs']['max_s']}), PUT p50 "
            f"{summary['put']['p50_ms']} ms p99 {summary['put']['p99_ms']} ms, reads p50 {summary['reads']['p50_ms']} "
            f"p99 {summary['reads']['p99_ms']} ms ({summary['reads']['n']}), drain {summary['drain_s']} s, lake "
            f"{summary['lake_bytes_tc'] / MiB:.0f} MiB, errors {out.errors}")
        return {"config": config, "env": self.env(config), "summary": summary, "timeline": timeline,
                "read_latencies_ms": sorted(rounded(r.latency * 1e3, 2) for r in gets if r.ok),
                "replication_reports": reports, "dirty_over_time": out.dirty, "seconds": rounded(wall),
                "loadavg_1m_at_end": rounded(os.getloadavg()[0], 2)}

    async def _drive(self, nodes: Any, jobs: Mapping[str, tuple[str, list[str]]]
                     ) -> tuple[Load, float, dict[str, Any], list[float]]:
        a = self.args
        urls = dict(nodes.urls)
        idle = await self._idle_puts(urls[nodes.node_ids[0]], [f"{k}-probe" for k in next(iter(jobs.values()))[1][:3]])
        await _until_drained(urls, DRAIN_TIMEOUT_S)
        lake_seen = asyncio.Event()
        link0 = self.net.counters()
        out = await run_load(list(urls.values()), self.lake, jobs, urls, self.body, self.reads,
                             a.readers, a.read_seconds, lake_seen)
        out.link = self.net.counters() - link0  # the load's start to the readers' end and the drain
        last_ack = max(out.acks.values(), default=out.writers_done)
        drain_s = max(0.0, out.drained_at - last_ack) if out.drained_at == out.drained_at else float("nan")
        lake_seen.set()
        if out.poller is not None:
            try:
                await asyncio.wait_for(out.poller, 30.0)
            except TimeoutError:
                out.error("lake poll timed out")
        reports = {n: {k: r.get(k) for k in ("dirty_bytes", "pending_objects", "lag_s", "counters")}
                   for n, r in out.reports.items()}
        return out, drain_s, reports, idle

    async def _idle_puts(self, url: str, keys: Sequence[str]) -> list[float]:
        """PUTs one at a time with nothing else running: the write path's own latency, seconds."""
        s3 = _client(url, 1)
        loop = asyncio.get_running_loop()
        times = []
        try:
            for key in keys:
                started = loop.time()
                status, _ = await s3.put(WRITE_BUCKET, key, self.body)
                if status == 200:
                    times.append(loop.time() - started)
        finally:
            await s3.aclose()
        return times


async def _replication(urls: Mapping[str, str]) -> dict[str, Any]:
    from harness.endpoints import admin_get_json

    return {n: await asyncio.to_thread(admin_get_json, u + "/_lakegate/admin/replication") for n, u in urls.items()}


async def _until_drained(urls: Mapping[str, str], timeout: float) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        try:
            if all_drained(await _replication(urls)):
                return True
        except OSError:
            pass
        await asyncio.sleep(0.25)
    return False


async def _watch(urls: Mapping[str, str], out: Load, writers_done: asyncio.Event, timeout: float) -> None:
    """Every node's dirty bytes and pending objects every 0.25 s from the load's start, until the
    writers are done and every journal is empty (``drained_at``, s since the start) or ``timeout``."""
    loop = asyncio.get_running_loop()
    while loop.time() - out.t0 < timeout:
        try:
            reports = await _replication(urls)
        except OSError as exc:
            out.error(f"admin {type(exc).__name__}")
        else:
            now = loop.time() - out.t0
            out.dirty.append({"t": rounded(now, 2), **{n: int(r.get("dirty_bytes", 0)) for n, r in reports.items()}})
            out.reports = reports
            if writers_done.is_set() and all_drained(reports):
                out.drained_at = now
                return
        await asyncio.sleep(0.25)


# -- figures ---------------------------------------------------------------------------------------


def plots(result: dict[str, Any], directory: Path, suffix: str = "") -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    from harness.results import save_figure

    runs = result["runs"]
    names = [c for c in CONFIGS if c in runs]
    written: list[Path] = []

    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    jobs = sorted({j for c in names for j in runs[c]["summary"]["jobs"]["jobs_s"]})
    width = 0.8 / (len(jobs) + 1)
    for i, job in enumerate(jobs):
        ax.bar([k + (i - len(jobs) / 2) * width for k in range(len(names))],
               [runs[c]["summary"]["jobs"]["jobs_s"].get(job, float("nan")) for c in names], width, label=job)
    ax.bar([k + (len(jobs) / 2) * width for k in range(len(names))],
           [runs[c]["summary"]["jobs"]["avg_s"] for c in names], width, label="average", color="black")
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("job completion, s")
    ax.set_title("writer jobs: first request to last 200", fontsize=9)
    ax.legend(fontsize=7, ncol=3)
    written.append(directory / f"write_back_jobs{suffix}.png")
    save_figure(fig, written[-1])

    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    for c in names:
        lat = runs[c]["read_latencies_ms"]
        if lat:
            ax.plot(lat, [(i + 1) / len(lat) for i in range(len(lat))], label=f"{c} (p99 {runs[c]['summary']['reads']['p99_ms']:.0f} ms)")
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("foreground read latency, ms (cold GETs of 1-4 MiB through the lake link)")
    ax.set_ylabel("CDF")
    ax.legend(fontsize=7)
    written.append(directory / f"write_back_reads{suffix}.png")
    save_figure(fig, written[-1])

    fig, axes = plt.subplots(1, len(names), figsize=(4.6 * len(names), 3.8), squeeze=False, sharey=True)
    for ax, c in zip(axes[0], names):
        rows = runs[c]["timeline"]["objects"]
        ys = range(len(rows))
        ax.scatter([r["ack_s"] for r in rows], ys, s=8, label="acknowledged (200)")
        ax.scatter([r["lake_s"] if r["lake_s"] is not None else float("nan") for r in rows], ys, s=8, marker="x",
                   label="in the lake (HEAD 200)")
        dirty = runs[c].get("dirty_over_time") or []
        if dirty:
            twin = ax.twinx()
            twin.plot([d["t"] for d in dirty], [sum(v for k, v in d.items() if k != "t") / MiB for d in dirty],
                      color="grey", linewidth=1, label="dirty MiB (all nodes)")
            twin.set_ylabel("dirty journal MiB, all nodes", fontsize=7)
        ax.set_title(f"{c}: drain {runs[c]['summary']['drain_s']} s", fontsize=9)
        ax.set_xlabel("seconds since the load started")
        ax.legend(fontsize=7, loc="lower right")
    axes[0][0].set_ylabel("object (by ack time)")
    written.append(directory / f"write_back_timeline{suffix}.png")
    save_figure(fig, written[-1])
    return written


# -- main ----------------------------------------------------------------------------------------


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="benchmarks.write_back", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a smoke run: fewer, smaller files, a short read window")
    p.add_argument("--jobs", type=int, default=4, help="writer jobs (job j on node j mod 3)")
    p.add_argument("--files", type=int, default=6, help="files per job, PUT one after another")
    p.add_argument("--file-mib", type=int, default=8)
    p.add_argument("--readers", type=int, default=6, help="closed-loop readers of other data, over the nodes")
    p.add_argument("--read-seconds", type=float, default=25.0, help="the readers' window (at least the writers' run)")
    p.add_argument("--read-objects", type=int, default=260, help="objects of 1-4 MiB pre-loaded for the readers")
    p.add_argument("--lake-mbit", type=float, default=200.0, help="the lake link (tc)")
    p.add_argument("--cluster-mbit", type=float, default=1600.0, help="the cluster link (tc)")
    p.add_argument("--lake-budget", default=None, help="LAKEGATE_LAKE_BANDWIDTH (default: the lake link / 1.1)")
    p.add_argument("--dirty-soft", default="512MiB", help="LAKEGATE_WRITE_DIRTY_SOFT (T)")
    p.add_argument("--dirty-delta", default="256MiB", help="LAKEGATE_WRITE_DIRTY_DELTA")
    p.add_argument("--l1", default="256MiB")
    p.add_argument("--l2", default="1GiB")
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--seed", type=int, default=14)
    p.add_argument("--plot-dir", type=Path, default=None)
    p.add_argument("--output", type=Path, default=None)
    p.add_argument("--ceph-dir", type=Path, default=Path("/tmp/lakegate-bench-writeback-ceph"))
    p.add_argument("--rgw-port", type=int, default=7996)
    p.add_argument("--mon-port", type=int, default=41396)
    args = p.parse_args(argv)
    if args.quick:
        args.jobs, args.files, args.file_mib, args.readers = 3, 3, 4, 3
        args.read_seconds, args.read_objects = 8.0, 70
    if args.lake_budget is None:
        args.lake_budget = f"{args.lake_mbit / 1.1:.0f}Mbit/s"
    args.configs = [c for c in args.configs.split(",") if c]
    for c in args.configs:
        if c not in CONFIGS:
            p.error(f"unknown config {c!r}")
    root = Path(__file__).resolve().parents[1]
    if args.plot_dir is None:
        args.plot_dir = RESULTS_DIR if args.quick else root / "docs" / "benchmarks"
    if args.output is None:
        args.output = RESULTS_DIR / f"{NAME}_quick.json" if args.quick else root / "docs" / "benchmarks" / f"{NAME}.json"
    return args


async def _upload(lake: S3Endpoint, reads: Sequence[tuple[str, int]], seed: int) -> None:
    from harness.clients import gather_limited, make_client

    rng = random.Random(seed)
    async with make_client("httpx", lake) as s3:
        await s3.create_bucket(READ_BUCKET)
        await s3.create_bucket(WRITE_BUCKET)
        await gather_limited((s3.put_checked(READ_BUCKET, k, rng.randbytes(n)) for k, n in reads), 8)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.netns import enter_benchmark_namespace
    from harness.ceph import CephCluster

    args = _arguments(argv)
    started = time.monotonic()
    net = enter_benchmark_namespace(NAME, lake_mbit=10_000, cluster_mbit=args.cluster_mbit)  # lake shaped after the upload
    if net is None:
        return 2
    ceph = CephCluster(ceph_dir=args.ceph_dir, rgw_port=args.rgw_port, mon_port=args.mon_port,
                       ms_port_min=47800, ms_port_max=47899)
    reads = [(f"other/{i:05d}", n) for i, n in enumerate(read_sizes(args.read_objects, args.seed))]
    result: dict[str, Any] = {"benchmark": NAME, "revision": git_revision(), "machine": machine_info(),
                              "quick": args.quick, "loadavg_at_start": [rounded(x, 2) for x in os.getloadavg()]}
    runs: dict[str, dict[str, Any]] = {}
    try:
        lake = ceph.start()
        ceph.restart_rgw("tcp_nodelay=1")
        log(f"uploading {len(reads)} objects of 1-4 MiB ({sum(n for _, n in reads) / MiB:.0f} MiB), lake unshaped")
        run_async(_upload(lake, reads, args.seed))
        net.shape_lake_port(args.rgw_port)
        net.set_rate("lake", args.lake_mbit)
        bench = Bench(args, lake, net, reads)
        for index, config in enumerate(args.configs):
            runs[config] = bench.run(index, config)
    finally:
        ceph.stop()
        net.stop()
    summaries = {c: r["summary"] for c, r in runs.items()}
    result |= {
        "network": net.describe(),
        "config": {"nodes": NODES, "configs": args.configs, "jobs": args.jobs, "files_per_job": args.files,
                   "file_mib": args.file_mib, "readers": args.readers, "read_seconds": args.read_seconds,
                   "read_objects": args.read_objects, "read_object_bytes": "1-4 MiB, uniform, seeded",
                   "lake_mbit": args.lake_mbit, "cluster_mbit": args.cluster_mbit, "lake_budget": args.lake_budget,
                   "l1": args.l1, "l2": args.l2, "dirty_soft": args.dirty_soft, "dirty_delta": args.dirty_delta,
                   "replicas": "N = K = 2 (cluster default)", "seed": args.seed, "node_base_port": BASE_PORT},
        "summary": summaries,
        "targets": targets(summaries) if all(c in summaries for c in CONFIGS) else None,
        "runs": runs,
        "notes": [
            "read_p99_fc_over_no_fc (the target) compares the reads begun while background work ran (before every "
            "journal was empty; write-through: before the writers finished): after the drain the configs read "
            "alike, and the whole window's p99 (read_p99_whole_window_fc_over_no_fc) dilutes the difference by the "
            "drain's length",
            "replica completion timeline: the driver HEADs each acknowledged key not yet seen directly at the RGW "
            f"every {POLL_S} s (through the shaped lake link, so a HEAD may queue behind flushes and reads: the "
            "lake time is an upper bound, a fraction of a second late)",
            "drain_s: from the last PUT's 200 to pending_objects == 0 on every node (/_lakegate/admin/replication, "
            "polled every 0.25 s); write-through has nothing to drain",
            "lake_bytes_tc: the tc lake class from the load's start to the drain's end (both directions, headers, "
            "the readers' GETs, the flushes or write-through PUTs, and the poller's HEADs)",
            "every config has fresh nodes and fresh cache/journal folders; the readers read each object once per "
            "config (cold: every read crosses the lake link)",
        ],
        "wall_seconds": rounded(time.monotonic() - started),
        "loadavg_at_end": [rounded(x, 2) for x in os.getloadavg()],
    }
    emit_result(NAME, result, args.output)
    try:
        plots(result, args.plot_dir, "_quick" if args.quick else "")
    except ImportError as exc:
        log(f"no plots: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
