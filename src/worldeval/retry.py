"""The retry policy shared by the endpoint clients (the judge and the generators).

A failed request is worth another attempt when the endpoint may answer
differently a moment later: a timeout, a dropped connection, HTTP 5xx or one
of the transient 4xx statuses in `RETRYABLE_STATUS`. The wait before attempt
k + 1 is `backoff_base_s * 2^(k-1)`, capped at `backoff_max_s`, times a jitter
in [0.5, 1.5) drawn from a generator seeded by the client's seed, so two runs
with the same settings wait the same. A `Retry-After` from the server raises
the wait to what it asks, but never past `backoff_max_s`.

The policy decides how long to wait and whether to try again; each client
keeps its own loop, because what one attempt costs (a ledger entry, a
concurrency slot, an option refusal that is not the endpoint's fault) differs.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass

# Request timeout, conflict, too early, rate limited: statuses that say "not now" rather than "never".
RETRYABLE_STATUS = frozenset({408, 409, 425, 429})
JITTER = (0.5, 1.5)


def retryable_status(status: int) -> bool:
    """Whether an HTTP error status is worth another attempt (5xx and the transient 4xx)."""
    return status >= 500 or status in RETRYABLE_STATUS


@dataclass
class RetryPolicy:
    """How many attempts, and how long to wait between them. Thread-safe: clients share one per endpoint.

    `cap_jitter`: True caps the jittered wait at `backoff_max_s`; False caps only the exponential
    base, so the jitter may stretch a capped wait by up to half. A `Retry-After` is capped either way.
    """

    max_attempts: int
    backoff_base_s: float
    backoff_max_s: float
    seed: int | None = 0
    cap_jitter: bool = True

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed if self.seed is not None else 0)
        self._lock = threading.Lock()

    @property
    def attempts(self) -> int:
        """The number of attempts a request gets (at least one)."""
        return max(1, int(self.max_attempts))

    def more(self, attempt: int) -> bool:
        """Whether another attempt follows attempt number `attempt` (counting from 1)."""
        return attempt < self.attempts

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after failed attempt `attempt` (from 1); draws the next jitter."""
        base = min(self.backoff_max_s, self.backoff_base_s * 2 ** (attempt - 1))
        with self._lock:
            jitter = self._rng.uniform(*JITTER)
        wait = base * jitter
        if self.cap_jitter:
            wait = min(wait, self.backoff_max_s)
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.backoff_max_s))
        return wait
