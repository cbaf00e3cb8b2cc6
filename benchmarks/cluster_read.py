"""Cluster-read benchmark (D3N's L2): a working set read by clients on every one of 3 nodes,
with the nodes as one cache (L1 + consistent-hashed L2) versus every node alone (L1 only).

Everything runs in a network namespace of its own (benchmarks/netns.py): the lake link (RGW's
port) is shaped to ``--lake-mbit`` (default 300 Mbit/s), the cluster link (peers reach each
other at 127.0.0.2) to 6x that, clients reach their node unshaped. ``--unshaped`` runs on the
host's loopback instead (no tc; lake bytes then from lakegate's metrics only).

Each round starts both modes on fresh nodes (fresh caches; the order flips each round):

    l2        `lakegate cluster up --nodes 3`               an L1 miss goes to the block's owner
    l1_only   `lakegate cluster up --nodes 3 --standalone`  every node fetches from the lake

and on each node ``--clients`` concurrent streams read the whole working set (``--objects``
objects, mixed sizes) in an order of their own, all nodes at once; every body is checked by
SHA-256. Measured: completion time (first request to last byte, all nodes), bytes that
crossed the lake link (tc class counter) and lakegate's own count of lake bytes (cross-check),
bytes on the cluster link. Target: lake bytes with L2 <= 0.4x of L1 only.

    .venv/bin/python -m benchmarks.cluster_read [--rounds 2] [--quick] [--plot out.png]

Progress on stderr; one JSON object on stdout, also written to benchmarks/results/cluster_read.json.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import random
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.netns import CLIENT_HOST, PEER_HOST, LinkCounters, ShapedNetwork, available
from harness.ceph import CephCluster
from harness.cluster import LocalCluster
from harness.clients import gather_limited, make_client, run_async
from harness.endpoints import S3Endpoint
from harness.processes import exit_on_signals, log
from harness.results import RESULTS_DIR, emit_result, git_revision, machine_info, median, rounded
from harness.units import MiB

NAME = "cluster_read"
NODES = 3
BUCKET = "cluster-read"
TARGET_LAKE_RATIO_MAX = 0.4
MODES = ("l1_only", "l2")


def working_set(objects: int, seed: int) -> dict[str, bytes]:
    """Mixed sizes: three in four objects of 1 MiB, the rest 6-10 MiB (several blocks)."""
    rng = random.Random(seed)
    sizes = [1 * MiB if i % 4 else rng.randrange(6, 11) * MiB for i in range(objects)]
    return {f"ws/{i:04d}": rng.randbytes(size) for i, size in enumerate(sizes)}


async def upload(lake: S3Endpoint, objects: dict[str, bytes]) -> None:
    async with make_client("httpx", lake) as s3:
        await s3.create_bucket(BUCKET)
        await gather_limited((s3.put_checked(BUCKET, k, v) for k, v in objects.items()), 8)


async def read_everywhere(endpoints: list[S3Endpoint], digests: dict[str, str], clients: int, seed: int) -> float:
    """Every node's clients read every object once, all at the same time; seconds taken."""
    async def node_reads(index: int, endpoint: S3Endpoint) -> None:
        keys = list(digests)
        random.Random(seed * 100 + index).shuffle(keys)  # each node its own order
        async with make_client("raw", endpoint, max_connections=clients) as s3:
            async def one(key: str) -> None:
                status, _, digest, _ = await s3.get(BUCKET, key, sha256=True)
                if status != 200 or digest != digests[key]:
                    raise RuntimeError(f"GET {key} through {endpoint.url}: status {status}, body wrong")

            await gather_limited((one(k) for k in keys), clients)

    started = time.monotonic()
    await asyncio.gather(*(node_reads(i, e) for i, e in enumerate(endpoints)))
    return time.monotonic() - started


class Run:
    def __init__(self, args: argparse.Namespace, lake: S3Endpoint, net: ShapedNetwork | None,
                 digests: dict[str, str]) -> None:
        self.args, self.lake, self.net, self.digests = args, lake, net, digests
        self.samples: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}

    def one(self, mode: str, round_no: int) -> dict[str, Any]:
        shaped = self.net is not None
        nodes = LocalCluster(self.lake, nodes=NODES, standalone=(mode == "l1_only"),
                             host="0.0.0.0" if shaped else "127.0.0.1",  # noqa: S104 - inside the namespace
                             advertise_host=PEER_HOST if shaped else None,
                             client_host=CLIENT_HOST if shaped else None)
        try:
            endpoints = nodes.up().endpoints()
            before = self.net.counters() if self.net is not None else LinkCounters(0, 0, 0)
            seconds = run_async(read_everywhere(endpoints, self.digests, self.args.clients, round_no))
            link = (self.net.counters() - before) if self.net is not None else None
            totals = nodes.totals()
        finally:
            nodes.down()
        sample = {
            "seconds": rounded(seconds),
            "lake_bytes_metrics": totals.get("lake_bytes", 0) + totals.get("bytes_bypassed", 0),
            "lake_gets": totals.get("lake_gets", 0),
            "peer_bytes_metrics": totals.get("peer_bytes", 0),
        }
        if link is not None:
            sample |= {"lake_link_bytes": link.lake, "cluster_link_bytes": link.cluster}
        log(f"round {round_no} {mode}: {sample}")
        self.samples[mode].append(sample)
        return sample

    def summary(self) -> dict[str, Any]:
        data_bytes = sum(len_ for len_ in self.args.sizes)
        out: dict[str, Any] = {}
        for mode, samples in self.samples.items():
            out[mode] = {name: median([s[name] for s in samples]) for name in samples[0]}
            out[mode]["samples"] = samples
        lake_key = "lake_link_bytes" if self.net is not None else "lake_bytes_metrics"
        out["working_set_bytes"] = data_bytes
        out["lake_bytes_ratio"] = rounded(out["l2"][lake_key] / out["l1_only"][lake_key])
        out["lake_bytes_ratio_metrics"] = rounded(out["l2"]["lake_bytes_metrics"] / out["l1_only"]["lake_bytes_metrics"])
        out["completion_speedup"] = rounded(out["l1_only"]["seconds"] / out["l2"]["seconds"])
        out["lake_bytes_per_working_set"] = {m: rounded(out[m][lake_key] / data_bytes) for m in MODES}
        return out


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    labels = ["every node alone\n(L1 only)", "one cluster\n(L1 + L2)"]
    key = "lake_link_bytes" if result["shaped"] else "lake_bytes_metrics"
    left.bar(labels, [result[m][key] / MiB for m in MODES], color=["#999", "#2a7"])
    left.set_ylabel("MiB read from the lake")
    left.set_title(f"lake bytes (L2 = {result['lake_bytes_ratio']}x)")
    right.bar(labels, [result[m]["seconds"] for m in MODES], color=["#999", "#2a7"])
    right.set_ylabel("seconds")
    right.set_title(f"completion ({result['completion_speedup']}x faster)")
    fig.suptitle(f"{NODES} nodes x {result['config']['clients']} clients read {result['config']['objects']} objects"
                 + (f", lake link {result['network']['lake_mbit']:.0f} Mbit/s" if result["shaped"] else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    log(f"plot written to {path}")


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="benchmarks.cluster_read", description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2, help="rounds of both modes (default 2)")
    p.add_argument("--objects", type=int, default=48, help="objects in the working set (default 48, ~130 MiB)")
    p.add_argument("--clients", type=int, default=4, help="concurrent readers per node (default 4)")
    p.add_argument("--quick", action="store_true", help="1 round, 16 objects: a smoke run")
    p.add_argument("--lake-mbit", type=float, default=300.0, help="lake link rate (cluster link: 6x)")
    p.add_argument("--unshaped", action="store_true", help="no namespace, no tc: the host's loopback")
    p.add_argument("--plot", type=Path, metavar="PNG", help="also write a bar chart")
    p.add_argument("--output", type=Path, default=RESULTS_DIR / f"{NAME}.json", help="JSON result file")
    p.add_argument("--ceph-dir", type=Path, default=Path("/tmp/lakegate-bench-cluster-ceph"))
    p.add_argument("--rgw-port", type=int, default=7592)
    p.add_argument("--mon-port", type=int, default=40992)
    p.add_argument("--osd-size-gb", type=int, default=4, help="memstore capacity")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.objects = 1, 16
    return args


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    exit_on_signals()
    net: ShapedNetwork | None = None
    if not args.unshaped:
        why_not = available()
        if why_not:
            print(f"cluster_read: no shaped network ({why_not}); run with --unshaped", file=sys.stderr)
            return 2
        net = ShapedNetwork(lake_mbit=args.lake_mbit).start()
        net.enter()  # this process, its clients and every node it starts live in the namespace
    objects = working_set(args.objects, seed=1)
    args.sizes = [len(v) for v in objects.values()]
    digests = {k: hashlib.sha256(v).hexdigest() for k, v in objects.items()}
    ceph = CephCluster(ceph_dir=args.ceph_dir, rgw_port=args.rgw_port, mon_port=args.mon_port,
                       ms_port_min=47200, ms_port_max=47299, osd_size_gb=args.osd_size_gb)
    started = time.monotonic()
    try:
        lake = ceph.start()
        ceph.restart_rgw("tcp_nodelay=1")
        if net is not None:
            net.shape_lake_port(args.rgw_port)
        log(f"uploading {len(objects)} objects ({sum(args.sizes) / MiB:.0f} MiB)")
        run_async(upload(lake, objects))
        del objects
        run = Run(args, lake, net, digests)
        for round_no in range(1, args.rounds + 1):
            for mode in (MODES if round_no % 2 else MODES[::-1]):
                run.one(mode, round_no)
        summary = run.summary()
    finally:
        ceph.stop()
        if net is not None:
            net.stop()
    result = {
        "benchmark": NAME,
        "revision": git_revision(),
        "machine": machine_info(),
        "shaped": net is not None,
        "network": net.describe() if net is not None else None,
        "config": {"nodes": NODES, "objects": args.objects, "clients": args.clients, "rounds": args.rounds},
        **summary,
        "target": {"lake_bytes_ratio_max": TARGET_LAKE_RATIO_MAX,
                   "met": summary["lake_bytes_ratio"] <= TARGET_LAKE_RATIO_MAX},
        "wall_seconds": rounded(time.monotonic() - started),
    }
    emit_result(NAME, result, args.output)
    if args.plot:
        plot(result, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
