"""Scoring formulas, validity tools (agreement, judge swap, repeats) and prompt texts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from worldeval.cli import app
from worldeval.runs import append_jsonl
from worldeval.worldcast.judging.metrics import METRICS, case_final
from worldeval.worldcast.analysis.validity import agreement, judge_swap, kendall_tau, pearson, repeats
from worldeval.worldcast.scoring.scores import score_runs
from tests.helpers.paths import PAPER

from tests.helpers.text import ngrams


def write_run(run: Path, model: str, cases: dict, judge="J1", category="physical_simulation", w=0.0):
    """cases: {case_id: (PA, OC, CP, VC)}; None means a failed judgment."""
    for cid, (pa, oc, cp, vc) in cases.items():
        for metric, score in (("PA", pa), ("OC", oc), ("CP", cp), ("VC", vc)):
            if metric == "OC" and w == 0:
                continue
            append_jsonl(run / "judgments.jsonl", {
                "model": model, "case_id": cid, "category": category, "level": "L3", "outcome_weight": w,
                "metric": metric, "step": None, "status": "ok" if score is not None else "failed", "score": score,
                "judge_model": judge, "prompt_hash": "x", "raw": "{}",
            })


def final_score(pa, cp, vc, oc=None, w=0.0):
    return case_final({"PA": pa, "OC": oc, "CP": cp, "VC": vc}, w)


def test_final_formula_by_hand():
    assert final_score(2, 3, 3) == pytest.approx(100.0)
    assert final_score(0, 0, 0) == 0.0
    # TC = 0.7*1/2 + 0.3*1 = 0.65 ; Final = 100/3 * (0.4*1.95 + 0.4*3 + 0.2*3) = 86
    assert final_score(1, 3, 3, oc=1, w=0.3) == pytest.approx(86.0)
    assert final_score(1, 3, 3, oc=None, w=0.3) is None and final_score(None, 3, 3) is None


@pytest.mark.parametrize("w", [0.0, 0.2, 0.5])
def test_metric_weights_reproduce_final(w):
    # Final/100 = sum over metrics of weight * score / top level, with the weights summing to 1.
    rng = np.random.default_rng(int(w * 10))
    assert sum(m.final_weight(w) for m in METRICS.values()) == pytest.approx(1.0)
    for _ in range(20):
        scores = {k: int(rng.integers(0, m.top + 1)) for k, m in METRICS.items() if k != "STEP"}
        by_weights = 100 * sum(METRICS[k].final_weight(w) * v / METRICS[k].top for k, v in scores.items())
        assert case_final(scores, w) == pytest.approx(by_weights)


def test_pearson_and_kendall_undefined_cases():
    assert pearson([1.0], [2.0]) is None and pearson([1, 1, 1], [1, 2, 3]) is None
    assert pearson([1, 2, 3], [2, 4, 7]) == pytest.approx(np.corrcoef([1, 2, 3], [2, 4, 7])[0, 1])
    assert kendall_tau([1.0], [1.0]) is None and kendall_tau([1, 1], [1, 2]) is None


def test_latest_record_wins_and_failures_are_excluded(tmp_path):
    run = tmp_path / "r"
    write_run(run, "m", {"a": (None, None, 3, 3), "b": (2, None, 3, 3)})
    s = score_runs([run])["models"]["m"]
    assert s["n_failed"] == 1 and s["final"] == pytest.approx(100.0) and s["CP"] == pytest.approx(100.0)
    write_run(run, "m", {"a": (0, None, 3, 3)})  # a resumed run appends a newer answer
    s = score_runs([run])["models"]["m"]
    assert s["n_failed"] == 0 and s["final"] == pytest.approx((100.0 + final_score(0, 3, 3)) / 2)


def _three_models(tmp_path):
    run = tmp_path / "run"
    write_run(run, "A", {"c1": (2, None, 3, 3), "c2": (1, None, 2, 2)})
    write_run(run, "B", {"c1": (1, None, 2, 3), "c2": (1, None, 2, 2)})
    write_run(run, "C", {"c1": (0, None, 1, 1), "c2": (2, None, 3, 2)})
    return run


def test_agreement_by_hand(tmp_path):
    run = _three_models(tmp_path)
    votes = [
        ("c1", "A", "B", "aab"), ("c1", "A", "C", "aaa"), ("c1", "B", "C", "bbt"),
        ("c2", "A", "B", "tta"), ("c2", "A", "C", "bbb"), ("c2", "B", "C", "abt"),
    ]
    vpath = tmp_path / "votes.jsonl"
    for cid, a, b, ws in votes:
        for ann, w in enumerate(ws):
            append_jsonl(vpath, {"case_id": cid, "model_a": a, "model_b": b, "dimension": "overall",
                                 "winner": {"a": "a", "b": "b", "t": "tie"}[w], "annotator": ann})
    res = agreement([run], vpath)["dimensions"]["overall"]
    human = {"A": 7 / 12, "B": 4 / 12, "C": 7 / 12}
    judge = {"A": 2.5 / 4, "B": 1.5 / 4, "C": 2 / 4}
    assert res["human_win_rate"] == pytest.approx(human)
    assert res["judge_win_rate"] == pytest.approx(judge)
    ms = ["A", "B", "C"]
    assert res["pearson_r"] == pytest.approx(np.corrcoef([human[m] for m in ms], [judge[m] for m in ms])[0, 1])
    # majority winners: c1AB a (judge a), c1AC a (a), c1BC b (judge a), c2AC b (b); c2AB tie and c2BC split skipped
    assert res["n_majority_comparisons"] == 4 and res["winner_agreement"] == pytest.approx(0.75)
    # through the CLI
    out = CliRunner().invoke(app, ["worldcast", "agreement", str(run), "--votes", str(vpath)])
    assert out.exit_code == 0 and json.loads(out.stdout)["dimensions"]["overall"]["winner_agreement"] == 0.75
    # a vote naming an unknown model is a clear error
    append_jsonl(vpath, {"case_id": "c1", "model_a": "A", "model_b": "Z", "winner": "a"})
    with pytest.raises(ValueError, match="model 'Z'"):
        agreement([run], vpath)


def test_judge_swap_kendall_tau(tmp_path):
    from scipy.stats import kendalltau

    j1 = {"m1": (2, None, 3, 3), "m2": (2, None, 2, 2), "m3": (1, None, 2, 2), "m4": (0, None, 1, 1)}
    j2 = {"m1": (2, None, 3, 3), "m3": (2, None, 2, 3), "m2": (1, None, 2, 2), "m4": (0, None, 0, 1)}
    for judge, table in (("J1", j1), ("J2", j2)):
        for m, sc in table.items():
            write_run(tmp_path / judge, m, {"c": sc}, judge=judge)
    res = judge_swap([tmp_path / "J1", tmp_path / "J2"])
    assert res["ranking"]["J1"] == ["m1", "m2", "m3", "m4"] and res["ranking"]["J2"] == ["m1", "m3", "m2", "m4"]
    (pair,) = res["pairs"]
    a = [res["scores"]["J1"][m] for m in pair["models"]]
    b = [res["scores"]["J2"][m] for m in pair["models"]]
    assert pair["kendall_tau"] == pytest.approx(4 / 6) == pytest.approx(kendalltau(a, b).statistic)
    # ties: 2 concordant pairs, 1 pair tied in a only -> tau-b = 2 / sqrt(3 * 2)
    assert kendall_tau([1, 2, 2], [1, 2, 3]) == pytest.approx(2 / np.sqrt(6))


def test_repeats_mean_std(tmp_path):
    dirs = []
    for i, sc in enumerate([(2, None, 3, 3), (2, None, 2, 2), (1, None, 2, 2)]):  # finals 100, 80, 60
        write_run(tmp_path / f"r{i}", "X", {"c": sc})
        dirs.append(tmp_path / f"r{i}")
    res = repeats(dirs)["models"]["X"]
    assert res["overall"]["mean"] == pytest.approx(80.0) and res["overall"]["std"] == pytest.approx(20.0)
    assert res["physical_simulation"]["n_runs"] == 3 and "visual_cues" not in res
    assert repeats(dirs, ddof=0)["models"]["X"]["overall"]["std"] == pytest.approx(np.std([100, 80, 60]))


# -- prompts ------------------------------------------------------------------------

def test_judge_prompts_are_our_own_words_and_complete():
    from worldeval.worldcast.generation import requests as P

    paper = PAPER
    texts = {k: m.rubric_text() for k, m in METRICS.items()}
    for k, t in texts.items():
        assert METRICS[k].name.upper() in t.upper()
        for word in ("INSPECT", "CHALLENGE", "REVISE", "HINTS"):
            assert word in t
        for level in METRICS[k].levels:
            assert re.search(rf"^{level} - ", t, re.M), (k, level)
    assert len({m.prompt_hash for m in METRICS.values()}) == len(METRICS)
    if paper.is_file():
        theirs = ngrams(paper.read_text(encoding="utf-8"))
        ours = set().union(*(ngrams(t) for t in texts.values()))
        from worldeval.worldcast.inputs.keyframes import AGENTIC_PROMPT

        ours |= ngrams(AGENTIC_PROMPT)
        for iface in P.INTERFACES:
            from worldeval.worldcast.inputs.cases import load_cases
            from worldeval.worldcast.samples import sample_dataset

            ours |= ngrams(P.generation_request(load_cases(sample_dataset())[0], iface).prompt)
        shared = ours & theirs
        assert not shared, sorted(shared)[:5]


def test_generation_requests_never_show_hints():
    from worldeval.worldcast.inputs.cases import load_cases
    from worldeval.worldcast.samples import sample_dataset

    runner = CliRunner()
    cases = {c.id: c for c in load_cases(sample_dataset())}
    for iface in ("grid", "interleaved", "video"):
        res = runner.invoke(app, ["worldcast", "prompts", "--interface", iface])
        assert res.exit_code == 0, res.output
        reqs = [json.loads(l) for l in res.stdout.splitlines()]
        assert [r["case_id"] for r in reqs] == list(cases)
        for r in reqs:
            c = cases[r["case_id"]]
            assert c.instruction in r["prompt"]
            assert not any(h in r["prompt"] for h in c.hints)
            assert str(c.steps) in r["prompt"]
            if iface == "grid":
                assert r["layout"] == {2: "1x2", 3: "1x3", 4: "2x2"}[c.steps]
                assert ("grid.json" in r["expected_output"]) == (c.steps == 3)
    assert runner.invoke(app, ["worldcast", "prompts", "--interface", "collage"]).exit_code == 2


def test_repeats_cli_table(tmp_path):
    for i, sc in enumerate([(2, None, 3, 3), (2, None, 2, 2), (1, None, 2, 2)]):
        write_run(tmp_path / f"r{i}", "X", {"c": sc})
    res = CliRunner().invoke(app, ["worldcast", "repeats", *(str(tmp_path / f"r{i}") for i in range(3))])
    assert res.exit_code == 0, res.output
    assert "80.0 ± 20.00" in res.stdout
