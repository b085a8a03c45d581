"""Run one function over many items, locally (process pool) or on a Ray cluster.

This is the seam `opis eval` and `opis validate` share (`worldcast judge` waits on an
HTTP endpoint rather than computing, so it uses threads; see docs/running-at-scale.md):

    run_items(fn, items, workers=N, executor="local" | "ray", on_result=callback)

* `fn` is a picklable top-level function; it runs in worker processes.
* `on_result(item, result_or_exception)` runs in the calling process, one call
  at a time, in completion order: the caller is the only writer of the run
  folder, so no two processes ever write the same file.
* A failure of one item never stops the run. `fn` raising becomes an
  `ItemError` (a picklable summary naming the file and field when the original
  exception is a `worldeval.errors.InputError`); a worker process that dies
  (segfault, OOM killer, `kill -9`) becomes a `WorkerCrashed` for the items it
  was running, after `crash_retries` retries, and the pool is rebuilt so the
  rest goes on. `item_timeout` turns a hung item into an `ItemTimeout` the same
  way; `stall_timeout` stops a run that makes no progress (`ExecutorStalled`).
* `workers=0` runs in-process (no isolation; for debugging with pdb or profilers).

The package knows nothing of what the items are: a caller that needs a GPU per Ray worker
passes `resources` (`worker_resources(gpu=True)`), e.g. from its backend registry.

    errors.py   ItemError, WorkerCrashed, ItemTimeout, ExecutorStalled, WorkerStartError
    worker.py   the worker side, the same in pool workers and Ray actors: worker_cache, invoke
    driver.py   the calling process's bookkeeping: RunSummary, deadlines, delivery to on_result
    local.py    the process pool that survives its workers dying
    ray.py      long-lived Ray actors fed one item at a time
    run.py      run_items
"""

from worldeval.executor.driver import RunSummary
from worldeval.executor.errors import ExecutorStalled, ItemError, ItemTimeout, WorkerCrashed, WorkerStartError
from worldeval.executor.ray import shutdown_workers, worker_resources
from worldeval.executor.run import EXECUTORS, run_items
from worldeval.executor.worker import worker_cache

__all__ = [
    "EXECUTORS",
    "ExecutorStalled",
    "ItemError",
    "ItemTimeout",
    "RunSummary",
    "WorkerCrashed",
    "WorkerStartError",
    "run_items",
    "shutdown_workers",
    "worker_cache",
    "worker_resources",
]
