"""`worldeval demo`: the offline demo benchmark and the reference models' ranking."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest

from worldeval.cli.demo import expected_order_ok
from worldeval.opis.cases.demo import build_demo_dataset, demo_spec, load_photo, stereo_geometry
from worldeval.opis.case import load_case


def test_demo_annotations_are_well_formed():
    spec = demo_spec()
    assert len(spec["cases"]) >= 5
    for case in spec["cases"]:
        image = load_photo(case["photo"])  # bundled with scikit-image: no download
        H, W = image.shape[:2]
        assert case["objects"], case["id"]
        for o in case["objects"]:
            x, y, w, h = o["box"]
            assert 0 <= x and 0 <= y and x + w <= W and y + h <= H, (case["id"], o)


def test_stereo_depth_of_the_motorcycle_photo():
    g = stereo_geometry()
    assert g.depth.shape == (500, 741)
    d = g.depth[g.valid]
    # Z = f B / (d + doffs): the garage scene lies between about 2 and 5 metres from the camera.
    assert 1.8 < np.percentile(d, 1) and np.percentile(d, 99) < 5.5
    assert g.valid.mean() > 0.9


def test_build_one_demo_case(tmp_path):
    build_demo_dataset(tmp_path / "ds", cases=["chelsea"])
    case = load_case(tmp_path / "ds" / "chelsea")
    assert [i.category for i in case.instances] == ["green cat eye", "green cat eye", "pink cat nose"]
    # eyes and nose are compact blobs that fill a good part of their hand-drawn boxes
    for inst in case.instances:
        m = case.masks[inst.id]
        x, y, w, h = inst.bbox
        assert 0.5 < m.sum() / (w * h) <= 1.0
    assert max(case.shape) == 451 or max(case.shape) <= demo_spec()["max_side"]
    assert json.loads((tmp_path / "ds" / "dataset.json").read_text())["cases"] == ["chelsea"]


def test_expected_order_check():
    m = lambda v: {"OPIS": v}  # noqa: E731
    ok, _ = expected_order_ok({"oracle": m(90), "forgetful-a": m(60), "forgetful-b": m(50), "swapped": m(5)})
    assert ok
    ok, why = expected_order_ok({"oracle": m(90), "forgetful-a": m(95), "swapped": m(5)})
    assert not ok and "forgetful-a" in why
    ok, _ = expected_order_ok({"oracle": m(90), "forgetful-a": m(4), "swapped": m(5)})
    assert not ok
    assert not expected_order_ok({"oracle": m(90), "swapped": m(5)})[0]  # no forgetful model at all


# The ranking tests run `worldeval demo` on two of its cases at half size (a third of the time of the
# whole demo): the pan camera on a flat photo and the truck camera on stereo depth. Every reference
# model is still rendered, evaluated and scored; only fewer, smaller inputs go through.
SMALL_CASES = ("coffee", "motorcycle")
SMALL_MAX_SIDE = 256


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """(out folder, CLI result, the spec the run used) of `worldeval demo --json` on the small spec."""
    pytest.importorskip("worldeval.opis.evaluate", reason="the OPIS evaluator is not available")
    from typer.testing import CliRunner

    import worldeval.cli.demo as demo_cli
    import worldeval.opis.cases.demo as demo_cases
    from worldeval.cli import app

    spec = demo_spec()
    small = dict(spec, max_side=SMALL_MAX_SIDE, cases=[c for c in spec["cases"] if c["id"] in SMALL_CASES])
    assert [c["id"] for c in small["cases"]] == list(SMALL_CASES)
    out = tmp_path_factory.mktemp("demo") / "worldeval-demo"
    with pytest.MonkeyPatch.context() as mp:
        # both the dataset builder and the command read the spec; each must see the small one
        for module in (demo_cases, demo_cli):
            mp.setattr(module, "demo_spec", lambda: small)
        res = CliRunner().invoke(app, ["demo", "--out", str(out), "--json", "--bootstrap", "200"])
    return out, res, small


@pytest.mark.slow
def test_demo_ranks_the_reference_models(demo_run):
    out, res, small = demo_run
    assert res.exit_code == 0, res.output[-3000:]
    assert json.loads((out / "dataset" / "dataset.json").read_text())["cases"] == list(SMALL_CASES)
    summary = json.loads(res.output)
    assert summary["ranking_ok"], summary["leaderboard"]
    names = [r["model"] for r in summary["leaderboard"]]
    assert set(names) == {"oracle", "static", "forgetful-drift", "forgetful-recolor", "forgetful-drop", "swapped"}
    for r in summary["leaderboard"]:
        lo, hi = r["OPIS_ci"]
        assert lo <= r["OPIS"] <= hi
    # the demo's speed is a benchmark figure (README, docs/demo.md), not a test: a loaded CI machine must not fail it
    assert set(summary["seconds"]) >= {"dataset", "rollouts", "evaluate", "score", "total"}
    if summary["report"]:
        html = (out / "report.html").read_text(encoding="utf-8")
        assert "oracle" in html and "forgetful-drop" in html


@pytest.mark.slow
def test_oracle_beats_every_forgetful_model_on_every_demo_case(demo_run):
    out, res, small = demo_run
    assert res.exit_code in (0, 1), res.output[-3000:]
    scores = json.loads((out / "scores.json").read_text())
    by_case = defaultdict(dict)
    for c in scores["cases"]:
        by_case[c["case_id"]][c["model"]] = c["OPIS"]
    assert set(by_case) == {c["id"] for c in small["cases"]}
    for cid, models in by_case.items():
        for name in ("forgetful-drift", "forgetful-recolor", "forgetful-drop"):
            assert models["oracle"] > models[name], (cid, models)
