"""The executor seam: the same answers on 0, 1 and N workers; failures and dead workers are per item."""

from __future__ import annotations

import os
import pickle
import time

import pytest

from worldeval.executor import ExecutorStalled, ItemError, ItemTimeout, WorkerCrashed, run_items

from tests.helpers.executor_tasks import (
    cached_model,
    die_after_return,
    die_always_on_two,
    die_once,
    fail_on_three,
    hang_on_two,
    raise_named,
    slow,
    square,
    unpicklable_result,
)
from tests.helpers.paths import SRC


def _collect(fn, items, **kw):
    got = {}
    pids = set()

    def on_result(item, res):
        pids.add(os.getpid())
        key = item[0] if isinstance(item, tuple) else item
        assert key not in got, f"{item} delivered twice"
        got[key] = res

    summary = run_items(fn, items, on_result=on_result, **kw)
    assert pids <= {os.getpid()}, "on_result must run in the calling process"
    return got, summary


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_same_results_on_any_worker_count(workers):
    got, summary = _collect(square, range(8), workers=workers)
    assert got == {x: x * x for x in range(8)}
    assert (summary.done, summary.failed, summary.total) == (8, 0, 8)


def test_results_in_input_order_without_callback():
    summary = run_items(square, [5, 1, 4], workers=2)
    assert summary.results == [25, 1, 16]


def test_item_error_is_recorded_with_file_and_field_and_run_goes_on():
    got, summary = _collect(fail_on_three, range(6), workers=2)
    assert summary.done == 5 and summary.failed == 1
    err = got[3]
    assert isinstance(err, ItemError) and err.kind == "ThreeArgError"
    assert err.to_record() == {
        "file": "/data/case_3/case.json",
        "field": "instances[0].mask.size",
        "message": "mask is 2x2 but the image is 4x4",
        "type": "ThreeArgError",
    }
    assert "fail_on_three" in err.traceback
    assert pickle.loads(pickle.dumps(err)).to_record() == err.to_record()
    assert {k: v for k, v in got.items() if k != 3} == {x: x * x for x in range(6) if x != 3}


def test_only_an_input_error_names_file_and_field():
    summary = run_items(raise_named, [1], workers=0)
    assert summary.results[0].to_record() == {"file": None, "field": None, "message": "full message",
                                              "type": "NamedButNotInput"}


def test_unpicklable_result_is_an_item_error_not_a_crash():
    got, summary = _collect(unpicklable_result, [1, 2], workers=1)
    assert summary.failed == 2 and summary.crashed == 0 and summary.pool_restarts == 0
    assert all(isinstance(v, ItemError) for v in got.values())


def test_killed_worker_is_retried_and_the_run_finishes(tmp_path):
    items = [(x, str(tmp_path)) for x in range(6)]
    got, summary = _collect(die_once, items, workers=2, crash_retries=1)
    assert (tmp_path / "died_2").exists(), "the worker was not killed: the test did not exercise a crash"
    assert got == {x: x * x for x in range(6)}
    assert summary.pool_restarts == 1 and summary.failed == 0


def test_killed_worker_without_retries_marks_its_items_failed(tmp_path):
    items = [(x, str(tmp_path)) for x in range(6)]
    got, summary = _collect(die_once, items, workers=2, crash_retries=0)
    assert isinstance(got[2], WorkerCrashed) and got[2].to_record()["type"] == "WorkerCrashed"
    # nothing lost: every item was delivered exactly once, and the items that were not in flight finished
    assert set(got) == set(range(6))
    ok = {k for k, v in got.items() if not isinstance(v, ItemError)}
    assert ok >= {0, 1, 3, 4, 5} - {x for x, v in got.items() if isinstance(v, WorkerCrashed)}
    assert summary.crashed == summary.failed >= 1
    assert all(got[k] == k * k for k in ok)


def test_poison_item_is_pinned_on_itself_not_its_neighbours():
    got, summary = _collect(die_always_on_two, range(6), workers=2, crash_retries=1)
    assert isinstance(got[2], WorkerCrashed)
    assert "alone in its worker" in got[2].message
    # the pool's worker processes are known (local.Pool keeps them), so their exit codes are reported
    assert "exit codes [" in got[2].message and "exit codes []" not in got[2].message
    assert {k: v for k, v in got.items() if k != 2} == {x: x * x for x in range(6) if x != 2}
    assert summary.crashed == 1 and summary.pool_restarts == 2


def test_model_loaded_once_per_worker_process():
    summary = run_items(cached_model, range(10), workers=2)
    by_pid: dict[int, list[int]] = {}
    for pid, calls, _ in summary.results:
        by_pid.setdefault(pid, []).append(calls)
    assert all(set(v) == {1} for v in by_pid.values()), by_pid
    assert [r[2] for r in summary.results] == [7 * x for x in range(10)]


def test_on_result_failure_aborts_the_run():
    def boom(item, res):
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        run_items(square, range(4), workers=1, on_result=boom)


def test_progress_callback_counts_every_item():
    seen = []
    run_items(square, range(5), workers=0, progress=lambda n, total: seen.append((n, total)))
    assert seen == [(i, 5) for i in range(1, 6)]


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown executor"):
        run_items(square, [1], executor="dask")
    with pytest.raises(ValueError, match="in-process"):
        run_items(square, [1], executor="ray", workers=0)


def test_workers_that_die_at_start_up_stop_the_run_with_a_clear_message(tmp_path):
    # a script without a __main__ guard: with spawn, every worker re-runs it and dies before any item
    script = tmp_path / "unguarded.py"
    script.write_text(
        "import sys\n"
        "from worldeval.executor import run_items\n"
        "import operator\n"
        "if __name__ != '__main__':\n"
        "    raise SystemExit(3)\n"
        "run_items(operator.neg, [1, 2, 3], workers=2)\n"
    )
    import subprocess
    import sys

    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "WorkerStartError" in out.stderr and "__main__" in out.stderr


@pytest.mark.slow
def test_item_timeout_kills_the_hung_item_only(monkeypatch):
    # the clock starts when an item is handed out, worker start-up included: keep it generous
    monkeypatch.setenv("WORLDEVAL_ITEM_TIMEOUT_S", "6")
    t0 = time.monotonic()
    got, summary = _collect(hang_on_two, range(5), workers=2, crash_retries=0)
    assert time.monotonic() - t0 < 40
    assert isinstance(got[2], ItemTimeout) and got[2].to_record()["type"] == "ItemTimeout"
    assert "longer than 6 s" in got[2].message
    # the neighbour killed with it (if any) is a WorkerCrashed; every other item finished
    others = {k: v for k, v in got.items() if k != 2}
    assert all(v == k * k or isinstance(v, WorkerCrashed) for k, v in others.items())
    assert sum(isinstance(v, WorkerCrashed) for v in others.values()) <= 1


def test_stall_timeout_stops_a_run_that_makes_no_progress():
    with pytest.raises(ExecutorStalled, match="no item finished in 1 s"):
        run_items(slow, [1, 2], workers=1, stall_timeout=1)


def test_worker_dying_between_items_costs_no_item():
    got = {}

    def on_result(item, res):
        got[item] = res
        if item == 0:
            time.sleep(0.8)  # the worker dies meanwhile; the next hand-out finds the pool broken

    summary = run_items(die_after_return, range(3), workers=1, on_result=on_result, crash_retries=0)
    assert got == {0: 0, 1: 1, 2: 4}
    assert summary.pool_restarts == 1 and summary.failed == 0


def test_the_executor_imports_no_benchmark():
    """The executor is core: a caller passes what it needs (e.g. `resources`), it never reaches into opis or worldcast."""
    import ast

    root = SRC / "executor"
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            found += [f"{path.name}: {n}" for n in names if n.startswith(("worldeval.opis", "worldeval.worldcast"))]
    assert not found, found
