"""The calling process's bookkeeping, shared by the local and the Ray executor.

`Deliver` is the one place a finished item is counted and handed to `on_result`; `Limits`
holds the deadlines (`item_timeout`, `stall_timeout`) both executors wait by.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from worldeval.executor.errors import ItemError, WorkerCrashed


@dataclass
class RunSummary:
    total: int = 0
    done: int = 0
    failed: int = 0
    crashed: int = 0  # items lost to a dead worker (after retries); also counted in failed
    pool_restarts: int = 0
    wall_s: float = 0.0
    item_seconds: float = 0.0  # sum of per-item time inside workers
    executor: str = "local"
    workers: int = 1
    failures: list[tuple[int, ItemError]] = field(default_factory=list)
    results: list[Any] | None = None  # in input order, only when no on_result was given

    def as_dict(self) -> dict:
        return {
            "total": self.total,
            "done": self.done,
            "failed": self.failed,
            "crashed": self.crashed,
            "pool_restarts": self.pool_restarts,
            "wall_s": round(self.wall_s, 4),
            "item_seconds": round(self.item_seconds, 4),
            "executor": self.executor,
            "workers": self.workers,
        }


class Progress:
    """`progress=True` (a rich bar on stderr) or a callable(n_finished, n_total); None shows nothing."""

    def __init__(self, progress, total: int):
        self.fn = None
        self.bar = None
        if progress is True:
            try:
                from rich.progress import Progress as Bar

                self.bar = Bar(transient=False)
                self.bar.start()
                self.task = self.bar.add_task("items", total=total)
            except Exception:
                self.bar = None
        elif callable(progress):
            self.fn = progress
        self.total = total
        self.n = 0

    def step(self) -> None:
        self.n += 1
        if self.bar is not None:
            self.bar.update(self.task, completed=self.n)
        elif self.fn is not None:
            self.fn(self.n, self.total)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


@dataclass
class Limits:
    crash_retries: int = 1
    item_timeout: float | None = None
    stall_timeout: float | None = None

    def wait_s(self, now: float, started: Iterable[float], last_progress: float) -> float | None:
        """How long the driver may block before a deadline needs checking (None: no deadline)."""
        deadlines = []
        if self.item_timeout:
            deadlines += [t + self.item_timeout for t in started]
        if self.stall_timeout:
            deadlines.append(last_progress + self.stall_timeout)
        return max(0.0, min(deadlines) - now) + 0.01 if deadlines else None

    def stalled(self, now: float, last_progress: float) -> bool:
        return bool(self.stall_timeout) and now - last_progress >= self.stall_timeout


def env_seconds(value: float | None, var: str) -> float | None:
    """`value` when given (<= 0: no limit), else the environment variable `var`, else None."""
    if value is not None:
        return float(value) if value > 0 else None
    raw = os.environ.get(var)
    if not raw:
        return None
    try:
        v = float(raw)
    except ValueError as exc:
        raise ValueError(f"{var} must be a number of seconds, got {raw!r}") from exc
    return v if v > 0 else None


class Deliver:
    """Hands each finished item to `on_result` (or keeps it, in input order) and counts it in the summary."""

    def __init__(self, items: list, on_result: Callable[[Any, Any], None] | None, summary: RunSummary,
                 prog: Progress):
        self.items, self.on_result, self.summary, self.prog = items, on_result, summary, prog
        self.collected: list[Any] | None = [None] * len(items) if on_result is None else None

    def __call__(self, idx: int, status: str, payload: Any, seconds: float = 0.0) -> None:
        summary = self.summary
        summary.item_seconds += seconds
        if status == "ok":
            summary.done += 1
        else:
            summary.failed += 1
            if isinstance(payload, WorkerCrashed):
                summary.crashed += 1
            summary.failures.append((idx, payload))
        if self.on_result is not None:
            self.on_result(self.items[idx], payload)
        else:
            self.collected[idx] = payload
        self.prog.step()
