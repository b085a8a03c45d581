"""OPIS scoring: measurement archive -> P, I, S, C_S, OPIS, CIs, variants, diagnostics.

Three steps, in the spirit of COCOeval:

1. `frame_evidence`: one pass over the archive rows reduces them to per-frame
   evidence counts (|E_t|, missing, |X_t|, sums/minima/gate failures of the
   appearance and structure values, coverage counts). Every rule below reads
   only these arrays, never the rows again.
2. `accumulate`: frame evidence -> case components P, I, S, C_S (+ coverage
   and Fail-I) under one set of rules (a variant), optionally for frames
   regrouped by a key (the temporal diagnostic groups by case x interval).
3. `summarize`: case values -> subcategory -> domain -> model means
   (`worldeval.stats.Hierarchy`), the stratified bootstrap CI, variants and
   diagnostics, returned as the JSON object of SPEC section 3.

All work is numpy array work: no Python loop runs per row, frame, case or
bootstrap replicate (loops run over models, variants and diagnostic bins).
`score_runs` never imports pandas: the archive is read as `ArchiveColumns`.
Internally scores are fractions in [0, 1]; the JSON output is on 0-100.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from worldeval.opis.archive import (ArchiveColumns, ArchiveKeys, archive_keys, group_counts, read_archive_columns,
                                    validate_archive)
from worldeval.opis.labels import EXCLUDED, Track, Visibility
from worldeval.opis.official import v3
from worldeval.stats import BOOTSTRAP_REPLICATES, CI_LEVEL, Hierarchy, model_rng, percentile_interval, stratified_counts

if TYPE_CHECKING:
    import pandas as pd  # a DataFrame is one input scoring takes; `score_runs` reads and scores without pandas

VARIANTS = ("strict", "no_gate", "no_coverage", "minimum", "uniform")
# The OPIS authors' own aggregation (worldeval.opis.official.v3), reported beside the paper's variants.
OFFICIAL = v3.VARIANT
ALL_VARIANTS = VARIANTS + (OFFICIAL,)
DENSITY_BINS = ("<=20", "21-40", ">40")
TEMPORAL_BINS = ("1-4", "4-7", "7-10")
COMPONENTS = ("P", "I", "S")
# The paper's acceptance thresholds of a_it and s_it (SPEC section 3). Every tool that reads the
# archive's appearance and structure values the way scoring does takes its default from here, so a
# changed threshold cannot leave one of them judging by the old one.
TAU_I = 0.35
TAU_S = 0.35


@dataclass(frozen=True)
class ScoreConfig:
    """Scoring options; defaults are the paper's (SPEC section 3)."""

    tau_I: float = TAU_I
    tau_S: float = TAU_S
    weights: tuple[float, float, float] = (0.2, 0.4, 0.4)
    variant: str = "strict"
    bootstrap: int = BOOTSTRAP_REPLICATES
    seed: int = 0
    ci_level: float = CI_LEVEL
    # Density bins: n_reference <= 20, 21..40, > 40.
    density_edges: tuple[int, int] = (20, 40)
    # Temporal intervals [1,4), [4,7), [7,10] seconds; the last one is closed.
    temporal_edges: tuple[float, ...] = (1.0, 4.0, 7.0, 10.0)
    # The first sample sits at round(fps)/fps, which can fall a hair below 1 s;
    # frames this close below the first edge still count in the first interval.
    temporal_slack_s: float = 0.05
    validate: bool = True

    def __post_init__(self) -> None:
        for name in ("tau_I", "tau_S"):
            v = getattr(self, name)
            if not (0.0 <= v <= 1.0):
                raise ValueError(f"{name} must be in [0, 1], got {v}")
        w = tuple(float(x) for x in self.weights)
        if len(w) != 3 or min(w) < 0 or not math.isclose(sum(w), 1.0, abs_tol=1e-9):
            raise ValueError(f"weights (wP, wI, wS) must be three non-negative numbers summing to 1, got {self.weights}")
        object.__setattr__(self, "weights", w)
        if self.variant not in ALL_VARIANTS:
            raise ValueError(f"unknown variant {self.variant!r} (choose from {', '.join(ALL_VARIANTS)})")
        if self.bootstrap < 0:
            raise ValueError(f"bootstrap must be >= 0, got {self.bootstrap}")
        if not (0.0 < self.ci_level < 1.0):
            raise ValueError(f"ci_level must be in (0, 1), got {self.ci_level}")
        de = tuple(self.density_edges)
        if len(de) != 2 or not (0 <= de[0] < de[1]):
            raise ValueError(f"density_edges must be two increasing counts (lo, hi), got {self.density_edges}")
        if list(self.temporal_edges) != sorted(self.temporal_edges) or len(self.temporal_edges) < 2:
            raise ValueError(f"temporal_edges must be increasing, got {self.temporal_edges}")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["weights"] = {"P": self.weights[0], "I": self.weights[1], "S": self.weights[2]}
        d.pop("validate")
        return d


@dataclass(frozen=True)
class Rules:
    """How frame evidence becomes case components (one OPIS Table 5 variant)."""

    gate_S: bool = True
    coverage: bool = True
    reduce: str = "mean"  # within-frame reduction of I and S after the gate: "mean" or "min"
    weights: tuple[float, float, float] = (0.2, 0.4, 0.4)


def variant_rules(variant: str, config: ScoreConfig) -> Rules:
    base = Rules(weights=config.weights)
    if variant == "strict":
        return base
    if variant == "no_gate":
        return replace(base, gate_S=False)
    if variant == "no_coverage":
        return replace(base, coverage=False)
    if variant == "minimum":
        return replace(base, reduce="min")
    if variant == "uniform":
        return replace(base, weights=(1 / 3, 1 / 3, 1 / 3))
    raise ValueError(f"unknown variant {variant!r} (choose from {', '.join(VARIANTS)})")


# ----------------------------------------------------------------------------- step 1: frame evidence


@dataclass
class FrameEvidence:
    """Per-frame evidence of an archive; `cases` holds one entry per (model, case) in canonical order."""

    cases: dict[str, np.ndarray]  # model, case_id, domain, subcategory (str), n_reference (int64)
    case: np.ndarray  # case index of every frame
    time_s: np.ndarray
    n_expected: np.ndarray  # |E_t|
    n_missing: np.ndarray  # expected_visible and unmatched
    n_extra: np.ndarray  # |X_t|
    n_app: np.ndarray  # |A_t|
    sum_app: np.ndarray
    min_app: np.ndarray
    fail_app: np.ndarray  # members of A_t with a < tau_I
    n_str: np.ndarray  # |B_t|
    sum_str: np.ndarray
    min_str: np.ndarray
    fail_str: np.ndarray  # members of B_t with s < tau_S
    n_inst: np.ndarray  # reference-instance rows (instance-frames)
    n_unknown: np.ndarray
    n_static: np.ndarray
    n_static_str: np.ndarray
    n_dynamic: np.ndarray
    n_dynamic_str: np.ndarray
    official: dict = field(default_factory=dict)  # per case: the authors' v3 P, I, S, OPIS (official/v3.py)

    @property
    def n_frames(self) -> int:
        return len(self.case)

    @property
    def n_cases(self) -> int:
        return len(self.cases["model"])


def _label_eq(cols: ArchiveColumns, name: str, label: str) -> np.ndarray:
    codes, labels = cols.codes(name)
    hit = np.flatnonzero(labels == label)
    if len(hit) == 0:
        return np.zeros(cols.n_rows, dtype=bool)
    return codes == hit[0]


def _case_table(cols: ArchiveColumns, keys: ArchiveKeys) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """One entry per (model, case) in canonical order, and the canonical rank of each case key."""
    first = keys.first_row_of_case
    cases = {c: cols.labels_at(c, first).astype(str) for c in ("model", "case_id", "domain", "subcategory")}
    cases["n_reference"] = cols.ints("n_reference")[first].astype(np.int64)
    # Canonical case order (model, domain, subcategory, case_id) so results and
    # the bootstrap's draws do not depend on the order rows were written in.
    order = np.lexsort((cases["case_id"], cases["subcategory"], cases["domain"], cases["model"]))
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return {c: v[order] for c, v in cases.items()}, rank


def frame_evidence(df: "pd.DataFrame | ArchiveColumns", config: ScoreConfig = ScoreConfig(),
                   keys: ArchiveKeys | None = None) -> FrameEvidence:
    """Reduce archive rows (a DataFrame or `ArchiveColumns`) to per-frame evidence.

    The archive is validated first unless `config.validate` is False or the
    caller passes the `keys` that validation returned.
    """
    cols = ArchiveColumns.of(df)
    if cols.n_rows == 0:
        raise ValueError("the archive holds no measurements")
    if keys is None:
        keys = validate_archive(cols) if config.validate else archive_keys(cols)
    cases, rank = _case_table(cols, keys)

    fkey = keys.frame
    nf = keys.n_frames
    case_of_frame = np.empty(nf, dtype=np.int64)
    case_of_frame[fkey] = rank[keys.case]
    time_of_frame = np.empty(nf)
    time_of_frame[fkey] = cols.floats("time_s")

    extra = cols.bools("extra")
    # An excluded instance's rows are carried (finding it made it no extra) and never scored.
    ref = ~extra & ~_label_eq(cols, "track", EXCLUDED)
    matched = cols.bools("matched") & ref
    expected = _label_eq(cols, "visibility", Visibility.EXPECTED) & ref
    unknown = _label_eq(cols, "visibility", Visibility.UNKNOWN) & ref
    static = _label_eq(cols, "track", Track.STATIC) & ref
    dynamic = _label_eq(cols, "track", Track.DYNAMIC) & ref
    app = cols.floats("appearance")
    strv = cols.floats("structure")
    in_a = matched & ~np.isnan(app)
    in_b = ~np.isnan(strv) & ref
    counts = dict(zip(
        ("n_expected", "n_missing", "n_extra", "n_app", "fail_app", "n_str", "fail_str", "n_inst", "n_unknown",
         "n_static", "n_static_str", "n_dynamic", "n_dynamic_str"),
        group_counts(fkey, nf, [expected, expected & ~matched, extra, in_a, in_a & (app < config.tau_I), in_b,
                                in_b & (strv < config.tau_S), ref, unknown, static, static & in_b, dynamic,
                                dynamic & in_b]),
    ))  # fmt: skip
    return FrameEvidence(
        cases=cases,
        case=case_of_frame,
        time_s=time_of_frame,
        sum_app=_frame_total(fkey, nf, in_a, app),
        min_app=_frame_minimum(fkey, nf, in_a, app),
        sum_str=_frame_total(fkey, nf, in_b, strv),
        min_str=_frame_minimum(fkey, nf, in_b, strv),
        official=v3.case_scores(cols, keys, case_of_frame, len(cases["model"]), config.weights),
        **counts,
    )


def _frame_total(fkey: np.ndarray, nf: int, mask: np.ndarray, values: np.ndarray) -> np.ndarray:
    # Zeros in place of the rows left out add nothing, so the sums are those of the rows in `mask`
    # taken in the same order, bit for bit, without first gathering the rows.
    return np.bincount(fkey, weights=np.where(mask, values, 0.0), minlength=nf)


def _frame_minimum(fkey: np.ndarray, nf: int, mask: np.ndarray, values: np.ndarray) -> np.ndarray:
    k, v = fkey[mask], values[mask]
    out = np.full(nf, np.inf)
    if len(k) > 1 and np.all(k[1:] >= k[:-1]):
        # Rows written frame by frame: one reduction per run of a frame, far faster than `minimum.at`.
        starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
        out[k[starts]] = np.minimum.reduceat(v, starts)
    else:
        np.minimum.at(out, k, v)
    return out


# ----------------------------------------------------------------------------- step 2: accumulate


def frame_scores(ev: FrameEvidence, rules: Rules) -> dict[str, np.ndarray]:
    """P_t, I_t, S_t with their defined-masks (frames in F_P, F_I, F_S)."""
    in_fp = (ev.n_expected + ev.n_extra) > 0
    p_t = ((ev.n_missing == 0) & (ev.n_extra == 0)).astype(float)
    in_fi = ev.n_app > 0
    in_fs = ev.n_str > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        if rules.reduce == "min":
            a_level, s_level = ev.min_app, ev.min_str
        else:
            a_level, s_level = ev.sum_app / ev.n_app, ev.sum_str / ev.n_str
    i_t = np.where(in_fi & (ev.fail_app == 0), a_level, 0.0)
    s_gate = (ev.fail_str == 0) if rules.gate_S else np.ones(ev.n_frames, dtype=bool)
    s_t = np.where(in_fs & s_gate, s_level, 0.0)
    return {"P_t": p_t, "I_t": i_t, "S_t": s_t, "in_FP": in_fp, "in_FI": in_fi, "in_FS": in_fs}


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)


def accumulate(
    ev: FrameEvidence, rules: Rules, key: np.ndarray | None = None, n_keys: int | None = None
) -> dict[str, np.ndarray]:
    """Case components from frame evidence. Fractions in [0, 1]; NaN = undefined.

    `key` regroups frames (default: their case); frames with key < 0 are left
    out. Groups without frames get NaN everywhere and n_frames = 0.
    """
    if key is None:
        key, n_keys = ev.case, ev.n_cases
    keep = key >= 0
    k = key[keep]
    fs = frame_scores(ev, rules)

    def s(x: np.ndarray) -> np.ndarray:
        return np.bincount(k, weights=np.asarray(x, dtype=float)[keep], minlength=n_keys)

    n_f = s(np.ones(ev.n_frames))
    n_fp, n_fi, n_fs = s(fs["in_FP"]), s(fs["in_FI"]), s(fs["in_FS"])
    P = _ratio(s(fs["P_t"] * fs["in_FP"]), n_fp)
    I = _ratio(s(fs["I_t"]), n_fi)
    C_S = _ratio(n_fs, n_f)
    s_mean = np.where(n_fs > 0, _ratio(s(fs["S_t"]), n_fs), 0.0)  # no structure frames: S = 0
    S = np.where(n_f > 0, s_mean * C_S if rules.coverage else s_mean, np.nan)
    fail_frames = s(fs["in_FI"] & (ev.fail_app > 0))
    out = {
        "P": P,
        "I": I,
        "S": S,
        "C_S": C_S,
        "C_P": _ratio(n_fp, n_f),
        "C_I": _ratio(n_fi, n_f),
        "fail_I": _ratio(fail_frames, n_fi),
        "static": _ratio(s(ev.n_static_str), s(ev.n_static)),
        "dynamic": _ratio(s(ev.n_dynamic_str), s(ev.n_dynamic)),
        "unknown": _ratio(s(ev.n_unknown), s(ev.n_inst)),
        "n_frames": n_f,
        "n_FS": n_fs,
    }
    out["OPIS"], out["renormalised"] = combine(P, I, S, rules.weights)
    return out


def combine(P, I, S, weights) -> tuple[np.ndarray, np.ndarray]:
    """100 * (wP P + wI I + wS S), renormalising the weights over the defined components.

    Returns (score, renormalised-mask). All-undefined gives NaN.
    """
    comps = np.stack([np.asarray(P, float), np.asarray(I, float), np.asarray(S, float)], axis=-1)
    w = np.asarray(weights, dtype=float)
    defined = ~np.isnan(comps)
    wsum = (defined * w).sum(axis=-1)
    num = (np.where(defined, comps, 0.0) * w).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        score = np.where(wsum > 0, 100.0 * num / np.where(wsum > 0, wsum, 1), np.nan)
    renorm = (~defined & (w > 0)).any(axis=-1) & (wsum > 0)
    return score, renorm


def case_flags(comp: dict[str, np.ndarray]) -> list[list[str]]:
    """Per case: P_undefined, I_undefined, no_structure_frames, weights_renormalised."""
    flags = {
        "P_undefined": np.isnan(comp["P"]),
        "I_undefined": np.isnan(comp["I"]),
        "no_structure_frames": comp["n_FS"] == 0,
        "weights_renormalised": comp["renormalised"],
    }
    names = np.array(list(flags), dtype=object)
    m = np.stack(list(flags.values()), axis=1)
    return [list(names[row]) for row in m]


# ----------------------------------------------------------------------------- step 3: summarize


def _json_num(x, scale: float = 1.0):
    if x is None:
        return None
    x = float(x)
    if math.isnan(x):
        return None
    return x * scale


@dataclass
class _Levels:
    hierarchy: Hierarchy
    labels: dict
    case_slices: list[tuple[int, int]] = field(default_factory=list)  # per model
    model_code: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # per case


def _levels(cases: dict[str, np.ndarray]) -> _Levels:
    h, labels = Hierarchy.from_labels(cases["model"], cases["domain"], cases["subcategory"])
    codes = h.top_of_dom[h.dom_of_sub[h.sub_of_case]]
    # Cases are sorted by model, so each model's cases form one slice.
    bounds = np.r_[0, np.cumsum(np.bincount(codes, minlength=h.n_top))]
    slices = [(int(bounds[i]), int(bounds[i + 1])) for i in range(len(bounds) - 1)]
    return _Levels(h, labels, slices, codes)


def _component_levels(lv: _Levels, comp: dict, names: Sequence[str], case_mask: np.ndarray | None = None) -> dict:
    values = np.stack([comp[n] for n in names], axis=1)
    if case_mask is not None:
        values = np.where(case_mask[:, None], values, np.nan)
    m = lv.hierarchy.means(values)
    return {lvl: {n: arr[0, :, i] for i, n in enumerate(names)} for lvl, arr in m.items()}


def _model_bootstrap(lv: _Levels, comp: dict, rules: Rules, config: ScoreConfig) -> np.ndarray:
    """(T, 2) percentile interval of model OPIS from the stratified case bootstrap."""
    h = lv.hierarchy
    values = np.stack([comp[n] for n in COMPONENTS], axis=1)
    out = np.full((h.n_top, 2), np.nan)
    for t, (a, b) in enumerate(lv.case_slices):
        model = lv.labels["top"][t]
        rng = model_rng(config.seed, model)
        sub = h.sub_of_case[a:b]
        s0 = int(sub.min())
        doms = h.dom_of_sub[s0 : int(sub.max()) + 1]
        d0 = int(doms.min())
        local = Hierarchy(sub - s0, doms - d0, np.zeros(int(doms.max()) - d0 + 1, dtype=np.int64))
        weights = stratified_counts(sub, config.bootstrap, rng)
        top = local.means(values[a:b], weights)["top"][:, 0, :]  # R x 3
        opis, _ = combine(top[:, 0], top[:, 1], top[:, 2], rules.weights)
        out[t] = percentile_interval(opis, config.ci_level)
    return out


def _density_bin(n_reference: np.ndarray, edges: tuple[int, int]) -> np.ndarray:
    return np.searchsorted(np.asarray(edges), n_reference, side="left")


def _temporal_bin(ev: FrameEvidence, config: ScoreConfig) -> np.ndarray:
    edges = np.asarray(config.temporal_edges, dtype=float)
    t = ev.time_s
    b = np.searchsorted(edges, t, side="right") - 1
    b = np.where((t < edges[0]) & (t >= edges[0] - config.temporal_slack_s), 0, b)
    b = np.where(t == edges[-1], len(edges) - 2, b)  # the last interval is closed
    return np.where((b >= 0) & (b < len(edges) - 1), b, -1)


def _bin_names(edges, kind: str) -> list[str]:
    if kind == "density":
        lo, hi = edges
        return [f"<={lo}", f"{lo + 1}-{hi}", f">{hi}"]
    return [f"{edges[i]:g}-{edges[i + 1]:g}" for i in range(len(edges) - 1)]


def summarize(ev: FrameEvidence, config: ScoreConfig = ScoreConfig()) -> dict:
    """The SPEC section 3 JSON object (0-100 scale, None for undefined).

    With the `official-v3` variant, P, I, S, OPIS, the interval and the case records are the authors'
    aggregation (`worldeval.opis.official.v3`); coverage, density and temporal diagnostics stay under
    the paper's strict rules (`diagnostics_rules`).
    """
    lv = _levels(ev.cases)
    h = lv.hierarchy
    official = config.variant == OFFICIAL
    rules = variant_rules("strict" if official else config.variant, config)
    comp = accumulate(ev, rules)
    main = _component_levels(lv, comp, ("P", "I", "S", "C_S"))
    opis = {level: combine(main[level]["P"], main[level]["I"], main[level]["S"], rules.weights)[0]
            for level in ("top", "domain", "subcategory")}  # fmt: skip
    variants = {}
    for v in VARIANTS:
        r = variant_rules(v, config)
        c = comp if r == rules else accumulate(ev, r)
        top = _component_levels(lv, c, COMPONENTS)["top"]
        variants[v] = combine(top["P"], top["I"], top["S"], r.weights)[0]
    off = _component_levels(lv, {**ev.official, "OPIS": ev.official["OPIS"] / 100.0}, ("P", "I", "S", "OPIS"))
    variants[OFFICIAL] = off["top"]["OPIS"] * 100.0
    if official:
        nan = np.full(len(ev.official["P"]), np.nan)
        main = {lvl: {**{c: off[lvl][c] for c in COMPONENTS}, "C_S": np.full_like(off[lvl]["P"], np.nan)} for lvl in off}
        opis = {lvl: off[lvl]["OPIS"] * 100.0 for lvl in off}
        ci = _official_bootstrap(lv, ev, config) if config.bootstrap > 0 else None
        case_comp = {**ev.official, "C_S": nan}
    else:
        ci = _model_bootstrap(lv, comp, rules, config) if config.bootstrap > 0 else None
        case_comp = comp
    cov = _component_levels(lv, comp, ("C_P", "C_I", "static", "dynamic", "unknown"))["top"]
    cov["no_s"] = np.bincount(lv.model_code, weights=(comp["n_FS"] == 0).astype(float), minlength=h.n_top)
    diags = {"density": _density_levels(ev, lv, comp, rules, config), "temporal": _temporal_levels(ev, lv, rules, config)}
    models = {model: _model_json(t, lv, main, opis, ci, cov, diags, variants) for t, model in enumerate(lv.labels["top"])}
    out = {"config": config.to_dict(), "variant": config.variant, "models": models,
           "cases": _official_case_records(ev) if official else _case_records(ev, case_comp)}
    if official:
        out["contract"] = v3.CONTRACT
        out["diagnostics_rules"] = "strict"
        for t, model in enumerate(lv.labels["top"]):
            a, b = lv.case_slices[t]
            models[model]["OPIS_case_mean"] = float(np.mean(ev.official["OPIS"][a:b]))
    return out


def _official_bootstrap(lv, ev: FrameEvidence, config: ScoreConfig) -> np.ndarray:
    """(T, 2): the authors' flat case bootstrap of each model's case headlines."""
    out = np.full((lv.hierarchy.n_top, 2), np.nan)
    for t, (a, b) in enumerate(lv.case_slices):
        ci = v3.flat_bootstrap(ev.official["OPIS"][a:b], ev.cases["case_id"][a:b], config.bootstrap, config.seed,
                               config.ci_level)
        if ci is not None:
            out[t] = ci
    return out


def _official_case_records(ev: FrameEvidence) -> list[dict]:
    """Case records of the authors' aggregation; the flag says when Structure had no candidate."""
    off = ev.official
    records = []
    for k, row in enumerate(_records({c: ev.cases[c].tolist() for c in ("model", "case_id", "domain", "subcategory")})):
        s = off["S"][k]
        records.append({**row, "P": float(off["P"][k]) * 100, "I": float(off["I"][k]) * 100,
                        "S": None if np.isnan(s) else float(s) * 100, "C_S": None, "OPIS": float(off["OPIS"][k]),
                        "flags": ["no_structure_candidates"] if np.isnan(s) else []})
    return records


_DIAG = ("P", "I", "S", "C_S", "fail_I")


def _density_levels(ev: FrameEvidence, lv, comp: dict, rules, config: ScoreConfig) -> dict:
    """Per model, the components over the cases of each reference-density bin."""
    dbin = _density_bin(ev.cases["n_reference"], config.density_edges)
    density = {}
    for b, name in enumerate(_bin_names(config.density_edges, "density")):
        mask = dbin == b
        lvl = _component_levels(lv, comp, _DIAG, mask)["top"]
        lvl["OPIS"] = combine(lvl["P"], lvl["I"], lvl["S"], rules.weights)[0]
        lvl["n_cases"] = np.bincount(lv.model_code[mask], minlength=lv.hierarchy.n_top)
        density[name] = lvl
    return density


def _temporal_levels(ev: FrameEvidence, lv, rules, config: ScoreConfig) -> dict:
    """Per model, the components over the frames of each time interval (cases regrouped by interval)."""
    tbin = _temporal_bin(ev, config)
    n_int = len(config.temporal_edges) - 1
    key = np.where(tbin >= 0, ev.case * n_int + tbin, -1)
    tcomp = accumulate(ev, rules, key, ev.n_cases * n_int)
    temporal = {}
    for b, name in enumerate(_bin_names(config.temporal_edges, "temporal")):
        sel = {n: tcomp[n][b::n_int] for n in _DIAG}
        lvl = _component_levels(lv, sel, _DIAG)["top"]
        lvl["OPIS"] = combine(lvl["P"], lvl["I"], lvl["S"], rules.weights)[0]
        lvl["n_cases"] = np.bincount(lv.model_code, weights=(tcomp["n_frames"][b::n_int] > 0).astype(float),
                                     minlength=lv.hierarchy.n_top)
        temporal[name] = lvl
    return temporal


def _model_json(t: int, lv, main: dict, opis: dict, ci, cov: dict, diags: dict, variants: dict) -> dict:
    pct = 100.0
    h, labels = lv.hierarchy, lv.labels
    doms = np.flatnonzero(h.top_of_dom == t)
    subs = np.flatnonzero(np.isin(h.dom_of_sub, doms))
    return {
        **{c: _json_num(main["top"][c][t], pct) for c in ("P", "I", "S", "C_S")},
        "OPIS": _json_num(opis["top"][t]),
        "OPIS_ci": None if ci is None or np.isnan(ci[t]).any() else [float(ci[t, 0]), float(ci[t, 1])],
        "n_cases": int(lv.case_slices[t][1] - lv.case_slices[t][0]),
        "domains": {
            labels["domain"][d]: {**{c: _json_num(main["domain"][c][d], pct) for c in ("P", "I", "S", "C_S")},
                                  "OPIS": _json_num(opis["domain"][d])}
            for d in doms
        },
        "subcategories": {
            labels["subcategory"][s]: {**{c: _json_num(main["subcategory"][c][s], pct) for c in ("P", "I", "S", "C_S")},
                                       "OPIS": _json_num(opis["subcategory"][s]),
                                       "domain": labels["domain"][h.dom_of_sub[s]]}
            for s in subs
        },
        "coverage": {**{c: _json_num(cov[c][t], pct) for c in ("C_P", "C_I", "static", "dynamic", "unknown")},
                     "no_s": int(cov["no_s"][t])},
        "density": {name: _diag_json(lvl, t) for name, lvl in diags["density"].items()},
        "temporal": {name: _diag_json(lvl, t) for name, lvl in diags["temporal"].items()},
        "variants": {v: _json_num(variants[v][t]) for v in ALL_VARIANTS},
    }  # fmt: skip


def _case_records(ev: FrameEvidence, comp: dict) -> list[dict]:
    pct = 100.0
    cases = ev.cases
    case_table = {
        "model": cases["model"].tolist(), "case_id": cases["case_id"].tolist(), "domain": cases["domain"].tolist(),
        "subcategory": cases["subcategory"].tolist(), "P": _nums(comp["P"] * pct), "I": _nums(comp["I"] * pct),
        "S": _nums(comp["S"] * pct), "C_S": _nums(comp["C_S"] * pct), "OPIS": _nums(comp["OPIS"]),
    }  # fmt: skip
    records = _records(case_table)
    for rec, fl in zip(records, case_flags(comp)):
        rec["flags"] = fl
    return records


def _nums(x: np.ndarray) -> list:
    """Python floats, None for NaN (undefined)."""
    return [None if math.isnan(v) else v for v in x.tolist()]


def _records(columns: dict[str, list]) -> list[dict]:
    """Column lists -> one dict per row, keys in the columns' order."""
    names = list(columns)
    return [dict(zip(names, row)) for row in zip(*columns.values())]


def _diag_json(lvl: dict, t: int) -> dict:
    out = {}
    for k, arr in lvl.items():
        if k == "n_cases":
            out[k] = int(arr[t])
        elif k == "OPIS":
            out[k] = _json_num(arr[t])
        else:
            out[k] = _json_num(arr[t], 100.0)
    return out


# ----------------------------------------------------------------------------- entry points


def score_frame(df: "pd.DataFrame | ArchiveColumns", config: ScoreConfig = ScoreConfig()) -> dict:
    """Score an in-memory archive DataFrame; returns the SPEC section 3 JSON object."""
    return summarize(frame_evidence(df, config), config)


def score_runs(paths: str | Path | Sequence[str | Path], config: ScoreConfig = ScoreConfig()) -> dict:
    """Read (and validate) run folders / Parquet files and score them together.

    Raises `worldeval.opis.archive.ArchiveError` for a bad archive.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    cols, keys = read_archive_columns(paths, validate=config.validate)
    result = summarize(frame_evidence(cols, replace(config, validate=False), keys=keys), config)
    result["runs"] = [str(p) for p in paths]
    return result
