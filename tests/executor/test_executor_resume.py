"""Resume guard and per-item status records of a run folder (runs.py)."""

from __future__ import annotations

import json

import pytest

from worldeval.runs import (
    ResumeError,
    atomic_write_json,
    check_resume,
    config_hash,
    is_done,
    read_status,
    status_path,
    write_status,
)

from tests.helpers.faults_data import make_dataset


def _manifest(run_dir, cfg, fp):
    atomic_write_json(run_dir / "manifest.json", {"config_hash": config_hash(cfg), "dataset_fingerprint": fp})


def test_config_hash_is_order_independent_and_ignores_secrets():
    a = config_hash({"stride": 8, "judge": {"model": "m", "api_key": "sk-1"}})
    b = config_hash({"judge": {"api_key": "sk-2", "model": "m"}, "stride": 8})
    assert a == b
    assert a != config_hash({"stride": 4, "judge": {"model": "m"}})


def test_new_folder_and_same_config_resume(tmp_path):
    cfg = {"stride": 8}
    assert check_resume(tmp_path, config_hash=config_hash(cfg), dataset_fingerprint="abc") is None
    _manifest(tmp_path, cfg, "abc")
    old = check_resume(tmp_path, config_hash=config_hash(cfg), dataset_fingerprint="abc")
    assert old["dataset_fingerprint"] == "abc"


def test_other_config_refused_with_clear_message_unless_forced(tmp_path):
    _manifest(tmp_path, {"stride": 8}, "abc")
    with pytest.raises(ResumeError) as ei:
        check_resume(tmp_path, config_hash=config_hash({"stride": 4}), dataset_fingerprint="abc")
    msg = str(ei.value)
    assert "manifest.json" in msg and "different config" in msg and "--force" in msg
    assert check_resume(tmp_path, config_hash=config_hash({"stride": 4}), dataset_fingerprint="abc", force=True)


def test_other_dataset_refused(tmp_path):
    _manifest(tmp_path, {"stride": 8}, "abc")
    with pytest.raises(ResumeError, match="different dataset"):
        check_resume(tmp_path, config_hash=config_hash({"stride": 8}), dataset_fingerprint="xyz")
    with pytest.raises(ResumeError, match="different config and dataset"):
        check_resume(tmp_path, config_hash=config_hash({"stride": 2}), dataset_fingerprint="xyz")


def test_unreadable_manifest_refused(tmp_path):
    (tmp_path / "manifest.json").write_text("{torn")
    with pytest.raises(ResumeError, match="cannot read"):
        check_resume(tmp_path, config_hash="h", dataset_fingerprint=None)
    assert check_resume(tmp_path, config_hash="h", dataset_fingerprint=None, force=True) is None


def test_status_records_drive_what_is_redone(tmp_path):
    write_status(tmp_path, "m", "c1", "done", config_hash="h1", timings={"total": 1.5})
    write_status(
        tmp_path, "m", "c2", "failed", config_hash="h1", error={"file": "x.mp4", "field": "video", "message": "empty"}
    )
    assert json.loads(status_path(tmp_path, "m", "c1").read_text())["timings"] == {"total": 1.5}
    assert is_done(tmp_path, "m", "c1", "h1")
    assert not is_done(tmp_path, "m", "c1", "h2")  # stale config: redo
    assert not is_done(tmp_path, "m", "c2", "h1")  # failed: redo
    assert not is_done(tmp_path, "m", "c3")  # missing: redo
    assert read_status(tmp_path, "m", "c2")["error"]["field"] == "video"
    status_path(tmp_path, "m", "c4").write_text('{"status": "do')  # torn by hand: treated as missing
    assert not is_done(tmp_path, "m", "c4")
    with pytest.raises(ValueError):
        write_status(tmp_path, "m", "c5", "running")


@pytest.mark.slow
def test_opis_eval_cli_refuses_another_config_unless_forced(tmp_path):
    from typer.testing import CliRunner

    from worldeval.cli import app

    ds, ro = make_dataset(tmp_path / "in", 1)
    run = tmp_path / "run"
    base = ["opis", "eval", "--dataset", str(ds), "--rollouts", str(ro / "toy"), "--model", "toy",
            "--out", str(run), "--workers", "0", "--quiet"]
    r = CliRunner().invoke(app, base)
    assert r.exit_code == 0, r.output
    done = json.loads(status_path(run, "toy", "good_0").read_text())
    assert done["status"] == "done"

    r = CliRunner().invoke(app, base + ["--max-side", "64"])
    assert r.exit_code == 2
    assert "manifest.json" in r.output and "different config" in r.output and "--force" in r.output
    assert json.loads(status_path(run, "toy", "good_0").read_text()) == done, "a refused resume writes nothing"

    # same config: resumes and keeps the finished case
    r = CliRunner().invoke(app, base)
    assert r.exit_code == 0 and "1 already done" in r.output

    # forced: the case made with the old config is redone under the new one
    r = CliRunner().invoke(app, base + ["--max-side", "64", "--force"])
    assert r.exit_code == 0 and "1 evaluated" in r.output, r.output
    assert json.loads(status_path(run, "toy", "good_0").read_text())["config_hash"] != done["config_hash"]
