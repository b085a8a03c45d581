"""Keyframe selection on synthetic videos with known change points (both selectors)."""

from __future__ import annotations

import io
import itertools
import json
import re
import shutil

import numpy as np
import pytest
from PIL import Image

from worldeval.media import write_video
from worldeval.worldcast.inputs.keyframes import (
    AgenticSelector, ChangePointSelector, KeyframeError, optimal_segments, ordered_choice, write_keyframes,
)
from tests.helpers.paths import PAPER, SHARED_DATA

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


APPLE_SRC = SHARED_DATA / "cotracker_apple" / "apple.mp4"
needs_apple = pytest.mark.skipif(not APPLE_SRC.is_file(), reason="shared data not present")


@pytest.fixture(scope="module")
def apple(tmp_path_factory):
    """The real apple clip (50 frames, 10 fps) at 320x178, so the many decodes of a selection stay fast."""
    from worldeval.media import decode_frames

    path = tmp_path_factory.mktemp("apple") / "apple.mp4"
    write_video(path, decode_frames(APPLE_SRC, list(range(50)), max_side=320).frames, FPS)
    return path


def _brute_force_choice(n, wanted):
    """Every increasing K-tuple, ranked by (states inside their interval, -total distance, earliest)."""
    best = None
    for combo in itertools.combinations(range(n), len(wanted)):
        inside = sum(w["lo"] is not None and w["lo"] <= f <= w["hi"] for f, w in zip(combo, wanted))
        dist = sum(abs(f - w["pref"]) for f, w in zip(combo, wanted))
        key = (inside, -dist)
        if best is None or key > best[0]:
            best = (key, list(combo))
    return best


def test_ordered_choice_is_inclusion_first_and_optimal():
    # state 2's interval lies before state 1's preference: both fit inside only as frames 2 and 3
    assert ordered_choice(10, [{"lo": 2, "hi": 4, "pref": 3}, {"lo": 1, "hi": 3, "pref": 2},
                               {"lo": None, "hi": None, "pref": 9}]) == [2, 3, 9]
    # two states want the last frame: one must give way, and the later state keeps it
    assert ordered_choice(5, [{"lo": 4, "hi": 4, "pref": 4}, {"lo": 4, "hi": 4, "pref": 4}]) == [3, 4]
    with pytest.raises(ValueError):
        ordered_choice(2, [{"lo": None, "hi": None, "pref": 0}] * 3)
    rng = np.random.default_rng(7)
    for _ in range(60):
        n, k = int(rng.integers(3, 9)), int(rng.integers(1, 4))
        wanted = []
        for _ in range(k):
            lo = int(rng.integers(0, n))
            hi = int(rng.integers(lo, n))
            wanted.append({"lo": lo, "hi": hi, "pref": int(rng.integers(0, n))} if rng.random() < 0.8
                          else {"lo": None, "hi": None, "pref": int(rng.integers(0, n))})
        got = ordered_choice(n, wanted)
        key, _ = _brute_force_choice(n, wanted)
        inside = sum(w["lo"] is not None and w["lo"] <= f <= w["hi"] for f, w in zip(got, wanted))
        assert all(b > a for a, b in zip(got, got[1:]))
        assert (inside, -sum(abs(f - w["pref"]) for f, w in zip(got, wanted))) == key, (n, wanted, got)


def _labels(req) -> list[float]:
    return [float(t) for t in re.findall(r"^t = ([0-9.]+) s$", req.text, re.M)]


def scripted_vlm(coarse, dense):
    """A MockTransport script: the coarse answer, then one dense answer per step (callables or dicts)."""
    def answer(req):
        if "Closer look at requested state" in req.text:
            step = int(re.search(r"requested state (\d+) of", req.text).group(1))
            d = dense[step]
            return d(req) if callable(d) else d
        return coarse(req) if callable(coarse) else coarse
    return answer


def _client(script, max_attempts=2):
    from worldeval.judge import JudgeClient, JudgeConfig, MockTransport

    return JudgeClient(JudgeConfig(model="vlm", max_attempts=max_attempts, backoff_base_s=0.0),
                       transport=MockTransport(script))


COARSE = {"states": [{"step": 1, "description": "apple on the table", "seen": True, "start": 0.0, "end": 1.0},
                     {"step": 2, "description": "apple lifted", "seen": True, "start": 2.0, "end": 3.0},
                     {"step": 3, "description": "apple put down", "seen": True, "start": 3.5, "end": 4.9}],
          "overall_notes": "n"}


def _pick(t, achieved=True):
    return lambda req: {"step": int(re.search(r"requested state (\d+) of", req.text).group(1)),
                        "timestamp_seconds": t, "achieved": achieved, "evidence": f"at {t}"}


@needs_apple
def test_agentic_multi_round_on_real_video(tmp_path, apple):
    from worldeval.worldcast.inputs.cases import WorldCastCase

    case = WorldCastCase("apple", "physical_simulation", "L3", "lift the apple and put it down", [], 3)
    client = _client(scripted_vlm(COARSE, {1: _pick(0.5), 2: _pick(2.4), 3: _pick(4.2, achieved=False)}))
    sel = AgenticSelector(client, n_samples=24, dense_samples=8, frame_max_side=96).select(apple, 3, case)
    reqs = client.transport.requests
    assert len(reqs) == 4  # coarse + one dense pass per state = the default budget 1 + K
    coarse_t = _labels(reqs[0])
    assert len(coarse_t) == 24 and coarse_t[0] == 0.0 and coarse_t[-1] == 4.9 and len(reqs[0].images) == 24
    spacing = 4.9 / 23  # one coarse spacing of padding around each interval
    for req, st in zip(reqs[1:], COARSE["states"]):
        ts = _labels(req)
        assert len(ts) == 8 and len(req.images) == 8
        assert st["start"] - spacing - 0.051 <= ts[0] and ts[-1] <= st["end"] + spacing + 0.051
        assert st["description"] in req.text
    assert [s["frame_index"] for s in sel.steps] == [5, 24, 42]
    assert [s["achieved"] for s in sel.steps] == [True, True, False]
    paths = write_keyframes(sel, tmp_path / "kf")
    from worldeval.media import decode_frames

    for p, frame in zip(paths, decode_frames(apple, [5, 24, 42]).frames):
        got = np.asarray(Image.open(p).convert("RGB")).astype(float)
        assert np.abs(got - frame).mean() < 3  # the saved keyframe is that frame at full resolution
    trace = json.loads((tmp_path / "kf" / "keyframe_trace.json").read_text())
    assert [r["round"] for r in trace["rounds"]] == ["coarse", "dense", "dense", "dense"]
    assert len(trace["rounds"][0]["frames"]) == 24 and trace["rounds"][0]["answer"]["states"][1]["start"] == 2.0
    assert json.loads(trace["rounds"][2]["raw"])["timestamp_seconds"] == 2.4
    assert [c["frame_index"] for c in trace["choices"]] == [5, 24, 42] and trace["requests"] == 4


@needs_apple
def test_agentic_keeps_order_budget_and_survives_garbage(tmp_path, apple):
    from worldeval.worldcast.inputs.cases import WorldCastCase

    case = WorldCastCase("apple", "physical_simulation", "L3", "lift the apple and put it down", [], 3)
    overlapping = json.loads(json.dumps(COARSE))
    overlapping["states"][1].update(start=0.2, end=0.6)  # state 2 placed inside state 1's interval
    # dense: state 1 at 0.6, state 2 at 0.4 (out of order); state 3 answers garbage every time
    client = _client(scripted_vlm(overlapping, {1: _pick(0.6), 2: _pick(0.4), 3: "no idea, sorry"}))
    sel = AgenticSelector(client, n_samples=24, dense_samples=8, frame_max_side=96).select(apple, 3, case)
    # inclusion first: state 1 in frames 0..10 (prefers 6), state 2 in 2..6 (prefers 4), 1 before 2.
    # (3, 4), (4, 5) and (5, 6) all keep both inside at distance 3; ties keep the earlier frames.
    idx = [s["frame_index"] for s in sel.steps]
    assert idx[:2] == [3, 4]
    assert sel.trace["choices"][0]["moved"] and "moved from frame 6" in sel.steps[0]["evidence"]
    assert idx[2] == int(round((35 + 49) / 2))  # garbage dense answer: the middle of the coarse interval
    trace = sel.trace
    assert trace["rounds"][3]["ok"] is False and "unparseable" in trace["rounds"][3]["error"]
    assert trace["requests"] == 4 and len(client.transport.requests) == 1 + 1 + 1 + 2  # state 3 retried once
    assert len(sel.warnings) == 1 and sel.warnings[0].startswith("keyframes: dense pass for state 3 gave no usable")
    # a budget of 2 requests: coarse and state 1 only
    client = _client(scripted_vlm(COARSE, {1: _pick(0.5), 2: _pick(2.4), 3: _pick(4.2)}))
    sel = AgenticSelector(client, max_requests=2, frame_max_side=96).select(apple, 3, case)
    assert len(client.transport.requests) == 2
    assert [s["frame_index"] for s in sel.steps] == [5, 25, 42]  # 2 and 3: middle of 20..30 and 35..49
    assert sel.warnings == ["keyframes: budget of 2 request(s) left state(s) [2, 3] without a dense pass"]
    # a coarse answer that never parses: the change-point phases stand in, deterministically
    client = _client(scripted_vlm({"states": "garbage"}, {}))
    sel = AgenticSelector(client, frame_max_side=96).select(apple, 3, case)
    assert len(client.transport.requests) == 2  # the coarse request and its one retry; no dense passes
    cp = ChangePointSelector().select(apple, 3)
    assert [s["frame_index"] for s in sel.steps] == [s["frame_index"] for s in cp.steps]
    assert all(s["achieved"] is None for s in sel.steps)
    assert sel.trace["rounds"][0]["ok"] is False and sel.trace["choices"][0]["from"] == "fallback:changepoint"


def test_agentic_prompts_are_our_own_words():
    from tests.helpers.text import ngrams

    from worldeval.worldcast.generation import plan as G
    from worldeval.worldcast.inputs import keyframes as K

    paper = PAPER
    if not paper.is_file():
        pytest.skip("paper text not present")
    theirs = ngrams(paper.read_text(encoding="utf-8"))
    ours = set().union(*(ngrams(t) for t in (K.AGENTIC_PROMPT, K.COARSE_CONTRACT, K.DENSE_PROMPT, K.DENSE_CONTRACT,
                                              G.PLAN_PROMPT, G.PLAN_CONTRACT, G.INSPECT_PROMPT, G.INSPECT_CONTRACT)))
    assert not ours & theirs, sorted(ours & theirs)[:5]


def test_video_output_through_the_adapter(tmp_path):
    from worldeval.worldcast.inputs.adapters import adapt_output
    from worldeval.worldcast.inputs.cases import WorldCastCase

    case = WorldCastCase("v1", "physical_simulation", "L3", "x", [], 3)
    (tmp_path / "outs" / "v1").mkdir(parents=True)
    bounds = make_video(tmp_path / "outs" / "v1" / "video.mp4", (8, 9, 8))
    seq = adapt_output(case, tmp_path / "outs", tmp_path / "states")
    assert seq.interface == "video" and [p.name for p in seq.images] == ["step_1.jpg", "step_2.jpg", "step_3.jpg"]
    rec = json.loads((tmp_path / "states" / "adapter.json").read_text())
    for (a, b), s in zip(bounds, rec["selection"]["steps"]):
        assert a <= s["frame_index"] <= b


DAVIS = SHARED_DATA / "davis2016_more"
CLIPS = ("blackswan", "car-roundabout", "dog", "libby")
# frames (of 30) per case: what the scripted adapter picks, and two annotators' choices
ADAPTER = {"blackswan": (2, 12, 22), "car-roundabout": (2, 17, 27), "dog": (7, 12, 17), "libby": (12, 17, 27)}
HUMAN_A = {"blackswan": (2, 12, 22), "car-roundabout": (7, 12, 27), "dog": (7, 12, 17), "libby": (2, 7, 12)}
HUMAN_B = {"blackswan": (7, 17, 27), "car-roundabout": (2, 17, 22), "dog": (2, 12, 17), "libby": (12, 22, 27)}


def expected_final(frames) -> float:
    """The scripted judge's scores, by hand: PA, CP, VC from the 5-frame bucket of states 1, 2, 3."""
    b = [f // 5 for f in frames]
    pa, cp, vc = b[0] % 3, b[1] % 4, b[2] % 4
    return (100 / 3) * (0.4 * 3 * (pa / 2) + 0.4 * cp + 0.2 * vc)


@pytest.fixture(scope="module")
def davis_videos(tmp_path_factory):
    """Four real DAVIS clips, 30 frames each at 160 px, as video.mp4 outputs, plus their frames for matching."""
    root = tmp_path_factory.mktemp("davis")
    frames = {}
    for clip in CLIPS:
        imgs = []
        for p in sorted((DAVIS / clip / "frames").glob("*.jpg"))[:30]:
            im = Image.open(p).convert("RGB")
            imgs.append(np.asarray(im.resize((160, round(160 * im.height / im.width)), Image.BILINEAR)))
        (root / "outputs" / clip).mkdir(parents=True)
        write_video(root / "outputs" / clip / "video.mp4", imgs, FPS)
        from worldeval.media import decode_frames

        frames[clip] = np.stack(decode_frames(root / "outputs" / clip / "video.mp4", list(range(30))).frames).astype(float)
    ds = root / "dataset"
    ds.mkdir()
    lines = [json.dumps({"id": c, "category": "physical_simulation", "instruction": f"Case {c}: show three moments.",
                         "images": [], "steps": 3, "hints": [f"hint for {c}"]}) for c in CLIPS]
    (ds / "cases.jsonl").write_text("\n".join(lines) + "\n")
    return root, frames


def video_judge(frames_by_clip):
    """One script for the adapter's VLM and the judge: locates states, and scores what it is shown."""
    def nearest(clip, data: bytes) -> int:
        img = np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).astype(float)
        return int(np.argmin(np.abs(frames_by_clip[clip] - img).mean(axis=(1, 2, 3))))

    def answer(text: str, images: list[bytes]):
        clip = re.search(r"Case ([a-z-]+):", text).group(1)
        picks = ADAPTER[clip]
        if "Closer look at requested state" in text:
            k = int(re.search(r"requested state (\d+) of", text).group(1))
            return {"step": k, "timestamp_seconds": picks[k - 1] / FPS, "achieved": True, "evidence": "x"}
        if "You locate moments" in text:
            return {"states": [{"step": k, "seen": True, "start": max(0, f - 2) / FPS, "end": (f + 2) / FPS}
                               for k, f in enumerate(picks, start=1)]}
        shown = [nearest(clip, d) for d in images]
        b = [f // 5 for f in shown]
        score = {"PROGRESS ALIGNMENT": b[0] % 3, "CAUSAL PLAUSIBILITY": b[1] % 4, "VISUAL CONSISTENCY": b[2] % 4}
        return {"score": next(v for key, v in score.items() if key in text), "evidence": f"frames {shown}"}
    return answer


@pytest.mark.skipif(not DAVIS.is_dir(), reason="shared data not present")
def test_keyframe_agreement_on_real_video(davis_videos, tmp_path):
    from worldeval.judge import JudgeClient, JudgeConfig, MockTransport
    from worldeval.worldcast.judging.run import run_judge
    from worldeval.worldcast.analysis.keyframe_agreement import keyframe_agreement

    root, frames = davis_videos
    script = video_judge(frames)
    mock = MockTransport(lambda req: script(req.text, [im.data for im in req.images]))
    client = JudgeClient(JudgeConfig(model="judge-m", max_attempts=1), transport=mock)
    run = tmp_path / "run"
    run_judge(root / "dataset", root / "outputs", "vidgen", run, client,
              keyframe_selector=AgenticSelector(client, n_samples=10, dense_samples=5, frame_max_side=64))
    for clip in CLIPS:  # the adapter chose its scripted frames, and its trace sits beside them
        sel = json.loads((run / "states" / "vidgen" / clip / "selection.json").read_text())
        assert tuple(s["frame_index"] for s in sel["steps"]) == ADAPTER[clip]
        assert (run / "states" / "vidgen" / clip / "keyframe_trace.json").is_file()

    human = tmp_path / "human"
    for name, picks in (("ann_a", HUMAN_A), ("ann_b", HUMAN_B)):
        (human / name).mkdir(parents=True)
        for clip, fr in picks.items():
            (human / name / f"{clip}.json").write_text(json.dumps({"timestamps": [f / FPS for f in fr]}))
    res = keyframe_agreement(run, human, client)
    adapter = [expected_final(ADAPTER[c]) for c in CLIPS]
    humans = [(expected_final(HUMAN_A[c]) + expected_final(HUMAN_B[c])) / 2 for c in CLIPS]
    assert res["n_cases"] == 4 and res["annotators"] == ["ann_a", "ann_b"]
    assert res["pearson_r"] == pytest.approx(float(np.corrcoef(adapter, humans)[0, 1]), abs=1e-9)
    for row, a, h in zip(res["cases"], adapter, humans):
        assert row["adapter_final"] == pytest.approx(a) and row["difference"] == pytest.approx(a - h)
    assert (run / "keyframe_agreement" / "ann_b" / "outputs" / "libby" / "step_3.jpg").is_file()

    # The adapter's own choice given as a human selection (selection.json form): identical scores, r = 1.
    same = tmp_path / "same" / "copy"
    same.mkdir(parents=True)
    for clip in CLIPS:
        shutil.copyfile(run / "states" / "vidgen" / clip / "selection.json", same / f"{clip}.json")
    res = keyframe_agreement(run, same.parent, client)
    assert res["pearson_r"] == pytest.approx(1.0) and all(r["difference"] == 0 for r in res["cases"])


@pytest.mark.skipif(not DAVIS.is_dir(), reason="shared data not present")
def test_keyframe_agreement_cli_and_bad_selections(davis_videos, tmp_path):
    from tests.helpers.fake_judge import FakeJudge
    from typer.testing import CliRunner

    from worldeval.cli import app

    root, frames = davis_videos
    script = video_judge(frames)
    srv = FakeJudge(lambda info: script(info["text"], info["images"]))
    try:
        run = tmp_path / "run"
        args = ["--base-url", srv.base_url, "--judge-model", "judge-m", "--api-key", "sk-kfa-SECRET", "--no-cache"]
        res = CliRunner().invoke(app, ["worldcast", "judge", "--dataset", str(root / "dataset"), "--outputs",
                                       str(root / "outputs"), "--model", "vidgen", "--out", str(run), "--keyframes",
                                       "agentic", "--keyframe-samples", "10", "--keyframe-dense", "5", "--concurrency", "1", "-q", *args])
        assert res.exit_code == 0, res.output
        trace = json.loads((run / "states" / "vidgen" / "dog" / "keyframe_trace.json").read_text())
        assert [len(r["frames"]) for r in trace["rounds"]] == [10, 5, 5, 5] and trace["budget_requests"] == 4
        assert json.loads((run / "manifest.json").read_text())["config"]["keyframes"] == {
            "selector": "agentic", "samples": 10, "dense": 5, "budget": None}
        human = tmp_path / "human" / "ann"
        human.mkdir(parents=True)
        for clip, fr in HUMAN_A.items():
            (human / f"{clip}.json").write_text(json.dumps({"timestamps": [f / FPS for f in fr]}))
        cmd = ["worldcast", "keyframe-agreement", "--human", str(human.parent), "--run", str(run),
               "--base-url", srv.base_url, "--api-key", "sk-kfa-SECRET", "-q"]
        res = CliRunner().invoke(app, cmd)
        assert res.exit_code == 0, res.output
        adapter = [expected_final(ADAPTER[c]) for c in CLIPS]
        humans = [expected_final(HUMAN_A[c]) for c in CLIPS]
        assert f"Pearson r = {np.corrcoef(adapter, humans)[0, 1]:.4f}" in res.stdout
        assert f"libby: adapter {adapter[3]:.1f}, human {humans[3]:.1f}" in res.stdout
        for p in run.rglob("*"):
            assert not p.is_file() or b"sk-kfa-SECRET" not in p.read_bytes()
        # a selection that goes backwards is an error naming the file and the field
        (human / "dog.json").write_text(json.dumps({"timestamps": [1.0, 0.5, 2.0]}))
        res = CliRunner().invoke(app, cmd)
        assert res.exit_code == 2 and "dog.json" in res.output and "'timestamps' must strictly increase" in res.output
    finally:
        srv.close()


@needs_apple
def test_adapter_fallbacks_reach_the_judgments_warnings(tmp_path, apple):
    from worldeval.worldcast.inputs.adapters import adapt_output
    from worldeval.worldcast.inputs.cases import WorldCastCase

    case = WorldCastCase("v", "physical_simulation", "L3", "lift the apple", [], 2)
    (tmp_path / "outs" / "v").mkdir(parents=True)
    shutil.copyfile(apple, tmp_path / "outs" / "v" / "video.mp4")
    client = _client(scripted_vlm("I cannot tell.", {}), max_attempts=1)
    seq = adapt_output(case, tmp_path / "outs", tmp_path / "states", AgenticSelector(client, frame_max_side=64))
    assert len(seq.images) == 2
    assert seq.warnings == ["keyframes: coarse pass gave no usable answer (attempt 1: unparseable answer: no JSON "
                            "object in the answer); replaced deterministically"]
