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
  exception carried them); a worker process that dies (segfault, OOM killer,
  `kill -9`) becomes a `WorkerCrashed` for the items it was running, after
  `crash_retries` retries, and the pool is rebuilt so the rest goes on.
  `item_timeout` turns a hung item into an `ItemTimeout` the same way;
  `stall_timeout` stops a run that makes no progress (`ExecutorStalled`).

Local executor choices:
* Worker processes are started with `spawn` (default; `start_method=` or the
  environment variable `WORLDEVAL_START_METHOD` may choose `forkserver`):
  forking a parent that already holds torch/OpenMP threads or a Ray client is
  unsafe, and spawn behaves the same on Linux and macOS.
* `workers=1` still runs in one separate worker process, not in-process, so a
  decoder that crashes on one video costs that item only, and 1 and N workers
  run exactly the same code path. `workers=0` runs in-process (no isolation;
  for debugging with pdb or profilers).
* At most `workers` items are in flight, so when the pool breaks the set of
  items that may have been running is known. Those items are retried one at a
  time (with nothing else in flight), which pins a repeat crash on the item
  that causes it instead of on its neighbours.

Ray executor: `workers` long-lived actors (each asks Ray for `resources`, e.g.
`{"num_gpus": 1}` for the hf backend), fed one item at a time as they become
idle; Ray places the actors. Results stream back with `ray.wait` and go to
`on_result` in the driver. A model is loaded once per worker process through
`worker_cache`, which works the same in pool workers and in actors because
both live for the whole run.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time
import traceback as tb
from collections import Counter, deque
from concurrent.futures import FIRST_COMPLETED, ALL_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

EXECUTORS = ("local", "ray")


# --------------------------------------------------------------------------- errors


class ItemError(Exception):
    """The failure of one item, in a form that survives pickling between processes.

    Many exceptions do not round-trip through pickle (e.g. ones whose
    `__init__` takes several arguments), so workers send this summary instead.
    `kind` is the original exception's class name (or a name of ours, such as
    `WorkerCrashed`); `file` and `field` are copied from the exception when it
    names them (CaseError, MediaError, ...).
    """

    def __init__(
        self,
        kind: str,
        message: str,
        file: str | None = None,
        field: str | None = None,
        traceback: str | None = None,
    ):
        self.kind = kind
        self.message = message
        self.file = file
        self.field = field
        self.traceback = traceback
        super().__init__(f"{kind}: {message}")

    def __reduce__(self):
        return (type(self), (self.kind, self.message, self.file, self.field, self.traceback))

    @classmethod
    def from_exception(cls, exc: BaseException) -> "ItemError":
        if isinstance(exc, ItemError):
            return exc
        file = getattr(exc, "file", None) or getattr(exc, "path", None) or getattr(exc, "filename", None)
        fieldname = getattr(exc, "field", None)
        # CaseError/MediaError keep the bare reason apart from the "file: field:" prefix
        message = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
        return cls(
            type(exc).__name__,
            str(message),
            str(file) if file is not None else None,
            str(fieldname) if fieldname is not None else None,
            "".join(tb.format_exception(type(exc), exc, exc.__traceback__)),
        )

    def to_record(self) -> dict:
        """The `error` object of a status record: {"file", "field", "message"} plus the error's name."""
        return {"file": self.file, "field": self.field, "message": self.message, "type": self.kind}


class ExecutorStalled(RuntimeError):
    """Nothing finished for `stall_timeout` seconds (e.g. Ray cannot place any worker)."""


class WorkerStartError(RuntimeError):
    """Worker processes die before running any item: a set-up problem, not a problem of the items."""


class WorkerCrashed(ItemError):
    """The worker process running this item died (signal, OOM killer, hard crash)."""

    def __init__(self, message: str, file: str | None = None, field: str | None = None, traceback: str | None = None):
        super().__init__("WorkerCrashed", message, file, field, traceback)

    def __reduce__(self):
        return (type(self), (self.message, self.file, self.field, self.traceback))


class ItemTimeout(WorkerCrashed):
    """The item ran longer than `item_timeout`; its worker was killed."""

    def __init__(self, message: str, file: str | None = None, field: str | None = None, traceback: str | None = None):
        ItemError.__init__(self, "ItemTimeout", message, file, field, traceback)


# --------------------------------------------------------------------------- per-worker cache

_WORKER_CACHE: dict[Any, Any] = {}


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


def default_resources(backend: str, device: str = "cpu") -> dict:
    """Ray resources one worker asks for: a whole GPU for a backend that needs one on CUDA, else one CPU."""
    from worldeval.opis.backends.registry import needs_gpu

    if needs_gpu(backend, device):
        return {"num_cpus": 1, "num_gpus": 1}
    return {"num_cpus": 1}


# --------------------------------------------------------------------------- worker side


def _set_threads(threads: int | None) -> None:
    """Cap math-library threads per worker so N workers do not fight over the cores.

    Environment variables only take effect before the library is imported,
    which is why they are set in the worker initializer; libraries that are
    already loaded are capped through their own call.
    """
    if not threads:
        return
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


_STARTED = None  # shared counter of items begun in this pool (set in pool workers only)


def _init_worker(threads: int | None, started=None) -> None:
    global _STARTED
    _STARTED = started
    _set_threads(threads)


def _invoke(fn: Callable[[Any], Any], item: Any) -> tuple[str, Any, float]:
    """Run fn(item) in a worker; never raises for an item-level failure."""
    if _STARTED is not None:
        with _STARTED.get_lock():
            _STARTED.value += 1
    t0 = time.perf_counter()
    try:
        out = fn(item)
        return ("ok", out, time.perf_counter() - t0)
    except Exception as exc:
        return ("error", ItemError.from_exception(exc), time.perf_counter() - t0)


# --------------------------------------------------------------------------- driver side


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


class _Progress:
    def __init__(self, progress, total: int):
        self.fn = None
        self.bar = None
        if progress is True:
            try:
                from rich.progress import Progress

                self.bar = Progress(transient=False)
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
class _Limits:
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


def _env_seconds(value: float | None, var: str) -> float | None:
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


def _crash_error(i_strikes: int, where: str, exitcodes, timed_out: float | None) -> WorkerCrashed:
    if timed_out:
        return ItemTimeout(f"item ran longer than {timed_out:g} s; its worker was killed ({where}); "
                           f"tried {i_strikes} time(s)")
    return WorkerCrashed(f"worker process died while running this item ({where}; exit codes {exitcodes}); "
                         f"tried {i_strikes} time(s); rerun to retry")


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
    limits = _Limits(
        crash_retries=crash_retries,
        item_timeout=_env_seconds(item_timeout, "WORLDEVAL_ITEM_TIMEOUT_S"),
        stall_timeout=_env_seconds(stall_timeout, "WORLDEVAL_STALL_TIMEOUT_S"),
    )
    summary = RunSummary(total=len(items), executor=executor, workers=workers)
    prog = _Progress(progress, len(items))
    deliver = _Deliver(items, on_result, summary, prog)
    if threads_per_worker is None and os.environ.get("WORLDEVAL_THREADS_PER_WORKER"):
        threads_per_worker = int(os.environ["WORLDEVAL_THREADS_PER_WORKER"])
    t0 = time.perf_counter()
    try:
        if not items:
            pass
        elif executor == "local" and workers == 0:
            for i, item in enumerate(items):
                deliver(i, *_invoke(fn, item))
        elif executor == "local":
            threads = threads_per_worker or max(1, (os.cpu_count() or 1) // workers)
            _LocalRun(fn, items, workers, threads, limits, start_method, deliver, summary).run()
        else:
            threads = threads_per_worker or max(1, int((resources or {}).get("num_cpus", 1)))
            _run_ray(fn, items, workers, address, resources, threads, limits, deliver, summary)
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


class _Deliver:
    """Hands each finished item to `on_result` (or keeps it, in input order) and counts it in the summary."""

    def __init__(self, items: list, on_result: Callable[[Any, Any], None] | None, summary: RunSummary,
                 prog: _Progress):
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


class _LocalRun:
    """One run_items call on a process pool: hands out items, watches deadlines, rebuilds the pool after a crash."""

    def __init__(self, fn, items, workers, threads, limits: _Limits, start_method, deliver, summary):
        self.fn, self.items, self.workers, self.threads = fn, items, workers, threads
        self.limits, self.deliver, self.summary = limits, deliver, summary
        self.method = start_method or os.environ.get("WORLDEVAL_START_METHOD") or "spawn"
        self.ctx = mp.get_context(self.method)
        if self.method == "forkserver":
            # Import the work's module once in the fork server; workers are then forked from it
            # instead of each importing torch & co. (only effective before the server first starts).
            mod = getattr(fn, "__module__", None)
            if mod and mod != "__main__":
                self.ctx.set_forkserver_preload([mod])
        self.started = self.ctx.Value("i", 0)
        self.queue = deque(range(len(items)))
        self.suspects: deque[int] = deque()  # items that were in flight when a worker died
        self.strikes: Counter[int] = Counter()
        self.inflight: dict = {}  # future -> item index
        self.handed: dict = {}  # future -> time it was handed out
        self.timed_out: set[int] = set()
        self.start_failures = 0
        self.last_progress = time.monotonic()
        self.pool = self.new_pool()

    def new_pool(self) -> ProcessPoolExecutor:
        self.started.value = 0
        return ProcessPoolExecutor(max_workers=self.workers, mp_context=self.ctx, initializer=_init_worker,
                                   initargs=(self.threads, self.started))

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
            _kill_pool(self.pool)
            self.pool.shutdown(wait=False, cancel_futures=True)
            raise
        self.pool.shutdown(wait=True)

    def submit(self, i: int) -> bool:
        try:
            fut = self.pool.submit(_invoke, self.fn, self.items[i])
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
        exitcodes = _exitcodes(self.pool)
        _discard_pool(self.pool)
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
            _kill_pool(self.pool)
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
        exitcodes = _exitcodes(self.pool)
        _discard_pool(self.pool)
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
                self.deliver(i, "error", _crash_error(self.strikes[i], where, exitcodes, late))
            else:
                self.suspects.append(i)


def _start_error(method: str, exitcodes) -> str:
    return (
        f"worker processes exit before running any item (exit codes {exitcodes}). With the "
        f"'{method}' start method each worker re-imports the main module: a script that calls "
        "run_items/run_eval must do so under `if __name__ == '__main__':`, and the function and "
        "items must be importable/picklable. workers=0 runs in-process to debug this."
    )


def _discard_pool(pool) -> None:
    """Drop a broken pool without joining it: joining a pool whose worker was SIGKILLed can block forever."""
    _kill_pool(pool)
    pool.shutdown(wait=False, cancel_futures=True)


def _kill_pool(pool) -> None:
    """SIGKILL the pool's worker processes (private API; best effort)."""
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        try:
            proc.kill()
        except Exception:
            pass


def _exitcodes(pool) -> list:
    """Exit codes of the pool's processes (-9: SIGKILL, e.g. the OOM killer); best effort, private API."""
    try:
        return sorted({p.exitcode for p in list((getattr(pool, "_processes", None) or {}).values())}, key=str)
    except Exception:
        return []


def _collect(fut, i: int, deliver, crashed: list[int]) -> None:
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


# --------------------------------------------------------------------------- Ray


class _RayWorker:
    """One long-lived Ray actor; its process keeps `worker_cache` (loaded models) between items."""

    def __init__(self, threads: int | None):
        _set_threads(threads)

    def run(self, fn, item):
        return _invoke(fn, item)

    def pid(self) -> int:
        return os.getpid()


def _ray_init(address: str | None):
    import ray

    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"logging_level": "WARNING", "log_to_driver": True}
    if address in (None, "", "local") and not (address is None and os.environ.get("RAY_ADDRESS")):
        # A cluster of our own on this machine: let its workers import what this process can.
        kwargs.update(
            address="local",
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}},
        )
    else:
        kwargs["address"] = address
    ray.init(**kwargs)
    return True


def _ray_options(resources: dict | None, max_concurrency: int = 1) -> dict:
    res = dict(resources or {"num_cpus": 1})
    opts: dict[str, Any] = {
        "num_cpus": float(res.pop("num_cpus", 1)),
        "num_gpus": float(res.pop("num_gpus", 0)),
        # a dead actor is replaced by the driver, which knows which item it was running
        "max_restarts": 0,
        "max_task_retries": 0,
        "max_concurrency": max_concurrency,
    }
    if "memory" in res:
        opts["memory"] = res.pop("memory")
    if res:
        opts["resources"] = res
    return opts


# Actors outlive one run_items call while the caller keeps Ray up (a warm pool: models stay loaded
# and no process start-up is paid again). Keyed by Ray job, actor options and thread cap.
_WARM_ACTORS: dict[tuple, list] = {}


def _warm_key(ray, opts: dict, threads) -> tuple:
    # a job id alone repeats across clusters (every new cluster starts at 01000000)
    try:
        ctx = ray.get_runtime_context()
        job = (ctx.get_job_id(), ctx.get_node_id())
    except Exception:
        job = None
    return (job, repr(sorted(opts.items())), threads)


def shutdown_workers() -> None:
    """Kill the warm Ray actors kept between run_items calls (ray.shutdown() does it too)."""
    try:
        import ray
    except ImportError:
        return
    for actors in _WARM_ACTORS.values():
        for actor in actors:
            _kill(ray, actor)
    _WARM_ACTORS.clear()


def _ray_capacity(ray, opts: dict) -> tuple[int | None, str]:
    """How many actors with these options the cluster can hold at once (None: no limit known)."""
    total = ray.cluster_resources()
    asks = [("CPU", opts["num_cpus"]), ("GPU", opts["num_gpus"])] + list(opts.get("resources", {}).items())
    caps = []
    for name, need in asks:
        if need and need > 0:
            caps.append((int(total.get(name, 0) // need + 1e-9), f"{name}={need:g} per worker, cluster has {total.get(name, 0):g}"))
    if not caps:
        return None, ""
    return min(caps)


def _run_ray(fn, items, workers, address, resources, threads, limits: _Limits, deliver, summary) -> None:
    try:
        import ray
        from ray.exceptions import RayActorError
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise RuntimeError("the ray executor needs the optional extra: pip install 'worldeval[ray]'") from exc
    started = _ray_init(address)
    opts = _ray_options(resources)
    workers = _fit_workers(ray, opts, workers, started, summary)
    _RayRun(ray, RayActorError, fn, items, workers, threads, opts, started, limits, deliver, summary).run()


def _fit_workers(ray, opts: dict, workers: int, started: bool, summary: RunSummary) -> int:
    """`workers`, or fewer when the cluster cannot hold that many actors at once."""
    capacity, why = _ray_capacity(ray, opts)
    if capacity is not None and capacity < 1:
        if started:
            ray.shutdown()
        raise RuntimeError(f"the Ray cluster cannot place a single worker ({why})")
    if capacity is not None and workers > capacity:
        # an actor that can never be placed would hold its item forever
        import warnings

        # stacklevel 4 names the line that called run_items (_fit_workers < _run_ray < run_items < it)
        warnings.warn(f"--workers {workers} reduced to {capacity}: the Ray cluster fits no more ({why})", stacklevel=4)
        workers = capacity
        summary.workers = workers
    return workers


class _RayRun:
    """One run_items call on Ray actors: feeds idle actors, replaces dead ones, keeps warm actors for the next call."""

    def __init__(self, ray, actor_error, fn, items, workers, threads, opts: dict, started: bool, limits: _Limits,
                 deliver, summary):
        self.ray, self.actor_error, self.fn, self.items = ray, actor_error, fn, items
        self.workers, self.threads, self.started = workers, threads, started
        self.limits, self.deliver, self.summary = limits, deliver, summary
        self.Actor = ray.remote(_RayWorker).options(**opts)
        self.key = _warm_key(ray, opts, threads)
        warm = _WARM_ACTORS.pop(self.key, [])
        # Warm actors made with other options would hold cluster resources this run may need.
        shutdown_workers()
        for extra in warm[workers:]:
            _kill(ray, extra)
        warm = warm[:workers]
        # An actor gets items only once it answers a ping, i.e. once Ray has placed it: an item
        # handed to an actor still waiting for resources would wait with it while others sit idle.
        self.starting: dict = {}  # ping ref -> actor
        for actor in warm + [self.Actor.remote(threads) for _ in range(workers - len(warm))]:
            self.start(actor)
        self.idle: deque = deque()
        self.queue = deque(range(len(items)))
        self.strikes: Counter[int] = Counter()
        self.inflight: dict = {}  # ObjectRef -> (item index, actor, time handed out)
        self.timed_out: set[int] = set()
        self.start_failures = 0
        self.last_progress = time.monotonic()

    def start(self, actor) -> None:
        self.starting[actor.pid.remote()] = actor

    def run(self) -> None:
        finished = False
        try:
            while self.queue or self.inflight:
                while self.queue and self.idle:
                    i = self.queue.popleft()
                    actor = self.idle.popleft()
                    self.inflight[actor.run.remote(self.fn, self.items[i])] = (i, actor, time.monotonic())
                for ref in self.wait_ready():
                    if ref in self.starting:
                        self.placed(ref)
                    else:
                        self.item_done(ref)
            finished = True
        finally:
            self.close(finished)

    def wait_ready(self) -> list:
        """Refs that are ready (at most one); empty when a deadline came first. Kills the actors of late items."""
        ray, limits = self.ray, self.limits
        timeout = limits.wait_s(time.monotonic(), [t for _, _, t in self.inflight.values()], self.last_progress)
        ready, _ = ray.wait(list(self.inflight) + list(self.starting), num_returns=1, timeout=timeout)
        now = time.monotonic()
        for ref, (i, actor, t) in self.inflight.items():
            if limits.item_timeout and now - t >= limits.item_timeout and ref not in ready and i not in self.timed_out:
                # killing the actor makes its pending result raise RayActorError: the crash path
                self.timed_out.add(i)
                _kill(ray, actor)
        if not ready:
            if not self.timed_out and limits.stalled(now, self.last_progress):
                raise ExecutorStalled(
                    f"no item finished in {limits.stall_timeout:g} s ({len(self.inflight)} in flight, "
                    f"{len(self.starting)} Ray worker(s) not yet placed; cluster resources: {ray.available_resources()})"
                )
            return []
        self.last_progress = now
        return ready

    def placed(self, ref) -> None:
        """A new actor answered its ping (it is placed and idle), or died before its first item."""
        actor = self.starting.pop(ref)
        try:
            self.ray.get(ref)
        except self.actor_error as exc:
            self.start_failures += 1
            if self.start_failures > 2 * self.workers + 2:
                raise RuntimeError(f"Ray workers keep dying before their first item: {exc}") from exc
            self.crashed(-1, actor, exc)
            return
        self.idle.append(actor)

    def item_done(self, ref) -> None:
        i, actor, _ = self.inflight.pop(ref)
        try:
            status, payload, seconds = self.ray.get(ref)
        except self.actor_error as exc:
            # the actor's process died; only this item was running on it
            self.crashed(i, actor, exc)
            return
        except Exception as exc:
            self.idle.append(actor)
            self.deliver(i, "error", ItemError.from_exception(exc))
            return
        self.idle.append(actor)
        self.deliver(i, status, payload, seconds)

    def crashed(self, i: int, actor, exc: BaseException) -> None:
        """Replace a dead actor; item i (-1: none) runs again or, past crash_retries, is reported."""
        self.summary.pool_restarts += 1
        _kill(self.ray, actor)
        self.start(self.Actor.remote(self.threads))
        if i < 0:
            return
        self.strikes[i] += 1
        late = self.limits.item_timeout if i in self.timed_out else None
        self.timed_out.discard(i)
        if self.strikes[i] > self.limits.crash_retries:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            self.deliver(i, "error", _crash_error(self.strikes[i], f"Ray actor: {first}", [], late))
        else:
            self.queue.appendleft(i)

    def close(self, finished: bool) -> None:
        ray = self.ray
        for _, actor, _ in self.inflight.values():
            _kill(ray, actor)
        if self.started:
            ray.shutdown()
            _WARM_ACTORS.clear()
        elif finished:
            # actors still starting are kept too: the next call will find them placed
            _WARM_ACTORS[self.key] = list(self.idle) + list(self.starting.values())
        else:
            for actor in list(self.idle) + list(self.starting.values()):
                _kill(ray, actor)


def _kill(ray, actor) -> None:
    try:
        ray.kill(actor, no_restart=True)
    except Exception:
        pass
