"""Replica choice at run time (cachetier/telemetry/choice.py, issue 15): the signals Replicas
feeds the policy come from real requests (in flight, response times, errors), anomaly scores
from a callback; its report has each candidate's score and recent share; LakeChooser counts a
request's first attempt as in flight and a retry's not. Simulated clock, seeded draws."""

from __future__ import annotations

import pytest

from cachetier.telemetry.choice import LakeChooser, Replicas


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _serve(replicas: Replicas, clock: Clock, latency: dict[str, float], requests: int,
           concurrency: int = 1) -> dict[str, int]:
    """``requests`` requests, ``concurrency`` in flight at once (a new one as one ends); a
    candidate takes its latency times the requests it has in flight (a queue)."""
    chosen: dict[str, int] = {}
    flying: list[tuple[float, str, float]] = []  # (ends at, candidate, latency)
    for _ in range(requests):
        while len(flying) >= concurrency:
            flying.sort()
            ends, name, took = flying.pop(0)
            clock.now = max(clock.now, ends)
            replicas.done(name, True, took)
        first = replicas.order(sorted(latency))[0]
        chosen[first] = chosen.get(first, 0) + 1
        replicas.begin(first)
        took = latency[first] * (1 + sum(1 for _, n, _ in flying if n == first))
        flying.append((clock.now + took, first, took))
    for ends, name, took in sorted(flying):
        clock.now = max(clock.now, ends)
        replicas.done(name, True, took)
    return chosen


def test_micromon_leaves_a_slow_candidate_and_probes_it_back() -> None:
    clock = Clock()
    replicas = Replicas("micromon", clock=clock, seed=1)
    latency = {"a": 0.002, "b": 0.002}
    even = _serve(replicas, clock, latency, 400, concurrency=4)
    assert even.get("b", 0) > 0.3 * 400
    latency["b"] = 0.02  # ten times slower
    slow = _serve(replicas, clock, latency, 2000, concurrency=4)  # about a second
    assert slow.get("b", 0) < 0.1 * 2000
    backed = replicas.report()["b"]
    assert backed["send_limit"] is not None and backed["backed_off_s_ago"] is not None  # C3's rate control shown
    latency["b"] = 0.002
    _serve(replicas, clock, latency, 4000, concurrency=4)  # a probe a second, each showing more of the recovery
    back = _serve(replicas, clock, latency, 2000, concurrency=4)
    assert back.get("b", 0) > 0.25 * 2000  # traffic has returned
    report = replicas.report()
    assert set(report) == {"a", "b"} and abs(sum(r["share"] for r in report.values()) - 1.0) < 1e-6  # type: ignore[misc]
    assert report["a"]["requests"] + report["b"]["requests"] == 8400


def test_an_anomalous_candidate_ranks_below_an_idle_one_with_the_same_latency() -> None:
    clock = Clock()
    scores = {"a": 0.0, "b": 3.0}
    replicas = Replicas("micromon", clock=clock, seed=2, anomaly=scores.__getitem__)
    chosen = _serve(replicas, clock, {"a": 0.004, "b": 0.003}, 300)
    assert chosen.get("a", 0) > chosen.get("b", 0)
    assert replicas.report()["b"]["anomaly"] == 3.0
    plain = Replicas("latency", clock=clock, seed=2, anomaly=scores.__getitem__)
    chosen = _serve(plain, clock, {"a": 0.004, "b": 0.003}, 300)
    assert chosen.get("b", 0) > chosen.get("a", 0)  # latency alone does not see it


def test_round_robin_and_outstanding_counts() -> None:
    clock = Clock()
    replicas = Replicas("round_robin", clock=clock)
    firsts = [replicas.order(["a", "b", "c"])[0] for _ in range(6)]
    assert firsts == ["a", "b", "c", "a", "b", "c"]
    replicas.begin("a")
    replicas.begin("a")
    assert replicas.report()["a"]["outstanding"] == 2
    replicas.done("a", False, 0.1)
    assert replicas.report()["a"]["outstanding"] == 1 and replicas.report()["a"]["errors"] == 1
    assert replicas.order(["only"]) == ["only"]
    replicas.begin("only")
    replicas.done("only", True, 0.01)
    assert replicas.report()["only"]["share"] > 0  # a lake of one endpoint: all its requests
    with pytest.raises(ValueError):
        Replicas("fastest")


def test_the_lake_chooser_counts_a_retry_on_a_fallback_as_not_begun() -> None:
    clock = Clock()
    replicas = Replicas("round_robin", clock=clock)
    chooser = LakeChooser(replicas)
    order = list(chooser.order(["http://a", "http://b"]))
    assert replicas.report()[order[0]]["outstanding"] == 1
    chooser.done(order[0], False, 0.5)  # failed: the retry goes to the fallback
    chooser.done(order[1], True, 0.01)
    report = replicas.report()
    assert report[order[0]]["outstanding"] == 0 and report[order[1]]["outstanding"] == 0
    assert report[order[0]]["errors"] == 1 and report[order[1]]["requests"] == 1


def test_the_tenants_weight_on_a_candidate_steers_micromon_pisces_rs() -> None:
    """Equal candidates but for the tenant's local weight on them (as the fairness leader set
    them all): the one where it weighs 4x is chosen more."""
    clock = Clock()
    weights = {"a": 4.0, "b": 1.0}
    replicas = Replicas("micromon", clock=clock, seed=3, weight=weights.__getitem__)
    chosen = _serve(replicas, clock, {"a": 0.004, "b": 0.004}, 400, concurrency=4)
    assert chosen.get("a", 0) > chosen.get("b", 0)
