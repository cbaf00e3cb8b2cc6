"""The pure parts of benchmarks/fairness.py (benchmarks/fairness_stats.py): seeded Zipf
popularity, per-second bins, the min-max ratio, weighted-class shares, the uneven spread of
clients, hot-partition keys, DRF rates and the targets."""

from __future__ import annotations

import math

import pytest

from benchmarks.fairness_stats import (
    Completion, Target, Zipf, bin_completions, binned_min_max_ratios, class_share_ratios, drf_rates,
    keys_in_partitions, min_max_ratio, uneven_spread,
)
from cachetier.cluster.ring import partition_of


def test_zipf_is_seeded_and_skewed() -> None:
    a, b = Zipf(100, 1.0, seed=3), Zipf(100, 1.0, seed=3)
    draws = [a.draw() for _ in range(5000)]
    assert draws == [b.draw() for _ in range(5000)]
    assert draws != [Zipf(100, 1.0, seed=4).draw() for _ in range(5000)]
    assert all(0 <= d < 100 for d in draws)
    assert math.isclose(sum(a.probabilities), 1.0)
    # rank 0 is twice as likely as rank 1 at s = 1, and drawn about as often as that says
    assert math.isclose(a.probabilities[0] / a.probabilities[1], 2.0)
    assert draws.count(0) / len(draws) == pytest.approx(a.probabilities[0], abs=0.03)
    assert draws.count(0) > 5 * draws.count(50)


def test_zipf_of_one_rank_and_of_none() -> None:
    assert {Zipf(1, 1.2, seed=0).draw() for _ in range(10)} == {0}
    with pytest.raises(ValueError):
        Zipf(0, 1.0, seed=0)


def test_completions_fall_into_one_second_bins_inside_the_window() -> None:
    done = [Completion(0.5, 10, 0.1), Completion(2.0, 5, 0.1), Completion(2.99, 7, 0.1),
            Completion(3.0, 1, 0.1), Completion(5.5, 100, 0.1), Completion(6.0, 1000, 0.1)]
    bins = bin_completions(done, start=2.0, end=6.0)
    assert bins.requests == (2, 1, 0, 1)
    assert bins.bytes == (12, 1, 0, 100)
    assert bins.seconds == 4.0
    assert bin_completions(done, start=2.0, end=2.0).requests == ()


def test_min_max_ratio_normalises_by_weight() -> None:
    assert min_max_ratio({"a": 10, "b": 20}, {"a": 1, "b": 2}) == 1.0
    assert min_max_ratio({"a": 10, "b": 40}, {"a": 1, "b": 2}) == 0.5
    assert min_max_ratio({"a": 0, "b": 40}, {"a": 1, "b": 1}) == 0.0
    assert math.isnan(min_max_ratio({}, {}))
    assert math.isnan(min_max_ratio({"a": 0}, {"a": 1}))


def test_min_max_ratio_per_bin() -> None:
    bins = {"a": bin_completions([Completion(0.1, 1, 0), Completion(1.1, 1, 0), Completion(1.2, 1, 0)], 0, 2),
            "b": bin_completions([Completion(0.1, 1, 0), Completion(1.5, 1, 0)], 0, 2)}
    assert binned_min_max_ratios(bins, {"a": 1, "b": 1}) == [1.0, 0.5]


def test_class_shares_over_weighted_shares() -> None:
    weights = {"big": 100.0, "m1": 10.0, "m2": 10.0, "s": 1.0}
    exact = {name: w * 3.0 for name, w in weights.items()}
    classes = {"100x": ["big"], "10x": ["m1", "m2"], "1x": ["s"]}
    assert class_share_ratios(exact, weights, classes) == pytest.approx({"100x": 1.0, "10x": 1.0, "1x": 1.0})
    equal = dict.fromkeys(weights, 1.0)  # no weighting at all: the small classes get far more
    ratios = class_share_ratios(equal, weights, classes)
    assert ratios["1x"] == pytest.approx((1 / 4) / (1 / 121))
    assert ratios["100x"] < 0.5


def test_uneven_spread_keeps_each_tenants_clients_and_loads_one_node_most() -> None:
    spread = uneven_spread(8, 3, per_tenant=4, seed=1)
    assert spread == uneven_spread(8, 3, per_tenant=4, seed=1)
    assert all(sum(row) == 4 and len(row) == 3 for row in spread)
    per_node = [sum(row[n] for row in spread) for n in range(3)]
    assert per_node[0] == max(per_node) and min(per_node) < per_node[0]
    assert any(row.count(0) == 2 for row in spread)  # some tenants on one node only
    assert any(0 not in row for row in spread)  # some everywhere


def test_hot_keys_land_in_the_hot_partitions() -> None:
    keys = keys_in_partitions("b", "t0/hot", 4, frozenset({7, 500}), 1024)
    assert len(set(keys)) == 4
    assert all(partition_of("b", k, 0, 1024) in {7, 500} for k in keys)


def test_drf_rates_of_a_request_bound_and_a_bandwidth_bound_tenant() -> None:
    capacity = {"requests": 100.0, "bytes": 1000.0}
    rates = drf_rates(capacity, {"r": {"requests": 1, "bytes": 1}, "b": {"requests": 1, "bytes": 100}},
                      {"r": 1.0, "b": 1.0})
    # equal dominant shares, and one resource (requests here) full
    assert rates["r"] / 100 == pytest.approx(rates["b"] * 100 / 1000)
    assert rates["r"] + rates["b"] == pytest.approx(100.0)
    alone = drf_rates(capacity, {"r": {"requests": 1, "bytes": 1}}, {"r": 1.0})
    assert alone["r"] == pytest.approx(100.0)


def test_targets_met_and_missed() -> None:
    assert Target("mmr", 0.99, 0.98, True).met
    assert not Target("mmr", 0.5, 0.98, True).met
    assert Target("p99", 1.5, 2.0, False).as_dict() == {"value": 1.5, "max": 2.0, "met": True}
    assert not Target("p99", float("nan"), 2.0, False).met
    assert Target("x", float("nan"), 1.0, True).as_dict()["value"] is None


def test_a_runs_summary_per_tenant_and_overall() -> None:
    from benchmarks.fairness import Load, Served, summarise, tenant

    a, b = tenant("a", 1, weight=1.0), tenant("b", 2, weight=2.0)
    loads = [Load(a, ["k"], [1, 0, 0]), Load(b, ["k"], [0, 1, 1])]
    served = {
        "a": Served([Completion(0.5, 99, 9.0)] + [Completion(1 + i / 10, 100, 0.01) for i in range(20)]),
        "b": Served([Completion(1 + i / 20, 100, 0.02) for i in range(40)], slowdowns=3, errors={"500": 1}),
    }
    out = summarise(loads, served, start=1.0, end=3.0)  # a's warm-up completion at 0.5 s is left out
    assert out["per_tenant"]["a"]["rps"] == 10.0 and out["per_tenant"]["b"]["rps"] == 20.0
    assert out["per_tenant"]["a"]["bins_rps"] == [10, 10]
    assert out["per_tenant"]["b"]["rps_per_weight"] == 10.0
    assert out["mmr_requests"] == 1.0 and out["mmr_per_second"] == {"median": 1.0, "min": 1.0}
    assert out["per_tenant"]["a"]["p99_ms"] == 10.0
    assert out["total"] == {"rps": 30.0, "MBps": 0.003, "slowdowns": 3, "errors": 1}


def test_a_runs_summary_per_node() -> None:
    from benchmarks.fairness import Load, Served, summarise, tenant

    a = tenant("a", 1)
    done = [Completion(1.0 + i / 10, 1000, 0.01, node=i % 2) for i in range(10)]
    out = summarise([Load(a, ["k"], [1, 1, 0])], {"a": Served(done)}, start=1.0, end=2.0)
    assert {n: v["rps"] for n, v in out["per_node"].items()} == {"node1": 5.0, "node2": 5.0, "node3": 0.0}
