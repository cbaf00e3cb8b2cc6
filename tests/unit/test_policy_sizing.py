"""policies.sizing: D3N's L1/L2 split on constructed curves whose optimum is known (a working set
that fits, step functions, convex curves with an analytic optimum), the directions D3N's slides
show when one tier's misses grow dearer, and the rules around the optimum: bounded steps,
clamps, a node alone, no evidence, hysteresis, ties, grain; then Curve itself, and properties
over random snapshots."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.sizing import (
    MAX_CANDIDATES,
    Curve,
    Decision,
    SizingConfig,
    Snapshot,
    Stream,
    bounds,
    candidates,
    cost,
    curve_from,
    decide,
)

MiB = 1 << 20
GiB = 1 << 30
FLAT = Curve(((0, 0.5),))


def linear(width: int) -> Curve:
    """Misses fall linearly from 1 at 0 bytes to 0 at ``width``."""
    return Curve(((0, 1.0), (width, 0.0)))


def step_at(working_set: int) -> Curve:
    """Everything misses until the working set fits, then nothing does."""
    return Curve(((working_set - 1, 1.0), (working_set, 0.0)))


def quadratic(width: int, every: int) -> Curve:
    """(1 - x/width)^2, sampled every ``every`` bytes: convex, 0 from ``width`` on."""
    return Curve(tuple((x, (1 - x / width) ** 2) for x in range(0, width + 1, every)))


def stream(curve: Curve, rate: float = 100 * MiB, cost_per_byte: float = 1e-9) -> Stream:
    return Stream(curve, rate, cost_per_byte)


def snapshot(total: int, current: int, l1: Stream | None, l2: Stream | None) -> Snapshot:
    return Snapshot(total=total, current_l1=current, l1=l1, l2=l2)


def converge(config: SizingConfig, start: Snapshot, epochs: int = 100) -> list[Decision]:
    """decide() each epoch from where the previous one left L1, until it stops moving."""
    history = []
    current = start
    for _ in range(epochs):
        decision = decide(config, current)
        history.append(decision)
        if decision.next_l1 == current.current_l1:
            return history
        current = snapshot(current.total, decision.next_l1, current.l1, current.l2)
    raise AssertionError("did not settle")


# --- known optima


def test_l1_gets_its_working_set_when_l2_gains_nothing() -> None:
    # L1 misses vanish at 3 GiB; L2 misses the same whatever its size: 3 GiB, the closest of the
    # equally cheap sizes to the current 1 GiB
    got = decide(SizingConfig(step=1.0), snapshot(10 * GiB, 1 * GiB, stream(linear(3 * GiB)), stream(FLAT)))
    assert (got.target_l1, got.next_l1, got.next_l2, got.reason) == (3 * GiB, 3 * GiB, 7 * GiB, "move")
    assert got.cost_target == pytest.approx(100 * MiB * 0.5 * 1e-9)
    assert got.cost_now == pytest.approx(100 * MiB * (2 / 3 + 0.5) * 1e-9)


def test_two_step_curves_that_both_fit_cost_nothing() -> None:
    # L1's working set 2 GiB, L2's 5 GiB, total 10 GiB: anything in [2, 5] GiB of L1 is free
    now = snapshot(10 * GiB, 8 * GiB, stream(step_at(2 * GiB)), stream(step_at(5 * GiB)))
    got = decide(SizingConfig(step=1.0), now)
    assert (got.target_l1, got.cost_target) == (5 * GiB, 0.0)  # the free size closest to 8 GiB
    got = decide(SizingConfig(step=1.0), snapshot(10 * GiB, 1 * GiB, now.l1, now.l2))
    assert (got.target_l1, got.cost_target) == (2 * GiB, 0.0)


def test_two_step_curves_that_cannot_both_fit_favour_the_dearer_misses() -> None:
    # 6 GiB + 6 GiB in 10 GiB: only one fits; it is the one whose misses cost more per second
    l1, l2 = step_at(6 * GiB), step_at(6 * GiB)
    dear_l1 = decide(SizingConfig(step=1.0), snapshot(10 * GiB, 5 * GiB, stream(l1, cost_per_byte=3e-9), stream(l2)))
    assert dear_l1.target_l1 == 6 * GiB
    dear_l2 = decide(SizingConfig(step=1.0), snapshot(10 * GiB, 5 * GiB, stream(l1), stream(l2, cost_per_byte=3e-9)))
    assert dear_l2.target_l1 == 4 * GiB


@pytest.mark.parametrize(("l1_weight", "l2_weight"), [(3, 1), (1, 1), (1, 3), (2, 3)])
def test_convex_curves_reach_the_analytic_optimum(l1_weight: float, l2_weight: float) -> None:
    # A (1 - x/C)^2 + B (1 - (C-x)/C)^2 is least at x = C A / (A + B)
    total, grain = 16 * GiB, 64 * MiB
    curve = quadratic(total, grain)
    now = snapshot(total, total // 2, stream(curve, cost_per_byte=l1_weight), stream(curve, cost_per_byte=l2_weight))
    got = decide(SizingConfig(min_l1=0.0, max_l1=1.0, grain=grain), now)
    exact = total * l1_weight / (l1_weight + l2_weight)
    assert abs(got.target_l1 - exact) <= grain / 2


def test_dearer_l2_misses_move_the_optimum_towards_l2_and_dearer_l1_misses_towards_l1() -> None:
    total, grain = 16 * GiB, 64 * MiB
    curve = quadratic(total, grain)
    config = SizingConfig(min_l1=0.0, max_l1=1.0, grain=grain)

    def target(l1_cost: float, l2_cost: float) -> int:
        now = snapshot(total, total // 2, stream(curve, cost_per_byte=l1_cost), stream(curve, cost_per_byte=l2_cost))
        return decide(config, now).target_l1

    slower_lake = [target(1.0, l2_cost) for l2_cost in (0.5, 1.0, 2.0, 4.0)]
    assert slower_lake == sorted(slower_lake, reverse=True) and len(set(slower_lake)) == 4
    slower_cluster = [target(l1_cost, 1.0) for l1_cost in (0.5, 1.0, 2.0, 4.0)]
    assert slower_cluster == sorted(slower_cluster) and len(set(slower_cluster)) == 4


def test_only_l2_traffic_moves_towards_min_l1_and_only_l1_traffic_towards_max_l1() -> None:
    config = SizingConfig(step=1.0)
    only_l2 = decide(config, snapshot(10 * GiB, 5 * GiB, None, stream(linear(10 * GiB))))
    assert only_l2.target_l1 == only_l2.next_l1 == 1 * GiB
    idle_l1 = stream(linear(10 * GiB), rate=0.0)
    assert decide(config, snapshot(10 * GiB, 5 * GiB, idle_l1, stream(linear(10 * GiB)))).target_l1 == 1 * GiB
    idle_l2 = stream(linear(10 * GiB), rate=0.0)
    only_l1 = decide(config, snapshot(10 * GiB, 5 * GiB, stream(linear(10 * GiB)), idle_l2))
    assert only_l1.target_l1 == only_l1.next_l1 == 9 * GiB


# --- steps, clamps, the special cases


def test_several_bounded_steps_reach_the_target_without_overshooting() -> None:
    config = SizingConfig(step=0.1)
    start = snapshot(10 * GiB, 1 * GiB, stream(linear(int(4.5 * GiB))), stream(FLAT))
    history = converge(config, start)
    sizes = [1 * GiB] + [d.next_l1 for d in history]
    assert sizes[:6] == [1 * GiB, 2 * GiB, 3 * GiB, 4 * GiB, int(4.5 * GiB), int(4.5 * GiB)]
    assert all(d.target_l1 == int(4.5 * GiB) for d in history)
    assert [d.reason for d in history] == ["move"] * 4 + ["hold"]
    assert all(d.next_l1 + d.next_l2 == 10 * GiB for d in history)


def test_steps_down_are_bounded_too() -> None:
    got = decide(SizingConfig(step=0.25), snapshot(8 * GiB, 7 * GiB, None, stream(linear(8 * GiB))))
    assert (got.target_l1, got.next_l1, got.next_l2) == (round(0.1 * 8 * GiB), 5 * GiB, 3 * GiB)


def test_a_split_outside_the_bounds_is_clamped_first_then_stepped() -> None:
    config = SizingConfig(step=0.1)
    l1, l2 = stream(linear(10 * GiB)), stream(FLAT)
    low = decide(config, snapshot(10 * GiB, 0, l1, l2))  # clamp to 1 GiB, then one step
    assert (low.target_l1, low.next_l1) == (9 * GiB, 2 * GiB)
    high = decide(config, snapshot(10 * GiB, 10 * GiB, None, stream(linear(10 * GiB))))
    assert (high.target_l1, high.next_l1, high.next_l2) == (1 * GiB, 8 * GiB, 2 * GiB)
    # past the total itself (the node's disk shrank): clamped all the same
    assert decide(config, snapshot(10 * GiB, 20 * GiB, l1, l2)).next_l1 == 9 * GiB


def test_a_node_alone_gives_l1_everything_at_once() -> None:
    for l1 in (None, stream(linear(GiB))):
        got = decide(SizingConfig(step=0.1, max_l1=0.5), snapshot(10 * GiB, 1 * GiB, l1, None))
        assert (got.target_l1, got.next_l1, got.next_l2, got.reason) == (10 * GiB, 10 * GiB, 0, "alone")


def test_no_evidence_on_either_tier_holds_the_current_split_within_bounds() -> None:
    config = SizingConfig()
    idle = stream(linear(GiB), rate=0.0)
    for l1, l2 in ((None, idle), (idle, idle)):
        got = decide(config, snapshot(10 * GiB, 3 * GiB, l1, l2))
        assert got == Decision(3 * GiB, 3 * GiB, 7 * GiB, 0.0, 0.0, "no evidence")
    assert decide(config, snapshot(10 * GiB, 0, None, idle)).next_l1 == 1 * GiB


def test_a_gain_within_hysteresis_holds_and_a_larger_one_moves() -> None:
    # L1 misses fall from 1.0 at 1 GiB to 0.992 at 9 GiB: its best split is 0.8% cheaper
    curve = Curve(((GiB, 1.0), (9 * GiB, 0.992)))
    now = snapshot(10 * GiB, 1 * GiB, stream(curve), stream(FLAT, rate=0.0))
    held = decide(SizingConfig(hysteresis=0.02), now)
    assert (held.target_l1, held.next_l1, held.next_l2, held.reason) == (9 * GiB, 1 * GiB, 9 * GiB, "hold")
    assert held.cost_target == pytest.approx(0.992 * held.cost_now)
    moved = decide(SizingConfig(hysteresis=0.005), now)
    assert (moved.target_l1, moved.next_l1, moved.reason) == (9 * GiB, 2 * GiB, "move")


def test_ties_go_to_the_candidate_closest_to_the_current_split() -> None:
    config = SizingConfig(grain=GiB)
    flat = snapshot(10 * GiB, 3 * GiB + 100 * MiB, stream(FLAT), stream(FLAT))
    got = decide(config, flat)
    assert (got.target_l1, got.next_l1, got.reason) == (3 * GiB, 3 * GiB + 100 * MiB, "hold")
    # equally far on both sides: the smaller
    assert decide(config, snapshot(10 * GiB, 3 * GiB + GiB // 2, stream(FLAT), stream(FLAT))).target_l1 == 3 * GiB
    # floating-point noise from interpolation is no reason to pick a far size
    # (L1 misses fall exactly as L2's rise: every split costs the same, but for rounding)
    same = stream(linear(10 * GiB))
    assert len({cost(snapshot(10 * GiB, 0, same, same), size) for size in candidates(config, 10 * GiB)}) > 1
    assert decide(SizingConfig(), snapshot(10 * GiB, 5 * GiB + 3 * MiB, same, same)).target_l1 == 5 * GiB + 4 * MiB


def test_targets_are_grain_multiples_or_the_bounds() -> None:
    total = 10 * GiB + 12345
    config = SizingConfig(grain=256 * MiB)
    low, high = bounds(config, total)
    sizes = candidates(config, total)
    assert sizes[0] == low and sizes[-1] == high
    assert all(size % config.grain == 0 for size in sizes[1:-1])
    assert sizes == sorted(set(sizes))
    working_set = 3 * GiB + 100 * MiB
    got = decide(config, snapshot(total, 1 * GiB, stream(linear(working_set)), stream(FLAT)))
    assert got.target_l1 == 3 * GiB + 256 * MiB  # the first multiple where nothing misses
    only_l2 = decide(config, snapshot(total, 5 * GiB, None, stream(linear(total))))
    assert only_l2.target_l1 == low


def test_a_fine_grain_is_coarsened_to_a_bounded_number_of_candidates() -> None:
    config = SizingConfig(grain=MiB)
    sizes = candidates(config, 1 << 40)
    assert len(sizes) <= MAX_CANDIDATES + 2
    assert all(size % MiB == 0 for size in sizes[1:-1])
    steps = {b - a for a, b in zip(sizes[1:-2], sizes[2:-1], strict=True)}
    assert len(steps) == 1 and steps.pop() % MiB == 0
    # few enough: every multiple of the grain
    few = SizingConfig(min_l1=0.25, max_l1=0.75, grain=MiB)
    assert candidates(few, 4 * GiB) == list(range(GiB, 3 * GiB + 1, MiB))


def test_cost_is_d3n_cost() -> None:
    now = snapshot(10 * GiB, 0, stream(linear(10 * GiB), 200.0, 2.0), stream(linear(10 * GiB), 100.0, 3.0))
    assert cost(now, 4 * GiB) == pytest.approx(200 * 0.6 * 2 + 100 * 0.4 * 3)
    assert cost(snapshot(10 * GiB, 0, None, now.l2), 4 * GiB) == pytest.approx(100 * 0.4 * 3)
    assert cost(snapshot(10 * GiB, 0, now.l1, None), 4 * GiB) == pytest.approx(200 * 0.6 * 2)


# --- values refused


@pytest.mark.parametrize(
    "points",
    [((0, 0.5), (0, 0.4)), ((10, 0.5), (5, 0.4)), ((-1, 0.5),), ((0, 1.5),), ((0, -0.1),), ((0, math.nan),)],
)
def test_a_curve_refuses_bad_points(points: tuple[tuple[int, float], ...]) -> None:
    with pytest.raises(ValueError):
        Curve(points)


@pytest.mark.parametrize(
    "fields",
    [{"min_l1": -0.1}, {"max_l1": 1.1}, {"min_l1": 0.6, "max_l1": 0.5}, {"step": 0.0}, {"step": 1.5},
     {"grain": 0}, {"hysteresis": -0.01}, {"hysteresis": math.inf}],
)
def test_a_config_refuses_bad_values(fields: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        SizingConfig(**fields)  # type: ignore[arg-type]


def test_streams_and_snapshots_refuse_bad_values() -> None:
    for rate, per_byte in ((-1.0, 1.0), (1.0, -1.0), (math.nan, 1.0), (1.0, math.inf)):
        with pytest.raises(ValueError):
            Stream(FLAT, rate, per_byte)
    for total, current in ((-1, 0), (10, -1)):
        with pytest.raises(ValueError):
            Snapshot(total, current, None, None)


# --- Curve


def test_a_curve_interpolates_between_its_points_and_is_flat_past_the_last() -> None:
    curve = Curve(((10, 0.5), (20, 0.1)))
    assert [curve.at(size) for size in (0, 5, 10, 15, 20, 1000)] == pytest.approx([1.0, 0.75, 0.5, 0.3, 0.1, 0.1])
    assert curve.at(-5) == 1.0
    from_zero = Curve(((0, 0.8), (100, 0.4)))
    assert [from_zero.at(size) for size in (-1, 0, 25, 100, 101)] == pytest.approx([0.8, 0.8, 0.7, 0.4, 0.4])
    assert Curve(()).at(123) == 1.0
    assert Curve(((7, 0.2),)).at(7) == 0.2


def test_curve_from_sorts_drops_duplicates_and_never_rises() -> None:
    got = curve_from([(30, 0.6), (0, 1.2), (10, 0.5), (10, 0.9), (20, 0.7), (40, -0.1)])
    assert got == Curve(((0, 1.0), (10, 0.5), (20, 0.5), (30, 0.5), (40, 0.0)))
    assert curve_from([]) == Curve(())


# --- properties


@st.composite
def snapshots(draw: st.DrawFn) -> tuple[SizingConfig, Snapshot]:
    low = draw(st.floats(0.0, 1.0))
    high = draw(st.floats(low, 1.0))
    config = SizingConfig(
        min_l1=low, max_l1=high, step=draw(st.floats(0.01, 1.0)),
        grain=draw(st.sampled_from([1, 4096, MiB, 4 * MiB, GiB])), hysteresis=draw(st.floats(0.0, 0.2)),
    )
    total = draw(st.integers(0, 1 << 44))
    current = draw(st.integers(0, 2 * total + 1))
    point = st.tuples(st.integers(0, total + 1), st.floats(0.0, 1.0))

    def tier() -> Stream | None:
        if draw(st.booleans()) and draw(st.booleans()):
            return None
        curve = curve_from(draw(st.lists(point, max_size=8)))
        return Stream(curve, draw(st.floats(0.0, 1e10)), draw(st.floats(0.0, 1e-6)))

    return config, Snapshot(total, current, tier(), tier())


@settings(max_examples=300, deadline=None)
@given(snapshots())
def test_every_decision_is_a_bounded_step_towards_the_cheapest_candidate(case: tuple[SizingConfig, Snapshot]) -> None:
    config, now = case
    got = decide(config, now)
    assert got.next_l1 + got.next_l2 == now.total and got.next_l2 >= 0
    if now.l2 is None:
        assert got.next_l1 == got.target_l1 == now.total
        return
    low, high = bounds(config, now.total)
    assert low <= got.next_l1 <= high and low <= got.target_l1 <= high
    clamped = min(max(now.current_l1, low), high)
    assert abs(got.next_l1 - clamped) <= max(1, config.step * now.total)
    assert min(clamped, got.target_l1) <= got.next_l1 <= max(clamped, got.target_l1)  # never past the target
    if got.reason == "no evidence":
        assert got.next_l1 == clamped
        return
    assert got.target_l1 in candidates(config, now.total)
    assert got.cost_target == cost(now, got.target_l1)
    least = min(cost(now, size) for size in candidates(config, now.total))
    assert got.cost_target <= least * (1 + 1e-9)
    assert got.reason in ("hold", "move")
    if got.reason == "hold":
        assert got.next_l1 == clamped
