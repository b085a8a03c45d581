"""`worldeval models fetch|check` and the models folder, with the hub mocked and tiny models on disk (no network)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("transformers")
from typer.testing import CliRunner  # noqa: E402

from worldeval.cli import app  # noqa: E402
from worldeval.opis.checkpoints import store as hf_models  # noqa: E402
from tests.helpers.paths import SHARED_DATA

FRAME = SHARED_DATA / "davis_bmx_trees" / "frames" / "00000.jpg"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from worldeval.opis.checkpoints.tiny import build_tiny_models_dir

    root = tmp_path_factory.mktemp("models")
    build_tiny_models_dir(root)
    return root


def _gated(repo: str):
    import httpx2
    from huggingface_hub.errors import GatedRepoError

    resp = httpx2.Response(403, request=httpx2.Request("GET", f"https://huggingface.co/api/models/{repo}"))
    return GatedRepoError(f"Access to model {repo} is restricted. You must have access to it.", response=resp)


def test_fetch_downloads_defaults_and_explains_gated_repos(tmp_path, monkeypatch):
    import huggingface_hub

    calls = []

    def fake_snapshot(repo_id, local_dir=None, allow_patterns=None, token=None, **kw):
        calls.append((repo_id, local_dir, tuple(allow_patterns or ()), token))
        if repo_id == "facebook/sam3":
            raise _gated(repo_id)
        Path(local_dir).mkdir(parents=True, exist_ok=True)
        (Path(local_dir) / "config.json").write_text("{}")
        return local_dir

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot)
    res = CliRunner().invoke(app, ["models", "fetch", "--dir", str(tmp_path), "--token", "hf_secret_value"])
    assert res.exit_code == 1
    out = res.output
    assert "facebook/sam3 is gated" in out and "https://huggingface.co/facebook/sam3" in out and "hf auth login" in out
    assert "hf_secret_value" not in out
    repos = [c[0] for c in calls]
    assert repos == [r for r, _, _ in hf_models.DEFAULT_CHECKPOINTS.values()]  # every default tried, sam3's failure did not stop the rest
    assert all(c[1] == str(tmp_path / o) for c, o in zip(calls, hf_models.DEFAULT_CHECKPOINTS))
    assert all("*.safetensors" in c[2] and c[3] == "hf_secret_value" for c in calls)
    manifest = json.loads((tmp_path / "models.json").read_text())
    assert set(manifest) == set(hf_models.DEFAULT_CHECKPOINTS) - {"sam3"}
    assert manifest["dinov3"]["repo"] == "facebook/dinov3-vitl16-pretrain-lvd1689m"
    assert "hf_secret_value" not in (tmp_path / "models.json").read_text()
    # --only and --fallbacks pick the repositories
    calls.clear()
    res = CliRunner().invoke(app, ["models", "fetch", "--dir", str(tmp_path), "--only", "sam2", "--only", "dinov2"])
    assert res.exit_code == 0, res.output
    assert [c[0] for c in calls] == ["facebook/sam2.1-hiera-large", "facebook/dinov2-large"]
    res = CliRunner().invoke(app, ["models", "fetch", "--dir", str(tmp_path), "--only", "mast3r"])
    assert res.exit_code == 1 and "unknown model option" in res.output


def test_check_reports_each_piece(tiny_dir, tmp_path):
    if not FRAME.exists():
        pytest.skip("real data not available")
    res = CliRunner().invoke(app, ["models", "check", "--dir", str(tiny_dir), "--image", str(FRAME)])
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.output.splitlines() if ln.startswith(("OK", "FAIL"))]
    assert sorted(ln.split()[1] for ln in lines) == sorted(hf_models.TINY_CHECK_OPTIONS)
    for ln in lines:
        assert ln.startswith("OK") and "load" in ln and "peak RSS" in ln and str(tiny_dir) in ln
    # one piece missing, one broken: each named with its path, exit status 1
    broken = tmp_path / "models"
    shutil.copytree(tiny_dir, broken)
    shutil.rmtree(broken / "depth")
    cfg = json.loads((broken / "matcher" / "config.json").read_text())
    cfg["model_type"] = "dinov2"
    (broken / "matcher" / "config.json").write_text(json.dumps(cfg))
    res = CliRunner().invoke(app, ["models", "check", "--dir", str(broken), "--image", str(FRAME)])
    assert res.exit_code == 1
    fails = {ln.split()[1]: ln for ln in res.output.splitlines() if ln.startswith("FAIL")}
    assert set(fails) == {"depth", "matcher"}
    assert "missing" in fails["depth"] and str(broken / "depth") in fails["depth"]
    assert "LightGlue or EfficientLoFTR" in fails["matcher"] and str(broken / "matcher") in fails["matcher"]


def test_backend_fills_options_from_the_models_folder(tiny_dir, monkeypatch):
    from worldeval.opis.backends.hf import HFBackendError, build_hf_backend

    be = build_hf_backend("cpu", models_dir=str(tiny_dir))
    assert be.segmenter.name == "sam3" and be.matcher.name == "lightglue" and be.depth.name == "depth_pro"
    assert str(tiny_dir / "sam3") in be.versions["segmenter"]
    # no option at all: the default folder (WORLDEVAL_MODELS_DIR)
    monkeypatch.setenv("WORLDEVAL_MODELS_DIR", str(tiny_dir))
    assert build_hf_backend("cpu").embedder.name == "dinov3"
    monkeypatch.setenv("WORLDEVAL_MODELS_DIR", str(tiny_dir / "nothing_here"))
    with pytest.raises(HFBackendError, match="sam3.*worldeval models fetch"):
        build_hf_backend("cpu")
