"""`opis cases-from-videos` on the shared real clips, then `opis eval` and `opis score` on its output unchanged."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from worldeval.judge import MockTransport
from worldeval.cli.opis import build as build_cli
from worldeval.opis.cases.annotate import mask_iou
from worldeval.opis.case import load_case
from tests.helpers.paths import SHARED_DATA

DATA = SHARED_DATA
APPLE = DATA / "cotracker_apple"
DAVIS = DATA / "davis_bmx_trees"
TASK = {"camera": "hold", "amount": None, "instruction": "The camera holds still while the scene plays out."}


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"test data not available: {path}")
    return path


def box(mask: np.ndarray) -> list[int]:
    ys, xs = np.nonzero(mask)
    return [int(xs.min()) - 3, int(ys.min()) - 3, int(xs.max() - xs.min()) + 7, int(ys.max() - ys.min()) + 7]


def _answers() -> tuple[dict, np.ndarray]:
    apple = np.asarray(Image.open(need(APPLE) / "apple_mask.png").convert("L")) > 127
    inst = np.asarray(Image.open(need(DAVIS) / "first_frame_instances_davis2017.png"))
    by_size = {
        (720, 1296): {"suitable": True, "reason": "one apple on a textured floor", "objects": [
            {"phrase": "apple", "box": box(apple), "kinematics": "rigid", "moves": False}]},
        (480, 854): {"suitable": True, "reason": "a rider on a bike", "objects": [
            {"phrase": "rider", "box": box(inst == 1), "kinematics": "articulated", "moves": True},
            {"phrase": "bmx bike", "box": box(inst == 2), "kinematics": "rigid", "moves": True}]},
    }
    return by_size, apple


@pytest.mark.slow
def test_cases_from_videos_run_through_eval_and_score(tmp_path, monkeypatch):
    from worldeval.cli import app
    from worldeval.media import decode_frames, write_video

    by_size, apple_gt = _answers()
    videos = tmp_path / "videos"
    videos.mkdir()
    (videos / "apple.mp4").write_bytes((APPLE / "apple.mp4").read_bytes())
    frames = [np.asarray(Image.open(p).convert("RGB")) for p in sorted((DAVIS / "frames").glob("*.jpg"))[:40]]
    write_video(videos / "bmx trees.mp4", frames, 24.0)
    (videos / "notes.mp4").write_bytes(b"this is not a video")

    def vlm(request):
        if "TASK SPECIFICATION" in request.text:
            return TASK
        arr = np.asarray(Image.open(io.BytesIO(request.images[0].data)))
        return by_size[arr.shape[:2]]

    transport = MockTransport(vlm)
    monkeypatch.setattr(build_cli, "vlm_transport", lambda: transport)
    ds, rollouts = tmp_path / "ds", tmp_path / "ds_rollouts"
    res = CliRunner().invoke(app, ["opis", "cases-from-videos", str(videos), "--out", str(ds), "--judge-model",
                                   "scripted-vlm", "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output[res.output.index("{"):])
    assert summary["accepted"] == ["apple", "bmx_trees"] and summary["rollouts"] == str(rollouts)
    (bad,) = summary["failed"]
    assert bad["image"] == "notes" and bad["field"] == "video" and bad["file"].endswith("notes.mp4")
    assert sorted(p.name for p in rollouts.iterdir()) == ["apple.mp4", "bmx_trees.mp4"]
    assert (rollouts / "apple.mp4").read_bytes() == (APPLE / "apple.mp4").read_bytes()
    apple = load_case(ds / "apple")
    assert np.array_equal(apple.image, decode_frames(APPLE / "apple.mp4", [0]).frames[0])  # I0 = frame 0
    assert mask_iou(apple.masks["obj_001"], apple_gt) >= 0.8
    bmx = load_case(ds / "bmx_trees")
    assert sorted((i.category, i.track) for i in bmx.instances) == [("bmx bike", "dynamic"), ("rider", "dynamic")]

    run = tmp_path / "run"
    res = CliRunner().invoke(app, ["opis", "eval", "--dataset", str(ds), "--rollouts", str(rollouts), "--model",
                                   "my-i2v", "--out", str(run), "--workers", "0", "--quiet", "--json"])
    assert res.exit_code == 0, res.output
    assert not json.loads(res.output)["failed"]
    res = CliRunner().invoke(app, ["opis", "score", str(run), "--json", "--bootstrap", "0"])
    assert res.exit_code == 0, res.output
    scored = json.loads(res.output)
    assert sorted(c["case_id"] for c in scored["cases"]) == ["apple", "bmx_trees"]
    assert scored["models"]["my-i2v"]["OPIS"] is not None
    # a rerun keeps the finished cases and does not ask the VLM again
    n = transport.count()
    res = CliRunner().invoke(app, ["opis", "cases-from-videos", str(videos), "--out", str(ds), "--judge-model",
                                   "scripted-vlm", "--json"])
    assert res.exit_code == 0 and transport.count() == n
