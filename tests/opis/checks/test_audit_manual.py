"""`opis audit sample / agree`: decisions drawn from a hand-made run, agreement computed by hand."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tests.helpers.audit import BOX_A, BOX_B, BOX_X, DAVIS, make_run

pytestmark = pytest.mark.skipif(not DAVIS.is_dir(), reason="shared DAVIS data not present")


@pytest.fixture(scope="module")
def audit(tmp_path_factory):
    from worldeval.opis.checks.audit_manual import sample_audit

    root = tmp_path_factory.mktemp("manual")
    run = make_run(root)
    res = sample_audit(run, root / "audit", per_dimension=150, seed=0)
    return root, res


def _key(root):
    return {(k["dimension"], k["model"], k["frame"], k["instance_id"]): k for k in json.loads((root / "audit" / "key.json").read_text())["items"]}


def test_every_decision_is_drawn_with_the_evaluators_label(audit):
    from worldeval.opis.checks.audit_manual import _candidates

    root, res = audit
    # association 8, visibility 8, identity: a measured on 5 matched rows, structure on 3
    assert res["per_dimension"] == {"association": 8, "visibility": 8, "identity": 5, "structure": 3}
    key = _key(root)
    assert key[("identity", "m1", 8, "obj_002")]["evaluator"] == "changed"  # a = 0.2 < 0.35
    assert key[("identity", "m2", 16, "obj_002")]["evaluator"] == "preserved"  # a = 0.4
    assert key[("structure", "m1", 16, "obj_001")]["evaluator"] == "changed"  # s = 0.1
    assert key[("visibility", "m2", 16, "obj_001")]["evaluator"] == "out_of_view"
    assert key[("association", "m1", 16, "obj_002")]["evaluator"] == "null"
    assert key[("association", "m2", 8, "obj_001")]["evaluator"] == "ambiguous"
    # a matched decision names the candidate number whose box is the instance's match
    rec = json.loads((root / "run" / "frames" / "m1" / "c1.json").read_text())
    for fidx, iid, box in ((8, "obj_001", BOX_A), (8, "obj_002", BOX_B)):
        k = key[("association", "m1", fidx, iid)]
        objs = next(f["objects"] for f in rec["frames"] if f["frame"] == fidx)
        cands = _candidates(objs, k["id"])
        assert sorted(c["box"] for c in cands) == sorted([BOX_A, BOX_B, BOX_X])
        assert cands[int(k["evaluator"]) - 1]["box"] == box


def test_page_holds_no_decision(audit):
    root, _ = audit
    html = (root / "audit" / "audit.html").read_text()
    data = json.loads(html.split("const DATA = ", 1)[1].split(";\nconst STORE", 1)[0])
    allowed = {"id", "dimension", "model", "case_id", "instance_id", "category", "track", "kinematics", "frame", "time_s",
               "n_candidates", "i0", "image"}
    assert all(set(i) == allowed for i in data["items"])
    assert len(data["items"]) == 24 and all(v.startswith("data:image/jpeg;base64,") for v in data["images"].values())
    assert '"evaluator"' not in html and '"decision"' not in html and "http://" not in html.replace("http://www.w3.org", "")


def test_stratified_draw_visits_every_stratum_first(tmp_path):
    from worldeval.opis.checks.audit_manual import decisions_of, stratified

    run = make_run(tmp_path)
    pool = decisions_of(run)
    # association strata: (m1, matched) x3, (m1, null), (m2, ambiguous), (m2, matched) x2, (m2, null)
    five = [d for d in stratified(pool, 5, seed=0) if d.dimension == "association"]
    assert sorted((d.model, d.decision) for d in five) == [("m1", "matched"), ("m1", "null"), ("m2", "ambiguous"), ("m2", "matched"), ("m2", "null")]
    a = [(d.dimension, d.model, d.frame, d.instance_id) for d in stratified(pool, 6, seed=3)]
    assert a == [(d.dimension, d.model, d.frame, d.instance_id) for d in stratified(pool, 6, seed=3)]


def test_agree_counts_and_rejects_bad_labels(audit, tmp_path):
    from worldeval.opis.checks.audit_manual import AuditError, agree

    root, _ = audit
    key = _key(root)
    labels = {k["id"]: k["evaluator"] for k in key.values()}
    # by hand: two association disagreements, one visibility, one identity; one structure item left unlabelled
    labels[key[("association", "m1", 16, "obj_002")]["id"]] = "ambiguous"  # null -> ambiguous
    labels[key[("association", "m2", 16, "obj_001")]["id"]] = "ambiguous"  # null -> ambiguous
    labels[key[("visibility", "m1", 16, "obj_002")]["id"]] = "unknown"  # occluded -> unknown
    labels[key[("identity", "m1", 8, "obj_002")]["id"]] = "unassessable"  # changed -> unassessable
    del labels[key[("structure", "m2", 16, "obj_002")]["id"]]
    path = tmp_path / "labels.json"
    path.write_text(json.dumps({"audit_id": json.loads((root / "audit" / "key.json").read_text())["audit_id"], "labels": labels}))
    res = agree(root / "audit", path)
    assert res["checks"] == {
        "association": {"n": 8, "agreeing": 6, "agreement": 75.0},
        "visibility": {"n": 8, "agreeing": 7, "agreement": 87.5},
        "identity": {"n": 5, "agreeing": 4, "agreement": 80.0},
        "structure": {"n": 2, "agreeing": 2, "agreement": 100.0},
    }
    assert res["disagreements"]["association"] == {"null -> ambiguous": 2}
    assert res["unlabelled"] == {"structure": 1}
    out = CliRunner().invoke(__import__("worldeval.cli", fromlist=["app"]).app, ["opis", "audit", "agree", str(root / "audit"), str(path)])
    assert out.exit_code == 0, out.output
    assert "Association: exact assignment" in out.stdout and "75.0" in out.stdout and "null -> ambiguous: 2" in out.stdout
    labels[key[("visibility", "m1", 8, "obj_001")]["id"]] = "visible"
    path.write_text(json.dumps({"labels": labels}))
    with pytest.raises(AuditError, match="not a visibility label"):
        agree(root / "audit", path)
    path.write_text(json.dumps({"audit_id": "someone-else", "labels": {}}))
    with pytest.raises(AuditError, match="another audit"):
        agree(root / "audit", path)


def test_cli_sample(tmp_path):
    from worldeval.cli import app

    run = make_run(tmp_path)
    out = CliRunner().invoke(app, ["opis", "audit", "sample", str(run), "--per-dimension", "2", "--seed", "0", "--out", str(tmp_path / "a")])
    assert out.exit_code == 0, out.output
    assert "8 decisions (association 2, visibility 2, identity 2, structure 2)" in out.stdout
    bad = CliRunner().invoke(app, ["opis", "audit", "sample", str(tmp_path / "nothing"), "--out", str(tmp_path / "b")])
    assert bad.exit_code == 2 and "no OPIS measurements" in bad.output


def test_claim_repeatability_on_a_hand_made_pair(tmp_path):
    """Object-frame unit (what runs record today) and claim unit (per-claim verdicts in the records)."""
    from worldeval.cli import app
    from worldeval.opis.checks.audit_manual import repeatability

    def rows(values):
        out = {}
        for (fidx, iid), s in values.items():
            out[("m1", fidx, iid)] = ("expected_visible", True, False, 0.8, s, None if s is None else "claims")
        return out

    # A: supported, contradicted, unknown ; B: supported, supported, contradicted -> 1 of 3 agree
    a = make_run(tmp_path, "A", rows({(8, "obj_001"): 0.8, (16, "obj_001"): 0.2, (8, "obj_002"): None, (16, "obj_002"): 0.5}))
    b = make_run(tmp_path, "B", rows({(8, "obj_001"): 0.9, (16, "obj_001"): 0.6, (8, "obj_002"): 0.1, (16, "obj_002"): 0.5}))
    r = repeatability(a, b)
    assert (r["unit"], r["n"], r["agreeing"], r["agreement"]) == ("object-frame", 4, 2, 50.0)
    assert r["disagreements"] == {"contradicted -> supported": 1, "unknown -> contradicted": 1}
    claims_a = {("m1", 8, "obj_001"): [{"text": "has a neck", "verdict": "supported"}, {"text": "two wings", "verdict": "unknown"}],
                ("m1", 16, "obj_001"): [{"text": "has a neck", "verdict": "contradicted"}]}
    claims_b = {("m1", 8, "obj_001"): [{"text": "has a neck", "verdict": "supported"}, {"text": "two wings", "verdict": "supported"}],
                ("m1", 16, "obj_001"): [{"text": "has a neck", "verdict": "contradicted"}]}
    same = rows({(8, "obj_001"): 0.8, (16, "obj_001"): 0.2, (8, "obj_002"): None, (16, "obj_002"): None})
    a2, b2 = make_run(tmp_path, "A2", same, claims_a), make_run(tmp_path, "B2", same, claims_b)
    r2 = repeatability(a2, b2)
    assert (r2["unit"], r2["n"], r2["agreeing"]) == ("claim", 3, 2)
    out = CliRunner().invoke(app, ["opis", "audit", "agree", "--repeat", str(a2), str(b2)])
    assert out.exit_code == 0, out.output
    assert "Structural-claim repeatability" in out.stdout and "66.7" in out.stdout and "90.5" in out.stdout
