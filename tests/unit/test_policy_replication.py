"""policies.replication: Pfimbi's thresholds (intake around T + delta, async copies around T,
the background's slots), then the hierarchical scheduler on simulated backlogs (each step:
decide, the started jobs finish, repeat): Pfimbi's replica-position figure (100:10:1 against
equal weights), weighted tenants, no credit hoarded while idle, per-key order, slots, and
properties over random queues."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.replication import (
    POSITION_WEIGHTS,
    Intake,
    Job,
    SchedulerState,
    Snapshot,
    Thresholds,
    async_copy_allowed,
    background_slots,
    decide,
    intake,
)

MiB = 1 << 20
T = Thresholds(soft=100, delta=20)


# -- thresholds ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dirty", "incoming", "lake_up", "expected"),
    [
        (0, 0, True, Intake.WRITE_BACK),
        (60, 60, True, Intake.WRITE_BACK),  # exactly T + delta
        (60, 60, False, Intake.WRITE_BACK),
        (60, 61, True, Intake.WRITE_THROUGH),
        (60, 61, False, Intake.SLOW_DOWN),
        (121, 0, True, Intake.WRITE_THROUGH),
        (121, 0, False, Intake.SLOW_DOWN),
        (110, 5, True, Intake.WRITE_BACK),  # above T, below T + delta: still journalled
    ],
)
def test_intake_around_t_plus_delta(dirty: int, incoming: int, lake_up: bool, expected: Intake) -> None:
    assert intake(dirty, incoming, T, lake_up) is expected


@pytest.mark.parametrize(
    ("dirty", "incoming", "expected"), [(0, 100, True), (50, 50, True), (50, 51, False), (101, 0, False), (100, 0, True)]
)
def test_async_copies_only_while_dirty_stays_within_t(dirty: int, incoming: int, expected: bool) -> None:
    assert async_copy_allowed(dirty, incoming, T) is expected


def test_thresholds_default_to_shares_of_the_cache_disk() -> None:
    assert Thresholds.for_disk(1000 * MiB) == Thresholds(soft=100 * MiB, delta=50 * MiB)
    assert Thresholds.for_disk(0) == Thresholds(0, 0)


def test_explicit_thresholds_win() -> None:
    assert Thresholds.for_disk(1000, soft=7) == Thresholds(7, 50)
    assert Thresholds.for_disk(1000, delta=3) == Thresholds(100, 3)
    assert Thresholds.for_disk(1000, soft=0, delta=0) == Thresholds(0, 0)


@pytest.mark.parametrize(("cache", "soft", "delta"), [(-1, None, None), (100, -1, None), (100, None, -1)])
def test_negative_thresholds_are_refused(cache: int, soft: int | None, delta: int | None) -> None:
    with pytest.raises(ValueError):
        Thresholds.for_disk(cache, soft=soft, delta=delta)


def test_background_slots() -> None:
    assert background_slots(8, False, 0, T) == 8
    assert background_slots(8, True, 0, T) == 1  # foreground reads wait: background yields, keeps moving
    assert background_slots(8, True, 110, T) == 1  # exactly T + delta/2: still yields
    assert background_slots(8, True, 111, T) == 8  # past it: the journal must drain
    assert background_slots(8, False, 500, T) == 8
    assert background_slots(0, True, 0, T) == 0
    with pytest.raises(ValueError):
        background_slots(-1, False, 0, T)


# -- the scheduler, simulated ---------------------------------------------------------------------


def job(i: int, tenant: str = "t", position: int = 1, size: int = MiB, key: str | None = None, seq: int | None = None) -> Job:
    return Job(f"j{i}", tenant, position, size, key if key is not None else f"b/k{i}", i if seq is None else seq)


class Simulation:
    """Backlogs per (tenant, position), each step: decide over the queue, the started jobs finish
    at once, repeat. Only the WINDOW first jobs of each class are shown to decide: with distinct
    keys in seq order the choice depends on nothing behind them, and it keeps each step cheap."""

    WINDOW = 3

    def __init__(self, tenant_weights: dict[str, float] | None = None, position_weights: Sequence[float] = POSITION_WEIGHTS) -> None:
        self.backlogs: dict[tuple[str, int], list[Job]] = {}
        self.tenant_weights = tenant_weights or {}
        self.position_weights = tuple(position_weights)
        self.state = SchedulerState.initial()
        self.step_count = 0
        self.finished: list[tuple[int, Job]] = []  # (step, job)
        self._next_id = 0

    def add(self, tenant: str, position: int, count: int, size: int = MiB) -> None:
        backlog = self.backlogs.setdefault((tenant, position), [])
        for _ in range(count):
            backlog.append(job(self._next_id, tenant, position, size))
            self._next_id += 1

    def step(self, slots: int = 1) -> tuple[Job, ...]:
        queued = tuple(j for backlog in self.backlogs.values() for j in backlog[: self.WINDOW])
        snapshot = Snapshot(queued, (), slots, self.tenant_weights, self.position_weights)
        decision = decide(self.state, snapshot, float(self.step_count))
        self.state = decision.state
        self.step_count += 1
        for started in decision.start:
            self.backlogs[(started.tenant, started.position)].remove(started)
            self.finished.append((self.step_count, started))
        return decision.start

    def run(self, steps: int) -> list[Job]:
        return [started for _ in range(steps) for started in self.step()]

    def drain(self) -> None:
        while any(self.backlogs.values()):
            assert self.step(), "work conserving: a queued job must start"


def bytes_by(jobs: Iterable[Job], attribute: str) -> dict[object, int]:
    found: dict[object, int] = {}
    for j in jobs:
        found[getattr(j, attribute)] = found.get(getattr(j, attribute), 0) + j.size
    return found


def mean_completion(simulation: Simulation) -> dict[int, float]:
    steps: dict[int, list[int]] = {}
    for step, j in simulation.finished:
        steps.setdefault(j.position, []).append(step)
    return {position: sum(s) / len(s) for position, s in sorted(steps.items())}


def pfimbi_figure(position_weights: Sequence[float]) -> tuple[dict[object, int], Simulation]:
    """One tenant, positions 1, 2, 3 with 1000 equal jobs each, slots 1: the bytes started per
    position over the first 1110 jobs, and the simulation afterwards drained."""
    simulation = Simulation(position_weights=position_weights)
    for position in (1, 2, 3):
        simulation.add("t", position, 1000)
    first = simulation.run(1110)
    simulation.drain()
    return bytes_by(first, "position"), simulation


def last_step(simulation: Simulation, position: int) -> int:
    return max(step for step, j in simulation.finished if j.position == position)


def test_pfimbi_figure_positions_share_bytes_100_10_1() -> None:
    shares, simulation = pfimbi_figure(POSITION_WEIGHTS)
    assert shares[1] / shares[3] == pytest.approx(100, rel=0.1)
    assert shares[2] / shares[3] == pytest.approx(10, rel=0.1)
    assert shares[1] / shares[2] == pytest.approx(10, rel=0.05)
    assert last_step(simulation, 1) < last_step(simulation, 2) < last_step(simulation, 3)
    assert last_step(simulation, 1) <= 1115  # position 1's backlog is done by the 1110th job, about


def test_pfimbi_figure_with_equal_weights_shares_evenly() -> None:
    shares, _ = pfimbi_figure((1.0, 1.0, 1.0))
    assert shares[1] == pytest.approx(370 * MiB, abs=MiB)
    assert shares[2] == pytest.approx(370 * MiB, abs=MiB)
    assert shares[3] == pytest.approx(370 * MiB, abs=MiB)


def test_position_weights_bring_the_lake_flushes_forward() -> None:
    _, weighted = pfimbi_figure(POSITION_WEIGHTS)
    _, equal = pfimbi_figure((1.0, 1.0, 1.0))
    weighted_mean, equal_mean = mean_completion(weighted), mean_completion(equal)
    print(f"mean completion step per position: 100:10:1 {weighted_mean}, 1:1:1 {equal_mean}")
    assert weighted_mean[1] < 0.5 * equal_mean[1]
    assert weighted_mean[1] < weighted_mean[2] < weighted_mean[3]
    assert equal_mean[1] == pytest.approx(equal_mean[3], rel=0.01)


def test_positions_beyond_the_weights_take_the_last_weight() -> None:
    simulation = Simulation(position_weights=(2.0, 1.0))
    simulation.add("t", 2, 500)
    simulation.add("t", 5, 500)
    shares = bytes_by(simulation.run(300), "position")
    assert shares[2] == shares[5] == 150 * MiB


def test_tenants_share_bytes_by_weight() -> None:
    simulation = Simulation(tenant_weights={"a": 3.0, "b": 1.0})
    simulation.add("a", 1, 1000)
    simulation.add("b", 1, 1000)
    shares = bytes_by(simulation.run(400), "tenant")
    assert shares["a"] == pytest.approx(300 * MiB, abs=2 * MiB)
    assert shares["b"] == pytest.approx(100 * MiB, abs=2 * MiB)


def test_tenant_weights_come_before_position_weights() -> None:
    """b's async copies get b's share, not a share weighed against a's lake flushes."""
    simulation = Simulation()
    simulation.add("a", 1, 1000)
    simulation.add("b", 3, 1000)
    shares = bytes_by(simulation.run(200), "tenant")
    assert shares["a"] == shares["b"] == 100 * MiB


def test_a_tenant_back_from_idle_gets_its_share_not_a_burst() -> None:
    simulation = Simulation()
    simulation.add("a", 1, 2000)
    simulation.run(1000)  # a alone: b is idle and must bank no credit for it
    simulation.add("b", 1, 1000)
    shares = bytes_by(simulation.run(200), "tenant")
    assert shares["b"] == pytest.approx(100 * MiB, abs=MiB)


def test_a_position_back_from_idle_gets_its_share_not_a_burst() -> None:
    simulation = Simulation(position_weights=(1.0, 1.0))
    simulation.add("t", 1, 2000)
    simulation.run(1000)
    simulation.add("t", 2, 1000)
    shares = bytes_by(simulation.run(200), "position")
    assert shares[2] == pytest.approx(100 * MiB, abs=MiB)


def test_the_state_keeps_only_flows_ahead_of_the_clock() -> None:
    simulation = Simulation()
    for tenant in ("a", "b", "c"):
        simulation.add(tenant, 1, 2)
    simulation.add("a", 2, 3)
    simulation.run(4)
    assert set(simulation.state.tenants) <= {"a", "b", "c"}
    simulation.drain()
    assert simulation.step() == ()  # an idle node: its busy period is over
    state = simulation.state
    assert (state.tenants, state.tenant_clocks, state.classes) == ({}, {}, {})
    assert state.clock > 0


# -- per-key order and slots ----------------------------------------------------------------------


def test_one_key_runs_one_job_at_a_time_in_seq_order_even_against_a_heavier_class() -> None:
    older = job(1, position=3, key="b/k", seq=1)  # an async copy of the older version
    newer = job(2, position=1, key="b/k", seq=2)  # the newer version's lake flush: heavier class
    other = job(3, position=1, key="b/other", seq=3)
    first = decide(SchedulerState.initial(), Snapshot((newer, older, other), (), slots=3), 0.0)
    assert set(first.start) == {older, other}
    while_running = decide(first.state, Snapshot((newer,), (older,), slots=3), 1.0)
    assert while_running.start == ()
    after = decide(while_running.state, Snapshot((newer,), (), slots=3), 2.0)
    assert after.start == (newer,)


def test_two_queued_jobs_of_one_key_with_equal_seq_do_not_start_together() -> None:
    twins = (job(1, key="b/k", seq=5), job(2, key="b/k", seq=5))
    decision = decide(SchedulerState.initial(), Snapshot(twins, (), slots=2), 0.0)
    assert len(decision.start) == 1


def test_within_a_class_the_lowest_seq_starts_first() -> None:
    queued = (job(1, seq=9), job(2, seq=4), job(3, seq=7))
    decision = decide(SchedulerState.initial(), Snapshot(queued, (), slots=3), 0.0)
    assert [j.seq for j in decision.start] == [4, 7, 9]


def test_no_more_start_than_the_free_slots() -> None:
    queued = tuple(job(i) for i in range(10))
    running = (job(100), job(101))
    assert len(decide(SchedulerState.initial(), Snapshot(queued, running, slots=5), 0.0).start) == 3
    assert decide(SchedulerState.initial(), Snapshot(queued, running, slots=2), 0.0).start == ()
    assert decide(SchedulerState.initial(), Snapshot(queued, running, slots=1), 0.0).start == ()
    assert decide(SchedulerState.initial(), Snapshot(queued, (), slots=0), 0.0).start == ()


def test_snapshots_refuse_nonsense() -> None:
    with pytest.raises(ValueError):
        Snapshot((), (), slots=-1)
    with pytest.raises(ValueError):
        Snapshot((), (), slots=1, tenant_weights={"a": 0.0})
    with pytest.raises(ValueError):
        Snapshot((), (), slots=1, position_weights=())
    with pytest.raises(ValueError):
        Job("j", "t", position=0, size=1, order_key="b/k", seq=1)


# -- properties -----------------------------------------------------------------------------------

jobs = st.lists(
    st.builds(
        lambda tenant, position, size, key, seq: (tenant, position, size, key, seq),
        st.sampled_from("abc"),
        st.integers(1, 5),
        st.integers(0, 10 * MiB),
        st.sampled_from(["b/k1", "b/k2", "b/k3", "b/k4"]),
        st.integers(0, 20),
    ),
    max_size=25,
)


def build(specs: list[tuple[str, int, int, str, int]], prefix: str) -> tuple[Job, ...]:
    return tuple(Job(f"{prefix}{i}", *spec) for i, spec in enumerate(specs))


@settings(max_examples=300, deadline=None)
@given(jobs, jobs, st.integers(0, 8), st.integers(0, 3))
def test_decide_respects_slots_order_and_is_work_conserving(
    queued_specs: list[tuple[str, int, int, str, int]],
    running_specs: list[tuple[str, int, int, str, int]],
    slots: int,
    rounds: int,
) -> None:
    queued, running = build(queued_specs, "q"), build(running_specs[:4], "r")
    weights = {"a": 3.0, "b": 0.5}
    state = SchedulerState.initial()
    for _ in range(rounds):  # a state that has seen some traffic
        state = decide(state, Snapshot(queued, (), 2, weights), 0.0).state
    decision = decide(state, Snapshot(queued, running, slots, weights), 1.0)
    started = decision.start
    assert len(started) <= max(0, slots - len(running))
    assert len({j.id for j in started}) == len(started)
    assert set(started) <= set(queued)
    busy = {j.order_key for j in running}
    for j in started:
        assert j.order_key not in busy, "a job of a running key started"
        assert all(other.seq >= j.seq for other in queued if other.order_key == j.order_key)
        busy.add(j.order_key)
    keys_free = {j.order_key for j in queued} - {j.order_key for j in running}
    if slots > len(running) and keys_free:
        assert started, "a free slot and an eligible job, but nothing started"
    if len(started) < slots - len(running):  # stopped early: nothing eligible was left
        assert {j.order_key for j in queued} <= busy


def test_background_rate_is_a_tenth_of_the_budget_while_foreground_waits_unless_the_journal_must_drain() -> None:
    from policies.replication import background_rate

    t = Thresholds(100, 100)
    assert background_rate(1000.0, False, 0, t) == math.inf
    assert background_rate(1000.0, True, 0, t) == pytest.approx(100.0)
    assert background_rate(1000.0, True, 150, t) == pytest.approx(100.0)  # at T + delta/2: still paced
    assert background_rate(1000.0, True, 151, t) == math.inf  # past it: drain
    assert background_rate(math.inf, True, 0, t) == math.inf  # no budget to pace by
