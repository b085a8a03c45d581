"""Keyframe selection on synthetic videos with known change points (both selectors)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from worldeval.media import write_video
from worldeval.worldcast.keyframes import (
    AgenticSelector, ChangePointSelector, KeyframeError, optimal_segments, write_keyframes,
)

FPS = 10.0


def scene(kind: int, t: int, h=64, w=96) -> np.ndarray:
    """Distinct world states with a little motion and noise inside each state."""
    rng = np.random.default_rng(1000 * kind + t)
    img = np.full((h, w, 3), (40 + 50 * kind, 200 - 40 * kind, 90 + 30 * (kind % 2)), np.uint8)
    x = 10 + 20 * kind + (t % 3)
    img[20:44, x:x + 16] = (250, 250, 250) if kind % 2 else (10, 10, 10)
    return np.clip(img.astype(int) + rng.integers(-4, 5, img.shape), 0, 255).astype(np.uint8)


def make_video(path, lengths, fade=0):
    """Segments of the given frame counts; `fade` frames of crossfade between segments (counted in neither)."""
    frames, bounds = [], []
    for k, n in enumerate(lengths):
        if k and fade:
            a, b = scene(k - 1, 0), scene(k, 0)
            for i in range(1, fade + 1):
                alpha = i / (fade + 1)
                frames.append(((1 - alpha) * a + alpha * b).astype(np.uint8))
        start = len(frames)
        frames += [scene(k, t) for t in range(n)]
        bounds.append((start, len(frames) - 1))
    write_video(path, frames, FPS)
    return bounds


def test_optimal_segments_exact_on_piecewise_constant():
    x = np.concatenate([np.full((5, 2), 0.0), np.full((3, 2), 5.0), np.full((7, 2), 1.0)])
    assert optimal_segments(x, 3) == [(0, 5), (5, 8), (8, 15)]
    with pytest.raises(ValueError):
        optimal_segments(x[:2], 3)


@pytest.mark.parametrize("lengths,fade", [((12, 7, 15, 9), 0), ((10, 10, 10), 4)])
def test_changepoint_selector_picks_one_frame_per_segment(tmp_path, lengths, fade):
    video = tmp_path / "video.mp4"
    bounds = make_video(video, lengths, fade)
    sel = ChangePointSelector().select(video, len(lengths))
    idx = [s["frame_index"] for s in sel.steps]
    for (a, b), i in zip(bounds, idx):
        assert a <= i <= b, (bounds, idx)
    ts = [s["timestamp_seconds"] for s in sel.steps]
    assert all(t2 > t1 for t1, t2 in zip(ts, ts[1:]))
    assert ts == pytest.approx([i / FPS for i in idx])
    assert all(s["achieved"] is None for s in sel.steps)  # a heuristic does not claim achievement
    paths = write_keyframes(sel, tmp_path / "kf")
    assert [p.name for p in paths] == [f"step_{k}.jpg" for k in range(1, len(lengths) + 1)]
    rec = json.loads((tmp_path / "kf" / "selection.json").read_text())
    assert rec["selector"] == "changepoint" and len(rec["steps"]) == len(lengths)
    # The saved keyframe shows its segment's state (mean colour close to the clean scene).
    for k, p in enumerate(paths):
        got = np.asarray(Image.open(p).convert("RGB")).astype(float)
        assert np.abs(got - scene(k, 0)).mean() < 12


def test_too_short_video_is_an_error(tmp_path):
    video = tmp_path / "v.mp4"
    make_video(video, (2,))
    with pytest.raises(KeyframeError, match="cannot pick 4"):
        ChangePointSelector().select(video, 4)


def test_cli_keyframes(tmp_path):
    from typer.testing import CliRunner

    from worldeval.cli import app

    video = tmp_path / "v.mp4"
    make_video(video, (6, 6))
    res = CliRunner().invoke(app, ["worldcast", "keyframes", str(video), "--steps", "2", "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "o" / "step_2.jpg").is_file() and "step 2" in res.stdout


def test_agentic_selector_contract(tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_judge_client import FakeJudge
    from worldeval.judge import JudgeClient, JudgeConfig
    from worldeval.worldcast.cases import WorldCastCase

    video = tmp_path / "video.mp4"
    bounds = make_video(video, (10, 10, 10))
    replies = []

    def answer(info):
        info["key"] = "kf"
        assert info["metric"] == "KEYFRAMES"
        assert "pour the water" in info["text"]
        assert len(info["images"]) == 16  # sampled frames, no references in this case
        return replies.pop(0)

    srv = FakeJudge(answer)
    try:
        client = JudgeClient(JudgeConfig(model="vlm", base_url=srv.base_url, api_key="k", timeout_s=2,
                                         max_attempts=3, backoff_base_s=0.01))
        case = WorldCastCase("c", "physical_simulation", "L3", "pour the water", [], 3)
        good = {"steps": [
            {"step": 1, "timestamp_seconds": 0.4, "filename": "step_1.jpg", "achieved": True, "evidence": "a"},
            {"step": 2, "timestamp_seconds": 1.5, "filename": "step_2.jpg", "achieved": True, "evidence": "b"},
            {"step": 3, "timestamp_seconds": 2.5, "filename": "step_3.jpg", "achieved": False, "evidence": "c"}],
            "overall_notes": "fine"}
        not_increasing = json.loads(json.dumps(good))
        not_increasing["steps"][2]["timestamp_seconds"] = 1.0
        too_few = {"steps": good["steps"][:2]}
        replies[:] = [not_increasing, too_few, good]
        sel = AgenticSelector(client).select(video, 3, case)
        assert srv.count() == 3
        assert [s["frame_index"] for s in sel.steps] == [4, 15, 25]
        assert [s["achieved"] for s in sel.steps] == [True, True, False]
        for (a, b), s in zip(bounds, sel.steps):
            assert a <= s["frame_index"] <= b
        write_keyframes(sel, tmp_path / "kf")
        assert json.loads((tmp_path / "kf" / "selection.json").read_text())["selector"] == "agentic"
        # Three broken answers in a row: a clear failure, never evenly spaced guesses.
        replies[:] = [too_few, too_few, too_few]
        client2 = JudgeClient(JudgeConfig(model="vlm", base_url=srv.base_url, api_key="k", timeout_s=2,
                                          max_attempts=3, backoff_base_s=0.01, seed=1))
        with pytest.raises(KeyframeError, match="agentic keyframe selection failed"):
            AgenticSelector(client2).select(video, 3, case)
    finally:
        srv.close()


def test_video_output_through_the_adapter(tmp_path):
    from worldeval.worldcast.adapters import adapt_output
    from worldeval.worldcast.cases import WorldCastCase

    case = WorldCastCase("v1", "physical_simulation", "L3", "x", [], 3)
    (tmp_path / "outs" / "v1").mkdir(parents=True)
    bounds = make_video(tmp_path / "outs" / "v1" / "video.mp4", (8, 9, 8))
    seq = adapt_output(case, tmp_path / "outs", tmp_path / "states")
    assert seq.interface == "video" and [p.name for p in seq.images] == ["step_1.jpg", "step_2.jpg", "step_3.jpg"]
    rec = json.loads((tmp_path / "states" / "adapter.json").read_text())
    for (a, b), s in zip(bounds, rec["selection"]["steps"]):
        assert a <= s["frame_index"] <= b
