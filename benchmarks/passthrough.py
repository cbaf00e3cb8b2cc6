"""Pass-through benchmark: GET and PUT throughput through lakegate versus straight to the lake.

Workloads (the same requests, signed with SigV4 / UNSIGNED-PAYLOAD, to both endpoints):

    get_64MiB_x1   64 MiB GETs, one stream                           MB/s (10^6 bytes/s)
    get_64MiB_x4   64 MiB GETs, 4 parallel streams (4 objects)       MB/s
    put_64MiB_x1   64 MiB PUTs, one stream                           MB/s
    get_4KiB_c16   4 KiB GETs, 16 in flight, fixed count             requests/s, latency
    put_4KiB_c16   4 KiB PUTs, 16 in flight, fixed count             requests/s, latency

Direct and gateway runs alternate within every round (the order flips each round) so machine
noise hits both alike; each figure is the median over rounds, ``ratio`` = gateway / direct.
Every response is checked (status, length; 4 KiB GET bodies byte for byte; PUT ETags against
the body's MD5) and, each round, one untimed 64 MiB GET per side is compared by SHA-256.
CPU seconds of the gateway process (/proc/<pid>/stat) per GiB of 64 MiB GETs are recorded,
and of the RGW and the client too where known.

By default a throwaway single-node Ceph (deploy/ceph/start-ceph.sh; own data folder and ports)
is started and stopped; ``--endpoint URL --access-key K --secret-key S`` uses an existing S3
endpoint instead. Either way one ``lakegate serve`` is started in front of it.

    .venv/bin/python -m benchmarks.passthrough [--rounds 5] [--quick] [--plot out.png]

Progress on stderr; one JSON object on stdout, also written to benchmarks/results/passthrough.json.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.ceph import CephCluster
from harness.clients import CLIENTS, S3ClientBase, make_client, run_async
from harness.endpoints import S3Endpoint
from harness.gateway import Gateway
from harness.processes import CpuMeter, exit_on_signals, log, process_cpu_seconds
from harness.results import RESULTS_DIR, emit_result, git_revision, machine_info, median, percentile, rounded
from harness.units import GiB, KiB, MiB

NAME = "passthrough"
BIG = 64 * MiB
SMALL = 4 * KiB
SMALL_OBJECTS = 100  # distinct 4 KiB objects the small GETs cycle through
BIG_STREAMS = 4
TARGET_GET_RATIO = 0.8
WORKLOADS = ("get_64MiB_x1", "get_64MiB_x4", "put_64MiB_x1", "get_4KiB_c16", "put_4KiB_c16")
SIDES = ("direct", "gateway")


class CheckFailed(RuntimeError):
    """A response was wrong: the benchmark's figures would mean nothing."""


@dataclass
class Config:
    rounds: int = 5
    big_gets_x1: int = 6  # sequential 64 MiB GETs per side per round
    big_gets_x4: int = 3  # 64 MiB GETs per stream per side per round (4 streams)
    big_puts: int = 4  # sequential 64 MiB PUTs per side per round
    small_count: int = 2000  # 4 KiB requests per side per round, per workload
    small_concurrency: int = 16
    client: str = "raw"

    @classmethod
    def quick(cls, client: str) -> Config:
        return cls(rounds=1, big_gets_x1=2, big_gets_x4=1, big_puts=2, small_count=200, client=client)


@dataclass
class Sample:
    """One timed run of one workload on one side."""

    seconds: float
    bytes: int
    requests: int
    latencies: list[float] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)  # process -> CPU seconds during the run


@dataclass
class Data:
    """The objects the workloads read and the bodies they write."""

    bucket: str
    big: dict[str, bytes]  # key -> 64 MiB body (GET sources, one per stream)
    big_sha256: dict[str, str]
    small: list[tuple[str, bytes]]  # (key, 4 KiB body)
    big_put_body: bytes
    big_put_md5: str
    small_put_bodies: list[tuple[bytes, str]]  # (body, md5 hex)

    @classmethod
    def make(cls) -> Data:
        big = {f"big/get-{i}": os.urandom(BIG) for i in range(BIG_STREAMS)}
        put_body = os.urandom(BIG)
        small_puts = [os.urandom(SMALL) for _ in range(SMALL_OBJECTS)]
        return cls(
            bucket=f"lakegate-bench-{uuid.uuid4().hex[:10]}",
            big=big,
            big_sha256={k: hashlib.sha256(v).hexdigest() for k, v in big.items()},
            small=[(f"small/get-{i:03d}", os.urandom(SMALL)) for i in range(SMALL_OBJECTS)],
            big_put_body=put_body,
            big_put_md5=hashlib.md5(put_body).hexdigest(),
            small_put_bodies=[(b, hashlib.md5(b).hexdigest()) for b in small_puts],
        )


# -- workloads -----------------------------------------------------------------------------------


async def big_gets(client: S3ClientBase, data: Data, streams: int, per_stream: int) -> Sample:
    keys = list(data.big)

    async def stream(i: int) -> int:
        got = 0
        for _ in range(per_stream):
            key = keys[i % len(keys)]
            status, n, _, _ = await client.get(data.bucket, key)
            if status != 200 or n != BIG:
                raise CheckFailed(f"{client.endpoint.url} GET {key}: HTTP {status}, {n} of {BIG} bytes")
            got += n
        return got

    started = time.perf_counter()
    total = sum(await asyncio.gather(*(stream(i) for i in range(streams))))
    return Sample(time.perf_counter() - started, total, streams * per_stream)


async def big_puts(client: S3ClientBase, data: Data, side: str, count: int) -> Sample:
    started = time.perf_counter()
    for i in range(count):
        key = f"big/put-{side}-{i}"
        status, etag = await client.put(data.bucket, key, data.big_put_body)
        if status != 200 or etag != data.big_put_md5:
            raise CheckFailed(f"{client.endpoint.url} PUT {key}: HTTP {status}, ETag {etag!r}")
    return Sample(time.perf_counter() - started, count * BIG, count)


async def small_requests(client: S3ClientBase, data: Data, side: str, op: str, count: int, concurrency: int) -> Sample:
    counter = itertools.count()
    latencies: list[float] = []

    async def worker() -> None:
        while (i := next(counter)) < count:
            t0 = time.perf_counter()
            if op == "get":
                key, expected = data.small[i % SMALL_OBJECTS]
                status, n, _, body = await client.get(data.bucket, key, keep_body=True)
                latencies.append(time.perf_counter() - t0)
                if status != 200 or body != expected:
                    raise CheckFailed(f"{client.endpoint.url} GET {key}: HTTP {status}, {n} bytes, body differs")
            else:
                key = f"small/put-{side}-{i % SMALL_OBJECTS:03d}"
                body, md5 = data.small_put_bodies[i % SMALL_OBJECTS]
                status, etag = await client.put(data.bucket, key, body)
                latencies.append(time.perf_counter() - t0)
                if status != 200 or etag != md5:
                    raise CheckFailed(f"{client.endpoint.url} PUT {key}: HTTP {status}, ETag {etag!r}")

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return Sample(time.perf_counter() - started, count * SMALL, count, latencies)


async def verify_big_get(client: S3ClientBase, data: Data, round_no: int) -> None:
    """One untimed 64 MiB GET compared by SHA-256."""
    key = list(data.big)[round_no % len(data.big)]
    status, n, digest, _ = await client.get(data.bucket, key, sha256=True)
    if status != 200 or n != BIG or digest != data.big_sha256[key]:
        raise CheckFailed(f"{client.endpoint.url} GET {key}: HTTP {status}, {n} bytes, sha256 {digest} "
                          f"!= {data.big_sha256[key]}")


# -- the run -------------------------------------------------------------------------------------


class Runner:
    def __init__(self, cfg: Config, lake: S3Endpoint, gateway: S3Endpoint, pids: dict[str, int]) -> None:
        self.cfg = cfg
        self.endpoints = {"direct": lake, "gateway": gateway}
        self.pids = pids  # "gateway", maybe "rgw"
        self.samples: dict[str, dict[str, list[Sample]]] = {w: {s: [] for s in SIDES} for w in WORKLOADS}
        self.warnings: list[str] = []

    async def _measured(self, workload: str, side: str, run: Any) -> Sample:
        meters = {name: CpuMeter([pid]) for name, pid in self.pids.items()}
        meters["client"] = CpuMeter(include_self=True)
        for meter in meters.values():
            meter.start()
        sample: Sample = await run
        for name, meter in meters.items():
            sample.cpu[name] = meter.stop()
        self.samples[workload][side].append(sample)
        return sample

    def _run(self, workload: str, client: S3ClientBase, data: Data, side: str) -> Any:
        cfg = self.cfg
        if workload == "get_64MiB_x1":
            return big_gets(client, data, 1, cfg.big_gets_x1)
        if workload == "get_64MiB_x4":
            return big_gets(client, data, BIG_STREAMS, cfg.big_gets_x4)
        if workload == "put_64MiB_x1":
            return big_puts(client, data, side, cfg.big_puts)
        if workload == "get_4KiB_c16":
            return small_requests(client, data, side, "get", cfg.small_count, cfg.small_concurrency)
        return small_requests(client, data, side, "put", cfg.small_count, cfg.small_concurrency)

    async def run(self) -> None:
        cfg = self.cfg
        log("generating data")
        data = Data.make()
        clients = {side: make_client(cfg.client, ep, max_connections=64) for side, ep in self.endpoints.items()}
        setup = clients["direct"]
        try:
            log(f"creating bucket {data.bucket} with {len(data.big)} x 64 MiB and {len(data.small)} x 4 KiB objects")
            await setup.create_bucket(data.bucket)
            for key, body in data.big.items():
                await setup.put_checked(data.bucket, key, body)
            for key, body in data.small:
                await setup.put_checked(data.bucket, key, body)
            await self._warm_up(clients, data)
            for round_no in range(cfg.rounds):
                order = SIDES if round_no % 2 == 0 else SIDES[::-1]
                log(f"round {round_no + 1}/{cfg.rounds} ({' first, '.join(order)} second)")
                for workload in WORKLOADS:
                    line = []
                    for side in order:
                        sample = await self._measured(workload, side, self._run(workload, clients[side], data, side))
                        line.append(f"{side} {_rate_text(workload, sample)}")
                    log(f"  {workload:13s} " + "  ".join(line))
                for side in order:
                    await verify_big_get(clients[side], data, round_no)
        finally:
            try:
                log(f"deleting bucket {data.bucket}")
                await setup.delete_bucket_with_objects(data.bucket)
            except Exception as exc:  # noqa: BLE001 - report, and still close the clients
                log(f"could not delete bucket {data.bucket}: {exc!r}")
            for client in clients.values():
                await client.aclose()

    async def _warm_up(self, clients: dict[str, S3ClientBase], data: Data) -> None:
        """Connections opened, code paths run once; and a check for the 40 ms Nagle stall."""
        log("warm-up")
        for side, client in clients.items():
            await verify_big_get(client, data, 0)
            await small_requests(client, data, side, "get", 100, self.cfg.small_concurrency)
            await small_requests(client, data, side, "put", 100, self.cfg.small_concurrency)
        latencies = []
        for key, _ in data.small[:20]:
            t0 = time.perf_counter()
            await clients["direct"].get(data.bucket, key)
            latencies.append(time.perf_counter() - t0)
        p50 = percentile(latencies, 50) * 1000
        log(f"direct sequential 4 KiB GET p50 {p50:.1f} ms")
        if p50 > 20:
            self.warnings.append(
                f"direct 4 KiB GETs take {p50:.0f} ms each: the lake probably sends headers and body in "
                "separate writes without TCP_NODELAY (Nagle + 40 ms delayed ACK; Ceph RGW beast: "
                "tcp_nodelay=1). 4 KiB figures then measure that stall, not the gateway."
            )
            log("WARNING: " + self.warnings[-1])

    # -- summary --

    def summary(self) -> dict[str, Any]:
        results: dict[str, Any] = {}
        for workload in WORKLOADS:
            direct, gateway = self.samples[workload]["direct"], self.samples[workload]["gateway"]
            if workload.startswith(("get_64", "put_64")):
                d = [s.bytes / s.seconds / 1e6 for s in direct]
                g = [s.bytes / s.seconds / 1e6 for s in gateway]
                entry: dict[str, Any] = {
                    "direct_MBps": rounded(median(d), 1),
                    "gateway_MBps": rounded(median(g), 1),
                    "ratio": rounded(median(g) / median(d)),
                    "ratio_per_round": [rounded(b / a) for a, b in zip(d, g, strict=True)],
                    "direct_MBps_rounds": [rounded(x, 1) for x in d],
                    "gateway_MBps_rounds": [rounded(x, 1) for x in g],
                }
            else:
                d = [s.requests / s.seconds for s in direct]
                g = [s.requests / s.seconds for s in gateway]
                d_lat = [x for s in direct for x in s.latencies]
                g_lat = [x for s in gateway for x in s.latencies]
                entry = {
                    "direct_rps": rounded(median(d), 1),
                    "gateway_rps": rounded(median(g), 1),
                    "ratio": rounded(median(g) / median(d)),
                    "direct_p50_ms": rounded(percentile(d_lat, 50) * 1000, 2),
                    "direct_p99_ms": rounded(percentile(d_lat, 99) * 1000, 2),
                    "gateway_p50_ms": rounded(percentile(g_lat, 50) * 1000, 2),
                    "gateway_p99_ms": rounded(percentile(g_lat, 99) * 1000, 2),
                    "ratio_per_round": [rounded(b / a) for a, b in zip(d, g, strict=True)],
                }
            entry["cpu_s_per_GiB" if workload.startswith(("get_64", "put_64")) else "cpu_ms_per_request"] = (
                self._cpu(workload)
            )
            results[workload] = entry
        return results

    def _cpu(self, workload: str) -> dict[str, float]:
        """CPU per GiB (64 MiB workloads) or per request (4 KiB), by process and side."""
        out: dict[str, float] = {}
        big = workload.startswith(("get_64", "put_64"))
        for side in SIDES:
            samples = self.samples[workload][side]
            amount = sum(s.bytes for s in samples) / GiB if big else sum(s.requests for s in samples) / 1000
            for process in samples[0].cpu if samples else ():
                if process == "gateway":
                    if side == "gateway":
                        out["gateway"] = rounded(sum(s.cpu[process] for s in samples) / amount)
                    continue  # idle on the direct side
                name = f"{process}_direct" if side == "direct" else f"{process}_via_gateway"
                out[name] = rounded(sum(s.cpu[process] for s in samples) / amount)
        return out

    def gateway_cpu_per_gib(self, prefix: str) -> float:
        samples = [s for w in WORKLOADS if w.startswith(prefix) for s in self.samples[w]["gateway"]]
        return rounded(sum(s.cpu["gateway"] for s in samples) / (sum(s.bytes for s in samples) / GiB))


def _rate_text(workload: str, sample: Sample) -> str:
    if workload.endswith(("x1", "x4")):
        return f"{sample.bytes / sample.seconds / 1e6:7.1f} MB/s"
    return f"{sample.requests / sample.seconds:7.1f} req/s (p50 {percentile(sample.latencies, 50) * 1000:.1f} ms)"


# -- plot ----------------------------------------------------------------------------------------


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["results"])
    ratios = [result["results"][n]["ratio"] for n in names]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    colors = ["tab:blue" if n.startswith("get_64") else "tab:gray" for n in names]
    bars = ax.bar(names, ratios, color=colors)
    ax.bar_label(bars, labels=[f"{r:.2f}" for r in ratios], padding=2)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(TARGET_GET_RATIO, color="tab:red", linestyle="--", linewidth=1,
               label=f"target for 64 MiB GET: {TARGET_GET_RATIO}")
    ax.set_ylabel("gateway / direct (throughput)")
    ax.set_ylim(0, max(1.1, max(ratios) * 1.15))
    machine = result["machine"]
    rounds = result["rounds"]
    ax.set_title(f"lakegate pass-through vs direct ({machine['cores']} cores, median of {rounds} "
                 f"round{'s' if rounds != 1 else ''})", fontsize=10)
    ax.legend(loc="upper right", fontsize=8)
    plt.setp(ax.get_xticklabels(), rotation=15)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    log(f"plot written to {path}")


# -- main ----------------------------------------------------------------------------------------


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="benchmarks.passthrough", description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, help="direct/gateway round pairs (default 5; --quick: 1)")
    p.add_argument("--quick", action="store_true", help="small counts: a smoke run (< 1 minute)")
    p.add_argument("--endpoint", help="use this S3 endpoint (http://host:port) instead of starting Ceph")
    p.add_argument("--access-key", help="the endpoint's access key (also the gateway's lake key)")
    p.add_argument("--secret-key", help="the endpoint's secret key")
    p.add_argument("--region", default="us-east-1")
    p.add_argument("--plot", type=Path, metavar="PNG", help="also write a bar chart of the ratios")
    p.add_argument("--client", choices=sorted(CLIENTS), default="raw",
                   help="benchmark client: raw sockets (default, cheapest) or httpx")
    p.add_argument("--small-count", type=int, help="4 KiB requests per side, workload and round (default 2000)")
    p.add_argument("--output", type=Path, default=RESULTS_DIR / f"{NAME}.json", help="JSON result file")
    ceph = p.add_argument_group("own Ceph (without --endpoint)")
    ceph.add_argument("--ceph-dir", type=Path, default=Path("/tmp/lakegate-bench-ceph"))
    ceph.add_argument("--rgw-port", type=int, default=7590)
    ceph.add_argument("--mon-port", type=int, default=40990)
    ceph.add_argument("--ms-port-min", type=int, default=47000)
    ceph.add_argument("--ms-port-max", type=int, default=47099)
    ceph.add_argument("--osd-size-gb", type=int, default=8, help="memstore capacity (PUT overwrites pile up until RGW GC)")
    ceph.add_argument("--rgw-nagle", action="store_true",
                      help="keep RGW's default beast frontend (no tcp_nodelay): small GETs then stall 40 ms")
    args = p.parse_args(argv)
    if args.endpoint and not (args.access_key and args.secret_key):
        p.error("--endpoint needs --access-key and --secret-key")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    exit_on_signals()
    cfg = Config.quick(args.client) if args.quick else Config(client=args.client)
    if args.rounds is not None:
        cfg.rounds = args.rounds
    if args.small_count is not None:
        cfg.small_count = args.small_count
    machine = machine_info()
    started = time.monotonic()
    ceph: CephCluster | None = None
    gateway: Gateway | None = None
    lake_info: dict[str, Any]
    try:
        if args.endpoint:
            lake = S3Endpoint(args.endpoint, args.access_key, args.secret_key, args.region)
            lake_info = {"kind": "endpoint", "url": args.endpoint}
        else:
            ceph = CephCluster(ceph_dir=args.ceph_dir, rgw_port=args.rgw_port, mon_port=args.mon_port,
                               ms_port_min=args.ms_port_min, ms_port_max=args.ms_port_max,
                               osd_size_gb=args.osd_size_gb)
            lake = ceph.start()
            if not args.rgw_nagle:
                ceph.restart_rgw("tcp_nodelay=1")
            lake_info = {"kind": "own single-node Ceph RGW (memstore)", "url": lake.url,
                         "rgw_tcp_nodelay": not args.rgw_nagle}
        # the pass-through path of the foundation issue: cache off, every request goes to the lake
        gateway = Gateway(lake, env={"LAKEGATE_ACCESS_LOG": "false", "LAKEGATE_CACHE": "false"})
        gateway_endpoint = gateway.start()
        pids = {"gateway": gateway.pid}
        if ceph is not None and "rgw.gw" in ceph.pids():
            pids["rgw"] = ceph.pids()["rgw.gw"]
        for pid in pids.values():
            process_cpu_seconds(pid)  # readable, or fail now
        runner = Runner(cfg, lake, gateway_endpoint, pids)
        run_async(runner.run())
    except CheckFailed as exc:
        log(f"FAILED, a response was wrong: {exc}")
        if gateway is not None:
            log(f"lakegate log (tail):\n{gateway.output_tail()}")
        return 1
    finally:
        if gateway is not None:
            gateway.stop()
        if ceph is not None:
            ceph.stop()

    results = runner.summary()
    get_ratio = min(results["get_64MiB_x1"]["ratio"], results["get_64MiB_x4"]["ratio"])
    machine["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    result: dict[str, Any] = {
        "benchmark": NAME,
        "machine": machine,
        "rounds": cfg.rounds,
        "results": results,
        "gateway_cpu_s_per_GiB_get": runner.gateway_cpu_per_gib("get_64"),
        "gateway_cpu_s_per_GiB_put": runner.gateway_cpu_per_gib("put_64"),
        "target": {"get_64MiB_ratio_min": TARGET_GET_RATIO, "get_64MiB_ratio": get_ratio,
                   "met": get_ratio >= TARGET_GET_RATIO},
        "config": {
            "quick": args.quick,
            "client": cfg.client,
            "lake": lake_info,
            "gateway": "lakegate serve, LAKEGATE_ACCESS_LOG=false, defaults otherwise",
            "get_64MiB_x1_gets": cfg.big_gets_x1,
            "get_64MiB_x4_gets_per_stream": cfg.big_gets_x4,
            "put_64MiB_x1_puts": cfg.big_puts,
            "small_requests": cfg.small_count,
            "small_concurrency": cfg.small_concurrency,
            "statistic": "median over rounds; ratio = gateway / direct; latency percentiles over all rounds",
            "units": {"MBps": "10^6 bytes/s", "cpu_s_per_GiB": "CPU seconds (user+system) per GiB moved",
                      "cpu_ms_per_request": "CPU milliseconds per request"},
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
