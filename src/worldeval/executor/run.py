"""`run_items`: the one entry point, choosing the executor and handing out the items."""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Iterable

from worldeval.executor.driver import Deliver, Limits, Progress, RunSummary, env_seconds
from worldeval.executor.local import LocalRun
from worldeval.executor.ray import run_ray
from worldeval.executor.worker import invoke

EXECUTORS = ("local", "ray")


def run_items(
    fn: Callable[[Any], Any],
    items: Iterable[Any],
    *,
    workers: int = 1,
    executor: str = "local",
    address: str | None = None,
    resources: dict | None = None,
    on_result: Callable[[Any, Any], None] | None = None,
    progress: Any = None,
    crash_retries: int = 1,
    threads_per_worker: int | None = None,
    start_method: str | None = None,
    item_timeout: float | None = None,
    stall_timeout: float | None = None,
) -> RunSummary:
    """Apply `fn` to every item; hand each result (or its exception) to `on_result` in this process.

    workers: number of worker processes / Ray actors (0: run in-process, local only).
    executor: "local" (process pool) or "ray".
    address: Ray cluster address ("auto", "HOST:PORT", "ray://HOST:PORT", "local"); None starts
        a local Ray instance unless one is already initialised or RAY_ADDRESS is set.
    resources: Ray resources per worker, e.g. {"num_gpus": 1} (keys num_cpus, num_gpus, memory,
        anything else is a custom resource).
    on_result: called as on_result(item, result) or on_result(item, exc) where exc is an
        ItemError / WorkerCrashed. An exception raised by on_result aborts the run (the driver
        could not record a result, so continuing would lose work silently).
    progress: None, True (a progress bar on stderr) or a callable(n_finished, n_total).
    crash_retries: how many times an item whose worker died is tried again before it is
        reported as WorkerCrashed.
    threads_per_worker: math-library threads per worker; default: env WORLDEVAL_THREADS_PER_WORKER,
        else CPU count // workers (local) or the actor's num_cpus (Ray).
    item_timeout: seconds one item may take (counted from when it is handed to a worker); the
        worker running a slower item is killed and the item handled like a crash, ending as
        ItemTimeout. Default: env WORLDEVAL_ITEM_TIMEOUT_S, else no limit. Not enforced in-process.
    stall_timeout: seconds without any item finishing (or Ray worker becoming ready) after which
        the run stops with ExecutorStalled instead of hanging. Default: env
        WORLDEVAL_STALL_TIMEOUT_S, else no limit.
    Returns a RunSummary; `results` (input order) is filled only when on_result is None.
    """
    items = list(items)
    _check_choice(executor, workers)
    limits = Limits(
        crash_retries=crash_retries,
        item_timeout=env_seconds(item_timeout, "WORLDEVAL_ITEM_TIMEOUT_S"),
        stall_timeout=env_seconds(stall_timeout, "WORLDEVAL_STALL_TIMEOUT_S"),
    )
    summary = RunSummary(total=len(items), executor=executor, workers=workers)
    prog = Progress(progress, len(items))
    deliver = Deliver(items, on_result, summary, prog)
    if threads_per_worker is None and os.environ.get("WORLDEVAL_THREADS_PER_WORKER"):
        threads_per_worker = int(os.environ["WORLDEVAL_THREADS_PER_WORKER"])
    t0 = time.perf_counter()
    try:
        if not items:
            pass
        elif executor == "local" and workers == 0:
            for i, item in enumerate(items):
                deliver(i, *invoke(fn, item))
        elif executor == "local":
            threads = threads_per_worker or max(1, (os.cpu_count() or 1) // workers)
            LocalRun(fn, items, workers, threads, limits, start_method, deliver, summary).run()
        else:
            threads = threads_per_worker or max(1, int((resources or {}).get("num_cpus", 1)))
            run_ray(fn, items, workers, address, resources, threads, limits, deliver, summary)
    finally:
        prog.close()
        summary.wall_s = time.perf_counter() - t0
    summary.results = deliver.collected
    return summary


def _check_choice(executor: str, workers: int) -> None:
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}")
    if workers < 0:
        raise ValueError(f"workers must be >= 0, got {workers}")
    if executor == "ray" and workers == 0:
        raise ValueError("workers=0 (in-process) is only available with the local executor")
