"""The pure parts of benchmarks/sizing.py: config names and fixed splits, the best fixed split of
a phase, the targets (within 5% of the best fixed split, better than 50/50 overall, the
sampler's overhead), the per-phase summary, the per-node key sets and the overhead figure."""

from __future__ import annotations

import math

import pytest

from benchmarks.sizing import (
    BLOCK, Within, assign_sets, best_fixed, config_name, fixed_split, micro_overhead, sampler_overhead, summary,
    targets,
)


def _phase(**configs: tuple[float, float]) -> dict[str, dict[str, float]]:
    return {name.replace("_", "-"): {"lake_bytes": lake, "completion_s": s} for name, (lake, s) in configs.items()}


def test_config_names_and_fixed_splits() -> None:
    assert config_name(None) == "adaptive"
    assert config_name(0.5) == "fixed-50" and config_name(0.1) == "fixed-10"
    total = 96 * BLOCK
    assert fixed_split(total, 0.5) == (48 * BLOCK, 48 * BLOCK)
    l1, l2 = fixed_split(total, 0.1)
    assert l1 == 10 * BLOCK and l1 + l2 == total  # whole blocks, the rest to L2


def test_best_fixed_is_the_least_of_the_metric_among_fixed_configs_only() -> None:
    phase = _phase(adaptive=(0.0, 1.0), fixed_10=(50.0, 9.0), fixed_50=(80.0, 5.0), fixed_90=(50.0, 7.0))
    assert best_fixed(phase, "lake_bytes") == "fixed-10"  # a tie: the first by name
    assert best_fixed(phase, "completion_s") == "fixed-50"  # adaptive's 1.0 is not a candidate
    with pytest.raises(ValueError):
        best_fixed({"adaptive": {"lake_bytes": 1.0, "completion_s": 1.0}}, "lake_bytes")


def test_within_tolerance_and_slack() -> None:
    assert Within("x", 105.0, 100.0, 0.05).met
    assert not Within("x", 105.1, 100.0, 0.05).met
    assert Within("x", 3.0, 0.0, 0.05, slack=4.0).met  # near zero: the slack decides
    assert not Within("x", float("nan"), 1.0, 0.05).met
    assert Within("x", 2.0, 0.0, 0.05).as_dict()["over_best"] is None


def test_targets_per_phase_overall_and_overhead() -> None:
    phases = {
        "1": _phase(adaptive=(10.0, 10.0), fixed_50=(10.0, 12.0), fixed_90=(10.0, 10.2)),
        "2": _phase(adaptive=(104.0, 20.0), fixed_50=(200.0, 30.0), fixed_10=(100.0, 19.5)),
    }
    out = targets(phases, overhead=0.01)
    assert out["1"]["lake_bytes"]["met"] and out["1"]["completion_s"]["met"]
    assert out["1"]["best_fixed_by_completion_s"] == "fixed-90"
    assert out["2"]["best_fixed_by_lake_bytes"] == "fixed-10"
    assert out["2"]["lake_bytes"]["met"] and out["2"]["completion_s"]["met"]  # 104 <= 105, 20 <= 20.475
    overall = out["overall_lake_bytes_better_than_50_50"]
    assert overall["adaptive"] == 114.0 and overall["fixed_50"] == 210.0 and overall["met"]
    assert out["overall_completion_s_better_than_50_50"]["met"]
    assert out["sampler_overhead"]["met"] and out["all_met"]

    worse = targets({"2": _phase(adaptive=(106.0, 20.0), fixed_50=(200.0, 30.0), fixed_10=(100.0, 19.5))},
                    overhead=0.03)
    assert not worse["2"]["lake_bytes"]["met"] and not worse["sampler_overhead"]["met"]
    assert not worse["all_met"]
    assert targets({"2": _phase(adaptive=(106.0, 20.0), fixed_50=(200.0, 30.0), fixed_10=(100.0, 19.5))},
                   overhead=None, slack_bytes={"2": 10.0})["all_met"]


def test_targets_with_adaptive_worse_than_50_50_overall() -> None:
    out = targets({"1": _phase(adaptive=(10.0, 11.0), fixed_50=(10.0, 10.6))}, overhead=None)
    assert out["1"]["completion_s"]["met"]  # 11.0 <= 10.6 * 1.05
    assert not out["overall_completion_s_better_than_50_50"]["met"]  # but not better than 50/50
    assert not out["all_met"]


def test_summary_is_phase_then_config() -> None:
    runs = {"adaptive": {"phases": {"p": {"lake_bytes_tc": 5, "completion_s": 2.0}}},
            "fixed-50": {"phases": {"p": {"lake_bytes_tc": 7, "completion_s": 3.0}}}}
    assert summary(runs) == {"p": {"adaptive": {"lake_bytes": 5.0, "completion_s": 2.0},
                                   "fixed-50": {"lake_bytes": 7.0, "completion_s": 3.0}}}


def test_assign_sets_gives_each_node_keys_other_nodes_own_disjointly() -> None:
    nodes = ["a", "b", "c"]
    owners = {f"k{i:03d}": nodes[i % 3] for i in range(60)}
    sets = assign_sets(owners, nodes, per_node=15)
    assert all(len(keys) == 15 for keys in sets.values())
    assert all(owners[k] != node for node, keys in sets.items() for k in keys)
    every = [k for keys in sets.values() for k in keys]
    assert len(every) == len(set(every))
    assert sets == assign_sets(owners, nodes, per_node=15)  # seeded
    with pytest.raises(ValueError, match="too few"):
        assign_sets(owners, nodes, per_node=25)


def test_sampler_overhead() -> None:
    assert math.isclose(sampler_overhead([1.02, 1.04], [1.0, 1.0]), 0.03)
    assert math.isnan(sampler_overhead([], [1.0]))


def test_micro_overhead_scales_with_the_rate_and_the_calls() -> None:
    timed = {"reference_unsampled_ns": 500.0, "reference_sampled_ns": 20_500.0}
    assert math.isclose(micro_overhead(timed, 1.0, 1.0, 1e-3), 0.0205)  # 20.5 us of 1 ms
    assert math.isclose(micro_overhead(timed, 0.01, 2.0, 1e-3), 2 * 700e-9 / 1e-3)
    assert math.isclose(micro_overhead(timed, 0.0, 1.0, 1e-3), 0.0005)  # the hash alone
