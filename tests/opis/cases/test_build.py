"""`opis build`: the section 3.3 pipeline on real COCO photos with a scripted VLM (the judge's mock transport).

The VLM is scripted to propose the photos' known objects (names from
instances.json, boxes from the instance masks), so the GrabCut fallback's
masks can be compared with the independent COCO polygons.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from worldeval.cli.opis import build as build_cli
from worldeval.judge import JudgeCache, JudgeClient, JudgeConfig, MockTransport
from worldeval.opis.cases.annotate import ObjectPrompt, mask_iou
from worldeval.opis.cases.build import BuildConfig, build_dataset, image_states
from worldeval.opis.cases.phrases import clean_phrases, normalize
from worldeval.opis.cases.segment import _split_contested, _two_label_cut
from worldeval.opis.case import iter_case_dirs, load_case
from worldeval.runs import read_jsonl
from tests.helpers.paths import SHARED_DATA

COCO = SHARED_DATA / "coco_multiobj"
TASK = {"camera": "pan-left-return", "amount": 8, "instruction": "The camera pans left and back; everything stays put."}


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"test data not available: {path}")
    return path


def coco(image_id: str) -> tuple[np.ndarray, list[tuple[str, np.ndarray, float]]]:
    """(image, [(class name, visible mask, area fraction)]) of one COCO photo."""
    idx = json.loads((need(COCO) / "instances.json").read_text())
    img = np.asarray(Image.open(COCO / "images" / f"{image_id}.jpg").convert("RGB"))
    lab = np.asarray(Image.open(COCO / "instance_masks" / f"{image_id}.png"))
    return img, [(i["class"].replace("_", " "), lab == i["id"], i["area_frac"]) for i in idx[image_id]["instances"]]


def small(image_id: str, k: int = 4):
    """The photo and its instances at 1/k scale (fast GrabCut where mask quality is not what is tested)."""
    img, objs = coco(image_id)
    return np.ascontiguousarray(img[::k, ::k]), [(n, m[::k, ::k], f) for n, m, f in objs]


def box_of(mask: np.ndarray, pad: int = 2) -> list[int]:
    ys, xs = np.nonzero(mask)
    return [int(xs.min()) - pad, int(ys.min()) - pad, int(xs.max() - xs.min()) + 1 + 2 * pad,
            int(ys.max() - ys.min()) + 1 + 2 * pad]


def screening(objects, suitable=True, moves=None) -> dict:
    return {"suitable": suitable, "reason": "several separate objects" if suitable else "one blurry blob",
            "objects": [{"phrase": name, "box": box_of(m), "kinematics": "rigid",
                         "moves": bool(moves and name in moves)} for name, m, *_ in objects]}


class ScriptedVLM:
    """Answers the screening request from the image it is shown (matched by pixels), the task request with TASK."""

    def __init__(self, answers: dict[bytes, dict | str], task=TASK, clean=None):
        self.answers = answers  # image bytes (as the client encodes them) -> screening answer
        self.task = task
        self.clean = clean

    def __call__(self, request):
        if "TASK SPECIFICATION" in request.text:
            return self.task
        if "PHRASE CLEANING" in request.text:
            return self.clean
        arr = np.asarray(Image.open(io.BytesIO(request.images[0].data)).convert("RGB"))
        return self.answers[arr.tobytes()]


def client_for(vlm, out: Path, key: str | None = None) -> tuple[JudgeClient, MockTransport]:
    transport = MockTransport(vlm)
    (out / ".build").mkdir(parents=True, exist_ok=True)
    cfg = JudgeConfig(model="scripted-vlm", api_key=key, max_attempts=2, backoff_base_s=0.0, backoff_max_s=0.0)
    return JudgeClient(cfg, JudgeCache(out / ".build" / "vlm_cache.sqlite"), transport=transport), transport


# ---------------------------------------------------------------- phrase cleaning


def test_phrase_cleaning_drops_stuff_and_parts_and_merges_synonyms_and_subsumed():
    concepts, decisions = clean_phrases(
        ["The Red Mugs", "mug", "sofa", "couch", "floor", "sky", "handle of the mug", "table leg", "cup of",
         "coffee mug", "wine_glasses", "two apples", "  ", "wooden floor"])
    by = {d.phrase: d for d in decisions}
    assert concepts == ["mug", "couch", "wine glass", "apple"]
    # subsumed: "red mug" and "coffee mug" share the head noun with the more general "mug"
    assert by["The Red Mugs"].concept == "mug" and by["The Red Mugs"].reason == "subsumed by 'mug'"
    assert by["coffee mug"].concept == "mug" and by["coffee mug"].action == "merged"
    assert by["mug"].action == "merged" and by["mug"].reason == "same concept as an earlier phrase"
    # near-synonyms
    assert by["sofa"].concept == "couch" and by["sofa"].reason == "synonym of 'couch'"
    assert by["couch"].concept == "couch" and by["couch"].action == "merged"
    for stuff in ("floor", "sky", "wooden floor"):
        assert by[stuff].action == "dropped" and "background" in by[stuff].reason
    assert by["handle of the mug"].action == "dropped" and "part" in by["handle of the mug"].reason
    assert by["table leg"].action == "dropped" and "part" in by["table leg"].reason
    assert by["cup of"].action == "dropped" and by["cup of"].reason == "incomplete phrase"
    assert by["  "].action == "dropped"
    assert by["wine_glasses"].concept == "wine glass" and by["two apples"].concept == "apple"
    # subsumption without a synonym in the way: specific phrases fold into the general one
    c2, d2 = clean_phrases(["large brown dog", "brown dog", "dog", "bowl"])
    assert c2 == ["dog", "bowl"] and {d.concept for d in d2[:3]} == {"dog"}
    assert normalize("A_Potted   Plants") == "potted plant"


# ---------------------------------------------------------------- the pipeline on COCO photos


def _coco_run(tmp_path: Path, ids: list[str], **cfg):
    answers, truth = {}, {}
    lst = tmp_path / "images.txt"
    lst.write_text("\n".join(str(COCO / "images" / f"{i}.jpg") for i in ids) + "\n")
    for i in ids:
        img, objs = coco(i)
        answers[img.tobytes()] = screening(objs, moves={"person", "cat"})
        truth[i] = objs
    out = tmp_path / "ds"
    client, transport = client_for(ScriptedVLM(answers), out)
    summary = build_dataset(lst, out, BuildConfig(**cfg), client)
    return out, summary, truth, transport


# IoU of each large (>= 10% of the image) instance of reporting photos 142 and 387 (hold-out split,
# worldeval.opis.checks.holdout) as benchmarks/build_coco_iou.py measures it at seed 0, rounded down to 0.01
# (0.965, 0.855, 0.804; laptops 0.851 and 0.809). The third reporting photo, 599 (cat 0.595, couch
# 0.725), is left to the benchmark: its GrabCut alone takes longer than this whole test.
REPORTING_LARGE_IOU = {("000000000142", "bottle"): [0.96], ("000000000142", "banana"): [0.85],
                       ("000000000142", "sandwich"): [0.80], ("000000000387", "laptop"): [0.85, 0.80]}


@pytest.mark.slow
def test_grabcut_fallback_recovers_the_known_coco_instances(tmp_path):
    ids = ["000000000387", "000000000142"]
    out, summary, truth, transport = _coco_run(tmp_path, ids)
    assert summary["accepted"] == ids and not summary["failed"]
    assert [p.name for p in iter_case_dirs(out)] == sorted(ids)
    large: dict[tuple[str, str], list[float]] = {}
    for cid, objs in truth.items():
        case = load_case(out / cid)
        assert case.spec.instruction == TASK["instruction"]
        assert case.spec.camera().keyframes[1].yaw_deg == -8.0  # pan-left-return, amount 8
        for name, m, frac in objs:
            best = max(case.masks, key=lambda k: mask_iou(case.masks[k], m))
            if frac >= 0.1:
                large.setdefault((cid, name), []).append(mask_iou(case.masks[best], m))
                cat = next(i.category for i in case.instances if i.id == best)
                assert cat == normalize(name) or cat == "table", (name, cat)
    assert sorted(large) == sorted(REPORTING_LARGE_IOU), large
    for key, floors in REPORTING_LARGE_IOU.items():
        assert all(v >= f for v, f in zip(large[key], floors)) and len(large[key]) == len(floors), (key, large[key])
    log = read_jsonl(out / "build_log.jsonl")
    seg = [r for r in log if r.get("step") == "segment"]
    assert len(seg) == 2 and all("classical fallback" in r["method"] for r in seg)
    raw = json.loads((out / "000000000142" / "case.json").read_text())
    assert raw["annotation"]["geometry"] == "flat" and raw["annotation"]["tool"] == "worldeval opis build"
    # dining table -> table (near-synonym), recorded as a merge
    phr = next(r for r in log if r.get("step") == "phrases" and r["image"] == "000000000142")
    assert {"phrase": "dining table", "action": "merged", "concept": "table", "reason": "synonym of 'table'"} \
        in phr["decisions"]
    assert transport.count() == 4  # one screening and one task request per image


def _side_by_side(seed: int = 0):
    """Two pink blocks on blue, a dark 5 px gap between them; the left mask reaches 15 px over the right
    block, the right mask 5 px over the left one (so the middle of the contested band is not the gap)."""
    rng = np.random.default_rng(seed)
    img = np.zeros((60, 100, 3), np.float64)
    img[:] = (30, 40, 160)
    img[10:50, 5:45] = img[10:50, 50:95] = (225, 60, 150)
    img[10:50, 45:50] = (20, 20, 25)
    img = np.clip(img + rng.normal(0, 6, img.shape), 0, 255).astype(np.uint8)
    left = np.zeros((60, 100), bool)
    right = np.zeros((60, 100), bool)
    left[10:50, 5:65] = True
    right[10:50, 40:95] = True
    return img, left, right


def test_contested_pixels_of_side_by_side_instances_follow_the_visible_gap():
    img, left, right = _side_by_side()
    both = left & right
    to_right = _two_label_cut(img, left & ~both, right & ~both, both, seed=0)
    # the cut runs along the gap (columns 45-49), not along either mask's edge (40 or 64) or midway (52)
    assert not to_right[:, 40:45].any() and to_right[10:50, 50:65].all()
    # through grabcut_from_boxes: boxes overlapping with neither holding the other get the split ...
    prompts = [ObjectPrompt(phrase="block", box=[5, 10, 60, 40]), ObjectPrompt(phrase="block", box=[40, 10, 55, 40])]
    masks = {0: left.copy(), 1: right.copy()}
    _split_contested(img, prompts, masks, seed=0)
    assert not (masks[0] & masks[1]).any() and masks[1][10:50, 50:65].all() and masks[0][10:50, 40:45].all()
    # ... and a box held by another keeps its claim for the smaller-mask rule (it is taken to be in front)
    held = [ObjectPrompt(phrase="block", box=[5, 10, 90, 40]), ObjectPrompt(phrase="block", box=[40, 10, 55, 40])]
    masks = {0: left.copy(), 1: right.copy()}
    _split_contested(img, held, masks, seed=0)
    assert (masks[0] == left).all() and (masks[1] == right).all()


def test_labels_from_the_vlm_and_overrides(tmp_path):
    img, objs = small("000000000387")
    answers = {img.tobytes(): screening(objs, moves={"cell phone"})}
    out = tmp_path / "ds"
    client, _ = client_for(ScriptedVLM(answers), out)
    src = tmp_path / "in"
    src.mkdir()
    Image.fromarray(img).save(src / "desk.png")
    cfg = BuildConfig(kinematics={"Laptops": "articulated"}, track={"laptop": "static"}, min_objects=2)
    assert build_dataset(src, out, cfg, client)["accepted"] == ["desk"]
    case = load_case(out / "desk")
    labels = sorted((i.category, i.kinematics, i.track) for i in case.instances)
    assert labels == [("cell phone", "rigid", "dynamic"), ("laptop", "articulated", "static"),
                      ("laptop", "articulated", "static")]
    rec = next(r for r in read_jsonl(out / "build_log.jsonl") if r.get("step") == "labels")
    assert rec["concepts"] == [{"concept": "laptop", "kinematics": "articulated", "track": "static", "source": "override"},
                               {"concept": "cell phone", "kinematics": "rigid", "track": "dynamic", "source": "vlm"}]


def test_bad_input_is_named_and_the_run_goes_on_and_resumes(tmp_path):
    img, objs = small("000000000387", 3)
    src = tmp_path / "in"
    src.mkdir()
    Image.fromarray(img).save(src / "a_good.png")
    (src / "b_broken.jpg").write_bytes(b"not a jpeg at all")
    tiny = np.ascontiguousarray(img[::2, ::2])
    Image.fromarray(tiny).save(src / "c_prose.png")
    Image.fromarray(img[::-1].copy()).save(src / "d_blob.png")
    answers = {img.tobytes(): screening(objs), tiny.tobytes(): "It looks like a desk with two laptops.",
               img[::-1].tobytes(): screening(objs[:1], suitable=False)}
    out = tmp_path / "ds"
    client, transport = client_for(ScriptedVLM(answers), out)
    s1 = build_dataset(src, out, BuildConfig(), client)
    assert s1["accepted"] == ["a_good"] and s1["rejected"] == ["d_blob"]
    failed = {f["image"]: f for f in s1["failed"]}
    assert set(failed) == {"b_broken", "c_prose"}
    assert failed["b_broken"]["file"].endswith("b_broken.jpg") and failed["b_broken"]["field"] == "image"
    assert failed["c_prose"]["field"] == "screening" and "contract" in failed["c_prose"]["reason"]
    states = image_states(out)
    assert states["c_prose"]["status"] == "failed"  # a non-contract answer is never an accept
    assert not (out / "c_prose").exists()
    assert json.loads((out / "dataset.json").read_text())["cases"] == ["a_good"]
    n1 = transport.count()
    # rerun: the VLM now answers in the contract (scaled boxes); only the failed images are redone
    answers[tiny.tobytes()] = {"suitable": True, "reason": "ok", "objects": [
        {"phrase": n, "box": [v // 2 for v in box_of(m)], "kinematics": "rigid"} for n, m, _ in objs]}
    s2 = build_dataset(src, out, BuildConfig(), client)
    assert sorted(s2["skipped"]) == ["a_good", "d_blob"] and s2["accepted"] == ["c_prose"]
    assert [f["image"] for f in s2["failed"]] == ["b_broken"]
    screened = [r.text for r in transport.requests[n1:] if "SCREENING" in r.text]
    assert len(screened) == 1  # only c_prose was asked again (b_broken never reaches the VLM)
    assert json.loads((out / "dataset.json").read_text())["cases"] == ["a_good", "c_prose"]


def test_threads_give_the_same_cases(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    answers = {}
    for name, iid in (("desk", "000000000387"), ("lunch", "000000000142"), ("dinner", "000000000283")):
        img, objs = small(iid)
        Image.fromarray(img).save(src / f"{name}.png")
        answers[img.tobytes()] = screening(objs)
    outs = []
    for workers in (1, 3):
        out = tmp_path / f"ds{workers}"
        client, _ = client_for(ScriptedVLM(answers), out)
        s = build_dataset(src, out, BuildConfig(min_objects=2), client, workers=workers)
        assert s["accepted"] == ["desk", "dinner", "lunch"]
        outs.append(out)
    for name in ("desk", "lunch", "dinner"):
        a, b = (json.loads((o / name / "case.json").read_text()) for o in outs)
        assert a == b
        assert np.array_equal(np.load(outs[0] / name / "reference_embeddings.npy"),
                              np.load(outs[1] / name / "reference_embeddings.npy"))


def test_box_formats_of_other_vlms():
    from worldeval.opis.cases.build import BuildError
    from worldeval.opis.cases.vlm import pixel_box

    with pytest.raises(BuildError, match="--box-format"):
        BuildConfig(box_format="center-wh").check()
    with pytest.raises(BuildError, match="--backend.*nope"):
        BuildConfig(backend="nope").check()

    # a 200 x 100 image; the same box [x=20, y=10, w=60, h=40] written four ways
    assert pixel_box([20, 10, 60, 40], "xywh", 200, 100) == [20, 10, 60, 40]
    assert pixel_box([20, 10, 80, 50], "xyxy", 200, 100) == [20, 10, 60, 40]
    assert pixel_box([100, 100, 400, 500], "xyxy-1000", 200, 100) == [20, 10, 60, 40]
    assert pixel_box([100, 100, 500, 400], "yxyx-1000", 200, 100) == [20, 10, 60, 40]


def test_gemini_style_boxes_give_the_same_case(tmp_path):
    img, objs = small("000000000387")
    H, W = img.shape[:2]
    src = tmp_path / "in"
    src.mkdir()
    Image.fromarray(img).save(src / "desk.png")
    pix = screening(objs)
    grid = json.loads(json.dumps(pix))
    for o in grid["objects"]:
        x, y, w, h = o["box"]
        o["box"] = [y * 1000 / H, x * 1000 / W, (y + h) * 1000 / H, (x + w) * 1000 / W]
    cases = []
    for fmt, answer in (("xywh", pix), ("yxyx-1000", grid)):
        out = tmp_path / fmt
        client, transport = client_for(ScriptedVLM({img.tobytes(): answer}), out)
        assert build_dataset(src, out, BuildConfig(min_objects=2, box_format=fmt), client)["accepted"] == ["desk"]
        assert "0-1000 grid" in transport.requests[0].text if fmt != "xywh" else "in pixels" in transport.requests[0].text
        cases.append(load_case(out / "desk"))
    assert cases[0].masks.keys() == cases[1].masks.keys()
    for k in cases[0].masks:
        assert mask_iou(cases[0].masks[k], cases[1].masks[k]) > 0.99


def test_vlm_assisted_cleaning_drops_and_merges(tmp_path):
    img, objs = small("000000000387")
    shot = screening(objs)
    shot["objects"][1]["phrase"] = "notebook"  # the second laptop, under another name
    shot["objects"].append({"phrase": "desk", "box": [0, 60, 160, 60], "kinematics": "rigid"})
    clean = {"drop": [{"phrase": "desk", "reason": "a surface the objects stand on"}],
             "merge": [{"phrase": "notebook", "into": "laptop"}]}
    src = tmp_path / "in"
    src.mkdir()
    Image.fromarray(img).save(src / "desk.png")
    out = tmp_path / "ds"
    client, transport = client_for(ScriptedVLM({img.tobytes(): shot}, clean=clean), out)
    assert build_dataset(src, out, BuildConfig(min_objects=2, vlm_clean=True), client)["accepted"] == ["desk"]
    assert sorted(i.category for i in load_case(out / "desk").instances) == ["cell phone", "laptop", "laptop"]
    phr = next(r for r in read_jsonl(out / "build_log.jsonl") if r.get("step") == "phrases")
    assert phr["concepts"] == ["laptop", "cell phone"]
    assert {"phrase": "desk", "action": "dropped", "concept": None, "reason": "vlm: a surface the objects stand on"} \
        in phr["decisions"]
    assert sum("PHRASE CLEANING" in r.text for r in transport.requests) == 1
    # a cleaning answer naming phrases that were never proposed is outside the contract: a failed step
    bad = {"drop": [{"phrase": "sofa", "reason": "?"}], "merge": []}
    out2 = tmp_path / "ds2"
    client, _ = client_for(ScriptedVLM({img.tobytes(): shot}, clean=bad), out2)
    s = build_dataset(src, out2, BuildConfig(min_objects=2, vlm_clean=True), client)
    assert s["failed"][0]["field"] == "cleaning" and not s["accepted"]


def test_too_few_objects_after_cleaning_is_a_rejection(tmp_path):
    img, objs = small("000000000387")
    shot = screening(objs)
    shot["objects"] = shot["objects"][:1] + [{"phrase": "floor", "box": [0, 100, 150, 18]},
                                             {"phrase": "wall", "box": [0, 0, 150, 25]}]
    src = tmp_path / "in"
    src.mkdir()
    Image.fromarray(img).save(src / "x.png")
    out = tmp_path / "ds"
    client, _ = client_for(ScriptedVLM({img.tobytes(): shot}), out)
    s = build_dataset(src, out, BuildConfig(min_objects=2), client)
    assert s["rejected"] == ["x"]
    assert "1 objects left after phrase cleaning" in image_states(out)["x"]["reason"]


# ---------------------------------------------------------------- the hf path, review, CLI


def _desk_build(tmp_path: Path, monkeypatch) -> tuple[Path, Path]:
    """(input folder with one COCO desk photo, dataset folder) for `opis build`, its VLM scripted to
    screen the photo's four largest objects."""
    img, objs = small("000000000387")
    src = tmp_path / "in"
    src.mkdir()
    Image.fromarray(img).save(src / "desk.png")
    transport = MockTransport(ScriptedVLM({img.tobytes(): screening(objs)}))
    monkeypatch.setattr(build_cli, "vlm_transport", lambda: transport)
    return src, tmp_path / "ds"


@pytest.mark.slow
def test_hf_concept_rounds_through_the_same_command(tmp_path, monkeypatch):
    """SAM 3 (tiny random weights: meaningless masks, real loading and round logic) via `opis build --backend hf`."""
    import os

    from typer.testing import CliRunner

    from worldeval.cli import app
    from worldeval.opis.checkpoints.tiny import build_tiny_models

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tiny = build_tiny_models(tmp_path / "tiny")
    src, out = _desk_build(tmp_path, monkeypatch)
    args = ["opis", "build", str(src), "--out", str(out), "--backend", "hf", "--judge-model", "scripted-vlm",
            "--backend-option", f"sam3={tiny['sam3']}", "--backend-option", f"dinov3={tiny['dinov3']}",
            "--backend-option", f"matcher={tiny['lightglue']}", "--backend-option", f"depth={tiny['depth_anything']}",
            "--backend-option", "score_threshold=0.0", "--backend-option", "min_area_frac=0.0",
            "--depth", "model", "--rounds", "2", "--min-objects", "2", "--json"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert json.loads(res.output[res.output.index("{\n"):])["accepted"] == ["desk"], res.output
    log = read_jsonl(out / "build_log.jsonl")
    seg = next(r for r in log if r.get("step") == "segment")
    assert seg["method"].startswith("concept segmentation (sam3)") and seg["concepts"] == ["laptop", "cell phone"]
    assert 1 <= len(seg["rounds"]) <= 2 and seg["rounds"][0]["new"] >= 1
    raw = json.loads((out / "desk" / "case.json").read_text())
    assert raw["annotation"]["segmenter"] == "hf" and raw["annotation"]["geometry"].startswith("model:")
    assert {p["mask_source"].split(":")[0] for p in raw["annotation"]["prompts"]} == {"sam3"}
    assert raw["reference_embeddings"]["embedder"] == "dinov3"
    case = load_case(out / "desk")
    assert case.geometry is not None and {i.category for i in case.instances} <= {"laptop", "cell phone"}
    # masks of one case never overlap (IoU de-duplication, then exclusive pixels)
    ms = list(case.masks.values())
    assert all(not (a & b).any() for k, a in enumerate(ms) for b in ms[k + 1:])
    assert os.environ["HF_HUB_OFFLINE"] == "1"


def test_review_pages_and_applied_decisions(tmp_path):
    imgs = {}
    src = tmp_path / "in"
    src.mkdir()
    answers = {}
    for name, iid in (("desk", "000000000387"), ("lunch", "000000000142")):
        img, objs = small(iid)
        Image.fromarray(img).save(src / f"{name}.png")
        answers[img.tobytes()] = screening(objs)
        imgs[name] = objs
    out = tmp_path / "ds"
    client, _ = client_for(ScriptedVLM(answers), out)
    assert build_dataset(src, out, BuildConfig(review=True, min_objects=2), client)["accepted"] == ["desk", "lunch"]
    page = (out / "review" / "desk.html").read_text()
    assert page.count("<figure>") == len(load_case(out / "desk").instances)
    assert "pan-left" not in page and "The camera" in page and TASK["instruction"] in page and "laptop" in page
    assert json.loads((out / "review" / "decisions.json").read_text()) == \
        {"desk": {"decision": "accept"}, "lunch": {"decision": "accept"}}
    desk = load_case(out / "desk")
    ids = [i.id for i in desk.instances]
    decisions = tmp_path / "decisions.json"
    decisions.write_text(json.dumps({
        "desk": {"decision": "edit", "drop": [ids[-1]], "category": {ids[0]: "silver laptop"},
                 "track": {ids[0]: "dynamic"}, "instruction": "Pan left and come back."},
        "lunch": {"decision": "reject", "reason": "table cut off"}}))
    from typer.testing import CliRunner

    from worldeval.cli import app

    res = CliRunner().invoke(app, ["opis", "build", "--out", str(out), "--apply-review", str(decisions)])
    assert res.exit_code == 0, res.output
    edited = load_case(out / "desk")
    assert [i.id for i in edited.instances] == ids[:-1]
    assert edited.instances[0].category == "silver laptop" and edited.instances[0].track == "dynamic"
    assert edited.spec.instruction == "Pan left and come back."
    emb = json.loads((out / "desk" / "case.json").read_text())["reference_embeddings"]
    assert emb["order"] == ids[:-1] and np.load(out / "desk" / emb["file"]).shape[0] == len(ids) - 1
    assert json.loads((out / "dataset.json").read_text())["cases"] == ["desk"]
    assert (out / ".build" / "rejected" / "lunch" / "case.json").exists() and not (out / "lunch").exists()
    # a rerun of the build keeps the human decisions
    assert sorted(build_dataset(src, out, BuildConfig(min_objects=2), client)["skipped"]) == ["desk", "lunch"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"desk": {"decision": "edit", "kinematics": {ids[0]: "bouncy"}}}))
    res = CliRunner().invoke(app, ["opis", "build", "--out", str(out), "--apply-review", str(bad)])
    assert res.exit_code == 2 and "bad.json" in res.output and "kinematics" in res.output


def test_cli_keeps_the_key_out_of_every_file(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from worldeval.cli import app

    key = "sk-build-SECRET-5be1"
    src, out = _desk_build(tmp_path, monkeypatch)
    res = CliRunner().invoke(app, ["opis", "build", str(src), "--out", str(out), "--judge-model", "scripted-vlm",
                                   "--api-key", key, "--min-objects", "2"])
    assert res.exit_code == 0, res.output
    assert "1 accepted" in res.output
    for f in out.rglob("*"):
        if f.is_file():
            assert key.encode() not in f.read_bytes(), f
    run_rec = next(r for r in read_jsonl(out / "build_log.jsonl") if r.get("step") == "run")
    assert run_rec["vlm"]["model"] == "scripted-vlm" and run_rec["vlm"]["api_key_set"] is True


def test_concept_rounds_find_instances_a_first_query_missed():
    """A stand-in segmenter that reports only the largest red blob (and a near-copy of it) per query:
    round 2 sees the image with round 1's find painted out and reports the next blob; the near-copy is a
    cross-round duplicate; round 3 adds nothing and ends the search."""
    from scipy import ndimage as ndi

    from worldeval.opis.backends.base import Observation
    from worldeval.opis.cases.segment import concept_rounds

    img = np.full((60, 90, 3), 200, np.uint8)
    img[10:30, 10:40] = (220, 20, 20)  # larger red square
    img[35:50, 60:75] = (220, 20, 20)  # smaller red square
    seen = []

    class LargestRedBlob:
        name = "stand-in"

        def observe(self, frame, phrases, reference=None):
            seen.append(frame.copy())
            red = (frame[..., 0] > 180) & (frame[..., 1] < 60)
            lab, n = ndi.label(red)
            if n == 0:
                return []
            k = 1 + int(np.argmax(ndi.sum(red, lab, range(1, n + 1))))
            m = lab == k
            shifted = np.roll(m, 1, axis=1)  # IoU with m well above 0.8
            return [Observation(mask=m, box=(0, 0, 1, 1), category="red box", score=0.9),
                    Observation(mask=shifted, box=(0, 0, 1, 1), category="red box", score=0.8)]

    found, log = concept_rounds(LargestRedBlob(), img, ["red box"], rounds=5, dedup_iou=0.8)
    assert [f[3] for f in found] == [1, 2]
    assert found[0][1].sum() == 600 and found[1][1].sum() == 225
    assert [r["new"] for r in log] == [1, 1, 0] and len(log[0]["duplicates"]) == 1
    assert log[0]["duplicates"][0]["iou"] == round(580 / 620, 4)
    # what round 2 was shown: the first square painted out in the mean colour of the rest
    assert (seen[1][10:30, 10:40] != (220, 20, 20)).any(axis=-1).all()
    assert np.array_equal(seen[1][35:50, 60:75], img[35:50, 60:75])


def test_images_from_opis_source_bring_their_vocabulary_and_subcategory(tmp_path):
    img, objs = small("000000000387")
    folder = tmp_path / "accepted" / "home_indoor_0003"
    folder.mkdir(parents=True)
    Image.fromarray(img).save(folder / "image.jpg", quality=95)
    work = np.asarray(Image.open(folder / "image.jpg").convert("RGB"))
    (folder / "provenance.json").write_text(json.dumps({
        "subcategory": "home_indoor", "review": {"parsed": {"phrases": ["laptop", "cell phone"]}}}))
    out = tmp_path / "ds"
    client, transport = client_for(ScriptedVLM({work.tobytes(): screening(objs)}), out)
    assert build_dataset(tmp_path / "accepted", out, BuildConfig(min_objects=2), client)["accepted"] == \
        ["home_indoor_0003"]
    assert load_case(out / "home_indoor_0003").spec.subcategory == "home_indoor"
    assert "Name objects only with phrases from this list (the source's own labels): laptop; cell phone" \
        in transport.requests[0].text
    (folder / "provenance.json").write_text("{not json")
    from worldeval.opis.cases.build import BuildError

    with pytest.raises(BuildError, match="provenance.json: provenance"):
        build_dataset(tmp_path / "accepted", tmp_path / "ds3", BuildConfig(), client)
