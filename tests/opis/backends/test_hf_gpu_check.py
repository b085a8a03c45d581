"""benchmarks/hf_gpu_check.py: its --tiny run passes on CPU, and a wrong model path fails, named."""

from __future__ import annotations

import importlib.util

import pytest
from tests.helpers.paths import REPO, SHARED_DATA

pytest.importorskip("transformers")
SCRIPT = REPO / "benchmarks" / "hf_gpu_check.py"
DATA = SHARED_DATA / "davis_bmx_trees"


def _script():
    spec = importlib.util.spec_from_file_location("hf_gpu_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(autouse=True)
def _models_dir_env(monkeypatch):
    monkeypatch.delenv("WORLDEVAL_MODELS_DIR", raising=False)  # the script sets it for its CLI runs


def test_missing_model_path_fails_naming_it(tmp_path, capsys):
    missing = tmp_path / "no_such_sam3"
    assert _script().main(["--tiny", "--sam3", str(missing), "--work", str(tmp_path / "w")]) == 1
    err = capsys.readouterr().err
    assert "FAIL sam3" in err and str(missing) in err


@pytest.mark.slow
def test_tiny_check_passes_on_cpu(tmp_path, capsys):
    if not DATA.exists():
        pytest.skip("real data not available")
    # 32 frames at 24 fps: one sampled frame (24) keeps the end-to-end run short
    assert _script().main(["--tiny", "--frames", "32", "--work", str(tmp_path), "--json", str(tmp_path / "r.json")]) == 0
    import json

    rep = json.loads((tmp_path / "r.json").read_text())
    e2e = rep["end_to_end"]
    assert e2e["sampled_frames"] == 1 and e2e["instances"] == 2
    assert e2e["annotation_geometry"] == "model:depth_pro"  # --depth model went through the hf depth model
    assert set(rep["models"]) == {"sam3", "dinov3", "matcher", "depth", "vitpose"}
    assert (tmp_path / "run" / "parts").exists()
    out = capsys.readouterr().out
    assert "PASS (tiny, cpu)" in out and out.count("OK   ") == 5
