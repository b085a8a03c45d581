"""`--variant official-v3`: the OPIS authors' aggregation, against values computed by hand."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pytest import approx
from typer.testing import CliRunner

from worldeval.opis.archive import frame_from_records, write_archive
from worldeval.opis.official.v3 import CONTRACT
from worldeval.opis.scoring import ScoreConfig, score_frame

FPS = 24.0
E, U = "expected_visible", "unknown"


def _rows(case_id, domain, subcategory, n_reference, records):
    return frame_from_records(records, model="m", case_id=case_id, domain=domain, subcategory=subcategory,
                              n_reference=n_reference, fps=FPS)


def _m(frame, iid, track, app=None, s=None, src=None):
    return dict(frame=frame, instance_id=iid, track=track, visibility=E, matched=True, appearance=app, structure=s,
                structure_source=src)


def _v(frame, iid, track, vis):
    return dict(frame=frame, instance_id=iid, track=track, visibility=vis)


def _x(frame):
    return dict(frame=frame, extra=True)


def archive():
    import pandas as pd

    c1 = _rows("c1", "real_world", "home", 4, [
        _m(24, "a", "static", 0.8, 0.6, "static"), _m(24, "b", "dynamic", 0.4, 1.0, "pose"), _m(24, "x", "excluded", 1.0),
        _v(24, "u", "unlabeled", "too_small"), _x(24),
        _m(32, "a", "static", 0.6), dict(frame=32, instance_id="b", track="dynamic", visibility=U, ambiguous=True, appearance=0.2),
        _v(32, "x", "excluded", U), _m(32, "u", "unlabeled", 0.5),
        _v(40, "a", "static", E), _v(40, "b", "dynamic", "occluded"), _v(40, "x", "excluded", "out_of_view"),
        _m(40, "u", "unlabeled", 0.7), _x(40),
    ])  # fmt: skip
    c2 = _rows("c2", "real_world", "urban", 1, [_m(24, "k", "unlabeled", 0.9)])
    c3 = _rows("c3", "game", "cartoon", 1, [_v(24, "s", "static", E), _v(32, "s", "static", E)])
    return pd.concat([c1, c2, c3], ignore_index=True)


# By hand. c1: frame 24 scores 1 (a, b, x present; u too small, so the extra is not counted); frame 32
# scores 1 (b's ambiguous match stays a match); frame 40 scores 0 (a missing; every row decided, so the
# extra counts too): P = 2/3. I = mean(0.7, 0.3, 1.0, 0.6) = 0.65 over a, b, x, u. S over the static and
# dynamic candidates: a (0.6 + 1) / 3, b (1.0 + 1) / 3.
P1, I1, S1 = 2 / 3, 0.65, ((1.6 / 3) + (2.0 / 3)) / 2
H1 = 100 * P1**0.2 * I1**0.4 * S1**0.4
H2 = 100 * 1.0**0.2 * 0.9**0.8  # c2: no Structure candidate
H3 = 0.0  # c3: s missing in both frames, P = 0; I = 0 (no present row); S = 0.5 (prior only)


def test_case_values_are_the_hand_computed_ones():
    r = score_frame(archive(), ScoreConfig(variant="official-v3", bootstrap=0))
    cases = {c["case_id"]: c for c in r["cases"]}
    assert (cases["c1"]["P"], cases["c1"]["I"], cases["c1"]["S"]) == (approx(100 * P1), approx(100 * I1), approx(100 * S1))
    assert cases["c1"]["OPIS"] == approx(H1, abs=1e-6)
    assert cases["c2"]["S"] is None and cases["c2"]["flags"] == ["no_structure_candidates"]
    assert cases["c2"]["OPIS"] == approx(H2, abs=1e-6)
    assert (cases["c3"]["P"], cases["c3"]["I"], cases["c3"]["S"], cases["c3"]["OPIS"]) == (0, 0, approx(50), 0)
    m = r["models"]["m"]
    # case -> subcategory -> domain -> model means of the case headlines
    assert m["subcategories"]["home"]["OPIS"] == approx(H1, abs=1e-6)
    assert m["domains"]["real_world"]["OPIS"] == approx((H1 + H2) / 2, abs=1e-6)
    assert m["domains"]["game"]["OPIS"] == approx(0.0, abs=1e-9)
    assert m["OPIS"] == approx(((H1 + H2) / 2 + H3) / 2, abs=1e-6)
    assert m["OPIS_case_mean"] == approx((H1 + H2 + H3) / 3, abs=1e-6)
    assert r["contract"] == CONTRACT and r["variant"] == "official-v3" and m["C_S"] is None
    assert m["OPIS_ci"] is None


def test_their_flat_bootstrap():
    r = score_frame(archive(), ScoreConfig(variant="official-v3", bootstrap=500, seed=3))
    values = np.array([H1, H2, H3])  # sorted by case id
    rng = np.random.default_rng(3)
    draws = [values[rng.integers(0, 3, 3)].mean() for _ in range(500)]
    lo, hi = np.quantile(draws, [0.025, 0.975])
    assert r["models"]["m"]["OPIS_ci"] == [approx(lo, abs=1e-6), approx(hi, abs=1e-6)]


def test_paper_variant_never_scores_excluded_rows_and_reports_official_beside():
    df = archive()
    r = score_frame(df, ScoreConfig(bootstrap=0))
    c1 = next(c for c in r["cases"] if c["case_id"] == "c1")
    # paper, c1: frame 24 has an extra (0), frame 32 all expected matched (1), frame 40 a missing (0)
    assert c1["P"] == approx(100 / 3)
    # an excluded instance missing in frame 32 changes nothing under the paper's rules ...
    sel = (df["case_id"] == "c1") & (df["frame"] == 32) & (df["instance_id"] == "x")
    df2 = df.copy()
    df2.loc[sel, "visibility"] = E
    r2 = score_frame(df2, ScoreConfig(bootstrap=0))
    assert next(c for c in r2["cases"] if c["case_id"] == "c1")["P"] == approx(100 / 3)
    # ... but their code scores excluded objects for Presence: frame 32 now fails
    o2 = score_frame(df2, ScoreConfig(variant="official-v3", bootstrap=0))
    assert next(c for c in o2["cases"] if c["case_id"] == "c1")["P"] == approx(100 / 3)
    assert r["models"]["m"]["variants"]["official-v3"] == approx(((H1 + H2) / 2 + H3) / 2, abs=1e-6)


def test_paper_variant_reproduces_table_2_arithmetic():
    """One case per model whose components are the paper's Table 2 row: OPIS is the weighted sum."""
    import pandas as pd

    # P 0.9 from 10 frames (9 pass), I 0.35.., S: any values; check the identity 0.2 P + 0.4 I + 0.4 S
    recs = []
    for k in range(10):
        f = 24 + 8 * k
        recs.append(_m(f, "a", "static", 0.6, 0.5, "static") if k < 9 else _v(f, "a", "static", E))
    r = score_frame(_rows("t", "real_world", "home", 1, recs), ScoreConfig(bootstrap=0))
    m = r["models"]["m"]
    assert m["P"] == approx(90) and m["I"] == approx(60) and m["C_S"] == approx(90) and m["S"] == approx(45)
    assert m["OPIS"] == approx(0.2 * 90 + 0.4 * 60 + 0.4 * 45)
    assert 0.2 * 89.75 + 0.4 * 35.07 + 0.4 * 60.08 == approx(56.01, abs=0.005)  # the paper's own row


def test_cli_variant_and_default_bootstrap(tmp_path):
    from worldeval.cli import app

    write_archive(archive(), tmp_path / "run" / "measurements.parquet")
    res = CliRunner().invoke(app, ["opis", "score", str(tmp_path / "run"), "--variant", "official-v3", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["config"]["bootstrap"] == 10000 and out["contract"] == CONTRACT
    assert out["models"]["m"]["OPIS"] == approx(((H1 + H2) / 2 + H3) / 2, abs=1e-6)
    res = CliRunner().invoke(app, ["opis", "score", str(tmp_path / "run"), "--variant", "official-v3", "--bootstrap", "0"])
    assert res.exit_code == 0 and "official-v3" in res.output


@pytest.mark.parametrize("bad", ["official", "v3"])
def test_unknown_variant_is_refused(bad):
    with pytest.raises(ValueError, match="unknown variant"):
        ScoreConfig(variant=bad)
