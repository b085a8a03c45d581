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
* `AgenticSelector` (the paper's agentic video adapter, Appendix H.2, as a
  fixed multi-round procedure with a request budget): a coarse pass where the
  VLM names the interval of each requested state, dense passes inside those
  intervals, then exactly K strictly increasing frames chosen inclusion-first.
  Its trace (frames shown, answers, choices) goes to `keyframe_trace.json`.
  Only frame selection, never quality scoring.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from worldeval.judge.image import JudgeImage
from worldeval.judge.parse import AnswerError, coerce_int
from worldeval.media import MediaError, decode_frames, probe_video
from worldeval.runs import atomic_write_bytes, atomic_write_json
from worldeval.worldcast.inputs.errors import PathError


class KeyframeSelector(Protocol):
    """What the video adapter and the judge run read from a keyframe selector (one of its own: one class)."""

    name: str  # recorded in the run manifest

    def select(self, video: str | Path, k: int, case=None) -> "KeyframeSelection":
        """K keyframes of `video` with strictly increasing timestamps; `case` (a WorldCastCase) may guide it."""
        ...


@dataclass
class KeyframeSelection:
    selector: str
    video: str
    fps: float
    num_frames: int
    steps: list[dict]  # {"step", "timestamp_seconds", "frame_index", "filename", "achieved", "evidence"}
    notes: str = ""
    params: dict = field(default_factory=dict)
    trace: dict | None = None  # what a multi-round selector showed, was told and chose
    warnings: list[str] = field(default_factory=list)  # shown with the judgments (fallbacks, budget cuts)

    def to_json(self) -> dict:
        return {
            "selector": self.selector, "video": self.video, "fps": self.fps, "num_frames": self.num_frames,
            "steps": self.steps, "overall_notes": self.notes, "params": self.params,
        }


class KeyframeError(PathError):
    """A video that cannot be reduced to the requested keyframes."""


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


AGENTIC_PROMPT = """You locate moments in a generated video for a benchmark. Only find where things are; never rate the video.

The video was made for the task below and should pass through {k} requested states, in this order. You see {n}
frames sampled across the whole clip (length {duration:.3f} s), each labelled with its time in seconds.
First work out from the task (and the reference images, if any) what each of the {k} states is. Then, for each
state, give the time interval in which a frame showing it appears. Keep the states in their requested order.
If a state never shows, set "seen" to false and give the interval where it would have to be, given the order of
the states and the neighbouring frames. Cover every state; a roughly placed interval is better than none.

TASK INSTRUCTION:
{instruction}
"""

COARSE_CONTRACT = """Answer with one JSON object only:
{{"states": [{{"step": 1, "description": "what state 1 is", "seen": true, "start": 0.0, "end": 1.5}}, ...],
 "overall_notes": "short notes"}}
"states" holds exactly {k} entries, steps 1 to {k}, with 0 <= start <= end <= {duration:.3f}."""

DENSE_PROMPT = """Closer look at requested state {step} of {k} of the same task: {description}

These {n} frames come from {a:.3f} s to {b:.3f} s of the video, each labelled with its time. Pick the time of the
frame that shows this state most clearly. This is selection only, not a quality judgement. If none of them shows
the state, pick the closest one and set "achieved" to false, saying briefly what is missing.

TASK INSTRUCTION:
{instruction}
"""

DENSE_CONTRACT = """Answer with one JSON object only:
{{"step": {step}, "timestamp_seconds": <one of the times shown>, "achieved": true or false,
 "evidence": "what the chosen frame shows, or what is missing"}}"""


def _number(obj: dict, key: str, where: str) -> float:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise AnswerError(f"{where}.{key} must be a number")
    return float(v)


def coarse_validator(k: int, duration: float):
    """The coarse answer: K intervals in the video's time range (order is enforced later, not demanded here)."""
    def validate(obj: dict) -> dict:
        states = obj.get("states")
        if not isinstance(states, list) or len(states) != k:
            raise AnswerError(f"'states' must be a list of exactly {k} entries")
        out = []
        for i, st in enumerate(states, start=1):
            where = f"states[{i - 1}]"
            if not isinstance(st, dict) or coerce_int(st.get("step", i), f"{where}.step") != i:
                raise AnswerError(f"{where} must be an object with step {i}")
            a, b = _number(st, "start", where), _number(st, "end", where)
            if not (0 <= a <= b <= duration + 1e-6):
                raise AnswerError(f"{where}: interval {a}..{b} is not inside 0..{duration:.3f}")
            seen = st.get("seen", True)
            if not isinstance(seen, bool):
                raise AnswerError(f"{where}.seen must be true or false")
            desc = st.get("description", "")
            out.append({"step": i, "start": a, "end": b, "seen": seen,
                        "description": desc if isinstance(desc, str) and desc.strip() else f"requested state {i}"})
        return {"states": out, "overall_notes": str(obj.get("overall_notes", ""))}

    return validate


def dense_validator(step: int, duration: float):
    def validate(obj: dict) -> dict:
        if coerce_int(obj.get("step", step), "step") != step:
            raise AnswerError(f"step must be {step}")
        t = _number(obj, "timestamp_seconds", "answer")
        if not 0 <= t <= duration + 1e-6:
            raise AnswerError(f"timestamp_seconds={t} outside 0..{duration:.3f}")
        achieved = obj.get("achieved")
        if not isinstance(achieved, bool):
            raise AnswerError("achieved must be true or false")
        ev = obj.get("evidence", "")
        return {"step": step, "timestamp_seconds": t, "achieved": achieved,
                "evidence": ev if isinstance(ev, str) else json.dumps(ev)}

    return validate


def ordered_choice(n_frames: int, wanted: list[dict]) -> list[int]:
    """Exactly K strictly increasing frame indices, inclusion first.

    `wanted[k]` has `lo`, `hi` (the frames where state k was seen, or None)
    and `pref` (its preferred frame). The choice maximises, in this order, the
    number of states whose frame lies inside their interval, then closeness to
    the preferred frames (sum of |f - pref|): a dynamic programme over
    (state, frame) with prefix maxima, O(K x frames).
    """
    k = len(wanted)
    if n_frames < k:
        raise ValueError(f"{n_frames} frames cannot hold {k} distinct keyframes")
    big = float(n_frames * k + 1)
    frames = np.arange(n_frames)
    gain = np.empty((k, n_frames))
    for i, w in enumerate(wanted):
        inside = np.zeros(n_frames, bool)
        if w["lo"] is not None:
            inside[w["lo"]: w["hi"] + 1] = True
        gain[i] = big * inside - np.abs(frames - w["pref"])
    prev, back = gain[0], []
    for i in range(1, k):
        cur, arg = np.full(n_frames, -np.inf), np.zeros(n_frames, dtype=int)
        best_v, best_j = -np.inf, -1
        for j in range(1, n_frames):
            if prev[j - 1] > best_v:  # strict: ties keep the earlier frame, so the choice is deterministic
                best_v, best_j = prev[j - 1], j - 1
            cur[j], arg[j] = best_v + gain[i, j], best_j
        back.append(arg)
        prev = cur
    picks = [int(np.argmax(prev))]
    for arg in reversed(back):
        picks.append(int(arg[picks[-1]]))
    return picks[::-1]


class AgenticSelector:
    """The paper's agentic video adapter (section 3, Appendix H.2) as a fixed, budgeted procedure.

    Round 1 (coarse): `n_samples` frames across the whole video; the VLM names,
    per requested state, the interval where it shows (or would have to be).
    Round 2 (dense): per state, `dense_samples` frames inside its interval
    (padded by one coarse spacing); the VLM picks the clearest frame, with
    `achieved` and evidence. The budget `max_requests` counts VLM requests
    (coarse first, then states in order); states beyond it keep the middle of
    their interval. Final: exactly K strictly increasing frames, inclusion
    first (`ordered_choice`). A garbage answer (after the client's retries) is
    recorded in the trace and replaced deterministically: a failed coarse pass
    by the change-point segmentation, a failed dense pass by the middle of the
    interval. The VLM only locates states; it never scores them.
    """

    name = "agentic"

    def __init__(self, client, n_samples: int = 24, dense_samples: int = 8, max_requests: int | None = None,
                 frame_max_side: int = 512):
        self.client = client
        self.n_samples = n_samples
        self.dense_samples = dense_samples
        self.max_requests = max_requests
        self.frame_max_side = frame_max_side

    def _ask(self, trace: dict, rnd: dict, content: list, validator, extra: dict):
        ans = self.client.ask_json(content, validator=validator, prefer_key=None, cache_extra=extra)
        trace["requests"] += 1
        rnd.update(ok=ans.ok, attempts=ans.attempts, raw=ans.raw, error=ans.error,
                   answer=ans.parsed if ans.ok else None)
        trace["rounds"].append(rnd)
        return ans.parsed if ans.ok else None

    def _frames_part(self, video: Path, idx: list[int], fps: float) -> list[Any]:
        parts: list[Any] = []
        for fi, frame in zip(idx, decode_frames(video, idx, max_side=self.frame_max_side).frames):
            parts += [f"t = {fi / fps:.3f} s", JudgeImage.from_array(frame)]
        return parts

    def _references(self, case) -> list[Any]:
        parts: list[Any] = []
        for j, ref in enumerate((case.images if case is not None else []), start=1):
            parts += [f"Reference {j} ({ref.role}):", JudgeImage.from_path(ref.path, self.frame_max_side)]
        return (["REFERENCE IMAGES:"] + parts) if parts else []

    def _coarse(self, video, info, k, case, trace) -> list[dict]:
        idx = _sample_indices(info.num_frames, max(self.n_samples, k))
        instruction = case.instruction if case is not None else "(no instruction given)"
        content = [AGENTIC_PROMPT.format(k=k, n=len(idx), duration=info.duration_s, instruction=instruction),
                   *self._references(case), "SAMPLED FRAMES:", *self._frames_part(video, idx, info.fps),
                   COARSE_CONTRACT.format(k=k, duration=info.duration_s)]
        rnd = {"round": "coarse", "frames": [{"frame_index": i, "t": round(i / info.fps, 6)} for i in idx]}
        parsed = self._ask(trace, rnd, content, coarse_validator(k, info.duration_s),
                           {"purpose": "agentic_keyframes_coarse", "k": k})
        if parsed is not None:
            return [dict(s, source="vlm") for s in parsed["states"]]
        # Deterministic stand-in: the change-point phases as intervals, their typical frames as preferences.
        sel = ChangePointSelector().select(video, k)
        fps = info.fps
        return [{"step": s["step"], "start": s["segment_frames"][0] / fps, "end": s["segment_frames"][1] / fps,
                 "seen": None, "description": f"requested state {s['step']}", "source": "fallback:changepoint",
                 "pref_frame": s["frame_index"]} for s in sel.steps]

    def _dense(self, video, info, k, state, case, trace, spacing: float) -> dict | None:
        last = info.num_frames - 1
        a = max(0.0, state["start"] - spacing)
        b = min(last / info.fps, state["end"] + spacing)
        lo, hi = int(round(a * info.fps)), min(last, int(round(b * info.fps)))
        idx = sorted(set(int(round(x)) for x in np.linspace(lo, hi, self.dense_samples)))
        instruction = case.instruction if case is not None else "(no instruction given)"
        content = [DENSE_PROMPT.format(step=state["step"], k=k, description=state["description"], n=len(idx),
                                       a=idx[0] / info.fps, b=idx[-1] / info.fps, instruction=instruction),
                   *self._frames_part(video, idx, info.fps), DENSE_CONTRACT.format(step=state["step"])]
        rnd = {"round": "dense", "step": state["step"], "frames": [{"frame_index": i, "t": round(i / info.fps, 6)} for i in idx]}
        return self._ask(trace, rnd, content, dense_validator(state["step"], info.duration_s),
                         {"purpose": "agentic_keyframes_dense", "k": k, "step": state["step"], "frames": idx})

    def select(self, video: str | Path, k: int, case=None) -> KeyframeSelection:
        video = Path(video)
        info = probe_video(video)
        if info.num_frames < k:
            raise KeyframeError(video, f"video has {info.num_frames} frames; cannot pick {k} distinct keyframes")
        budget = self.max_requests if self.max_requests is not None else 1 + k
        trace: dict = {"budget_requests": budget, "requests": 0, "rounds": [], "choices": []}
        states = self._coarse(video, info, k, case, trace) if budget >= 1 else []
        if not states:
            raise KeyframeError(video, "agentic selection needs a budget of at least one request")
        spacing = info.duration_s / max(1, max(self.n_samples, k) - 1)
        picks = {}
        for st in states:
            if st["source"] == "vlm" and trace["requests"] < budget:
                picks[st["step"]] = self._dense(video, info, k, st, case, trace, spacing)
        steps = self._assemble(info, states, picks, trace)
        warnings = [f"keyframes: {r['round']} pass{' for state ' + str(r['step']) if 'step' in r else ''} gave no "
                    f"usable answer ({r['error']}); replaced deterministically" for r in trace["rounds"] if not r["ok"]]
        skipped = [st["step"] for st in states if st["source"] == "vlm" and st["step"] not in picks]
        if skipped:
            warnings.append(f"keyframes: budget of {budget} request(s) left state(s) {skipped} without a dense pass")
        return KeyframeSelection(
            self.name, str(video), info.fps, info.num_frames, steps,
            notes=f"multi-round agentic selection: {trace['requests']} VLM request(s) of {budget}",
            params={"n_samples": self.n_samples, "dense_samples": self.dense_samples, "max_requests": budget,
                    "judge_model": self.client.config.model},
            trace=trace, warnings=warnings,
        )

    def _assemble(self, info, states: list[dict], picks: dict, trace: dict) -> list[dict]:
        last = info.num_frames - 1
        to_frame = lambda t: min(last, max(0, int(round(t * info.fps))))
        wanted = []
        for st in states:
            pick = picks.get(st["step"])
            lo, hi = to_frame(st["start"]), to_frame(st["end"])
            pref = to_frame(pick["timestamp_seconds"]) if pick else st.get("pref_frame", (lo + hi) // 2)
            # Only a state the VLM saw counts for inclusion; an unseen one just wants its expected place.
            seen = st["seen"] is not False and (pick is None or pick["achieved"])
            wanted.append({"lo": lo if seen else None, "hi": hi if seen else None, "pref": pref})
        frames = ordered_choice(info.num_frames, wanted)
        steps = []
        for st, w, fi in zip(states, wanted, frames):
            pick = picks.get(st["step"])
            achieved = pick["achieved"] if pick else st["seen"]
            how = "dense pick" if pick else ("coarse interval" if st["source"] == "vlm" else st["source"])
            moved = fi != w["pref"]
            ev = (pick["evidence"] if pick else st["description"]) + (
                f" [moved from frame {w['pref']} to keep the order]" if moved else "")
            steps.append({"step": st["step"], "timestamp_seconds": round(fi / info.fps, 6), "frame_index": int(fi),
                          "filename": f"step_{st['step']}.jpg", "achieved": achieved, "evidence": ev})
            trace["choices"].append({"step": st["step"], "frame_index": int(fi), "preferred_frame": int(w["pref"]),
                                     "interval_frames": [w["lo"], w["hi"]], "from": how, "moved": moved})
        return steps


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
    if selection.trace is not None:
        atomic_write_json(out_dir / "keyframe_trace.json", selection.trace)
    return paths
