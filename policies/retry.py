"""Retries of lake requests: whether to send again, and after how long.

A request is retried when it may be repeated (an idempotent method, or one that never left:
a connection that could not be made) and the lake failed it (an unavailable status, or a
transport error), up to ``retries`` times. The wait doubles per attempt from ``base_delay``,
jittered by 0.5-1.5x so that clients failed together do not retry together, except that a
request that never left goes to another endpoint of the lake (when it has several) at once: the
failure was the endpoint's. The caller draws the random number and sleeps; this decides.
"""

from __future__ import annotations

from dataclasses import dataclass

# Statuses of a failing lake: retried when the request may be repeated.
UNAVAILABLE = frozenset({500, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class Backoff:
    """How a client retries: at most ``retries`` more attempts, the first after ~``base_delay`` s."""

    retries: int
    base_delay: float


@dataclass(frozen=True, slots=True)
class Attempt:
    """One failed or answered attempt: ``number`` from 0; ``status`` the lake's answer, or None
    for a transport error; ``idempotent``: the request may be repeated; ``unsent``: (a transport
    error) no byte of the request left, so repeating it is safe whatever its method;
    ``elsewhere``: the next attempt would go to another endpoint of the lake."""

    number: int
    status: int | None
    idempotent: bool
    unsent: bool = False
    elsewhere: bool = False


def delay(backoff: Backoff, attempt: Attempt, draw: float) -> float | None:
    """Seconds to wait before the next attempt, or None to give up (return the answer or raise).
    ``draw`` is a uniform random number in [0, 1)."""
    if attempt.number >= backoff.retries:
        return None
    if attempt.status is not None:
        if not (attempt.idempotent and attempt.status in UNAVAILABLE):
            return None
    elif not (attempt.idempotent or attempt.unsent):
        return None
    elif attempt.unsent and attempt.elsewhere:
        return 0.0
    return backoff.base_delay * 2.0**attempt.number * (0.5 + draw)
