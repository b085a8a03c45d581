"""The local executor: a process pool on this machine that survives its workers dying.

* Worker processes are started with `spawn` (default; `start_method=` or the
  environment variable `WORLDEVAL_START_METHOD` may choose `forkserver`):
  forking a parent that already holds torch/OpenMP threads or a Ray client is
  unsafe, and spawn behaves the same on Linux and macOS.
* `workers=1` still runs in one separate worker process, not in-process, so a
  decoder that crashes on one video costs that item only, and 1 and N workers
  run exactly the same code path (`workers=0`, in-process, is `run_items`' own loop).
* At most `workers` items are in flight, so when the pool breaks the set of
  items that may have been running is known. Those items are retried one at a
  time (with nothing else in flight), which pins a repeat crash on the item
  that causes it instead of on its neighbours.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections import Counter, deque
from concurrent.futures import FIRST_COMPLETED, ALL_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from worldeval.executor.driver import Deliver, Limits, RunSummary
from worldeval.executor.errors import ExecutorStalled, ItemError, WorkerStartError, crash_error
from worldeval.executor.worker import init_worker, invoke


def tracking_context(method: str):
    """A multiprocessing context of start method `method` that keeps every process it starts.

    A ProcessPoolExecutor starts its workers through the context given as `mp_context` (its
    documented parameter), with that context's `Process`; keeping them here lets the driver
    SIGKILL the workers of a hung pool and read their exit codes without reaching into the
    pool's private `_processes`.
    """
    base = type(mp.get_context(method))

    class TrackingContext(base):
        def __init__(self):
            super().__init__()
            self.processes: list = []

        def Process(self, *args, **kwargs):  # noqa: N802 (the context API's name)
            proc = base.Process(*args, **kwargs)
            self.processes.append(proc)
            return proc

    return TrackingContext()


class Pool:
    """One ProcessPoolExecutor and the worker processes it started."""

    def __init__(self, workers: int, method: str, threads: int | None, started):
        self.ctx = tracking_context(method)
        self.executor = ProcessPoolExecutor(max_workers=workers, mp_context=self.ctx, initializer=init_worker,
                                            initargs=(threads, started))

    def kill(self) -> None:
        """SIGKILL the pool's worker processes (best effort)."""
        for proc in list(self.ctx.processes):
            try:
                proc.kill()
            except Exception:
                pass

    def exitcodes(self) -> list:
        """Exit codes of the pool's processes (-9: SIGKILL, e.g. the OOM killer); best effort."""
        try:
            return sorted({p.exitcode for p in list(self.ctx.processes)}, key=str)
        except Exception:
            return []

    def discard(self) -> None:
        """Drop a broken pool without joining it: joining a pool whose worker was SIGKILLed can block forever."""
        self.kill()
        self.executor.shutdown(wait=False, cancel_futures=True)


class LocalRun:
    """One run_items call on a process pool: hands out items, watches deadlines, rebuilds the pool after a crash."""

    def __init__(self, fn, items, workers, threads, limits: Limits, start_method, deliver: Deliver,
                 summary: RunSummary):
        self.fn, self.items, self.workers, self.threads = fn, items, workers, threads
        self.limits, self.deliver, self.summary = limits, deliver, summary
        self.method = start_method or os.environ.get("WORLDEVAL_START_METHOD") or "spawn"
        ctx = mp.get_context(self.method)
        if self.method == "forkserver":
            # Import the work's module once in the fork server; workers are then forked from it
            # instead of each importing torch & co. (only effective before the server first starts).
            mod = getattr(fn, "__module__", None)
            if mod and mod != "__main__":
                ctx.set_forkserver_preload([mod])
        self.started = ctx.RawValue("i", 0)  # lock-free: see worker.invoke
        self.queue = deque(range(len(items)))
        self.suspects: deque[int] = deque()  # items that were in flight when a worker died
        self.strikes: Counter[int] = Counter()
        self.inflight: dict = {}  # future -> item index
        self.handed: dict = {}  # future -> time it was handed out
        self.timed_out: set[int] = set()
        self.start_failures = 0
        self.last_progress = time.monotonic()
        self.pool = self.new_pool()

    def new_pool(self) -> Pool:
        self.started.value = 0
        return Pool(self.workers, self.method, self.threads, self.started)

    def run(self) -> None:
        try:
            while self.queue or self.suspects or self.inflight:
                if self.fill() and not self.inflight:
                    self.restart_idle_pool()
                    continue
                crashed: list[int] = []
                for fut in self.wait_done():
                    i = self.inflight.pop(fut)
                    self.handed.pop(fut, None)
                    _collect(fut, i, self.deliver, crashed)
                if crashed:
                    self.recover(crashed)
        except BaseException:
            self.pool.discard()
            raise
        self.pool.executor.shutdown(wait=True)

    def submit(self, i: int) -> bool:
        try:
            fut = self.pool.executor.submit(invoke, self.fn, self.items[i])
        except BrokenProcessPool:
            # a worker died since the last look (possibly while idle)
            return False
        self.inflight[fut] = i
        self.handed[fut] = time.monotonic()
        return True

    def fill(self) -> bool:
        """Hand out what may run now; True when the pool turned out to be broken."""
        if self.suspects:
            # run suspects alone, so a second crash is pinned on the item that causes it
            if not self.inflight:
                i = self.suspects.popleft()
                if not self.submit(i):
                    self.suspects.appendleft(i)
                    return True
            return False
        while self.queue and len(self.inflight) < self.workers:
            i = self.queue.popleft()
            if not self.submit(i):
                self.queue.appendleft(i)
                return True
        return False

    def restart_idle_pool(self) -> None:
        """The pool broke with nothing in flight: no item is to blame, just start a new one."""
        idle_start = self.started.value == 0
        exitcodes = self.pool.exitcodes()
        self.pool.discard()
        self.summary.pool_restarts += 1
        self.start_failures = self.start_failures + 1 if idle_start else 0
        if self.start_failures >= 2:
            raise WorkerStartError(_start_error(self.method, exitcodes))
        self.pool = self.new_pool()

    def wait_done(self) -> set:
        """Futures that finished (or were ended for running late); empty when none did before a deadline."""
        limits = self.limits
        timeout = limits.wait_s(time.monotonic(), self.handed.values(), self.last_progress)
        done, _ = wait(list(self.inflight), timeout=timeout, return_when=FIRST_COMPLETED)
        now = time.monotonic()
        late = [f for f, t in self.handed.items()
                if limits.item_timeout and now - t >= limits.item_timeout and f not in done]
        if late:
            # A pool cannot stop one task: kill its processes; the in-flight items then
            # take the crash path (the late ones as ItemTimeout).
            self.timed_out.update(self.inflight[f] for f in late)
            self.pool.kill()
            more, _ = wait([f for f in self.inflight if f not in done], timeout=60, return_when=ALL_COMPLETED)
            done = set(done) | set(more)
        elif not done:
            if limits.stalled(now, self.last_progress):
                raise ExecutorStalled(
                    f"no item finished in {limits.stall_timeout:g} s ({len(self.inflight)} in flight)")
            return set()
        self.last_progress = now
        return done

    def recover(self, crashed: list[int]) -> None:
        """A worker died: collect what the broken pool still holds, start a new pool, retry or report the items."""
        # The pool is broken: every other in-flight future fails too (or finished just before).
        if self.inflight:
            # Bounded: a broken pool can leave a future that never resolves; count it as crashed.
            wait(list(self.inflight), timeout=60, return_when=ALL_COMPLETED)
            for fut, i in list(self.inflight.items()):
                if fut.done():
                    _collect(fut, i, self.deliver, crashed)
                else:
                    crashed.append(i)
            self.inflight.clear()
            self.handed.clear()
        exitcodes = self.pool.exitcodes()
        self.pool.discard()
        self.summary.pool_restarts += 1
        if self.started.value == 0 and not self.timed_out:
            # No worker of this pool got as far as an item: the items are not to blame.
            self.start_failures += 1
            if self.start_failures >= 2:
                raise WorkerStartError(_start_error(self.method, exitcodes))
            self.queue.extendleft(sorted(crashed, reverse=True))
            self.pool = self.new_pool()
            return
        self.start_failures = 0
        self.pool = self.new_pool()
        self.strike(crashed, exitcodes)

    def strike(self, crashed: list[int], exitcodes) -> None:
        """Count one crash against each item; past crash_retries it is reported, else it runs again alone."""
        alone = len(crashed) == 1
        for i in sorted(crashed):
            self.strikes[i] += 1
            late = self.limits.item_timeout if i in self.timed_out else None
            self.timed_out.discard(i)
            if self.strikes[i] > self.limits.crash_retries:
                where = "alone in its worker" if alone else f"with {len(crashed) - 1} other item(s) in flight"
                self.deliver(i, "error", crash_error(self.strikes[i], where, exitcodes, late))
            else:
                self.suspects.append(i)


def _start_error(method: str, exitcodes) -> str:
    """The WorkerStartError message: workers died before their first item, twice."""
    return (
        f"worker processes exit before running any item (exit codes {exitcodes}). With the "
        f"'{method}' start method each worker re-imports the main module: a script that calls "
        "run_items/run_eval must do so under `if __name__ == '__main__':`, and the function and "
        "items must be importable/picklable. workers=0 runs in-process to debug this."
    )


def _collect(fut, i: int, deliver: Deliver, crashed: list[int]) -> None:
    """Deliver a finished future's result, or add its item to `crashed` when its worker died."""
    try:
        status, payload, seconds = fut.result()
    except BrokenProcessPool:
        crashed.append(i)
        return
    except Exception as exc:
        # e.g. an item or result that cannot be pickled: an item-level failure, not a crash
        deliver(i, "error", ItemError.from_exception(exc))
        return
    deliver(i, status, payload, seconds)
