"""`worldeval opis validate` wiring: synthesis -> run_eval per intervention -> scoring -> table/JSON.

The perception step is replaced by an oracle that writes what a correct
evaluator would measure (from the synthetic ground truth), so this test checks
the command's plumbing and resume behaviour fast; the real evaluator is
exercised by test_validate_e2e.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from worldeval.media import probe_video, sample_frame_indices
from worldeval.opis.archive import COLUMNS, write_case_part
from worldeval.opis.case import load_case

from tests.helpers.synth_scene import synth_case


CALLS: list[str] = []


def _oracle_run_eval(dataset, rollouts, model, out, **kw):
    """Writes, per rollout, the rows an ideal evaluator produces for intervention `model`."""
    CALLS.append(model)
    rollouts, out = Path(rollouts), Path(out)
    synth_dir = rollouts.parent.parent / "synth"
    for video in sorted(rollouts.glob("*.mp4")):
        cid = video.stem
        case = load_case(Path(dataset) / cid)
        rec = json.loads((synth_dir / f"{cid}.json").read_text())
        tid = rec["target"]["instance_id"]
        gt = rec["ground_truth"]
        # a moved or resized target is in view where the edit put it
        share = gt[f"{model}_in_view_share"] if model in ("moved", "resized") else gt["target_in_view_share"]
        info = probe_video(video)
        rows = []
        for f in sample_frame_indices(info.num_frames, info.fps):
            for inst in case.instances:
                vis, matched, a, s = "expected_visible", model != "other_scene", 0.9, 0.9
                if inst.id == tid:
                    if share[f] < 0.75:
                        vis, matched = "out_of_view", False
                    elif model == "removed":
                        matched = False
                    a = 0.5 if model == "recoloured" else a
                    s = 0.3 if model in ("squeezed", "moved", "resized") else s
                rows.append(dict(model=model, case_id=cid, domain="test", subcategory="synthetic",
                                 n_reference=len(case.instances), frame=f, time_s=f / info.fps, instance_id=inst.id,
                                 track=inst.track, visibility=vis, matched=matched, ambiguous=False, extra=False,
                                 appearance=a if matched else None, structure=s if matched else None,
                                 structure_source="static" if matched else None))
            if model in ("duplicated", "pasted"):
                rows.append(dict(model=model, case_id=cid, domain="test", subcategory="synthetic",
                                 n_reference=len(case.instances), frame=f, time_s=f / info.fps, instance_id=None,
                                 track=None, visibility=None, matched=False, ambiguous=False, extra=True,
                                 appearance=None, structure=None, structure_source=None))
        write_case_part(out, model, cid, pd.DataFrame(rows, columns=list(COLUMNS)))
        (out / "status" / model).mkdir(parents=True, exist_ok=True)
    return {"done": [], "skipped": [], "failed": []}


@pytest.mark.slow
def test_validate_command_end_to_end_with_oracle(tmp_path, monkeypatch):
    import worldeval.opis.checks.validate as validate
    from worldeval.cli import app

    monkeypatch.setattr(validate, "run_eval", _oracle_run_eval)
    ds = tmp_path / "ds"
    synth_case(ds, seed=0, name="a")
    synth_case(ds, seed=3, name="b")
    out = tmp_path / "out"
    args = ["opis", "validate", "--dataset", str(ds), "--out", str(out), "--seconds", "2", "--fps", "12", "--strict"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "pass rate" in res.output
    result = json.loads((out / "validate.json").read_text())
    assert result["all_ok"]
    assert {k: v["passed"] for k, v in result["pass_rates"].items()} == {
        k: 2 for k in ("faithful", "removed", "recoloured", "squeezed", "duplicated", "other_scene", "moved", "resized", "pasted")
    }
    # --camera cycle (the default): the two cases are seen along the first two camera paths
    assert [json.loads((out / "synth" / f"{c}.json").read_text())["camera_path"] for c in ("a", "b")] == ["pan", "tilt"]
    for cid in ("a", "b"):
        assert (out / "rollouts" / "faithful" / f"{cid}.mp4").exists()
        assert (out / "synth" / f"{cid}.json").exists()
    # rerun: rollouts are not rendered again (same settings), the result is the same
    mtime = (out / "rollouts" / "removed" / "a.mp4").stat().st_mtime_ns
    CALLS.clear()
    res = CliRunner().invoke(app, args + ["--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["pass_rates"] == result["pass_rates"]
    assert (out / "rollouts" / "removed" / "a.mp4").stat().st_mtime_ns == mtime
    assert sorted(CALLS) == sorted(["faithful", "removed", "recoloured", "squeezed", "duplicated", "other_scene", "moved",
                                    "resized", "pasted"])


def test_validate_command_rejects_bad_options(tmp_path):
    from worldeval.cli import app

    res = CliRunner().invoke(app, ["opis", "validate", "--dataset", str(tmp_path), "--target-policy", "biggest"])
    assert res.exit_code != 0
    res = CliRunner().invoke(app, ["opis", "validate", "--dataset", str(tmp_path), "--seconds", "1"])
    assert res.exit_code != 0
    res = CliRunner().invoke(app, ["opis", "validate", "--dataset", str(tmp_path), "--camera", "dolly"])
    assert res.exit_code != 0 and "camera" in res.output
    res = CliRunner().invoke(app, ["opis", "validate"])
    assert res.exit_code != 0 and "--dataset" in res.output


def test_plane_depth_option_reaches_the_validate_config(tmp_path, monkeypatch):
    import worldeval.opis.checks.validate as V
    from worldeval.cli import app

    seen = []

    def fake_run_validate(dataset, out, cfg, log=print):
        seen.append(cfg.plane_depth)
        return {"cases": {}, "pass_rates": {"faithful": {"passed": 0, "cases": 0, "ok": True, "required": 0.9}}}

    monkeypatch.setattr(V, "run_validate", fake_run_validate)
    for extra, want in (([], False), (["--plane-depth"], True)):
        res = CliRunner().invoke(app, ["opis", "validate", "--dataset", str(tmp_path), "--out", str(tmp_path / "o"), "--json", *extra])
        assert res.exit_code == 0, res.output
        assert seen[-1] is want
