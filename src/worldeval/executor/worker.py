"""The worker side, the same in a pool worker process and in a Ray actor.

Both live for the whole run, so `worker_cache` keeps a loaded model between items in either;
`invoke` runs one item and turns its failure into an `ItemError` instead of raising.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable

from worldeval.executor.errors import ItemError

_WORKER_CACHE: dict[Any, Any] = {}
_THREADS: int | None = None  # this worker's share of the cores (set_threads), None outside a worker


def worker_cache(key: Any, factory: Callable[[], Any]) -> Any:
    """Return the object cached under `key` in this worker process, building it once.

    Backends call this so a model is loaded once per worker process (pool
    worker or Ray actor), not once per item. `key` must be hashable and should
    hold everything that changes the object (backend name, device, options).
    """
    try:
        return _WORKER_CACHE[key]
    except KeyError:
        obj = _WORKER_CACHE[key] = factory()
        return obj


def set_threads(threads: int | None) -> None:
    """Cap math-library threads per worker so N workers do not fight over the cores.

    Environment variables only take effect before the library is imported,
    which is why they are set in the worker initializer; libraries that are
    already loaded are capped through their own call.
    """
    global _THREADS
    if not threads:
        return
    _THREADS = int(threads)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
        os.environ[var] = str(threads)
    if "torch" in sys.modules:
        try:
            sys.modules["torch"].set_num_threads(threads)
        except Exception:
            pass
    if "cv2" in sys.modules:
        try:
            sys.modules["cv2"].setNumThreads(threads)
        except Exception:
            pass


def worker_threads() -> int | None:
    """The cores this worker process was given (`set_threads`); None in a process that is no worker."""
    return _THREADS


_STARTED = None  # shared flag: a worker of this pool began an item (set in pool workers only)


def init_worker(threads: int | None, started=None) -> None:
    """Pool worker initializer: cap threads, and flag a begun item in `started` (a shared int)."""
    global _STARTED
    _STARTED = started
    set_threads(threads)


def invoke(fn: Callable[[Any], Any], item: Any) -> tuple[str, Any, float]:
    """Run fn(item) in a worker; never raises for an item-level failure."""
    if _STARTED is not None:
        # a plain store of the same value, without a lock: a worker killed while holding a lock
        # (the pool is killed whole after a crash or a timeout) would leave it held, and the
        # driver's next read would wait forever
        _STARTED.value = 1
    t0 = time.perf_counter()
    try:
        out = fn(item)
        return ("ok", out, time.perf_counter() - t0)
    except Exception as exc:
        return ("error", ItemError.from_exception(exc), time.perf_counter() - t0)
