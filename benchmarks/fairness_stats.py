"""The pure half of benchmarks/fairness.py: object popularity (seeded Zipf), per-second bins of
completed requests, the min-max ratio and weighted-class shares, and the targets. No sockets, no
clock, no processes: tests/unit/test_fairness_bench.py checks each of them.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from cachetier.cluster.ring import partition_of

# the issue's targets (Pisces OSDI'12: MMR 0.98 with all mechanisms, classes 0.89-0.91)
TARGET_MMR_MIN = 0.98
TARGET_CLASS_RATIO_MIN = 0.95
TARGET_P99_RATIO_MAX = 2.0
TARGET_THROUGHPUT_RATIO_MIN = 0.95


class Zipf:
    """Ranks 0..n-1 drawn with probability proportional to 1 / (rank + 1) ** s, from a seeded
    generator of its own (the same seed draws the same sequence)."""

    def __init__(self, n: int, s: float, seed: int) -> None:
        if n < 1:
            raise ValueError("Zipf needs at least one rank")
        weights = [1.0 / (rank + 1) ** s for rank in range(n)]
        total = sum(weights)
        self.probabilities = [w / total for w in weights]
        self._cumulative: list[float] = []
        running = 0.0
        for p in self.probabilities:
            running += p
            self._cumulative.append(running)
        self._cumulative[-1] = 1.0  # no rounding gap at the top
        self._rng = random.Random(seed)

    def __len__(self) -> int:
        return len(self.probabilities)

    def draw(self) -> int:
        return bisect.bisect_right(self._cumulative, self._rng.random())


@dataclass(frozen=True, slots=True)
class Completion:
    """One request that completed: when (seconds since the run began), body bytes, latency, and
    the node (index) that answered it."""

    at: float
    bytes: int
    latency: float
    node: int = 0


@dataclass(frozen=True, slots=True)
class Bins:
    """Requests and bytes per bin of ``width`` seconds from ``start`` (bin i: [start + i*width,
    start + (i+1)*width)); completions outside [start, end) are left out."""

    requests: tuple[int, ...]
    bytes: tuple[int, ...]
    width: float

    @property
    def seconds(self) -> float:
        return len(self.requests) * self.width


def bin_completions(completions: Iterable[Completion], start: float, end: float, width: float = 1.0) -> Bins:
    count = max(0, math.ceil((end - start) / width - 1e-9))
    requests, sent = [0] * count, [0] * count
    for c in completions:
        if start <= c.at < end:
            i = min(int((c.at - start) / width), count - 1)
            requests[i] += 1
            sent[i] += c.bytes
    return Bins(tuple(requests), tuple(sent), width)


def min_max_ratio(throughput: Mapping[str, float], weights: Mapping[str, float]) -> float:
    """Pisces' min-max ratio: min over tenants of throughput / weight, over the max (1.0: every
    tenant got exactly its weighted share; nan without tenants or when no one was served)."""
    normalised = [throughput[name] / weights[name] for name in throughput]
    if not normalised or max(normalised) <= 0:
        return float("nan")
    return min(normalised) / max(normalised)


def binned_min_max_ratios(bins: Mapping[str, Bins], weights: Mapping[str, float], *, by: str = "requests") -> list[float]:
    """The min-max ratio of each bin (requests or bytes per bin, weight-normalised)."""
    series = {name: getattr(b, by) for name, b in bins.items()}
    length = min((len(s) for s in series.values()), default=0)
    return [min_max_ratio({name: float(s[i]) for name, s in series.items()}, weights) for i in range(length)]


def class_share_ratios(throughput: Mapping[str, float], weights: Mapping[str, float],
                       classes: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """Per class (name -> its tenants): its share of the total throughput over its share of the
    total weight (1.0: exactly its weighted share)."""
    total = sum(throughput.values())
    total_weight = sum(weights.values())
    out = {}
    for cls, members in classes.items():
        share = sum(throughput[m] for m in members) / total if total > 0 else float("nan")
        weighted = sum(weights[m] for m in members) / total_weight
        out[cls] = share / weighted
    return out


def uneven_spread(tenants: int, nodes: int, per_tenant: int, seed: int) -> list[list[int]]:
    """Clients per (tenant, node), ``per_tenant`` each, spread unevenly and deterministically:
    tenant i puts most of its clients on node i % nodes, some tenants on one node only, others
    on two or all; the first node ends up with the most demand (what weight allocation fixes)."""
    rng = random.Random(seed)
    spread = []
    for i in range(tenants):
        row = [0] * nodes
        home = 0 if i % 3 == 0 else i % nodes
        kind = i % 4  # 0: home only, 1: home + next, 2: everywhere, 3: mostly home
        if kind == 0:
            row[home] = per_tenant
        elif kind == 1:
            row[home] = per_tenant - per_tenant // 2
            row[(home + 1) % nodes] = per_tenant // 2
        elif kind == 2:
            for n in range(per_tenant):
                row[n % nodes] += 1
        else:
            row[home] = per_tenant - 1
            row[rng.randrange(nodes)] += 1
        spread.append(row)
    return spread


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    value: float
    bound: float
    at_least: bool  # True: value >= bound to meet it; False: value <= bound

    @property
    def met(self) -> bool:
        if math.isnan(self.value):
            return False
        return self.value >= self.bound if self.at_least else self.value <= self.bound

    def as_dict(self) -> dict[str, object]:
        return {"value": None if math.isnan(self.value) else round(self.value, 4),
                ("min" if self.at_least else "max"): self.bound, "met": self.met}


def keys_in_partitions(bucket: str, stem: str, count: int, wanted: frozenset[int], partitions: int) -> list[str]:
    """``count`` keys ``STEM-N`` whose first block hashes to one of the ``wanted`` ring
    partitions (a hot partition: several tenants' hottest objects on the same owner)."""
    keys: list[str] = []
    n = 0
    while len(keys) < count:
        key = f"{stem}-{n}"
        if partition_of(bucket, key, 0, partitions) in wanted:
            keys.append(key)
        n += 1
    return keys


def drf_rates(capacities: Mapping[str, float], per_request: Mapping[str, Mapping[str, float]],
              weights: Mapping[str, float]) -> dict[str, float]:
    """Requests/s each backlogged tenant gets under weighted dominant-resource fairness:
    ``per_request[tenant][resource]`` is what one request uses (e.g. 1 request slot, its bytes);
    dominant shares grow in proportion to the weights until a resource is full (every tenant
    here uses every resource, so all stop at once)."""
    dominant = {t: max(use[r] / capacities[r] for r in capacities) for t, use in per_request.items()}
    level = min(capacities[r] / sum(weights[t] / dominant[t] * per_request[t][r] for t in per_request)
                for r in capacities)
    return {t: weights[t] * level / dominant[t] for t in per_request}
