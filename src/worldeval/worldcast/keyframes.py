"""Reducing a generated video to K keyframes (the K requested world states).

Two selectors, both returning a `KeyframeSelection` whose timestamps strictly
increase and both writing `step_k.jpg` plus `selection.json`:

* `ChangePointSelector` (default, no model): splits the video into K
  contiguous segments that are each as visually homogeneous as possible
  (optimal K-segmentation of small frame thumbnails by dynamic programming)
  and keeps, per segment, the frame closest to the segment's mean appearance.
  It is a heuristic: it finds the K most distinct visual phases, which are the
  requested states only when the video holds still-ish states separated by
  changes. It cannot tell whether a state was achieved (`achieved` is None).
* `AgenticSelector` (the paper's agentic video adapter, Appendix H.2, made
  single-round): shows the configured VLM timestamped frames sampled across the
  video together with the instruction and references, and asks for exactly K
  strictly increasing timestamps with an `achieved` flag and evidence per step.
  Only frame selection, never quality scoring.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from worldeval.media import MediaError, decode_frames, probe_video
from worldeval.runs import atomic_write_bytes, atomic_write_json


@dataclass
class KeyframeSelection:
    selector: str
    video: str
    fps: float
    num_frames: int
    steps: list[dict]  # {"step", "timestamp_seconds", "frame_index", "filename", "achieved", "evidence"}
    notes: str = ""
    params: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "selector": self.selector, "video": self.video, "fps": self.fps, "num_frames": self.num_frames,
            "steps": self.steps, "overall_notes": self.notes, "params": self.params,
        }


class KeyframeError(ValueError):
    def __init__(self, path: str | Path, reason: str):
        self.path, self.reason = str(path), reason
        super().__init__(f"{path}: {reason}")


def _sample_indices(num_frames: int, max_frames: int) -> list[int]:
    if num_frames <= max_frames:
        return list(range(num_frames))
    return sorted(set(int(round(x)) for x in np.linspace(0, num_frames - 1, max_frames)))


def _features(frames: list[np.ndarray], side: int) -> np.ndarray:
    import cv2

    feats = []
    for f in frames:
        small = cv2.resize(f, (side, side), interpolation=cv2.INTER_AREA).astype(np.float32) / 255.0
        feats.append(small.reshape(-1))
    return np.stack(feats)


def optimal_segments(x: np.ndarray, k: int) -> list[tuple[int, int]]:
    """Split rows of `x` into k contiguous [start, end) segments minimising the within-segment squared error.

    Exact dynamic programme over prefix sums, O(k n^2); fine for the few
    hundred sampled frames a keyframe search looks at.
    """
    n = x.shape[0]
    if k > n:
        raise ValueError(f"cannot split {n} frames into {k} segments")
    cs = np.vstack([np.zeros((1, x.shape[1])), np.cumsum(x, axis=0)])
    cs2 = np.concatenate([[0.0], np.cumsum((x * x).sum(axis=1))])
    # cost[i, j] = SSE of segment [i, j) for j > i
    idx = np.arange(n + 1)
    cost = np.full((n + 1, n + 1), np.inf)
    for i in range(n):
        js = idx[i + 1:]
        s = cs[js] - cs[i]
        cnt = (js - i)[:, None]
        cost[i, i + 1:] = (cs2[js] - cs2[i]) - (s * s / cnt).sum(axis=1)
    best = np.full((k + 1, n + 1), np.inf)
    arg = np.zeros((k + 1, n + 1), dtype=int)
    best[0, 0] = 0.0
    for m in range(1, k + 1):
        for j in range(m, n - (k - m) + 1):
            cand = best[m - 1, m - 1:j] + cost[m - 1:j, j]
            t = int(np.argmin(cand))
            best[m, j] = cand[t]
            arg[m, j] = t + m - 1
    bounds = []
    j = n
    for m in range(k, 0, -1):
        i = arg[m, j]
        bounds.append((int(i), int(j)))
        j = i
    return bounds[::-1]


class ChangePointSelector:
    name = "changepoint"

    def __init__(self, max_frames: int = 240, feature_side: int = 16, analysis_max_side: int = 160):
        self.max_frames = max_frames
        self.feature_side = feature_side
        self.analysis_max_side = analysis_max_side

    def select(self, video: str | Path, k: int, case=None) -> KeyframeSelection:
        video = Path(video)
        info = probe_video(video)
        idx = _sample_indices(info.num_frames, self.max_frames)
        if len(idx) < k:
            raise KeyframeError(video, f"video has {info.num_frames} frames; cannot pick {k} distinct keyframes")
        sampled = decode_frames(video, idx, max_side=self.analysis_max_side)
        feats = _features(sampled.frames, self.feature_side)
        segs = optimal_segments(feats.astype(np.float64), k)
        steps = []
        for s, (a, b) in enumerate(segs, start=1):
            centre = feats[a:b].mean(axis=0)
            d = ((feats[a:b] - centre) ** 2).sum(axis=1)
            # Ties (a perfectly still segment) go to the middle of the segment, away from the transitions.
            best = np.flatnonzero(d <= d.min() + 1e-9)
            pick = a + int(best[np.argmin(np.abs(best - (b - a - 1) / 2))])
            fi = idx[pick]
            steps.append({
                "step": s,
                "timestamp_seconds": round(fi / info.fps, 6),
                "frame_index": int(fi),
                "filename": f"step_{s}.jpg",
                "achieved": None,
                "evidence": f"heuristic: most typical frame of visual phase {s}/{k} "
                f"(frames {idx[a]}-{idx[b - 1]}, within-phase spread {float(d.mean()):.4f})",
                "segment_frames": [int(idx[a]), int(idx[b - 1])],
            })
        return KeyframeSelection(
            self.name, str(video), info.fps, info.num_frames, steps,
            notes="Model-free change-point heuristic: K most homogeneous contiguous phases; does not judge whether "
            "requested states were achieved.",
            params={"max_frames": self.max_frames, "feature_side": self.feature_side},
        )


AGENTIC_PROMPT = """You pick benchmark keyframes from a generated video. Your job is only to locate states; do not grade quality.

The video was generated for the task below and should pass through {k} requested states (milestones) in order.
You are shown {n} frames sampled from the whole video, each labelled with its timestamp in seconds
(video length {duration:.3f} s). Study the task, the reference images, and the sampled frames with their
neighbours, then choose for each requested state the timestamp whose frame shows it most clearly.

Rules:
- Return exactly {k} steps, numbered 1 to {k}, with timestamps that strictly increase, inside 0 .. {duration:.3f}.
  You may give a timestamp between the sampled ones when the state clearly lies there.
- Do not space the timestamps evenly for convenience; follow where the states actually appear.
- Favour covering every requested state over picking the prettiest frame.
- If a state never appears, still choose the closest visible moment in the part of the video where it should
  have happened, set "achieved" to false and say briefly what is missing. Never leave a step out.

TASK INSTRUCTION:
{instruction}
"""

AGENTIC_CONTRACT = """Answer with one JSON object only, in this form:
{{"steps": [{{"step": 1, "timestamp_seconds": 1.25, "filename": "step_1.jpg", "achieved": true,
  "evidence": "what is visible at this moment, or why the state is missing"}}, ...],
 "overall_notes": "short notes on the selection"}}
It must contain {k} entries in "steps"."""


def agentic_validator(k: int, duration: float, fps: float):
    from worldeval.judge.parse import AnswerError, coerce_int

    def validate(obj: dict) -> dict:
        steps = obj.get("steps")
        if not isinstance(steps, list) or len(steps) != k:
            raise AnswerError(f"'steps' must be a list of exactly {k} entries")
        out = []
        prev_t, prev_f = -1.0, -1
        for i, st in enumerate(steps, start=1):
            if not isinstance(st, dict):
                raise AnswerError(f"steps[{i - 1}] is not an object")
            if coerce_int(st.get("step", i), f"steps[{i - 1}].step") != i:
                raise AnswerError(f"steps[{i - 1}].step must be {i}")
            t = st.get("timestamp_seconds")
            if isinstance(t, bool) or not isinstance(t, (int, float)):
                raise AnswerError(f"steps[{i - 1}].timestamp_seconds must be a number")
            t = float(t)
            if t < 0 or t > duration + 1.0 / fps:
                raise AnswerError(f"steps[{i - 1}].timestamp_seconds={t} outside 0..{duration:.3f}")
            f = min(int(round(t * fps)), max(0, int(round(duration * fps)) - 1))
            if t <= prev_t or f <= prev_f:
                raise AnswerError("timestamps must strictly increase (and fall on distinct frames)")
            achieved = st.get("achieved")
            if not isinstance(achieved, bool):
                raise AnswerError(f"steps[{i - 1}].achieved must be true or false")
            ev = st.get("evidence", "")
            out.append({
                "step": i, "timestamp_seconds": t, "frame_index": f, "filename": f"step_{i}.jpg",
                "achieved": achieved, "evidence": ev if isinstance(ev, str) else json.dumps(ev),
            })
            prev_t, prev_f = t, f
        notes = obj.get("overall_notes", "")
        return {"steps": out, "overall_notes": notes if isinstance(notes, str) else json.dumps(notes)}

    return validate


class AgenticSelector:
    name = "agentic"

    def __init__(self, client, n_samples: int = 16, frame_max_side: int = 512):
        self.client = client
        self.n_samples = n_samples
        self.frame_max_side = frame_max_side
        self.last_answer = None

    def select(self, video: str | Path, k: int, case=None) -> KeyframeSelection:
        from worldeval.judge.client import JudgeImage

        video = Path(video)
        info = probe_video(video)
        if info.num_frames < k:
            raise KeyframeError(video, f"video has {info.num_frames} frames; cannot pick {k} distinct keyframes")
        idx = _sample_indices(info.num_frames, max(self.n_samples, k))
        sampled = decode_frames(video, idx, max_side=self.frame_max_side)
        duration = info.duration_s
        instruction = case.instruction if case is not None else "(no instruction given)"
        content: list[Any] = [AGENTIC_PROMPT.format(k=k, n=len(idx), duration=duration, instruction=instruction)]
        if case is not None and case.images:
            content.append("REFERENCE IMAGES:")
            for j, ref in enumerate(case.images, start=1):
                content.append(f"Reference {j} ({ref.role}):")
                content.append(JudgeImage.from_path(ref.path, self.frame_max_side))
        content.append("SAMPLED VIDEO FRAMES:")
        for fi, frame in zip(idx, sampled.frames):
            content.append(f"t = {fi / info.fps:.3f} s")
            content.append(JudgeImage.from_array(frame))
        content.append(AGENTIC_CONTRACT.format(k=k))
        answer = self.client.ask_json(
            content, validator=agentic_validator(k, duration, info.fps), prefer_key="steps",
            cache_extra={"purpose": "agentic_keyframes", "k": k},
        )
        self.last_answer = answer
        if not answer.ok:
            raise KeyframeError(video, f"agentic keyframe selection failed after {answer.attempts} attempts: {answer.error}")
        steps = answer.parsed["steps"]
        return KeyframeSelection(
            self.name, str(video), info.fps, info.num_frames, steps, notes=answer.parsed.get("overall_notes", ""),
            params={"n_samples": len(idx), "judge_model": self.client.config.model, "attempts": answer.attempts,
                    "raw": answer.raw},
        )


def write_keyframes(selection: KeyframeSelection, out_dir: str | Path, quality: int = 95) -> list[Path]:
    """Decode the selected frames at full resolution, save step_k.jpg and selection.json."""
    from PIL import Image
    import io

    out_dir = Path(out_dir)
    indices = [s["frame_index"] for s in selection.steps]
    if any(b <= a for a, b in zip(indices, indices[1:])):
        raise KeyframeError(selection.video, f"selected frames {indices} do not strictly increase")
    times = [s["timestamp_seconds"] for s in selection.steps]
    if any(b <= a for a, b in zip(times, times[1:])):
        raise KeyframeError(selection.video, f"selected timestamps {times} do not strictly increase")
    try:
        frames = decode_frames(selection.video, indices).frames
    except MediaError as exc:
        raise KeyframeError(selection.video, str(exc)) from exc
    paths = []
    for s, frame in zip(selection.steps, frames):
        buf = io.BytesIO()
        Image.fromarray(frame).save(buf, format="JPEG", quality=quality)
        p = out_dir / s["filename"]
        atomic_write_bytes(p, buf.getvalue())
        paths.append(p)
    atomic_write_json(out_dir / "selection.json", selection.to_json())
    return paths
