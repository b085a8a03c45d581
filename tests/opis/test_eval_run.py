"""run_eval: run folder layout, resume, and per-item errors (broken video, missing rollout, bad case, VLM timeout)."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

from tests.helpers.eval_scene import one_object_case, one_object_scene

pytestmark = pytest.mark.slow


def _rollout(path: Path, img, n=30, fps=10):
    from worldeval.media import write_video

    write_video(path, [img] * n, fps)


@pytest.fixture()
def dataset(tmp_path):
    ds, ro = tmp_path / "ds", tmp_path / "ro"
    img = one_object_case(ds, "good")
    one_object_case(ds, "badmask", bad_mask=True)
    one_object_case(ds, "broken")
    one_object_case(ds, "missing")
    _rollout(ro / "good.mp4", img)
    _rollout(ro / "badmask.mp4", img)
    (ro / "broken.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42 this is not a video" * 10)
    return ds, ro


def test_errors_are_recorded_and_the_run_finishes(dataset, tmp_path):
    from worldeval.opis.archive import read_archive
    from worldeval.opis.run import run_eval

    ds, ro = dataset
    out = tmp_path / "run"
    summary = run_eval(ds, ro, "m1", out, workers=0)
    assert summary["done"] == ["good"]
    failed = {e["case_id"]: e for e in summary["failed"]}
    assert set(failed) == {"badmask", "broken", "missing"}
    assert failed["badmask"]["file"].endswith("case.json") and "mask" in failed["badmask"]["field"]
    assert failed["broken"]["file"].endswith("broken.mp4")
    assert failed["missing"]["field"] == "rollout"
    for cid in ("badmask", "broken", "missing"):
        st = json.loads((out / "status" / "m1" / f"{cid}.json").read_text())
        assert st["status"] == "failed" and st["error"]["message"]
    st = json.loads((out / "status" / "m1" / "good.json").read_text())
    assert st["status"] == "done"
    df = read_archive(out / "measurements" / "m1.parquet")
    assert set(df.case_id) == {"good"}
    # the untouched rollout of a static object: matched in every sampled frame (10, 18, 26); H.264 blurs the noise texture a little
    assert list(df.frame) == [10, 18, 26] and df.matched.all() and (df.appearance > 0.85).all()
    frames = json.loads((out / "frames" / "m1" / "good.json").read_text())
    assert frames["frames"][0]["objects"][0]["status"] == "matched"
    man = json.loads((out / "manifest.json").read_text())
    for k in ("version", "git_revision", "config", "backends", "dataset_fingerprint", "timings", "config_hash"):
        assert k in man
    assert "classical" in man["backends"]

    # resume: finished items are skipped, failed ones are redone (and now succeed once fixed)
    _rollout(ro / "missing.mp4", one_object_scene()[0])
    again = run_eval(ds, ro, "m1", out, workers=0)
    assert again["skipped"] == ["good"]
    assert "missing" in again["done"]
    assert {e["case_id"] for e in again["failed"]} == {"badmask", "broken"}
    # a second model shares the run folder
    third = run_eval(ds, ro, "m2", out, workers=0)
    assert set(third["done"]) == {"good", "missing"}


class _SilentServer:
    """Accepts connections and never answers: a judge endpoint that times out."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self.stop = False
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self):
        self.sock.settimeout(0.2)
        while not self.stop:
            try:
                c, _ = self.sock.accept()
                self.conns.append(c)
            except OSError:
                continue

    def close(self):
        self.stop = True
        for c in self.conns:
            c.close()
        self.sock.close()


def test_vlm_timeout_is_an_item_error(tmp_path):
    from worldeval.judge.client import JudgeConfig
    from worldeval.opis.run import run_eval

    ds, ro = tmp_path / "ds", tmp_path / "ro"
    img = one_object_case(ds, "claimy", track="dynamic", claims=[{"family": "parts", "text": "the box has four corners"}])
    _rollout(ro / "claimy.mp4", img)
    srv = _SilentServer()
    try:
        judge = JudgeConfig(model="m", base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="sk-secret-test",
                            timeout_s=0.5, max_attempts=1)
        summary = run_eval(ds, ro, "m1", tmp_path / "run", workers=0, judge=judge)
    finally:
        srv.close()
    assert summary["done"] == []
    (err,) = summary["failed"]
    assert err["case_id"] == "claimy" and err["field"] == "structure.claims"
    for p in (tmp_path / "run").rglob("*.json"):
        assert "sk-secret-test" not in p.read_text()


def test_cli_eval_runs_and_resumes(dataset, tmp_path):
    from typer.testing import CliRunner

    from worldeval.cli import app

    ds, ro = dataset
    out = tmp_path / "cli_run"
    args = ["opis", "eval", "--dataset", str(ds), "--rollouts", str(ro), "--model", "m", "--out", str(out),
            "--workers", "0", "--quiet", "--json"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 1, r.output  # three bad cases: recorded, the good one evaluated, exit non-zero
    summary = json.loads(r.stdout)
    assert summary["done"] == ["good"] and len(summary["failed"]) == 3
    assert (out / "measurements" / "m.parquet").exists()
    r2 = CliRunner().invoke(app, args)
    assert json.loads(r2.stdout)["skipped"] == ["good"]
    # a different config on the same folder is refused (resume guard)...
    other = CliRunner().invoke(app, args + ["--backend-option", "nfeatures=500"])
    assert other.exit_code == 2
    # ...and a bad backend option fails every item with a message naming it
    bad = CliRunner().invoke(app, [a if a != str(out) else str(tmp_path / "bad_run") for a in args] + ["--backend-option", "nfeatures=lots"])
    assert bad.exit_code == 1
    msgs = {e["case_id"]: e["message"] for e in json.loads(bad.stdout)["failed"]}
    assert "nfeatures" in msgs["good"]


def test_a_pasted_copy_is_an_extra_and_the_original_stays_matched(tmp_path):
    from worldeval.opis.archive import validate_archive
    from worldeval.opis.case import load_case
    from worldeval.opis.evaluate import EvalConfig, evaluate_rollout, load_backend

    img = one_object_case(tmp_path / "ds", "dup")
    copy = img.copy()
    copy[40:100, 126:186] = img[40:100, 60:120]
    be = load_backend("classical")
    case = load_case(tmp_path / "ds" / "dup")
    _rollout(tmp_path / "same.mp4", img)
    _rollout(tmp_path / "dup.mp4", copy)
    same = evaluate_rollout(case, tmp_path / "same.mp4", "m", be, EvalConfig())
    dup = evaluate_rollout(case, tmp_path / "dup.mp4", "m", be, EvalConfig())
    for res in (same, dup):
        validate_archive(res.rows)
        ref = res.rows[~res.rows.extra]
        assert ref.matched.all()
    assert not same.rows.extra.any()
    extra = dup.rows[dup.rows.extra]
    assert sorted(extra.frame) == [10, 18, 26]  # one extra per sampled frame
    boxes = [o["box"] for f in dup.frames["frames"] for o in f["objects"] if o["status"] == "extra"]
    assert len(boxes) == 3 and all(abs(b[0] - 126) < 12 for b in boxes), boxes
    # the original keeps its place: the matched box is the one at x = 60
    assert all(abs(o["box"][0] - 60) < 12 for f in dup.frames["frames"] for o in f["objects"] if o["status"] == "matched")
