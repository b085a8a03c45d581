"""`opis compare`: two OPIS runs of the same videos, object-frame by object-frame.

Typical pairs: worldeval's classical backend against the hf backend, or worldeval against the
OPIS authors' evaluator imported with `opis import-run`. Both archives are read (and validated),
their reference-instance rows joined on (case_id, frame, instance_id) for one model of each run,
and compared on the decisions scoring reads (SPEC section 3):

* state of an object-frame: matched / missing (expected_visible, unmatched) / unknown
  (incl. ambiguous) / not_visible (occluded, out_of_view, too_small);
* extras: whether a frame holds at least one confirmed extra, over frames present in both runs;
* identity: pass = a >= tau_I, on rows matched in both runs with appearance in both;
* structure: pass = s >= tau_S, on rows with structure in both runs;
* per-case P, I, S, OPIS of each run (`score_runs`, bootstrap off) and their difference B - A.

Rows of "excluded" instances never count in scoring, so they are left out of the overall and
per-case agreement too; `by_track["excluded"]` still reports them, and decisions.csv lists every
joined row. Rows present in one run only are counted (top level and per case, with the instances
involved), never dropped silently.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd

from worldeval.opis.archive import read_archive
from worldeval.opis.labels import ARCHIVE_TRACKS, EXCLUDED, Visibility
from worldeval.opis.scoring import TAU_I, TAU_S, ScoreConfig, score_runs
from worldeval.runs import atomic_write_json, atomic_write_text

STATES = ("matched", "missing", "unknown", "not_visible")
PASS_FAIL = ("pass", "fail")
EXTRA_LABELS = ("extra", "none")
SCORE_KEYS = ("P", "I", "S", "OPIS")
JOIN_KEY = ["case_id", "frame", "instance_id"]
CSV_FIELDS = ("case_id", "frame", "instance_id", "track", "state_a", "state_b",
              "appearance_a", "appearance_b", "structure_a", "structure_b")


class CompareError(ValueError):
    """Two runs that cannot be compared: no such model, no model to pair, or no shared case."""


# ----------------------------------------------------------------------------- entry points


def compare_runs(run_a, run_b, *, model_a=None, model_b=None, variant="strict", tau_I=TAU_I, tau_S=TAU_S) -> dict:
    """The comparison JSON object (see the module docstring); raises ArchiveError or CompareError."""
    return compare_runs_detailed(run_a, run_b, model_a=model_a, model_b=model_b, variant=variant,
                                 tau_I=tau_I, tau_S=tau_S)[0]


def compare_runs_detailed(run_a, run_b, *, model_a=None, model_b=None, variant="strict", tau_I=TAU_I,
                          tau_S=TAU_S) -> tuple[dict, pd.DataFrame]:
    """`compare_runs` plus the joined object-frames (the rows of decisions.csv)."""
    # Built first so an unknown variant or threshold fails before any archive is read. The
    # archives are validated by read_archive below, so scoring need not validate them again.
    config = ScoreConfig(variant=variant, bootstrap=0, tau_I=tau_I, tau_S=tau_S, validate=False)
    df_a, df_b = read_archive(run_a), read_archive(run_b)
    ma, mb = pair_models(_models(df_a), _models(df_b), model_a, model_b)
    a, b = _model_rows(df_a, ma), _model_rows(df_b, mb)
    cases = _check_cases(a, b, f"{run_a} (model {ma!r})", f"{run_b} (model {mb!r})")
    joined, only_a, only_b = join_rows(a, b, tau_I, tau_S)
    extras = join_frames(a, b)
    scores_a, model_a_scores = _run_scores(run_a, ma, config)
    scores_b, model_b_scores = _run_scores(run_b, mb, config)
    result = {
        "a": str(run_a), "b": str(run_b), "models": [ma, mb], "variant": variant, "tau_I": tau_I, "tau_S": tau_S,
        "overall": _overall(joined, only_a, only_b, extras, a, b),
        "by_track": _by_track(joined, only_a, only_b),
        "cases": _cases(cases, joined, only_a, only_b, extras, a, b, scores_a, scores_b),
        "only_in_a": len(only_a), "only_in_b": len(only_b),
    }  # fmt: skip
    result["overall"]["scores"] = _score_pair(model_a_scores, model_b_scores)
    return result, decisions_frame(joined)


def write_outputs(out_dir: str | Path, result: dict, joined: pd.DataFrame) -> tuple[Path, Path]:
    """OUT/compare.json and OUT/decisions.csv (one line per joined object-frame)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    joined.to_csv(buf, index=False, columns=list(CSV_FIELDS), lineterminator="\n")
    return atomic_write_json(out / "compare.json", result), atomic_write_text(out / "decisions.csv", buf.getvalue())


# ----------------------------------------------------------------------------- reading


def _models(df: pd.DataFrame) -> list[str]:
    return sorted({str(m) for m in pd.unique(df["model"])})


def pair_models(models_a: list[str], models_b: list[str], model_a: str | None, model_b: str | None) -> tuple[str, str]:
    """Which model of run A to compare with which of run B.

    Explicit names win; a run holding one model offers that one (names may differ between
    evaluators); otherwise the same name on both sides.
    """
    for side, given, models in (("A", model_a, models_a), ("B", model_b, models_b)):
        if not models:
            raise CompareError(f"run {side} holds no measurements")
        if given is not None and given not in models:
            raise CompareError(f"run {side} holds no model {given!r} (it holds: {', '.join(models)})")
    ma = model_a if model_a is not None else (models_a[0] if len(models_a) == 1 else None)
    mb = model_b if model_b is not None else (models_b[0] if len(models_b) == 1 else None)
    if ma is None and mb is None:
        common = sorted(set(models_a) & set(models_b))
        if len(common) != 1:
            raise CompareError(f"cannot pair models (A: {', '.join(models_a)}; B: {', '.join(models_b)}); "
                               "choose them with --model-a/--model-b")
        return common[0], common[0]
    if ma is None or mb is None:
        name, other, side = (mb, models_a, "A") if ma is None else (ma, models_b, "B")
        if name not in other:
            raise CompareError(f"run {side} holds no model {name!r} (it holds: {', '.join(other)}); "
                               "choose it with --model-a/--model-b")
        return name, name
    return ma, mb


def _model_rows(df: pd.DataFrame, model: str) -> pd.DataFrame:
    """The model's rows with plain string keys and the state code of each reference row."""
    sel = df[(df["model"] == model).to_numpy()]
    vis = sel["visibility"].astype(object).to_numpy()
    matched = sel["matched"].to_numpy(dtype=bool)
    # A match implies expected_visible and ambiguous rows carry unknown (archive rules), so
    # the order of these tests only matters for rows the validator already rejected.
    state = np.select([matched, vis == Visibility.EXPECTED, vis == Visibility.UNKNOWN], [0, 1, 2], 3)
    return pd.DataFrame({
        "case_id": sel["case_id"].astype(str).to_numpy(),
        "frame": sel["frame"].to_numpy(dtype=np.int64),
        "instance_id": sel["instance_id"].astype(object).to_numpy(),
        "track": sel["track"].astype(object).to_numpy(),
        "state": state,
        "extra": sel["extra"].to_numpy(dtype=bool),
        "appearance": sel["appearance"].to_numpy(dtype=float, na_value=np.nan),
        "structure": sel["structure"].to_numpy(dtype=float, na_value=np.nan),
    })  # fmt: skip


def _check_cases(a: pd.DataFrame, b: pd.DataFrame, name_a: str, name_b: str) -> list[str]:
    """All case ids of either run, sorted; CompareError when the runs share none."""
    ca, cb = set(a["case_id"]), set(b["case_id"])
    if not ca & cb:
        raise CompareError(f"{name_a} and {name_b} share no case")
    return sorted(ca | cb)


# ----------------------------------------------------------------------------- joining


def join_rows(a: pd.DataFrame, b: pd.DataFrame, tau_I: float, tau_S: float):
    """(joined object-frames with their comparison columns, rows only in A, rows only in B)."""
    cols = JOIN_KEY + ["track", "state", "appearance", "structure"]
    ra, rb = a.loc[~a["extra"], cols], b.loc[~b["extra"], cols]
    m = ra.merge(rb, on=JOIN_KEY, how="outer", suffixes=("_a", "_b"), indicator=True, sort=True)
    side = m.pop("_merge").to_numpy()
    only_a = m.loc[side == "left_only", JOIN_KEY + ["track_a"]].rename(columns={"track_a": "track"})
    only_b = m.loc[side == "right_only", JOIN_KEY + ["track_b"]].rename(columns={"track_b": "track"})
    j = m[side == "both"].reset_index(drop=True)
    j["state_a"], j["state_b"] = j["state_a"].astype(np.int64), j["state_b"].astype(np.int64)
    # Tracks come from the case inventory, so both runs should agree; A's labels the row and
    # overall["track_mismatch"] counts the rows where B's differs.
    j["track"] = j["track_a"]
    j["scored"] = (j["track"] != EXCLUDED).to_numpy()
    j["id_ok"] = (j["state_a"] == 0) & (j["state_b"] == 0) & j["appearance_a"].notna() & j["appearance_b"].notna()
    j["str_ok"] = j["structure_a"].notna() & j["structure_b"].notna()
    for r in ("a", "b"):
        j[f"id_{r}"] = _fail_code(j[f"appearance_{r}"], tau_I)
        j[f"str_{r}"] = _fail_code(j[f"structure_{r}"], tau_S)
    return j, only_a.reset_index(drop=True), only_b.reset_index(drop=True)


def _fail_code(values: pd.Series, tau: float) -> np.ndarray:
    """PASS_FAIL codes: 0 = pass (value >= tau), 1 = fail; NaN reads as fail but is masked by *_ok."""
    return (~(values.to_numpy() >= tau)).astype(np.int64)


def join_frames(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Frames present in both runs with their number of extra rows in each (0/1 codes: extra/none)."""
    fa = a.groupby(["case_id", "frame"], sort=True)["extra"].sum().rename("extras_a")
    fb = b.groupby(["case_id", "frame"], sort=True)["extra"].sum().rename("extras_b")
    f = pd.concat([fa, fb], axis=1, join="inner").reset_index()
    f["code_a"], f["code_b"] = (f["extras_a"] == 0).astype(np.int64), (f["extras_b"] == 0).astype(np.int64)
    return f


def decisions_frame(j: pd.DataFrame) -> pd.DataFrame:
    labels = np.asarray(STATES, dtype=object)
    out = j[JOIN_KEY + ["track", "appearance_a", "appearance_b", "structure_a", "structure_b"]].copy()
    out["state_a"], out["state_b"] = labels[j["state_a"].to_numpy()], labels[j["state_b"].to_numpy()]
    return out[list(CSV_FIELDS)]


# ----------------------------------------------------------------------------- agreement


def _confusion(g: np.ndarray, a: np.ndarray, b: np.ndarray, n_groups: int, n_labels: int) -> np.ndarray:
    """(groups, labels of A, labels of B) counts."""
    flat = (g.astype(np.int64) * n_labels + a) * n_labels + b
    return np.bincount(flat, minlength=n_groups * n_labels * n_labels).reshape(n_groups, n_labels, n_labels)


def _agreement(conf: np.ndarray, labels) -> dict:
    n, agreeing = int(conf.sum()), int(np.trace(conf))
    return {"n": n, "agreeing": agreeing, "agreement": round(100.0 * agreeing / n, 1) if n else None,
            "confusion": {la: {lb: int(conf[i, k]) for k, lb in enumerate(labels)} for i, la in enumerate(labels)}}


def _pass_fail(j: pd.DataFrame, g: np.ndarray, n: int, ok: str, a: str, b: str, value: str) -> list[dict]:
    """Per group: agreement of a pass/fail decision, its confusion and the mean |value_A - value_B|."""
    m = j[ok].to_numpy(dtype=bool)
    conf = _confusion(g[m], j[a].to_numpy()[m], j[b].to_numpy()[m], n, 2)
    diff = np.abs(j[f"{value}_a"].to_numpy() - j[f"{value}_b"].to_numpy())
    total = np.bincount(g[m], weights=diff[m], minlength=n)
    out = []
    for k in range(n):
        block = _agreement(conf[k], PASS_FAIL)
        block["mean_abs_diff"] = float(total[k] / block["n"]) if block["n"] else None
        out.append(block)
    return out


def _row_blocks(j: pd.DataFrame, g: np.ndarray, n: int) -> list[dict]:
    """Per group of joined rows: joined count and the state, identity and structure blocks."""
    conf = _confusion(g, j["state_a"].to_numpy(), j["state_b"].to_numpy(), n, len(STATES))
    ident = _pass_fail(j, g, n, "id_ok", "id_a", "id_b", "appearance")
    struct = _pass_fail(j, g, n, "str_ok", "str_a", "str_b", "structure")
    return [{"joined": int(conf[k].sum()), "state": _agreement(conf[k], STATES), "identity": ident[k],
             "structure": struct[k]} for k in range(n)]


def _extra_blocks(f: pd.DataFrame, g: np.ndarray, n: int) -> list[dict]:
    conf = _confusion(g, f["code_a"].to_numpy(), f["code_b"].to_numpy(), n, 2)
    ea = np.bincount(g, weights=f["extras_a"].to_numpy(dtype=float), minlength=n)
    eb = np.bincount(g, weights=f["extras_b"].to_numpy(dtype=float), minlength=n)
    return [{**_agreement(conf[k], EXTRA_LABELS),
             "frames_with_extra_a": int(conf[k][0].sum()), "frames_with_extra_b": int(conf[k][:, 0].sum()),
             "extras_a": int(ea[k]), "extras_b": int(eb[k])} for k in range(n)]  # fmt: skip


def _codes(values, labels: list[str]) -> np.ndarray:
    return pd.Categorical(np.asarray(values, dtype=object), categories=labels).codes.astype(np.int64)


def _count(values, labels: list[str]) -> np.ndarray:
    return np.bincount(_codes(values, labels), minlength=len(labels))


# ----------------------------------------------------------------------------- grouping


def _overall(j, only_a, only_b, frames, a, b) -> dict:
    s = j[j["scored"].to_numpy()]
    ca, cb = set(a["case_id"]), set(b["case_id"])
    out = {"cases_shared": len(ca & cb), "cases_only_in_a": len(ca - cb), "cases_only_in_b": len(cb - ca),
           "only_in_a": len(only_a), "only_in_b": len(only_b), "excluded_rows": int((~j["scored"]).sum()),
           "track_mismatch": int((j["track_a"] != j["track_b"]).sum())}
    out.update(_row_blocks(s, np.zeros(len(s), np.int64), 1)[0])
    out["extras"] = _extra_blocks(frames, np.zeros(len(frames), np.int64), 1)[0]
    return out


def _by_track(j, only_a, only_b) -> dict:
    tracks = list(ARCHIVE_TRACKS)
    blocks = _row_blocks(j, _codes(j["track"], tracks), len(tracks))
    na, nb = _count(only_a["track"], tracks), _count(only_b["track"], tracks)
    return {t: {**blocks[k], "only_in_a": int(na[k]), "only_in_b": int(nb[k])} for k, t in enumerate(tracks)}


def _only_lists(only: pd.DataFrame, cases: list[str]) -> list[list[str]]:
    inst = only.groupby("case_id")["instance_id"].unique()
    return [sorted(map(str, inst[c])) if c in inst.index else [] for c in cases]


def _cases(cases, j, only_a, only_b, frames, a, b, scores_a, scores_b) -> list[dict]:
    s = j[j["scored"].to_numpy()]
    n = len(cases)
    rows = _row_blocks(s, _codes(s["case_id"], cases), n)
    extras = _extra_blocks(frames, _codes(frames["case_id"], cases), n)
    excluded = _count(j.loc[~j["scored"], "case_id"], cases)
    na, nb = _count(only_a["case_id"], cases), _count(only_b["case_id"], cases)
    la, lb = _only_lists(only_a, cases), _only_lists(only_b, cases)
    ca, cb = set(a["case_id"]), set(b["case_id"])
    return [{"case_id": c, "in_a": c in ca, "in_b": c in cb, **rows[k], "extras": extras[k],
             "excluded_rows": int(excluded[k]), "only_in_a": int(na[k]), "only_in_b": int(nb[k]),
             "only_in_a_instances": la[k], "only_in_b_instances": lb[k],
             "scores": _score_pair(scores_a.get(c), scores_b.get(c))} for k, c in enumerate(cases)]  # fmt: skip


# ----------------------------------------------------------------------------- scores


def _run_scores(run, model: str, config: ScoreConfig) -> tuple[dict[str, dict], dict]:
    """Per-case {P, I, S, OPIS} of the model (by case id) and its model-level scores (0-100)."""
    res = score_runs(run, config)
    cases = {c["case_id"]: {k: c.get(k) for k in SCORE_KEYS} for c in res["cases"] if c["model"] == model}
    m = res["models"].get(model, {})
    return cases, {**{k: m.get(k) for k in SCORE_KEYS}, "n_cases": m.get("n_cases")}


def _score_pair(a: dict | None, b: dict | None) -> dict:
    diff = {k: (b[k] - a[k] if a and b and a.get(k) is not None and b.get(k) is not None else None)
            for k in SCORE_KEYS}
    return {"a": a, "b": b, "diff": diff}
