"""Hit latency with and without concurrent cold fills: do hits wait behind misses?

One ``lakegate serve`` (the gateway measured) in front of a lake: by default a second
``lakegate serve`` over a folder lake (so fills run through S3Lake and lakegate's transport,
as in front of a real S3), or the folder lake itself (``--lake dir``). One client reads a hot
4 KiB object over and over on one keep-alive connection (every GET an L1 hit), timing each GET
from its request sent to its last byte; in every round it does so for ``--seconds`` alone
("idle") and again while ``--readers`` other clients, in a separate process (their own event
loop never delays the hit client's), read fresh 4-64 MiB objects the gateway has never seen
("fills": every block a lake GET, a checksum and a file write). The order flips each round.

    PYTHONPATH=$PWD .venv/bin/python -m benchmarks.hit_latency [--rounds 5] [--lake s3|dir] [--loop-lag]

The lake lakegate does not cache (LAKEGATE_CACHE=false there; --inner-cache to let it). Per fills
phase also: the gateway's CPU per GiB filled, its event loop's (main thread's) apart from its
other threads' (the store's); with ``--loop-lag`` the gateway runs under benchmarks/looplag.py,
which reports how late a 1 ms ticker on its loop ran in each phase and its GC pauses: end-to-end
hit latency on a shared 2-core machine is mostly scheduling noise, these two are the gateway's own.

Progress on stderr; one JSON object on stdout (hit p50/p99/max in ms per phase: the median and
the min over rounds; the cold readers' MB/s), also written to benchmarks/results/hit_latency.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.clients import RawS3Client, run_async
from harness.endpoints import BENCH_TENANT, S3Endpoint
from harness.gateway import Gateway
from harness.load import PySpy
from harness.processes import exit_on_signals, log
from harness.results import emit_result, git_revision, machine_info, median, percentile
from harness.units import GiB, KiB, MiB

NAME = "hit_latency"
BUCKET = "hitlatency"
HOT_KEY = "hot/4KiB"
COLD_SIZES = (4 * MiB, 8 * MiB, 16 * MiB, 32 * MiB, 64 * MiB)


def cold_keys(round_no: int, per_round: int) -> list[str]:
    return [f"cold/r{round_no:02d}-{i:02d}" for i in range(per_round)]


def cold_size(key: str) -> int:
    return COLD_SIZES[int(key.rsplit("-", 1)[1]) % len(COLD_SIZES)]


# -- the cold readers (a child process) ------------------------------------------------------


async def read_cold(endpoint: S3Endpoint, keys: list[str], readers: int) -> dict[str, Any]:
    """Each of ``readers`` connections reads its share of ``keys``; bytes and seconds."""
    async with RawS3Client(endpoint, max_connections=readers) as client:
        queue = list(keys)
        received = 0

        async def reader() -> None:
            nonlocal received
            while queue:
                key = queue.pop()
                status, n, _, _ = await client.get(BUCKET, key)
                if status != 200 or n != cold_size(key):
                    raise RuntimeError(f"cold GET {key}: HTTP {status}, {n} bytes")
                received += n

        started = time.perf_counter()
        await asyncio.gather(*(reader() for _ in range(readers)))
        return {"bytes": received, "seconds": time.perf_counter() - started}


def cold_main(args: argparse.Namespace) -> int:
    endpoint = S3Endpoint(args.url, BENCH_TENANT.access_key, BENCH_TENANT.secret_key, "us-east-1")
    print(json.dumps(run_async(read_cold(endpoint, args.keys, args.readers))))
    return 0


# -- the hit client and the run ----------------------------------------------------------------


async def time_hits(client: RawS3Client, until: Any) -> list[float]:
    """GET the hot object until ``until()`` says stop; each GET's seconds."""
    times: list[float] = []
    while not until():
        got = await client.timed_get(BUCKET, HOT_KEY)
        if got.status != 200 or got.received != 4 * KiB:
            raise RuntimeError(f"hot GET: HTTP {got.status}, {got.received} bytes")
        times.append(got.total)
    return times


def summary(times: list[float]) -> dict[str, float]:
    ms = [t * 1000 for t in times]
    return {"n": len(ms), "p50_ms": round(percentile(ms, 50), 3), "p99_ms": round(percentile(ms, 99), 3),
            "max_ms": round(max(ms), 3)}


async def upload(lake_endpoint: S3Endpoint, rounds: int, per_round: int) -> None:
    base = os.urandom(max(COLD_SIZES))
    async with RawS3Client(lake_endpoint, max_connections=4) as client:
        await client.create_bucket(BUCKET)
        await client.put_checked(BUCKET, HOT_KEY, os.urandom(4 * KiB))
        for round_no in range(rounds):
            for key in cold_keys(round_no, per_round):
                await client.put_checked(BUCKET, key, key.encode() + base[len(key):cold_size(key)])


def thread_cpu(pid: int) -> tuple[float, float]:
    """CPU seconds (user + system) of the process's main thread (its event loop) and of its
    other threads together."""
    ticks = os.sysconf("SC_CLK_TCK")
    main = others = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended
            continue
        seconds = (int(fields[11]) + int(fields[12])) / ticks
        if task.name == str(pid):
            main += seconds
        else:
            others += seconds
    return main, others


class LagReader:
    """The measured gateway's event-loop lag per phase (``--loop-lag``: benchmarks/looplag.py)."""

    def __init__(self, pid: int, out: Path | None) -> None:
        self.pid, self.out = pid, out

    async def mark(self) -> dict[str, Any] | None:
        """The lag since the last mark (None without --loop-lag)."""
        if self.out is None:
            return None
        lines = self.out.read_text().splitlines() if self.out.exists() else []
        os.kill(self.pid, signal.SIGUSR1)
        for _ in range(100):
            await asyncio.sleep(0.01)
            now = self.out.read_text().splitlines() if self.out.exists() else []
            if len(now) > len(lines):
                result: dict[str, Any] = json.loads(now[-1])
                return result
        return None


async def measure(gateway: S3Endpoint, args: argparse.Namespace, pid: int, lag: LagReader) -> dict[str, Any]:
    rounds: list[dict[str, Any]] = []
    async with RawS3Client(gateway, max_connections=1) as client:
        await time_hits(client, _for(0.5))  # warm: the hot object in L1, its metadata cached
        for round_no in range(args.rounds):
            result: dict[str, Any] = {}
            for phase in (("idle", "fills") if round_no % 2 == 0 else ("fills", "idle")):
                await lag.mark()
                if phase == "idle":
                    result["idle"] = summary(await time_hits(client, _for(args.seconds)))
                    result["idle_loop_lag"] = await lag.mark()
                    continue
                cmd = [sys.executable, "-m", "benchmarks.hit_latency", "--cold-reader", "--url", gateway.url,
                       "--readers", str(args.readers), "--keys", *cold_keys(round_no, args.objects)]
                child = await asyncio.create_subprocess_exec(*cmd, stdout=subprocess.PIPE,
                                                             cwd=Path(__file__).resolve().parents[1])
                done = asyncio.ensure_future(child.communicate())
                spy = PySpy(pid, args.profile / f"fills-{round_no}.txt", rate=250) if args.profile else None
                if spy is not None:
                    spy.cmd.append("--nonblocking")  # not stopping the gateway to sample it
                if spy is not None:
                    await asyncio.to_thread(spy.start)
                await asyncio.sleep(0.05)  # the child's start-up (imports) is no fill
                cpu = thread_cpu(pid)
                result["fills"] = summary(await time_hits(client, done.done))
                result["fills_loop_lag"] = await lag.mark()
                out, _ = await done
                if spy is not None:
                    await asyncio.to_thread(spy.stop)
                if child.returncode != 0:
                    raise RuntimeError("the cold readers failed")
                cold = json.loads(out)
                await asyncio.sleep(1.0)  # the last blocks stored before the next phase
                used = [after - before for after, before in zip(thread_cpu(pid), cpu, strict=True)]
                gib = cold["bytes"] / GiB
                result["cpu_s_per_GiB"] = {"loop": round(used[0] / gib, 3), "threads": round(used[1] / gib, 3)}
                result["cold_MBps"] = round(cold["bytes"] / cold["seconds"] / 1e6, 1)
            log(f"round {round_no + 1}: idle p50 {result['idle']['p50_ms']} p99 {result['idle']['p99_ms']} ms; "
                f"fills p50 {result['fills']['p50_ms']} p99 {result['fills']['p99_ms']} "
                f"max {result['fills']['max_ms']} ms (cold {result['cold_MBps']} MB/s, gateway CPU s/GiB "
                f"{result['cpu_s_per_GiB']})"
                + (f"; loop lag idle {result['idle_loop_lag']}, fills {result['fills_loop_lag']}"
                   if args.loop_lag else ""))
            rounds.append(result)
    return {"rounds": rounds, **{f"{phase}_{stat}_{agg.__name__.removesuffix('_of')}": round(agg(r[phase][stat] for r in rounds), 3)
                                 for phase in ("idle", "fills") for stat in ("p50_ms", "p99_ms", "max_ms")
                                 for agg in (min, median_of)},
            "cold_MBps_median": median_of(r["cold_MBps"] for r in rounds),
            "loop_cpu_s_per_GiB_median": median_of(r["cpu_s_per_GiB"]["loop"] for r in rounds),
            "threads_cpu_s_per_GiB_median": median_of(r["cpu_s_per_GiB"]["threads"] for r in rounds)}


def median_of(values: Any) -> float:
    return median(list(values))


def _for(seconds: float) -> Any:
    deadline = time.monotonic() + seconds
    return lambda: time.monotonic() >= deadline


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="benchmarks.hit_latency", description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=3.0, help="idle phase length per round")
    p.add_argument("--readers", type=int, default=4, help="concurrent cold readers")
    p.add_argument("--objects", type=int, default=10, help="cold objects per round (4-64 MiB)")
    p.add_argument("--lake", choices=("s3", "dir"), default="s3")
    p.add_argument("--port", type=int, default=0, help="the measured gateway's port (the lake's: +1)")
    p.add_argument("--output", type=Path)
    p.add_argument("--loop-lag", action="store_true",
                   help="run the gateway under benchmarks/looplag.py: its event loop's lag per phase")
    p.add_argument("--switch-interval", type=float, metavar="S",
                   help="with --loop-lag: the gateway's sys.setswitchinterval (default: Python's 5 ms)")
    p.add_argument("--inner-cache", action="store_true",
                   help="let the lake (a lakegate over a folder) cache too (default: LAKEGATE_CACHE=false there)")
    p.add_argument("--profile", type=Path, metavar="DIR",
                   help="py-spy record the gateway in each fills phase (collapsed stacks; skews the figures)")
    p.add_argument("--cold-reader", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--keys", nargs="*", default=[], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.cold_reader:
        return cold_main(args)
    exit_on_signals()
    env = {"LAKEGATE_ACCESS_LOG": "false", "LAKEGATE_CACHE_CAPACITY": str(8 * GiB)}
    with tempfile.TemporaryDirectory(prefix="lakegate-hitlat-") as tmp:
        folder = f"dir:{Path(tmp) / 'lake'}"
        inner_env = env if args.inner_cache else {**env, "LAKEGATE_CACHE": "false"}
        inner = Gateway(folder, env=inner_env, workdir=Path(tmp) / "inner", port=args.port + 1 if args.port else 0) \
            if args.lake == "s3" else None
        lake: S3Endpoint | str = inner.start() if inner is not None else folder
        try:
            if inner is None:  # the folder lake filled through a first gateway over it
                with Gateway(folder, env=env, workdir=Path(tmp) / "loader") as loader:
                    run_async(upload(loader.endpoint(), args.rounds, args.objects))
            else:
                run_async(upload(inner.endpoint(), args.rounds, args.objects))
            lag_out = Path(tmp) / "looplag.jsonl" if args.loop_lag else None
            command = (sys.executable, "-m", "benchmarks.looplag") if args.loop_lag else ()
            lag_env = {"LOOPLAG_OUT": str(lag_out), "LOOPLAG_SWITCH_INTERVAL": str(args.switch_interval or "")}
            with Gateway(lake, env={**env, **lag_env} if lag_out else env, command=command,
                         workdir=Path(tmp) / "outer", port=args.port) as gateway:
                results = run_async(measure(gateway.endpoint(), args, gateway.pid, LagReader(gateway.pid, lag_out)))
        finally:
            if inner is not None:
                inner.stop()
    result = {"benchmark": NAME, "machine": machine_info(), "lakegate_revision": git_revision(),
              "config": {"lake": args.lake, "lake_caches": args.inner_cache, "rounds": args.rounds, "idle_seconds": args.seconds,
                         "readers": args.readers, "cold_objects_per_round": args.objects,
                         "cold_sizes_MiB": [s // MiB for s in COLD_SIZES],
                         "hit": "4 KiB GET, one keep-alive connection, request sent -> last byte",
                         "statistic": "per round p50/p99/max of hit latency; median and min over rounds"},
              "results": results}
    emit_result(NAME, result, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
