"""Frames measured at once follow the cores a worker was given: `opis eval`'s default single worker
on two cores measures two frames at a time, as the in-process run does, not one."""

from __future__ import annotations

import pytest

from worldeval.executor import run_items

from tests.helpers.executor_tasks import frames_in_flight


@pytest.mark.parametrize("workers, share, expected", [(1, 2, 2), (2, 1, 1), (1, 6, 2)])
def test_frames_in_flight_follow_the_workers_share_of_the_cores(monkeypatch, workers, share, expected):
    monkeypatch.delenv("WORLDEVAL_FRAME_THREADS", raising=False)
    summary = run_items(frames_in_flight, list(range(workers)), workers=workers, threads_per_worker=share)
    assert summary.results == [expected] * workers


def test_the_environment_still_overrides_a_workers_share(monkeypatch):
    monkeypatch.setenv("WORLDEVAL_FRAME_THREADS", "3")  # inherited by the pool's workers
    assert run_items(frames_in_flight, [0], workers=1, threads_per_worker=1).results == [3]


def test_frames_in_flight_cap_the_blas_threads_and_restore_them():
    from threadpoolctl import threadpool_info, threadpool_limits

    from worldeval.opis.evaluate import _blas_threads

    def blas() -> list[int]:
        return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]

    if not blas():
        pytest.skip("no BLAS library that threadpoolctl can see")
    with threadpool_limits(limits=2, user_api="blas"):
        outer = blas()  # 2, or fewer where the library keeps to fewer cores
        with _blas_threads(1):
            assert set(blas()) == {1}
        assert blas() == outer
