"""`opis annotate`: GrabCut masks against independently made reference masks, dedup, determinism, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import ndimage as ndi

from worldeval.opis.cases.annotate import (
    AnnotateError,
    AnnotateSpec,
    ObjectPrompt,
    annotate,
    camera_preset,
    grabcut_mask,
    load_spec_file,
    mask_iou,
    parse_object_option,
    remove_duplicates,
)
from worldeval.opis.case import load_case


@pytest.fixture(scope="module")
def coins():
    """scikit-image's `coins` photo and reference coin masks made by a different method.

    Reference method (independent of GrabCut): a watershed of the Sobel gradient
    magnitude, seeded with sure background (grey < 30) and sure coin (grey > 150)
    markers, holes filled, connected components labelled. Components under 300
    pixels are specks, not coins.
    """
    import skimage.data as data
    from skimage.filters import sobel
    from skimage.segmentation import watershed

    gray = data.coins()
    markers = np.zeros_like(gray, dtype=np.int32)
    markers[gray < 30] = 1
    markers[gray > 150] = 2
    coin = ndi.binary_fill_holes(watershed(sobel(gray), markers) == 2)
    labels, n = ndi.label(coin)
    refs = [labels == i for i in range(1, n + 1) if (labels == i).sum() >= 300]
    return np.stack([gray] * 3, axis=-1), refs


def _box(mask: np.ndarray, pad: int = 3) -> list[float]:
    ys, xs = np.nonzero(mask)
    return [float(xs.min() - pad), float(ys.min() - pad), float(xs.max() - xs.min() + 1 + 2 * pad),
            float(ys.max() - ys.min() + 1 + 2 * pad)]


def test_box_prompts_match_reference_masks(coins):
    image, refs = coins
    assert len(refs) == 24  # the photo's 24 coins
    ious = [mask_iou(grabcut_mask(image, _box(m)), m) for m in refs[::2]]
    assert min(ious) >= 0.8, ious
    assert np.mean(ious) >= 0.95


def test_annotate_writes_a_loadable_case_with_reference_quality_masks(coins, tmp_path):
    image, refs = coins
    chosen = refs[:6]
    spec = AnnotateSpec(objects=[ObjectPrompt(phrase="coin", box=_box(m)) for m in chosen], case_id="coins",
                        subcategory="tabletop", duration_s=4, fps=12, embeddings=False)
    annotate(image, spec, tmp_path / "coins")
    case = load_case(tmp_path / "coins")
    assert [i.category for i in case.instances] == ["coin"] * 6
    assert all(i.track == "static" and i.kinematics == "rigid" for i in case.instances)
    for inst, ref in zip(case.instances, chosen):
        assert mask_iou(case.masks[inst.id], ref) >= 0.8
    assert case.geometry is not None and np.all(case.geometry.depth == 1.0)  # flat fallback
    raw = json.loads((tmp_path / "coins" / "case.json").read_text())
    assert raw["annotation"]["geometry"] == "flat"
    assert case.spec.camera().duration_s == 4


def test_point_prompts_at_coin_centres(coins):
    image, refs = coins
    ious = []
    for m in refs[1::3]:  # includes coins whose window also holds look-alike neighbours
        ys, xs = np.nonzero(m)
        ious.append(mask_iou(grabcut_mask(image, point=[float(xs.mean()), float(ys.mean())]), m))
    assert min(ious) >= 0.8, ious


def test_duplicate_prompts_are_removed_by_mask_iou(coins, tmp_path):
    image, refs = coins
    m0, m1 = refs[0], refs[1]
    prompts = [ObjectPrompt("coin", box=_box(m0)), ObjectPrompt("round coin", box=_box(m0, pad=5)),
               ObjectPrompt("coin", box=_box(m1))]
    annotate(image, AnnotateSpec(objects=prompts, embeddings=False), tmp_path / "c")
    raw = json.loads((tmp_path / "c" / "case.json").read_text())
    assert [i["category"] for i in raw["instances"]] == ["coin", "coin"]
    assert raw["annotation"]["dropped_duplicates"][0]["prompt"] == 1
    assert raw["annotation"]["dropped_duplicates"][0]["iou"] >= 0.8
    # the helper on hand-made masks
    a = np.zeros((10, 10), bool)
    a[2:8, 2:8] = True
    b = a.copy()
    b[2, 2] = False
    keep, dropped = remove_duplicates([a, b, ~a], 0.9)
    assert keep == [0, 2] and dropped[0][:2] == (1, 0)


def test_same_inputs_give_the_same_case(coins, tmp_path):
    image, refs = coins
    spec = lambda: AnnotateSpec(objects=[ObjectPrompt("coin", box=_box(m)) for m in refs[:3]],  # noqa: E731
                                camera="tilt-up-return", embeddings=False)
    annotate(image, spec(), tmp_path / "a")
    annotate(image, spec(), tmp_path / "b")
    assert (tmp_path / "a" / "case.json").read_bytes() == (tmp_path / "b" / "case.json").read_bytes()
    assert (tmp_path / "a" / "input.png").read_bytes() == (tmp_path / "b" / "input.png").read_bytes()


def test_overlapping_masks_are_made_exclusive(tmp_path):
    import skimage.data as data

    img = data.coffee()
    prompts = [ObjectPrompt("saucer", box=[75, 70, 405, 320]), ObjectPrompt("espresso cup", box=[172, 18, 238, 290])]
    annotate(img, AnnotateSpec(objects=prompts, max_side=300, embeddings=False), tmp_path / "cof")
    case = load_case(tmp_path / "cof")
    saucer, cup = case.masks["obj_001"], case.masks["obj_002"]
    assert not np.any(saucer & cup)
    assert cup.sum() > 2000 and saucer.sum() > cup.sum()  # scaled to 300 px wide


def test_depth_file_and_camera_presets(tmp_path):
    depth = np.linspace(1, 3, 20 * 30, dtype=np.float32).reshape(20, 30)
    np.save(tmp_path / "d.npy", depth)
    img = np.zeros((40, 60, 3), np.uint8)
    img[10:30, 20:40] = (200, 30, 30)
    spec = AnnotateSpec(objects=[ObjectPrompt("red square", box=[16, 6, 28, 28])], depth=str(tmp_path / "d.npy"),
                        camera="truck-right-return", camera_amount=0.1, embeddings=False)
    annotate(img, spec, tmp_path / "sq")
    case = load_case(tmp_path / "sq")
    assert case.geometry.depth.shape == (40, 60)
    assert case.geometry.depth.min() == pytest.approx(1.0) and case.geometry.depth.max() == pytest.approx(3.0)
    assert mask_iou(case.masks["obj_001"], np.pad(np.ones((20, 20), bool), ((10, 10), (20, 20)))) >= 0.9
    cam = case.spec.camera()
    assert cam.pose_at(cam.duration_s / 2).translation == pytest.approx([0.1, 0, 0])
    assert cam.pose_at(cam.duration_s).translation == pytest.approx([0, 0, 0])
    assert camera_preset("pan-left-return", None, 4, 12).pose_at(2).yaw_deg == pytest.approx(-10)


def test_bad_inputs_name_the_file_and_field(tmp_path):
    with pytest.raises(AnnotateError, match="expected 4 numbers"):
        parse_object_option("cup:1,2,3")
    assert parse_object_option("red mug:1,2,30,40").box == [1, 2, 30, 40]
    p = tmp_path / "spec.json"
    p.write_text(json.dumps({"image": "x.png", "objects": [{"phrase": "cup", "box": [0, 0, 5, 5], "kinematics": "wobbly"}]}))
    with pytest.raises(AnnotateError) as e:
        load_spec_file(p)
    assert e.value.file == str(p) and e.value.field == "objects[0].kinematics"
    p.write_text(json.dumps({"objects": [], "colour": "red"}))
    with pytest.raises(AnnotateError, match="colour"):
        load_spec_file(p)
    with pytest.raises(AnnotateError, match="no VLM judge"):
        annotate(np.zeros((20, 20, 3), np.uint8), AnnotateSpec(objects=[]), tmp_path / "none")


def test_cli_annotate_with_a_spec_file(tmp_path):
    from PIL import Image
    from typer.testing import CliRunner

    from worldeval.cli import app

    img = np.full((60, 80, 3), 235, np.uint8)
    img[15:45, 10:35] = (30, 160, 40)
    img[20:40, 50:70] = (40, 40, 200)
    Image.fromarray(img).save(tmp_path / "scene.png")
    (tmp_path / "spec.json").write_text(json.dumps({
        "image": "scene.png", "id": "two_blocks", "subcategory": "toy_table", "camera": "pan-right-return",
        "objects": [{"phrase": "green block", "box": [7, 12, 31, 36]}]}))
    res = CliRunner().invoke(app, ["opis", "annotate", "--spec", str(tmp_path / "spec.json"), "--out",
                                   str(tmp_path / "case"), "--object", "blue block:47,17,26,26",
                                   "--kinematics", "2=deformable", "--no-embeddings", "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    assert summary["id"] == "two_blocks"
    assert [(i["category"], i["kinematics"], i["track"]) for i in summary["instances"]] == [
        ("green block", "rigid", "static"), ("blue block", "deformable", "dynamic")]
    assert summary["instances"][1]["bbox"] == [50.0, 20.0, 20.0, 20.0]
    bad = CliRunner().invoke(app, ["opis", "annotate", str(tmp_path / "missing.png"), "--out", str(tmp_path / "x"),
                                   "--object", "a:1,1,5,5"])
    assert bad.exit_code == 2 and "missing.png" in bad.output


@pytest.mark.slow
def test_reference_embeddings_with_the_evaluators_embedder(coins, tmp_path):
    pytest.importorskip("worldeval.opis.evaluate")
    image, refs = coins
    spec = AnnotateSpec(objects=[ObjectPrompt("coin", box=_box(m)) for m in refs[:2]], embeddings=True)
    annotate(image, spec, tmp_path / "e")
    raw = json.loads((tmp_path / "e" / "case.json").read_text())
    if "reference_embeddings" not in raw:
        pytest.skip("the evaluator's embedder did not load here")
    emb = np.load(tmp_path / "e" / raw["reference_embeddings"]["file"])
    assert emb.shape[0] == 2 and raw["reference_embeddings"]["order"] == ["obj_001", "obj_002"]
    assert np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-3)


def test_vlm_proposed_phrases_are_validated_and_clipped(coins, tmp_path, monkeypatch):
    import worldeval.judge as judge
    import worldeval.opis.cases.annotate as annotate_module
    from worldeval.judge import JudgeAnswer

    image, refs = coins
    b0 = _box(refs[0])
    seen = {}

    class FakeClient:
        def __init__(self, config):
            seen["model"] = config.model

        def ask_json(self, content, validator=None, **kw):
            parsed = validator({"objects": [{"phrase": "Coin", "box": b0},
                                            {"phrase": "coin", "box": [370, 290, 500, 500]},  # clipped to the image
                                            {"phrase": " ", "box": [1, 1, 9, 9]}]})  # empty phrase: dropped
            return JudgeAnswer(raw="{}", parsed=parsed, attempts=1, latency_s=0.0)

    monkeypatch.setattr(annotate_module, "JudgeClient", FakeClient)
    cfg = judge.JudgeConfig(model="fake-vlm")
    annotate(image, AnnotateSpec(objects=[], embeddings=False), tmp_path / "v", judge_config=cfg)
    raw = json.loads((tmp_path / "v" / "case.json").read_text())
    assert seen["model"] == "fake-vlm"
    assert raw["annotation"]["phrases_from"] == "vlm:fake-vlm"
    assert raw["instances"][0]["category"] == "coin"
    assert mask_iou(load_case(tmp_path / "v").masks["obj_001"], refs[0]) >= 0.8
    boxes = [p["box"] for p in raw["annotation"]["prompts"]]
    assert all(b[0] + b[2] <= 384 and b[1] + b[3] <= 303 for b in boxes)


def test_hf_backend_picks_the_instance_matching_the_box(coins, tmp_path, monkeypatch):
    """The hf path with a stand-in segmenter: the observation best overlapping the box prompt is kept."""
    from worldeval.opis.backends.base import Observation

    image, refs = coins
    obs = [Observation(mask=m, box=tuple(_box(m, 0)), category="coin") for m in refs[:3]]

    class Seg:
        name = "fake-sam"

        def observe(self, frame, phrases, reference=None):
            return list(obs)

    import worldeval.opis.cases.annotate as annotate_module

    monkeypatch.setattr(annotate_module, "build_hf_segmenter", lambda device="cpu", **kw: Seg())
    spec = AnnotateSpec(objects=[ObjectPrompt("coin", box=_box(refs[1]))], segmenter="hf", embeddings=False)
    annotate(image, spec, tmp_path / "h")
    case = load_case(tmp_path / "h")
    assert np.array_equal(case.masks["obj_001"], refs[1])
    raw = json.loads((tmp_path / "h" / "case.json").read_text())
    assert raw["annotation"]["prompts"][0]["mask_source"] == "hf"


# ---------------------------------------------------------------- labels, preview and boxes of `opis annotate`


def _scene(tmp_path, size=(120, 160)) -> Path:
    """A light image with a dark 'swan' block, a red 'mug' block and a small orange 'beak' block."""
    from PIL import Image

    img = np.full((*size, 3), 235, np.uint8)
    img[20:70, 20:70] = (30, 30, 30)
    img[22:30, 70:80] = (230, 90, 20)
    img[80:110, 100:130] = (200, 30, 30)
    Image.fromarray(img).save(tmp_path / "scene.png")
    return tmp_path / "scene.png"


def _cli(*args: str):
    from typer.testing import CliRunner

    from worldeval.cli import app

    res = CliRunner().invoke(app, ["opis", "annotate", *args])
    return res, " ".join(res.output.split())  # rich wraps long lines


def test_labels_are_inferred_from_the_noun_phrase():
    from worldeval.opis.cases.annotate import label_prompt, phrase_labels

    for phrase in ("black swan", "swans", "person riding a bicycle", "man with a hat", "red beak", "head of the swan",
                   "dog's tail", "left hand"):
        assert phrase_labels(phrase)[1] == "dynamic", phrase
    assert phrase_labels("black swan")[:2] == ("articulated", "dynamic")
    assert phrase_labels("red beak")[0] is None  # a part: moves with its owner, its kinematics left alone
    for phrase in ("red mug", "table leg", "dog bowl", "bike with a rider", "coin"):
        assert phrase_labels(phrase) is None, phrase
    swan = label_prompt(ObjectPrompt("black swan"))
    assert (swan.kinematics, swan.resolved_track()) == ("articulated", "dynamic")
    assert swan.labels_from == {"kinematics": 'inferred from "swan"', "track": 'inferred from "swan"'}
    mug = label_prompt(ObjectPrompt("red mug"))
    assert (mug.kinematics, mug.resolved_track(), mug.labels_from) == (
        "rigid", "static", {"kinematics": "default", "track": "default"})
    given = label_prompt(ObjectPrompt("black swan", kinematics="rigid", track="static",
                                      labels_from={"kinematics": "given", "track": "given"}))
    assert (given.kinematics, given.resolved_track()) == ("rigid", "static")
    cloth = label_prompt(ObjectPrompt("towel", kinematics="deformable"))  # set by a caller: given
    assert cloth.labels_from == {"kinematics": "given", "track": "default for deformable objects"}


def test_cli_infers_tracks_and_explicit_options_win(tmp_path):
    image = _scene(tmp_path)
    objs = ["--object", "black swan:16,16,58,58", "--object", "red beak:68,20,14,12", "--object", "red mug:96,76,38,38"]
    res, text = _cli(str(image), "--out", str(tmp_path / "a"), *objs, "--camera", "hold", "--no-embeddings")
    assert res.exit_code == 0, res.output
    case = load_case(tmp_path / "a", with_geometry=False)
    assert [(i.category, i.kinematics, i.track) for i in case.instances] == [
        ("black swan", "articulated", "dynamic"), ("red beak", "rigid", "dynamic"), ("red mug", "rigid", "static")]
    assert ("obj_001 'black swan': kinematics articulated (inferred from \"swan\"), "
            "track dynamic (inferred from \"swan\")") in text
    assert "obj_003 'red mug': kinematics rigid (default), track static (default)" in text
    raw = json.loads((tmp_path / "a" / "case.json").read_text())
    assert raw["annotation"]["prompts"][1]["labels_from"]["track"].startswith('inferred from "beak"')
    res, text = _cli(str(image), "--out", str(tmp_path / "b"), *objs, "--kinematics", "1=rigid", "--track", "1=static",
                     "--track", "3=dynamic", "--no-embeddings", "--json")
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    assert [(i["kinematics"], i["track"]) for i in summary["instances"]] == [
        ("rigid", "static"), ("rigid", "dynamic"), ("rigid", "dynamic")]
    assert summary["instances"][0]["labels_from"] == {"kinematics": "given", "track": "given"}
    assert summary["instances"][2]["labels_from"] == {"kinematics": "default", "track": "given"}


def test_preview_outlines_every_mask_and_leaves_the_rest_alone(tmp_path):
    from scipy import ndimage

    from worldeval.media import read_image
    from worldeval.opis.cases.annotate import PREVIEW_COLOURS

    res, text = _cli(str(_scene(tmp_path, (200, 320))), "--out", str(tmp_path / "c"), "--object", "black swan:16,16,58,58",
                     "--object", "red mug:96,76,38,38", "--no-embeddings")
    assert res.exit_code == 0, res.output
    assert f"preview: {tmp_path / 'c' / 'preview.png'}" in text
    preview, case = read_image(tmp_path / "c" / "preview.png"), load_case(tmp_path / "c", with_geometry=False)
    assert preview.shape == case.image.shape
    for k, inst in enumerate(case.instances):
        mask = case.masks[inst.id]
        outline = mask & ~ndimage.binary_erosion(mask)
        ys, xs = np.nonzero(outline)
        colours = {tuple(int(v) for v in preview[y, x]) for y, x in zip(ys, xs)}
        assert colours == {PREVIEW_COLOURS[k]}, inst.id
    assert np.array_equal(preview[-3:, :8], case.image[-3:, :8])  # far from both masks and their labels
    assert np.array_equal(preview[55:60, 100:150], case.image[55:60, 100:150])


def test_cli_refuses_boxes_outside_the_image_and_clips_partial_ones(tmp_path):
    from PIL import Image

    img = np.full((480, 854, 3), 235, np.uint8)
    img[100:300, 700:854] = (30, 30, 200)
    Image.fromarray(img).save(tmp_path / "wide.png")
    args = [str(tmp_path / "wide.png"), "--out", str(tmp_path / "d"), "--no-embeddings", "--object", "swan:600,60,200,200"]
    res, text = _cli(*args, "--object", "x:900,70,-46,100")
    assert res.exit_code == 2
    assert "--object: objects[1].box: 'x' [900, 70, -46, 100]: width and height must be positive" in text
    res, text = _cli(*args, "--object", "x:900,70,46,100")
    assert res.exit_code == 2
    assert "--object: objects[1].box: 'x' [900, 70, 46, 100]" in text and "does not overlap the 854x480 image" in text
    res, text = _cli(*args[:-2], "--point", "--object", "x:10,500")
    assert res.exit_code == 2 and "--object: objects[0].point: 'x' [10, 500] lies outside the 854x480 image" in text
    assert not (tmp_path / "d").exists()
    res, text = _cli(*args, "--object", "blue block:690,90,200,220")
    assert res.exit_code == 0, res.output
    assert "objects[1].box: 'blue block' [690, 90, 200, 220] reaches outside the 854x480 image; " \
           "clipped to [690, 90, 164, 220]" in text
    raw = json.loads((tmp_path / "d" / "case.json").read_text())
    assert raw["annotation"]["prompts"][1]["box"] == [690, 90, 164, 220]
