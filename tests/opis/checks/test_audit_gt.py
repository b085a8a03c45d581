"""`opis audit --gt` on clips it has never seen: real DAVIS frames re-laid out in a tmp folder.

The clips are small (a quarter of 854x480, 20 frames at 8 fps: frames 8 and 16 are sampled), so
each evaluation takes about a second. The comparison is checked against an independent reading of
the files (masks read straight from the PNGs, the evaluator's masks from its own records), the
two layouts must give the same decisions, and wrong ground truth must cost association agreement.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.helpers.audit import DAVIS, relayout

pytestmark = pytest.mark.skipif(not DAVIS.is_dir(), reason="shared DAVIS data not present")

CLIPS = ("blackswan", "car-roundabout")
FPS = 8


def _audit(gt, out, variants=None):
    from worldeval.opis.checks.audit import AuditConfig, run_audit

    cfg = AuditConfig(fps=FPS, workers=0, **({"variants": variants} if variants else {}))
    return run_audit(gt, out, cfg, log=lambda m: None)


@pytest.fixture(scope="module")
def layout_a(tmp_path_factory):
    root = tmp_path_factory.mktemp("gt_a")
    for seq in CLIPS:
        car = {"instances": {"255": {"category": "car", "kinematics": "rigid"}}}
        relayout(root / "gt", seq, "A", meta=car if seq == "car-roundabout" else None)
    return root, _audit(root / "gt", root / "out")


def _rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.slow
def test_every_variant_is_written_and_audited(layout_a):
    root, res = layout_a
    assert res["errors"] == {}
    for seq in CLIPS:
        v = res["variants"][seq]
        assert v["written"] == ["pasted", "real", "recoloured", "removed"] and v["skipped"] == {}
        assert v["paste"]["donor"] == [c for c in CLIPS if c != seq][0]
    rows = _rows(root / "out" / "decisions.csv")
    # 2 clips x 4 variants x 1 instance x sampled frames 8 and 16
    assert len(rows) == 16
    assert sorted({int(r["frame"]) for r in rows}) == [8, 16]
    case = json.loads((root / "out" / "cases" / "car-roundabout" / "case.json").read_text())
    assert [(i["id"], i["category"], i["kinematics"], i["track"]) for i in case["instances"]] == [("obj_255", "car", "rigid", "static")]
    swan = json.loads((root / "out" / "cases" / "blackswan" / "case.json").read_text())
    assert [(i["category"], i["kinematics"], i["track"]) for i in swan["instances"]] == [("object", "deformable", "dynamic")]


@pytest.mark.slow
def test_agreement_is_recomputed_from_the_files(layout_a):
    """IoU against masks read straight from the PNGs, and the counts from the decisions."""
    import cv2

    from worldeval.opis.case import decode_rle

    root, res = layout_a
    rows = _rows(root / "out" / "decisions.csv")
    for r in rows:
        if r["variant"] != "real" or r["iou"] == "":
            continue
        rec = json.loads((root / "out" / "runs" / "real" / "frames" / "real" / f"{r['clip']}.json").read_text())
        obj = next(o for f in rec["frames"] if f["frame"] == int(r["frame"]) for o in f["objects"])
        mine = decode_rle(obj["mask"])
        gt = cv2.imread(str(root / "gt" / r["clip"] / "masks" / f"{int(r['frame']):05d}.png"), cv2.IMREAD_GRAYSCALE) > 0
        h, w = gt.shape
        iou = (mine[:h, :w] & gt).sum() / (mine[:h, :w] | gt).sum()
        assert float(r["iou"]) == pytest.approx(iou, abs=1e-4)
    for dim in ("association", "visibility", "identity", "structure"):
        judged = [r[f"{dim}_agrees"] for r in rows if r[f"{dim}_agrees"] != ""]
        c = res["checks"][dim]
        assert (c["n"], c["agreeing"]) == (len(judged), judged.count("True"))
        if c["n"]:
            assert c["agreement"] == round(100 * c["agreeing"] / c["n"], 1)
    # removed target: ground truth is null in every sampled frame; association checked, visibility not
    removed = [r for r in rows if r["variant"] == "removed"]
    assert {r["gt_association"] for r in removed} == {"null"} and {r["gt_visibility"] for r in removed} == {""}
    # recoloured target: identity ground truth is "changed" wherever the evaluator measured it
    assert {r["gt_identity"] for r in rows if r["variant"] == "recoloured"} <= {"changed", ""}
    assert {r["gt_identity"] for r in rows if r["variant"] == "real"} <= {"preserved", ""}
    assert res["checks"]["association"]["n"] >= 12


@pytest.mark.slow
def test_both_layouts_give_the_same_decisions(layout_a, tmp_path):
    """Same frames and masks in the DAVIS layout (palette PNGs under a 480p level): same cases,
    same rollouts pixel for pixel (they are written losslessly), hence the same decisions."""
    from worldeval.media import decode_frames
    from worldeval.opis.case import load_case

    root, res = layout_a
    for seq in CLIPS:
        relayout(tmp_path / "gt", seq, "B",
                 meta={"instances": {"1": {"category": "car", "kinematics": "rigid"}}} if seq == "car-roundabout" else None)
    res_b = _audit(tmp_path / "gt", tmp_path / "out")
    assert res_b["errors"] == {}
    rows_a, rows_b = _rows(root / "out" / "decisions.csv"), _rows(tmp_path / "out" / "decisions.csv")
    assert len(rows_a) == len(rows_b) == 16
    gt_cols = ("clip", "variant", "frame", "gt_area", "gt_reference_area", "gt_association", "gt_visibility", "track")
    for a, b in zip(rows_a, rows_b):
        # the palette value 1 names the instance obj_001 where DAVIS-2016's grey 255 named obj_255
        assert a["instance_id"] == "obj_255" and b["instance_id"] == "obj_001"
        assert [a[c] for c in gt_cols] == [b[c] for c in gt_cols]
        assert {k: v for k, v in a.items() if k != "instance_id"} == {k: v for k, v in b.items() if k != "instance_id"}
    assert res_b["checks"] == res["checks"]
    for seq in CLIPS:
        ca, cb = load_case(root / "out" / "cases" / seq), load_case(tmp_path / "out" / "cases" / seq)
        assert np.array_equal(ca.image, cb.image)
        assert np.array_equal(ca.masks["obj_255"], cb.masks["obj_001"])
        assert [i.category for i in ca.instances] == [i.category for i in cb.instances]
        for variant in ("real", "recoloured", "removed", "pasted"):
            fa = decode_frames(root / "out" / "rollouts" / variant / f"{seq}.mp4", indices=[8, 16]).frames
            fb = decode_frames(tmp_path / "out" / "rollouts" / variant / f"{seq}.mp4", indices=[8, 16]).frames
            assert all(np.array_equal(x, y) for x, y in zip(fa, fb)), (seq, variant)


@pytest.mark.slow
def test_wrong_ground_truth_lowers_association_agreement(layout_a, tmp_path):
    """Later masks moved half a frame to the right, away from the object: at least 30 points lower."""
    root, res = layout_a
    for seq in CLIPS:
        relayout(tmp_path / "wrong", seq, "A", shift_later=107)
    wrong = _audit(tmp_path / "wrong", tmp_path / "out", variants=("real", "removed"))
    right = [r for r in _rows(root / "out" / "decisions.csv") if r["variant"] in ("real", "removed")]
    judged = [r["association_agrees"] == "True" for r in right if r["association_agrees"] != ""]
    right_pct = 100 * sum(judged) / len(judged)
    assert right_pct >= 60
    assert wrong["checks"]["association"]["n"] == len(judged)
    assert right_pct - wrong["checks"]["association"]["agreement"] >= 30


@pytest.mark.slow
def test_cli_json_shape_and_resume(layout_a):
    from worldeval.cli import app

    root, res = layout_a
    out = CliRunner().invoke(app, ["opis", "audit", "--gt", str(root / "gt"), "--out", str(root / "out"), "--fps", str(FPS),
                                   "--workers", "0", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout[out.stdout.index("{"):])
    assert set(data) == {"checks", "clips", "confusions"}
    assert data["checks"] == res["checks"]
    assert set(data["clips"]) == set(CLIPS)
    assert set(data["checks"]["association"]) == {"n", "agreeing", "agreement"}
    assert "0 done, 2 kept" in out.stderr  # nothing re-evaluated
    text = CliRunner().invoke(app, ["opis", "audit", "--gt", str(root / "gt"), "--out", str(root / "out"), "--fps", str(FPS),
                                    "--workers", "0"])
    assert "Association: exact assignment" in text.stdout and "92.7" in text.stdout


# ----------------------------------------------------------------------------- bad input


def _bad_tree(tmp_path):
    """One good clip and one clip per kind of bad input."""
    import shutil

    gt = tmp_path / "gt"
    for name in ("good", "size", "orphan", "empty", "unreadable", "late_unreadable"):
        relayout(tmp_path / "src", "blackswan", "A", frames=range(0, 20, 2))
        shutil.copytree(tmp_path / "src" / "blackswan", gt / name)
        shutil.rmtree(tmp_path / "src")
    from PIL import Image

    m = np.asarray(Image.open(gt / "size" / "masks" / "00003.png"))
    Image.fromarray(m[:-4]).save(gt / "size" / "masks" / "00003.png")
    shutil.copy(gt / "orphan" / "masks" / "00002.png", gt / "orphan" / "masks" / "00042.png")
    Image.fromarray(np.zeros_like(np.asarray(Image.open(gt / "empty" / "masks" / "00000.png")))).save(gt / "empty" / "masks" / "00000.png")
    (gt / "unreadable" / "frames" / "00000.jpg").write_bytes(b"not a jpeg")
    data = (gt / "late_unreadable" / "frames" / "00006.jpg").read_bytes()
    (gt / "late_unreadable" / "frames" / "00006.jpg").write_bytes(data[: len(data) // 3])  # header intact, pixels cut
    return gt


def test_bad_input_names_the_file_and_the_other_clips_run(tmp_path):
    from worldeval.opis.checks.audit import AuditConfig, run_audit

    gt = _bad_tree(tmp_path)
    res = run_audit(gt, tmp_path / "out", AuditConfig(fps=4, workers=0, variants=("real", "recoloured")), log=lambda m: None)
    err = res["errors"]
    assert set(err) == {"size", "orphan", "empty", "unreadable", "late_unreadable"}
    assert err["size"]["file"].endswith("size/masks/00003.png") and "but its frame" in err["size"]["message"]
    assert err["orphan"]["file"].endswith("orphan/masks/00042.png") and "without a frame" in err["orphan"]["message"]
    assert err["empty"]["file"].endswith("empty/masks/00000.png") and err["empty"]["field"] == "frame 0 mask"
    assert err["unreadable"]["file"].endswith("unreadable/frames/00000.jpg") and "cannot read" in err["unreadable"]["message"]
    assert err["late_unreadable"]["file"].endswith("late_unreadable/frames/00006.jpg")
    assert set(res["clips"]) == {"good"} and res["checks"]["association"]["n"] > 0
    assert json.loads((tmp_path / "out" / "cases" / "dataset.json").read_text())["cases"] == ["good"]
    logs = []
    again = run_audit(gt, tmp_path / "out", AuditConfig(fps=4, workers=0, variants=("real",), force=True), log=logs.append)
    assert "eval real: 1 done, 0 kept, 0 failed" in " ".join(logs)  # --force redoes the evaluation
    assert set(again["errors"]) == set(err)


def test_instances_json_errors_name_the_field(tmp_path):
    from worldeval.opis.checks.gtclips import load_clips

    relayout(tmp_path / "gt", "blackswan", "A", frames=range(0, 4), meta={"instances": {"255": {"kinematics": "wobbly"}}})
    clips, err = load_clips(tmp_path / "gt")
    assert clips == [] and err["blackswan"]["field"] == "instances.255.kinematics"
    assert err["blackswan"]["file"].endswith("blackswan/instances.json")


def test_layout_discovery_and_label_reading(tmp_path):
    """A folder that is itself a clip; DAVIS with two resolution levels (480p preferred); an RGB mask."""
    from PIL import Image

    from worldeval.opis.checks.gtclips import GTError, find_clips, load_clips, read_labels

    relayout(tmp_path / "one", "blackswan", "A", frames=range(0, 3))
    assert [c[0] for c in find_clips(tmp_path / "one" / "blackswan")] == ["blackswan"]
    relayout(tmp_path / "davis", "dog", "B", frames=range(0, 3))
    for sub in ("JPEGImages", "Annotations"):
        (tmp_path / "davis" / sub / "Full-Resolution" / "dog").mkdir(parents=True)
    clips, err = load_clips(tmp_path / "davis")
    assert err == {} and [c.name for c in clips] == ["dog"] and "480p" in str(clips[0].frames[0])
    assert clips[0].instance_values == [1] and clips[0].size == (120, 214) and len(clips[0].masks) == 3
    rgb = tmp_path / "rgb.png"
    Image.new("RGB", (4, 4)).save(rgb)
    with pytest.raises(GTError, match="palette or grey"):
        read_labels(rgb)


def test_sparse_masks_give_the_real_video_only(tmp_path):
    """Masks on some frames only (as YouTube-VOS annotates): no interventions, and no association or
    visibility decision where a sampled frame has no mask."""
    from worldeval.opis.checks.audit import AuditConfig, run_audit

    relayout(tmp_path / "gt", "blackswan", "A", frames=range(0, 40, 2))
    for k in (1, 2, 3, 8, 9):
        (tmp_path / "gt" / "blackswan" / "masks" / f"{k:05d}.png").unlink()
    res = run_audit(tmp_path / "gt", tmp_path / "out", AuditConfig(fps=8, workers=0), log=lambda m: None)
    v = res["variants"]["blackswan"]
    assert v["written"] == ["real"] and set(v["skipped"]) == {"recoloured", "removed", "pasted"}
    assert "masks for 15 of 20 frames" in v["skipped"]["removed"]
    rows = _rows(tmp_path / "out" / "decisions.csv")
    assert [(r["frame"], r["gt_area"] != "") for r in rows] == [("8", False), ("16", True)]
    assert res["checks"]["association"]["n"] == res["checks"]["visibility"]["n"] == 1
