"""The shared retry policy: attempts, the backoff schedule with seeded jitter, Retry-After, retryable statuses."""

from __future__ import annotations

import random

import pytest

from worldeval.retry import RetryPolicy, retryable_status


def test_attempts_and_more():
    assert RetryPolicy(0, 1.0, 60.0).attempts == 1  # a request always gets one attempt
    p = RetryPolicy(3, 1.0, 60.0)
    assert [p.more(k) for k in (1, 2, 3)] == [True, True, False]


def test_schedule_doubles_with_the_seeded_jitter():
    p, rng = RetryPolicy(5, 0.5, 60.0, seed=7), random.Random(7)
    assert [p.delay(k) for k in (1, 2, 3)] == [0.5 * 2 ** (k - 1) * rng.uniform(0.5, 1.5) for k in (1, 2, 3)]
    # the same settings wait the same; no seed behaves as seed 0
    assert [RetryPolicy(5, 0.5, 60.0, seed=None).delay(k) for k in (1, 2)] == \
           [RetryPolicy(5, 0.5, 60.0, seed=0).delay(k) for k in (1, 2)]


def test_cap_and_retry_after():
    capped, loose = RetryPolicy(9, 10.0, 8.0), RetryPolicy(9, 10.0, 8.0, cap_jitter=False)
    assert all(capped.delay(k) <= 8.0 for k in range(1, 6))
    assert max(loose.delay(k) for k in range(1, 20)) > 8.0  # only the base is capped: jitter goes above
    assert all(4.0 <= loose.delay(k) < 12.0 for k in range(1, 6))
    p = RetryPolicy(3, 0.01, 5.0)
    assert p.delay(1, retry_after=2.0) == pytest.approx(2.0)  # the server's wait wins over a shorter backoff
    assert p.delay(1, retry_after=120.0) == 5.0  # but never past the cap
    assert loose.delay(1, retry_after=120.0) >= 8.0


@pytest.mark.parametrize("status,retry", [(500, True), (503, True), (429, True), (408, True), (409, True),
                                          (425, True), (400, False), (401, False), (404, False), (422, False)])
def test_retryable_status(status, retry):
    assert retryable_status(status) is retry
