"""WorldCast scores from `judgments.jsonl` (SPEC section 5).

Per case: TC and Final by the one formula in `metrics.py`
(TC = (1 - w_o) * PA/2 + w_o * OC, OC only when w_o > 0;
Final = (100/3) * (0.4 * 3*TC + 0.4 * CP + 0.2 * VC)).
Per model: means over cases of Final, TC*100, CP*100/3, VC*100/3, per category,
L3, L4 (Final means over the cases of that level) and per-step accuracy.

A metric whose judgment failed (or is missing) is left out: the dimension
means use the cases where that dimension is known, Final and the category and
level means use the cases where every needed metric is known, and the case
counts in `n_failed`. A failure is never a 0.

The terminal tables are `tables.py`; checks of the judge itself (human agreement,
judge swap, repeats) are the analysis room's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from worldeval.stats import CI_LEVEL, model_rng, percentile_interval, stratified_counts
from worldeval.worldcast.inputs.cases import CATEGORY_LEVEL, CATEGORY_ORDER
from worldeval.worldcast.judging.metrics import CASE_METRICS, DIMENSIONS, METRICS, final_score, task_completion
from worldeval.worldcast.judging.records import JUDGMENTS, latest_records, read_judgments


@dataclass
class CaseScore:
    case_id: str
    category: str
    level: str
    outcome_weight: float
    scores: dict[str, int] = field(default_factory=dict)  # metric key -> score, only the metrics judged ok
    failed_metrics: list[str] = field(default_factory=list)

    @property
    def pa(self) -> int | None:
        return self.scores.get("PA")

    @property
    def oc(self) -> int | None:
        return self.scores.get("OC")

    @property
    def cp(self) -> int | None:
        return self.scores.get("CP")

    @property
    def vc(self) -> int | None:
        return self.scores.get("VC")

    @property
    def tc(self) -> float | None:
        return task_completion(self.pa, self.oc, self.outcome_weight)

    def dimension(self, key: str) -> float | None:
        return self.tc if key == "TC" else self.scores.get(key)

    @property
    def final(self) -> float | None:
        return final_score(self.tc, self.cp, self.vc)

    @property
    def failed(self) -> bool:
        return self.final is None


def load_run_records(run_dirs: list[str | Path]) -> dict[str, list[dict]]:
    """Latest record per item, grouped by model. A model judged in two folders is kept apart as model@folder."""
    by_model: dict[str, list[dict]] = {}
    owner: dict[str, str] = {}
    for d in run_dirs:
        d = Path(d)
        path = d / JUDGMENTS
        if not path.is_file():
            raise FileNotFoundError(f"{path}: not found (is {d} a WorldCast run folder?)")
        latest = latest_records(read_judgments(path))
        grouped: dict[str, list[dict]] = {}
        for rec in latest.values():
            grouped.setdefault(rec["model"], []).append(rec)
        for model, recs in grouped.items():
            name = model
            if model in owner and owner[model] != str(d):
                name = f"{model}@{d.name}"
            owner.setdefault(model, str(d))
            by_model[name] = recs
    return by_model


def case_scores(records: list[dict]) -> dict[str, CaseScore]:
    cases: dict[str, CaseScore] = {}
    for r in records:
        cid = r["case_id"]
        cs = cases.get(cid)
        if cs is None:
            cs = cases[cid] = CaseScore(cid, r["category"], r.get("level") or CATEGORY_LEVEL[r["category"]],
                                        float(r.get("outcome_weight") or 0.0))
        m = r["metric"]
        if m not in CASE_METRICS:
            continue
        if r.get("status") == "ok" and r.get("score") is not None:
            cs.scores[m] = int(r["score"])
        else:
            cs.failed_metrics.append(m)
    return cases


def mean_or_none(xs: list[float]) -> float | None:
    """The mean, or None for no values: a mean over nothing is unknown, never 0."""
    return sum(xs) / len(xs) if xs else None


def summarize_model(records: list[dict], step_accuracy: bool = False) -> dict:
    cases = case_scores(records)
    vals = list(cases.values())
    dims = {k: [c.dimension(k) * 100 / d.top for c in vals if c.dimension(k) is not None] for k, d in DIMENSIONS.items()}
    finals = [c.final for c in vals if c.final is not None]
    cats = {}
    for cat in CATEGORY_ORDER:
        xs = [c.final for c in vals if c.category == cat and c.final is not None]
        if any(c.category == cat for c in vals):
            cats[cat] = mean_or_none(xs)
    out = {
        "final": mean_or_none(finals),
        **{k: mean_or_none(xs) for k, xs in dims.items()},
        "L3": mean_or_none([c.final for c in vals if c.level == "L3" and c.final is not None]),
        "L4": mean_or_none([c.final for c in vals if c.level == "L4" and c.final is not None]),
        "categories": cats,
        "n_cases": len(vals),
        "n_failed": sum(1 for c in vals if c.failed),
        "n_failed_items": sum(1 for r in records if r.get("status") != "ok"),
        "judge_models": sorted({r.get("judge_model") for r in records if r.get("judge_model")}),
        "prompt_hashes": {m: sorted({r["prompt_hash"] for r in records if r["metric"] == m and r.get("prompt_hash")})
                          for m in sorted({r["metric"] for r in records})},
    }
    if step_accuracy:
        out["step_accuracy"] = step_accuracy_curve(records)
        out["step_accuracy_scope"] = sorted({str(r.get("step_scope", "unrecorded")) for r in records
                                             if METRICS[r["metric"]].per_step})
    return out


def step_accuracy_curve(records: list[dict]) -> dict:
    """Per step index: accuracy in percent over the cases whose designated-step judgment succeeded."""
    per: dict[int, list[int]] = {}
    failed: dict[int, int] = {}
    for r in records:
        if not METRICS[r["metric"]].per_step or r.get("step") is None:
            continue
        k = int(r["step"])
        if r.get("status") == "ok" and r.get("score") is not None:
            per.setdefault(k, []).append(int(r["score"]))
        else:
            failed[k] = failed.get(k, 0) + 1
    steps = sorted(set(per) | set(failed))
    return {str(k): {"accuracy": (100.0 * sum(per[k]) / len(per[k])) if per.get(k) else None,
                     "n": len(per.get(k, [])), "n_failed": failed.get(k, 0)} for k in steps}


CI_KEYS = {"final": "final_ci", "TC": "TC_ci", "CP": "CP_ci", "VC": "VC_ci"}


def _case_matrix(cases: list[CaseScore]) -> np.ndarray:
    """N cases x (Final, TC, CP, VC) on the 0-100 scale; NaN where unknown (a failure is never a 0)."""
    rows = []
    for c in cases:
        dims = [c.dimension(k) * 100 / d.top if c.dimension(k) is not None else np.nan for k, d in DIMENSIONS.items()]
        rows.append([np.nan if c.final is None else c.final] + dims)
    return np.asarray(rows, dtype=float).reshape(len(cases), 1 + len(DIMENSIONS))


def bootstrap_cis(model: str, cases: list[CaseScore], replicates: int, seed: int = 0,
                  level: float = CI_LEVEL) -> dict[str, list[float] | None]:
    """Percentile CIs of Final, TC, CP, VC from a case bootstrap stratified by category.

    As for OPIS (`worldeval.stats`): each category resamples its own cases with replacement, every
    replicate recomputes the statistic exactly as reported (the mean over the cases where it is known),
    and each model draws from its own stream seeded by (seed, crc32(model)), so adding a model changes
    no other model's interval.
    """
    keys = ["final", *DIMENSIONS]
    if replicates <= 0 or not cases:
        return {CI_KEYS[k]: None for k in keys}
    values = _case_matrix(cases)
    defined = ~np.isnan(values)
    _, strata = np.unique(np.asarray([c.category for c in cases]), return_inverse=True)
    rng = model_rng(seed, model)
    w = stratified_counts(strata, replicates, rng)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = (w @ np.where(defined, values, 0.0)) / (w @ defined.astype(float))
    lohi = percentile_interval(means, level)
    out = {}
    for i, k in enumerate(keys):
        lo, hi = lohi[0, i], lohi[1, i]
        out[CI_KEYS[k]] = None if not defined[:, i].any() or np.isnan(lo) else [float(lo), float(hi)]
    return out


def rank_models(models: dict[str, dict]) -> None:
    """Add `rank`: 1 for the best Final, equal Finals share a rank (1, 1, 3); a model with no Final gets None."""
    scored = sorted((round(s["final"], 9), m) for m, s in models.items() if s.get("final") is not None)
    finals = [f for f, _ in scored]
    for m, s in models.items():
        f = s.get("final")
        s["rank"] = None if f is None else 1 + sum(1 for x in finals if x > round(f, 9))


def score_runs(run_dirs: list[str | Path], step_accuracy: bool = False, bootstrap: int = 0, seed: int = 0) -> dict:
    """The SPEC JSON, plus per model `rank` and (with `bootstrap` replicates) `final_ci`, `TC_ci`, `CP_ci`, `VC_ci`."""
    by_model = load_run_records(run_dirs)
    models = {}
    for m, recs in sorted(by_model.items()):
        models[m] = summarize_model(recs, step_accuracy)
        models[m].update(bootstrap_cis(m, list(case_scores(recs).values()), bootstrap, seed))
    rank_models(models)
    return {"models": models, "bootstrap": {"replicates": int(bootstrap), "seed": int(seed), "level": CI_LEVEL,
                                            "strata": "category"}}


def ordered_models(result: dict) -> tuple[list[str], list[str]]:
    """(ranked models best first, ties by name; models without a score, by name): the second are never ranked."""
    models = result["models"]
    ranked = sorted((m for m, s in models.items() if s.get("rank") is not None),
                    key=lambda m: (models[m]["rank"], m))
    return ranked, sorted(m for m, s in models.items() if s.get("rank") is None)
