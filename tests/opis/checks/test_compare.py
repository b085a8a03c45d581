"""`opis compare`: two hand-built runs whose every agreement count and score difference is known.

Case c1 (o1 static, o2 dynamic, o3 excluded), case c2 (p1 static, p2 unlabeled), frames 24/48/72
at 24 fps; run B also holds case c3 (one row, only in B). Row by row (A | B):

    c1 f24  o1 matched a.8 s.9 | matched a.7 s.8     o2 matched a.5 | matched a.2   (identity crosses tau_I)
            o3 matched a.9     | missing (excluded)   one extra row in A only
    c1 f48  o1 matched a.6 s.5 | missing s.4          o2 occluded | occluded       o3 occluded | occluded
    c1 f72  o1 ambiguous       | matched a.9          o2 out_of_view | too_small   o3 occluded | occluded
    c2 f24  p1 matched a.8 s.7 | same                 p2 matched a.6 | same
    c2 f48  p1 matched a.8 s.7 | same                 p2 missing | missing
    c2 f72  p1 occluded | same                        p2 occluded | same
"""

from __future__ import annotations

import csv
import json

import pytest
from typer.testing import CliRunner

from worldeval.cli import app
from worldeval.opis.archive import frame_from_records, write_archive
from worldeval.opis.checks.compare import CompareError, compare_runs, pair_models

M = dict(matched=True, visibility="expected_visible")
MISS = dict(visibility="expected_visible")
OCC = dict(visibility="occluded")
TRACK = {"o1": "static", "o2": "dynamic", "o3": "excluded", "p1": "static", "p2": "unlabeled", "q1": "static"}


def _row(frame: int, iid: str, state: dict, a=None, s=None) -> dict:
    return {"frame": frame, "instance_id": iid, "track": TRACK[iid], **state, "appearance": a, "structure": s}


def _extra(frame: int) -> dict:
    return {"frame": frame, "extra": True}


C1_A = [
    _row(24, "o1", M, .8, .9), _row(24, "o2", M, .5), _row(24, "o3", M, .9), _extra(24),
    _row(48, "o1", M, .6, .5), _row(48, "o2", OCC), _row(48, "o3", OCC),
    _row(72, "o1", dict(visibility="unknown", ambiguous=True)), _row(72, "o2", dict(visibility="out_of_view")),
    _row(72, "o3", OCC),
]
C1_B = [
    _row(24, "o1", M, .7, .8), _row(24, "o2", M, .2), _row(24, "o3", MISS),
    _row(48, "o1", MISS, None, .4), _row(48, "o2", OCC), _row(48, "o3", OCC),
    _row(72, "o1", M, .9), _row(72, "o2", dict(visibility="too_small")), _row(72, "o3", OCC),
]
C2 = [
    _row(24, "p1", M, .8, .7), _row(24, "p2", M, .6),
    _row(48, "p1", M, .8, .7), _row(48, "p2", MISS),
    _row(72, "p1", OCC), _row(72, "p2", OCC),
]
C3 = [_row(24, "q1", M)]


def _case(records, model, case_id, n_ref):
    return frame_from_records(records, model=model, case_id=case_id, domain="d", subcategory="s",
                              n_reference=n_ref, fps=24)


def _run(tmp_path, name, model, cases):
    import pandas as pd

    df = pd.concat([_case(r, model, c, n) for c, r, n in cases], ignore_index=True)
    run = tmp_path / name
    run.mkdir()
    write_archive(df, run / "measurements.parquet")
    return run


@pytest.fixture()
def runs(tmp_path):
    a = _run(tmp_path, "A", "wan", [("c1", C1_A, 3), ("c2", C2, 2)])
    b = _run(tmp_path, "B", "wan_authors", [("c1", C1_B, 3), ("c2", C2, 2), ("c3", C3, 1)])
    return a, b


def _invoke(*args):
    return CliRunner().invoke(app, ["opis", "compare", *map(str, args)])


def _check(block, n, agreeing):
    assert (block["n"], block["agreeing"]) == (n, agreeing)
    assert block["agreement"] == (round(100.0 * agreeing / n, 1) if n else None)


def test_overall_agreement_by_hand(runs):
    r = compare_runs(*runs)
    assert r["models"] == ["wan", "wan_authors"]
    assert (r["only_in_a"], r["only_in_b"]) == (0, 1)
    o = r["overall"]
    assert (o["joined"], o["excluded_rows"], o["cases_shared"], o["cases_only_in_b"]) == (12, 3, 2, 1)
    _check(o["state"], 12, 10)
    conf = o["state"]["confusion"]
    assert conf["matched"] == {"matched": 5, "missing": 1, "unknown": 0, "not_visible": 0}
    assert conf["unknown"]["matched"] == 1 and conf["missing"]["missing"] == 1
    assert conf["not_visible"]["not_visible"] == 4
    _check(o["identity"], 5, 4)
    assert o["identity"]["confusion"]["pass"] == {"pass": 4, "fail": 1}
    assert o["identity"]["mean_abs_diff"] == pytest.approx(0.4 / 5)
    _check(o["structure"], 4, 4)
    assert o["structure"]["mean_abs_diff"] == pytest.approx(0.05)
    _check(o["extras"], 6, 5)
    assert (o["extras"]["extras_a"], o["extras"]["extras_b"], o["extras"]["frames_with_extra_a"]) == (1, 0, 1)
    assert o["extras"]["confusion"]["extra"] == {"extra": 0, "none": 1}


def test_by_track_and_only_rows(runs):
    r = compare_runs(*runs)
    t = r["by_track"]
    _check(t["static"]["state"], 6, 4)
    _check(t["static"]["identity"], 3, 3)
    _check(t["static"]["structure"], 4, 4)
    assert t["static"]["only_in_b"] == 1
    _check(t["dynamic"]["state"], 3, 3)
    _check(t["dynamic"]["identity"], 1, 0)
    _check(t["unlabeled"]["state"], 3, 3)
    _check(t["excluded"]["state"], 3, 2)
    assert t["excluded"]["state"]["confusion"]["matched"]["missing"] == 1
    c3 = next(c for c in r["cases"] if c["case_id"] == "c3")
    assert (c3["in_a"], c3["in_b"], c3["only_in_b"], c3["only_in_b_instances"]) == (False, True, 1, ["q1"])
    assert c3["state"]["agreement"] is None and c3["scores"]["a"] is None and c3["scores"]["diff"]["P"] is None


def test_per_case_agreement_and_score_differences(runs):
    cases = {c["case_id"]: c for c in compare_runs(*runs)["cases"]}
    c1, c2 = cases["c1"], cases["c2"]
    _check(c1["state"], 6, 4)
    _check(c1["identity"], 2, 1)
    assert c1["identity"]["mean_abs_diff"] == pytest.approx(0.2)
    _check(c1["extras"], 3, 2)
    _check(c2["state"], 6, 6)
    assert c1["excluded_rows"] == 3
    # P_t = 1 iff all expected_visible rows matched and no extra; the excluded o3 never counts.
    # A c1: f24 extra -> 0, f48 -> 1, f72 no E -> undefined: 1/2.  B c1: f24 1, f48 0, f72 1: 2/3.
    sa, sb, d = c1["scores"]["a"], c1["scores"]["b"], c1["scores"]["diff"]
    assert (sa["P"], sb["P"]) == (pytest.approx(50.0), pytest.approx(200 / 3))
    assert d["P"] == pytest.approx(200 / 3 - 50.0)
    # I: A (mean(.8,.5) + .6)/2 = .625; B f24 gated (.2 < tau_I) -> 0, f72 .9: .45.
    assert d["I"] == pytest.approx(45.0 - 62.5)
    # S: coverage 2/3 times mean(.9, .5) vs mean(.8, .4).
    assert d["S"] == pytest.approx(100 * (2 / 3) * (0.6 - 0.7))
    assert d["OPIS"] == pytest.approx(0.2 * d["P"] + 0.4 * d["I"] + 0.4 * d["S"])
    assert c2["scores"]["diff"] == {"P": 0.0, "I": 0.0, "S": 0.0, "OPIS": 0.0}
    assert c2["scores"]["a"]["P"] == pytest.approx(50.0)


def test_cli_json_matches_api(runs):
    res = _invoke(*runs, "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert set(out) >= {"a", "b", "models", "overall", "by_track", "cases", "only_in_a", "only_in_b"}
    api = compare_runs(*runs)
    assert out["overall"]["state"] == api["overall"]["state"]
    assert out["overall"]["scores"]["diff"]["OPIS"] == pytest.approx(api["overall"]["scores"]["diff"]["OPIS"])


def test_cli_tables_and_out(runs, tmp_path):
    out = tmp_path / "cmp"
    res = _invoke(*runs, "--out", out)
    assert res.exit_code == 0, res.output
    assert "83.3 (10/12)" in res.output and "c1" in res.output
    assert json.loads((out / "compare.json").read_text())["only_in_b"] == 1
    with open(out / "decisions.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 15
    assert list(rows[0]) == ["case_id", "frame", "instance_id", "track", "state_a", "state_b",
                             "appearance_a", "appearance_b", "structure_a", "structure_b"]
    o1 = next(r for r in rows if (r["case_id"], r["frame"], r["instance_id"]) == ("c1", "48", "o1"))
    assert (o1["state_a"], o1["state_b"], o1["appearance_b"], o1["structure_b"]) == ("matched", "missing", "", "0.4")


def test_run_against_itself_agrees_everywhere(runs):
    a = runs[0]
    r = compare_runs(a, a)
    for key in ("state", "identity", "structure", "extras"):
        assert r["overall"][key]["agreement"] == 100.0
    assert r["overall"]["identity"]["mean_abs_diff"] == 0.0
    assert (r["only_in_a"], r["only_in_b"]) == (0, 0)
    for c in r["cases"]:
        assert all(v in (0.0, None) for v in c["scores"]["diff"].values())
    assert r["overall"]["scores"]["diff"]["OPIS"] == 0.0


def test_missing_or_unrelated_runs_exit_2(runs, tmp_path):
    res = _invoke(runs[0], tmp_path / "nowhere", "--json")
    assert res.exit_code == 2
    assert "nowhere" in res.output
    other = _run(tmp_path, "C", "wan", [("c3", C3, 1)])
    res = _invoke(runs[0], other)
    assert res.exit_code == 2 and "share no case" in res.output
    res = _invoke(*runs, "--variant", "nonsense")
    assert res.exit_code == 2 and "nonsense" in res.output


def test_variant_and_model_pairing(runs):
    r = compare_runs(*runs, variant="no_coverage")
    c1 = next(c for c in r["cases"] if c["case_id"] == "c1")
    assert c1["scores"]["diff"]["S"] == pytest.approx(100 * (0.6 - 0.7))
    assert pair_models(["x", "y"], ["y", "z"], None, None) == ("y", "y")
    assert pair_models(["x", "y"], ["z"], "x", None) == ("x", "z")
    assert pair_models(["x", "y"], ["x", "y"], "x", "y") == ("x", "y")
    with pytest.raises(CompareError, match="model-a"):
        pair_models(["x", "y"], ["x", "y"], None, None)
    with pytest.raises(CompareError, match="no model 'q'"):
        pair_models(["x"], ["y"], "q", None)


def test_official_v3_variant_when_available(runs):
    from worldeval.opis import scoring

    if "official-v3" not in getattr(scoring, "ALL_VARIANTS", ()):
        pytest.skip("scoring has no official-v3 variant")
    same = compare_runs(runs[0], runs[0], variant="official-v3")
    assert same["variant"] == "official-v3"
    assert all(v == 0.0 for c in same["cases"] for v in c["scores"]["diff"].values())
    r = compare_runs(*runs, variant="official-v3")
    c2 = next(c for c in r["cases"] if c["case_id"] == "c2")
    assert c2["scores"]["diff"] == {"P": 0.0, "I": 0.0, "S": 0.0, "OPIS": 0.0}
    assert r["overall"]["scores"]["a"]["OPIS"] is not None
