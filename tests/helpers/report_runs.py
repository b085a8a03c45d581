"""Small, fully known run folders for the report tests (no tests in this module).

OPIS: two cases, two models ("steady" keeps every object, "leaky" loses one,
adds an extra and lets an identity fall below tau_I), archives written through
the archive module, per-frame records, real H.264 rollouts.
WorldCast: two cases judged in the format of worldeval.worldcast.judging.run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from worldeval.media import write_video
from worldeval.opis.archive import COLUMNS, consolidate, write_case_part
from worldeval.opis.case import write_case
from worldeval.runs import append_jsonl, atomic_write_json

H, W, FPS, N_FRAMES = 96, 128, 16, 48  # samples at frames 16, 24, 32, 40
SAMPLES = [16, 24, 32, 40]
BOX_A = [10, 20, 30, 25]  # red block
BOX_B = [70, 40, 40, 30]  # blue block
BOX_EXTRA = [50, 70, 16, 12]


def case_image() -> np.ndarray:
    img = np.full((H, W, 3), 200, np.uint8)
    x, y, w, h = BOX_A
    img[y:y + h, x:x + w] = (200, 30, 30)
    x, y, w, h = BOX_B
    img[y:y + h, x:x + w] = (30, 30, 200)
    return img


def _mask(box) -> np.ndarray:
    m = np.zeros((H, W), bool)
    x, y, w, h = box
    m[y:y + h, x:x + w] = True
    return m


def make_dataset(root: Path) -> Path:
    ds = root / "dataset"
    img = case_image()
    for cid, dom, sub, boxes in (("case_a", "real_world", "home_indoor", {"obj_a": BOX_A, "obj_b": BOX_B}),
                                 ("case_b", "game", "pixel", {"obj_a": BOX_A})):
        spec = {"id": cid, "domain": dom, "subcategory": sub, "image": "input.png",
                "instruction": f"slow pan across {cid}",
                "instances": [{"id": k, "category": "block", "kinematics": "rigid", "track": "static"} for k in boxes]}
        write_case(ds / cid, spec, img, {k: _mask(b) for k, b in boxes.items()})
    (ds / "dataset.json").write_text(json.dumps({"name": "tiny", "version": "1", "cases": ["case_a", "case_b"]}))
    return ds


def _row(model, case_id, frame, inst, **kw):
    dom, sub, n_ref = {"case_a": ("real_world", "home_indoor", 2), "case_b": ("game", "pixel", 1)}[case_id]
    base = {"model": model, "case_id": case_id, "domain": dom, "subcategory": sub, "n_reference": n_ref,
            "frame": frame, "time_s": frame / FPS, "instance_id": inst, "track": "static" if inst else None,
            "visibility": "expected_visible" if inst else None, "matched": bool(inst), "ambiguous": False,
            "extra": inst is None, "appearance": None, "structure": None,
            "structure_source": None}
    base.update(kw)
    if base["structure"] is not None and base["structure_source"] is None:
        base["structure_source"] = "static"
    return base


def steady_rows(case_id: str) -> list[dict]:
    insts = ["obj_a", "obj_b"] if case_id == "case_a" else ["obj_a"]
    return [_row("steady", case_id, f, i, appearance=0.9, structure=0.8) for f in SAMPLES for i in insts]


# leaky / case_a, frame by frame (the expected per-frame series is in LEAKY_SERIES):
#  16: both matched, a = (0.8, 0.6), s = (0.9, 0.7)       -> P 100, I 70, S 80
#  24: obj_b missing + one extra; a_a = 0.8, s_a = 0.5     -> P 0,   I 80, S 50
#  32: both matched, a = (0.3, 0.9) (0.3 < tau_I), no s    -> P 100, I 0,  S undefined
#  40: obj_a occluded, obj_b matched a = 0.5, s = 0.2      -> P 100, I 50, S 0 (0.2 < tau_S)
def leaky_rows(case_id: str) -> list[dict]:
    if case_id == "case_b":
        return [_row("leaky", "case_b", f, "obj_a", appearance=0.6, structure=0.6) for f in SAMPLES]
    r = _row
    return [
        r("leaky", "case_a", 16, "obj_a", appearance=0.8, structure=0.9),
        r("leaky", "case_a", 16, "obj_b", appearance=0.6, structure=0.7),
        r("leaky", "case_a", 24, "obj_a", appearance=0.8, structure=0.5),
        r("leaky", "case_a", 24, "obj_b", matched=False),
        r("leaky", "case_a", 24, None),
        r("leaky", "case_a", 32, "obj_a", appearance=0.3),
        r("leaky", "case_a", 32, "obj_b", appearance=0.9),
        r("leaky", "case_a", 40, "obj_a", visibility="occluded", matched=False),
        r("leaky", "case_a", 40, "obj_b", appearance=0.5, structure=0.2),
    ]


LEAKY_SERIES = {"frame": SAMPLES, "P": [100.0, 0.0, 100.0, 100.0], "I": [70.0, 80.0, 0.0, 50.0],
                "S": [80.0, 50.0, None, 0.0]}


def _frames_record(model: str, case_id: str, video: str, case_dir: str) -> dict:
    frames = []
    for f in SAMPLES:
        objs = [{"instance_id": "obj_a", "category": "block", "status": "matched", "box": BOX_A,
                 "appearance": 0.8, "structure": 0.9}]
        if case_id == "case_a":
            st_b = "missing" if (model == "leaky" and f == 24) else "matched"
            objs.append({"instance_id": "obj_b", "category": "block", "status": st_b, "box": BOX_B,
                         "appearance": None, "structure": None})
            if model == "leaky" and f == 24:
                objs.append({"instance_id": None, "category": None, "status": "extra", "box": BOX_EXTRA,
                             "appearance": None, "structure": None})
        frames.append({"frame": f, "time_s": f / FPS, "objects": objs})
    return {"model": model, "case_id": case_id, "video": video, "case_dir": case_dir, "fps": FPS,
            "num_frames": N_FRAMES, "frames": frames}


def _write_rollout(root: Path, run: Path, ds: Path, model: str, cid: str, with_frames: bool,
                   relative_video: bool) -> None:
    """One evaluated (model, case) in `run`: archive part, rollout video, frames and status records."""
    rows = steady_rows(cid) if model != "leaky" else leaky_rows(cid)
    rows = [{**r, "model": model} for r in rows]
    write_case_part(run, model, cid, pd.DataFrame(rows, columns=list(COLUMNS)))
    video = root / "rollouts" / model / f"{cid}.mp4"
    img = case_image()
    # a slowly brightening copy of I0, so decoded frames differ from each other
    write_video(video, [np.clip(img.astype(int) + k, 0, 255).astype(np.uint8) for k in range(N_FRAMES)], FPS)
    if with_frames:
        vpath = os.path.relpath(video, run) if relative_video else str(video)
        atomic_write_json(run / "frames" / model / f"{cid}.json", _frames_record(model, cid, vpath, str(ds / cid)))
    atomic_write_json(run / "status" / model / f"{cid}.json",
                      {"model": model, "case_id": cid, "status": "done", "error": None,
                       "config_hash": "x", "timings": {}})


def make_opis_run(root: Path, with_frames: bool = True) -> Path:
    """An `opis eval`-shaped run folder with models steady and leaky on case_a and case_b."""
    ds = make_dataset(root)
    run = root / "run_opis"
    for model in ("steady", "leaky"):
        for cid in ("case_a", "case_b"):
            # one record with a relative video path (resolved against the run folder), the rest absolute
            _write_rollout(root, run, ds, model, cid, with_frames, relative_video=(model, cid) == ("leaky", "case_a"))
    consolidate(run)
    atomic_write_json(run / "manifest.json", {"command": "worldeval opis eval", "config": {
        "dataset": str(ds), "api_key": "sk-should-not-appear"}})
    return run


def make_model_runs(root: Path, models: tuple[str, ...] = ("steady", "leaky", "still")) -> list[Path]:
    """One run folder per model, `runs/<model>/`, the way `worldeval demo` lays them out.

    A model other than "leaky" measures like "steady". Every frames record names its video
    relative to its own run folder, so a record read from the wrong folder finds no video.
    """
    ds = make_dataset(root)
    out = []
    for model in models:
        run = root / "runs" / model
        for cid in ("case_a", "case_b"):
            _write_rollout(root, run, ds, model, cid, with_frames=True, relative_video=True)
        consolidate(run)
        atomic_write_json(run / "manifest.json", {"command": "worldeval opis eval", "config": {"dataset": str(ds)}})
        out.append(run)
    return out


# ------------------------------------------------------------------ WorldCast

WC_CASES = [
    {"id": "phys_01", "category": "physical_simulation", "level": "L3", "instruction": "drop the ball on the table",
     "images": [{"path": "phys_01/input_1.png", "role": "initial_state"}], "steps": 2, "hints": ["it bounces"],
     "outcome_weight": 0.0},
    {"id": "logic_01", "category": "logic_and_rules", "level": "L4", "instruction": "solve the sliding puzzle",
     "images": [{"path": "logic_01/input_1.png", "role": "initial_state"}], "steps": 2, "hints": [],
     "outcome_weight": 0.3},
]
# phys_01: PA 2, CP 3, VC 2 -> TC 1, Final 100/3 * (1.2 + 1.2 + 0.4) = 93.333...
# logic_01: PA 1, OC 1, CP 2, VC 3 (VC first failed, then ok) -> TC 0.65, Final 100/3 * (0.78 + 0.8 + 0.6) = 72.666...
WC_SCORES = {"phys_01": {"PA": 2, "CP": 3, "VC": 2}, "logic_01": {"PA": 1, "OC": 1, "CP": 2, "VC": 3}}
WC_FINAL = (93.0 + 1 / 3 + 72.0 + 2 / 3) / 2


def make_worldcast_run(root: Path, model: str = "painter") -> Path:
    from PIL import Image

    ds = root / "wc_dataset"
    outs = root / "wc_outputs" / model
    for k, case in enumerate(WC_CASES):
        (ds / case["id"]).mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((60, 80, 3), 40 + 50 * k, np.uint8)).save(ds / case["images"][0]["path"])
        (outs / case["id"]).mkdir(parents=True, exist_ok=True)
        for s in (1, 2):
            im = np.zeros((60, 80, 3), np.uint8)
            im[:, : 20 * s] = (0, 160, 60 * k)
            Image.fromarray(im).save(outs / case["id"] / f"step_{s}.png")
    (ds / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in WC_CASES))
    run = root / "run_wc"
    jpath = run / "judgments.jsonl"
    for case in WC_CASES:
        for metric, score in WC_SCORES[case["id"]].items():
            rec = {"model": model, "case_id": case["id"], "category": case["category"], "level": case["level"],
                   "outcome_weight": case["outcome_weight"], "metric": metric, "step": None,
                   "judge_model": "judge-x", "prompt_hash": "v1", "interface": "steps", "attempts": 1,
                   "latency_s": 0.1, "raw": "{}", "error": None}
            if (case["id"], metric) == ("logic_01", "VC"):
                append_jsonl(jpath, {**rec, "status": "failed", "score": None, "evidence": None,
                                     "error": "no parseable JSON after 3 attempts"})
            append_jsonl(jpath, {**rec, "status": "ok", "score": score,
                                 "evidence": f"{metric} evidence for {case['id']} <b>not markup</b>"})
    atomic_write_json(run / "manifest.json", {"command": "worldeval worldcast judge", "config": {
        "dataset": str(ds), "outputs": str(outs), "model": model, "judge": {"model": "judge-x", "api_key_set": True}}})
    return run
