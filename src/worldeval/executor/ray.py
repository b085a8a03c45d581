"""The Ray executor: `workers` long-lived actors, fed one item at a time as they become idle.

Each actor asks Ray for `resources` (e.g. `worker_resources(gpu=True)` for a backend that
needs a GPU) and Ray places it; an item goes only to an actor Ray has placed. Results stream
back with `ray.wait` and go to `on_result` in the driver. A model is loaded once per actor
through `worker_cache`, as in a pool worker. `ray` itself is imported only when this
executor runs: it is an optional extra.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter, deque
from typing import Any

from worldeval.executor.driver import Deliver, Limits, RunSummary
from worldeval.executor.errors import ExecutorStalled, ItemError, crash_error
from worldeval.executor.worker import invoke, set_threads


def worker_resources(gpu: bool = False) -> dict:
    """Ray resources one worker asks for: a whole GPU when its work needs one, else one CPU."""
    if gpu:
        return {"num_cpus": 1, "num_gpus": 1}
    return {"num_cpus": 1}


class _RayWorker:
    """One long-lived Ray actor; its process keeps `worker_cache` (loaded models) between items."""

    def __init__(self, threads: int | None):
        set_threads(threads)

    def run(self, fn, item):
        return invoke(fn, item)

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


def run_ray(fn, items, workers, address, resources, threads, limits: Limits, deliver: Deliver,
            summary: RunSummary) -> None:
    """Run the items on Ray actors (starting a private local cluster when none is given or running)."""
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

        # stacklevel 4 names the line that called run_items (_fit_workers < run_ray < run_items < it)
        warnings.warn(f"--workers {workers} reduced to {capacity}: the Ray cluster fits no more ({why})", stacklevel=4)
        workers = capacity
        summary.workers = workers
    return workers


class _RayRun:
    """One run_items call on Ray actors: feeds idle actors, replaces dead ones, keeps warm actors for the next call."""

    def __init__(self, ray, actor_error, fn, items, workers, threads, opts: dict, started: bool, limits: Limits,
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
            self.deliver(i, "error", crash_error(self.strikes[i], f"Ray actor: {first}", [], late))
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
