"""The Ray executor on a local cluster started on loopback by the test itself (`local_ray`, tests/conftest.py)."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")

from worldeval.executor import ItemError, ItemTimeout, WorkerCrashed, run_items  # noqa: E402

from tests.helpers.executor_tasks import (  # noqa: E402
    cached_model,
    die_always_on_two,
    die_once,
    fail_on_three,
    hang_on_two,
    square,
)

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def _collect(fn, items, **kw):
    got = {}

    def on_result(item, res):
        key = item[0] if isinstance(item, tuple) else item
        assert key not in got
        got[key] = res

    kw.setdefault("stall_timeout", 120)
    summary = run_items(fn, items, executor="ray", on_result=on_result, **kw)
    return got, summary


def test_ray_matches_local(local_ray):
    for workers in (1, 2):
        got, summary = _collect(square, range(8), workers=workers)
        assert got == {x: x * x for x in range(8)}
        assert summary.done == 8 and summary.executor == "ray"
    # the cluster the test started is left running for the caller
    assert ray.is_initialized()


def test_ray_item_error_is_named(local_ray):
    got, summary = _collect(fail_on_three, range(5), workers=2)
    assert summary.failed == 1 and isinstance(got[3], ItemError)
    assert got[3].to_record()["field"] == "instances[0].mask.size"


def test_ray_dead_actor_is_replaced_and_item_retried(local_ray, tmp_path):
    items = [(x, str(tmp_path)) for x in range(5)]
    got, summary = _collect(die_once, items, workers=2, crash_retries=1)
    assert (tmp_path / "died_2").exists()
    assert got == {x: x * x for x in range(5)}
    assert summary.pool_restarts == 1


def test_ray_poison_item_fails_alone(local_ray):
    got, summary = _collect(die_always_on_two, range(5), workers=2, crash_retries=1)
    assert isinstance(got[2], WorkerCrashed)
    assert {k: v for k, v in got.items() if k != 2} == {x: x * x for x in range(5) if x != 2}
    assert summary.crashed == 1


def test_ray_model_loaded_once_per_actor(local_ray):
    got, summary = _collect(cached_model, range(8), workers=2)
    assert all(v[1] == 1 for v in got.values()), got
    assert len({v[0] for v in got.values()}) <= 2
    assert sorted(v[2] for v in got.values()) == [7 * x for x in range(8)]


def test_ray_workers_capped_to_what_the_cluster_holds(local_ray):
    with pytest.warns(UserWarning, match="reduced to 1"):
        got, summary = _collect(square, range(4), workers=3, resources={"num_cpus": 3})
    assert got == {x: x * x for x in range(4)} and summary.workers == 1
    with pytest.raises(RuntimeError, match="cannot place a single worker.*GPU"):
        run_items(square, [1], executor="ray", workers=1, resources={"num_gpus": 1})


def test_ray_item_timeout_kills_only_that_actor(local_ray):
    got, summary = _collect(hang_on_two, range(4), workers=2, item_timeout=5, crash_retries=0)
    assert isinstance(got[2], ItemTimeout)
    # on Ray a hung item costs only its own actor: the others all finish
    assert {k: v for k, v in got.items() if k != 2} == {0: 0, 1: 1, 3: 9}
