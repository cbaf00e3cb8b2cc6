"""D3N's headline experiment, reproduced: a Facebook-like trace (75% byte reuse) replayed by
concurrent curl mappers on presigned URLs, straight to the lake vs through lakegate, over a
slow storage link.

Everything runs in a network namespace of its own (benchmarks/netns.py): the lake link (RGW's
port) is shaped to ``--lake-mbit`` (default 300 Mbit/s), the cluster link (peers at 127.0.0.2)
to 6x that (D3N's testbed: 2x40 Gbit fast vs 2x6 Gbit slow NICs), clients to nodes unshaped.

1. ``lakegate trace synth --upload``: a seeded trace and its data set, uploaded to the lake.
2. The same trace, replayed with ``lakegate replay --no-wait`` (every mapper fetches its next
   request as soon as it is free: completion measures the system, not the trace's arrival
   gaps) against, in one run:

       direct       the RGW itself
       lakegate_1   one lakegate node (L1 only)
       lakegate_3   three nodes (L1 + consistent-hashed L2), mappers spread over them

   each cache starting empty. Lake bytes are the tc class counter of the lake link, sampled
   through the replay (the cumulative curve), cross-checked with lakegate's own counters.

Targets (D3N): completion >= 2.4x faster than direct, lake bytes <= 0.25x of direct. No cache
can read fewer lake bytes than the trace's first reads: the floor is ``1 - reuse`` of direct
(0.25 at 75% reuse), reported next to the measurement.

    .venv/bin/python -m benchmarks.d3n_replay [--mappers 144] [--quick] [--plot-dir DIR]

Progress on stderr; one JSON object on stdout, also written to benchmarks/results/d3n_replay.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.netns import CLIENT_HOST, PEER_HOST, ShapedNetwork, available
from harness.ceph import CephCluster
from harness.cluster import LocalCluster
from harness.endpoints import S3Endpoint, Tenant
from harness.processes import REPO_ROOT, exit_on_signals, log
from harness.results import RESULTS_DIR, emit_result, git_revision, machine_info, rounded
from harness.units import MiB

NAME = "d3n_replay"
RUNS = ("direct", "lakegate_1", "lakegate_3")
TARGETS = {"speedup_min": 2.4, "lake_bytes_ratio_max": 0.25}


class LakeSampler:
    """The lake link's byte counter, sampled every ``interval`` seconds in a thread."""

    def __init__(self, net: ShapedNetwork, interval: float = 0.25) -> None:
        self.net, self.interval = net, interval
        self.points: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._base = net.counters().lake
        self._start = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.points.append((round(time.monotonic() - self._start, 3), self.net.counters().lake - self._base))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        total = self.net.counters().lake - self._base
        self.points.append((round(time.monotonic() - self._start, 3), total))
        return total


def lakegate_cli(*args: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_", "LAKEGATE_"))}
    done = subprocess.run([sys.executable, "-m", "gateway.cli", *args], cwd=REPO_ROOT, env=base | env,
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False)
    return done


def synthesize(args: argparse.Namespace, lake: S3Endpoint, workdir: Path) -> dict[str, Any]:
    trace = workdir / "trace.jsonl"
    done = lakegate_cli(
        "trace", "synth", "--out", str(trace), "--files", str(args.files), "--requests", str(args.requests),
        "--reuse", str(args.reuse), "--tenants", str(args.tenants), "--seed", str(args.seed),
        "--upload", "--endpoint", lake.url,
        env={"AWS_ACCESS_KEY_ID": lake.access_key, "AWS_SECRET_ACCESS_KEY": lake.secret_key}, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"trace synth failed:\n{done.stdout}\n{done.stderr}")
    log(done.stderr.strip().splitlines()[0] if done.stderr.strip() else "trace made")
    manifest = json.loads(trace.with_suffix(".manifest.json").read_text())
    return {"trace": str(trace), "stats": manifest["stats"], "params": manifest["params"]}


def replay(args: argparse.Namespace, trace: str, endpoints: list[str], keys: dict[str, str],
           workdir: Path, name: str) -> dict[str, Any]:
    out = workdir / f"{name}.json"
    done = lakegate_cli("replay", trace, "--endpoint", ",".join(endpoints), "--mappers", str(args.mappers),
                        "--no-wait", "--no-progress", "--json", str(out), *_key_args(keys),
                        env=_key_env(keys), timeout=3600)
    if not out.exists():
        raise RuntimeError(f"replay {name} wrote no result (exit {done.returncode}):\n{done.stderr}")
    log(f"{name}: " + " | ".join(done.stderr.strip().splitlines()[:3]))
    return json.loads(out.read_text())


def _key_args(keys: dict[str, str]) -> list[str]:
    return ["--credentials", keys["file"]] if "file" in keys else []


def _key_env(keys: dict[str, str]) -> dict[str, str]:
    if "file" in keys:
        return {}
    return {"AWS_ACCESS_KEY_ID": keys["access_key"], "AWS_SECRET_ACCESS_KEY": keys["secret_key"]}


def one_run(args: argparse.Namespace, name: str, lake: S3Endpoint, net: ShapedNetwork, trace: str,
            tenants: tuple[Tenant, ...], workdir: Path) -> dict[str, Any]:
    nodes: LocalCluster | None = None
    if name == "direct":
        endpoints = [lake.url]
        keys = {"access_key": lake.access_key, "secret_key": lake.secret_key}
    else:
        count = 1 if name == "lakegate_1" else 3
        nodes = LocalCluster(lake, nodes=count, tenants=tenants, host="0.0.0.0",  # noqa: S104 - namespace only
                             advertise_host=PEER_HOST, client_host=CLIENT_HOST,
                             cache_capacity=args.cache_capacity, l2_capacity=args.cache_capacity)
        nodes.up()  # (clustered: returns once every node sees the others)
        endpoints = list(nodes.urls.values())
        keys = {"file": str(workdir / "tenants.toml")}
    try:
        sampler = LakeSampler(net)
        cluster_before = net.counters().cluster
        res = replay(args, trace, endpoints, keys, workdir, name)
        lake_bytes = sampler.stop()
        run: dict[str, Any] = {
            "completion_s": res["completion_s"],
            "requests": res["requests"],
            "errors": res["errors"],
            "byte_mismatches": res["byte_mismatches"],
            "bytes_to_mappers": res["bytes"],
            "lake_link_bytes": lake_bytes,
            "cluster_link_bytes": net.counters().cluster - cluster_before,
            "latency_ms": res["latency_ms"],
            "first_byte_ms": res["first_byte_ms"],
            "lake_curve": sampler.points,
            "mapper_curve": res["cumulative_bytes"],
        }
        if nodes is not None:
            totals = nodes.totals()
            run["lake_bytes_metrics"] = totals.get("lake_bytes", 0) + totals.get("bytes_bypassed", 0)
            run["lake_gets"] = totals.get("lake_gets", 0)
            run["peer_bytes_metrics"] = totals.get("peer_bytes", 0)
    finally:
        if nodes is not None:
            nodes.down()
    log(f"{name}: {run['completion_s']} s, lake link {run['lake_link_bytes'] / MiB:.1f} MiB, "
        f"{run['errors']} errors")
    return run


def plots(result: dict[str, Any], directory: Path) -> list[Path]:
    """The completion-time bars and the cumulative lake bytes (D3N's two slides), as PNGs;
    ``python -m benchmarks.d3n_replay --replot RESULT.json --plot-dir DIR`` redraws them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = result["runs"]
    labels = {"direct": "direct to Ceph", "lakegate_1": "lakegate\n1 node (L1)", "lakegate_3": "lakegate\n3 nodes (L1+L2)"}
    colors = {"direct": "#999", "lakegate_1": "#6a6", "lakegate_3": "#2a7"}
    written = []
    fig, ax = plt.subplots(figsize=(6, 4))
    bars = ax.bar([labels[r] for r in RUNS], [runs[r]["completion_s"] for r in RUNS], color=[colors[r] for r in RUNS])
    for bar, r in zip(bars, RUNS):
        ax.annotate(f"{runs['direct']['completion_s'] / runs[r]['completion_s']:.2f}x",
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom")
    ax.set_ylabel("trace completion time (s)")
    ax.set_title(f"{result['config']['mappers']} curl mappers, lake link {result['network']['lake_mbit']:.0f} Mbit/s")
    fig.tight_layout()
    written.append(directory / "d3n_replay_completion.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in RUNS:
        curve = [(0.0, 0)] + [tuple(p) for p in runs[r]["lake_curve"]]
        ax.plot([p[0] for p in curve], [p[1] / (1 << 30) for p in curve], label=labels[r].replace("\n", " "),
                color=colors[r])
    ax.set_xlabel("seconds since the replay started")
    ax.set_ylabel("GiB read from the lake (tc counter)")
    reuse = result["trace"]["stats"].get("reuse")
    ax.set_title("cumulative data read from the lake" + (f" (trace: {reuse:.1%} byte reuse)" if reuse else ""))
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    written.append(directory / "d3n_replay_lake_bytes.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)
    for path in written:
        log(f"plot written to {path}")
    return written


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="benchmarks.d3n_replay", description=__doc__.split("\n\n")[0])
    p.add_argument("--mappers", type=int, default=144, help="concurrent curl mappers (D3N: 144)")
    p.add_argument("--files", type=int, default=100, help="files in the trace's population")
    p.add_argument("--requests", type=int, default=400, help="requests in the trace")
    p.add_argument("--reuse", type=float, default=0.75, help="fraction of requested bytes that are reuse")
    p.add_argument("--tenants", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--cache-capacity", default="4GiB", help="each node's L1 (and L2) capacity")
    p.add_argument("--lake-mbit", type=float, default=300.0, help="lake link rate (cluster link: 6x)")
    p.add_argument("--quick", action="store_true", help="a small trace (40 files, 120 requests), 32 mappers")
    p.add_argument("--plot-dir", type=Path, help="write the two PNGs here")
    p.add_argument("--replot", type=Path, metavar="JSON", help="only redraw the PNGs of an earlier result")
    p.add_argument("--output", type=Path, default=RESULTS_DIR / f"{NAME}.json", help="JSON result file")
    p.add_argument("--ceph-dir", type=Path, default=Path("/tmp/lakegate-bench-d3n-ceph"))
    p.add_argument("--rgw-port", type=int, default=7593)
    p.add_argument("--mon-port", type=int, default=40993)
    p.add_argument("--osd-size-gb", type=int, default=6, help="memstore capacity")
    args = p.parse_args(argv)
    if args.quick:
        args.files, args.requests, args.mappers = 40, 120, 32
    return args


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    if args.replot:
        plots(json.loads(args.replot.read_text()), args.plot_dir or Path("."))
        return 0
    exit_on_signals()
    why_not = available()
    if why_not:
        print(f"d3n_replay: needs a shaped network namespace ({why_not})", file=sys.stderr)
        return 2
    if shutil.which("curl") is None:
        print("d3n_replay: needs curl (apt-get install curl)", file=sys.stderr)
        return 2
    net = ShapedNetwork(lake_mbit=args.lake_mbit).start()
    net.enter()  # this process and everything it starts live in the namespace
    workdir = Path(tempfile.mkdtemp(prefix="lakegate-bench-d3n-"))
    ceph = CephCluster(ceph_dir=args.ceph_dir, rgw_port=args.rgw_port, mon_port=args.mon_port,
                       ms_port_min=47300, ms_port_max=47399, osd_size_gb=args.osd_size_gb)
    started = time.monotonic()
    try:
        lake = ceph.start()
        ceph.restart_rgw("tcp_nodelay=1")
        net.shape_lake_port(args.rgw_port)
        trace = synthesize(args, lake, workdir)
        tenants = tuple(Tenant(f"tenant-{i}", f"D3NBENCHTENANT{i:06d}", f"d3n-bench-secret-{i:04d}-0123456789")
                        for i in range(args.tenants))
        (workdir / "tenants.toml").write_text("\n".join(t.to_toml() for t in tenants))
        runs = {name: one_run(args, name, lake, net, trace["trace"], tenants, workdir) for name in RUNS}
    finally:
        ceph.stop()
        net.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    direct = runs["direct"]
    figures = {
        name: {"speedup": rounded(direct["completion_s"] / runs[name]["completion_s"]),
               "lake_bytes_ratio": rounded(runs[name]["lake_link_bytes"] / direct["lake_link_bytes"])}
        for name in RUNS[1:]
    }
    floor = rounded(1 - trace["stats"]["reuse"]) if "reuse" in trace["stats"] else None
    best = figures["lakegate_3"]
    result = {
        "benchmark": NAME,
        "revision": git_revision(),
        "machine": machine_info(),
        "network": net.describe(),
        "config": {"mappers": args.mappers, "files": args.files, "requests": args.requests, "reuse": args.reuse,
                   "tenants": args.tenants, "seed": args.seed, "cache_capacity": args.cache_capacity,
                   "replay": "--no-wait"},
        "trace": {"stats": trace["stats"]},
        "figures": figures,
        "lake_bytes_floor_ratio": floor,
        "targets": {**TARGETS, "speedup_met": best["speedup"] >= TARGETS["speedup_min"],
                    "lake_bytes_met": best["lake_bytes_ratio"] <= TARGETS["lake_bytes_ratio_max"]},
        "runs": runs,
        "wall_seconds": rounded(time.monotonic() - started),
    }
    emit_result(NAME, result, args.output)
    if args.plot_dir:
        args.plot_dir.mkdir(parents=True, exist_ok=True)
        plots(result, args.plot_dir)
    return 0 if all(r["errors"] == 0 and r["byte_mismatches"] == 0 for r in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
