"""`opis validate` assessment: hand-built archives of an ideal evaluator pass, a blind one fails.

These tests do not run the perception pipeline: they write archive parts the
way `opis eval` would and check that the verdicts follow from the measurements
and the synthetic ground truth alone.
"""

from __future__ import annotations

import pandas as pd
import pytest

from worldeval.opis.archive import COLUMNS, write_case_part
from worldeval.opis.checks.validate import CHECKS, Thresholds, ValidateConfig, assess, judge, target_measurements

FRAMES = [24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120]
INSTANCES = ["obj_001", "obj_002", "obj_003"]
TARGET = "obj_002"


def _record(case_id="c1", out_of_view=(56, 64)):
    share = [1.0] * 121
    for f in out_of_view:  # the target leaves the view at the peak of the pan
        share[f] = 0.2
    return {
        "case_id": case_id,
        "target": {"instance_id": TARGET, "category": "bottle"},
        "videos": {n: f"/nowhere/{n}/{case_id}.mp4" for n in CHECKS},
        "skipped": {},
        "ground_truth": {"target_in_view_share": share, "duplicate_in_view_share": [1.0] * 121, "moved_in_view_share": share,
                         "resized_in_view_share": share, "pasted_in_view_share": [1.0] * 121, "in_view_share_threshold": 0.75},
    }


def _rows(model, case_id, *, target="match", appearance=0.9, structure=0.9, extra=False, others_matched=True,
          oov_frames=(56, 64)):
    rows = []
    for f in FRAMES:
        for iid in INSTANCES:
            vis, matched, app, st = "expected_visible", others_matched, appearance, structure
            if iid == TARGET:
                if f in oov_frames:
                    vis, matched, app, st = "out_of_view", False, None, None
                elif target == "missing":
                    matched, app, st = False, None, None
                elif target == "unknown":
                    vis, matched, app, st = "unknown", False, None, None
            if not matched:
                app = st = None
            rows.append(dict(model=model, case_id=case_id, domain="d", subcategory="s", n_reference=3, frame=f,
                             time_s=f / 24, instance_id=iid, track="static", visibility=vis, matched=matched,
                             ambiguous=False, extra=False, appearance=app, structure=st,
                             structure_source="static" if st is not None else None))
        if extra:
            rows.append(dict(model=model, case_id=case_id, domain="d", subcategory="s", n_reference=3, frame=f,
                             time_s=f / 24, instance_id=None, track=None, visibility=None, matched=False,
                             ambiguous=False, extra=True, appearance=None, structure=None, structure_source=None))
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _ideal(model, case_id):
    """What a correct evaluator measures on each synthetic rollout."""
    if model == "faithful":
        return _rows(model, case_id)
    if model == "removed":
        return _rows(model, case_id, target="missing")
    if model == "recoloured":
        df = _rows(model, case_id)
        df.loc[(df.instance_id == TARGET) & df.matched, "appearance"] = 0.55
        return df
    if model in ("squeezed", "moved", "resized"):
        df = _rows(model, case_id)
        df.loc[(df.instance_id == TARGET) & df.matched, "structure"] = 0.3
        return df
    if model in ("duplicated", "pasted"):
        return _rows(model, case_id, extra=True)
    if model == "other_scene":
        return _rows(model, case_id, others_matched=False, target="missing")
    raise ValueError(model)


def test_ideal_evaluator_passes_every_check(tmp_path):
    run = tmp_path / "run"
    records = {cid: _record(cid) for cid in ("c1", "c2")}
    for cid in records:
        for m in CHECKS:
            write_case_part(run, m, cid, _ideal(m, cid))
    res = assess(run, records, {}, ValidateConfig())
    for cid in records:
        for m in CHECKS:
            assert res["cases"][cid]["checks"][m]["passed"], (cid, m, res["cases"][cid]["checks"][m]["reason"])
    assert res["all_ok"]
    assert all(r["rate"] == 1.0 for r in res["pass_rates"].values())
    faithful = res["cases"]["c1"]["checks"]["faithful"]
    # 13 sampled frames, 2 with the target out of view (ground truth): matched in 11/11 in-view frames
    assert faithful["measurements"]["target_in_view_frames"] == 11
    assert faithful["measurements"]["target_matched_share"] == 1.0
    # every frame matches everything: P = 100, I = S = 90 (scores on 0-100), OPIS = 0.2*100 + 0.4*90 + 0.4*90
    assert faithful["scores"]["P"] == pytest.approx(100.0)
    assert faithful["scores"]["OPIS"] == pytest.approx(92.0)
    rec = res["cases"]["c1"]["checks"]["recoloured"]["measurements"]
    assert rec["target_appearance"] == pytest.approx(0.55)


def test_blind_evaluator_fails_all_interventions(tmp_path):
    """An evaluator that sees the faithful scene whatever it is shown must fail every intervention."""
    run = tmp_path / "run"
    records = {"c1": _record("c1")}
    for m in CHECKS:
        write_case_part(run, m, "c1", _rows(m, "c1"))
    res = assess(run, records, {}, ValidateConfig())
    checks = res["cases"]["c1"]["checks"]
    assert checks["faithful"]["passed"]
    for m in CHECKS[1:]:
        assert not checks[m]["passed"], m
    assert not res["all_ok"]
    assert res["pass_rates"]["removed"]["rate"] == 0.0


def test_unassessable_is_not_removed(tmp_path):
    """Calling the removed target 'unknown' keeps P up: it does not pass the removal check."""
    run = tmp_path / "run"
    records = {"c1": _record("c1")}
    write_case_part(run, "faithful", "c1", _rows("faithful", "c1"))
    write_case_part(run, "removed", "c1", _rows("removed", "c1", target="unknown"))
    res = assess(run, records, {}, ValidateConfig())
    removed = res["cases"]["c1"]["checks"]["removed"]
    assert not removed["passed"]
    assert "P drop 0.0" in removed["reason"]
    # missing rollouts of other interventions are failures with a reason, never silent passes
    assert not res["cases"]["c1"]["checks"]["squeezed"]["passed"]
    assert "evaluation failed" in res["cases"]["c1"]["checks"]["squeezed"]["reason"]


def test_thresholds_are_applied_at_the_boundary():
    th = Thresholds()
    base_m = {"target_appearance": 0.80, "target_structure": 0.70}
    base_s = {"P": 100.0, "OPIS": 90.0}
    ok, _ = judge("recoloured", {"target_appearance": 0.70}, base_m, {"P": 100.0}, base_s, th)
    assert ok  # exactly 0.10 lower
    ok, _ = judge("recoloured", {"target_appearance": 0.71}, base_m, {"P": 100.0}, base_s, th)
    assert not ok
    ok, why = judge("recoloured", {"target_appearance": None}, base_m, {"P": 100.0}, base_s, th)
    assert not ok and "never matched" in why
    ok, _ = judge("other_scene", {}, base_m, {"OPIS": 65.0}, base_s, th)
    assert ok
    ok, _ = judge("other_scene", {}, base_m, {"OPIS": 65.1}, base_s, th)
    assert not ok
    ok, _ = judge("faithful", {"target_matched_share": 0.8}, None, {"OPIS": 60.0}, None, th)
    assert ok
    ok, _ = judge("faithful", {"target_matched_share": 0.79}, None, {"OPIS": 99.0}, None, th)
    assert not ok


def test_duplicate_extras_counted_only_where_the_copy_is_in_view():
    rec = _record()
    rec["ground_truth"]["duplicate_in_view_share"] = [1.0] * 60 + [0.0] * 61  # copy seen in frames 0..59 only
    df = _rows("duplicated", "c1")
    extra = _rows("duplicated", "c1", extra=True)
    extra = extra[extra.extra & extra.frame.isin([24, 32, 40])]  # extras in 3 of the 5 frames with the copy in view
    m = target_measurements(pd.concat([df, extra], ignore_index=True), rec, TARGET)
    assert m["duplicate_in_view_frames"] == 5  # 24, 32, 40, 48, 56
    assert m["extra_share_where_copy_in_view"] == pytest.approx(3 / 5)
    assert m["frames_with_extra"] == 3


def test_rerendered_case_forgets_old_measurements(tmp_path):
    from worldeval.opis.checks.validate import forget_case

    runs = tmp_path / "runs"
    for m in ("faithful", "removed"):
        for cid in ("c1", "c2"):
            write_case_part(runs / m, m, cid, _rows(m, cid))
            st = runs / m / "status" / m / f"{cid}.json"
            st.parent.mkdir(parents=True, exist_ok=True)
            st.write_text("{}")
        (runs / m / "measurements").mkdir(parents=True, exist_ok=True)
        (runs / m / "measurements" / f"{m}.parquet").write_bytes(b"stale")
    forget_case(runs, "c1")
    assert not list(runs.glob("*/*/*/c1.*"))
    assert len(list(runs.glob("*/*/*/c2.*"))) == 4  # the other case keeps its parts and status
    assert not list(runs.glob("*/measurements/*.parquet"))


def test_plane_depth_copies_cases_with_a_flat_depth_and_leaves_the_originals(tmp_path):
    import numpy as np

    from worldeval.opis.case import load_case, write_case
    from worldeval.opis.checks.validate import with_plane_depth

    img = np.zeros((40, 60, 3), np.uint8)
    mask = np.zeros((40, 60), bool)
    mask[10:20, 10:30] = True
    spec = {"id": "c1", "domain": "d", "subcategory": "s", "image": "input.png",
            "instances": [{"id": "o", "category": "box", "kinematics": "rigid", "track": "static"}]}
    write_case(tmp_path / "ds" / "c1", spec, img, {"o": mask})
    out = with_plane_depth(tmp_path / "ds", tmp_path / "plane", log=lambda m: None)
    plain, flat = load_case(tmp_path / "ds" / "c1"), load_case(out / "c1")
    assert plain.geometry is None  # the user's case is not touched
    assert flat.geometry is not None and flat.geometry.exact_plane
    assert np.all(flat.geometry.depth == 1.0) and flat.geometry.valid.all()
    # the synthetic camera renders with the case's intrinsics: the flat depth must carry the same K
    np.testing.assert_allclose(flat.intrinsics(), plain.intrinsics())
    assert ValidateConfig(plane_depth=True).synth_hash() != ValidateConfig().synth_hash()
