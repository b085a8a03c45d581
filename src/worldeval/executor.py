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
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}")
    if workers < 0:
        raise ValueError(f"workers must be >= 0, got {workers}")
    if executor == "ray" and workers == 0:
        raise ValueError("workers=0 (in-process) is only available with the local executor")
    limits = _Limits(
        crash_retries=crash_retries,
        item_timeout=_env_seconds(item_timeout, "WORLDEVAL_ITEM_TIMEOUT_S"),
        stall_timeout=_env_seconds(stall_timeout, "WORLDEVAL_STALL_TIMEOUT_S"),
    )
    summary = RunSummary(total=len(items), executor=executor, workers=workers)
    collected: list[Any] | None = [None] * len(items) if on_result is None else None
    prog = _Progress(progress, len(items))

    def deliver(idx: int, status: str, payload: Any, seconds: float = 0.0) -> None:
        summary.item_seconds += seconds
        if status == "ok":
            summary.done += 1
        else:
            summary.failed += 1
            if isinstance(payload, WorkerCrashed):
                summary.crashed += 1
            summary.failures.append((idx, payload))
        if on_result is not None:
            on_result(items[idx], payload)
        else:
            collected[idx] = payload
        prog.step()

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
            _run_local(fn, items, workers, threads, limits, start_method, deliver, summary)
        else:
            threads = threads_per_worker or max(1, int((resources or {}).get("num_cpus", 1)))
            _run_ray(fn, items, workers, address, resources, threads, limits, deliver, summary)
    finally:
        prog.close()
        summary.wall_s = time.perf_counter() - t0
    summary.results = collected
    return summary


def _run_local(fn, items, workers, threads, limits: _Limits, start_method, deliver, summary) -> None:
    method = start_method or os.environ.get("WORLDEVAL_START_METHOD") or "spawn"
    ctx = mp.get_context(method)
    if method == "forkserver":
        # Import the work's module once in the fork server; workers are then forked from it
        # instead of each importing torch & co. (only effective before the server first starts).
        mod = getattr(fn, "__module__", None)
        if mod and mod != "__main__":
            ctx.set_forkserver_preload([mod])
    started = ctx.Value("i", 0)

    def new_pool() -> ProcessPoolExecutor:
        started.value = 0
        return ProcessPoolExecutor(
            max_workers=workers, mp_context=ctx, initializer=_init_worker, initargs=(threads, started)
        )

    queue = deque(range(len(items)))
    suspects: deque[int] = deque()  # items that were in flight when a worker died
    strikes: Counter[int] = Counter()
    inflight: dict = {}  # future -> item index
    handed: dict = {}  # future -> time it was handed out
    timed_out: set[int] = set()
    start_failures = 0
    last_progress = time.monotonic()
    pool = new_pool()

    def submit(i: int) -> bool:
        try:
            fut = pool.submit(_invoke, fn, items[i])
        except BrokenProcessPool:
            # a worker died since the last look (possibly while idle)
            return False
        inflight[fut] = i
        handed[fut] = time.monotonic()
        return True

    try:
        while queue or suspects or inflight:
            broken = False
            if suspects:
                # run suspects alone, so a second crash is pinned on the item that causes it
                if not inflight:
                    i = suspects.popleft()
                    if not submit(i):
                        suspects.appendleft(i)
                        broken = True
            else:
                while queue and len(inflight) < workers:
                    i = queue.popleft()
                    if not submit(i):
                        queue.appendleft(i)
                        broken = True
                        break
            if broken and not inflight:
                # The pool broke with nothing in flight: no item is to blame, just start a new one.
                idle_start = started.value == 0
                exitcodes = _exitcodes(pool)
                _discard_pool(pool)
                summary.pool_restarts += 1
                start_failures = start_failures + 1 if idle_start else 0
                if start_failures >= 2:
                    raise WorkerStartError(_start_error(method, exitcodes))
                pool = new_pool()
                continue
            timeout = limits.wait_s(time.monotonic(), handed.values(), last_progress)
            done, _ = wait(list(inflight), timeout=timeout, return_when=FIRST_COMPLETED)
            now = time.monotonic()
            late = [
                f for f, t in handed.items() if limits.item_timeout and now - t >= limits.item_timeout and f not in done
            ]
            if late:
                # A pool cannot stop one task: kill its processes; the in-flight items then
                # take the crash path below (the late ones as ItemTimeout).
                timed_out.update(inflight[f] for f in late)
                _kill_pool(pool)
                more, _ = wait([f for f in inflight if f not in done], timeout=60, return_when=ALL_COMPLETED)
                done = set(done) | set(more)
            elif not done:
                if limits.stalled(now, last_progress):
                    raise ExecutorStalled(f"no item finished in {limits.stall_timeout:g} s ({len(inflight)} in flight)")
                continue
            last_progress = now
            crashed: list[int] = []
            for fut in done:
                i = inflight.pop(fut)
                handed.pop(fut, None)
                _collect(fut, i, deliver, crashed)
            if not crashed:
                continue
            # The pool is broken: every other in-flight future fails too (or finished just before).
            if inflight:
                # Bounded: a broken pool can leave a future that never resolves; count it as crashed.
                wait(list(inflight), timeout=60, return_when=ALL_COMPLETED)
                for fut, i in list(inflight.items()):
                    if fut.done():
                        _collect(fut, i, deliver, crashed)
                    else:
                        crashed.append(i)
                inflight.clear()
                handed.clear()
            exitcodes = _exitcodes(pool)
            _discard_pool(pool)
            summary.pool_restarts += 1
            if started.value == 0 and not timed_out:
                # No worker of this pool got as far as an item: the items are not to blame.
                start_failures += 1
                if start_failures >= 2:
                    raise WorkerStartError(_start_error(method, exitcodes))
                queue.extendleft(sorted(crashed, reverse=True))
                pool = new_pool()
                continue
            start_failures = 0
            pool = new_pool()
            alone = len(crashed) == 1
            for i in sorted(crashed):
                strikes[i] += 1
                late = limits.item_timeout if i in timed_out else None
                timed_out.discard(i)
                if strikes[i] > limits.crash_retries:
                    where = "alone in its worker" if alone else f"with {len(crashed) - 1} other item(s) in flight"
                    deliver(i, "error", _crash_error(strikes[i], where, exitcodes, late))
                else:
                    suspects.append(i)
    except BaseException:
        _kill_pool(pool)
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


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
    capacity, why = _ray_capacity(ray, opts)
    if capacity is not None and capacity < 1:
        if started:
            ray.shutdown()
        raise RuntimeError(f"the Ray cluster cannot place a single worker ({why})")
    if capacity is not None and workers > capacity:
        # an actor that can never be placed would hold its item forever
        import warnings

        warnings.warn(f"--workers {workers} reduced to {capacity}: the Ray cluster fits no more ({why})", stacklevel=3)
        workers = capacity
        summary.workers = workers
    Actor = ray.remote(_RayWorker).options(**opts)
    key = _warm_key(ray, opts, threads)
    warm = _WARM_ACTORS.pop(key, [])
    # Warm actors made with other options would hold cluster resources this run may need.
    shutdown_workers()
    for extra in warm[workers:]:
        _kill(ray, extra)
    warm = warm[:workers]

    # An actor gets items only once it answers a ping, i.e. once Ray has placed it: an item
    # handed to an actor still waiting for resources would wait with it while others sit idle.
    starting: dict = {}  # ping ref -> actor

    def start(actor) -> None:
        starting[actor.pid.remote()] = actor

    for actor in warm + [Actor.remote(threads) for _ in range(workers - len(warm))]:
        start(actor)
    idle: deque = deque()
    queue = deque(range(len(items)))
    strikes: Counter[int] = Counter()
    inflight: dict = {}  # ObjectRef -> (item index, actor, time handed out)
    timed_out: set[int] = set()
    finished = False
    start_failures = 0
    last_progress = time.monotonic()

    def crashed(i: int, actor, exc: BaseException) -> None:
        summary.pool_restarts += 1
        _kill(ray, actor)
        start(Actor.remote(threads))
        if i < 0:
            return
        strikes[i] += 1
        late = limits.item_timeout if i in timed_out else None
        timed_out.discard(i)
        if strikes[i] > limits.crash_retries:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            deliver(i, "error", _crash_error(strikes[i], f"Ray actor: {first}", [], late))
        else:
            queue.appendleft(i)

    try:
        while queue or inflight:
            while queue and idle:
                i = queue.popleft()
                actor = idle.popleft()
                inflight[actor.run.remote(fn, items[i])] = (i, actor, time.monotonic())
            timeout = limits.wait_s(time.monotonic(), [t for _, _, t in inflight.values()], last_progress)
            ready, _ = ray.wait(list(inflight) + list(starting), num_returns=1, timeout=timeout)
            now = time.monotonic()
            for ref, (i, actor, t) in inflight.items():
                if limits.item_timeout and now - t >= limits.item_timeout and ref not in ready and i not in timed_out:
                    # killing the actor makes its pending result raise RayActorError: the crash path
                    timed_out.add(i)
                    _kill(ray, actor)
            if not ready:
                if not timed_out and limits.stalled(now, last_progress):
                    raise ExecutorStalled(
                        f"no item finished in {limits.stall_timeout:g} s ({len(inflight)} in flight, "
                        f"{len(starting)} Ray worker(s) not yet placed; cluster resources: {ray.available_resources()})"
                    )
                continue
            last_progress = now
            for ref in ready:
                if ref in starting:
                    actor = starting.pop(ref)
                    try:
                        ray.get(ref)
                    except RayActorError as exc:
                        start_failures += 1
                        if start_failures > 2 * workers + 2:
                            raise RuntimeError(f"Ray workers keep dying before their first item: {exc}") from exc
                        crashed(-1, actor, exc)
                        continue
                    idle.append(actor)
                    continue
                i, actor, _ = inflight.pop(ref)
                try:
                    status, payload, seconds = ray.get(ref)
                except RayActorError as exc:
                    # the actor's process died; only this item was running on it
                    crashed(i, actor, exc)
                    continue
                except Exception as exc:
                    idle.append(actor)
                    deliver(i, "error", ItemError.from_exception(exc))
                    continue
                idle.append(actor)
                deliver(i, status, payload, seconds)
        finished = True
    finally:
        for _, actor, _ in inflight.values():
            _kill(ray, actor)
        if started:
            ray.shutdown()
            _WARM_ACTORS.clear()
        elif finished:
            # actors still starting are kept too: the next call will find them placed
            _WARM_ACTORS[key] = list(idle) + list(starting.values())
        else:
            for actor in list(idle) + list(starting.values()):
                _kill(ray, actor)


def _kill(ray, actor) -> None:
    try:
        ray.kill(actor, no_restart=True)
    except Exception:
        pass
