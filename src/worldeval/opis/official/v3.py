"""The OPIS authors' v3 aggregation (`--variant official-v3`), on any measurement archive.

Their evaluator (contract `3.11-strict-frame-presence-provisional`) scores a case differently from
the paper; this module re-implements its rules from the archive's rows so worldeval's measurements
and theirs (imported with `opis import-run`) can be put side by side. Per case:

- Presence: a row is present when it is matched (an ambiguous match stays matched) and missing when
  it is expected_visible and unmatched; other rows have no presence. A frame's extras count only when
  every reference row of the frame is decided (present, missing, occluded or out of view). A frame
  scores 0 when a reference is missing or a counted extra shows, else 1; frames with neither presence
  nor a counted extra are skipped. P = mean over scored frames, 0 when none.
- Identity: no tau_I gate. Each instance's mean appearance over its present rows, then the mean over
  instances; 0 when no present row has an appearance.
- Structure: no tau_S gate and no coverage factor. Every instance on the static or dynamic track is a
  candidate; its score is (sum of its structure values + 1) / (number of values + 2) (a Beta prior of
  mean 0.5 and strength 2, so a candidate never measured counts 0.5); S is the mean over candidates,
  undefined without candidates.
- Headline: 100 P^wP I^wI S^wS (a weighted product: one zero component zeroes it); without S,
  100 P^0.2 I^0.8.
- Excluded and unlabeled instances take part in Presence and Identity, as in their code.

Across cases: the case -> subcategory -> domain -> overall mean of case headlines; the interval is
their flat case bootstrap (10,000 draws of the case headlines with replacement, seed 0, sorted by case
id, percentile interval) and belongs to the flat case mean, reported beside it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from worldeval.opis.archive import ArchiveColumns, ArchiveKeys, dense_ids, group_counts
from worldeval.stats import Hierarchy

if TYPE_CHECKING:
    import pandas as pd  # scoring reads archives as `ArchiveColumns`, without pandas

VARIANT = "official-v3"
CONTRACT = "3.11-strict-frame-presence-provisional"
PRIOR_MEAN = 0.5
PRIOR_STRENGTH = 2.0
# Their fallback when a case has no Structure candidate: Presence and Identity only.
FALLBACK_WEIGHTS = (0.2, 0.8)
BOOTSTRAP = 10_000
# Visibility states that decide a row without a match (their outside_view and occluded).
DECIDED_UNSEEN = ("out_of_view", "occluded")
STRUCTURE_TRACKS = ("static", "dynamic")


def _is(cols: ArchiveColumns, name: str, labels) -> np.ndarray:
    codes, names = cols.codes(name)
    out = np.zeros(cols.n_rows, dtype=bool)
    for hit in np.flatnonzero(np.isin(np.asarray(names, dtype=object), list(labels))):
        out |= codes == hit  # a comparison per label is cheaper than a lookup per row
    return out


def _mean_by(key: np.ndarray, mask: np.ndarray, values: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(mean, count) of values[mask] grouped by key; NaN where a group has no member."""
    k = key[mask]
    cnt = np.bincount(k, minlength=n)
    return _mean_of(cnt, np.bincount(k, weights=values[mask], minlength=n)), cnt.astype(float)


def _total_by(key: np.ndarray, mask: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Sum of values[mask] per key: zeros in place of the other rows add nothing (the same sums, bit
    for bit, as over the gathered rows)."""
    return np.bincount(key, weights=np.where(mask, values, 0.0), minlength=n)


def _mean_of(count: np.ndarray, total: np.ndarray) -> np.ndarray:
    """total / count; NaN where the count is 0."""
    cnt = count.astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(cnt > 0, total / np.where(cnt > 0, cnt, 1), np.nan)


def presence(cols: ArchiveColumns, fkey: np.ndarray, n_frames: int, frame_case: np.ndarray, n_cases: int) -> np.ndarray:
    """Case Presence under their strict frame rule (0 for a case without a scored frame)."""
    extra = cols.bools("extra")
    present = ~extra & (cols.bools("matched") | cols.bools("ambiguous"))
    missing = ~extra & _is(cols, "visibility", ("expected_visible",)) & ~present
    unseen = ~extra & ~present & _is(cols, "visibility", DECIDED_UNSEEN)
    # One pass: each row's kind (0 undecided reference, 1 present, 2 missing, 3 occluded or out of
    # view, 4 extra) counted per frame.
    u8 = np.uint8  # small integers: a kind per row in one byte, not eight
    kind = present.astype(u8) + missing * u8(2) + unseen * u8(3) + extra * u8(4)
    counts = np.bincount(fkey * 5 + kind, minlength=n_frames * 5).reshape(n_frames, 5)
    n_ref, n_defined = counts[:, :4].sum(1), counts[:, 1] + counts[:, 2]
    counted_extra = (n_ref > 0) & (counts[:, 0] == 0) & (counts[:, 4] > 0)
    scored = (n_defined > 0) | counted_extra
    value = ((n_defined > 0) & (counts[:, 2] == 0) & ~counted_extra).astype(float)
    p, _ = _mean_by(frame_case, scored, value, n_cases)
    return np.nan_to_num(p, nan=0.0)


def _instance_key(cols: ArchiveColumns, row_case: np.ndarray) -> tuple[np.ndarray, int, np.ndarray]:
    """A dense id per (case, instance) for every row, and the case of each id."""
    icode, _ = cols.codes("instance_id")
    width = int(icode.max()) + 2
    ikey, n_inst = dense_ids(row_case.astype(np.int64) * width + (icode + 1))
    inst_case = np.zeros(n_inst, dtype=np.int64)
    inst_case[ikey] = row_case
    return ikey, n_inst, inst_case


def identity_and_structure(cols: ArchiveColumns, row_case: np.ndarray, n_cases: int) -> tuple[np.ndarray, np.ndarray]:
    """Case Identity (instance macro of present rows' appearance) and Structure (instance macro of the
    Beta-shrunk structure of candidates; NaN without candidates)."""
    ref = ~cols.bools("extra")
    present = ref & (cols.bools("matched") | cols.bools("ambiguous"))
    app = cols.floats("appearance")
    strv = cols.floats("structure")
    ikey, n_inst, inst_case = _instance_key(cols, row_case)
    with_app = present & ~np.isnan(app)
    candidate = ref & _is(cols, "track", STRUCTURE_TRACKS)
    measured = candidate & ~np.isnan(strv)
    n_app, n_cand, n = group_counts(ikey, n_inst, [with_app, candidate, measured])

    inst_app = _mean_of(n_app, _total_by(ikey, with_app, app, n_inst))
    has_app = ~np.isnan(inst_app)
    I, _ = _mean_by(inst_case, has_app, np.nan_to_num(inst_app), n_cases)

    is_cand = n_cand > 0
    total = _total_by(ikey, measured, strv, n_inst)
    shrunk = (total + PRIOR_MEAN * PRIOR_STRENGTH) / (n + PRIOR_STRENGTH)
    S, _ = _mean_by(inst_case, is_cand, shrunk, n_cases)
    return np.nan_to_num(I, nan=0.0), S


def headline(P: np.ndarray, I: np.ndarray, S: np.ndarray, weights) -> np.ndarray:
    """100 P^wP I^wI S^wS; 100 P^0.2 I^0.8 where S is undefined."""
    P, I = np.clip(P, 0.0, 1.0), np.clip(I, 0.0, 1.0)
    wP, wI, wS = weights
    full = np.power(P, wP) * np.power(I, wI) * np.power(np.clip(np.nan_to_num(S), 0.0, 1.0), wS)
    fallback = np.power(P, FALLBACK_WEIGHTS[0]) * np.power(I, FALLBACK_WEIGHTS[1])
    return 100.0 * np.where(np.isnan(S), fallback, full)


def case_scores(df: "pd.DataFrame | ArchiveColumns", keys: ArchiveKeys, frame_case: np.ndarray, n_cases: int,
                weights) -> dict:
    """Per case (in `frame_case`'s case order): P, I, S as fractions (S NaN without candidates) and OPIS."""
    cols = ArchiveColumns.of(df)
    row_case = frame_case[keys.frame]
    P = presence(cols, keys.frame, keys.n_frames, frame_case, n_cases)
    I, S = identity_and_structure(cols, row_case, n_cases)
    return {"P": P, "I": I, "S": S, "OPIS": headline(P, I, S, weights)}


def flat_bootstrap(values: np.ndarray, case_ids, replicates: int, seed: int, level: float) -> list[float] | None:
    """Their case bootstrap: draws of the flat mean of case headlines (sorted by case id), percentile interval."""
    v = np.asarray(values, dtype=float)
    keep = ~np.isnan(v)
    order = np.argsort(np.asarray(case_ids, dtype=str)[keep], kind="stable")
    v = v[keep][order]
    if replicates <= 0 or len(v) == 0:
        return None
    rng = np.random.default_rng(seed)
    # One draw after another, as theirs does, so the same seed gives their interval.
    draws = np.array([rng.choice(v, len(v), replace=True).mean() for _ in range(replicates)])
    lo, hi = np.quantile(draws, [(1 - level) / 2, 1 - (1 - level) / 2])
    return [float(lo), float(hi)]


def hierarchy_means(cases: "pd.DataFrame | dict[str, np.ndarray]", comp: dict) -> tuple[Hierarchy, dict, dict]:
    """Case -> subcategory -> domain -> model means of P, I, S and the case headlines."""
    h, labels = Hierarchy.from_labels(cases["model"], cases["domain"], cases["subcategory"])
    values = np.stack([comp["P"], comp["I"], comp["S"], comp["OPIS"] / 100.0], axis=1)
    m = h.means(values)
    names = ("P", "I", "S", "OPIS")
    return h, labels, {lvl: {n: arr[0, :, i] for i, n in enumerate(names)} for lvl, arr in m.items()}
