"""policies.fairness: weighted DRR per resource with node token buckets, on a simulated clock.
Shares within 2% of the weights, each tenant's own bottleneck, work conservation, a 4 GiB GET
beside a small request, the queue bound, hard limits, cancellation, and (hypothesis) never more
than capacity allows and every item granted in the end."""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.fairness import RESOURCES, FairQueue

KiB, MiB, GiB = 1024, 1024**2, 1024**3
BYTES = "client_bytes"


class Simulation:
    """Drives a FairQueue on a simulated clock: decide at each wake time, and a ``feed`` callback
    after every grant (tenant, resource, amount) so that tenants can keep themselves backlogged."""

    def __init__(self, queue: FairQueue) -> None:
        self.queue = queue
        self.now = 0.0
        self.waiting: dict[int, tuple[str, str, float]] = {}
        self.granted_at: dict[int, float] = {}
        self.served: dict[tuple[str, str], float] = {}
        self.feed: Callable[[str, str, float], None] = lambda tenant, resource, amount: None

    def submit(self, tenant: str, resource: str, amount: float) -> int | None:
        """Submit; the item's id when queued, None when granted at once."""
        sent = self.queue.submit(tenant, resource, amount, self.now)
        assert not sent.refused
        if sent.granted:
            self._served(tenant, resource, amount)
            return None
        assert sent.item is not None
        self.waiting[sent.item] = (tenant, resource, amount)
        return sent.item

    def run(self, until: float) -> None:
        while True:
            decision = self.queue.decide(self.now)
            for item in decision.granted:
                self.granted_at[item] = self.now
                self._served(*self.waiting.pop(item))
            if decision.granted:
                continue  # the feed may have queued more at this instant
            if decision.wake_at is None or decision.wake_at > until:
                self.now = until
                return
            assert decision.wake_at > self.now
            self.now = decision.wake_at

    def rate(self, tenant: str, resource: str, seconds: float) -> float:
        return self.served.get((tenant, resource), 0.0) / seconds

    def _served(self, tenant: str, resource: str, amount: float) -> None:
        self.served[tenant, resource] = self.served.get((tenant, resource), 0.0) + amount
        self.feed(tenant, resource, amount)


def backlogged(sim: Simulation, tenants: dict[str, Callable[[], float]], resource: str, depth: int = 8) -> None:
    """Each tenant keeps ``depth`` items of sizes drawn by its function queued on ``resource``."""
    queued = dict.fromkeys(tenants, 0)
    filling: set[str] = set()

    def feed(tenant: str, fed: str, amount: float) -> None:
        if fed == resource and tenant in tenants:
            queued[tenant] -= 1
            if tenant not in filling:  # else the loop below goes on
                top_up(tenant)

    def top_up(tenant: str) -> None:
        filling.add(tenant)
        while queued[tenant] < depth:
            queued[tenant] += 1
            sim.submit(tenant, resource, tenants[tenant]())
        filling.discard(tenant)

    sim.feed = feed
    for tenant in tenants:
        top_up(tenant)


def log_uniform(rng: random.Random, low: float, high: float) -> Callable[[], float]:
    return lambda: float(round(math.exp(rng.uniform(math.log(low), math.log(high)))))


def test_backlogged_tenants_get_their_weighted_shares_within_two_percent() -> None:
    capacity = 100 * MiB
    sim = Simulation(FairQueue({BYTES: capacity}))
    sim.queue.set_weights({"a": 1.0, "b": 2.0, "c": 4.0})
    rng = random.Random(12)
    backlogged(sim, {t: log_uniform(rng, 4 * KiB, 4 * MiB) for t in "abc"}, BYTES)
    sim.run(until=60.0)
    total = sum(sim.rate(t, BYTES, 60.0) for t in "abc")
    assert total == pytest.approx(capacity, rel=0.01)  # and nothing is left idle
    for tenant, weight in {"a": 1, "b": 2, "c": 4}.items():
        assert sim.rate(tenant, BYTES, 60.0) / total == pytest.approx(weight / 7, rel=0.02)


def test_new_weights_take_effect_on_a_running_queue() -> None:
    capacity = 10 * MiB
    sim = Simulation(FairQueue({BYTES: capacity}))
    backlogged(sim, {t: lambda: float(256 * KiB) for t in "ab"}, BYTES)
    sim.run(until=10.0)
    assert sim.served["a", BYTES] == pytest.approx(sim.served["b", BYTES], rel=0.02)
    before = {t: sim.served[t, BYTES] for t in "ab"}
    sim.queue.set_weights({"a": 3.0})
    sim.run(until=30.0)
    gained = {t: sim.served[t, BYTES] - before[t] for t in "ab"}
    assert gained["a"] / (gained["a"] + gained["b"]) == pytest.approx(0.75, rel=0.02)


def test_request_bound_and_bandwidth_bound_tenants_each_get_their_own_bottleneck() -> None:
    # "small" sends many 4 KiB GETs, "scan" few 64 MiB GETs, 16 at a time each: a request item,
    # then the response's bytes in 4 MiB chunks, then the next request.
    capacity = {"requests": 500.0, BYTES: 50 * MiB}
    sim = Simulation(FairQueue(capacity))
    sim.queue.set_weights({"small": 1.0, "scan": 3.0})
    sizes = {"small": 4 * KiB, "scan": 64 * MiB}
    left: dict[str, deque[float]] = {t: deque() for t in sizes}

    def feed(tenant: str, resource: str, amount: float) -> None:
        if resource == "requests":
            chunks = [4 * MiB] * int(sizes[tenant] // (4 * MiB)) or [sizes[tenant]]
            left[tenant].append(len(chunks))
            for chunk in chunks:
                sim.submit(tenant, BYTES, chunk)
        else:
            left[tenant][0] -= amount / min(sizes[tenant], 4 * MiB)
            if left[tenant][0] <= 0:
                left[tenant].popleft()
                sim.submit(tenant, "requests", 1.0)

    sim.feed = feed
    for tenant in sizes:
        for _ in range(16):
            sim.submit(tenant, "requests", 1.0)
    sim.run(until=60.0)
    # weighted shares of the requests: small 1/4, scan 3/4; of the bytes likewise
    assert sim.rate("small", "requests", 60.0) >= 0.25 * capacity["requests"] * 0.98
    assert sim.rate("scan", BYTES, 60.0) >= 0.75 * capacity[BYTES] * 0.98
    # and each takes more than its share of its own bottleneck, as the other does not want it
    assert sim.rate("small", "requests", 60.0) > 0.9 * capacity["requests"]


def test_a_lone_tenant_gets_all_the_capacity_and_an_idle_ones_share_goes_to_the_others() -> None:
    capacity = 10 * MiB
    sim = Simulation(FairQueue({BYTES: capacity}))
    backlogged(sim, {"a": lambda: float(256 * KiB)}, BYTES)
    sim.run(until=10.0)
    assert sim.rate("a", BYTES, 10.0) == pytest.approx(capacity, rel=0.01)  # burst + one item more at most


def test_an_idle_tenant_banks_no_credit_and_gets_its_share_back_promptly() -> None:
    capacity = 10 * MiB
    sim = Simulation(FairQueue({BYTES: capacity}))
    chunk = 64 * KiB
    backlogged(sim, {"a": lambda: float(chunk)}, BYTES)
    sim.run(until=10.0)  # b idle for 10 s: a took it all
    assert sim.rate("a", BYTES, 10.0) == pytest.approx(capacity, rel=0.01)
    before_a, start = sim.served["a", BYTES], sim.now
    b_items = [sim.submit("b", BYTES, float(chunk)) for _ in range(200)]  # b is back
    sim.run(until=start + 0.1)
    # within 100 ms b has its half, not more (it banked nothing while idle), nor less
    b_served = sim.served.get(("b", BYTES), 0.0)
    a_served = sim.served["a", BYTES] - before_a
    assert b_served == pytest.approx(a_served, abs=2 * chunk)
    assert b_items[0] is not None
    assert sim.granted_at[b_items[0]] - start <= 0.005 + 2 * chunk / capacity


def test_a_4_gib_get_delays_a_small_request_by_one_quantum_and_one_chunk_at_most() -> None:
    capacity, chunk, quantum = 1 * GiB, 4 * MiB, 0.005
    sim = Simulation(FairQueue({"requests": 1000.0, BYTES: capacity}, quantum=quantum))
    for _ in range(1024):  # the big GET, as it streams
        sim.submit("scan", BYTES, float(chunk))
    sim.run(until=1.0)  # a quarter of it gone
    arrival = sim.now
    debt = max(0.0, -sim.queue._lanes[BYTES].bucket.level)  # what the link still carries now
    assert sim.submit("small", "requests", 1.0) is None  # admitted at once: a separate resource
    item = sim.submit("small", BYTES, float(4 * KiB))
    assert item is not None
    sim.run(until=2.0)
    delay = sim.granted_at[item] - arrival
    assert delay <= (debt + quantum * capacity + chunk) / capacity
    assert delay < 0.02  # against ~3 s behind the rest of the GET in FIFO order


def test_past_max_queued_requests_are_refused_and_bytes_never() -> None:
    queue = FairQueue({"requests": 1.0, BYTES: 1.0}, burst=0.0, max_queued=3)
    assert queue.submit("a", "requests", 1.0, 0.0).granted  # the bucket goes into debt
    assert [queue.submit("a", "requests", 1.0, 0.0).item for _ in range(3)] == [0, 1, 2]
    assert queue.submit("a", "requests", 1.0, 0.0).refused
    assert queue.submit("b", "requests", 1.0, 0.0).item is not None  # the bound is per tenant
    for _ in range(10):
        assert not queue.submit("a", BYTES, 4.0 * MiB, 0.0).refused
    window = queue.take_window(1.0)["a"]
    assert window.refused == 1
    assert window.wanted["requests"] == 5.0  # served 1 + queued 3 + refused 1
    assert queue.totals()["a"].refused == 1


def test_a_hard_limit_caps_a_tenant_even_on_an_idle_node() -> None:
    sim = Simulation(FairQueue({"requests": 2_000.0}))
    sim.queue.set_limits({"capped": {"requests": 100.0}}, 0.0)
    backlogged(sim, {"capped": lambda: 1.0, "free": lambda: 1.0}, "requests")
    sim.run(until=10.0)
    assert sim.served["capped", "requests"] <= 100.0 * 10.0 + 100.0 * 0.05 + 1
    assert sim.served["capped", "requests"] >= 100.0 * 10.0 * 0.99
    assert sim.rate("free", "requests", 10.0) == pytest.approx(1_900.0, rel=0.01)  # the rest is the other's


def test_a_hard_limit_on_an_unlimited_resource_still_holds() -> None:
    sim = Simulation(FairQueue({}))  # every resource unlimited
    sim.queue.set_limits({"capped": {"lake_bytes": 1 * MiB}}, 0.0)
    backlogged(sim, {"capped": lambda: float(64 * KiB)}, "lake_bytes")
    sim.run(until=10.0)
    assert sim.rate("capped", "lake_bytes", 10.0) == pytest.approx(1 * MiB, rel=0.02)
    assert sim.queue.submit("other", "lake_bytes", 1e12, sim.now).granted


def test_cancel_frees_the_queue() -> None:
    queue = FairQueue({"requests": 1.0}, burst=0.0, max_queued=2)
    assert queue.submit("a", "requests", 1.0, 0.0).granted
    first, second = (queue.submit("a", "requests", 1.0, 0.0).item for _ in range(2))
    assert first is not None and second is not None
    assert queue.submit("a", "requests", 1.0, 0.0).refused
    queue.cancel(first, 0.0)
    queue.cancel(first, 0.0)  # twice, or unknown: ignored
    queue.cancel(999, 0.0)
    assert queue.backlog() == {"a": {"requests": 1.0}}
    third = queue.submit("a", "requests", 1.0, 0.0).item
    assert queue.decide(1.0).granted == (second,)
    queue.cancel(third or 0, 1.0)
    assert queue.backlog() == {}
    assert queue.decide(2.0).wake_at is None
    assert queue.submit("a", "requests", 1.0, 2.0).granted  # nothing queued: the fast path again


def test_take_window_reports_served_and_wanted_since_the_last_call() -> None:
    queue = FairQueue({BYTES: 100.0}, burst=0.0)
    assert queue.submit("a", BYTES, 50.0, 0.0).granted
    assert queue.submit("a", BYTES, 30.0, 0.0).item is not None
    first = queue.take_window(0.0)["a"]
    assert (first.served[BYTES], first.wanted[BYTES]) == (50.0, 80.0)
    assert queue.decide(0.5).granted
    second = queue.take_window(2.0)["a"]
    assert (second.seconds, second.served[BYTES], second.wanted[BYTES]) == (2.0, 30.0, 30.0)


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError):
        FairQueue({BYTES: 0.0})
    queue = FairQueue({})
    with pytest.raises(ValueError):
        queue.set_weights({"a": 0.0})
    with pytest.raises(ValueError):
        queue.set_limits({"a": {"requests": -1.0}}, 0.0)


def test_a_capacity_change_keeps_the_bank_within_the_new_bound() -> None:
    queue = FairQueue({BYTES: 1000.0}, burst=1.0)
    queue.set_capacity({BYTES: 10.0}, 0.0)  # the bank shrinks from 1000 to 10
    assert queue.submit("a", BYTES, 10.5, 0.0).granted  # into debt: not the old bank of 1000
    assert queue.submit("a", BYTES, 1.0, 0.0).item is not None


items = st.lists(
    st.tuples(st.sampled_from("abc"), st.sampled_from(RESOURCES), st.floats(0.1, 50.0), st.floats(0.0, 0.5)),
    min_size=1,
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(
    work=items,
    weights=st.dictionaries(st.sampled_from("abc"), st.floats(0.1, 10.0)),
    capped=st.booleans(),
)
def test_never_more_than_capacity_or_limit_and_every_item_granted_in_the_end(
    work: list[tuple[str, str, float, float]], weights: dict[str, float], capped: bool
) -> None:
    capacity, burst = {"requests": 20.0, BYTES: 100.0, "lake_bytes": 50.0}, 0.05
    queue = FairQueue(capacity, burst=burst, max_queued=10_000)
    queue.set_weights(weights)
    if capped:
        queue.set_limits({"a": {r: 10.0 for r in RESOURCES}}, 0.0)
    now, queued, served, biggest = 0.0, set(), dict.fromkeys(RESOURCES, 0.0), dict.fromkeys(RESOURCES, 0.0)
    amounts: dict[int, tuple[str, str, float]] = {}
    wake: float | None = None

    capped_served = dict.fromkeys(RESOURCES, 0.0)

    def check(at: float) -> None:
        for r in RESOURCES:
            assert served[r] <= capacity[r] * (at + burst) + biggest[r] + 1e-6
            if capped:  # and tenant a within its own limit of 10/s
                assert capped_served[r] <= 10.0 * (at + burst) + biggest[r] + 1e-6

    def count(tenant: str, resource: str, amount: float) -> None:
        served[resource] += amount
        if tenant == "a":
            capped_served[resource] += amount

    def decide(at: float) -> float | None:
        decision = queue.decide(at)
        for item in decision.granted:
            queued.remove(item)
            count(*amounts[item])
        check(at)
        return decision.wake_at

    for tenant, resource, amount, gap in work:
        while wake is not None and wake <= now + gap:
            wake, now = decide(wake), wake
        now += gap
        biggest[resource] = max(biggest[resource], amount)
        sent = queue.submit(tenant, resource, amount, now)
        if sent.granted:
            count(tenant, resource, amount)
        else:
            assert sent.item is not None
            queued.add(sent.item)
            amounts[sent.item] = (tenant, resource, amount)
        wake = decide(now)
    for _ in range(100_000):
        if wake is None:
            break
        assert wake >= now
        now = wake
        wake = decide(now)
    assert not queued and queue.backlog() == {}
