"""OPIS scoring rules on small archives whose scores are computed by hand (SPEC section 3)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from worldeval.opis.archive import frame_from_records
from worldeval.opis.scoring import ALL_VARIANTS, ScoreConfig, score_frame

FPS = 8.0  # frame f sits at f / 8 s; frames 8, 16, 24, ... are 1 s, 2 s, 3 s, ...
NO_BOOT = ScoreConfig(bootstrap=0)


# --- row builders: one dict per archive row ------------------------------------------------
def V(i, a=None, s=None, track="static"):
    """Expected visible and matched, with optional appearance a and structure s."""
    return dict(instance_id=i, track=track, visibility="expected_visible", matched=True, appearance=a, structure=s,
                structure_source=None if s is None else ("static" if track == "static" else "pose"))


def MISS(i, track="static"):
    return dict(instance_id=i, track=track, visibility="expected_visible", matched=False)


def HIDDEN(i, state="occluded", s=None, track="static"):
    return dict(instance_id=i, track=track, visibility=state, structure=s, ambiguous=False)


def AMBIG(i, track="static"):
    return dict(instance_id=i, track=track, visibility="unknown", ambiguous=True)


def X():
    return dict(extra=True)


def case(frames: dict[int, list[dict]], model="m", case_id="c", domain="d", subcategory="s", fps=FPS) -> pd.DataFrame:
    """Rows of one (model, case); n_reference is the number of reference rows per frame."""
    nref = {sum(not r.get("extra") for r in rows) for rows in frames.values()}
    assert len(nref) == 1, "every frame must list every reference instance"
    records = [{**r, "frame": f} for f, rows in frames.items() for r in rows]
    return frame_from_records(records, model=model, case_id=case_id, domain=domain, subcategory=subcategory,
                              n_reference=nref.pop(), fps=fps)


def archive(*cases: pd.DataFrame) -> pd.DataFrame:
    return pd.concat(cases, ignore_index=True)


def case_row(result: dict, case_id="c", model="m") -> dict:
    return next(c for c in result["cases"] if c["case_id"] == case_id and c["model"] == model)


def approx(x):
    return pytest.approx(x, abs=1e-9)


# --- frame rules -----------------------------------------------------------------------------
def test_confirmed_missing_object_fails_presence_of_its_frame():
    df = case({8: [V("a"), V("b")], 16: [V("a"), MISS("b")], 24: [V("a"), V("b")], 32: [MISS("a"), MISS("b")]})
    c = case_row(score_frame(df, NO_BOOT))
    assert c["P"] == approx(50.0)  # frames 8 and 24 pass, 16 and 32 fail


def test_extra_object_fails_presence_even_when_every_instance_is_matched():
    df = case({8: [V("a"), X()], 16: [V("a")], 24: [V("a")], 32: [V("a"), X(), X()]})
    assert case_row(score_frame(df, NO_BOOT))["P"] == approx(50.0)


def test_extra_alone_puts_a_frame_into_F_P():
    # Frame 16 has nothing expected visible, only an extra: it is in F_P and fails.
    df = case({8: [V("a")], 16: [HIDDEN("a"), X()]})
    r = score_frame(df, NO_BOOT)
    assert case_row(r)["P"] == approx(50.0)
    assert r["models"]["m"]["coverage"]["C_P"] == approx(100.0)


@pytest.mark.parametrize("state", ["occluded", "out_of_view", "too_small", "unknown"])
def test_non_visible_states_are_excluded_from_presence(state):
    # b is never expected visible: it neither fails P nor enters F_P on its own.
    df = case({8: [V("a"), HIDDEN("b", state)], 16: [HIDDEN("a", state), HIDDEN("b", state)], 24: [V("a"), AMBIG("b")]})
    r = score_frame(df, NO_BOOT)
    assert case_row(r)["P"] == approx(100.0)
    assert r["models"]["m"]["coverage"]["C_P"] == approx(100 * 2 / 3)  # frame 16 is outside F_P


def test_identity_gate_zeroes_a_frame_with_one_low_appearance():
    df = case({
        8: [V("a", a=0.9), V("b", a=0.5)],    # passes: mean 0.7
        16: [V("a", a=0.9), V("b", a=0.3)],   # 0.3 < 0.35: frame scores 0
        24: [V("a", a=0.35), V("b", a=0.45)],  # exactly tau passes: mean 0.4
        32: [V("a"), MISS("b")],              # no appearance evidence: not in F_I
    })
    r = score_frame(df, NO_BOOT)
    assert case_row(r)["I"] == approx(100 * (0.7 + 0.0 + 0.4) / 3)
    assert r["models"]["m"]["coverage"]["C_I"] == approx(75.0)
    assert r["models"]["m"]["density"]["<=20"]["fail_I"] == approx(100 / 3)


def test_appearance_on_unmatched_rows_is_ignored():
    # Only matched rows enter A_t; an unmatched row's appearance value plays no part.
    df = case({8: [V("a", a=0.8), dict(MISS("b"), appearance=0.1)]})
    assert case_row(score_frame(df, NO_BOOT))["I"] == approx(80.0)


def test_structure_gate_and_coverage_multiplier():
    df = case({
        8: [V("a", s=0.9), V("b", s=0.7)],    # S_t = 0.8
        16: [V("a", s=0.9), V("b", s=0.2)],   # gate fails: 0, but still counts toward coverage
        24: [V("a"), V("b")],                 # no structure: outside F_S
        32: [V("a"), V("b")],
    })
    c = case_row(score_frame(df, NO_BOOT))
    assert c["C_S"] == approx(50.0)
    assert c["S"] == approx(100 * 0.5 * (0.8 + 0.0) / 2)


def test_case_without_structure_frames_scores_zero_structure_and_is_flagged():
    df = case({8: [V("a", a=0.6)], 16: [V("a", a=0.8)]})
    r = score_frame(df, NO_BOOT)
    c = case_row(r)
    assert c["S"] == approx(0.0) and c["C_S"] == approx(0.0)
    assert "no_structure_frames" in c["flags"] and "weights_renormalised" not in c["flags"]
    assert c["OPIS"] == approx(100 * (0.2 * 1.0 + 0.4 * 0.7 + 0.4 * 0.0))
    assert r["models"]["m"]["coverage"]["no_s"] == 1


def test_undefined_identity_renormalises_the_case_weights():
    # Every expected instance is missing: P = 0 is defined, I has no evidence.
    df = case({8: [MISS("a", track="dynamic")], 16: [V("a", s=0.5, track="dynamic")]})
    c = case_row(score_frame(df, NO_BOOT))
    assert c["I"] is None
    assert c["P"] == approx(50.0)
    assert c["S"] == approx(100 * 0.5 * 0.5)
    assert c["OPIS"] == approx(100 * (0.2 * 0.5 + 0.4 * 0.25) / 0.6)
    assert set(c["flags"]) == {"I_undefined", "weights_renormalised"}


def test_undefined_presence_and_identity_leave_structure_alone():
    # Nothing expected visible and no extras; a structure value exists on an occluded instance.
    df = case({8: [HIDDEN("a", s=0.6)], 16: [HIDDEN("a", "out_of_view")]})
    c = case_row(score_frame(df, NO_BOOT))
    assert c["P"] is None and c["I"] is None
    assert c["OPIS"] == approx(100 * 0.5 * 0.6)
    assert {"P_undefined", "I_undefined", "weights_renormalised"} <= set(c["flags"])


def test_json_uses_null_for_undefined_and_is_strict_json():
    df = case({8: [HIDDEN("a")]})
    r = score_frame(df, NO_BOOT)
    text = json.dumps(r, allow_nan=False)
    m = json.loads(text)["models"]["m"]
    assert m["P"] is None and m["I"] is None and m["S"] == 0.0 and m["OPIS"] == 0.0
    assert m["OPIS_ci"] is None


# --- hierarchy -------------------------------------------------------------------------------
def _p_case(case_id, sub, dom, passed: bool, model="m"):
    return case({8: [V("a", a=0.5) if passed else MISS("a")]}, model=model, case_id=case_id, subcategory=sub, domain=dom)


def test_unequal_case_counts_average_subcategories_equally():
    df = archive(
        _p_case("a1", "s1", "d1", True),                                             # s1: P = 1
        _p_case("b1", "s2", "d1", False), _p_case("b2", "s2", "d1", False), _p_case("b3", "s2", "d1", True),  # s2: 1/3
        _p_case("c1", "s3", "d2", False), _p_case("c2", "s3", "d2", True),           # d2: 1/2
    )
    m = score_frame(df, NO_BOOT)["models"]["m"]
    assert m["subcategories"]["s2"]["P"] == approx(100 / 3)
    assert m["domains"]["d1"]["P"] == approx(100 * (1 + 1 / 3) / 2)
    assert m["domains"]["d2"]["P"] == approx(50.0)
    assert m["P"] == approx(100 * (2 / 3 + 1 / 2) / 2)  # mean of domains, not of the 6 cases (which is 1/2)
    assert m["n_cases"] == 6


def test_components_average_only_over_cases_where_they_are_defined():
    df = archive(
        case({8: [V("a", a=0.8)]}, case_id="x"),         # I = 0.8
        case({8: [MISS("a")]}, case_id="y"),             # I undefined: left out, not counted as 0
    )
    m = score_frame(df, NO_BOOT)["models"]["m"]
    assert m["I"] == approx(80.0)
    assert m["P"] == approx(50.0)
    # Model OPIS comes from the hierarchical components, not from case OPIS values.
    assert m["OPIS"] == approx(0.2 * 50.0 + 0.4 * 80.0 + 0.4 * 0.0)


def test_models_are_scored_separately():
    df = archive(_p_case("a", "s", "d", True, model="good"), _p_case("a", "s", "d", False, model="bad"))
    r = score_frame(df, NO_BOOT)
    assert r["models"]["good"]["P"] == approx(100.0) and r["models"]["bad"]["P"] == approx(0.0)
    assert [c["model"] for c in r["cases"]] == ["bad", "good"]


# --- variants --------------------------------------------------------------------------------
def _variant_case():
    return case({
        8: [V("a", a=0.9, s=0.9), V("b", a=0.5, s=0.2)],   # S gate fails (0.2), mean s 0.55, min 0.2
        16: [V("a", a=0.8, s=0.6), V("b", a=0.4, s=0.8)],  # S_t mean 0.7, min 0.6; I_t mean 0.6, min 0.4
        24: [V("a", a=0.6), MISS("b")],                    # I_t = 0.6 (min 0.6); P fails
        32: [V("a", a=0.2), V("b", a=0.9)],                # I gate fails
    })


@pytest.mark.parametrize(
    "variant, P, I, S",
    [
        ("strict", 0.75, (0.7 + 0.6 + 0.6 + 0) / 4, 0.5 * (0 + 0.7) / 2),
        ("no_gate", 0.75, (0.7 + 0.6 + 0.6 + 0) / 4, 0.5 * (0.55 + 0.7) / 2),  # the identity gate stays
        ("no_coverage", 0.75, (0.7 + 0.6 + 0.6 + 0) / 4, (0 + 0.7) / 2),
        ("minimum", 0.75, (0.5 + 0.4 + 0.6 + 0) / 4, 0.5 * (0 + 0.6) / 2),
        ("uniform", 0.75, (0.7 + 0.6 + 0.6 + 0) / 4, 0.5 * (0 + 0.7) / 2),
    ],
)
def test_each_variant(variant, P, I, S):
    r = score_frame(_variant_case(), ScoreConfig(bootstrap=0, variant=variant))
    c = case_row(r)
    w = (1 / 3, 1 / 3, 1 / 3) if variant == "uniform" else (0.2, 0.4, 0.4)
    assert (c["P"], c["I"], c["S"]) == (approx(100 * P), approx(100 * I), approx(100 * S))
    assert c["OPIS"] == approx(100 * (w[0] * P + w[1] * I + w[2] * S))
    assert r["variant"] == variant
    assert r["models"]["m"]["variants"][variant] == approx(r["models"]["m"]["OPIS"])


def test_variant_table_is_independent_of_the_selected_variant():
    a = score_frame(_variant_case(), ScoreConfig(bootstrap=0))["models"]["m"]["variants"]
    b = score_frame(_variant_case(), ScoreConfig(bootstrap=0, variant="minimum"))["models"]["m"]["variants"]
    assert a == b and set(a) == set(ALL_VARIANTS)


def test_no_coverage_keeps_zero_structure_for_cases_without_structure_frames():
    df = case({8: [V("a", a=0.6)]})
    c = case_row(score_frame(df, ScoreConfig(bootstrap=0, variant="no_coverage")))
    assert c["S"] == approx(0.0)


def test_thresholds_and_weights_are_configurable():
    df = case({8: [V("a", a=0.5, s=0.5)], 16: [V("a", a=0.3, s=0.3)]})
    c = case_row(score_frame(df, ScoreConfig(bootstrap=0, tau_I=0.25, tau_S=0.6, weights=(0.5, 0.5, 0.0))))
    assert c["I"] == approx(40.0) and c["S"] == approx(0.0)
    assert c["OPIS"] == approx(0.5 * 100 + 0.5 * 40)


def test_config_rejects_bad_values():
    for bad in (dict(weights=(0.5, 0.5, 0.5)), dict(tau_I=1.5), dict(variant="median"), dict(bootstrap=-1),
                dict(density_edges=(40, 20)), dict(temporal_edges=(4.0, 1.0))):
        with pytest.raises(ValueError):
            ScoreConfig(**bad)


# --- diagnostics -----------------------------------------------------------------------------
def _case_with_n(n_ref: int, case_id: str, passed: bool, a: float):
    """One visible instance plus n_ref - 1 occluded ones (which change no score)."""
    filler = [HIDDEN(f"h{k}") for k in range(n_ref - 1)]
    first = V("a", a=a, s=0.5) if passed else MISS("a")
    return case({8: [first] + filler, 16: [V("a", a=a)] + filler}, case_id=case_id)


def test_density_bins_by_reference_inventory_size():
    df = archive(
        _case_with_n(3, "small", True, 0.9),
        _case_with_n(20, "edge20", True, 0.3),   # 20 is still "<=20"; a = 0.3 fails identity in both frames
        _case_with_n(21, "mid", False, 0.6),
        _case_with_n(41, "big", False, 0.2),
    )
    d = score_frame(df, NO_BOOT)["models"]["m"]["density"]
    assert list(d) == ["<=20", "21-40", ">40"]
    assert d["<=20"]["n_cases"] == 2 and d["21-40"]["n_cases"] == 1 and d[">40"]["n_cases"] == 1
    assert d["<=20"]["P"] == approx(100.0)
    assert d["<=20"]["I"] == approx(100 * (0.9 + 0.0) / 2)
    assert d["<=20"]["fail_I"] == approx(50.0)
    assert d["<=20"]["C_S"] == approx(50.0)
    assert d["<=20"]["S"] == approx(100 * 0.5 * 0.5)
    assert d["21-40"]["P"] == approx(50.0) and d["21-40"]["fail_I"] == approx(0.0)
    assert d[">40"]["I"] == approx(0.0) and d[">40"]["fail_I"] == approx(100.0)


def test_temporal_intervals_are_scored_independently():
    # 24 fps: frame 24 -> 1.0 s, 95 -> 3.96 s, 96 -> 4.0 s, 168 -> 7.0 s, 240 -> 10.0 s, 252 -> 10.5 s.
    frames = {
        23: [V("a", a=0.5)],             # 0.958 s: the first sample of a 1 s skip at 23.x fps rounds below 1 s
        24: [V("a", a=0.9, s=0.8)],
        95: [MISS("a")],
        96: [V("a", a=0.4)],
        167: [V("a", a=0.6, s=0.6)],
        168: [V("a", a=0.2)],
        240: [V("a", a=0.8, s=0.4)],     # exactly 10 s: inside the closed last interval
        252: [MISS("a")],                # beyond 10 s: in no interval
    }
    r = score_frame(case(frames, fps=24.0), NO_BOOT)
    t = r["models"]["m"]["temporal"]
    assert list(t) == ["1-4", "4-7", "7-10"]
    assert t["1-4"]["P"] == approx(100 * 2 / 3) and t["1-4"]["I"] == approx(100 * 0.7)
    assert t["1-4"]["C_S"] == approx(100 / 3) and t["1-4"]["S"] == approx(100 * 0.8 / 3)
    assert t["4-7"]["P"] == approx(100.0) and t["4-7"]["I"] == approx(100 * 0.5) and t["4-7"]["S"] == approx(100 * 0.3)
    assert t["7-10"]["I"] == approx(100 * 0.4) and t["7-10"]["C_S"] == approx(50.0) and t["7-10"]["S"] == approx(20.0)
    assert t["7-10"]["OPIS"] == approx(0.2 * 100 + 0.4 * 40 + 0.4 * 20)
    # The whole-rollout score still uses every frame, 10.5 s included.
    assert case_row(r)["P"] == approx(100 * 6 / 8)


def test_temporal_interval_without_frames_is_null():
    r = score_frame(case({24: [V("a", a=0.9)]}, fps=24.0), NO_BOOT)
    t = r["models"]["m"]["temporal"]
    assert t["4-7"]["P"] is None and t["4-7"]["OPIS"] is None and t["4-7"]["n_cases"] == 0


def test_coverage_audit():
    c1 = case({
        8: [V("a", a=0.7, s=0.9), HIDDEN("b", "unknown", track="dynamic"), V("c", track="dynamic", s=0.5)],
        16: [V("a", a=0.7), AMBIG("b", track="dynamic"), HIDDEN("c", track="dynamic")],
    }, case_id="c1", subcategory="s1")
    c2 = case({8: [HIDDEN("a")], 16: [HIDDEN("a", "out_of_view")]}, case_id="c2", subcategory="s2")
    cov = score_frame(archive(c1, c2), NO_BOOT)["models"]["m"]["coverage"]
    # c1: C_P 1, C_I 1, static 1/2, dynamic 1/4, unknown 2/6. c2: C_P 0, C_I 0, static 0, no dynamic, unknown 0.
    assert cov["C_P"] == approx(50.0) and cov["C_I"] == approx(50.0)
    assert cov["static"] == approx(100 * (0.5 + 0) / 2)
    assert cov["dynamic"] == approx(25.0)  # only s1 has dynamic instances
    assert cov["unknown"] == approx(100 * (2 / 6 + 0) / 2)
    assert cov["no_s"] == 1


# --- bootstrap -------------------------------------------------------------------------------
def _boot_archive():
    cases = []
    for k, a in enumerate([0.4, 0.5, 0.6, 0.7, 0.8, 0.9]):
        cases.append(case({8: [V("a", a=a, s=a)], 16: [V("a", a=a) if k % 2 else MISS("a")]},
                          case_id=f"c{k}", subcategory=f"s{k % 2}", domain="d"))
    return archive(*cases)


def test_bootstrap_is_seeded_and_brackets_the_point_estimate():
    df = _boot_archive()
    a = score_frame(df, ScoreConfig(bootstrap=300, seed=7))["models"]["m"]
    b = score_frame(df, ScoreConfig(bootstrap=300, seed=7))["models"]["m"]
    c = score_frame(df, ScoreConfig(bootstrap=300, seed=8))["models"]["m"]
    assert a["OPIS_ci"] == b["OPIS_ci"]
    assert a["OPIS_ci"] != c["OPIS_ci"]
    lo, hi = a["OPIS_ci"]
    assert lo < a["OPIS"] < hi


def test_bootstrap_of_identical_cases_has_zero_width():
    df = archive(*[case({8: [V("a", a=0.6, s=0.6)]}, case_id=f"c{k}") for k in range(5)])
    m = score_frame(df, ScoreConfig(bootstrap=200))["models"]["m"]
    assert m["OPIS_ci"] == [approx(m["OPIS"]), approx(m["OPIS"])]


def test_bootstrap_resamples_within_subcategories():
    # s1 holds one case, s2 one case: every replicate redraws the same two cases, so the CI collapses.
    df = archive(_p_case("x", "s1", "d", True), _p_case("y", "s2", "d", False))
    m = score_frame(df, ScoreConfig(bootstrap=200))["models"]["m"]
    assert m["OPIS_ci"] == [approx(m["OPIS"]), approx(m["OPIS"])]


def test_bootstrap_of_one_model_does_not_depend_on_other_models():
    df = _boot_archive()
    other = _boot_archive().assign(model="other")
    alone = score_frame(df, ScoreConfig(bootstrap=200))["models"]["m"]["OPIS_ci"]
    together = score_frame(archive(df, other), ScoreConfig(bootstrap=200))["models"]["m"]["OPIS_ci"]
    assert alone == together


def test_bootstrap_matches_a_replicate_loop():
    """The matrix bootstrap equals an explicit loop over replicates using the same draw counts."""
    import numpy as np

    from worldeval.stats import Hierarchy, stratified_counts

    rng = np.random.default_rng(3)
    sub = np.array([0, 0, 0, 1, 1, 2])
    dom = np.array([0, 0, 1])
    values = rng.random((6, 2))
    values[1, 1] = np.nan
    h = Hierarchy(sub, dom, np.array([0, 0]))
    w = stratified_counts(sub, 50, np.random.default_rng(5))
    got = h.means(values, w)["top"][:, 0, :]
    for r in range(50):
        assert (w[r][sub == 0].sum(), w[r][sub == 1].sum(), w[r][sub == 2].sum()) == (3, 2, 1)
        expect = []
        for k in range(2):
            sm = []
            for s in range(3):
                sel = (sub == s) & ~np.isnan(values[:, k])
                wt = w[r][sel]
                sm.append(np.nan if wt.sum() == 0 else float((wt * values[sel, k]).sum() / wt.sum()))
            d0 = np.nanmean(sm[:2]) if not all(math.isnan(x) for x in sm[:2]) else np.nan
            d1 = sm[2]
            expect.append(np.nanmean([d0, d1]))
        assert got[r] == pytest.approx(expect)
