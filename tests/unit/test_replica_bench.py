"""benchmarks/replica_choice.py's pure parts: window summaries, shares over time, key choice,
the bytes disseminated read from /metrics, the targets and the measured slowdown."""

from __future__ import annotations

import math

from benchmarks.replica_choice import (
    Completion, disseminated, keys_owned_by_peers, scenario_targets, shares_over_time, slowdown, spread,
    window_shares, window_summary,
)


def test_window_summary_counts_only_completions_ending_inside_and_separates_errors() -> None:
    done = [Completion(0.5, 0.010, True), Completion(1.0, 0.020, True), Completion(1.5, 0.030, False),
            Completion(2.5, 0.040, True), Completion(3.0, 0.100, True)]
    s = window_summary(done, 1.0, 3.0)  # [1, 3): 1.0, 1.5 (error), 2.5
    assert s["requests"] == 2 and s["errors"] == 1
    assert s["rps"] == 1.0
    assert s["p50_ms"] == 30.0  # between 20 and 40 ms
    assert 39.0 < s["p99_ms"] <= 40.0


def test_window_summary_of_an_empty_window_is_nan_not_an_error() -> None:
    s = window_summary([], 0.0, 2.0)
    assert s["requests"] == 0 and s["rps"] == 0.0 and math.isnan(s["p99_ms"])


def test_shares_over_time_are_per_interval_deltas_of_cumulative_counts() -> None:
    samples = [(0.0, {"a": 0, "b": 0}), (1.0, {"a": 3, "b": 1}), (2.0, {"a": 3, "b": 1}), (3.0, {"a": 4, "b": 5, "c": 5})]
    out = shares_over_time(samples)
    assert out["t"] == [1.0, 2.0, 3.0]
    assert out["share"]["a"] == [0.75, 0.0, 0.1]
    assert out["share"]["b"] == [0.25, 0.0, 0.4]
    assert out["share"]["c"] == [0.0, 0.0, 0.5]  # a candidate first seen late counts from 0
    assert out["requests"]["b"] == [1, 0, 4]


def test_window_shares_use_the_samples_nearest_the_window_edges() -> None:
    samples = [(0.1, {"a": 0, "b": 0}), (1.0, {"a": 10, "b": 0}), (2.05, {"a": 11, "b": 9})]
    assert window_shares(samples, 1.0, 2.0) == {"a": 0.1, "b": 0.9}
    assert window_shares(samples[:1], 0.0, 1.0) == {}


def test_keys_owned_by_peers_excludes_any_key_the_client_node_owns() -> None:
    located = {"k1": ["node2", "node3"], "k2": ["node1", "node3"], "k3": ["node3", "node2"], "k4": ["node2"]}
    assert keys_owned_by_peers(located, "node1", ["node2", "node3"]) == ["k1", "k3"]


def test_disseminated_sums_the_report_and_raw_counters_and_skips_created() -> None:
    text = "\n".join([
        "# HELP lakegate_telemetry_report_bytes_total bytes of anomaly reports sent in heartbeats",
        "# TYPE lakegate_telemetry_report_bytes_total counter",
        "lakegate_telemetry_report_bytes_total 120.0",
        "lakegate_telemetry_report_bytes_created 1.7e9",
        "lakegate_telemetry_raw_bytes_total 4.5e3",
        "lakegate_other_total 7",
    ])
    assert disseminated(text) == {"report_bytes": 120.0, "raw_bytes": 4500.0}


def _policy(rps_fault: float, p99_fault: float, p99_nofault: float = 10.0) -> dict[str, object]:
    return {"windows": {"nofault": {"rps": 100.0, "p99_ms": p99_nofault},
                        "fault": {"rps": rps_fault, "p99_ms": p99_fault}}}


def test_targets_compare_micromon_with_round_robin_and_least_outstanding_in_the_fault_window() -> None:
    policies = {"micromon": _policy(150.0, 12.0), "round_robin": _policy(100.0, 24.0),
                "least_outstanding": _policy(120.0, 12.0)}
    t = scenario_targets(policies, fault_p99=True)
    assert t["throughput_micromon_over_round_robin"] == {"value": 1.5, "bound": ">= 1.5", "met": True}
    assert t["p99_micromon_over_round_robin"]["met"] is True  # 0.5 <= 0.5
    assert t["p99_micromon_over_least_outstanding"]["met"] is False  # equal is not better
    assert t["p99_micromon_fault_over_nofault"]["value"] == 1.2 and t["p99_micromon_fault_over_nofault"]["met"]
    assert t["all_met"] is False
    assert "p99_micromon_fault_over_nofault" not in scenario_targets(policies, fault_p99=False)


def test_a_target_not_measured_is_missed() -> None:
    policies = {"micromon": _policy(float("nan"), float("nan")), "round_robin": _policy(100.0, 24.0),
                "least_outstanding": _policy(120.0, 12.0)}
    t = scenario_targets(policies, fault_p99=False)
    assert not t["throughput_micromon_over_round_robin"]["met"] and not t["all_met"]


def test_slowdown_is_the_faulted_candidates_latency_over_the_others_mean() -> None:
    report = {"lake": {"http://a": {"latency_s": 0.005}, "http://b": {"latency_s": 0.007},
                       "http://slow": {"latency_s": 0.060}},
              "peers": {"node2": {"latency_s": 0.01}, "node3": {"latency_s": 0.03}}}
    assert slowdown(report, "lake_delay", "http://slow")["slow_over_others"] == 10.0
    assert slowdown(report, "peer_cpu", "http://slow")["slow_over_others"] == 3.0


def test_spread_ignores_nan_and_reports_median_min_max() -> None:
    assert spread([3.0, float("nan"), 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    assert spread([1.0, 2.0])["median"] == 1.5
    assert spread([])["n"] == 0
