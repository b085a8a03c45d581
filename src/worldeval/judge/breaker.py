"""Stop a run whose judge fails every item the same way from the start.

A judge that ignores the answer format, refuses, or answers 4xx to every request
costs the full retry schedule per item and then leaves nothing but failures;
on a real dataset that is hours for no scores. The breaker watches the first
`n` items that reach the judge: if they all fail with the same kind of
failure it trips (the caller stops and says why); one success disarms it for
the rest of the run, since later failures are then the items', not the judge's.
Transient failures (timeouts, 5xx, 429 after all retries) are not a "kind":
they say nothing about the judge following the contract, so they disarm it too.
"""

from __future__ import annotations

import re
import threading

from worldeval.judge.transport import JudgeUnavailable
from worldeval.retry import RETRYABLE_STATUS

_HTTP = re.compile(r"\bHTTP (4\d\d)\b")
_REFUSAL = re.compile(r"^\W*(i'?m sorry|i am sorry|i can(?:'|no)t|i am unable|i'm unable|sorry,|as an ai)", re.I)


def failure_kind(error: str | None, raw: str | None = None) -> str | None:
    """The breaker's name for how an item failed, or None for a failure that is not the judge's habit."""
    if not error:
        return None
    if "unparseable answer" in error or "invalid answer" in error:
        return "refused to answer" if raw and _REFUSAL.search(raw) else "unparseable answer (the reply holds no valid JSON score)"
    m = _HTTP.search(error)
    if m and int(m.group(1)) not in RETRYABLE_STATUS:
        return f"HTTP {m.group(1)}"
    return None


class CircuitBreaker:
    """Thread-safe: `observe(kind)` per finished judge item (None: it succeeded or failed transiently)."""

    def __init__(self, n: int):
        self.n = max(0, int(n))
        self._lock = threading.Lock()
        self._kinds: list[str] = []
        self._armed = self.n > 0
        self.tripped: str | None = None

    def observe(self, ok: bool, kind: str | None) -> str | None:
        """Returns the trip message once the first `n` observations failed the same way."""
        with self._lock:
            if not self._armed:
                return None
            if ok or kind is None or (self._kinds and kind != self._kinds[0]):
                self._armed = False
                return None
            self._kinds.append(kind)
            if len(self._kinds) >= self.n:
                self._armed = False
                self.tripped = (f"the first {self.n} judged items all failed the same way: {kind}; "
                                f"stopped so the rest is not asked in vain")
                return self.tripped
            return None


class CircuitOpen(JudgeUnavailable):
    """The breaker tripped: the judge is usable on the wire but not for judging (exit 3, resumable)."""
