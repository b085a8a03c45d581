"""The backend registry and contract: names, entry points, module:builder backends through the CLI, manifest checks."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from worldeval.opis.backends import registry
from worldeval.opis.backends.base import Backend

# A backend kept in a file of one's own: the classical pieces under another name and version.
OUTSIDE = textwrap.dedent('''
    from worldeval.opis.backends.classical import build_backend

    def build(device="cpu", **options):
        backend = build_backend(device=device, pose="none", **options)
        backend.name = "mine"
        backend.versions = {**backend.versions, "mine": "1.0"}
        return backend

    def not_a_backend(device="cpu", **options):
        return 42
''')


@pytest.fixture(autouse=True)
def _forget_outside_modules(monkeypatch):
    """Each test imports the user's file afresh, and what registry put on sys.path is taken off again."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in ("my_backend",):
        monkeypatch.delitem(sys.modules, name, raising=False)
    yield
    sys.modules.pop("my_backend", None)


def _outside(folder: Path, name: str = "my_backend") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(OUTSIDE)
    return folder


def test_registered_names_and_gpu_needs():
    assert registry.resolve("classical").builder == "worldeval.opis.backends.classical:build_backend"
    assert registry.resolve("hf").builder == "worldeval.opis.backends.hf:build_hf_backend"
    assert {"classical", "hf"} <= set(registry.names())
    assert registry.needs_gpu("hf", "cuda") and not registry.needs_gpu("classical", "cuda:0")
    assert not registry.needs_gpu("hf", "cpu")
    from worldeval.opis.run import default_resources

    assert default_resources("hf", "cuda") == {"num_cpus": 1, "num_gpus": 1}
    assert default_resources("classical", "cuda") == {"num_cpus": 1}


def test_bad_names_say_what_is_accepted(tmp_path, monkeypatch):
    with pytest.raises(registry.BackendNotFound, match="classical.*hf.*module:builder"):
        registry.resolve("nope")
    with pytest.raises(registry.BackendNotFound, match="cannot import module 'no_such_module_xyz'"):
        registry.resolve("no_such_module_xyz:build")
    monkeypatch.chdir(_outside(tmp_path))
    with pytest.raises(registry.BackendNotFound, match="has no 'missing'"):
        registry.resolve("my_backend:missing")
    with pytest.raises(TypeError, match="returned int, not a Backend"):
        registry.build("my_backend:not_a_backend")


def test_entry_point_backend_resolves(tmp_path, monkeypatch):
    dist = tmp_path / "site" / "mine_backend-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mine-backend\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[worldeval.backends]\nmine = my_backend:build\n")
    _outside(tmp_path / "site")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    spec = registry.resolve("mine")
    assert (spec.kind, spec.builder) == ("entry point", "my_backend:build")
    assert "mine" in registry.names()
    backend = registry.build("mine")
    assert isinstance(backend, Backend) and backend.name == "mine" and backend.versions["mine"] == "1.0"


def test_module_folder_travels_to_a_process_started_elsewhere(tmp_path, monkeypatch):
    """Workers are new processes: the folder found for module:builder is enough to rebuild it there."""
    monkeypatch.chdir(_outside(tmp_path / "mine"))
    spec = registry.resolve("my_backend:build")
    assert spec.kind == "module" and spec.path == str((tmp_path / "mine").resolve())
    code = ("from worldeval.opis.backends.registry import build; "
            f"b = build('my_backend:build', module_path={spec.path!r}); print(b.name, b.versions['mine'])")
    out = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-2:] == ["mine", "1.0"]


def _scene(root: Path):
    import cv2

    from worldeval.media import write_video
    from worldeval.opis.case import write_case

    rng = np.random.default_rng(3)
    img = cv2.GaussianBlur((rng.random((120, 160, 3)) * 255).astype(np.uint8), (0, 0), 1.2)
    obj = np.zeros((120, 160), bool)
    obj[30:80, 50:100] = True
    img[30:80, 50:100] = cv2.GaussianBlur((rng.random((50, 50, 3)) * 255).astype(np.uint8), (0, 0), 0.8)
    spec = {"id": "box", "domain": "synthetic", "subcategory": "tabletop", "image": "input.png",
            "instances": [{"id": "thing", "category": "box", "kinematics": "rigid", "track": "static"}]}
    write_case(root / "ds" / "box", spec, img, {"thing": obj})
    write_video(root / "ro" / "box.mp4", [np.roll(img, k, axis=1) for k in range(24)], 8)
    return root / "ds", root / "ro"


def _eval(ds, ro, out, *extra):
    from typer.testing import CliRunner

    from worldeval.cli import app

    args = ["opis", "eval", "--dataset", str(ds), "--rollouts", str(ro), "--model", "m", "--out", str(out), "--quiet",
            "--json", *extra]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["done"] == ["box"], summary
    return json.loads((out / "manifest.json").read_text())


@pytest.mark.slow
def test_outside_backend_through_the_cli_is_named_in_the_manifest(tmp_path, monkeypatch):
    from worldeval.opis.archive import read_archive

    ds, ro = _scene(tmp_path)
    monkeypatch.chdir(_outside(tmp_path / "user"))
    # --workers 1: a spawned worker process must import the user's file too
    mine = _eval(ds, ro, tmp_path / "run_mine", "--backend", "my_backend:build", "--workers", "1")
    ref = _eval(ds, ro, tmp_path / "run_ref", "--backend", "classical", "--backend-option", "pose=none", "--workers", "0")
    assert mine["config"]["backend"] == "my_backend:build"
    assert mine["backend"] == {"given": "my_backend:build", "builder": "my_backend:build", "kind": "module", "needs_gpu": True}
    assert mine["backends"]["my_backend:build"]["name"] == "mine" and mine["backends"]["my_backend:build"]["mine"] == "1.0"
    assert ref["backend"]["builder"] == "worldeval.opis.backends.classical:build_backend"
    assert mine["checks"] == ref["checks"] and mine["checks"]["keypoint_support"] and not mine["checks"]["pose_structure"]
    # the same pieces under another name measure the same numbers
    a = read_archive(tmp_path / "run_mine").drop(columns=["model"])
    b = read_archive(tmp_path / "run_ref").drop(columns=["model"])
    assert len(a) > 0 and a.reset_index(drop=True).equals(b.reset_index(drop=True))


def test_checks_follow_what_the_pieces_declare():
    from worldeval.opis.backends.classical import build_backend
    from worldeval.opis.perception.frame import checks

    classical = build_backend(pose="none")
    got = checks(classical)
    assert got == {"keypoint_support": True, "search_provenance": True, "extras_by_keypoints": True,
                   "extras_by_template": True, "place_proposals": True, "motion_proposals": False, "static_structure": True,
                   "pose_structure": False, "claims_structure": False}  # fmt: skip
    # the camera's background budget is a backend option like the others (strings converted)
    tuned = build_backend(pose="none", background_features="120", contrast_floor="0.01").matcher
    assert (tuned.background_features, tuned.contrast_floor) == (120, 0.01)
    assert "background=120@0.01" in tuned.versions["matcher"]
    with pytest.raises(ValueError, match="contrast_floor"):
        build_backend(pose="none", contrast_floor="low")

    class OpenSegmenter:  # declares no optional evidence, like the hf segmenters
        name, versions, evidence = "open", {}, frozenset()

    class NoDetector:  # a detector-free matcher, like EfficientLoFTR
        name, versions, detects_keypoints = "nodetector", {}, False

    hf_like = Backend(name="x", segmenter=OpenSegmenter(), embedder=classical.embedder, matcher=NoDetector())
    got = checks(hf_like, judge=object())
    assert not got["keypoint_support"] and not got["search_provenance"]
    assert not got["extras_by_keypoints"] and not got["extras_by_template"]
    assert got["claims_structure"] and got["static_structure"]
