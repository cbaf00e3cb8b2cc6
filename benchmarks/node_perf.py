"""Node benchmark (issue 17): lakegate with 1 and 2 workers side by side with nginx proxy_cache +
slice in front of the same Ceph RGW, and a bare ASGI server as the floor.

Servers (all on loopback, all started here, one RGW behind the caches):

    lg1     `lakegate serve`, LAKEGATE_WORKERS=1, cache on (4 MiB blocks), access log off
    lg2     the same with LAKEGATE_WORKERS=2 (its own cache dir)
    nginx   nginx proxy_cache + slice 4m, worker_processes 2 (harness/nginx.py; how SigV4 gets
            through: the client signs for nginx's Host, nginx forwards Host and Authorization
            unchanged, RGW verifies them; hits never reach RGW and are not authenticated)
    bare    uvicorn + lakegate's HTTP protocol answering a constant 4 KiB body (harness/bare.py)

Workloads, every side in every round, the order of the sides flipping each round:

    hot_4KiB_c32     one 4 KiB object, 32 connections, wrk replaying a SigV4-signed GET: req/s,
                     p50/p99, server CPU per request (lg1, lg2, nginx, bare)
    hot_64MiB_x4     one 64 MiB object, 4 parallel curl streams: MB/s, server CPU s per GiB
                     (lg1, lg2, nginx)
    mappers_48       48 concurrent curl processes (curl --aws-sigv4), each reading one warm
                     1-8 MiB object: wall time (lg2, nginx)
    mixed_replay     a generated trace: 8 concurrent readers of hot 256 KiB objects (warm) while
                     4 readers fill cold 8 MiB objects (fresh each round, never read through
                     either cache): hit latency (p50/p99) apart from miss latency, and the same
                     hits' latency alone, just before, without fills (lg2, nginx)

Requests are signed in headers (wrk replays one signed GET; curl --aws-sigv4; the Python client),
never presigned: nginx's cache key holds the query string, so presigned URLs (a new signature
per URL) would miss every time. nginx forwards the signed request with Host unchanged and RGW
verifies it (harness/nginx.py); an unsigned GET of a cached object is a hit on nginx too.

Server CPU is the process tree's (psutil: the server and every descendant, so lakegate's
workers and nginx's workers and cache manager are all counted), over each run. Everything is
warmed first and checked: lakegate's hits by its admin counters, nginx's by X-Cache-Status.

    .venv/bin/python -m benchmarks.node_perf [--rounds 5] [--quick] [--plot out.png]

Needs wrk (harness.load.WRK_INSTALL), nginx with the slice module (harness.nginx.NGINX_INSTALL)
and curl; installs nothing. Progress on stderr; one JSON object on stdout, also written to
benchmarks/results/node_perf.json. Ceph: harness.ceph.CephCluster's defaults, started and
stopped here. Ports: 7601-7620 (lakegate, nginx, bare).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.bare import BareServer
from harness.ceph import CephCluster
from harness.clients import RawS3Client, run_async
from harness.endpoints import S3Endpoint
from harness.gateway import Gateway
from harness.load import WRK_INSTALL, WrkResult, run_wrk, wrk_binary
from harness.nginx import NGINX_INSTALL, NginxCache, nginx_binary
from harness.processes import CpuMeter, exit_on_signals, log
from harness.results import (
    RESULTS_DIR,
    emit_result,
    git_revision,
    machine_info,
    median,
    percentile,
    rounded,
    save_figure,
)
from harness.units import GiB, KiB, MiB

NAME = "node_perf"
SMALL = 4 * KiB
BIG = 64 * MiB
BIG_STREAMS = 4
CONNECTIONS = 32
MAPPERS = 48
HOT_SIZE = 256 * KiB
COLD_SIZE = 8 * MiB
PORTS = {"lg1": 7601, "lg2": 7602, "nginx": 7610, "bare": 7620}
SMALL_SIDES = ("lg1", "lg2", "nginx", "bare")
BIG_SIDES = ("lg1", "lg2", "nginx")
PAIR_SIDES = ("lg2", "nginx")
CURL_INSTALL = "apt-get install -y curl"
TARGETS = {
    "hot_4KiB_cpu_vs_bare_max": 2.0,
    "hot_4KiB_cpu_2w_vs_1w_max": 1.1,
    "hot_4KiB_rps_vs_nginx_min": 0.5,
    "hot_64MiB_cpu_vs_nginx_max": 1.5,
    "mixed_hit_p50_vs_nginx_max": 2.0,
}


class CheckFailed(RuntimeError):
    """A response was wrong: the figures would mean nothing."""


@dataclass
class Config:
    rounds: int = 5
    small_seconds: float = 6.0
    big_gets_per_stream: int = 8  # 2 GiB per side per round: nginx's CPU spans many 10 ms ticks
    mapper_objects: int = MAPPERS
    hot_objects: int = 16
    hot_readers: int = 8
    hot_gets_per_reader: int = 100
    cold_readers: int = 4
    cold_per_round: int = 12

    @classmethod
    def quick(cls) -> Config:
        return cls(rounds=1, small_seconds=2.0, big_gets_per_stream=1, hot_gets_per_reader=30, cold_per_round=4)


def rotate(sides: tuple[str, ...], round_no: int) -> tuple[str, ...]:
    """The sides' order in round ``round_no``: as given in even rounds, reversed in odd ones."""
    return sides if round_no % 2 == 0 else sides[::-1]


def mapper_sizes(count: int, seed: int = 17) -> list[int]:
    """Sizes of the mappers' objects: 1-8 MiB, seeded, whole KiB."""
    rng = random.Random(seed)
    return [rng.randint(1 * 1024, 8 * 1024) * KiB for _ in range(count)]


def mixed_trace(hot_keys: list[str], readers: int, gets_per_reader: int, seed: int) -> list[list[str]]:
    """Each hot reader's sequence of keys: uniform over the hot set, seeded."""
    rng = random.Random(seed)
    return [[rng.choice(hot_keys) for _ in range(gets_per_reader)] for _ in range(readers)]


def ratio(a: float, b: float) -> float:
    return rounded(a / b) if b else float("nan")


def target(value: float, bound: float, kind: str) -> dict[str, Any]:
    met = value <= bound if kind == "max" else value >= bound
    return {kind: bound, "value": value, "met": bool(met)}


# -- curl ------------------------------------------------------------------------------------------


def curl_command(endpoint: S3Endpoint, urls: list[str]) -> list[str]:
    """One curl process GETting ``urls`` in turn on one keep-alive connection, each signed by curl
    (SigV4, header auth: the same URL for every request, so nginx's cache key matches); it prints
    one "status bytes" line per URL."""
    cmd = ["curl", "--silent", "--show-error", "--globoff", "--aws-sigv4", f"aws:amz:{endpoint.region}:s3",
           "--user", f"{endpoint.access_key}:{endpoint.secret_key}", "--header",
           "x-amz-content-sha256: UNSIGNED-PAYLOAD", "--write-out", "%{http_code} %{size_download}\\n"]
    for url in urls:
        cmd += ["--output", "/dev/null", url]
    return cmd


def check_curl(out: subprocess.CompletedProcess[str] | tuple[int, str], sizes: list[int], what: str) -> None:
    code, stdout = (out.returncode, out.stdout) if isinstance(out, subprocess.CompletedProcess) else out
    lines = stdout.split()
    got = [(lines[i], int(lines[i + 1])) for i in range(0, len(lines) - 1, 2)]
    if code != 0 or got != [("200", n) for n in sizes]:
        raise CheckFailed(f"{what}: curl exit {code}, got {got[:6]}..., wanted {len(sizes)} x 200")


async def run_curls(commands: list[list[str]]) -> tuple[float, list[tuple[int, str]]]:
    """Start every command at once; (wall seconds until the last one ended, (exit, stdout) each)."""
    started = time.perf_counter()
    procs = [await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE,
                                                  stderr=asyncio.subprocess.PIPE) for cmd in commands]
    outs = await asyncio.gather(*(p.communicate() for p in procs))
    seconds = time.perf_counter() - started
    return seconds, [(p.returncode or 0, o.decode()) for p, (o, _) in zip(procs, outs, strict=True)]


# -- the run ---------------------------------------------------------------------------------------


@dataclass
class Data:
    bucket: str = field(default_factory=lambda: f"lakegate-nodeperf-{uuid.uuid4().hex[:10]}")
    small_key: str = "hot/small-4KiB"
    big_key: str = "hot/big-64MiB"
    mapper_keys: list[str] = field(default_factory=list)
    mapper_sizes: list[int] = field(default_factory=list)
    hot_keys: list[str] = field(default_factory=list)
    cold_keys: list[list[str]] = field(default_factory=list)  # per round


class Runner:
    def __init__(self, cfg: Config, lake: S3Endpoint, servers: dict[str, Any], wrk: str) -> None:
        self.cfg = cfg
        self.lake = lake
        self.servers = servers  # side -> Gateway | NginxCache | BareServer
        self.wrk = wrk
        # lakegate: its tenant's keys; nginx (and bare, which ignores them): the lake's, passed through
        self.endpoints = {side: s.endpoint() if isinstance(s, Gateway) else
                          S3Endpoint(s.url, lake.access_key, lake.secret_key, lake.region)
                          for side, s in servers.items()}
        self.small: dict[str, list[tuple[WrkResult, float]]] = {s: [] for s in SMALL_SIDES}
        self.big: dict[str, list[tuple[float, int, float]]] = {s: [] for s in BIG_SIDES}
        self.mappers: dict[str, list[float]] = {s: [] for s in PAIR_SIDES}
        self.hits: dict[str, list[float]] = {s: [] for s in PAIR_SIDES}  # while cold fills run
        self.hits_alone: dict[str, list[float]] = {s: [] for s in PAIR_SIDES}  # the same trace, no fills
        self.misses: dict[str, list[float]] = {s: [] for s in PAIR_SIDES}
        self.warnings: list[str] = []

    def _cpu(self, side: str) -> CpuMeter:
        meter = CpuMeter([self.servers[side].pid], tree=True)
        meter.start()
        return meter

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        log("WARNING: " + message)

    # -- workloads --

    def hot_small(self, side: str, data: Data, seconds: float, record: bool = True) -> WrkResult:
        client = RawS3Client(self.endpoints[side])
        url = client.url(data.bucket, data.small_key)
        headers = client.sign("GET", url)
        headers["User-Agent"] = "lakegate-bench-wrk"
        meter = self._cpu(side)
        result = run_wrk(url, headers, connections=CONNECTIONS, duration=seconds, binary=self.wrk)
        cpu = meter.stop()
        if any(result.errors.values()) or not result.requests or result.bytes < result.requests * SMALL:
            raise CheckFailed(f"{side} wrk: {result.requests} requests, {result.bytes} bytes, errors {result.errors}")
        if record:
            self.small[side].append((result, cpu))
        return result

    async def hot_big(self, side: str, data: Data, per_stream: int, record: bool = True) -> float:
        ep = self.endpoints[side]
        url = RawS3Client(ep).url(data.bucket, data.big_key)
        meter = self._cpu(side)
        seconds, outs = await run_curls([curl_command(ep, [url] * per_stream) for _ in range(BIG_STREAMS)])
        cpu = meter.stop()
        for out in outs:
            check_curl(out, [BIG] * per_stream, f"{side} 64 MiB")
        total = BIG * BIG_STREAMS * per_stream
        if record:
            self.big[side].append((seconds, total, cpu))
        return total / seconds

    async def map_all(self, side: str, data: Data, record: bool = True) -> float:
        ep = self.endpoints[side]
        urls = [RawS3Client(ep).url(data.bucket, key) for key in data.mapper_keys]
        seconds, outs = await run_curls([curl_command(ep, [url]) for url in urls])
        for out, size in zip(outs, data.mapper_sizes, strict=True):
            check_curl(out, [size], f"{side} mapper")
        if record:
            self.mappers[side].append(seconds)
        return seconds

    async def mixed(self, side: str, data: Data, round_no: int) -> tuple[list[float], list[float]]:
        cfg = self.cfg
        client = RawS3Client(self.endpoints[side], max_connections=64)
        hits: list[float] = []
        misses: list[float] = []
        traces = mixed_trace(data.hot_keys, cfg.hot_readers, cfg.hot_gets_per_reader, seed=round_no)
        cold = list(data.cold_keys[round_no])

        async def hot_reader(keys: list[str]) -> None:
            for key in keys:
                got = await client.timed_get(data.bucket, key)
                if got.status != 200 or got.received != HOT_SIZE:
                    raise CheckFailed(f"{side} hot GET {key}: HTTP {got.status}, {got.received} bytes")
                hits.append(got.total)

        async def cold_reader() -> None:
            while cold:
                key = cold.pop()
                got = await client.timed_get(data.bucket, key)
                if got.status != 200 or got.received != COLD_SIZE:
                    raise CheckFailed(f"{side} cold GET {key}: HTTP {got.status}, {got.received} bytes")
                misses.append(got.total)

        try:
            await asyncio.gather(*(hot_reader(t) for t in traces))  # alone first: the hits' own latency
            self.hits_alone[side].extend(hits)
            hits.clear()
            await asyncio.gather(*(hot_reader(t) for t in traces), *(cold_reader() for _ in range(cfg.cold_readers)))
        finally:
            await client.aclose()
        self.hits[side].extend(hits)
        self.misses[side].extend(misses)
        return hits, misses

    # -- phases --

    async def run(self) -> None:
        data = Data()
        setup = RawS3Client(self.lake, max_connections=16)
        try:
            await self._upload(setup, data)
            await self._warm(data)
            for round_no in range(self.cfg.rounds):
                log(f"round {round_no + 1}/{self.cfg.rounds}")
                line = []
                for side in rotate(SMALL_SIDES, round_no):
                    r = self.hot_small(side, data, self.cfg.small_seconds)
                    line.append(f"{side} {r.rps:6.0f}/s p50 {r.latency_ms['p50']:.2f} ms "
                                f"{self.small[side][-1][1] / r.requests * 1e6:4.0f} us cpu")
                log("  hot_4KiB_c32  " + " | ".join(line))
                line = []
                for side in rotate(BIG_SIDES, round_no):
                    mbps = await self.hot_big(side, data, self.cfg.big_gets_per_stream)
                    line.append(f"{side} {mbps / 1e6:6.0f} MB/s")
                log("  hot_64MiB_x4  " + " | ".join(line))
                line = []
                for side in rotate(PAIR_SIDES, round_no):
                    line.append(f"{side} {await self.map_all(side, data):.2f} s")
                log("  mappers_48    " + " | ".join(line))
                line = []
                for side in rotate(PAIR_SIDES, round_no):
                    hits, misses = await self.mixed(side, data, round_no)
                    alone = self.hits_alone[side][-len(hits):]
                    line.append(f"{side} hit p50 {percentile(hits, 50) * 1e3:.2f} ms p99 {percentile(hits, 99) * 1e3:.2f}"
                                f" (alone p50 {percentile(alone, 50) * 1e3:.2f})"
                                f" miss p50 {percentile(misses, 50) * 1e3:.0f} ms")
                log("  mixed_replay  " + " | ".join(line))
            self._check_hits()
        finally:
            await setup.aclose()  # its idle connections: RGW may have closed them during the rounds
            try:
                log(f"deleting bucket {data.bucket}")
                await setup.delete_bucket_with_objects(data.bucket)
            except Exception as exc:  # noqa: BLE001 - report, and carry on stopping
                log(f"could not delete bucket {data.bucket}: {exc!r}")
            await setup.aclose()

    async def _upload(self, setup: RawS3Client, data: Data) -> None:
        cfg = self.cfg
        data.mapper_sizes = mapper_sizes(cfg.mapper_objects)
        data.mapper_keys = [f"map/obj-{i:03d}" for i in range(cfg.mapper_objects)]
        data.hot_keys = [f"mixed/hot-{i:03d}" for i in range(cfg.hot_objects)]
        data.cold_keys = [[f"mixed/cold-r{r}-{i:03d}" for i in range(cfg.cold_per_round)] for r in range(cfg.rounds)]
        total = SMALL + BIG + sum(data.mapper_sizes) + cfg.hot_objects * HOT_SIZE + cfg.rounds * cfg.cold_per_round * COLD_SIZE
        log(f"creating bucket {data.bucket}: {total / MiB:.0f} MiB in {3 + len(data.mapper_keys) + cfg.hot_objects + cfg.rounds * cfg.cold_per_round} objects, PUT straight to RGW")
        await setup.create_bucket(data.bucket)
        base = os.urandom(BIG)
        jobs = [(data.small_key, base[:SMALL]), (data.big_key, base)]
        jobs += [(k, base[i * KiB: i * KiB + n]) for i, (k, n) in enumerate(zip(data.mapper_keys, data.mapper_sizes, strict=True))]
        jobs += [(k, base[i * KiB: i * KiB + HOT_SIZE]) for i, k in enumerate(data.hot_keys)]
        jobs += [(k, base[i * KiB: i * KiB + COLD_SIZE]) for i, k in enumerate(sum(data.cold_keys, []))]
        sem = asyncio.Semaphore(8)

        async def put(key: str, body: bytes) -> None:
            async with sem:
                await setup.put_checked(data.bucket, key, body)

        await asyncio.gather(*(put(k, b) for k, b in jobs))

    async def _warm(self, data: Data) -> None:
        log("warm-up: every hot object through every cache, twice; every workload once")
        for side in self.servers:
            if side == "bare":
                continue
            for _ in range(2):
                await self.hot_big(side, data, 1, record=False)
                if side in PAIR_SIDES:
                    await self.map_all(side, data, record=False)
                client = RawS3Client(self.endpoints[side])
                try:
                    for key in [data.small_key, *data.hot_keys]:
                        status, _, _, _ = await client.get(data.bucket, key)
                        if status != 200:
                            raise CheckFailed(f"{side} warm GET {key}: HTTP {status}")
                finally:
                    await client.aclose()
                await asyncio.sleep(0.5)  # the last blocks' cache puts run after the bodies
        await self._check_nginx_hits(data)
        self._counters_before = {side: self.servers[side].tenant_cache_counters() for side in ("lg1", "lg2")}
        for side in SMALL_SIDES:
            self.hot_small(side, data, 1.0, record=False)

    async def _check_nginx_hits(self, data: Data) -> None:
        client = RawS3Client(self.endpoints["nginx"])
        try:
            for key in (data.small_key, data.big_key, data.hot_keys[0], data.mapper_keys[0]):
                status, headers, _ = await client.request("GET", client.url(data.bucket, key))
                cache = headers.get("x-cache-status", "")
                if status != 200 or cache != "HIT":
                    raise CheckFailed(f"nginx GET {key} after warm-up: HTTP {status}, X-Cache-Status {cache!r}")
        finally:
            await client.aclose()

    def _check_hits(self) -> None:
        """Across the measured rounds lakegate read the lake only for the cold objects."""
        cold_blocks = self.cfg.rounds * self.cfg.cold_per_round * (COLD_SIZE // (4 * MiB))
        for side in ("lg1", "lg2"):
            after = self.servers[side].tenant_cache_counters()
            before = self._counters_before[side]
            lake_gets = after.get("lake_gets", 0) - before.get("lake_gets", 0)
            allowed = cold_blocks if side in PAIR_SIDES else 0
            if lake_gets > allowed:
                self._warn(f"{side} made {lake_gets} lake GETs during the rounds (cold blocks: {allowed}): "
                           "some hot reads were not hits")

    # -- figures --

    def summary(self) -> dict[str, Any]:
        small: dict[str, Any] = {}
        for side, runs in self.small.items():
            small[side] = {
                "rps": rounded(median([r.rps for r, _ in runs]), 0),
                "p50_ms": rounded(median([r.latency_ms["p50"] for r, _ in runs])),
                "p99_ms": rounded(median([r.latency_ms["p99"] for r, _ in runs])),
                "cpu_us_per_request": rounded(median([cpu / r.requests * 1e6 for r, cpu in runs]), 1),
            }
        big = {side: {"MBps": rounded(median([n / s / 1e6 for s, n, _ in runs]), 1),
                      "cpu_s_per_GiB": rounded(median([cpu / (n / GiB) for _, n, cpu in runs]), 4)}
               for side, runs in self.big.items()}
        mappers = {side: {"wall_s": rounded(median(runs))} for side, runs in self.mappers.items()}
        mixed = {side: {"hit_p50_ms": rounded(percentile(self.hits[side], 50) * 1e3),
                        "hit_p99_ms": rounded(percentile(self.hits[side], 99) * 1e3),
                        "hit_alone_p50_ms": rounded(percentile(self.hits_alone[side], 50) * 1e3),
                        "hit_alone_p99_ms": rounded(percentile(self.hits_alone[side], 99) * 1e3),
                        "miss_p50_ms": rounded(percentile(self.misses[side], 50) * 1e3),
                        "miss_p99_ms": rounded(percentile(self.misses[side], 99) * 1e3),
                        "hits": len(self.hits[side]), "misses": len(self.misses[side])} for side in PAIR_SIDES}
        s, b = small, big
        ratios = {
            "hot_4KiB_cpu_lg1_vs_bare": ratio(s["lg1"]["cpu_us_per_request"], s["bare"]["cpu_us_per_request"]),
            "hot_4KiB_cpu_lg2_vs_bare": ratio(s["lg2"]["cpu_us_per_request"], s["bare"]["cpu_us_per_request"]),
            "hot_4KiB_cpu_lg2_vs_lg1": ratio(s["lg2"]["cpu_us_per_request"], s["lg1"]["cpu_us_per_request"]),
            "hot_4KiB_rps_lg2_vs_lg1": ratio(s["lg2"]["rps"], s["lg1"]["rps"]),
            "hot_4KiB_rps_lg1_vs_nginx": ratio(s["lg1"]["rps"], s["nginx"]["rps"]),
            "hot_4KiB_rps_lg2_vs_nginx": ratio(s["lg2"]["rps"], s["nginx"]["rps"]),
            "hot_4KiB_p50_lg2_vs_nginx": ratio(s["lg2"]["p50_ms"], s["nginx"]["p50_ms"]),
            "hot_64MiB_cpu_lg1_vs_nginx": ratio(b["lg1"]["cpu_s_per_GiB"], b["nginx"]["cpu_s_per_GiB"]),
            "hot_64MiB_cpu_lg2_vs_nginx": ratio(b["lg2"]["cpu_s_per_GiB"], b["nginx"]["cpu_s_per_GiB"]),
            "hot_64MiB_MBps_lg2_vs_nginx": ratio(b["lg2"]["MBps"], b["nginx"]["MBps"]),
            "mappers_48_time_lg2_vs_nginx": ratio(mappers["lg2"]["wall_s"], mappers["nginx"]["wall_s"]),
            "mixed_hit_p50_lg2_vs_nginx": ratio(mixed["lg2"]["hit_p50_ms"], mixed["nginx"]["hit_p50_ms"]),
            "mixed_hit_p99_lg2_vs_nginx": ratio(mixed["lg2"]["hit_p99_ms"], mixed["nginx"]["hit_p99_ms"]),
            "mixed_hit_p50_with_fills_vs_alone_lg2": ratio(mixed["lg2"]["hit_p50_ms"], mixed["lg2"]["hit_alone_p50_ms"]),
            "mixed_hit_p50_with_fills_vs_alone_nginx": ratio(mixed["nginx"]["hit_p50_ms"], mixed["nginx"]["hit_alone_p50_ms"]),
            "mixed_miss_p50_lg2_vs_nginx": ratio(mixed["lg2"]["miss_p50_ms"], mixed["nginx"]["miss_p50_ms"]),
        }
        return {"hot_4KiB_c32": small, "hot_64MiB_x4": big, "mappers_48": mappers, "mixed_replay": mixed,
                "ratios": ratios}


def targets_of(results: dict[str, Any]) -> dict[str, Any]:
    r, s = results["ratios"], results["hot_4KiB_c32"]
    worst_vs_bare = max(r["hot_4KiB_cpu_lg1_vs_bare"], r["hot_4KiB_cpu_lg2_vs_bare"])
    return {
        "hot_4KiB_cpu_per_request_vs_bare": target(worst_vs_bare, TARGETS["hot_4KiB_cpu_vs_bare_max"], "max"),
        "hot_4KiB_cpu_per_request_2w_vs_1w": target(r["hot_4KiB_cpu_lg2_vs_lg1"], TARGETS["hot_4KiB_cpu_2w_vs_1w_max"], "max"),
        "hot_4KiB_more_rps_with_2w": {"lg1_rps": s["lg1"]["rps"], "lg2_rps": s["lg2"]["rps"],
                                      "met": bool(s["lg2"]["rps"] > s["lg1"]["rps"])},
        "hot_4KiB_rps_vs_nginx": target(r["hot_4KiB_rps_lg2_vs_nginx"], TARGETS["hot_4KiB_rps_vs_nginx_min"], "min"),
        "hot_64MiB_cpu_per_GiB_vs_nginx": target(r["hot_64MiB_cpu_lg2_vs_nginx"], TARGETS["hot_64MiB_cpu_vs_nginx_max"], "max"),
        "mixed_hit_p50_vs_nginx": target(r["mixed_hit_p50_lg2_vs_nginx"], TARGETS["mixed_hit_p50_vs_nginx_max"], "max"),
    }


# -- plot ------------------------------------------------------------------------------------------


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    r = result["results"]
    colors = {"lg1": "tab:cyan", "lg2": "tab:blue", "nginx": "tab:green", "bare": "tab:gray"}
    panels = [
        ("hot 4 KiB, 32 conns\nrequests/s", SMALL_SIDES, [r["hot_4KiB_c32"][s]["rps"] for s in SMALL_SIDES]),
        ("hot 4 KiB\nserver CPU us/request", SMALL_SIDES, [r["hot_4KiB_c32"][s]["cpu_us_per_request"] for s in SMALL_SIDES]),
        ("hot 64 MiB, 4 streams\nMB/s", BIG_SIDES, [r["hot_64MiB_x4"][s]["MBps"] for s in BIG_SIDES]),
        ("hot 64 MiB\nserver CPU s/GiB", BIG_SIDES, [r["hot_64MiB_x4"][s]["cpu_s_per_GiB"] for s in BIG_SIDES]),
        ("48 curl mappers, warm 1-8 MiB\nwall s", PAIR_SIDES, [r["mappers_48"][s]["wall_s"] for s in PAIR_SIDES]),
        ("mixed replay: hit p50 / p99\nms", [f"{s} {q}" for s in PAIR_SIDES for q in ("p50", "p99")],
         [r["mixed_replay"][s][f"hit_{q}_ms"] for s in PAIR_SIDES for q in ("p50", "p99")]),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(18, 4.2))
    for ax, (title, labels, values) in zip(axes, panels, strict=True):
        bars = ax.bar(list(labels), values, color=[colors[label.split()[0]] for label in labels])
        ax.bar_label(bars, labels=[f"{v:,.0f}" if v >= 100 else f"{v:.3g}" for v in values], padding=2, fontsize=7)
        ax.set_title(title, fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
        ax.set_ylim(0, max(values) * 1.2 or 1)
    met = sum(t["met"] for t in result["targets"].values())
    fig.suptitle(f"lakegate (lg1/lg2: 1/2 workers) vs nginx proxy_cache + slice vs bare uvicorn, same RGW; "
                 f"{result['machine']['cores']} cores, {result['rounds']} rounds; targets met {met}/{len(result['targets'])}",
                 fontsize=10)
    save_figure(fig, path)


# -- main ------------------------------------------------------------------------------------------


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="benchmarks.node_perf", description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, help="rounds (default 5; --quick: 1)")
    p.add_argument("--quick", action="store_true", help="a short smoke run")
    p.add_argument("--plot", type=Path, metavar="PNG", help="also write a bar chart")
    p.add_argument("--output", type=Path, default=RESULTS_DIR / f"{NAME}.json", help="JSON result file")
    return p.parse_args(argv)


def missing_tools() -> list[str]:
    missing = []
    if wrk_binary() is None:
        missing.append(f"wrk: {WRK_INSTALL}")
    if nginx_binary() is None:
        missing.append(f"nginx: {NGINX_INSTALL}")
    if shutil.which("curl") is None:
        missing.append(f"curl: {CURL_INSTALL}")
    return missing


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    missing = missing_tools()
    if missing:
        print("node_perf: missing tools; install them with:\n    " + "\n    ".join(missing), file=sys.stderr)
        return 2
    wrk = wrk_binary()
    assert wrk is not None
    exit_on_signals()
    cfg = Config.quick() if args.quick else Config()
    if args.rounds is not None:
        cfg.rounds = args.rounds
    started = time.monotonic()
    machine = machine_info()
    servers: dict[str, Any] = {}
    ceph = CephCluster()
    try:
        lake = ceph.start()
        ceph.restart_rgw("tcp_nodelay=1")
        for side, workers in (("lg1", 1), ("lg2", 2)):
            servers[side] = Gateway(lake, port=PORTS[side], env={
                "LAKEGATE_ACCESS_LOG": "false", "LAKEGATE_WORKERS": str(workers),
                "LAKEGATE_CACHE_CAPACITY": str(8 * GiB)})
            servers[side].start()
        servers["nginx"] = NginxCache(lake.url, port=PORTS["nginx"], workers=2)
        servers["nginx"].start()
        servers["bare"] = BareServer(PORTS["bare"], SMALL)
        servers["bare"].start()
        runner = Runner(cfg, lake, servers, wrk)
        run_async(runner.run())
    except CheckFailed as exc:
        log(f"FAILED, a response was wrong: {exc}")
        return 1
    finally:
        for server in reversed(list(servers.values())):
            server.stop()
        ceph.stop()

    results = runner.summary()
    targets = targets_of(results)
    machine["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    result: dict[str, Any] = {
        "benchmark": NAME,
        "machine": machine,
        "rounds": cfg.rounds,
        "results": results,
        "targets": targets,
        "all_targets_met": all(t["met"] for t in targets.values()),
        "config": {
            "quick": args.quick,
            "lake": "own single-node Ceph RGW (memstore, harness.ceph defaults), beast tcp_nodelay=1",
            "lakegate": "`lakegate serve`, LAKEGATE_WORKERS=1 (lg1) / 2 (lg2), cache on, 4 MiB blocks, capacity 8 GiB, "
                        "access log off; lg2 is the side compared with nginx",
            "nginx": "proxy_cache + slice 4m, worker_processes 2, proxy_cache_lock, sendfile, cache key $uri$slice_range, "
                     "Host and Authorization passed through to RGW (harness/nginx.py)",
            "bare": "uvicorn + gateway.httpserver.LakegateHttpProtocol, a constant 4 KiB body (harness/bare.py)",
            "hot_4KiB": f"wrk, 1 thread, {CONNECTIONS} connections, {cfg.small_seconds:g} s per side per round, one "
                        "SigV4-signed GET replayed",
            "hot_64MiB": f"{BIG_STREAMS} curl processes x {cfg.big_gets_per_stream} GETs (curl --aws-sigv4)",
            "mappers": f"{cfg.mapper_objects} curl processes at once, one warm 1-8 MiB object each",
            "mixed": f"{cfg.hot_readers} readers x {cfg.hot_gets_per_reader} GETs of {cfg.hot_objects} warm "
                     f"{HOT_SIZE // KiB} KiB objects while {cfg.cold_readers} readers GET {cfg.cold_per_round} cold "
                     f"{COLD_SIZE // MiB} MiB objects (fresh per round), after the same hot trace alone (hit_alone_*); "
                     "one asyncio client, keep-alive; latency = request sent -> last byte",
            "cpu": "server process tree (psutil, descendants included) utime+stime over each run",
            "statistic": "median over rounds; mixed: percentiles over all rounds' requests; ratio = lakegate / other",
        },
        "lakegate_revision": git_revision(),
        "duration_s": round(time.monotonic() - started, 1),
    }
    if runner.warnings:
        result["warnings"] = runner.warnings
    emit_result(NAME, result, args.output)
    if args.plot:
        plot(result, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
