"""Hot-read benchmark: lakegate's L1 cache (hits) and cold reads versus the same GETs straight to RGW.

One ``lakegate serve`` (one worker; cache on, 4 MiB blocks, cache dir on local disk, access log
off, defaults otherwise) in front of its own single-node Ceph RGW (memstore, beast with
tcp_nodelay=1). Workloads, each measured on both sides in the same run:

    hot_64MiB_x4   one 64 MiB object, 4 parallel streams, every block an L1 hit   MB/s, CPU s/GiB
    hot_4KiB_c32   one 4 KiB object, 32 connections, SigV4-signed GETs (wrk)      req/s, p50/p99
    cold_ttfb      N fresh objects (never read through the gateway), one GET each  time to first byte
                   (also through a TCP relay that only forwards bytes, and through the gateway
                   with the cache skipped: what any hop costs here, and what caching adds)

Hot workloads: direct and gateway runs alternate within every round (the order flips each
round); figures are medians over rounds, ``ratio`` = gateway / direct. The cache is warmed first
and every gateway run is checked against /_lakegate/admin/stats: each 64 MiB GET must be 16 L1
block hits with no block miss or lake GET, each 4 KiB GET one hit. Cold: each object is read
once per side, the side going first alternating per object; TTFB = request sent -> first body
byte (signing and connecting excluded, keep-alive connections), and each gateway read is checked
to have fetched all its blocks from the lake (cold) - while bodies are compared by SHA-256.

The 4 KiB load generator is wrk (C, epoll; ``apt-get install -y wrk``) replaying one SigV4-signed
GET per side (re-signed each round; valid for the 15 min clock-skew window; each server still
verifies the signature on every request): a Python client signing each request cannot produce
5,000 req/s on this machine. wrk's CPU is reported as client CPU.

``--profile DIR`` then attaches py-spy to the gateway for one more run of each hot workload
(after the measurements, so sampling never slows the figures above) and writes flame graphs
and collapsed stacks to DIR, and a breakdown of where the gateway's time goes to the JSON.

    .venv/bin/python -m benchmarks.hot_read [--rounds 5] [--quick] [--plot out.png] [--profile DIR]

Progress on stderr; one JSON object on stdout, also written to benchmarks/results/hot_read.json.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.relay import TcpRelay
from harness.ceph import CephCluster
from harness.clients import RawS3Client, TimedGet, run_async
from harness.endpoints import S3Endpoint
from harness.gateway import Gateway
from harness.load import (
    WRK_INSTALL,
    PySpy,
    WrkResult,
    collapsed_stacks,
    py_spy_binary,
    run_wrk,
    wrk_binary,
    wrk_version,
)
from harness.processes import CpuMeter, exit_on_signals, log, process_cpu_seconds
from harness.results import (
    RESULTS_DIR,
    emit_result,
    filesystem_of,
    git_revision,
    machine_info,
    median,
    percentile,
    rounded,
)
from harness.units import GiB, KiB, MiB

NAME = "hot_read"
BIG = 64 * MiB
SMALL = 4 * KiB
BLOCK = 4 * MiB  # lakegate's default block size (not overridden here)
BIG_STREAMS = 4
SMALL_CONNECTIONS = 32
SIDES = ("direct", "gateway")
# Cold reads, each object once per side. "relay": a TCP relay that only forwards bytes to RGW
# (benchmarks/relay.py), the cost of any process in the path here; "passthrough": lakegate
# with the cache skipped (Cache-Control: no-cache), the cost of its S3 front end alone.
COLD_SIDES = ("direct", "relay", "gateway", "passthrough")
NO_CACHE = {"Cache-Control": "no-cache"}
TARGETS = {
    "hot_64MiB_ratio_min": 1.5,
    "hot_4KiB_rps_min": 5000.0,
    "hot_4KiB_p99_ms_max": 20.0,
    "cold_ttfb_ratio_max": 1.5,
}
GATEWAY_DEFAULT_CAPACITY = 4 * GiB  # LAKEGATE_CACHE_CAPACITY's default


class CheckFailed(RuntimeError):
    """A response was wrong: the benchmark's figures would mean nothing."""


@dataclass
class Config:
    rounds: int = 5
    big_gets_per_stream: int = 4  # 64 MiB GETs per stream per side per round (4 streams)
    small_seconds: float = 5.0  # wrk run per side per round
    wrk_threads: int = 1
    cold_objects: int = 24
    cold_size: int = 64 * MiB

    @classmethod
    def quick(cls) -> Config:
        return cls(rounds=1, big_gets_per_stream=2, small_seconds=2.0, cold_objects=4)


@dataclass
class Data:
    bucket: str
    big_key: str
    big_sha256: str
    small_key: str
    small_body: bytes
    cold_keys: list[str]
    cold_sha256: dict[str, str] = field(default_factory=dict)

    @classmethod
    def make(cls, cfg: Config) -> Data:
        return cls(
            bucket=f"lakegate-hotread-{uuid.uuid4().hex[:10]}",
            big_key="hot/big-64MiB",
            big_sha256="",
            small_key="hot/small-4KiB",
            small_body=os.urandom(SMALL),
            cold_keys=[f"cold/obj-{i:03d}" for i in range(cfg.cold_objects)],
        )


@dataclass
class BigSample:
    seconds: float
    bytes: int
    cpu: dict[str, float]  # process -> CPU seconds during the run
    cache: dict[str, int] = field(default_factory=dict)  # gateway side: counter deltas


@dataclass
class SmallSample:
    wrk: WrkResult
    cpu: dict[str, float]
    cache: dict[str, int] = field(default_factory=dict)


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in set(after) | set(before) if after.get(k, 0) != before.get(k, 0)}


# -- the run -------------------------------------------------------------------------------------


class Runner:
    def __init__(self, cfg: Config, lake: S3Endpoint, gateway: Gateway, pids: dict[str, int], wrk: str,
                 relay_url: str) -> None:
        self.cfg = cfg
        self.gateway = gateway
        self.endpoints = {"direct": lake, "gateway": gateway.endpoint()}
        self.relay = S3Endpoint(relay_url, lake.access_key, lake.secret_key, lake.region)
        self.pids = pids  # "gateway", maybe "rgw"
        self.wrk = wrk
        self.big: dict[str, list[BigSample]] = {s: [] for s in SIDES}
        self.small: dict[str, list[SmallSample]] = {s: [] for s in SIDES}
        self.cold: dict[str, list[TimedGet]] = {s: [] for s in COLD_SIDES}
        self.cold_waits: list[float] = []  # seconds waited for the gateway's background work
        self.cold_cache: list[dict[str, int]] = []  # gateway cold GETs: counter deltas
        self.warm_check: dict[str, Any] = {}
        self.access_log_lines = 0
        self.profile: dict[str, Any] | None = None
        self.warnings: list[str] = []

    def _meters(self) -> dict[str, CpuMeter]:
        meters = {name: CpuMeter([pid]) for name, pid in self.pids.items()}
        for meter in meters.values():
            meter.start()
        return meters

    # -- workloads --

    async def hot_big(self, client: RawS3Client, data: Data, side: str, per_stream: int, record: bool = True) -> BigSample:
        async def stream() -> int:
            got = 0
            for _ in range(per_stream):
                status, n, _, _ = await client.get(data.bucket, data.big_key)
                if status != 200 or n != BIG:
                    raise CheckFailed(f"{side} GET {data.big_key}: HTTP {status}, {n} of {BIG} bytes")
                got += n
            return got

        before = self.gateway.tenant_cache_counters() if side == "gateway" else {}
        meters = self._meters()
        client_meter = CpuMeter(include_self=True)
        client_meter.start()
        started = time.perf_counter()
        total = sum(await asyncio.gather(*(stream() for _ in range(BIG_STREAMS))))
        seconds = time.perf_counter() - started
        cpu = {name: m.stop() for name, m in meters.items()}
        cpu["client"] = client_meter.stop()
        sample = BigSample(seconds, total, cpu)
        if side == "gateway":
            sample.cache = _delta(self.gateway.tenant_cache_counters(), before)
            gets = BIG_STREAMS * per_stream
            hits, misses = sample.cache.get("hits", 0), sample.cache.get("misses", 0) + sample.cache.get("coalesced", 0)
            if hits != gets * (BIG // BLOCK) or misses or sample.cache.get("lake_gets", 0):
                self.warnings.append(f"hot 64 MiB gateway run was not all L1 hits: {sample.cache}")
                log("WARNING: " + self.warnings[-1])
        if record:
            self.big[side].append(sample)
        return sample

    def hot_small(self, client: RawS3Client, data: Data, side: str, seconds: float, record: bool = True) -> SmallSample:
        url = client.url(data.bucket, data.small_key)
        headers = client.sign("GET", url)  # signed once per run, replayed by wrk
        headers["User-Agent"] = "lakegate-bench-wrk"
        before = self.gateway.tenant_cache_counters() if side == "gateway" else {}
        meters = self._meters()
        result = run_wrk(url, headers, connections=SMALL_CONNECTIONS, duration=seconds,
                         threads=self.cfg.wrk_threads, binary=self.wrk)
        cpu = {name: m.stop() for name, m in meters.items()}
        cpu["client"] = result.cpu_seconds
        sample = SmallSample(result, cpu)
        if any(result.errors.values()) or result.requests == 0:
            raise CheckFailed(f"{side} wrk GET {data.small_key}: {result.requests} requests, errors {result.errors}")
        if result.bytes < result.requests * SMALL:
            raise CheckFailed(f"{side} wrk GET {data.small_key}: {result.bytes} bytes for {result.requests} responses")
        if side == "gateway":
            sample.cache = _delta(self.gateway.tenant_cache_counters(), before)
            # wrk counts the responses that completed within its duration; the gateway may have
            # served up to one more per connection
            hits = sample.cache.get("hits", 0)
            if not result.requests <= hits <= result.requests + SMALL_CONNECTIONS or sample.cache.get("misses", 0):
                self.warnings.append(f"hot 4 KiB gateway run ({result.requests} requests) was not all L1 hits: {sample.cache}")
                log("WARNING: " + self.warnings[-1])
        if record:
            self.small[side].append(sample)
        return sample

    async def check_small(self, client: RawS3Client, data: Data, side: str) -> None:
        status, n, _, body = await client.get(data.bucket, data.small_key, keep_body=True)
        if status != 200 or body != data.small_body:
            raise CheckFailed(f"{side} GET {data.small_key}: HTTP {status}, {n} bytes, body differs")

    async def check_big(self, client: RawS3Client, data: Data, side: str) -> None:
        status, n, digest, _ = await client.get(data.bucket, data.big_key, sha256=True)
        if status != 200 or n != BIG or digest != data.big_sha256:
            raise CheckFailed(f"{side} GET {data.big_key}: HTTP {status}, {n} bytes, sha256 {digest} != {data.big_sha256}")

    async def cold_get(self, client: RawS3Client, data: Data, side: str, key: str) -> TimedGet:
        before = self.gateway.tenant_cache_counters() if side == "gateway" else {}
        got = await client.timed_get(data.bucket, key, sha256=True, headers=NO_CACHE if side == "passthrough" else None)
        if got.status != 200 or got.received != self.cfg.cold_size or got.sha256 != data.cold_sha256[key]:
            raise CheckFailed(f"{side} GET {key}: HTTP {got.status}, {got.received} bytes, sha256 {got.sha256}")
        if side == "gateway":
            await asyncio.sleep(0.2)  # let the last blocks reach L1 before reading the counters
            delta = _delta(self.gateway.tenant_cache_counters(), before)
            self.cold_cache.append(delta)
            blocks = -(-self.cfg.cold_size // BLOCK)
            if delta.get("lake_gets", 0) != blocks or delta.get("meta_misses", 0) != 1:
                self.warnings.append(f"cold GET {key} through the gateway was not cold: {delta}")
                log("WARNING: " + self.warnings[-1])
        self.cold[side].append(got)
        return got

    # -- phases --

    async def run(self, profile_dir: Path | None) -> None:
        cfg = self.cfg
        data = Data.make(cfg)
        clients = {side: RawS3Client(ep, max_connections=64) for side, ep in self.endpoints.items()}
        setup = clients["direct"]
        try:
            await self._upload(setup, data)
            await self._warm_up(clients, data)
            for round_no in range(cfg.rounds):
                order = SIDES if round_no % 2 == 0 else SIDES[::-1]
                log(f"round {round_no + 1}/{cfg.rounds} ({' first, '.join(order)} second)")
                line = []
                for side in order:
                    s = await self.hot_big(clients[side], data, side, cfg.big_gets_per_stream)
                    line.append(f"{side} {s.bytes / s.seconds / 1e6:7.1f} MB/s")
                log("  hot_64MiB_x4  " + "  ".join(line))
                line = []
                for side in order:
                    r = self.hot_small(clients[side], data, side, cfg.small_seconds).wrk
                    line.append(f"{side} {r.rps:7.0f} req/s (p50 {r.latency_ms['p50']:.2f} ms, p99 {r.latency_ms['p99']:.2f} ms)")
                log("  hot_4KiB_c32  " + "  ".join(line))
                for side in order:
                    await self.check_big(clients[side], data, side)
                    await self.check_small(clients[side], data, side)
            await self._cold(clients, data)
            if profile_dir is not None:
                await self._profile(clients["gateway"], data, profile_dir)
        finally:
            try:
                log(f"deleting bucket {data.bucket}")
                await setup.delete_bucket_with_objects(data.bucket)
            except Exception as exc:  # noqa: BLE001 - report, and still close the clients
                log(f"could not delete bucket {data.bucket}: {exc!r}")
            for client in clients.values():
                await client.aclose()

    async def _upload(self, setup: RawS3Client, data: Data) -> None:
        cfg = self.cfg
        log(f"creating bucket {data.bucket}: 64 MiB + 4 KiB hot objects, {cfg.cold_objects} x "
            f"{cfg.cold_size // MiB} MiB cold objects (PUT straight to RGW: the gateway never saw them)")
        await setup.create_bucket(data.bucket)
        big = os.urandom(BIG)
        data.big_sha256 = hashlib.sha256(big).hexdigest()
        await setup.put_checked(data.bucket, data.big_key, big)
        del big
        await setup.put_checked(data.bucket, data.small_key, data.small_body)
        base = bytearray(os.urandom(cfg.cold_size))
        for i, key in enumerate(data.cold_keys):
            base[:16] = hashlib.md5(f"{data.bucket}/{key}/{i}".encode()).digest()  # each object distinct
            body = bytes(base)
            data.cold_sha256[key] = hashlib.sha256(body).hexdigest()
            await setup.put_checked(data.bucket, key, body)

    async def _warm_up(self, clients: dict[str, RawS3Client], data: Data) -> None:
        """Fill L1 with the hot objects, check that it is warm (admin stats: hits, no lake GET),
        open connections and run every code path once; and check for the 40 ms Nagle stall."""
        log("warm-up: filling L1 with the hot objects")
        gw = clients["gateway"]
        await self.check_big(gw, data, "gateway")  # cold: 16 blocks from RGW into L1
        await self.check_small(gw, data, "gateway")
        warm = False
        for attempt in range(10):
            await asyncio.sleep(0.3)  # the last blocks' L1 puts run after the body is sent
            before = self.gateway.tenant_cache_counters()
            await self.check_big(gw, data, "gateway")
            await self.check_small(gw, data, "gateway")
            delta = _delta(self.gateway.tenant_cache_counters(), before)
            warm = delta.get("hits", 0) == BIG // BLOCK + 1 and not delta.get("lake_gets") and not delta.get("misses")
            if warm:
                break
        self.access_log_lines = sum("lakegate.access" in line for line in
                                    self.gateway.log_path.read_text(errors="replace").splitlines())
        if self.access_log_lines:
            self.warnings.append(
                f"LAKEGATE_ACCESS_LOG=false did not turn the access log off: {self.access_log_lines} lakegate.access "
                "lines in the gateway's log after the warm-up (uvicorn.run's logging dictConfig re-enables the "
                "logger gateway/cli.py disabled); every figure here includes an access log line per request")
            log("WARNING: " + self.warnings[-1])
        stats = self.gateway.admin_stats()
        l1 = (stats.get("cache") or {}).get("l1", {})
        self.warm_check = {"warm": warm, "verify_get_counters": delta, "l1_used_bytes": l1.get("used_bytes"),
                           "l1_capacity_bytes": l1.get("capacity_bytes"), "attempts": attempt + 1}
        log(f"L1 {'warm' if warm else 'NOT warm'}: a 64 MiB + a 4 KiB GET gave {delta}; L1 holds {l1.get('used_bytes')} bytes")
        if not warm:
            raise CheckFailed(f"the cache did not warm up: {delta}")
        log("warm-up: both sides, every workload once")
        for side, client in clients.items():
            await self.check_big(client, data, side)
            await self.hot_big(client, data, side, 1, record=False)
            self.hot_small(client, data, side, 1.0, record=False)
        latencies = []
        for _ in range(20):
            t0 = time.perf_counter()
            await clients["direct"].get(data.bucket, data.small_key)
            latencies.append(time.perf_counter() - t0)
        p50 = percentile(latencies, 50) * 1000
        log(f"direct sequential 4 KiB GET p50 {p50:.1f} ms")
        if p50 > 20:
            self.warnings.append(f"direct 4 KiB GETs take {p50:.0f} ms each: RGW without tcp_nodelay (Nagle + delayed ACK)?")
            log("WARNING: " + self.warnings[-1])

    async def _cold(self, clients: dict[str, RawS3Client], data: Data) -> None:
        log(f"cold reads: {len(data.cold_keys)} objects x {self.cfg.cold_size // MiB} MiB, once per side "
            f"({', '.join(COLD_SIDES)}; the first side rotating)")
        for client in clients.values():  # fresh keep-alive connections, opened untimed
            await client.aclose()
        cold_clients = {**clients, "relay": RawS3Client(self.relay), "passthrough": clients["gateway"]}
        try:
            for side, client in cold_clients.items():
                await self.check_small(client, data, side)
            for i, key in enumerate(data.cold_keys):
                order = COLD_SIDES[i % len(COLD_SIDES):] + COLD_SIDES[: i % len(COLD_SIDES)]
                parts = []
                for side in order:
                    await self._settle()
                    got = await self.cold_get(cold_clients[side], data, side, key)
                    parts.append(f"{side} {got.ttfb * 1000:5.2f}")
                log(f"  {key}  ttfb ms: " + "  ".join(parts))
        finally:
            await cold_clients["relay"].aclose()

    async def _settle(self) -> None:
        """Before each timed cold GET, whichever side: until the gateway has no background work
        (the last read's blocks going into L1 would otherwise slow the next request, RGW's
        own included), then 0.1 s."""
        started = time.monotonic()
        while (self.gateway.admin_stats().get("cache") or {}).get("background_tasks", 0):
            if time.monotonic() - started > 30:
                self.warnings.append("the gateway still had background work 30 s after a cold read")
                break
            await asyncio.sleep(0.02)
        self.cold_waits.append(time.monotonic() - started)
        await asyncio.sleep(0.1)

    async def _profile(self, client: RawS3Client, data: Data, out_dir: Path) -> None:
        """py-spy on the gateway during one more run of each hot workload (not in the figures)."""
        pid = self.pids["gateway"]
        self.profile = {"tool": f"py-spy record --rate 200 --threads (pid {pid}); no --native"}
        runs = {
            "hot_4KiB_c32": lambda: asyncio.to_thread(self.hot_small, client, data, "gateway", 10.0, False),
            "hot_64MiB_x4": lambda: self.hot_big(client, data, "gateway", 8, False),
        }
        for name, run in runs.items():
            for fmt, suffix in (("raw", "txt"), ("flamegraph", "svg")):
                spy = PySpy(pid, out_dir / f"{name}.{suffix}", fmt=fmt, rate=200)
                log(f"profiling the gateway on {name} ({fmt})")
                spy.start()
                started = time.perf_counter()
                sample = await run()
                seconds = time.perf_counter() - started
                spy.stop()
                if fmt == "raw":
                    if isinstance(sample, SmallSample):
                        per, unit = sample.cpu["gateway"] / sample.wrk.requests * 1000, "cpu_ms_per_request"
                        rate = {"rps_while_profiled": rounded(sample.wrk.rps, 1)}
                    else:
                        per, unit = sample.cpu["gateway"] / (sample.bytes / GiB), "cpu_s_per_GiB"
                        rate = {"MBps_while_profiled": rounded(sample.bytes / seconds / 1e6, 1)}
                    parts = breakdown(collapsed_stacks(out_dir / f"{name}.txt"))
                    self.profile[name] = {
                        unit: rounded(per), **rate, "files": [str(out_dir / f"{name}.txt"), str(out_dir / f"{name}.svg")],
                        **parts,
                        # the gateway's measured CPU split by the sampled shares (approximate: py-spy
                        # samples busy wall time, e.g. SQLite lock waits count as busy)
                        f"approx_{unit}_by_component": {
                            label: rounded(per * pct / 100, 4 if unit == "cpu_ms_per_request" else 3)
                            for label, pct in parts.get("by_component_pct", {}).items() if pct
                        },
                    }

    # -- summary --

    def summary(self) -> dict[str, Any]:
        d = [s.bytes / s.seconds / 1e6 for s in self.big["direct"]]
        g = [s.bytes / s.seconds / 1e6 for s in self.big["gateway"]]
        big: dict[str, Any] = {
            "direct_MBps": rounded(median(d), 1),
            "gateway_MBps": rounded(median(g), 1),
            "ratio": rounded(median(g) / median(d)),
            "ratio_per_round": [rounded(b / a) for a, b in zip(d, g, strict=True)],
            "direct_MBps_rounds": [rounded(x, 1) for x in d],
            "gateway_MBps_rounds": [rounded(x, 1) for x in g],
            "cpu_s_per_GiB": self._cpu(self.big, lambda s: s.bytes / GiB),
            "l1_counters_gateway_runs": _sum_counters(s.cache for s in self.big["gateway"]),
        }
        rps = {side: [s.wrk.rps for s in self.small[side]] for side in SIDES}
        lat = {side: {p: [s.wrk.latency_ms[p] for s in self.small[side]] for p in ("p50", "p90", "p99", "p999")}
               for side in SIDES}
        small: dict[str, Any] = {
            "generator": f"{wrk_version(self.wrk)}, -t{self.cfg.wrk_threads} -c{SMALL_CONNECTIONS}, one pre-signed "
                         f"SigV4 GET replayed (re-signed each round), {self.cfg.small_seconds:g} s per run",
            "direct_rps": rounded(median(rps["direct"]), 1),
            "gateway_rps": rounded(median(rps["gateway"]), 1),
            "ratio": rounded(median(rps["gateway"]) / median(rps["direct"])),
            **{f"{side}_{p}_ms": rounded(median(lat[side][p]), 2) for side in SIDES for p in ("p50", "p99")},
            "gateway_p99_ms_worst_round": rounded(max(lat["gateway"]["p99"]), 2),
            "direct_rps_rounds": [rounded(x, 1) for x in rps["direct"]],
            "gateway_rps_rounds": [rounded(x, 1) for x in rps["gateway"]],
            "gateway_p99_ms_rounds": [rounded(x, 2) for x in lat["gateway"]["p99"]],
            "cpu_ms_per_request": self._cpu(self.small, lambda s: s.wrk.requests / 1000),
            "l1_counters_gateway_runs": _sum_counters(s.cache for s in self.small["gateway"]),
        }
        ttfb = {side: [x.ttfb * 1000 for x in self.cold[side]] for side in COLD_SIDES}
        full = {side: [x.received / x.total / 1e6 for x in self.cold[side]] for side in COLD_SIDES}

        def per_object(side: str, base: str) -> float:
            return rounded(median([a / b for a, b in zip(ttfb[side], ttfb[base], strict=True)]))

        cold: dict[str, Any] = {
            "objects": len(self.cold["gateway"]),
            "object_MiB": self.cfg.cold_size // MiB,
            **{f"{side}_ttfb_ms": rounded(median(ttfb[side]), 2) for side in COLD_SIDES},
            "ratio": rounded(median(ttfb["gateway"]) / median(ttfb["direct"])),
            "ratio_per_object_median": per_object("gateway", "direct"),
            "relay_ratio": rounded(median(ttfb["relay"]) / median(ttfb["direct"])),
            "passthrough_ratio": rounded(median(ttfb["passthrough"]) / median(ttfb["direct"])),
            "gateway_over_relay_ms": rounded(median(ttfb["gateway"]) - median(ttfb["relay"]), 2),
            "gateway_over_passthrough_ms": rounded(median(ttfb["gateway"]) - median(ttfb["passthrough"]), 2),
            **{f"{side}_ttfb_ms_p90": rounded(percentile(ttfb[side], 90), 2) for side in COLD_SIDES},
            **{f"{side}_ttfb_ms_all": [rounded(x, 2) for x in ttfb[side]] for side in COLD_SIDES},
            **{f"{side}_full_read_MBps": rounded(median(full[side]), 1) for side in COLD_SIDES},
            "settle_wait_s_max": rounded(max(self.cold_waits, default=0.0), 3),
            "l1_counters_gateway_gets": _sum_counters(self.cold_cache),
        }
        return {"hot_64MiB_x4": big, "hot_4KiB_c32": small, "cold_ttfb": cold}

    def _cpu(self, samples: dict[str, list[Any]], amount_of: Any) -> dict[str, float]:
        """CPU per unit (GiB or 1000 requests, i.e. ms per request), by process and side."""
        out: dict[str, float] = {}
        for side in SIDES:
            amount = sum(amount_of(s) for s in samples[side])
            for process in samples[side][0].cpu if samples[side] else ():
                total = sum(s.cpu[process] for s in samples[side])
                if process == "gateway":
                    if side == "gateway":
                        out["gateway"] = rounded(total / amount)
                    continue  # idle on the direct side
                name = f"{process}_direct" if side == "direct" else f"{process}_via_gateway"
                out[name] = rounded(total / amount)
        return out


def _sum_counters(deltas: Any) -> dict[str, int]:
    total: defaultdict[str, int] = defaultdict(int)
    for delta in deltas:
        for k, v in delta.items():
            total[k] += v
    return dict(sorted(total.items()))


# -- profile breakdown ---------------------------------------------------------------------------

# Each sampled stack is charged to one component: walking from the innermost frame outwards, the
# first frame that matches a component's needles decides (in this order when a frame matches
# several). Frames look like "function (path/to/file.py:line)". Without --native, C code (uvloop's
# loop and socket I/O, SQLite, read()/write()) is charged to the Python frame that called it.
COMPONENTS: list[tuple[str, tuple[str, ...]]] = [
    ("sigv4 authenticate", ("(gateway/s3/sigv4.py",)),
    ("L1 block file open (diskcache Disk.fetch)", ("Disk.fetch (diskcache/",)),
    ("L1 index: diskcache get/contains (SQLite txn)", ("(diskcache/",)),
    ("L1 block read() + crc32c (DiskBlockStore)", ("(cachetier/blocks/store.py", "(awscrt/")),
    ("ReadPath/CachedLake/BlockId/meta/stats (rest)", ("(cachetier/",)),
    ("access log (logging)", ("(logging/",)),
    ("prometheus counter", ("prometheus_client",)),
    ("response send (response.send, uvicorn send, socket write)", ("send (gateway/s3/response.py", "RequestResponseCycle.send (")),
    ("frontend: parse, route, handler, headers (gateway/ rest)", ("(gateway/",)),
    ("asyncio to_thread / executor hand-off", ("(asyncio/threads.py", "(concurrent/futures/", "(asyncio/futures.py")),
    ("uvicorn protocol + ASGI glue (HTTP parse in httptools)", ("(uvicorn/protocols/", "(uvicorn/middleware/")),
    ("event loop (uvloop run loop in C: epoll, socket reads, task switches)",
     ("(asyncio/runners.py", "(uvicorn/server.py", "(gateway/cli.py")),
]
OTHER = "other"
# an executor thread waiting for work is idle, whatever py-spy says
_IDLE_LEAVES = ("_worker (concurrent/futures/thread.py",)


def breakdown(stacks: list[tuple[list[str], int]]) -> dict[str, Any]:
    """Shares (%) of the gateway's busy samples per component (exclusive, they add up to 100),
    per thread kind, and the top self-time frames."""
    busy = [(frames, n) for frames, n in stacks if frames and not frames[-1].startswith(_IDLE_LEAVES)]
    total = sum(n for _, n in busy)
    if not total:
        return {"busy_samples": 0}
    threads: defaultdict[str, int] = defaultdict(int)
    component: defaultdict[str, int] = defaultdict(int)
    self_time: defaultdict[str, int] = defaultdict(int)
    for frames, n in busy:
        threads["event loop (MainThread)" if "MainThread" in frames[0] else "worker threads"] += n
        component[_component(frames)] += n
        self_time[frames[-1]] += n
    labels = [label for label, _ in COMPONENTS] + [OTHER]
    return {
        "busy_samples": total,
        "idle_samples_dropped": sum(n for _, n in stacks) - total,
        "by_thread_pct": {k: rounded(100 * v / total, 1) for k, v in sorted(threads.items())},
        "by_component_pct": {label: rounded(100 * component[label] / total, 1) for label in labels},
        "top_self_pct": {frame: rounded(100 * n / total, 1)
                         for frame, n in sorted(self_time.items(), key=lambda x: -x[1])[:12]},
    }


def _component(frames: list[str]) -> str:
    for frame in reversed(frames):
        for label, needles in COMPONENTS:
            if any(needle in frame for needle in needles):
                return label
    return OTHER


# -- plot ----------------------------------------------------------------------------------------


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    r = result["results"]
    two = ["RGW direct", "lakegate"], ["tab:gray", "tab:blue"]
    big, small, cold = r["hot_64MiB_x4"], r["hot_4KiB_c32"], r["cold_ttfb"]
    panels = [
        ("hot 64 MiB, 4 streams (L1 hit)\nMB/s", *two, [big["direct_MBps"], big["gateway_MBps"]],
         ("target >= 1.5 x direct", TARGETS["hot_64MiB_ratio_min"] * big["direct_MBps"])),
        ("hot 4 KiB, 32 connections (wrk)\nrequests/s", *two, [small["direct_rps"], small["gateway_rps"]],
         ("target >= 5,000 req/s", TARGETS["hot_4KiB_rps_min"])),
        ("hot 4 KiB p99 latency\nms", *two, [small["direct_p99_ms"], small["gateway_p99_ms"]],
         ("target <= 20 ms", TARGETS["hot_4KiB_p99_ms_max"])),
        (f"cold GET, time to first byte\nms (median of {cold['objects']})",
         ["RGW\ndirect", "TCP relay\n(floor)", "lakegate", "lakegate\nno-cache"],
         ["tab:gray", "tab:olive", "tab:blue", "tab:cyan"], [cold[f"{side}_ttfb_ms"] for side in COLD_SIDES],
         ("target <= 1.5 x direct", TARGETS["cold_ttfb_ratio_max"] * cold["direct_ttfb_ms"])),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(15, 4.4), gridspec_kw={"width_ratios": [1, 1, 1, 1.6]})
    for ax, (title, labels, colors, values, (target_label, target)) in zip(axes, panels, strict=True):
        bars = ax.bar(labels, values, color=colors)
        ax.bar_label(bars, labels=[f"{v:,.1f}" for v in values], padding=2, fontsize=8)
        ax.axhline(target, color="tab:red", linestyle="--", linewidth=1, label=target_label)
        ax.set_title(title, fontsize=9)
        ax.tick_params(axis="x", labelsize=8)
        ax.set_ylim(0, max(*values, target) * 1.2)
        ax.legend(loc="upper left", fontsize=7)
    machine = result["machine"]
    fig.suptitle(f"lakegate L1 hot reads and cold TTFB vs RGW direct (one worker, {machine['cores']} cores, "
                 f"median of {result['rounds']} round{'s' if result['rounds'] != 1 else ''})", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    log(f"plot written to {path}")


# -- main ----------------------------------------------------------------------------------------


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="benchmarks.hot_read", description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, help="direct/gateway round pairs (default 5; --quick: 1)")
    p.add_argument("--quick", action="store_true", help="small counts: a smoke run (about 1 minute)")
    p.add_argument("--small-seconds", type=float, help="wrk seconds per side per round (default 5)")
    p.add_argument("--wrk-threads", type=int, default=1, help="wrk threads (default 1: leaves the cores to the servers)")
    p.add_argument("--cold-objects", type=int, help="fresh objects for the cold TTFB (default 24; --quick: 4)")
    p.add_argument("--cold-size-mib", type=int, default=64, help="size of each cold object (default 64)")
    p.add_argument("--plot", type=Path, metavar="PNG", help="also write a bar chart")
    p.add_argument("--profile", type=Path, metavar="DIR",
                   help="afterwards, py-spy the gateway on both hot workloads: flame graphs + breakdown")
    p.add_argument("--output", type=Path, default=RESULTS_DIR / f"{NAME}.json", help="JSON result file")
    ceph = p.add_argument_group("own Ceph (ports and folder differ from passthrough's and the tests')")
    ceph.add_argument("--ceph-dir", type=Path, default=Path("/tmp/lakegate-bench-hotread-ceph"))
    ceph.add_argument("--rgw-port", type=int, default=7591)
    ceph.add_argument("--mon-port", type=int, default=40991)
    ceph.add_argument("--ms-port-min", type=int, default=47100)
    ceph.add_argument("--ms-port-max", type=int, default=47199)
    ceph.add_argument("--osd-size-gb", type=int, default=4, help="memstore capacity")
    return p.parse_args(argv)


def _uncommitted_files() -> list[str]:
    """Modified or new files of the gateway's code (gateway/, cachetier/, policies/) at start."""
    try:
        out = subprocess.run(["git", "-C", str(Path(__file__).resolve().parents[1]), "status", "--porcelain", "--",
                              "gateway", "cachetier", "policies"], capture_output=True, text=True, timeout=10, check=False)
    except OSError:
        return []
    return [line[3:] for line in out.stdout.splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    wrk = wrk_binary()
    if wrk is None:
        print(f"hot_read: the 4 KiB workload needs wrk, which is not installed. Install it with:\n    {WRK_INSTALL}",
              file=sys.stderr)
        return 2
    if args.profile is not None and py_spy_binary() is None:
        print("hot_read: --profile needs py-spy (pip install py-spy, in the virtualenv)", file=sys.stderr)
        return 2
    exit_on_signals()
    cfg = Config.quick() if args.quick else Config()
    for name in ("rounds", "small_seconds", "cold_objects"):
        if getattr(args, name) is not None:
            setattr(cfg, name, getattr(args, name))
    cfg.wrk_threads = args.wrk_threads
    cfg.cold_size = args.cold_size_mib * MiB
    machine = machine_info()
    uncommitted = _uncommitted_files()  # the code the gateway runs may differ from the revision
    started = time.monotonic()
    ceph: CephCluster | None = None
    gateway: Gateway | None = None
    relay: TcpRelay | None = None
    # L1 must hold every object the run reads (no evictions): the default 4 GiB unless that is short
    needed = BIG + SMALL + cfg.cold_objects * cfg.cold_size
    capacity = max(GATEWAY_DEFAULT_CAPACITY, 2 * needed)
    gateway_env = {"LAKEGATE_ACCESS_LOG": "false"}
    if capacity != GATEWAY_DEFAULT_CAPACITY:
        gateway_env["LAKEGATE_CACHE_CAPACITY"] = str(capacity)
    try:
        ceph = CephCluster(ceph_dir=args.ceph_dir, rgw_port=args.rgw_port, mon_port=args.mon_port,
                           ms_port_min=args.ms_port_min, ms_port_max=args.ms_port_max, osd_size_gb=args.osd_size_gb)
        lake = ceph.start()
        ceph.restart_rgw("tcp_nodelay=1")
        gateway = Gateway(lake, env=gateway_env)
        gateway.start()
        pids = {"gateway": gateway.pid}
        if "rgw.gw" in ceph.pids():
            pids["rgw"] = ceph.pids()["rgw.gw"]
        for pid in pids.values():
            process_cpu_seconds(pid)  # readable, or fail now
        assert gateway.workdir is not None
        cache_fs = filesystem_of(gateway.workdir / "cache")
        if cache_fs["type"] in ("tmpfs", "ramfs"):
            log(f"WARNING: the cache dir is on {cache_fs['type']}, not a disk")
        relay = TcpRelay(lake.url)
        relay.start()
        runner = Runner(cfg, lake, gateway, pids, wrk, relay.url)
        run_async(runner.run(args.profile))
    except CheckFailed as exc:
        log(f"FAILED, a response was wrong: {exc}")
        if gateway is not None:
            log(f"lakegate log (tail):\n{gateway.output_tail()}")
        return 1
    finally:
        if relay is not None:
            relay.stop()
        if gateway is not None:
            gateway.stop()
        if ceph is not None:
            ceph.stop()

    results = runner.summary()
    big, small, cold = results["hot_64MiB_x4"], results["hot_4KiB_c32"], results["cold_ttfb"]
    targets = {
        "hot_64MiB_ratio": {"min": TARGETS["hot_64MiB_ratio_min"], "value": big["ratio"],
                            "met": big["ratio"] >= TARGETS["hot_64MiB_ratio_min"]},
        "hot_4KiB_rps": {"min": TARGETS["hot_4KiB_rps_min"], "value": small["gateway_rps"],
                         "met": small["gateway_rps"] >= TARGETS["hot_4KiB_rps_min"]},
        "hot_4KiB_p99_ms": {"max": TARGETS["hot_4KiB_p99_ms_max"], "value": small["gateway_p99_ms"],
                            "met": small["gateway_p99_ms"] <= TARGETS["hot_4KiB_p99_ms_max"]},
        "cold_ttfb_ratio": {"max": TARGETS["cold_ttfb_ratio_max"], "value": cold["ratio"],
                            "met": cold["ratio"] <= TARGETS["cold_ttfb_ratio_max"]},
    }
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
            "lake": {"kind": "own single-node Ceph RGW (memstore), beast tcp_nodelay=1", "url": lake.url},
            "gateway": "one `lakegate serve` process (one uvicorn worker), cache on, block size 4 MiB (default), "
                       f"cache capacity {capacity} bytes, LAKEGATE_ACCESS_LOG=false, defaults otherwise "
                       "(metadata TTL 5 s: a hot object costs one lake HEAD per 5 s)",
            "cache_dir_filesystem": cache_fs,
            "access_log_lines_during_warm_up": runner.access_log_lines,
            "warm_check": runner.warm_check,
            "hot_64MiB": f"one object, {BIG_STREAMS} parallel streams x {cfg.big_gets_per_stream} GETs per side per "
                         "round, raw-socket client (one asyncio process)",
            "hot_4KiB": f"one object, {SMALL_CONNECTIONS} connections, wrk {cfg.small_seconds:g} s per side per round",
            "cold": f"{cfg.cold_objects} objects x {cfg.cold_size // MiB} MiB PUT straight to RGW, each read once per "
                    "side (direct; relay: a TCP relay that only forwards bytes, benchmarks/relay.py; gateway; "
                    "passthrough: the gateway with Cache-Control: no-cache), the first side rotating per object; "
                    "before each GET, whichever side, the gateway's background work (L1 fills) is waited for, then "
                    "0.1 s; keep-alive connection, body hashed; TTFB = request sent -> first body byte",
            "statistic": "hot: median over rounds (latency: median of per-round wrk percentiles); cold: median over objects; "
                         "ratio = gateway / direct",
            "cpu": "utime+stime from /proc/<pid>/stat (gateway, radosgw), client: this process (64 MiB) or wrk (4 KiB)",
            "units": {"MBps": "10^6 bytes/s", "cpu_s_per_GiB": "CPU seconds per GiB served",
                      "cpu_ms_per_request": "CPU milliseconds per request"},
        },
        "lakegate_revision": git_revision(),
        "lakegate_uncommitted_files": uncommitted,
        "duration_s": round(time.monotonic() - started, 1),
    }
    if runner.profile is not None:
        result["profile"] = runner.profile
    if runner.warnings:
        result["warnings"] = runner.warnings
    emit_result(NAME, result, args.output)
    if args.plot:
        plot(result, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
