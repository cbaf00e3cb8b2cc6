"""policies.retry: what is retried, how often, and how long each wait is (the caller draws the
random number)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from policies.retry import UNAVAILABLE, Attempt, Backoff, delay

BACKOFF = Backoff(retries=3, base_delay=0.1)


def test_a_failing_lake_is_retried_for_idempotent_requests_only() -> None:
    assert delay(BACKOFF, Attempt(0, 503, idempotent=True), 0.5) == 0.1
    assert delay(BACKOFF, Attempt(0, 503, idempotent=False), 0.5) is None
    assert delay(BACKOFF, Attempt(0, 404, idempotent=True), 0.5) is None  # an answer, not a failure
    assert delay(BACKOFF, Attempt(0, 200, idempotent=True), 0.5) is None


def test_a_transport_error_is_retried_when_idempotent_or_never_sent() -> None:
    assert delay(BACKOFF, Attempt(1, None, idempotent=True), 0.5) == 0.2
    assert delay(BACKOFF, Attempt(1, None, idempotent=False, unsent=True), 0.5) == 0.2
    assert delay(BACKOFF, Attempt(1, None, idempotent=False), 0.5) is None


def test_the_last_attempt_gives_up() -> None:
    assert delay(BACKOFF, Attempt(2, 503, idempotent=True), 0.0) is not None
    assert delay(BACKOFF, Attempt(3, 503, idempotent=True), 0.0) is None
    assert delay(Backoff(0, 0.1), Attempt(0, None, idempotent=True), 0.0) is None


@given(number=st.integers(0, 9), draw=st.floats(0, 1, exclude_max=True), base=st.floats(0, 5),
       status=st.sampled_from(sorted(UNAVAILABLE)))
def test_the_wait_doubles_per_attempt_within_its_jitter_bounds(number: int, draw: float, base: float, status: int) -> None:
    wait = delay(Backoff(10, base), Attempt(number, status, idempotent=True), draw)
    assert wait is not None
    assert 0.5 * base * 2**number <= wait <= 1.5 * base * 2**number


def test_a_request_that_never_left_moves_to_another_endpoint_at_once() -> None:
    assert delay(BACKOFF, Attempt(1, None, idempotent=False, unsent=True, elsewhere=True), 0.5) == 0.0
    assert delay(BACKOFF, Attempt(1, None, idempotent=True, unsent=True, elsewhere=False), 0.5) == 0.2
    # sent, or answered 5xx: the lake (one cluster behind every endpoint) may be what fails
    assert delay(BACKOFF, Attempt(1, None, idempotent=True, elsewhere=True), 0.5) == 0.2
    assert delay(BACKOFF, Attempt(1, 503, idempotent=True, elsewhere=True), 0.5) == 0.2
    assert delay(BACKOFF, Attempt(3, None, idempotent=True, unsent=True, elsewhere=True), 0.5) is None
