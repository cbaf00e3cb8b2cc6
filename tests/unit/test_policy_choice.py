"""policies.selection's replica choice: scores and rankings for constructed snapshots under each
policy, C3's rate control and probing on a simulated clock, and a small queueing simulation in
which micromon leaves a candidate that became 10x slower and returns once it recovers."""

from __future__ import annotations

import heapq
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies import anomaly
from policies.selection import (
    EMPTY_CHOICE,
    POLICIES,
    Candidate,
    ChoiceConfig,
    ChoiceState,
    choose,
    record_response,
    score,
)


def firsts(policy: str, candidates: Sequence[Candidate], n: int, state: ChoiceState = EMPTY_CHOICE,
           start: float = 0.0, step: float = 0.001, seed: int = 1) -> list[str]:
    """The first choice of ``n`` calls ``step`` apart on static candidates."""
    draws = random.Random(seed)
    chosen = []
    for i in range(n):
        order, state = choose(policy, candidates, state, start + i * step, draws.random())
        chosen.append(order[0])
    return chosen


def iowait_score(iowait: float) -> float:
    """The node score a node reports after a calm minute and then one sample at ``iowait``."""
    state = anomaly.EMPTY
    for t in range(60):
        state, _ = anomaly.observe(state, {"iowait_percent": 2.0 + t % 2, "cpu_percent": 10.0}, float(t))
    _, reports = anomaly.observe(state, {"iowait_percent": iowait, "cpu_percent": 10.0}, 60.0)
    return anomaly.node_score(reports)


def test_a_node_with_high_iowait_ranks_below_an_idle_one_though_its_last_latency_is_lower() -> None:
    busy = Candidate("busy", latency_s=0.010, service_s=0.010, anomaly=iowait_score(60.0), last_tried=0.0)
    idle = Candidate("idle", latency_s=0.015, service_s=0.015, anomaly=iowait_score(3.0), last_tried=0.0)
    assert idle.anomaly == 0.0 < busy.anomaly
    assert score("micromon", idle) < score("micromon", busy)
    assert choose("micromon", [busy, idle], EMPTY_CHOICE, 0.5, 0.0)[0] == ("idle", "busy")
    assert choose("latency", [busy, idle], EMPTY_CHOICE, 0.5, 0.0)[0] == ("busy", "idle")


def test_an_anomaly_that_clears_stops_counting_in_the_ranking() -> None:
    state = anomaly.EMPTY
    for t in range(20):
        state, _ = anomaly.observe(state, {"iowait_percent": 2.0}, float(t))
    state, reports = anomaly.observe(state, {"iowait_percent": 70.0}, 20.0)
    for t in range(anomaly.DEFAULT_THRESHOLDS.clear_after):
        state, cleared = anomaly.observe(state, {"iowait_percent": 2.0}, 21.0 + t)
    was = Candidate("was-busy", latency_s=0.010, last_tried=0.0)
    other = Candidate("other", latency_s=0.015, last_tried=0.0)
    during = choose("micromon", [replace(was, anomaly=anomaly.node_score(reports)), other], EMPTY_CHOICE, 0.5, 0.0)
    after = choose("micromon", [replace(was, anomaly=anomaly.node_score(cleared)), other], EMPTY_CHOICE, 0.5, 0.0)
    assert during[0][0] == "other" and after[0][0] == "was-busy"


def test_the_micromon_cost_is_queue_times_service_plus_the_network_part_and_c3s_is_cubic() -> None:
    c = Candidate("a", outstanding=2, latency_s=0.030, service_s=0.010, queue=1.0)
    assert score("micromon", c) == pytest.approx(0.020 + 4.0 * 0.010)
    assert score("micromon", c, ChoiceConfig(concurrency_weight=2)) == pytest.approx(0.020 + 6.0 * 0.010)
    assert score("c3", c) == pytest.approx(0.020 + 4.0**3 * 0.010)
    assert score("micromon", replace(c, anomaly=1.5)) == pytest.approx(2.5 * score("micromon", c))
    assert score("micromon", Candidate("untried")) == 0.0
    # a queue builds: the queue term avoids it before the latency EWMA shows it
    queued = Candidate("queued", outstanding=3, latency_s=0.010, last_tried=0.0)
    quicker = Candidate("quiet", outstanding=0, latency_s=0.030, last_tried=0.0)
    assert choose("micromon", [queued, quicker], EMPTY_CHOICE, 0.5, 0.0)[0][0] == "quiet"


def test_with_equal_health_the_candidate_with_twice_the_tenants_weight_is_preferred() -> None:
    light = Candidate("light", latency_s=0.010, weight=1.0, last_tried=0.0)
    heavy = Candidate("heavy", latency_s=0.010, weight=2.0, last_tried=0.0)
    assert score("micromon", heavy) == pytest.approx(score("micromon", light) / 2)
    assert choose("micromon", [light, heavy], EMPTY_CHOICE, 0.5, 0.0)[0] == ("heavy", "light")
    # a weight not known on one candidate counts as the mean of the known ones
    unknown = Candidate("unknown", latency_s=0.010, last_tried=0.0)
    assert choose("micromon", [unknown, light, heavy], EMPTY_CHOICE, 0.5, 0.0)[0] == ("heavy", "unknown", "light")


def test_round_robin_rotates_evenly() -> None:
    candidates = [Candidate(n) for n in "abc"]
    chosen = firsts("round_robin", candidates, 300)
    assert chosen[:4] == ["a", "b", "c", "a"]
    assert Counter(chosen) == {"a": 100, "b": 100, "c": 100}
    order, _ = choose("round_robin", candidates, ChoiceState(turn=4), 0.0, 0.0)
    assert order == ("b", "c", "a")


def test_least_outstanding_puts_the_less_loaded_of_the_two_drawn_first() -> None:
    candidates = [Candidate("a", outstanding=5), Candidate("b", outstanding=1), Candidate("c", outstanding=3)]
    # 6 ordered pairs: rand picks one; the less loaded of it first, then the third
    assert choose("least_outstanding", candidates, EMPTY_CHOICE, 0.0, 0.0)[0] == ("b", "a", "c")  # (a, b)
    assert choose("least_outstanding", candidates, EMPTY_CHOICE, 0.0, 0.2)[0] == ("c", "a", "b")  # (a, c)
    assert choose("least_outstanding", candidates, EMPTY_CHOICE, 0.0, 0.99)[0] == ("b", "c", "a")  # (c, b)
    chosen = Counter(firsts("least_outstanding", candidates, 600))
    assert chosen["a"] == 0  # the most loaded is never first: it always loses its pair
    assert chosen["b"] > chosen["c"] > 0


def test_latency_ranks_by_its_ewma_with_the_untried_first() -> None:
    candidates = [Candidate("slow", latency_s=0.2), Candidate("fast", latency_s=0.01), Candidate("new")]
    assert choose("latency", candidates, EMPTY_CHOICE, 0.0, 0.0)[0] == ("new", "fast", "slow")
    assert score("latency", Candidate("new")) == 0.0 and score("least_outstanding", Candidate("x", 4)) == 4.0


@given(policy=st.sampled_from(POLICIES), rand=st.floats(0, 1, exclude_max=True),
       loads=st.lists(st.tuples(st.integers(0, 9), st.floats(0.001, 1.0)), min_size=1, max_size=6))
def test_choice_is_deterministic_given_rand_and_orders_every_candidate_once(
        policy: str, rand: float, loads: list[tuple[int, float]]) -> None:
    candidates = [Candidate(f"n{i}", outstanding=o, latency_s=lat) for i, (o, lat) in enumerate(loads)]
    first = choose(policy, candidates, EMPTY_CHOICE, 3.0, rand)
    assert first == choose(policy, candidates, EMPTY_CHOICE, 3.0, rand)
    assert sorted(first[0]) == sorted(c.id for c in candidates)


def test_an_unknown_policy_and_no_candidates() -> None:
    with pytest.raises(ValueError, match="unknown replica policy"):
        choose("fastest", [Candidate("a")], EMPTY_CHOICE, 0.0, 0.0)
    with pytest.raises(ValueError):
        score("fastest", Candidate("a"))
    assert choose("micromon", [], EMPTY_CHOICE, 0.0, 0.0) == ((), EMPTY_CHOICE)


def test_probing_returns_traffic_to_a_recovered_node_one_request_at_a_time() -> None:
    slow = Candidate("slow", latency_s=1.0)
    fast = Candidate("fast", latency_s=0.01)
    chosen = firsts("micromon", [slow, fast], 5000, step=0.001)  # 5 s of simulated time
    probes = [i for i, c in enumerate(chosen) if c == "slow"]
    assert 5 <= len(probes) <= 6  # one per probe interval, not more
    assert all(b - a <= 1001 for a, b in zip(probes, probes[1:]))  # within each probe_interval (+ rounding)


def back_off(state: ChoiceState, node: str, start: float, config: ChoiceConfig) -> tuple[ChoiceState, float]:
    """``node`` served 50 responses/s of 10 ms for 2 s, then slowed to 100 ms: five more at that
    pace, then (requests gone elsewhere) once a second for 3 s; the state and the time of its
    last slow response."""
    t = start
    for latency in [0.010] * 100 + [0.100] * 5:
        state = record_response(state, node, t, latency, config)
        t += 0.02
    for _ in range(3):
        t += 1.0
        state = record_response(state, node, t, 0.100, config)
    return state, t


def test_rate_control_keeps_a_recovered_node_from_a_stampede() -> None:
    config = ChoiceConfig()
    state, recovered_at = back_off(EMPTY_CHOICE, "back", 0.0, config)
    # the recovered node is now the cheaper, and 20 requests come per rate window
    back = Candidate("back", latency_s=0.010, last_tried=1e9)
    steady = Candidate("steady", latency_s=0.020, last_tried=1e9)
    shares = []
    now = recovered_at
    for _ in range(15):  # 3 s in rate windows of 0.2 s
        got = 0
        for _ in range(20):
            order, state = choose("micromon", [back, steady], state, now, 0.0, config)
            if order[0] == "back":
                got += 1
                state = record_response(state, "back", now, 0.010, config)
            now += 0.01
        shares.append(got / 20)
    assert shares[0] <= 0.35 and sum(shares[:5]) / 5 <= 0.5  # a bounded share at first, not all of it
    assert sum(shares[:5]) < sum(shares[5:10]) < sum(shares[10:])  # growing over time
    assert shares[-1] == 1.0
    # without the back-off, it would have had everything at once
    assert firsts("micromon", [back, steady], 50, start=recovered_at) == ["back"] * 50


def test_a_candidate_over_its_send_limit_goes_after_those_within_theirs_unless_all_are_over() -> None:
    config = ChoiceConfig()
    state, t = back_off(EMPTY_CHOICE, "a", 0.0, config)
    state, _ = back_off(state, "b", 0.0, config)
    a = Candidate("a", latency_s=0.010, last_tried=1e9)
    b = Candidate("b", latency_s=0.020, last_tried=1e9)
    c = Candidate("c", latency_s=0.030, last_tried=1e9)
    orders = []
    for _ in range(4):  # limits of 2 per window just after a back-off: a twice, then b twice, then c
        order, state = choose("micromon", [a, b, c], state, t, 0.0, config)
        orders.append(order)
    assert [o[0] for o in orders] == ["a", "a", "b", "b"]
    assert orders[2] == ("b", "c", "a")
    order, _ = choose("micromon", [a, b], state, t, 0.0, config)
    assert order == ("a", "b")  # both over: by cost


def test_a_broken_latency_measurement_is_ignored() -> None:
    state = record_response(EMPTY_CHOICE, "a", 0.0, 0.010)
    for junk in (float("nan"), float("inf"), -1.0):
        assert record_response(state, "a", 1.0, junk) == state


def test_a_long_slowness_regains_towards_what_was_served_before_it() -> None:
    config = ChoiceConfig()
    state, t = back_off(EMPTY_CHOICE, "n", 0.0, config)
    regain_to = state.rates["n"].regain_to
    assert 8.0 <= regain_to <= 12.0  # 50/s before the slowness: 10 per 0.2 s window
    assert state.rates["n"].backed_off_at == t  # restarted by each slow probe
    # a normal answer ends it; the next rise is a new slowness, from what it is served then
    state = record_response(state, "n", t + 0.5, 0.010, config)
    state = record_response(state, "n", t + 1.5, 0.100, config)
    assert state.rates["n"].regain_to < regain_to


class Server:
    """A FIFO server with one worker: ``service`` seconds per request, multiplied by ``factor``."""

    def __init__(self, service: float) -> None:
        self.service = service
        self.factor = 1.0
        self.free_at = 0.0

    def accept(self, now: float) -> float:
        """When a request sent at ``now`` is answered."""
        self.free_at = max(self.free_at, now) + self.service * self.factor
        return self.free_at


def simulate(policy: str, slow_from: float, slow_until: float, end: float) -> list[tuple[float, str]]:
    """Poisson arrivals at 200/s over two 2 ms servers, "a" 10x slower from ``slow_from`` to
    ``slow_until``; the caller keeps latency and service EWMAs (weight 0.5) and outstanding
    counts from the answers. Returns (time, chosen) per request."""
    servers = {"a": Server(0.002), "b": Server(0.002)}
    latency: dict[str, float | None] = {"a": None, "b": None}
    service: dict[str, float | None] = {"a": None, "b": None}
    outstanding = {"a": 0, "b": 0}
    tried = {"a": -1e9, "b": -1e9}
    answers: list[tuple[float, str, float, float]] = []  # (done at, server, latency, service)
    draws = random.Random(15)
    state, now, chosen = EMPTY_CHOICE, 0.0, []
    while now < end:
        now += draws.expovariate(200.0)
        servers["a"].factor = 10.0 if slow_from <= now < slow_until else 1.0
        while answers and answers[0][0] <= now:
            done, name, took, served = heapq.heappop(answers)
            outstanding[name] -= 1
            old_latency, old_service = latency[name], service[name]
            latency[name] = took if old_latency is None else 0.5 * old_latency + 0.5 * took
            service[name] = served if old_service is None else 0.5 * old_service + 0.5 * served
            state = record_response(state, name, done, took)
        candidates = [Candidate(n, outstanding[n], latency[n], service[n], last_tried=tried[n]) for n in servers]
        order, state = choose(policy, candidates, state, now, draws.random())
        name = order[0]
        done = servers[name].accept(now)
        heapq.heappush(answers, (done, name, done - now, servers[name].service * servers[name].factor))
        outstanding[name] += 1
        tried[name] = now
        chosen.append((now, name))
    return chosen


def share_of_a(chosen: list[tuple[float, str]], start: float, end: float) -> float:
    spell = [name for t, name in chosen if start <= t < end]
    return spell.count("a") / len(spell)


def test_micromon_leaves_a_candidate_that_became_10x_slower_within_a_second_and_returns() -> None:
    chosen = simulate("micromon", slow_from=5.0, slow_until=10.0, end=16.0)
    assert 0.3 <= share_of_a(chosen, 1.0, 5.0) <= 0.7  # both alike: shared
    assert share_of_a(chosen, 6.0, 10.0) <= 0.2  # >= 80% away within 1 s of the slowdown
    assert share_of_a(chosen, 13.0, 16.0) >= 0.3  # back after it recovers
    assert share_of_a(simulate("round_robin", 5.0, 10.0, 12.0), 6.0, 10.0) == pytest.approx(0.5, abs=0.01)


def test_c3_is_micromon_without_the_anomaly_reports() -> None:
    from policies.selection import Candidate, EMPTY_CHOICE, choose, score

    busy = Candidate("busy", latency_s=0.002, anomaly=5.0, last_tried=9.9)
    idle = Candidate("idle", latency_s=0.003, last_tried=9.9)
    assert choose("micromon", [busy, idle], EMPTY_CHOICE, 10.0, 0.5)[0][0] == "idle"
    assert choose("c3", [busy, idle], EMPTY_CHOICE, 10.0, 0.5)[0][0] == "busy"
    assert score("c3", busy) == score("micromon", Candidate("busy", latency_s=0.002))
