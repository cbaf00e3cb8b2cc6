"""policies.reuse (SHARDS): the sampled miss-ratio curve against the exact Mattson curve on
synthetic traces of 1e6 references each, its memory bound under tracemalloc, its cost per
reference (printed, not asserted), and its unit behaviour."""

from __future__ import annotations

import threading
import time
import tracemalloc
from dataclasses import dataclass

import pytest

from policies import reuse
from policies.reuse import MODULUS, Shards, block_hash, entries_within, threshold_for

np = pytest.importorskip("numpy")

MiB = 1 << 20
REFERENCES = 1_000_000
RATE = 0.01
POINTS = 101  # cache sizes 0 .. 1.1x distinct bytes
MAE_BOUND = 0.01


# -- exact reference: Mattson LRU stack distance in bytes ----------------------------------------


@dataclass
class Exact:
    """Every reuse's ``d + size`` (d: bytes of the distinct blocks used since its last use)."""

    stack_bytes: object  # numpy arrays, sorted by stack_bytes
    reuse_sizes: object
    references: int
    referenced_bytes: int
    distinct_bytes: int

    def curves(self, caches: list[int]) -> tuple[list[float], list[float]]:
        hits = np.searchsorted(self.stack_bytes, np.asarray(caches, dtype=np.float64), side="right")
        cumulative = np.concatenate(([0.0], np.cumsum(self.reuse_sizes, dtype=np.float64)))
        misses = [1.0 - int(k) / self.references for k in hits]
        byte_misses = [1.0 - float(cumulative[k]) / self.referenced_bytes for k in hits]
        return misses, byte_misses


def exact_mattson(blocks: list[int], sizes: list[int]) -> Exact:
    """O(N log N): a Fenwick tree over reference positions holds each block's size at its
    latest position; the distance of a reuse is the sum after its previous position."""
    n = len(blocks)
    tree = [0] * (n + 1)
    last: dict[int, int] = {}
    stack: list[int] = []
    reused: list[int] = []
    total = 0
    distinct = 0
    for i in range(1, n + 1):
        block, size = blocks[i - 1], sizes[i - 1]
        p = last.get(block)
        if p is None:
            distinct += size
        else:
            prefix, q = 0, p
            while q:
                prefix += tree[q]
                q &= q - 1
            stack.append(total - prefix + size)
            reused.append(size)
            total -= size
            while p <= n:
                tree[p] -= size
                p += p & -p
        last[block] = i
        total += size
        q = i
        while q <= n:
            tree[q] += size
            q += q & -q
    order = np.argsort(np.asarray(stack, dtype=np.float64), kind="stable")
    return Exact(
        np.asarray(stack, dtype=np.float64)[order],
        np.asarray(reused, dtype=np.int64)[order],
        n,
        sum(sizes),
        distinct,
    )


def exact_by_stack(blocks: list[int], sizes: list[int]) -> list[float | None]:
    """O(N^2) plain LRU stack, to check the Fenwick reference on small traces."""
    stack: list[int] = []  # most recent first
    out: list[float | None] = []
    size_of = dict(zip(blocks, sizes))
    for block in blocks:
        if block in stack:
            depth = stack.index(block)
            out.append(float(sum(size_of[b] for b in stack[: depth + 1])))
            stack.pop(depth)
        else:
            out.append(None)
        stack.insert(0, block)
    return out


def test_the_fenwick_reference_matches_a_plain_lru_stack() -> None:
    rng = np.random.default_rng(7)
    blocks = rng.integers(0, 40, 2000).tolist()
    size_of = rng.integers(1, 100, 40).tolist()
    sizes = [size_of[b] for b in blocks]
    expected = sorted(d for d in exact_by_stack(blocks, sizes) if d is not None)
    assert exact_mattson(blocks, sizes).stack_bytes.tolist() == expected


# -- synthetic traces ------------------------------------------------------------------------------


@dataclass
class Trace:
    blocks: list[int]
    sizes: list[int]
    hashes: list[int]


def block_sizes(rng: object, count: int) -> object:
    """Mostly 4 MiB blocks; 15% are the smaller last blocks of objects."""
    sizes = np.full(count, 4 * MiB, dtype=np.int64)
    last = rng.random(count) < 0.15  # type: ignore[attr-defined]
    sizes[last] = rng.integers(256 * 1024, 4 * MiB, int(last.sum()))  # type: ignore[attr-defined]
    return sizes


def zipf(rng: object, blocks: int, count: int, alpha: float = 0.9) -> object:
    weights = 1.0 / np.arange(1, blocks + 1, dtype=np.float64) ** alpha
    return rng.choice(blocks, size=count, p=weights / weights.sum())  # type: ignore[attr-defined]


def make_trace(kind: str, seed: int = 13) -> Trace:
    """1e6 references (2e6 for mixed) of the named shape; block ids 0.. and their sizes."""
    rng = np.random.default_rng(seed)
    n = REFERENCES
    if kind == "zipf":
        ids = zipf(rng, 400_000, n)
    elif kind == "scan":  # one pass over more blocks than any cache of the range holds twice
        ids = np.arange(n)
    elif kind == "loop":  # two passes over 500k blocks
        ids = np.arange(n) % (n // 2)
    elif kind == "mixed":  # a Zipf hot set interleaved with a scan over 1M other blocks
        n = 2 * REFERENCES  # its error is the scan's sampled share: 1/sqrt(blocks * rate)
        hot = rng.random(n) < 0.5
        ids = np.empty(n, dtype=np.int64)
        ids[hot] = zipf(rng, 50_000, int(hot.sum()))
        ids[~hot] = 50_000 + np.arange(int((~hot).sum()))
    elif kind == "shifting":  # Zipf over 200k blocks, then over a set that moved by 100k
        half = n // 2
        ids = np.concatenate((zipf(rng, 200_000, half), 100_000 + zipf(rng, 200_000, n - half)))
    else:
        raise ValueError(kind)
    universe = int(ids.max()) + 1
    sizes = block_sizes(rng, universe)
    hashes = rng.integers(0, MODULUS, universe)  # blake2b ids are uniform: so are their hashes
    return Trace(ids.tolist(), sizes[ids].tolist(), hashes[ids].tolist())


def run_shards(trace: Trace, rate: float = RATE, memory: int = MiB) -> Shards:
    estimator = Shards(rate, memory)
    cut = threshold_for(rate)
    record = estimator.record
    for h, size in zip(trace.hashes, trace.sizes):
        if h < cut:  # the workers' pre-filter
            record(h, size)
    estimator.observe(len(trace.sizes), sum(trace.sizes))
    return estimator


def mean_absolute_error(a: list[float], b: list[float]) -> float:
    return sum(abs(x - y) for x, y in zip(a, b)) / len(a)


@pytest.mark.parametrize("kind", ["zipf", "scan", "loop", "mixed", "shifting"])
def test_the_shards_curve_is_within_001_of_the_exact_curve(kind: str) -> None:
    trace = make_trace(kind)
    exact = exact_mattson(trace.blocks, trace.sizes)
    caches = [round(i * 1.1 * exact.distinct_bytes / (POINTS - 1)) for i in range(POINTS)]
    want, want_bytes = exact.curves(caches)
    estimator = run_shards(trace)
    got = [m for _, m in estimator.curve(caches)]
    got_bytes = [m for _, m in estimator.byte_curve(caches)]
    plain = Shards(RATE, MiB)  # without SHARDS_adj: same samples, sampled denominators
    for h, size in zip(trace.hashes, trace.sizes):
        plain.record(h, size)
    error = mean_absolute_error(got, want)
    byte_error = mean_absolute_error(got_bytes, want_bytes)
    plain_error = mean_absolute_error([m for _, m in plain.curve(caches)], want)
    report = (
        f"{kind}: MAE {error:.4f} (bytes {byte_error:.4f}; without SHARDS_adj {plain_error:.4f}), "
        f"rate {estimator.rate:.4f}, tracked {estimator.tracked}, memory {estimator.memory()} B, "
        f"footprint {estimator.footprint / exact.distinct_bytes:.3f} of exact"
    )
    print(report)
    assert error <= MAE_BOUND, report
    assert byte_error <= MAE_BOUND, report


# -- memory bound and cost -------------------------------------------------------------------------


def test_the_memory_bound_holds_with_far_more_blocks_than_fit() -> None:
    rng = np.random.default_rng(5)
    cut = threshold_for(RATE)
    hashes = rng.integers(0, cut, 60_000).tolist()  # 60k distinct sampled blocks; 16k fit
    sizes = [4 * MiB] * len(hashes)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        estimator = Shards(RATE, MiB)
        for h, size in zip(hashes, sizes):
            estimator.record(h, size)
        estimator.curve([i * 1000 * MiB for i in range(100)])
        current, peak = tracemalloc.get_traced_memory()
        own = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, reuse.__file__)])
        held = sum(stat.size for stat in own.statistics("filename"))
        alone = threading.active_count() == 1
    finally:
        tracemalloc.stop()
    print(f"memory: held {held} B by policies/reuse.py ({current - before} B in all), peak {peak - before} B"
          f"{'' if alone else ' (other threads running: not its own)'}, memory() {estimator.memory()} B, "
          f"tracked {estimator.tracked}, rate {estimator.rate:.5f}")
    assert estimator.tracked <= estimator.limit
    assert estimator.rate < RATE
    assert held <= MiB and estimator.memory() <= MiB
    if alone:  # tracemalloc counts every thread's allocations: the peak is the estimator's only alone
        assert peak - before <= MiB


def test_cost_per_reference_is_measured() -> None:
    trace = make_trace("zipf", seed=3)
    cut = threshold_for(RATE)
    estimator = Shards(RATE, MiB)
    record = estimator.record
    start = time.perf_counter_ns()
    for h, size in zip(trace.hashes, trace.sizes):
        if h < cut:
            record(h, size)
    elapsed = time.perf_counter_ns() - start
    sampled = [(h, s) for h, s in zip(trace.hashes, trace.sizes) if h < cut]
    again = Shards(RATE, MiB)
    start = time.perf_counter_ns()
    for h, size in sampled:
        again.record(h, size)
    per_sampled = (time.perf_counter_ns() - start) / len(sampled)
    print(f"cost: {elapsed / len(trace.hashes):.0f} ns per reference (pre-filter + record), "
          f"{per_sampled:.0f} ns per sampled record ({len(sampled)} sampled)")
    assert again.references == pytest.approx(estimator.references)


# -- unit behaviour --------------------------------------------------------------------------------


def test_block_hash_and_threshold() -> None:
    assert block_hash("f" * 9 + "0" * 31) == MODULUS - 1
    assert block_hash("0" * 8 + "1" + "f" * 31) == 1
    assert threshold_for(0.01) == round(0.01 * MODULUS)
    assert threshold_for(1e-12) == 1
    with pytest.raises(ValueError):
        threshold_for(0.0)


def test_an_empty_estimator_misses_everything() -> None:
    estimator = Shards()
    assert estimator.miss_ratio(10**12) == 1.0
    assert estimator.byte_miss_ratio(10**12) == 1.0
    assert estimator.references == 0.0 and estimator.footprint == 0 and estimator.tracked == 0


def test_a_loop_misses_below_its_size_and_hits_above() -> None:
    estimator = Shards(rate=1.0)
    blocks, size = 500, 1000
    for _ in range(20):
        for b in range(blocks):
            estimator.record(b * 997 % MODULUS, size)
    total = blocks * size
    assert estimator.miss_ratio(int(total * 0.99)) == 1.0
    assert estimator.miss_ratio(int(total * 0.9)) == 1.0
    assert estimator.miss_ratio(int(total * 1.01)) == pytest.approx(1 / 20)  # the cold misses
    assert estimator.byte_miss_ratio(int(total * 1.01)) == pytest.approx(1 / 20)
    assert estimator.footprint == total


def test_a_reuse_hits_exactly_when_the_block_and_those_since_fit() -> None:
    estimator = Shards(rate=1.0)
    for h, size in [(1, 100), (2, 300), (1, 100)]:  # the reuse of 1: d = 300, d + size = 400
        estimator.record(h, size)
    assert estimator.miss_ratio(390) == 1.0  # a bucket is 0.54% wide: clear of it both sides
    assert estimator.miss_ratio(410) == pytest.approx(2 / 3)
    assert estimator.byte_miss_ratio(410) == pytest.approx(400 / 500)


def test_record_ignores_hashes_at_or_above_the_threshold() -> None:
    estimator = Shards(rate=0.01)
    estimator.record(estimator.threshold, 100)
    estimator.record(MODULUS - 1, 100)
    assert estimator.tracked == 0 and estimator.references == 0.0
    estimator.record(estimator.threshold - 1, 100)
    assert estimator.tracked == 1 and estimator.references == pytest.approx(100.0)


def test_decay_halves_the_references_and_keeps_the_positions() -> None:
    estimator = Shards(rate=1.0)
    for h in (1, 2, 1, 2):
        estimator.record(h, 10)
    estimator.decay(0.5)
    assert estimator.references == pytest.approx(2.0)
    assert estimator.referenced_bytes == pytest.approx(20.0)
    assert estimator.miss_ratio(25) == pytest.approx(0.5)  # halved cold and halved hits
    estimator.record(1, 10)  # still a reuse at d = 10, not a cold miss
    assert estimator.miss_ratio(25) == pytest.approx(1.0 / 3.0)
    with pytest.raises(ValueError):
        estimator.decay(0.0)


def test_the_threshold_lowers_and_the_histogram_rescales_at_the_bound() -> None:
    memory = 256 * 1024
    limit = entries_within(memory)
    estimator = Shards(rate=1.0, memory_bytes=memory)
    step = MODULUS // (4 * limit)
    for i in range(limit):
        estimator.record(i * step, 10)
    assert estimator.threshold == MODULUS and estimator.tracked == limit
    weight = estimator.references * estimator.rate
    estimator.record(limit * step, 10)  # one block too many: the largest hashes go
    assert estimator.tracked < limit
    assert estimator.threshold <= limit * step
    ratio = estimator.threshold / MODULUS
    assert estimator.references * estimator.rate == pytest.approx((weight + 1) * ratio)
    estimator.record(estimator.threshold, 10)
    assert estimator.tracked < limit  # ignored now


def test_positions_are_renumbered_without_changing_distances() -> None:
    estimator = Shards(rate=1.0, memory_bytes=256 * 1024)
    reference = Shards(rate=1.0)  # large enough never to renumber in this test
    rounds = 3 * estimator._capacity // 50
    for _ in range(rounds):
        for h in range(50):
            estimator.record(h * 11, 7 + h)
            reference.record(h * 11, 7 + h)
    sizes = list(range(0, 3000, 25))
    assert estimator.curve(sizes) == reference.curve(sizes)
    assert estimator.tracked == 50 and estimator._clock <= estimator._capacity


def test_table_deletion_keeps_colliding_keys_reachable() -> None:
    estimator = Shards(rate=1.0, memory_bytes=256 * 1024)
    for h in range(0, 4000, 3):
        estimator.record(h, 1)
    for h in range(0, 4000, 3):
        assert estimator._slot(h) >= 0
    limit = estimator.limit
    for h in range(4000, 4000 + 3 * limit):
        estimator.record(h, 1)
    assert estimator.tracked <= limit
    kept = [e >> 24 for e in estimator._table if e]
    assert len(kept) == estimator.tracked
    assert all(estimator._slot(h) >= 0 for h in kept)
    assert all(h < estimator.threshold for h in kept)


def test_an_empty_block_counts_as_one_byte_and_survives_renumbering() -> None:
    estimator = Shards(rate=1.0, memory_bytes=256 * 1024)
    for _ in range(3 * estimator._capacity):
        estimator.record(5, 0)
        estimator.record(6, 10)
    assert estimator.tracked == 2
    assert estimator.miss_ratio(12) == pytest.approx(2 / (6 * estimator._capacity))
