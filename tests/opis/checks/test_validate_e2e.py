"""End to end: `opis validate` on a real COCO photo of ../shared/data/coco_multiobj.

The camera is fitted on the unannotated background only; on photo 599 (as on 443) the
objects cover over 90% of the picture, and only the background's own feature
budget (classical backend, docs/backends.md) gives that camera enough support. The case
must pass every check it runs (all of issue 3's but other_scene, which needs a second case). The suite runs this one of the six photos (one of the two hardest cameras,
from the reporting part of the hold-out split; 443, the tuning part's, took the suite's other
minute) to stay under its time budget; all six, with every check, are `benchmarks/faithful_report.py`'s. This is the real evaluator (classical
backend) on real photos; the thresholds of each check are not relaxed. The clips are 3.5 s instead of the
command's default 5 s (8 sampled frames instead of 13) to keep the suite's
run time down; the pan, the edits and the checks are the same.
"""

from __future__ import annotations

import pytest
from tests.helpers.paths import SHARED_DATA

DATA = SHARED_DATA / "coco_multiobj"
PHOTOS = ["000000000599"]


@pytest.mark.slow
def test_validate_on_coco_multiobj(tmp_path):
    if not (DATA / "instances.json").exists():
        pytest.skip("shared data coco_multiobj not present")
    from worldeval.opis.cases.coco import build_coco_dataset
    from worldeval.opis.checks.synth import PanTrajectory, SynthConfig
    from worldeval.opis.checks.validate import CORE_CHECKS
    from worldeval.opis.checks.validate import ValidateConfig, run_validate

    ds = tmp_path / "coco"
    build_coco_dataset(DATA, ds, PHOTOS)
    # the core checks on the pan camera; moved, resized, pasted, tilt and zoom are measured by
    # benchmarks/faithful_report.py on the held-out photos
    # other_scene needs a second case (its rollout is another case's video): one photo leaves it to
    # tests/opis/perception/test_eval_perception.py (another scene: camera unreliable) and the report
    checks = tuple(c for c in CORE_CHECKS if c != "other_scene")
    cfg = ValidateConfig(synth=SynthConfig(trajectory=PanTrajectory(duration_s=3.5)), workers=2, checks=checks)
    result = run_validate(ds, tmp_path / "out", cfg, log=lambda m: None)
    assert (tmp_path / "out" / "validate.json").exists()
    assert len(result["cases"]) == len(PHOTOS) and not result["load_errors"]
    rates = result["pass_rates"]
    failures = {
        name: [f"{cid}: {r['checks'][name].get('reason')}" for cid, r in result["cases"].items() if not r["checks"][name].get("passed")]
        for name in checks
    }
    # the camera is fitted on the background only; every photo must still pass every check
    for name in checks:
        assert rates[name]["passed"] == rates[name]["cases"], (name, rates[name], failures[name])
