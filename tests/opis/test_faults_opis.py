"""OPIS fault and bad-input suite, through the real `run_eval` (classical backend) on tiny synthetic cases.

- 2 local workers, 1 and 4 on a loopback Ray cluster: identical archives (after sorting),
  identical scores, identical named errors for the bad inputs;
- every bad input (truncated / empty / audio-only / 1-frame video, escaping path, wrong-size mask,
  unknown kinematics, NaN geometry) is a recorded, named error for its case, and the run finishes;
- kill -9 of a worker mid-run: the run finishes with nothing lost or duplicated;
- kill -9 of the driver mid-run, then resume: nothing lost or duplicated, done work kept, same scores;
- nothing outside the run folder is written (snapshot of the whole tmp tree).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from worldeval.opis.archive import COLUMNS, read_archive
from worldeval.opis.run import run_eval
from worldeval.opis.scoring import ScoreConfig, score_runs

from tests.helpers.faults_data import BAD_CASES, make_dataset

pytestmark = pytest.mark.slow

MODEL = "toy"
N_GOOD = 2
SCORE = ScoreConfig(bootstrap=50, seed=3)
GOOD = [f"good_{i}" for i in range(N_GOOD)]


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


def archive(run: Path) -> pd.DataFrame:
    df = read_archive(run)
    key = ["case_id", "frame", "extra", "instance_id", "appearance"]
    return df.sort_values(key, na_position="last").reset_index(drop=True)[list(COLUMNS)]


def statuses(run: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((run / "status" / MODEL).glob("*.json"))}


def scores(run: Path) -> dict:
    res = score_runs(run, SCORE)
    res.pop("runs", None)
    return res


def assert_no_lost_or_duplicated_rows(df: pd.DataFrame, ref: pd.DataFrame) -> None:
    inst = df[df["instance_id"].notna()]
    dup = inst.duplicated(["model", "case_id", "frame", "instance_id"])
    assert not dup.any(), inst[dup]
    assert len(df) == len(ref)
    pd.testing.assert_frame_equal(df, ref)


@pytest.fixture(scope="module", autouse=True)
def no_hangs():
    """A run that stops making progress fails the test instead of hanging the session."""
    mp = pytest.MonkeyPatch()
    mp.setenv("WORLDEVAL_STALL_TIMEOUT_S", "240")
    yield
    mp.undo()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    ds, ro = make_dataset(root / "inputs", N_GOOD, bad=True, model=MODEL, bad_first=True)
    return root, ds, ro / MODEL


@pytest.fixture(scope="module")
def reference(data):
    """An uninterrupted run with one local worker; every other run must reproduce it exactly."""
    root, ds, ro = data
    run = root / "runs" / "reference"
    summary = run_eval(ds, ro, MODEL, run, workers=1)
    assert sorted(summary["done"]) == GOOD
    return run, archive(run), scores(run), statuses(run)


def check_bad_inputs(run: Path) -> None:
    st = statuses(run)
    assert set(st) == set(GOOD) | set(BAD_CASES), "every case gets a status record"
    for cid in GOOD:
        assert st[cid]["status"] == "done" and st[cid]["error"] is None
    for cid, (file, fieldname, words) in BAD_CASES.items():
        rec = st[cid]
        assert rec["status"] == "failed", cid
        err = rec["error"]
        assert err["file"].endswith(file), (cid, err)
        assert err["type"] in ("CaseError", "MediaError"), (cid, err)
        if fieldname is not None:
            assert err["field"] == fieldname, (cid, err)
        assert words in err["message"], (cid, err)
        # a failed case leaves no measurements behind
        assert not (run / "parts" / MODEL / f"{cid}.parquet").exists()
    man = json.loads((run / "manifest.json").read_text())
    # `done` counts every finished case, of this and of earlier (resumed) invocations
    assert man["summary"]["failed"] == len(BAD_CASES) and man["summary"]["done"] == N_GOOD


def test_reference_run_records_every_bad_input(data, reference):
    run, df, sc, _ = reference
    check_bad_inputs(run)
    assert sorted(df["case_id"].unique()) == GOOD
    assert sc["models"][MODEL]["OPIS"] is not None


# two workers on the CI machine's two cores; the ray test below also runs four
@pytest.mark.parametrize("workers", [2])
def test_local_workers_give_identical_archive_scores_and_errors(data, reference, workers):
    root, ds, ro = data
    ref_run, ref_df, ref_scores, ref_status = reference
    run = root / "runs" / f"local-{workers}"
    before = snapshot(root)
    run_eval(ds, ro, MODEL, run, workers=workers)
    after = snapshot(root)
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    prefix = f"runs/local-{workers}/"
    assert changed and all(k.startswith(prefix) for k in changed), sorted(k for k in changed if not k.startswith(prefix))
    check_bad_inputs(run)
    assert_no_lost_or_duplicated_rows(archive(run), ref_df)
    assert scores(run) == ref_scores
    assert {k: v["error"] for k, v in statuses(run).items()} == {k: v["error"] for k, v in ref_status.items()}


@pytest.mark.ray
def test_ray_workers_give_identical_archive_scores_and_errors(data, reference, local_ray):
    root, ds, ro = data
    ref_run, ref_df, ref_scores, ref_status = reference
    for workers in (1, 4):  # one actor, and more actors than the cores (two local workers: above)
        run = root / "runs" / f"ray-{workers}"
        before = snapshot(root)
        run_eval(ds, ro, MODEL, run, workers=workers, executor="ray")
        after = snapshot(root)
        changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
        assert changed and all(k.startswith(f"runs/ray-{workers}/") for k in changed)
        check_bad_inputs(run)
        assert_no_lost_or_duplicated_rows(archive(run), ref_df)
        assert scores(run) == ref_scores
        assert {k: v["error"] for k, v in statuses(run).items()} == {k: v["error"] for k, v in ref_status.items()}
        assert json.loads((run / "manifest.json").read_text())["config"]["executor"] == "ray"


# --------------------------------------------------------------------------- kill -9


def _children(pid: int) -> list[tuple[int, str]]:
    """(pid, cmdline) of the live child processes of `pid`, from /proc."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            state = stat.rsplit(")", 1)[1].split()[0]
            if ppid == pid and state != "Z":
                out.append((int(d.name), (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()))
        except (OSError, ValueError, IndexError):
            continue
    return out


def _start_eval(ds: Path, ro: Path, run: Path, workers: int) -> subprocess.Popen:
    code = (
        "import sys; from worldeval.opis.run import run_eval; "
        f"s = run_eval({str(ds)!r}, {str(ro)!r}, {MODEL!r}, {str(run)!r}, workers={workers}); "
        "print('DONE', len(s['done']), len(s['failed']))"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def _wait_for(cond, timeout: float, proc: subprocess.Popen) -> None:
    t0 = time.monotonic()
    while not cond():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the run ended before the fault could be injected:\n{out}\n{err[-3000:]}")
        if time.monotonic() - t0 > timeout:
            _kill_group(proc)
            pytest.fail("timed out waiting to inject the fault")
        time.sleep(0.02)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc (Linux)")


@needs_proc
def test_kill_worker_mid_run_loses_and_duplicates_nothing(data, reference):
    root, ds, ro = data
    _, ref_df, ref_scores, _ = reference
    run = root / "runs" / "kill-worker"
    proc = _start_eval(ds, ro, run, workers=2)

    def workers():
        return [p for p, cmd in _children(proc.pid) if "spawn_main" in cmd]

    # The bad cases come first and fail fast; the good ones come last and take a while. Strike when
    # every bad case is recorded and no good one is: then both workers hold a good case.
    def busy_with_good_cases():
        st = statuses(run)
        return len(workers()) == 2 and set(st) == set(BAD_CASES)

    _wait_for(busy_with_good_cases, 120, proc)
    before = set(workers())
    victim = sorted(before)[0]
    os.kill(victim, signal.SIGKILL)
    seen = set(before)
    try:
        t0 = time.monotonic()
        while proc.poll() is None and time.monotonic() - t0 < 180:
            seen |= set(workers())
            time.sleep(0.02)
        out, err = proc.communicate(timeout=30)
    finally:
        _kill_group(proc)
    assert proc.returncode == 0, err[-3000:]
    assert seen - before, "the pool was not rebuilt after its worker was killed"
    assert f"DONE {N_GOOD} {len(BAD_CASES)}" in out
    check_bad_inputs(run)
    assert_no_lost_or_duplicated_rows(archive(run), ref_df)
    assert scores(run) == ref_scores

    # resuming the finished run redoes only the failed (bad) cases and changes nothing else
    parts = {p.name: p.stat().st_mtime_ns for p in (run / "parts" / MODEL).glob("*.parquet")}
    summary = run_eval(ds, ro, MODEL, run, workers=0)
    assert sorted(summary["skipped"]) == GOOD and len(summary["failed"]) == len(BAD_CASES)
    assert {p.name: p.stat().st_mtime_ns for p in (run / "parts" / MODEL).glob("*.parquet")} == parts
    assert_no_lost_or_duplicated_rows(archive(run), ref_df)


@needs_proc
def test_kill_driver_mid_run_then_resume(data, reference):
    root, ds, ro = data
    _, ref_df, ref_scores, _ = reference
    run = root / "runs" / "kill-driver"
    proc = _start_eval(ds, ro, run, workers=1)
    # kill once the first good case is done, while others are still to do
    _wait_for(lambda: any(s["status"] == "done" for s in statuses(run).values()) and len(statuses(run)) < N_GOOD + len(BAD_CASES), 120, proc)
    os.kill(proc.pid, signal.SIGKILL)
    _kill_group(proc)  # and the orphaned pool worker with it
    first = statuses(run)
    kept = {k for k, v in first.items() if v["status"] == "done"}
    assert kept and len(first) < N_GOOD + len(BAD_CASES)
    assert not (run / "measurements").exists(), "the killed run never reached consolidation"

    summary = run_eval(ds, ro, MODEL, run, workers=2)
    assert set(summary["skipped"]) == kept, "finished cases are kept, not redone"
    assert set(summary["done"]) == set(GOOD) - kept
    check_bad_inputs(run)
    assert_no_lost_or_duplicated_rows(archive(run), ref_df)
    assert scores(run) == ref_scores
    # kept cases were not rewritten
    for cid in kept:
        assert statuses(run)[cid] == first[cid]
