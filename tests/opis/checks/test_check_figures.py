"""The evaluator's acceptance figures from hand-built archives: values computed by hand, never a pass without data."""

from __future__ import annotations

import numpy as np
import pandas as pd

from worldeval.opis.checks import figures as vf
from worldeval.opis.archive import COLUMNS

FRAMES = [24, 32, 40, 48]


def _rows(model, target_app, other_app=0.9, extras=()):
    """Target `t` with appearance per frame (None = unmatched) and one other instance `o`."""
    out = []
    for f in FRAMES:
        for iid, a in (("t", target_app.get(f)), ("o", other_app)):
            out.append(dict(model=model, case_id="c", domain="d", subcategory="s", n_reference=2, frame=f, time_s=f / 24,
                            instance_id=iid, track="static", visibility="expected_visible", matched=a is not None,
                            ambiguous=False, extra=False, appearance=a, structure=None, structure_source=None))
        if f in extras:
            out.append(dict(model=model, case_id="c", domain="d", subcategory="s", n_reference=2, frame=f, time_s=f / 24,
                            instance_id=None, track=None, visibility=None, matched=False, ambiguous=False, extra=True,
                            appearance=None, structure=None, structure_source=None))
    return pd.DataFrame(out, columns=list(COLUMNS))


RECORD = {"c": {"target": {"instance_id": "t"}, "videos": {"recoloured": "x", "removed": "y"},
                "ground_truth": {"target_in_view_share": [1.0] * 60, "in_view_share_threshold": 0.75}}}


def test_recoloured_figures():
    df = pd.concat([
        _rows("faithful", {24: 0.8, 32: 0.8, 40: 0.8, 48: 0.8}),
        # kept in 3 of 4 frames; mean appearance 0.3 -> drop 0.5; all three frames below tau_I = 0.35
        _rows("recoloured", {24: 0.3, 32: 0.3, 40: 0.3}),
    ])
    kept, eq3 = vf.photo_recoloured(df, RECORD)
    assert kept.status == "pass" and kept.detail["c"]["kept_share"] == 0.75
    assert abs(kept.detail["c"]["appearance_drop"] - 0.5) < 1e-9
    assert eq3.status == "pass" and eq3.value == "3/3 frames"
    # no frame below tau_I: identity never fails, so the eq. 3 figure fails
    df2 = pd.concat([_rows("faithful", {f: 0.8 for f in FRAMES}), _rows("recoloured", {f: 0.6 for f in FRAMES})])
    kept, eq3 = vf.photo_recoloured(df2, RECORD)
    assert kept.status == "pass" and eq3.status == "FAIL" and eq3.value == "0/0 frames"
    # recoloured object lost in 3 of 4 frames: kept 25% < 50%
    df3 = pd.concat([_rows("faithful", {f: 0.8 for f in FRAMES}), _rows("recoloured", {24: 0.2})])
    assert vf.photo_recoloured(df3, RECORD)[0].status == "FAIL"


def test_removed_and_extras_figures():
    df = pd.concat([_rows("faithful", {f: 0.8 for f in FRAMES}, extras={24}), _rows("removed", {24: 0.5})])
    rem = vf.photo_removed(df, RECORD)
    assert rem.status == "FAIL" and rem.detail["c"]["matched_share"] == 0.25  # 1 of 4 > 20%
    ex = vf.extras_per_frame(df, "faithful", "x")  # one extra in 4 frames: 0.25 per frame
    assert ex.value.startswith("0.250 (1 extras / 4 frames)") and ex.status == "FAIL"
    assert vf.extras_per_frame(df, "faithful", "x", limit=0.3).status == "pass"
    assert vf.extras_per_frame(df, "faithful", "x", limit=0.2).status == "FAIL"


def test_nothing_measured_is_never_a_pass():
    empty = pd.DataFrame(columns=list(COLUMNS))
    assert vf.photo_removed(empty, {}).status == vf.NOT_MEASURED
    assert all(f.status == vf.NOT_MEASURED for f in vf.photo_recoloured(empty, {}))
    assert vf.extras_per_frame(empty, "faithful", "x").status == vf.NOT_MEASURED
    assert vf.clip_figures({})[0].status == vf.NOT_MEASURED
    rates = vf.pass_rate_figures("p", {"a": {"passed": 9, "cases": 10, "rate": 0.9}, "b": {"passed": 0, "cases": 0, "rate": None}})
    assert [f.status for f in rates] == ["pass", vf.NOT_MEASURED]


def _pasted(shown: int | None, hit: int) -> dict:
    m = {} if shown is None else {"pasted_in_view_frames": shown, "pasted_extra_frames": hit}
    return {"checks": {"pasted": {"measurements": m}}}


def test_pasted_figure_counts_the_frames_of_every_clip_together():
    # 4/4, 3/3, 4/5 and 0/1: 11 of 13 frames with the object in view have an extra, though one clip has none
    clips = {"a": _pasted(4, 4), "b": _pasted(3, 3), "c": _pasted(5, 4), "d": _pasted(1, 0), "e": _pasted(None, 0)}
    f = vf.clip_pasted_frames(clips)
    assert f.status == "pass" and f.value == "11/13 frames (85%)"
    f = vf.clip_pasted_frames({"a": _pasted(4, 1), "b": _pasted(3, 1)})  # 2 of 7
    assert f.status == "FAIL" and f.value == "2/7 frames (29%)"
    assert vf.clip_pasted_frames({"a": _pasted(4, 2)}).status == "pass"  # exactly half
    assert vf.clip_pasted_frames({"a": _pasted(0, 0), "e": _pasted(None, 0)}).status == vf.NOT_MEASURED


def test_demo_figures():
    scores = {
        "models": {"oracle": {"OPIS": 90.0, "P": 100.0}, "static": {"OPIS": 80.0, "P": 95.0},
                   "forgetful-recolor": {"OPIS": 60.0, "P": 92.0}, "forgetful-drop": {"OPIS": 81.0, "P": 40.0}},
        "cases": [{"model": "oracle", "case_id": "a", "P": 100.0}, {"model": "static", "case_id": "a", "P": 89.0}],
    }
    df = pd.concat([_rows("forgetful-recolor", {24: 0.2, 32: 0.5, 40: 0.6, 48: 0.1})])
    per_case, rank, ident, pres = vf.demo_figures(scores, df)
    assert per_case.status == "FAIL" and per_case.value == "1/2 cases"  # static P 89 < 90
    assert rank.status == "FAIL"  # static 80 is below forgetful-drop 81
    assert ident.status == "pass" and ident.value == "2/4 frames"  # frames 24 and 48 hold a < 0.35
    assert pres.status == "pass"


def test_demo_presence_of_nine_frames_in_ten_is_ninety():
    p = float(np.nextafter(90.0, 0.0))  # 89.99999999999999: the demo's forgetful-recolor P, a float64 rounding of 90
    assert p < 90.0
    scores = {"models": {"oracle": {"OPIS": 90.0}, "forgetful-recolor": {"OPIS": 60.0, "P": p}}, "cases": []}
    pres = vf.demo_figures(scores, _rows("forgetful-recolor", {24: 0.2}))[-1]
    assert pres.status == "pass"
    scores["models"]["forgetful-recolor"]["P"] = 89.99  # a real shortfall still fails
    assert vf.demo_figures(scores, _rows("forgetful-recolor", {24: 0.2}))[-1].status == "FAIL"


def test_clip_identity_failures_count_the_recoloured_clip_frames(tmp_path):
    from worldeval.opis.archive import write_case_part

    df = _rows("recoloured", {24: 0.3, 32: 0.5, 40: 0.2})
    df.loc[df["instance_id"] == "t", "instance_id"] = "target"  # the clip cases' one instance
    df["track"] = "dynamic"
    write_case_part(tmp_path / "run", "recoloured", "c", df)
    result = {"clips": {"c": {}}, "run_dirs": {"recoloured": str(tmp_path / "run")}}
    fig = vf.clip_identity_failures(result)
    assert fig.value == "2/2 frames" and fig.status == "pass"  # 24 and 40 are below tau_I, both fail eq. 3
    assert vf.clip_identity_failures({"clips": {}}).status == vf.NOT_MEASURED
