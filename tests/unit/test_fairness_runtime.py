"""cachetier.fairness.admission: tasks wait for their grants in the policy's order; the fast path
never yields; SlowDown past the bound; a cancelled waiter leaves the queue; the timer drives
decisions; snapshot's totals and delay histogram. Fake clocks moved by hand, except one test
that lets the real timer fire (and asserts only that it does, within a generous bound)."""

from __future__ import annotations

import asyncio
import math

import pytest

from cachetier.errors import SlowDown
from cachetier.fairness.admission import DELAY_BUCKETS, Fairness, QueueFull, quantile
from policies.fairness import FairQueue


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def fairness(capacity: dict[str, float], **options: float) -> tuple[Fairness, FakeClock]:
    clock = FakeClock()
    return Fairness(FairQueue(capacity, burst=0.0, **options), clock=clock), clock  # type: ignore[arg-type]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_the_fast_path_returns_without_yielding() -> None:
    admission, _ = fairness({"requests": 1.0})
    step = admission.acquire("a", "requests", 1.0)
    with pytest.raises(StopIteration):  # finished at the first step: it awaited nothing
        step.send(None)


def test_waiters_are_granted_in_round_robin_order_as_the_clock_moves() -> None:
    async def test() -> None:
        admission, clock = fairness({"requests": 1.0})
        order: list[str] = []

        async def request(tenant: str, name: str) -> None:
            await admission.acquire(tenant, "requests", 1.0)
            order.append(name)

        await admission.acquire("a", "requests", 1.0)  # the bucket goes into debt
        tasks = [asyncio.create_task(request(t, n)) for t, n in (("a", "a1"), ("a", "a2"), ("b", "b1"))]
        await settle()
        assert order == []
        for expected in (["a1"], ["a1", "b1"], ["a1", "b1", "a2"]):
            clock.now += 1.0
            admission.grant_due()
            await settle()
            assert order == expected
        await asyncio.gather(*tasks)
        admission.close()

    asyncio.run(test())


def test_past_the_bound_a_tenant_gets_slowdown_and_others_still_queue() -> None:
    async def test() -> None:
        admission, clock = fairness({"requests": 1.0}, max_queued=1)
        await admission.acquire("a", "requests", 1.0)
        waiting = asyncio.create_task(admission.acquire("a", "requests", 1.0))
        await settle()
        with pytest.raises(QueueFull) as refused:
            await admission.acquire("a", "requests", 1.0)
        assert refused.value.tenant == "a"
        assert isinstance(refused.value, SlowDown)
        assert (refused.value.code, refused.value.status) == ("SlowDown", 503)
        other = asyncio.create_task(admission.acquire("b", "requests", 1.0))
        await settle()
        assert not other.done()
        assert admission.snapshot()["a"].refused == 1
        for _ in range(2):
            clock.now += 1.0
            admission.grant_due()
            await settle()
        assert waiting.done() and other.done()
        admission.close()

    asyncio.run(test())


def test_a_cancelled_waiter_leaves_the_queue_and_the_next_gets_its_turn() -> None:
    async def test() -> None:
        admission, clock = fairness({"client_bytes": 10.0})
        await admission.acquire("a", "client_bytes", 10.0)
        gone = asyncio.create_task(admission.acquire("a", "client_bytes", 10.0))
        kept = asyncio.create_task(admission.acquire("b", "client_bytes", 10.0))
        await settle()
        assert admission.snapshot()["a"].backlog == {"client_bytes": 10.0}
        gone.cancel()
        await settle()
        assert gone.cancelled()
        assert "a" not in admission._queue.backlog()
        clock.now += 1.0
        admission.grant_due()
        await settle()
        assert kept.done()
        admission.close()

    asyncio.run(test())


def test_the_timer_grants_without_anyone_calling() -> None:
    async def test() -> None:
        loop = asyncio.get_running_loop()
        admission = Fairness(FairQueue({"requests": 200.0}, burst=0.0), clock=loop.time)
        await admission.acquire("a", "requests", 1.0)
        # each waits ~5 ms on the real loop; the bound only catches a timer that never fires
        await asyncio.wait_for(asyncio.gather(*(admission.acquire("a", "requests", 1.0) for _ in range(3))), 30.0)
        assert admission._timer is None  # nothing queued: no timer left behind

    asyncio.run(test())


def test_snapshot_counts_served_amounts_and_queue_delays() -> None:
    async def test() -> None:
        admission, clock = fairness({"requests": 1.0})
        await admission.acquire("a", "requests", 1.0)  # at once: 0 s
        await admission.acquire("a", "lake_bytes", 4096.0)  # unlimited: at once
        waiting = asyncio.create_task(admission.acquire("a", "requests", 1.0))
        await settle()
        assert admission.snapshot()["a"].queued == 1
        clock.now += 2.0
        admission.grant_due()
        await waiting
        stats = admission.snapshot()["a"]
        assert (stats.requests, stats.lake_bytes, stats.client_bytes, stats.queued) == (2.0, 4096.0, 0.0, 0)
        assert stats.delay_count == 2 and stats.delay_sum == pytest.approx(1.0, abs=1.0)
        assert stats.delay_buckets[0] == (DELAY_BUCKETS[0], 1)
        assert stats.delay_buckets[-1] == (math.inf, 2)
        assert 1.0 < stats.delay_p99 <= 2.5
        window = admission.take_window()["a"]
        assert window.served["requests"] == 2.0
        admission.close()

    asyncio.run(test())


def test_settings_pass_through_and_a_new_capacity_grants_at_once() -> None:
    async def test() -> None:
        admission, _ = fairness({"requests": 1e-6})
        await admission.acquire("a", "requests", 1.0)
        waiting = asyncio.create_task(admission.acquire("a", "requests", 1.0))
        await settle()
        assert not waiting.done()
        admission.set_weights({"a": 2.0})
        admission.set_limits({})
        admission.set_capacity({"requests": math.inf})  # unlimited now: the waiter passes at once
        await settle()
        assert waiting.done()
        admission.close()

    asyncio.run(test())


def test_quantile_interpolates_within_the_bucket_like_prometheus() -> None:
    assert quantile(((1.0, 0), (2.0, 0), (math.inf, 0)), 0.99) == 0.0
    assert quantile(((1.0, 50), (2.0, 100), (math.inf, 100)), 0.5) == 1.0
    assert quantile(((1.0, 0), (2.0, 100), (math.inf, 100)), 0.99) == pytest.approx(1.99)
    assert quantile(((1.0, 0), (2.0, 0), (math.inf, 10)), 0.99) == 2.0



def test_the_timer_is_set_for_the_policys_wake_time_plus_the_slack() -> None:
    async def test() -> None:
        loop = asyncio.get_running_loop()
        clock = FakeClock()
        admission = Fairness(FairQueue({"requests": 1.0}, burst=0.0), clock=clock, timer_slack=0.25)
        await admission.acquire("a", "requests", 1.0)  # in debt for 1 s
        before = loop.time()
        waiting = asyncio.create_task(admission.acquire("a", "requests", 1.0))
        await asyncio.sleep(0)
        after = loop.time()
        assert admission._timer is not None
        assert before + 1.25 <= admission._timer.when() <= after + 1.25
        waiting.cancel()
        await settle()
        assert admission._timer is None

    asyncio.run(test())


def test_the_first_demand_window_starts_with_the_admission() -> None:
    admission, clock = fairness({})  # made at 100.0 on its clock
    step = admission.acquire("a", "requests", 1.0)
    with pytest.raises(StopIteration):
        step.send(None)
    clock.now += 5.0
    assert admission.take_window()["a"].seconds == 5.0  # not 105: the window began with it
    clock.now += 3.0
    assert admission.take_window()["a"].seconds == 3.0


def test_a_large_byte_charge_goes_in_pieces_so_a_small_response_passes_within_one_piece() -> None:
    async def test() -> None:
        rate = 1_000_000.0  # bytes/s
        admission, clock = fairness({"client_bytes": rate})
        done: dict[str, float] = {}

        async def send(tenant: str, amount: int) -> None:
            await admission.acquire(tenant, "client_bytes", amount)
            done[tenant] = clock.now

        started = clock.now
        big = asyncio.create_task(send("scan", 4 << 20))
        await settle()
        small = asyncio.create_task(send("hot", 4096))
        while "hot" not in done:
            clock.now += 0.001
            admission.grant_due()
            await settle()
        # one piece (64 KiB) of the scan at most goes before it, not the 4 MiB (4.2 s here)
        assert done["hot"] - started <= 2 * (64 << 10) / rate + 0.01
        assert "scan" not in done
        big.cancel()
        await asyncio.gather(big, small, return_exceptions=True)

    asyncio.run(test())


def test_waiting_says_whether_a_tenant_has_the_resource_queued() -> None:
    async def test() -> None:
        admission, clock = fairness({"lake_bytes": 1.0})
        assert not admission.waiting("lake_bytes")
        await admission.acquire("a", "lake_bytes", 1.0)  # into debt: the next one queues
        task = asyncio.create_task(admission.acquire("a", "lake_bytes", 1.0))
        await settle()
        assert admission.waiting("lake_bytes") and not admission.waiting("requests")
        clock.now += 5.0
        admission.grant_due()
        await task
        assert not admission.waiting("lake_bytes")

    asyncio.run(test())
