"""Validating the video adapter against human keyframe choices (paper section 4.4).

Humans pick, for each judged video, the K frames that show the requested
states. Their frames are judged with the same judge (model and settings from
the run's manifest) and the same prompts as the adapter's keyframes; the
Pearson r between the per-case Final scores of the two selections measures
how much the adapter's choice changes the score (the paper reports 0.9546 on
100 videos and three annotators).

`--human DIR` layout: `DIR/<annotator>/<case_id>.json`, each either
`{"timestamps": [t_1, ..., t_K]}` (seconds, strictly increasing) or the
adapter's own `selection.json` form `{"steps": [{"timestamp_seconds": t}, ...]}`.
With several annotators, a case's human score is the mean of their Finals.
Everything is written under `RUN/keyframe_agreement/<annotator>/` (the
extracted frames as an outputs folder, and a normal judge run folder), so a
rerun resumes like `worldcast judge`.
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Callable

from worldeval.judge.client import JudgeConfig
from worldeval.media import probe_video
from worldeval.runs import read_jsonl
from worldeval.worldcast.inputs.adapters import VIDEO_NAMES
from worldeval.worldcast.inputs.cases import load_cases
from worldeval.worldcast.inputs.errors import PathError
from worldeval.worldcast.inputs.keyframes import KeyframeSelection, write_keyframes
from worldeval.worldcast.judging.records import JUDGMENTS, latest_records
from worldeval.worldcast.judging.run import run_judge
from worldeval.worldcast.scoring.scores import case_scores

SUBDIR = "keyframe_agreement"


class HumanSelectionError(PathError):
    """A human keyframe file that cannot be used, named by its path."""


def _timestamps(path: Path) -> list[float]:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise HumanSelectionError(path, f"invalid JSON: {exc.msg}") from None
    if isinstance(obj, dict) and isinstance(obj.get("steps"), list):
        ts = [s.get("timestamp_seconds") if isinstance(s, dict) else None for s in obj["steps"]]
        fld = "steps[].timestamp_seconds"
    elif isinstance(obj, dict) and isinstance(obj.get("timestamps"), list):
        ts, fld = obj["timestamps"], "timestamps"
    else:
        raise HumanSelectionError(path, 'expected {"timestamps": [...]} or {"steps": [{"timestamp_seconds": ...}]}')
    if not ts or any(isinstance(t, bool) or not isinstance(t, (int, float)) or t < 0 for t in ts):
        raise HumanSelectionError(path, f"field '{fld}' must be a non-empty list of non-negative numbers")
    if any(b <= a for a, b in zip(ts, ts[1:])):
        raise HumanSelectionError(path, f"field '{fld}' must strictly increase (got {ts})")
    return [float(t) for t in ts]


def read_human_dir(human_dir: str | Path) -> dict[str, dict[str, list[float]]]:
    """{annotator: {case_id: timestamps}} from `DIR/<annotator>/<case_id>.json`."""
    root = Path(human_dir)
    if not root.is_dir():
        raise HumanSelectionError(root, "not a folder")
    out = {}
    for ann in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        sel = {p.stem: _timestamps(p) for p in sorted(ann.glob("*.json"))}
        if sel:
            out[ann.name] = sel
    if not out:
        raise HumanSelectionError(root, "holds no <annotator>/<case_id>.json selections")
    return out


def _human_selection(video: Path, ts: list[float], k: int, where: Path, annotator: str) -> KeyframeSelection:
    info = probe_video(video)
    if len(ts) != k:
        raise HumanSelectionError(where, f"has {len(ts)} timestamps; the case asks for {k} states")
    frames = [min(info.num_frames - 1, int(round(t * info.fps))) for t in ts]
    if any(t > info.duration_s + 1.0 / info.fps for t in ts) or any(b <= a for a, b in zip(frames, frames[1:])):
        raise HumanSelectionError(where, f"timestamps {ts} are not distinct frames inside the {info.duration_s:.3f} s video")
    steps = [{"step": i, "timestamp_seconds": t, "frame_index": f, "filename": f"step_{i}.jpg", "achieved": None,
              "evidence": f"chosen by {annotator}"} for i, (t, f) in enumerate(zip(ts, frames), start=1)]
    return KeyframeSelection(f"human:{annotator}", str(video), info.fps, info.num_frames, steps)


def judge_config_of(run_dir: Path, base_url: str | None = None, api_key: str | None = None):
    """The JudgeConfig the run was judged with (from its manifest), with endpoint and key supplied now."""
    man = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    judge = (man.get("config") or {}).get("judge") or {}
    if not judge.get("model"):
        raise ValueError(f"{run_dir / 'manifest.json'}: field 'config.judge.model' is missing")
    known = {f.name for f in fields(JudgeConfig)} - {"api_key"}
    kw = {k: v for k, v in judge.items() if k in known}
    if base_url:
        kw["base_url"] = base_url
    return JudgeConfig(api_key=api_key, **kw), man


def keyframe_agreement(run_dir: str | Path, human_dir: str | Path, client, *,
                       progress: Callable[[str], None] | None = None) -> dict:
    """Judge the human keyframes of every case the run judged from a video; compare per-case Finals."""
    from scipy.stats import pearsonr

    run_dir = Path(run_dir)
    man = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    cfg = man.get("config") or {}
    dataset, outputs, model = cfg.get("dataset"), cfg.get("outputs"), cfg.get("model")
    if not (dataset and outputs and model):
        raise ValueError(f"{run_dir / 'manifest.json'}: needs config.dataset, config.outputs and config.model")
    records = [r for r in latest_records(read_jsonl(run_dir / JUDGMENTS)).values() if r.get("model") == model]
    judges = {r.get("judge_model") for r in records if r.get("status") == "ok"}
    if judges and judges != {client.config.model}:
        raise ValueError(f"{run_dir}: judged by {sorted(judges)}; keyframe agreement must use the same judge, "
                         f"not {client.config.model!r}")
    video_cases = {r["case_id"] for r in records if r.get("interface") == "video"}
    cases = {c.id: c for c in load_cases(dataset)}
    human = read_human_dir(human_dir)
    skipped: dict[str, str] = {}
    human_scores: dict[str, dict[str, float]] = {}
    for ann, sel in human.items():
        hout = run_dir / SUBDIR / ann
        wanted = []
        for cid, ts in sel.items():
            where = Path(human_dir) / ann / f"{cid}.json"
            video = next((Path(outputs) / cid / n for n in VIDEO_NAMES if (Path(outputs) / cid / n).is_file()), None)
            if cid not in cases or cid not in video_cases or video is None:
                skipped[f"{ann}/{cid}"] = "not a video case judged in this run"
                continue
            write_keyframes(_human_selection(video, ts, cases[cid].steps, where, ann), hout / "outputs" / cid)
            wanted.append(cid)
        if wanted:
            run_judge(dataset, hout / "outputs", f"human:{ann}", hout / "run", client, case_ids=wanted, progress=progress)
            recs = list(latest_records(read_jsonl(hout / "run" / JUDGMENTS)).values())
            human_scores[ann] = {cid: s.final for cid, s in case_scores(recs).items() if s.final is not None}
    return _compare(case_scores(records), human_scores, skipped, pearsonr)


def _compare(adapter, human_scores: dict[str, dict[str, float]], skipped: dict, pearsonr) -> dict:
    rows = []
    for cid in sorted({c for h in human_scores.values() for c in h}):
        finals = {a: h[cid] for a, h in human_scores.items() if cid in h}
        a = adapter.get(cid)
        if a is None or a.final is None or not finals:
            skipped[cid] = "no Final score for the adapter's or the human keyframes (failed judgments)"
            continue
        hm = sum(finals.values()) / len(finals)
        rows.append({"case_id": cid, "adapter_final": a.final, "human_final": hm, "human_finals": finals,
                     "difference": a.final - hm})
    xs, ys = [r["adapter_final"] for r in rows], [r["human_final"] for r in rows]
    r = p = None
    note = None
    if len(rows) < 3:
        note = f"Pearson r needs at least 3 cases with both scores; have {len(rows)}"
    elif len(set(xs)) == 1 or len(set(ys)) == 1:
        note = "Pearson r is undefined: one side's scores are all equal"
    else:
        res = pearsonr(xs, ys)
        r, p = float(res.statistic), float(res.pvalue)
    diffs = [abs(row["difference"]) for row in rows]
    return {"n_cases": len(rows), "pearson_r": r, "p_value": p, "note": note, "cases": rows,
            "mean_abs_difference": sum(diffs) / len(diffs) if diffs else None,
            "annotators": sorted(human_scores), "skipped": skipped}
