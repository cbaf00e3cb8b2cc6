"""The sizing hub (cachetier/telemetry/reuse.py) and loop (gateway/loops/sizing.py), without
sockets: probes hand the hub their samples, tiers are plain numbers, the clock is simulated.
The split moves towards the tier whose misses cost more per byte of cache, shrinking tier
first; fixed sizing only reports; the report carries the contract's names; the start-up split
comes back from the last report."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from cachetier.telemetry.reuse import ReuseHub, SizingProbe
from gateway.loops.sizing import SizingLoop, TierControl, initial_split, read_report
from gateway.settings import Settings, SizingSettings
from policies import reuse

MiB = 1 << 20
BLOCK = MiB
TOTAL = 64 * MiB
TENANTS = Path(__file__).resolve().parents[2] / "deploy" / "tenants.example.toml"


class Tier:
    def __init__(self, capacity: int, log: list[tuple[str, int]], name: str) -> None:
        self.capacity, self.log, self.name = capacity, log, name

    def resize(self, capacity: int) -> int:
        self.log.append((self.name, capacity))
        self.capacity = capacity
        return 0

    def control(self) -> TierControl:
        return TierControl(lambda: self.capacity, self.resize)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _hex(name: str) -> str:
    import hashlib

    return hashlib.blake2b(name.encode(), digest_size=20).hexdigest()


def _loop(tmp_path: Path, mode: str = "adaptive", l1: int = TOTAL // 2, tiers: tuple[str, ...] = ("l1", "l2")
          ) -> tuple[SizingLoop, ReuseHub, dict[str, Tier], list[tuple[str, int]], Clock]:
    settings = SizingSettings(mode=mode, interval=30, sample_rate=1.0, half_life=60, total=TOTAL)
    hub = ReuseHub(1.0, 1 << 20)
    log: list[tuple[str, int]] = []
    stores = {"l1": Tier(l1, log, "l1"), "l2": Tier(TOTAL - l1, log, "l2")}
    stores = {name: stores[name] for name in tiers}
    clock = Clock()
    loop = SizingLoop(settings, hub, {n: t.control() for n, t in stores.items()}, TOTAL, tmp_path / "sizing.json",
                      grain=BLOCK, clock=clock, wall=clock)
    return loop, hub, stores, log, clock


def _epoch_of_reads(hub: ReuseHub, clock: Clock, *, l1_set: int, l2_set: int, l1_cost: float, l2_cost: float,
                    reads: int = 3000, seed: int = 1) -> None:
    """Uniform reads over an L1 set and an L2 set of blocks (as many of each), every miss timed
    at its tier's cost per block; then 30 s pass."""
    probe = SizingProbe(None, 1.0, hub)
    rng = random.Random(seed)
    for i in range(reads):
        stream, size = ("l1", l1_set) if i % 2 else ("l2", l2_set)
        probe.reference(stream, _hex(f"{stream}-{rng.randrange(size)}"), BLOCK, "alice", hit=False)
    for _ in range(20):
        probe.miss("l1", l1_cost, BLOCK)
        probe.miss("l2", l2_cost, BLOCK)
    clock.now += 30


def test_a_probe_samples_by_the_block_ids_hash_and_the_hub_counts_what_it_gets() -> None:
    hub = ReuseHub(0.5, 1 << 20)
    probe = SizingProbe(None, 0.5, hub)
    ids = [_hex(f"b{i}") for i in range(2000)]
    for hex_id in ids:
        probe.reference("l1", hex_id, BLOCK, "alice", hit=True)
    expected = sum(reuse.block_hash(h) < reuse.threshold_for(0.5) for h in ids)
    snap = hub.snapshot()
    assert snap.streams["l1"].sampled_references == expected == probe.sent
    assert 800 < expected < 1200
    assert snap.streams["l1"].observed_hit_ratio == 1.0
    # every read is counted (SHARDS_adj's denominator), the last ones since the last sample wait for the next
    assert 1980 <= snap.streams["l1"].references <= 2000
    assert snap.streams["l1"].referenced_bytes == snap.streams["l1"].references * BLOCK
    assert hub.snapshot().streams["l1"].sampled_references == 0  # the window starts again


def test_the_hub_drops_malformed_datagrams_and_counts_them() -> None:
    hub = ReuseHub(1.0, 1 << 20)
    for bad in (b"", b"r", b"r l3 1 2 1 t", b"r l1 -1 2 1 t", b"r l1 99999999999 2 1 t", b"c l1 nan 5",
                b"c l1 1.0 0", b"x l1", b"\xff\xfe", b"r l1 1 2 1", b"r l1 1 2 1 t 0 5"):
        hub.handle(bad)
    hub.handle(b"r l1 5 4096 1 alice 3 12288")
    hub.handle(b"c l2 0.5 4096")
    assert hub.malformed == 11 and hub.received == 2
    snap = hub.snapshot()
    assert snap.streams["l2"].cost_per_byte == pytest.approx(0.5 / 4096)
    assert snap.streams["l1"].cost_per_byte is None


def test_cheap_l2_misses_and_a_small_l1_set_move_the_split_to_l1_shrinking_l2_first(tmp_path: Path) -> None:
    loop, hub, stores, log, clock = _loop(tmp_path)
    for epoch in range(6):
        _epoch_of_reads(hub, clock, l1_set=56, l2_set=56, l1_cost=0.05, l2_cost=0.01, seed=epoch)
        loop.epoch()
    assert stores["l1"].capacity >= 0.8 * TOTAL
    assert stores["l1"].capacity + stores["l2"].capacity == TOTAL
    assert log[0][0] == "l2"  # the shrinking tier first
    steps = [c for name, c in log if name == "l1"]
    assert all(b - a <= 0.1 * TOTAL + BLOCK for a, b in zip([TOTAL // 2, *steps], steps))


def test_an_expensive_lake_moves_the_split_to_l2(tmp_path: Path) -> None:
    loop, hub, stores, log, clock = _loop(tmp_path)
    for epoch in range(6):
        _epoch_of_reads(hub, clock, l1_set=56, l2_set=56, l1_cost=0.005, l2_cost=0.2, seed=epoch)
        loop.epoch()
    assert stores["l1"].capacity <= 0.2 * TOTAL
    assert log[0][0] == "l1"  # the shrinking tier first


def test_fixed_sizing_reports_the_target_and_resizes_nothing(tmp_path: Path) -> None:
    loop, hub, stores, log, clock = _loop(tmp_path, mode="fixed")
    _epoch_of_reads(hub, clock, l1_set=56, l2_set=56, l1_cost=0.005, l2_cost=0.2)
    decision = loop.epoch()
    assert log == [] and stores["l1"].capacity == TOTAL // 2
    assert decision.target_l1 < TOTAL // 2
    report = read_report(tmp_path / "sizing.json")
    assert report is not None and report["mode"] == "fixed" and report["target_l1_bytes"] == decision.target_l1


def test_the_report_has_the_contracts_names(tmp_path: Path) -> None:
    loop, hub, stores, log, clock = _loop(tmp_path)
    loop.write_initial()
    first = read_report(tmp_path / "sizing.json")
    assert first is not None and first["l1_capacity_bytes"] == TOTAL // 2 and first["curves"]["l1"] == []
    _epoch_of_reads(hub, clock, l1_set=20, l2_set=40, l1_cost=0.01, l2_cost=0.1)
    loop.epoch()
    report = read_report(tmp_path / "sizing.json")
    assert report is not None
    for name in ("l1_capacity_bytes", "l2_capacity_bytes", "target_l1_bytes", "l1_miss_cost_s", "l2_miss_cost_s"):
        assert isinstance(report[name], (int, float)), name
    assert report["l1_miss_cost_s"] == pytest.approx(0.01) and report["l2_miss_cost_s"] == pytest.approx(0.1)
    for tier in ("l1", "l2"):
        curve = report["curves"][tier]
        assert curve == report[f"{tier}_curve"] and len(curve) > 10
        sizes = [s for s, _ in curve]
        ratios = [r for _, r in curve]
        assert sizes == sorted(sizes) and sizes[-1] >= 2 * TOTAL
        assert all(a >= b - 1e-9 for a, b in zip(ratios, ratios[1:]))  # a miss-ratio curve never rises
        assert report["tenant_curves"][tier]["alice"]
    # an L1 set of 20 blocks: nothing misses past 20 MiB (but the cold misses of the first reads)
    at_32 = next(r for s, r in report["curves"]["l1"] if s >= 32 * MiB)
    assert at_32 < 0.05
    assert report["history"][-1]["target_l1_bytes"] == report["target_l1_bytes"]
    assert json.loads((tmp_path / "sizing.json").read_text()) == report


def test_a_node_alone_gives_l1_everything(tmp_path: Path) -> None:
    loop, hub, stores, log, clock = _loop(tmp_path, l1=TOTAL // 4, tiers=("l1",))
    _epoch_of_reads(hub, clock, l1_set=20, l2_set=20, l1_cost=0.01, l2_cost=0.1)
    decision = loop.epoch()
    assert decision.next_l1 == TOTAL and stores["l1"].capacity == TOTAL


def test_no_evidence_holds_the_split(tmp_path: Path) -> None:
    loop, hub, stores, log, clock = _loop(tmp_path)
    clock.now += 30
    decision = loop.epoch()
    assert log == [] and decision.next_l1 == TOTAL // 2


def _settings(tmp_path: Path, **overrides: object) -> Settings:
    options: dict[str, object] = {"cache_capacity": "8MiB", "l2_capacity": "24MiB", **overrides}
    return Settings.load(_env_file=None, tenants_file=TENANTS, cache_dir=tmp_path, **options)


def test_the_start_up_split(tmp_path: Path) -> None:
    cluster = {"peers": "http://127.0.0.1:1", "cluster_secret": "s" * 20}
    assert initial_split(_settings(tmp_path)) == (8 * MiB, 0)  # alone: fixed by default
    assert initial_split(_settings(tmp_path, sizing="adaptive")) == (32 * MiB, 0)  # alone: L1 takes the total
    assert _settings(tmp_path, **cluster).sizing.mode == "adaptive"  # in a cluster: adaptive by default
    assert initial_split(_settings(tmp_path, **cluster)) == (8 * MiB, 24 * MiB)
    assert initial_split(_settings(tmp_path, sizing="fixed", **cluster)) == (8 * MiB, 24 * MiB)
    # the split the last run left, if the total is the same
    (tmp_path / "sizing.json").write_text(json.dumps({"mode": "adaptive", "total_bytes": 32 * MiB,
                                                      "l1_capacity_bytes": 20 * MiB}))
    assert initial_split(_settings(tmp_path, **cluster)) == (20 * MiB, 12 * MiB)
    assert initial_split(_settings(tmp_path, sizing_max_l1=0.5, **cluster)) == (16 * MiB, 16 * MiB)  # clamped
    assert initial_split(_settings(tmp_path, l2_capacity="40MiB", **cluster)) == (8 * MiB, 40 * MiB)  # a new total


def test_a_probe_in_the_hubs_process_never_waits_for_an_epoch() -> None:
    """An epoch reads the curves under the hub's lock (tens of ms before they were computed in
    one pass); a probe on the event loop only queues its sample meanwhile."""
    import threading

    hub = ReuseHub(1.0, 1 << 20)
    probe = SizingProbe(None, 1.0, hub)
    with hub.lock:  # an epoch in progress
        sent = threading.Thread(target=probe.reference, args=("l1", _hex("b"), BLOCK, "alice", True))
        sent.start()
        sent.join(5)
        assert not sent.is_alive()  # it returned without the lock
    assert hub.snapshot().streams["l1"].sampled_references == 1  # the snapshot took the queue
