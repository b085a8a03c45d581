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
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from worldeval.worldcast.cases import CATEGORY_LEVEL, L3_CATEGORIES, L4_CATEGORIES
from worldeval.worldcast.metrics import CASE_METRICS, DIMENSIONS, METRICS, final_score, task_completion
from worldeval.runs import read_jsonl
from worldeval.worldcast.records import JUDGMENTS, latest_records, read_judgments

CATEGORY_ORDER = L3_CATEGORIES + L4_CATEGORIES


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


def _mean(xs: list[float]) -> float | None:
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
            cats[cat] = _mean(xs)
    out = {
        "final": _mean(finals),
        **{k: _mean(xs) for k, xs in dims.items()},
        "L3": _mean([c.final for c in vals if c.level == "L3" and c.final is not None]),
        "L4": _mean([c.final for c in vals if c.level == "L4" and c.final is not None]),
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
                  level: float = 0.95) -> dict[str, list[float] | None]:
    """Percentile CIs of Final, TC, CP, VC from a case bootstrap stratified by category.

    As for OPIS (`worldeval.stats`): each category resamples its own cases with replacement, every
    replicate recomputes the statistic exactly as reported (the mean over the cases where it is known),
    and each model draws from its own stream seeded by (seed, crc32(model)), so adding a model changes
    no other model's interval.
    """
    from worldeval.stats import percentile_interval, stratified_counts

    keys = ["final", *DIMENSIONS]
    if replicates <= 0 or not cases:
        return {CI_KEYS[k]: None for k in keys}
    values = _case_matrix(cases)
    defined = ~np.isnan(values)
    _, strata = np.unique(np.asarray([c.category for c in cases]), return_inverse=True)
    rng = np.random.default_rng([int(seed), zlib.crc32(str(model).encode("utf-8"))])
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
    return {"models": models, "bootstrap": {"replicates": int(bootstrap), "seed": int(seed), "level": 0.95,
                                            "strata": "category"}}


def ordered_models(result: dict) -> tuple[list[str], list[str]]:
    """(ranked models best first, ties by name; models without a score, by name): the second are never ranked."""
    models = result["models"]
    ranked = sorted((m for m, s in models.items() if s.get("rank") is not None),
                    key=lambda m: (models[m]["rank"], m))
    return ranked, sorted(m for m, s in models.items() if s.get("rank") is None)


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _fmt_ci(ci) -> str:
    return "-" if not ci else f"{ci[0]:.1f}-{ci[1]:.1f}"


CATEGORY_SHORT = {
    "observation_conditioned_transitions": "ObsCond", "physical_simulation": "PhysSim",
    "adaptive_task_completion": "Adaptive", "visual_cues": "VisCues", "physical_properties": "PhysProp",
    "visual_goal_realization": "VisGoal", "logic_and_rules": "Logic", "in_context_procedural_learning": "InCtxProc",
}


def table_rows(result: dict) -> tuple[list[str], list[list[str]]]:
    """Rows like the paper's Table 1: L3 categories, L3, L4 categories, L4, overall, then TC/CP/VC."""
    header = (["#", "model"] + [CATEGORY_SHORT[c] for c in L3_CATEGORIES] + ["L3"]
              + [CATEGORY_SHORT[c] for c in L4_CATEGORIES] + ["L4", "Overall", "95% CI", "TC", "CP", "VC", "cases",
                                                              "failed"])
    rows = []
    ranked, unscored = ordered_models(result)
    for m in ranked + unscored:
        s = result["models"][m]
        cats = s["categories"]
        rank = "-" if s.get("rank") is None else str(s["rank"])
        rows.append([rank, m] + [_fmt(cats.get(c)) for c in L3_CATEGORIES] + [_fmt(s["L3"])]
                    + [_fmt(cats.get(c)) for c in L4_CATEGORIES]
                    + [_fmt(s["L4"]), _fmt(s["final"]), _fmt_ci(s.get("final_ci")), _fmt(s["TC"]), _fmt(s["CP"]),
                       _fmt(s["VC"]), str(s["n_cases"]), str(s["n_failed"])])
    return header, rows


# ---------------------------------------------------------------------------
# Validity tools (paper section 4.4 and Appendix E)

VOTE_DIMENSIONS = ("overall",) + tuple(DIMENSIONS)  # what a human vote may compare


def pearson(xs: list[float], ys: list[float]) -> float | None:
    """Pearson r; None when it is undefined (fewer than two points, or a constant list)."""
    if len(xs) < 2 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return None
    from scipy.stats import pearsonr

    return float(pearsonr(xs, ys).statistic)


def kendall_tau(a: list[float], b: list[float]) -> float | None:
    """Kendall tau-b between two score lists over the same models (ties handled); None when undefined."""
    if len(a) < 2:
        return None
    from scipy.stats import kendalltau

    tau = float(kendalltau(a, b).statistic)
    return None if math.isnan(tau) else tau


def _vote_value(cs: CaseScore | None, dim: str) -> float | None:
    if cs is None:
        return None
    return cs.final if dim == "overall" else cs.dimension(dim)


def _outcome(x: float | None, y: float | None) -> float | None:
    if x is None or y is None:
        return None
    return 1.0 if x > y else 0.0 if x < y else 0.5


def _human_value(v: object, model_a: str, model_b: str) -> float:
    s = str(v).strip()
    low = s.lower()
    # The letters first: a model may well be called "B".
    if low in ("a", "win"):
        return 1.0
    if low in ("b", "loss"):
        return 0.0
    if low in ("tie", "draw", "="):
        return 0.5
    if s == model_a:
        return 1.0
    if s == model_b:
        return 0.0
    raise ValueError(f"winner {v!r} is not 'a', 'b', 'tie' or one of the two model names")


def agreement(run_dirs: list[str | Path], votes_path: str | Path) -> dict:
    """Judge-versus-human pairwise win rates, their Pearson r per dimension and winner agreement.

    `votes_path`: JSONL, one human vote per line:
    {"case_id", "model_a", "model_b", "dimension": overall|TC|CP|VC, "winner": "a"|"b"|"tie", "annotator"?}.
    A win counts 1, a tie 0.5, a loss 0. Human win rates average every vote; the judge's win rates average the
    same (case, pair, dimension) comparisons, once each, decided by the judge's case scores. Winner agreement
    is measured on comparisons where more than half of the human votes name the same winner (a or b).
    """
    by_model = load_run_records(run_dirs)
    scores = {m: case_scores(recs) for m, recs in by_model.items()}
    votes = read_jsonl(votes_path)
    if not votes:
        raise ValueError(f"{votes_path}: no votes")
    human: dict[str, dict[str, list[float]]] = {d: {} for d in VOTE_DIMENSIONS}
    judge: dict[str, dict[str, list[float]]] = {d: {} for d in VOTE_DIMENSIONS}
    groups: dict[tuple, list[float]] = {}
    for n, v in enumerate(votes, start=1):
        try:
            cid, a, b, dim = v["case_id"], v["model_a"], v["model_b"], v.get("dimension", "overall")
            val = _human_value(v["winner"], a, b)
        except KeyError as exc:
            raise ValueError(f"{votes_path} vote {n}: missing field {exc}") from None
        except ValueError as exc:
            raise ValueError(f"{votes_path} vote {n} field 'winner': {exc}") from None
        if dim not in VOTE_DIMENSIONS:
            raise ValueError(f"{votes_path} vote {n} field 'dimension': {dim!r} not in {list(VOTE_DIMENSIONS)}")
        for m in (a, b):
            if m not in scores:
                raise ValueError(f"{votes_path} vote {n}: model {m!r} is not in the run folders ({sorted(scores)})")
        human[dim].setdefault(a, []).append(val)
        human[dim].setdefault(b, []).append(1 - val)
        groups.setdefault((cid, a, b, dim), []).append(val)
    agree = {d: [0, 0] for d in VOTE_DIMENSIONS}
    skipped = 0
    for (cid, a, b, dim), vals in groups.items():
        ca, cb = scores[a].get(cid), scores[b].get(cid)
        j = _outcome(_vote_value(ca, dim), _vote_value(cb, dim))
        if j is None:
            skipped += 1
            continue
        judge[dim].setdefault(a, []).append(j)
        judge[dim].setdefault(b, []).append(1 - j)
        for winner in (1.0, 0.0):
            if sum(1 for x in vals if x == winner) * 2 > len(vals):
                agree[dim][1] += 1
                agree[dim][0] += int(j == winner)
    out: dict = {"dimensions": {}, "n_votes": len(votes), "n_comparisons_without_judge_scores": skipped}
    for d in VOTE_DIMENSIONS:
        models = sorted(set(human[d]) & set(judge[d]))
        hw = {m: _mean(human[d][m]) for m in models}
        jw = {m: _mean(judge[d][m]) for m in models}
        out["dimensions"][d] = {
            "human_win_rate": hw,
            "judge_win_rate": jw,
            "pearson_r": pearson([hw[m] for m in models], [jw[m] for m in models]),
            "winner_agreement": (agree[d][0] / agree[d][1]) if agree[d][1] else None,
            "n_majority_comparisons": agree[d][1],
        }
    return out


def judge_swap(run_dirs: list[str | Path]) -> dict:
    """Model ranking under each judge model found in the runs, and Kendall tau between judges (Appendix E)."""
    per_judge: dict[str, dict[str, float]] = {}
    for d in run_dirs:
        latest = latest_records(read_judgments(Path(d) / JUDGMENTS))
        if not latest:
            raise FileNotFoundError(f"{Path(d) / JUDGMENTS}: no judgments")
        grouped: dict[tuple, list[dict]] = {}
        for r in latest.values():
            grouped.setdefault((r.get("judge_model"), r["model"]), []).append(r)
        for (jm, model), recs in grouped.items():
            per_judge.setdefault(jm, {})[model] = summarize_model(recs)["final"]
    judges = sorted(per_judge)
    pairs = []
    for i in range(len(judges)):
        for j in range(i + 1, len(judges)):
            a, b = per_judge[judges[i]], per_judge[judges[j]]
            common = sorted(m for m in set(a) & set(b) if a[m] is not None and b[m] is not None)
            pairs.append({
                "judges": [judges[i], judges[j]], "models": common,
                "kendall_tau": kendall_tau([a[m] for m in common], [b[m] for m in common]),
                "mean_offset": _mean([b[m] - a[m] for m in common]),
            })
    ranking = {jm: sorted((m for m in s if s[m] is not None), key=lambda m: -s[m]) for jm, s in per_judge.items()}
    return {"scores": per_judge, "ranking": ranking, "pairs": pairs}


def repeats(run_dirs: list[str | Path], ddof: int = 1) -> dict:
    """Mean and std across repeated generation runs (one run folder each), per model (Table 4).

    Each run gives per-category, L3, L4 and overall means; the std is taken across those run means
    (sample std, ddof=1, by default).
    """
    per_run = []
    for d in run_dirs:
        per_run.append(score_runs([d])["models"])
    models = sorted(set().union(*[set(r) for r in per_run]))
    out = {}
    for m in models:
        runs = [r[m] for r in per_run if m in r]
        keys = {**{c: ("categories", c) for c in CATEGORY_ORDER}, "L3": ("L3",), "L4": ("L4",), "overall": ("final",),
                "TC": ("TC",), "CP": ("CP",), "VC": ("VC",)}
        stats = {}
        for name, path in keys.items():
            xs = []
            for r in runs:
                v = r
                for p in path:
                    v = v.get(p) if isinstance(v, dict) else None
                if v is not None:
                    xs.append(float(v))
            if not xs:
                continue
            mu = sum(xs) / len(xs)
            sd = math.sqrt(sum((x - mu) ** 2 for x in xs) / (len(xs) - ddof)) if len(xs) > ddof else None
            stats[name] = {"mean": mu, "std": sd, "n_runs": len(xs)}
        out[m] = stats
    return {"models": out, "ddof": ddof}
