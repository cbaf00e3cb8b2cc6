"""Replica choice at run time (issue 15): one process's choice among named candidates, the
endpoints of a lake or the peer owners of a block, by ``policies.selection``'s policy
(LAKEGATE_REPLICA_POLICY: ``micromon``, ``round_robin``, ``least_outstanding``, ``latency``).

``Replicas`` keeps what the policy is fed from real requests: each candidate's requests in
flight from this process (``begin``/``done``), the EWMA of its response times, its errors, when
it was last tried, the policy's own state (round robin's turn, C3's rate control), and, from a
callback, the candidate's anomaly score (a peer's heartbeat reports, ``policies.anomaly``). It
draws the policy's random numbers and remembers the last choices, for the share of requests
each candidate got (``report``: what ``/_lakegate/admin/replicas`` shows).

State is per worker process, as C3's is per client: each worker's requests in flight and the
responses it saw are its own to react to (a slow candidate is left within the responses of one
worker, before any heartbeat says so). What is node-level comes from outside: the peers'
anomaly reports reach every worker by heartbeat.

``LakeChooser`` adapts it to ``cachetier.lake.s3.endpoints.EndpointChooser``.
"""

from __future__ import annotations

import collections
import math
import random
import threading
import time
from collections.abc import Callable, Sequence

from policies import selection

_ALPHA = 0.2  # EWMA weight of a response time, at least
_TAU = 1.0  # seconds: a response after a silence this long weighs 1 - 1/e (peak EWMA's decay in time)
_RECENT = 2048  # choices remembered for the shares
_SHARE_WINDOW = 10.0  # seconds of choices a share is over


class _Target:
    __slots__ = ("outstanding", "latency_s", "requests", "errors", "last_tried", "last_answer")

    def __init__(self) -> None:
        self.outstanding = 0
        self.latency_s: float | None = None
        self.last_answer = -math.inf
        self.requests = 0
        self.errors = 0
        self.last_tried = -math.inf


class Replicas:
    """See the module docstring. ``anomaly(id)``: the candidate's anomaly score (0: none)."""

    def __init__(self, policy: str, *, anomaly: Callable[[str], float] | None = None,
                 weight: Callable[[str], float | None] | None = None,
                 clock: Callable[[], float] = time.monotonic, seed: int | None = None,
                 config: selection.ChoiceConfig = selection.ChoiceConfig()) -> None:
        selection.score(policy, selection.Candidate(""), config)  # an unknown policy fails here
        self.policy = policy
        self.anomaly = anomaly or (lambda _: 0.0)
        self.weight = weight or (lambda _: None)  # the request's tenant's local weight on a candidate (RS)
        self.clock = clock
        self.config = config
        self.state = selection.EMPTY_CHOICE
        self._random = random.Random(seed)
        self._targets: dict[str, _Target] = {}
        self._recent: collections.deque[tuple[float, str]] = collections.deque(maxlen=_RECENT)
        self._lock = threading.Lock()

    def _target(self, name: str) -> _Target:
        target = self._targets.get(name)
        if target is None:
            target = self._targets[name] = _Target()
        return target

    def _candidate(self, name: str) -> selection.Candidate:
        t = self._target(name)
        return selection.Candidate(name, outstanding=t.outstanding, latency_s=t.latency_s, anomaly=self.anomaly(name),
                                   weight=self.weight(name), last_tried=t.last_tried)

    def order(self, names: Sequence[str]) -> list[str]:
        """``names`` in the order to try them; the first is counted as chosen."""
        now = self.clock()
        if len(names) < 2:  # no choice: counted as chosen all the same (its share is 1)
            if names:
                with self._lock:
                    self._recent.append((now, names[0]))
            return list(names)
        with self._lock:
            candidates = [self._candidate(name) for name in names]
            ordered, self.state = selection.choose(self.policy, candidates, self.state, now, self._random.random(),
                                                   self.config)
            self._recent.append((now, ordered[0]))
        return list(ordered)

    def begin(self, name: str) -> float:
        """A request to ``name`` leaves now; returns its start (for ``done``)."""
        now = self.clock()
        with self._lock:
            target = self._target(name)
            target.outstanding += 1
            target.last_tried = now
        return now

    def done(self, name: str, ok: bool, latency_s: float, *, begun: bool = True) -> None:
        """A request to ``name`` ended (``ok``: the candidate did not fail it) after ``latency_s``
        (to its answer's head). ``begun``: it was counted by ``begin``."""
        now = self.clock()
        with self._lock:
            target = self._target(name)
            if begun:
                target.outstanding = max(0, target.outstanding - 1)
            target.requests += 1
            target.errors += not ok
            if math.isfinite(latency_s) and latency_s >= 0:
                # a time-decayed EWMA: what a candidate did long ago weighs less, so the first
                # probe of one that was left when slow shows most of its recovery
                alpha = max(_ALPHA, 1.0 - math.exp(-(now - target.last_answer) / _TAU))
                previous = target.latency_s
                target.latency_s = latency_s if previous is None else previous + alpha * (latency_s - previous)
                target.last_answer = now
                self.state = selection.record_response(self.state, name, now, latency_s, self.config)

    def report(self) -> dict[str, dict[str, object]]:
        """Per candidate: its ``score`` under the policy (lower is better), its ``share`` of the
        choices of the last seconds, and the signals behind them."""
        now = self.clock()
        with self._lock:
            recent = [name for t, name in self._recent if now - t <= _SHARE_WINDOW]
            counts = collections.Counter(recent)
            report: dict[str, dict[str, object]] = {}
            for name, target in sorted(self._targets.items()):
                candidate = self._candidate(name)
                report[name] = {
                    "score": round(selection.score(self.policy, candidate, self.config), 6),
                    "share": round(counts[name] / len(recent), 4) if recent else 0.0,
                    "outstanding": target.outstanding,
                    "latency_s": None if target.latency_s is None else round(target.latency_s, 6),
                    "requests": target.requests,
                    "errors": target.errors,
                    "anomaly": round(candidate.anomaly, 4),
                    **_rate_report(self.state.rates.get(name), now, self.config),
                }
            return report


def _rate_report(rate: selection.RateState | None, now: float, config: selection.ChoiceConfig
                 ) -> dict[str, object]:
    """C3's rate control of a candidate, for operators: its send limit per rate window now
    (None: unlimited, its latency never rose), and how long ago it last backed off."""
    if rate is None:
        return {"send_limit": None, "backed_off_s_ago": None}
    limit = selection.send_limit(rate, now, config)
    return {
        "send_limit": None if math.isinf(limit) else round(limit, 2),
        "backed_off_s_ago": None if rate.backed_off_at is None else round(now - rate.backed_off_at, 3),
    }


class LakeChooser:
    """``Replicas`` as a lake's ``EndpointChooser``: each request's order, and each attempt's
    outcome (a retry's attempt on a fallback was not begun: its outstanding is not counted)."""

    def __init__(self, replicas: Replicas) -> None:
        self.replicas = replicas
        self._begun: dict[str, int] = {}
        self._lock = threading.Lock()

    def order(self, endpoints: Sequence[str]) -> Sequence[str]:
        ordered = self.replicas.order(endpoints)
        self.replicas.begin(ordered[0])
        with self._lock:
            self._begun[ordered[0]] = self._begun.get(ordered[0], 0) + 1
        return ordered

    def done(self, endpoint: str, ok: bool, latency_s: float) -> None:
        with self._lock:
            begun = self._begun.get(endpoint, 0) > 0
            if begun:
                self._begun[endpoint] -= 1
        self.replicas.done(endpoint, ok, latency_s, begun=begun)
