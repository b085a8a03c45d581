"""Item functions the executor tests hand to worker processes (module level, so they pickle by name, for the
process pool and for Ray alike)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from worldeval.errors import InputError
from worldeval.executor import worker_cache


class ThreeArgError(InputError):
    """Like CaseError: bad input naming file and field, whose __init__ takes several arguments, so it
    does not survive pickle by itself."""


class NamedButNotInput(Exception):
    """Carries `file`/`field`/`reason` attributes without being an InputError: the executor does not probe for them."""

    def __init__(self):
        self.file, self.field, self.reason = "/x.json", "f", "bare reason"
        super().__init__("full message")


def square(x: int) -> int:
    time.sleep(0.01)
    return x * x


def raise_named(x: int) -> int:
    raise NamedButNotInput()


def fail_on_three(x: int) -> int:
    if x == 3:
        raise ThreeArgError("/data/case_3/case.json", "instances[0].mask.size", "mask is 2x2 but the image is 4x4")
    return x * x


def die_once(arg: tuple[int, str]) -> int:
    """SIGKILL this worker the first time item `x == 2` runs (a marker file remembers it)."""
    x, marker_dir = arg
    marker = Path(marker_dir) / f"died_{x}"
    if x == 2 and not marker.exists():
        marker.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.05)
    return x * x


def die_always_on_two(x: int) -> int:
    if x == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.05)
    return x * x


def unpicklable_result(x: int):
    return lambda: x


_FACTORY_CALLS = []


def cached_model(x: int) -> tuple[int, int, int]:
    """Returns (pid, factory calls so far in this process, x*x): one load per worker process."""

    def factory():
        _FACTORY_CALLS.append(1)
        return {"weights": 7}

    model = worker_cache(("toy", "cpu"), factory)
    time.sleep(0.02)
    return os.getpid(), len(_FACTORY_CALLS), x * model["weights"]


def hang_on_two(x: int) -> int:
    if x == 2:
        time.sleep(60)
    time.sleep(0.05)
    return x * x


def slow(x: int) -> int:
    time.sleep(3)
    return x


def die_after_return(x: int) -> int:
    """Item 0 returns, then its worker dies while idle (between items)."""
    if x == 0:
        import threading

        threading.Timer(0.1, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    return x * x


def frames_in_flight(_: int) -> int:
    """The frames one rollout measures at once in this worker (`opis.evaluate._frame_threads`)."""
    from worldeval.opis.evaluate import _frame_threads

    return _frame_threads()
