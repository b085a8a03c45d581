"""`opis annotate --backend hf` and `--depth model` end to end through the CLI, on tiny models in a models folder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")
from typer.testing import CliRunner  # noqa: E402

from worldeval.cli import app  # noqa: E402
from tests.helpers.paths import SHARED_DATA

FRAME = SHARED_DATA / "davis_bmx_trees" / "frames" / "00000.jpg"
RIDER_BOX = "363,214,192,164"  # the DAVIS-2017 rider instance's box in frame 0


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from worldeval.opis.checkpoints.tiny import build_tiny_models_dir

    root = tmp_path_factory.mktemp("models")
    build_tiny_models_dir(root)
    return root


def _annotate(out: Path, *extra: str):
    args = ["opis", "annotate", str(FRAME), "--out", str(out), "--object", f"person:{RIDER_BOX}", "--max-side", "320",
            "--no-embeddings", "--quiet", *extra]  # fmt: skip
    return CliRunner().invoke(app, args)


@pytest.fixture(autouse=True)
def _frame_exists():
    if not FRAME.exists():
        pytest.skip("real data not available")


def test_annotate_hf_and_depth_model_through_the_cli(models, tmp_path, monkeypatch):
    monkeypatch.delenv("WORLDEVAL_MODELS_DIR", raising=False)
    res = _annotate(tmp_path / "case", "--backend", "hf", "--depth", "model", "--backend-option", f"models_dir={models}",
                    "--backend-option", "score_threshold=0")  # fmt: skip
    assert res.exit_code == 0, res.output
    case = json.loads((tmp_path / "case" / "case.json").read_text())
    ann = case["annotation"]
    assert ann["prompts"][0]["mask_source"] == "hf"  # SAM 3's mask, not the GrabCut fallback
    assert ann["geometry"] == "model:depth_pro"
    geo = np.load(tmp_path / "case" / "geometry.npz")
    assert geo["depth"].shape == (180, 320) and np.all(geo["depth"][geo["valid"]] > 0)
    # DepthPro's focal length reaches the case: not the default intrinsics of a flat fallback
    from worldeval.opis.case import default_intrinsics

    assert not np.allclose(geo["K"], default_intrinsics(180, 320))
    # without options: the default models folder
    monkeypatch.setenv("WORLDEVAL_MODELS_DIR", str(models))
    res = _annotate(tmp_path / "case2", "--backend", "hf", "--depth", "model", "--backend-option", "score_threshold=0")
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "case2" / "case.json").read_text())["annotation"]["geometry"] == "model:depth_pro"


def test_annotate_without_models_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLDEVAL_MODELS_DIR", str(tmp_path / "empty"))
    res = _annotate(tmp_path / "case", "--backend", "hf")
    assert res.exit_code == 2
    assert "sam3" in res.output and "worldeval models fetch" in res.output
    # --depth model without a depth model: the flat fallback, with the reason recorded
    res = _annotate(tmp_path / "flat", "--depth", "model")
    assert res.exit_code == 0, res.output
    geo = json.loads((tmp_path / "flat" / "case.json").read_text())["annotation"]["geometry"]
    assert geo.startswith("flat (depth model unavailable: hf: ") and "models fetch" in geo
