"""policies.anomaly (MicroMon's reports): absolute limits and deviation from a node's own moving
baseline turn micrometrics into a few compact anomalies, which clear after normal samples."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from policies.anomaly import (
    DEFAULT_THRESHOLDS,
    EMPTY,
    METRICS,
    Anomaly,
    Baselines,
    Thresholds,
    node_score,
    observe,
)


def feed(samples: list[dict[str, float]], state: Baselines = EMPTY, start: float = 0.0,
         thresholds: Thresholds = DEFAULT_THRESHOLDS) -> tuple[Baselines, tuple[Anomaly, ...]]:
    """``samples`` one a second from ``start``; the state and the anomalies after the last."""
    anomalies: tuple[Anomaly, ...] = ()
    for i, sample in enumerate(samples):
        state, anomalies = observe(state, sample, start + i, thresholds)
    return state, anomalies


def calm(n: int, metric: str = "iowait_percent", centre: float = 2.0) -> list[dict[str, float]]:
    """``n`` normal samples wobbling by 10% around ``centre``."""
    return [{metric: centre * (1.0 + 0.1 * (-1) ** i)} for i in range(n)]


def test_every_named_metric_is_known_and_has_the_documented_limits() -> None:
    assert {"cpu_percent", "iowait_percent", "run_queue", "disk_busy_percent", "disk_read_latency_s",
            "disk_write_latency_s", "dirty_bytes", "net_retransmits_per_s", "net_drops_per_s",
            "rss_bytes", "loop_lag_s"} <= set(METRICS)
    assert DEFAULT_THRESHOLDS.absolute["iowait_percent"] == 25.0
    assert DEFAULT_THRESHOLDS.absolute["run_queue"] == 2.0
    assert set(DEFAULT_THRESHOLDS.absolute) <= set(METRICS)


def test_a_value_over_its_absolute_limit_is_anomalous_even_without_a_baseline() -> None:
    _, anomalies = observe(EMPTY, {"iowait_percent": 50.0, "cpu_percent": 10.0}, 7.0)
    assert anomalies == (Anomaly("iowait_percent", 50.0, 0.0, 2.0, 7.0),)


def test_a_normal_node_reports_nothing() -> None:
    _, anomalies = feed(calm(30) + [{"cpu_percent": 40.0, "loop_lag_s": 0.001}])
    assert anomalies == ()
    assert node_score(anomalies) == 0.0


def test_a_rise_far_above_the_baseline_is_anomalous_once_the_baseline_counts() -> None:
    # rss has no absolute limit: deviation only; 2x a steady 100 MB is far off
    steady = calm(DEFAULT_THRESHOLDS.min_samples, "rss_bytes", 100e6)
    _, early = feed(steady[:-1] + [{"rss_bytes": 200e6}])
    assert early == ()  # one sample short of a baseline
    _, anomalies = feed(steady + [{"rss_bytes": 200e6}])
    assert [a.metric for a in anomalies] == ["rss_bytes"]
    assert anomalies[0].severity >= 1.0
    assert math.isclose(anomalies[0].baseline, 100e6, rel_tol=0.05)


def test_a_deviation_under_half_the_absolute_limit_is_a_change_not_a_trouble() -> None:
    _, anomalies = feed(calm(30, "cpu_percent", 2.0) + [{"cpu_percent": 20.0}])
    assert anomalies == ()
    _, anomalies = feed(calm(30, "cpu_percent", 2.0) + [{"cpu_percent": 60.0}])
    assert [a.metric for a in anomalies] == ["cpu_percent"]


def test_an_unknown_metric_is_tracked_by_deviation_only() -> None:
    _, anomalies = feed(calm(20, "gc_pause_s", 0.01) + [{"gc_pause_s": 0.01 * 1.1}])
    assert anomalies == ()
    _, anomalies = feed(calm(20, "gc_pause_s", 0.01) + [{"gc_pause_s": 0.1}])
    assert [a.metric for a in anomalies] == ["gc_pause_s"]


def test_a_spike_does_not_move_the_baseline_and_a_long_anomaly_stays_one() -> None:
    state, _ = feed(calm(20))
    before = state.stats["iowait_percent"]
    state, anomalies = feed([{"iowait_percent": 80.0}] * 50, state, start=100.0)
    assert state.stats["iowait_percent"] == before
    assert len(anomalies) == 1 and anomalies[0].since == 100.0  # one anomaly, from its start
    assert anomalies[0].value == 80.0


def test_an_anomaly_clears_after_clear_after_normal_samples_and_stops_counting() -> None:
    state, _ = feed(calm(20) + [{"iowait_percent": 60.0}])
    for _ in range(DEFAULT_THRESHOLDS.clear_after - 1):
        state, anomalies = observe(state, {"iowait_percent": 2.0}, 50.0)
        assert node_score(anomalies) > 0  # one quiet sample does not clear it
    state, anomalies = observe(state, {"iowait_percent": 2.0}, 51.0)
    assert anomalies == () and node_score(anomalies) == 0.0
    _, anomalies = observe(state, {"iowait_percent": 60.0}, 52.0)
    assert anomalies[0].since == 52.0  # a new anomaly, not the old one


def test_an_anomalous_sample_restarts_the_clearing_streak() -> None:
    state, _ = feed(calm(20) + [{"iowait_percent": 60.0}])
    for value in (2.0, 2.0, 60.0, 2.0, 2.0):
        state, anomalies = observe(state, {"iowait_percent": value}, 60.0)
    assert len(anomalies) == 1


def test_a_metric_missing_from_a_sample_or_not_finite_changes_nothing() -> None:
    state, anomalies = feed(calm(20) + [{"iowait_percent": 60.0}])
    for junk in ({}, {"iowait_percent": math.nan}, {"iowait_percent": math.inf}, {"rss_bytes": -math.inf}):
        after, again = observe(state, junk, 99.0)
        assert after == state and again == anomalies


def test_the_score_grows_with_count_and_severity() -> None:
    mild = Anomaly("cpu_percent", 95.0, 20.0, 1.0, 0.0)
    bad = Anomaly("iowait_percent", 75.0, 2.0, 3.0, 0.0)
    assert node_score([]) == 0.0
    assert node_score([mild]) == 1.0
    assert node_score([bad]) == 2.0
    assert node_score([mild, bad]) == 3.0


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), max_size=40))
def test_every_reported_anomaly_has_severity_at_least_one(values: list[float]) -> None:
    state = EMPTY
    for i, value in enumerate(values):
        state, anomalies = observe(state, {"disk_busy_percent": value, "dirty_bytes": value}, float(i))
        assert all(a.severity >= 1.0 and a.since <= i for a in anomalies)


# ---- scores relative to the other nodes (issue 15: on a busy host every node crosses limits) -------


def test_an_anomaly_every_node_shares_does_not_count_the_one_node_unlike_the_others_does() -> None:
    from policies.anomaly import relative_scores

    scores = relative_scores({
        "a": [("cpu", 2.0)],
        "b": [("cpu", 2.1)],
        "c": [("cpu", 2.0), ("disk_busy", 4.0)],
    })
    assert scores["a"] == scores["b"] == 0.0
    assert scores["c"] > 2.0  # its disk alone, at full severity
    assert relative_scores({"a": [("cpu", 6.0)], "b": [("cpu", 2.0)], "c": [("cpu", 2.0)]})["a"] > 0
    assert relative_scores({"a": [], "b": []}) == {"a": 0.0, "b": 0.0}


def test_peer_scores_are_computed_once_per_interval_with_this_nodes_own_reports() -> None:
    from cachetier.cluster.wire import AnomalyReport
    from gateway.loops.telemetry import PeerScores

    now = [0.0]
    peers = {"p1": [AnomalyReport("cpu", 2.0, 5.0)], "p2": [AnomalyReport("iowait", 3.0, 5.0)]}
    calls = []

    def peer_reports() -> dict[str, list[AnomalyReport]]:
        calls.append(now[0])
        return peers

    scores = PeerScores(peer_reports, lambda: [AnomalyReport("cpu", 2.0, 1.0)], every=0.5, clock=lambda: now[0])
    assert scores("p1") == 0.0  # busy like this node: not held against it
    assert scores("p2") > 0.0
    assert scores("p3") == 0.0 and len(calls) == 1
    now[0] = 1.0
    scores("p1")
    assert len(calls) == 2
