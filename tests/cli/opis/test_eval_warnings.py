"""What `opis eval` warns about (size, aspect, clip length, camera task), resumed manifests, and flags in help."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from worldeval.media import VideoInfo
from worldeval.opis.case import load_case, write_case
from worldeval.opis.evaluate import rollout_warnings
from worldeval.opis.run import group_warnings

CAMERA = {"description": "hold", "duration_s": 4.0, "fps": 12, "keyframes": [{"t": 0}, {"t": 4}]}


def _plain_case(root: Path, cid: str, w: int = 854, h: int = 480, camera: dict | None = CAMERA):
    img = np.full((h, w, 3), 90, np.uint8)
    mask = np.zeros((h, w), bool)
    mask[h // 4 : h // 2, w // 4 : w // 2] = True
    spec = {"id": cid, "domain": "synthetic", "subcategory": "flat", "image": "input.png", "camera_task": camera,
            "instances": [{"id": "a", "category": "grey box", "kinematics": "rigid", "track": "static"}]}
    write_case(root / cid, spec, img, {"a": mask})
    return load_case(root / cid)


def _info(w: int, h: int, n: int = 48, fps: float = 12.0) -> VideoInfo:
    return VideoInfo("v.mp4", n, fps, w, h, "h264")


def codes(ws: list[dict]) -> list[str]:
    return [w["code"] for w in ws]


def test_a_matching_rollout_has_no_warning(tmp_path):
    case = _plain_case(tmp_path, "c")
    assert rollout_warnings(case, _info(854, 480)) == []
    # an encoder's one-pixel padding of an odd side is not a size difference
    assert rollout_warnings(case, _info(855, 481)) == []


def test_aspect_and_size_mismatch(tmp_path):
    case = _plain_case(tmp_path, "c")
    (w,) = rollout_warnings(case, _info(480, 480))
    assert w["code"] == "aspect_mismatch"
    assert "480x480" in w["message"] and "854x480" in w["message"] and "not resized to I0" in w["message"]
    (w,) = rollout_warnings(case, _info(427, 240))  # half size, same shape
    assert w["code"] == "size_mismatch" and "not resized to I0" in w["message"]
    # within 1 % of I0's aspect ratio: a size difference only
    assert codes(rollout_warnings(case, _info(848, 480))) == ["size_mismatch"]


def test_short_clip_allows_one_frame(tmp_path):
    case = _plain_case(tmp_path, "c")  # 4 s at 12 fps: 48 frames
    assert rollout_warnings(case, _info(854, 480, n=47)) == []
    (w,) = rollout_warnings(case, _info(854, 480, n=46))
    assert w["code"] == "short_clip" and "4 s" in w["message"]
    # the clip length is in seconds: a 4 s clip at another frame rate is not short
    assert rollout_warnings(case, _info(854, 480, n=96, fps=24)) == []


def test_no_camera_task_is_said_once_per_run(tmp_path):
    ws = []
    for cid in ("a", "b", "c", "d"):
        case = _plain_case(tmp_path, cid, camera=None)
        found = rollout_warnings(case, _info(854, 480, n=240, fps=24))  # the default clip: 10 s
        assert codes(found) == ["no_camera_task"]
        ws += [{"model": "m", "case_id": cid, **w} for w in found]
    ws.append({"model": "m", "case_id": "a", "code": "short_clip", "message": "short"})
    grouped = group_warnings(ws)
    assert codes(grouped) == ["short_clip", "no_camera_task"]
    shared = grouped[1]
    assert shared["case_id"] is None and shared["cases"] == ["a", "b", "c", "d"]
    assert shared["message"].startswith("4 cases (a, b, c, ...) have no camera task")
    # one case alone keeps its own entry
    assert group_warnings(ws[:1]) == ws[:1]


def test_timings_accumulate_over_invocations():
    from worldeval.runs import accumulate_timings

    first = accumulate_timings(None, 10.0, {"decode": 1.0, "camera": 2.0}, evaluated=3)
    assert first["invocations"] == 1 and first["stages_s"] == {"decode": 1.0, "camera": 2.0}
    again = accumulate_timings(first, 0.5, {"decode": 0.0, "camera": 0.0}, evaluated=0)
    assert again["invocations"] == 2 and again["wall_s"] == 10.5 and again["stages_s"]["camera"] == 2.0
    assert again["last"] == {"wall_s": 0.5, "stages_s": {"decode": 0.0, "camera": 0.0}, "evaluated": 0}
    # a manifest written before invocations were counted holds one invocation's times
    old = accumulate_timings({"wall_s": 4.0, "stages_s": {"decode": 1.0}}, 1.0, {})
    assert old["invocations"] == 2 and old["wall_s"] == 5.0 and old["stages_s"] == {"decode": 1.0}


@pytest.mark.parametrize("command", [["opis", "eval"], ["opis", "score"], ["demo"]])
def test_flags_show_no_value_in_help(command):
    from typer.testing import CliRunner

    from worldeval.cli import app

    r = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "<bool>" not in r.output
    assert "--quiet" in r.output or command == ["opis", "score"]


@pytest.mark.slow
def test_opis_eval_warns_and_a_resume_keeps_the_totals(tmp_path):
    """Two cases without a camera task: a squeezed rollout and a short one; `opis eval` run twice."""
    import cv2
    from typer.testing import CliRunner

    from worldeval.cli import app
    from worldeval.media import write_video

    from tests.helpers.eval_scene import one_object_case

    ds, ro, out = tmp_path / "ds", tmp_path / "ro", tmp_path / "run"
    img = one_object_case(ds, "squeezed")
    one_object_case(ds, "short")
    h = img.shape[0]
    # 2 s at 10 fps: one sampled frame (10) each; both are shorter than the default 10 s clip
    write_video(ro / "squeezed.mp4", [cv2.resize(img, (h, h), interpolation=cv2.INTER_AREA)] * 20, 10)
    write_video(ro / "short.mp4", [img] * 20, 10)
    args = ["opis", "eval", "--dataset", str(ds), "--rollouts", str(ro), "--model", "m", "--out", str(out),
            "--workers", "0", "--quiet"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "warning: aspect_mismatch: squeezed:" in r.stderr
    assert r.stderr.count("no_camera_task") == 1 and "no_camera_task: 2 cases (short, squeezed) have no camera task" in r.stderr
    assert "warning: short_clip: short:" in r.stderr and "warning: short_clip: squeezed:" in r.stderr
    first = json.loads((out / "manifest.json").read_text())
    assert first["summary"]["done"] == 2
    got = {(w["case_id"], w["code"]) for w in first["warnings"]}
    assert got == {("squeezed", "aspect_mismatch"), ("squeezed", "short_clip"), ("short", "short_clip"),
                   (None, "no_camera_task")}
    assert all(w["message"] for w in first["warnings"])
    status = json.loads((out / "status" / "m" / "squeezed.json").read_text())
    assert set(codes(status["warnings"])) == {"aspect_mismatch", "short_clip", "no_camera_task"}

    r2 = CliRunner().invoke(app, args)
    assert r2.exit_code == 0, r2.output
    assert "0 evaluated, 2 already done" in r2.stdout
    assert "aspect_mismatch" in r2.stderr  # the kept cases' warnings are still the run's
    second = json.loads((out / "manifest.json").read_text())
    assert second["summary"]["done"] == 2 and second["summary"]["evaluated"] == 0 and second["summary"]["skipped"] == 2
    assert second["timings"]["invocations"] == 2
    assert sum(second["timings"]["stages_s"].values()) > 0
    assert second["timings"]["stages_s"] == first["timings"]["stages_s"]  # nothing evaluated: nothing added
    assert second["timings"]["wall_s"] >= first["timings"]["wall_s"]
    assert {(w["case_id"], w["code"]) for w in second["warnings"]} == got


def test_static_instances_missing_in_most_frames_are_flagged():
    from worldeval.opis.evaluate import static_failure_warnings

    def row(frame, iid, track, vis, matched):
        return {"frame": frame, "instance_id": iid, "track": track, "visibility": vis, "matched": matched}

    frames = [{"frame": f, "camera": {"reliable": f != 40}} for f in (24, 32, 40)]
    rows = [row(24, "swan", "static", "expected_visible", False), row(32, "swan", "static", "expected_visible", False),
            row(40, "swan", "static", "expected_visible", True),
            row(24, "mug", "static", "expected_visible", True), row(32, "mug", "static", "expected_visible", False),
            row(40, "mug", "static", "occluded", False),
            row(24, "dog", "dynamic", "expected_visible", False), row(32, "dog", "dynamic", "expected_visible", False)]
    out = static_failure_warnings(rows, frames)
    # swan: missing in 2 of 3 -> flagged; mug: 1 of 2 expected is not more than half; dog is dynamic
    assert [w["code"] for w in out] == ["static_missing"]
    assert "swan in 2 of 3" in out[0]["message"] and "mug" not in out[0]["message"]
    assert "dog" not in out[0]["message"] and "reliable in 2 of those 2" in out[0]["message"]
    assert static_failure_warnings([r for r in rows if r["instance_id"] == "dog"], frames) == []


def test_long_running_commands_take_quiet():
    from typer.testing import CliRunner

    from worldeval.cli import app

    for cmd in (["opis", "eval"], ["opis", "produce"], ["opis", "validate"], ["opis", "audit"], ["opis", "build"],
                ["opis", "cases-from-videos"], ["worldcast", "judge"], ["report"], ["demo"]):
        res = CliRunner().invoke(app, [*cmd, "--help"], env={"COLUMNS": "200"})
        assert "--quiet" in res.output, cmd
