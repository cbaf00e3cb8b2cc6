"""Weight allocation (Pisces' WA) and the division of cluster-wide budgets among nodes.

Each node serves its tenants in weighted max-min order with *local* weights (fair queuing, scope
item 1). A tenant's global weight says what share of the whole cluster it should get; where its
demand lands decides which local weights would give it that. ``allocate`` moves local weights
between nodes by Pisces' reciprocal swap: tenant ``t``, under its fair share, takes weight from
tenant ``u`` on a node ``A`` where ``t`` wants more than it is served, and gives ``u`` the same
amount back on a node ``B``. Every swap keeps each node's weight sum and each tenant's sum over
nodes, so a round can never give a tenant more weight than it owns, only put it where it serves.

The driver (one leader every few seconds, scope item 2) feeds ``allocate`` what each node reports,
applies the weights it returns, and calls it again on the next round: it converges over rounds,
moving each weight a bounded step per call. ``service`` is the model of one node it plans with,
``min_max_ratio`` the figure it is judged by (Pisces' MMR), and ``split`` divides a cluster-wide
budget (the lake bandwidth, a tenant's hard limit) among nodes, or a node's among its workers.

Units: ``demand`` and ``capacity`` are in one unit per resource (bytes/s, requests/s, or a
dominant share: the fraction of that node's capacity wanted, with capacity 1.0); only ratios of
weights matter.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

Weights = Mapping[str, Mapping[str, float]]  # node -> tenant -> local weight

# Below this a difference is rounding, not a reason to move weight.
EPSILON = 1e-9
# A swap is tried at its largest size and at these fractions of it; the best one is kept.
SWAP_FRACTIONS = (1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125)
# Pairs tried per swap: the most under-served tenants against the most over-served ones.
CANDIDATES = 4
# Swaps per call at most (tenants x nodes below this): bounds a call's time on large clusters.
MAX_SWAPS = 64
# The share of the measured error ``allocate`` corrects the model by, per call.
CORRECTION = 0.5


def service(capacity: float, demand: Mapping[str, float], weights: Mapping[str, float]) -> dict[str, float]:
    """What each tenant in ``demand`` is served by one node of ``capacity``: weighted max-min
    (water filling), work-conserving. Every tenant with demand needs a positive weight."""
    if capacity < 0:
        raise ValueError("capacity must be >= 0")
    served = {tenant: 0.0 for tenant in demand}
    wanting = [tenant for tenant, wanted in demand.items() if wanted > 0]
    for tenant in wanting:
        if not weights.get(tenant, 0.0) > 0:
            raise ValueError(f"tenant {tenant!r} has demand but no positive weight")
    # least demand per unit of weight first: once one is not sated, no later one is
    wanting.sort(key=lambda tenant: (demand[tenant] / weights[tenant], tenant))
    left, weight_left = float(capacity), sum(weights[tenant] for tenant in wanting)
    for tenant in wanting:
        served[tenant] = min(float(demand[tenant]), left * weights[tenant] / weight_left)
        left = max(0.0, left - served[tenant])
        weight_left -= weights[tenant]
    return served


def min_max_ratio(
    served: Mapping[str, float], weights: Mapping[str, float], demand: Mapping[str, float] | None = None
) -> float:
    """Pisces' min-max ratio: the least ``served/weight`` over the greatest (1.0 is perfectly fair).
    With ``demand``, tenants served all they asked for are left out: getting less than the
    others because one wants less is not unfair. 1.0 when fewer than two tenants remain."""
    normalised = [
        served[tenant] / weights[tenant]
        for tenant in served
        if demand is None or served[tenant] < demand.get(tenant, 0.0) * (1 - EPSILON)
    ]
    if len(normalised) < 2 or max(normalised) <= 0:
        return 1.0
    return min(normalised) / max(normalised)


def split(total: float, demand: Mapping[str, float], *, floor: float = 0.05) -> dict[str, float]:
    """``total`` divided among the keys of ``demand`` (nodes, or a node's workers): each at least
    ``floor * total / len(demand)`` (so a node whose demand appears has room to show it), the rest
    max-min fair by demand, and what nobody wants shared equally; the parts sum to ``total``."""
    if not 0 <= floor <= 1:
        raise ValueError("floor must be within [0, 1]")
    if total < 0:
        raise ValueError("total must be >= 0")
    if not demand:
        return {}
    base = floor * total / len(demand)
    wanted = {key: max(0.0, float(value) - base) for key, value in demand.items()}
    rest = max(0.0, total - base * len(demand))  # floor = 1 leaves -1e-8 of rounding, not a debt
    above = service(rest, wanted, {key: 1.0 for key in demand})
    unwanted = max(0.0, rest - sum(above.values())) / len(demand)
    return {key: base + above[key] + unwanted for key in demand}


def allocate(
    global_weights: Mapping[str, float],
    demand: Mapping[str, Mapping[str, float]],
    current: Weights,
    capacity: Mapping[str, float],
    *,
    step: float = 0.25,
    floor: float = 0.01,
    max_swaps: int = MAX_SWAPS,
    served: Mapping[str, float] | None = None,
) -> dict[str, dict[str, float]]:
    """New local weights (node -> tenant -> weight) for every node in ``demand``, one bounded
    round of reciprocal swaps toward every tenant being served its weighted max-min share of the
    reporting nodes' total capacity, as if the cluster were one node.

    - ``demand``: node -> tenant -> demand, in the units of ``capacity[node]``; a node absent from
      it (it missed the round) is neither planned with nor returned: it keeps its last weights.
    - ``current``: node -> tenant -> local weight now; a missing entry starts at the tenant's
      global weight. Tenants not in ``global_weights`` are dropped; demand from one is an error.
    - Every returned node has every tenant of ``global_weights``. Each swap keeps node sums and
      tenant sums (over the returned nodes); no weight is taken below ``floor`` times its tenant's
      global weight; no weight moves more than ``step`` times its tenant's global weight per call;
      a swap is made only if it brings the tenants' served/share ratios closer to 1 (stable: a
      fair allocation comes back unchanged).
    - Home first: the weights move back toward the global weights (a convex step, which keeps
      node sums and tenant sums wherever they held) by the longest of 1, 1/2, 1/4, 1/8 of the
      way that leaves the model's spread no worse (else not at all). Weight
      that a tenant's demand no longer needs so goes home instead of staying where an earlier
      round put it: when every tenant is backlogged everywhere, swaps that change nobody's total
      are neither better nor worse to the model, and would otherwise stay, skewing real service.
    - ``served``: tenant -> what it was really served over the cluster in the last window, in the
      units of ``capacity``. The model (``service``: every tenant takes its weighted share of
      whatever it asks) is then corrected by what it got wrong at the current weights, each
      tenant's real total less the model's, and every swap is judged by the corrected figures:
      a client with few connections is never quite backlogged, so the model overrates it, and
      uncorrected swaps settle where the model, not the tenants, is fair (measured: an MMR of
      0.88 that the model took for 0.98).
    - At most ``max_swaps`` swaps (each tries every candidate pair: some 20 ms for 3 nodes and 8
      tenants in CPython; a driver calling every few seconds passes a few and converges over calls).
    """
    for name, weight in global_weights.items():
        if not weight > 0:
            raise ValueError(f"tenant {name!r} needs a positive global weight")
    plan = _Plan(global_weights, demand, current, capacity, step, floor)
    if served is not None:
        model = plan.totals()
        # half the error: the measure lags the weights by up to a round, so the whole of it overshoots
        plan.offset = {t: CORRECTION * (float(served.get(t, 0.0)) - model.get(t, 0.0)) for t in plan.target}
    spread = _spread(plan.ratios(plan.totals()))
    # the longest step home that serves no one worse, within the step bound (it spends the budget)
    room = _room_home(plan.weights, global_weights, step) if _sums_hold(plan.weights, global_weights) else 0.0
    for fraction in (1.0, 0.5, 0.25, 0.125):
        fraction = min(fraction, room)
        if fraction <= 0:
            break
        home = _Plan(global_weights, demand, _towards(plan.weights, global_weights, fraction), capacity, step, floor)
        home.offset = plan.offset
        if _spread(home.ratios(home.totals())) <= spread + EPSILON * max(1.0, spread):
            for (node, tenant), budget in home.budget.items():
                home.budget[node, tenant] = budget - abs(home.weights[node][tenant] - plan.weights[node][tenant])
            plan = home
            break
    for _ in range(min(max_swaps, len(global_weights) * len(demand))):
        if not plan.swap_once():
            break
    return plan.weights


@dataclass(frozen=True, slots=True)
class _Swap:
    """``taker`` gets ``amount`` of ``giver``'s weight on ``gain_node`` and gives it back on
    ``give_node``."""

    taker: str
    giver: str
    gain_node: str
    give_node: str
    amount: float


class _Plan:
    """One call's working state: the weights so far, what they serve, how much each may still move."""

    def __init__(
        self,
        global_weights: Mapping[str, float],
        demand: Mapping[str, Mapping[str, float]],
        current: Weights,
        capacity: Mapping[str, float],
        step: float,
        floor: float,
    ) -> None:
        self.global_weights = global_weights
        self.demand = {node: _known(wants, global_weights, node) for node, wants in demand.items()}
        self.capacity = {node: float(capacity[node]) for node in demand}
        self.weights = {
            node: {tenant: float(current.get(node, {}).get(tenant, weight)) for tenant, weight in global_weights.items()}
            for node in demand
        }
        for node, weights in self.weights.items():
            if any(not weight > 0 for weight in weights.values()):
                raise ValueError(f"node {node!r} has a local weight <= 0")
        self.floor = {tenant: floor * weight for tenant, weight in global_weights.items()}
        self.budget = {(node, tenant): step * global_weights[tenant] for node in demand for tenant in global_weights}
        totals = {tenant: sum(wants.get(tenant, 0.0) for wants in self.demand.values()) for tenant in global_weights}
        self.target = service(sum(self.capacity.values()), totals, global_weights)
        self.served = {node: self._serve(node, self.weights[node]) for node in demand}
        self.offset: dict[str, float] = {}  # measured less modelled service, per tenant

    def _serve(self, node: str, weights: Mapping[str, float]) -> dict[str, float]:
        return service(self.capacity[node], self.demand[node], weights)

    def ratios(self, totals: Mapping[str, float]) -> dict[str, float]:
        """Served (the model's, corrected by ``offset``) over fair share, per tenant with a share."""
        offset = self.offset
        return {tenant: max(0.0, totals[tenant] + offset.get(tenant, 0.0)) / share
                for tenant, share in self.target.items() if share > EPSILON}

    def totals(self) -> dict[str, float]:
        """What each tenant is served, summed over the nodes."""
        return {tenant: sum(by_tenant.get(tenant, 0.0) for by_tenant in self.served.values()) for tenant in self.target}

    def swap_once(self) -> bool:
        """Make the best swap there is; False when none helps."""
        totals = self.totals()
        ratios = self.ratios(totals)
        best, best_spread = None, _spread(ratios)
        for swap in self._candidates(ratios):
            spread = _spread(self.ratios(self._totals_after(swap, totals)))
            if spread < best_spread - EPSILON * max(1.0, best_spread):
                best, best_spread = swap, spread
        if best is None:
            return False
        self._apply(best)
        return True

    def _candidates(self, ratios: Mapping[str, float]) -> Iterable[_Swap]:
        ordered = sorted(ratios, key=lambda tenant: (ratios[tenant], tenant))
        for taker in ordered[:CANDIDATES]:
            for giver in reversed(ordered[-CANDIDATES:]):
                if ratios[giver] <= ratios[taker] + EPSILON:
                    continue
                for gain_node in self.weights:
                    if self.demand[gain_node].get(taker, 0.0) <= self.served[gain_node].get(taker, 0.0) * (1 + EPSILON):
                        continue  # the taker has all it wants there: more weight would not serve it
                    for give_node in self.weights:
                        if give_node != gain_node:
                            yield from self._sizes(taker, giver, gain_node, give_node)

    def _sizes(self, taker: str, giver: str, gain_node: str, give_node: str) -> Iterable[_Swap]:
        largest = min(
            self.weights[gain_node][giver] - self.floor[giver],
            self.weights[give_node][taker] - self.floor[taker],
            self.budget[gain_node, taker],
            self.budget[gain_node, giver],
            self.budget[give_node, taker],
            self.budget[give_node, giver],
        )
        if largest > EPSILON * min(self.global_weights[taker], self.global_weights[giver]):
            for fraction in SWAP_FRACTIONS:
                yield _Swap(taker, giver, gain_node, give_node, largest * fraction)

    def _moved(self, swap: _Swap) -> dict[str, dict[str, float]]:
        """The weights of the swap's two nodes after it."""
        gain = dict(self.weights[swap.gain_node])
        give = dict(self.weights[swap.give_node])
        gain[swap.taker] += swap.amount
        gain[swap.giver] -= swap.amount
        give[swap.taker] -= swap.amount
        give[swap.giver] += swap.amount
        return {swap.gain_node: gain, swap.give_node: give}

    def _totals_after(self, swap: _Swap, totals: Mapping[str, float]) -> dict[str, float]:
        after = dict(totals)
        for node, weights in self._moved(swap).items():
            for tenant, served in self._serve(node, weights).items():
                after[tenant] += served - self.served[node][tenant]
        return after

    def _apply(self, swap: _Swap) -> None:
        for node, weights in self._moved(swap).items():
            self.weights[node] = weights
            self.served[node] = self._serve(node, weights)
            for tenant in (swap.taker, swap.giver):
                self.budget[node, tenant] -= swap.amount


def _sums_hold(weights: Weights, global_weights: Mapping[str, float]) -> bool:
    """Whether ``weights`` have the node sums and tenant sums the global weights give (a step
    home keeps them then; from anything else it would not)."""
    total = sum(global_weights.values())
    if any(abs(sum(row.values()) - total) > 1e-6 * max(1.0, total) for row in weights.values()):
        return False
    return all(abs(sum(row.get(t, g) for row in weights.values()) - g * len(weights)) <= 1e-6 * max(1.0, g)
               for t, g in global_weights.items())


def _room_home(weights: Weights, global_weights: Mapping[str, float], step: float) -> float:
    """The largest fraction of the way home no weight moves more than ``step`` of its global weight."""
    room = 1.0
    for row in weights.values():
        for tenant, weight in row.items():
            gap = abs(weight - global_weights.get(tenant, weight))
            if gap > EPSILON:
                room = min(room, step * global_weights[tenant] / gap)
    return room


def _towards(weights: Weights, global_weights: Mapping[str, float], fraction: float) -> dict[str, dict[str, float]]:
    return {node: {t: (1 - fraction) * w + fraction * global_weights.get(t, w) for t, w in row.items()}
            for node, row in weights.items()}


def _known(wants: Mapping[str, float], global_weights: Mapping[str, float], node: str) -> dict[str, float]:
    strangers = set(wants) - set(global_weights)
    if strangers:
        raise ValueError(f"node {node!r} reports demand from tenants without a global weight: {sorted(strangers)}")
    return {tenant: float(wanted) for tenant, wanted in wants.items()}


def _spread(ratios: Mapping[str, float]) -> float:
    """How far the tenants are from their fair shares, each counted alike whatever its weight."""
    return sum((ratio - 1.0) ** 2 for ratio in ratios.values())


@dataclass(frozen=True, slots=True)
class Division:
    """One part's (a worker's) capacity and the local weights that serve each tenant its target."""

    capacity: float
    weights: dict[str, float]


def divide(
    capacity: float, demand: Mapping[str, Mapping[str, float]], weights: Mapping[str, float], *,
    floor: float = 0.05, idle_weight: float = 1e-3,
) -> dict[str, Division]:
    """A node's ``capacity`` divided among its parts (worker processes), which, unlike nodes,
    can trade capacity freely: ``demand`` is part -> tenant -> demand (units of capacity).

    Each tenant's target is its weighted max-min share of the whole node (``service`` over its
    total demand), spread over the parts in proportion to its demand there; a part's capacity is
    the sum of its tenants' targets there, and its local weights are those targets, so a part's
    own weighted max-min gives each tenant its target (it never wants less there). So where a
    tenant's connections landed does not change what it gets from the node. Every part keeps at
    least ``floor * capacity / parts`` (room to show new demand); the rest goes in proportion to
    the targets (all of it: work conserving), so the capacities sum to ``capacity``. A tenant
    with no demand in a part weighs ``idle_weight`` times its weight there (served as it comes).
    Weights are in units of capacity: only their ratios within a part matter."""
    if not demand:
        return {}
    totals: dict[str, float] = {}
    for wants in demand.values():
        for tenant, amount in wants.items():
            if amount > 0:
                totals[tenant] = totals.get(tenant, 0.0) + amount
    targets = service(capacity, totals, {t: weights.get(t, 1.0) for t in totals})
    base = floor * capacity / len(demand)
    given = {part: {t: targets[t] * amount / totals[t] for t, amount in wants.items() if amount > 0}
             for part, wants in demand.items()}
    sums = {part: sum(rows.values()) for part, rows in given.items()}
    total = sum(sums.values())
    divisions = {}
    for part, rows in given.items():
        share = sums[part] / total if total > 0 else 1.0 / len(demand)
        part_weights = {t: rows.get(t) or idle_weight * weights.get(t, 1.0) for t in {*weights, *rows}}
        divisions[part] = Division(base + (capacity - base * len(demand)) * share, part_weights)
    return divisions
