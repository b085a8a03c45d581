"""`opis validate` on real clips: interventions inside per-frame masks, and verdicts from the archive alone."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pandas as pd
import pytest

from worldeval.opis.archive import COLUMNS
from worldeval.opis.checks.validate_real import (
    ClipThresholds,
    GTClip,
    clip_measurements,
    frame_states,
    judge_clip,
    load_gt_clip,
    synthesize_clip,
)
from tests.helpers.paths import SHARED_DATA

DATA = SHARED_DATA


def _clip(root: Path, name="moving", n=30, seed=0, colour=(200, 40, 40)) -> GTClip:
    """A still textured scene with a disc that moves right, then leaves the frame after frame 24;
    written as a DAVIS-like folder (PNG frames, 0/255 masks) and loaded back."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    bg = cv2.resize(rng.normal(0, 1, (15, 20, 3)), (160, 120), interpolation=cv2.INTER_CUBIC)
    base = np.clip(128 + 40 * bg, 0, 255).astype(np.uint8)
    yy, xx = np.mgrid[0:120, 0:160]
    for t in range(n):
        m = (xx - (40 + 3 * t)) ** 2 + (yy - 60) ** 2 <= 15**2 if t <= 24 else np.zeros((120, 160), bool)
        img = base.copy()
        img[m] = colour
        (root / name / "frames").mkdir(parents=True, exist_ok=True)
        (root / name / "masks").mkdir(parents=True, exist_ok=True)
        Image.fromarray(img).save(root / name / "frames" / f"{t:05d}.png")
        Image.fromarray(m.astype(np.uint8) * 255).save(root / name / "masks" / f"{t:05d}.png")
    return load_gt_clip(root / name)


def test_synthesised_clip_edits_stay_inside_the_masks(tmp_path):
    from worldeval.media import decode_frames

    clip, other = _clip(tmp_path / "clips"), _clip(tmp_path / "clips", "other", seed=3, colour=(40, 40, 220))
    assert len(clip.frames) == 30 and clip.masks[10].sum() > 600 and not clip.masks[26].any()
    rec = synthesize_clip(clip, other, tmp_path / "out")
    assert set(rec["videos"]) == {"faithful", "removed", "recoloured", "pasted"} and rec["skipped"] == {}
    assert rec["target_area"][25:] == [0.0] * 5 and rec["target_box"][25] is None
    k = 10
    m = clip.masks[k]
    rem = decode_frames(rec["videos"]["removed"], indices=[k]).frames[0].astype(int)
    faithful = decode_frames(rec["videos"]["faithful"], indices=[k]).frames[0].astype(int)
    rec_ = decode_frames(rec["videos"]["recoloured"], indices=[k]).frames[0].astype(int)
    # removed: no red left where the disc was; away from the dilated mask the frame is the faithful one (same codec)
    assert rem[m][:, 0].mean() < 170
    far = ~cv2.dilate(m.astype(np.uint8), np.ones((41, 41), np.uint8)).astype(bool)
    assert np.abs(rem[far] - faithful[far]).mean() < 1.5
    # recoloured: the disc is no longer red
    assert rec_[m][:, 0].mean() < 150
    # pasted: the other clip's blue disc sits where the record says, in every frame (the camera is still)
    p = rec["pasted"]
    x, y, w, h = p["bbox"]
    pas = decode_frames(rec["videos"]["pasted"], indices=[0, 20]).frames
    for img in pas:
        patch = img[y : y + h, x : x + w].astype(int)
        assert (patch[..., 2] - patch[..., 0]).max() > 120
    assert p["from_clip"] == "other" and set(p["in_view_share"]) == {1.0}


def _rows(model, frames, matched, appearance=0.8, extras=()):
    out = []
    for f in frames:
        ok = f in matched
        out.append(dict(model=model, case_id="c", domain="d", subcategory="s", n_reference=1, frame=f, time_s=f / 24,
                        instance_id="target", track="dynamic", visibility="expected_visible" if ok else "unknown",
                        matched=ok, ambiguous=False, extra=False, appearance=appearance if ok else None,
                        structure=None, structure_source=None))
        if f in extras:
            out.append(dict(model=model, case_id="c", domain="d", subcategory="s", n_reference=1, frame=f, time_s=f / 24,
                            instance_id=None, track=None, visibility=None, matched=False, ambiguous=False, extra=True,
                            appearance=None, structure=None, structure_source=None))
    return pd.DataFrame(out, columns=list(COLUMNS))


def _record():
    # frames 24..56 sampled; the object shows at 24-40, is half-hidden (unclear) at 48 and gone at 56
    area = [0.05] * 64
    area[48], area[56] = 0.004, 0.0
    box = [[10, 10, 20, 20]] * 64
    return {"target_area": area, "target_box": box, "pasted": {"in_view_share": [1.0] * 64}}


def _frames_rec(boxes):
    return {"frames": [{"frame": f, "objects": [{"instance_id": "target", "status": "matched", "box": b}]} for f, b in boxes.items()]}


def test_association_agreement_counts_box_overlap_and_gone_frames():
    th = ClipThresholds()
    rec = _record()
    states = frame_states(rec, th)
    assert (states[24], states[48], states[56]) == ("shows", "unclear", "gone")
    frames = [24, 32, 40, 48, 56]
    # matched at 24, 32 (good boxes), 40 (box elsewhere: IoU 0), 56 (gone, so a wrong match)
    rows = _rows("faithful", frames, {24, 32, 40, 56})
    fr = _frames_rec({24: [10, 10, 20, 20], 32: [12, 12, 20, 20], 40: [80, 80, 20, 20], 56: [10, 10, 20, 20]})
    m = clip_measurements(rows, fr, rec, th)
    # decisions: 3 "shows" frames + 1 "gone" frame; agreed: 24 (IoU 1), 32 (IoU 324/476 = 0.68)
    assert m["association_decisions"] == 4 and m["association_agreed"] == 2
    assert m["matched_share_where_shows"] == 1.0
    # a match somewhere else is not the object: the faithful check counts only matches on it (2 of 3 < 80%)
    assert m["on_target_frames"] == [24, 32]
    ok, why = judge_clip("faithful", m, None, th)
    assert not ok and "in 67% of frames" in why


def test_clip_verdicts_follow_the_measurements():
    th = ClipThresholds()
    rec = _record()
    frames = [24, 32, 40, 48, 56]
    fr = _frames_rec({f: [10, 10, 20, 20] for f in frames})
    base = clip_measurements(_rows("faithful", frames, {24, 32, 40}, 0.8), fr, rec, th)
    assert judge_clip("faithful", base, None, th)[0]
    # removed: matched in 1 of 3 showing frames (33% > 20%): fail; in none: pass
    assert not judge_clip("removed", clip_measurements(_rows("removed", frames, {24}), fr, rec, th), base, th)[0]
    assert judge_clip("removed", clip_measurements(_rows("removed", frames, set()), fr, rec, th), base, th)[0]
    # recoloured: kept in 2/3 with appearance 0.8 -> 0.6 passes; dropping out of every frame fails
    ok, why = judge_clip("recoloured", clip_measurements(_rows("recoloured", frames, {24, 32}, 0.6), fr, rec, th), base, th)
    assert ok, why
    assert "appearance drop 0.200" in why
    assert not judge_clip("recoloured", clip_measurements(_rows("recoloured", frames, set()), fr, rec, th), base, th)[0]
    assert not judge_clip("recoloured", clip_measurements(_rows("recoloured", frames, {24, 32}, 0.75), fr, rec, th), base, th)[0]
    # pasted: extras in 3/5 frames with the object in view (> 50%) passes, 2/5 fails
    assert judge_clip("pasted", clip_measurements(_rows("pasted", frames, {24}, extras={24, 32, 40}), fr, rec, th), base, th)[0]
    assert not judge_clip("pasted", clip_measurements(_rows("pasted", frames, {24}, extras={24, 32}), fr, rec, th), base, th)[0]


def test_loads_a_davis_clip_and_names_a_missing_mask(tmp_path):
    folder = DATA / "davis2016_more" / "blackswan"
    if not folder.exists():
        pytest.skip("shared data not present")
    clip = load_gt_clip(folder, max_frames=3)
    assert len(clip.frames) == len(clip.masks) == 3 and clip.category == "swan"
    assert clip.frames[0].shape == (480, 854, 3) and clip.masks[0].dtype == bool
    assert 0.05 < clip.masks[0].mean() < 0.2  # the swan fills ~10% of the frame
    from worldeval.errors import InputError

    (tmp_path / "bad" / "frames").mkdir(parents=True)
    (tmp_path / "bad" / "masks").mkdir()
    cv2.imwrite(str(tmp_path / "bad" / "frames" / "00000.jpg"), np.zeros((8, 8, 3), np.uint8))
    with pytest.raises(InputError, match="00000.png"):
        load_gt_clip(tmp_path / "bad")
    cv2.imwrite(str(tmp_path / "bad" / "masks" / "00000.png"), np.full((8, 8), 255, np.uint8))
    cv2.imwrite(str(tmp_path / "bad" / "frames" / "00001.jpg"), np.zeros((8, 8, 3), np.uint8))
    with pytest.raises(InputError, match="1 frame.s. have no mask"):
        load_gt_clip(tmp_path / "bad")


def test_holdout_split_is_disjoint_and_covers_the_shared_data():
    from worldeval.opis.checks import holdout

    for coll in set(holdout.TUNING) & set(holdout.REPORTING):
        assert not set(holdout.TUNING[coll]) & set(holdout.REPORTING[coll]), coll
    assert holdout.part_of("coco_multiobj", "000000000142") == "reporting"
    assert holdout.part_of("coco_multiobj", "000000000009") == "tuning"
    assert holdout.part_of("davis2016_more", "dog") == "reporting"
    with pytest.raises(ValueError, match="neither part"):
        holdout.part_of("coco_multiobj", "000000000001")
    if DATA.exists():
        for d in DATA.iterdir():
            if d.is_dir():
                holdout.part_of(d.name, next(iter(holdout.TUNING.get(d.name, holdout.REPORTING.get(d.name, ("?",))))))
        coco = {p.stem for p in (DATA / "coco_multiobj" / "images").glob("*.jpg")}
        assert coco == set(holdout.TUNING["coco_multiobj"]) | set(holdout.REPORTING["coco_multiobj"])


def _oracle_clip_eval(dataset, rollouts, model, out, **kw):
    """What a correct evaluator writes for each clip rollout: rows and per-frame records from the ground truth."""
    import json as _json

    from worldeval.media import probe_video, sample_frame_indices
    from worldeval.opis.archive import write_case_part

    rollouts, out = Path(rollouts), Path(out)
    for video in sorted(rollouts.glob("*.mp4")):
        cid = video.stem
        rec = _json.loads((rollouts.parent.parent / "synth" / f"{cid}.json").read_text())
        info = probe_video(video)
        frames = sample_frame_indices(info.num_frames, info.fps)
        shows = {f for f in frames if rec["target_area"][f] > 0}
        matched = set() if model == "removed" else shows
        extras = set(frames) if model == "pasted" else ()
        rows = _rows(model, frames, matched, 0.5 if model == "recoloured" else 0.8, extras)
        rows["case_id"] = cid
        write_case_part(out, model, cid, rows)
        objs = [{"frame": f, "objects": [{"instance_id": "target", "status": "matched" if f in matched else "missing",
                                         "box": rec["target_box"][f]}]} for f in frames]
        (out / "frames" / model).mkdir(parents=True, exist_ok=True)
        (out / "frames" / model / f"{cid}.json").write_text(_json.dumps({"frames": objs}))
    return {"done": [], "skipped": [], "failed": []}


@pytest.mark.slow
def test_validate_command_on_clips_with_an_ideal_evaluator(tmp_path, monkeypatch):
    import json as _json

    from typer.testing import CliRunner

    import worldeval.opis.checks.validate_real as validate_real
    from worldeval.cli import app

    monkeypatch.setattr(validate_real, "run_eval", _oracle_clip_eval)
    a, b = _clip(tmp_path / "clips", "a", n=49), _clip(tmp_path / "clips", "b", n=49, seed=3, colour=(40, 40, 220))
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["opis", "validate", "--clip", str(tmp_path / "clips" / "a"), "--clip",
                                   str(tmp_path / "clips" / "b"), "--out", str(out), "--strict"])
    assert res.exit_code == 0, res.output
    result = _json.loads((out / "clips" / "validate_clips.json").read_text())
    assert {k: v["passed"] for k, v in result["pass_rates"].items()} == {"faithful": 2, "removed": 2, "recoloured": 2, "pasted": 2}
    m = result["clips"]["a"]["checks"]["faithful"]["measurements"]
    # 49 frames at 24 fps: sampled 24 (the disc shows), 32, 40, 48 (it is gone); every decision agrees
    assert (m["sampled_frames"], m["shows_frames"], m["gone_frames"]) == (4, 1, 3)
    assert m["association_agreed"] == m["association_decisions"] == 4


def test_pingpong_plays_every_kth_frame_forward_and_back_at_the_clips_length():
    from worldeval.opis.checks.validate_real import pingpong

    assert pingpong(10, 3) == [0, 3, 6, 9, 6, 3, 0, 3, 6, 9]
    assert pingpong(6, 1) == list(range(6))
    assert pingpong(5, 4) == [0, 4, 0, 4, 0]
    assert pingpong(3, 5) == [0, 0, 0]  # one frame a pass: the clip stands still


def test_a_sped_up_clip_loads_with_its_masks_in_the_new_order(tmp_path):
    from worldeval.opis.checks.validate_real import speed_up_clip

    clip = _clip(tmp_path, n=12)
    fast = load_gt_clip(speed_up_clip(tmp_path / "moving", 3, tmp_path / "x3"))
    assert fast.name == "moving" and len(fast.frames) == 12
    for j, i in enumerate([0, 3, 6, 9, 6, 3, 0, 3, 6, 9, 6, 3]):
        assert np.array_equal(fast.frames[j], clip.frames[i]) and np.array_equal(fast.masks[j], clip.masks[i]), j
    (tmp_path / "bad" / "frames").mkdir(parents=True)
    (tmp_path / "bad" / "masks").mkdir()
    for k in range(3):
        (tmp_path / "bad" / "frames" / f"{k:05d}.jpg").write_bytes(b"")
    with pytest.raises(Exception, match="masks"):
        speed_up_clip(tmp_path / "bad", 2, tmp_path / "x2")


def test_two_clip_folders_of_one_name_are_refused_naming_both(tmp_path):
    from worldeval.opis.checks.gtclips import GTError
    from worldeval.opis.checks.validate_real import synthesize_clips

    a, b = tmp_path / "x" / "moving", tmp_path / "y" / "moving"
    with pytest.raises(GTError, match="moving") as err:
        synthesize_clips([a, tmp_path / "z" / "other", b], tmp_path / "out", log=lambda *_: None)
    assert str(a) in str(err.value) and str(b) in str(err.value)
    assert not (tmp_path / "out").exists()  # refused before anything is rendered
