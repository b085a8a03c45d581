"""Checks of the WorldCast judge itself (paper section 4.4 and Appendix E).

`agreement`: the judge's pairwise verdicts against human votes; `judge_swap`: the
model ranking under each judge model and Kendall tau between judges; `repeats`:
mean and spread over repeated generation rounds. Each reads run folders through
the scoring room, so a check sees exactly the scores `worldcast score` reports.
"""

from __future__ import annotations

import math
from pathlib import Path

from worldeval.runs import read_jsonl
from worldeval.worldcast.inputs.cases import CATEGORY_ORDER
from worldeval.worldcast.inputs.errors import LineError
from worldeval.worldcast.judging.metrics import DIMENSIONS
from worldeval.worldcast.judging.records import JUDGMENTS, latest_records, read_judgments
from worldeval.worldcast.scoring.scores import (CaseScore, case_scores, load_run_records, mean_or_none, score_runs,
                                                summarize_model)

VOTE_DIMENSIONS = ("overall",) + tuple(DIMENSIONS)  # what a human vote may compare


class VoteError(LineError):
    """A vote of the `--votes` file that cannot be used, named by file, vote number and field."""

    unit = "vote"


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
        raise VoteError(votes_path, None, None, "no votes")
    human: dict[str, dict[str, list[float]]] = {d: {} for d in VOTE_DIMENSIONS}
    judge: dict[str, dict[str, list[float]]] = {d: {} for d in VOTE_DIMENSIONS}
    groups: dict[tuple, list[float]] = {}
    for n, v in enumerate(votes, start=1):
        try:
            cid, a, b, dim = v["case_id"], v["model_a"], v["model_b"], v.get("dimension", "overall")
            val = _human_value(v["winner"], a, b)
        except KeyError as exc:
            raise VoteError(votes_path, n, None, f"missing field {exc}") from None
        except ValueError as exc:
            raise VoteError(votes_path, n, "winner", str(exc)) from None
        if dim not in VOTE_DIMENSIONS:
            raise VoteError(votes_path, n, "dimension", f"{dim!r} not in {list(VOTE_DIMENSIONS)}")
        for m in (a, b):
            if m not in scores:
                raise VoteError(votes_path, n, None, f"model {m!r} is not in the run folders ({sorted(scores)})")
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
        hw = {m: mean_or_none(human[d][m]) for m in models}
        jw = {m: mean_or_none(judge[d][m]) for m in models}
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
                "mean_offset": mean_or_none([b[m] - a[m] for m in common]),
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
