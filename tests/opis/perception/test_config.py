"""EvalConfig grouped by stage (issue 32): the flat names of before still build it, and a run folder
written by the flat model still resumes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from worldeval import runs
from worldeval.opis.perception.config import EvalConfig

# The flat model's dump with its defaults, written out by hand from the model before issue 32, each
# key with the dotted place its value has now.
FLAT = {
    "association_threshold": ("association.threshold", 0.35),
    "ambiguity_margin": ("association.ambiguity_margin", 0.05),
    "lambda_g": ("structure.lambda_g", 0.05),
    "pose_tau": ("structure.pose_tau", 0.2),
    "max_claims": ("structure.max_claims", 12),
    "claim_confidence": ("structure.claim_confidence", 0.7),
    "stride": ("stride", 8),
    "skip_seconds": ("skip_seconds", 1.0),
    "max_frames": ("max_frames", None),
    "first_frame": ("first_frame", "round"),
    "max_side": ("max_side", None),
    "min_likeness": ("association.min_likeness", 0.35),
    "min_edge_energy": ("association.min_edge_energy", 0.6),
    "firm_likeness": ("association.firm_likeness", 0.75),
    "foreign_min_appearance": ("association.foreign_min_appearance", 0.5),
    "weak_tie_affinity": ("association.weak_tie_affinity", 0.5),
    "ungated_min_appearance": ("association.ungated_min_appearance", 0.55),
    "moving_min_similarity": ("association.moving_min_similarity", 0.25),
    "gate_tolerance": ("association.gate_tolerance", 0.05),
    "min_in_view": ("camera.min_in_view", 0.5),
    "min_side_px": ("camera.min_side_px", 10.0),
    "occluded_share": ("camera.occluded_share", 0.5),
    "partly_covered_share": ("camera.partly_covered_share", 0.25),
    "min_correspondences": ("structure.min_correspondences", 6),
    "extra_min_similarity": ("extras.min_similarity", 0.5),
    "extra_margin": ("extras.margin", 0.1),
    "extra_feature_score": ("extras.feature_score", 0.44),
    "extra_template_score": ("extras.template_score", 0.85),
    "small_side": ("association.small_side", 40.0),
    "support_min_label": ("association.support_min_label", 0.3),
    "camera_holdout": ("camera.holdout", 0.2),
    "propagation": ("propagation.enabled", True),
    "propagation_stride": ("propagation.stride", 4),
    "propagation_topk": ("propagation.topk", 5),
    "propagation_temperature": ("propagation.temperature", 0.07),
    "propagation_memory": ("propagation.memory", 4),
    "propagation_radius": ("propagation.radius", 6),
    "propagation_mask_threshold": ("propagation.mask_threshold", 0.3),
    "propagation_min_mass": ("propagation.min_mass", 0.2),
    "propagation_min_carried": ("propagation.min_carried", 0.5),
    "propagation_min_core": ("propagation.min_core", 0.25),
    "propagation_min_object_share": ("propagation.min_object_share", 0.5),
    "propagation_min_similarity": ("propagation.min_similarity", 0.15),
    "propagation_same_place": ("propagation.same_place", 0.5),
    "seed": ("seed", 0),
}
OLD_DUMP = {k: v for k, (_, v) in FLAT.items()}


def _at(config: EvalConfig, dotted: str):
    obj = config
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _other(value):
    """A valid value of the same kind that differs from `value`."""
    if isinstance(value, bool):
        return not value
    if value is None:
        return 64
    if value == "round":
        return "at_or_after"
    return value + 1


def test_the_flat_dump_validates_to_the_default_grouped_config():
    old = EvalConfig.model_validate(OLD_DUMP)
    assert old == EvalConfig()
    assert old.model_dump() == EvalConfig().model_dump()
    for flat, (dotted, value) in FLAT.items():
        assert _at(EvalConfig(), dotted) == value, flat


@pytest.mark.parametrize("flat", sorted(FLAT))
def test_each_flat_keyword_sets_its_grouped_field(flat):
    dotted, value = FLAT[flat]
    changed = EvalConfig(**{flat: _other(value)})
    assert _at(changed, dotted) == _other(value)
    # and nothing else moved
    rest = {k: v for k, v in FLAT.items() if k != flat}
    assert all(_at(changed, d) == v for d, v in rest.values())


def test_flat_keywords_mix_with_each_other_as_the_cli_gives_them():
    c = EvalConfig(propagation_stride=8, max_side=480, propagation=False)
    assert (c.propagation.stride, c.propagation.enabled, c.max_side) == (8, False, 480)
    assert c.propagation.topk == 5  # the rest of the group keeps its defaults


def test_unknown_keys_fail_naming_the_field():
    with pytest.raises(ValidationError, match="propagation_strid"):
        EvalConfig.model_validate({**OLD_DUMP, "propagation_strid": 4})
    with pytest.raises(ValidationError, match=r"propagation\.strid"):
        EvalConfig(propagation={"strid": 4})
    with pytest.raises(ValidationError, match="propagation_stride and propagation.stride"):
        EvalConfig(propagation={"stride": 4}, propagation_stride=8)


# --------------------------------------------------------------------------- an old run folder


def _dataset(root: Path) -> tuple[Path, Path]:
    """One case (a textured square on a textured background) and a still rollout of 12 frames at 10 fps."""
    import cv2

    from worldeval.media import write_video
    from worldeval.opis.case import write_case

    rng = np.random.default_rng(0)
    img = cv2.GaussianBlur((rng.random((96, 128, 3)) * 255).astype(np.uint8), (0, 0), 1.2)
    img[30:70, 40:90] = (rng.random((40, 50, 3)) * 255).astype(np.uint8)
    mask = np.zeros((96, 128), bool)
    mask[30:70, 40:90] = True
    spec = {"id": "c", "domain": "synthetic", "subcategory": "tabletop", "image": "input.png",
            "instances": [{"id": "thing", "category": "box", "kinematics": "rigid", "track": "static"}]}
    write_case(root / "ds" / "c", spec, img, {"thing": mask})
    write_video(root / "ro" / "c.mp4", [img] * 12, 10)
    return root / "ds", root / "ro"


def _make_flat(run: Path, eval_dict: dict) -> str:
    """Rewrite the folder as the flat model wrote it: `eval_dict` in the manifest, hashed the way
    opis/run.py hashed a run then (backend, backend options, eval settings, judge)."""
    old_hash = runs.config_hash({"backend": "classical", "backend_options": {}, "eval": eval_dict, "judge": None})
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["config"]["eval"], manifest["config_hash"] = eval_dict, old_hash
    (run / "manifest.json").write_text(json.dumps(manifest))
    for status in (run / "status").rglob("*.json"):
        rec = json.loads(status.read_text())
        rec["config_hash"] = old_hash
        status.write_text(json.dumps(rec))
    return old_hash


@pytest.mark.slow
def test_a_folder_written_by_the_flat_config_resumes_without_force(tmp_path):
    from worldeval.opis.run import run_eval

    ds, ro = _dataset(tmp_path)
    run = tmp_path / "run"
    assert run_eval(ds, ro, "m", run, workers=0)["done"] == ["c"]
    old_hash = _make_flat(run, OLD_DUMP)
    again = run_eval(ds, ro, "m", run, workers=0)  # no force
    assert again["skipped"] == ["c"] and again["done"] == [] and again["failed"] == []
    manifest = json.loads((run / "manifest.json").read_text())
    # the folder keeps its hash and its layout, so the next resume finds them again
    assert manifest["config_hash"] == old_hash and manifest["config"]["eval"] == OLD_DUMP
    assert run_eval(ds, ro, "m", run, workers=0)["skipped"] == ["c"]
    # other values in the flat layout are another config: refused as before
    _make_flat(run, {**OLD_DUMP, "propagation_stride": 8})
    with pytest.raises(runs.ResumeError, match="different config"):
        run_eval(ds, ro, "m", run, workers=0)
