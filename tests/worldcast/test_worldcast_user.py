"""WorldCast as a new user meets it (issue 21): offline demo and mock transport, exit codes, input checks,
per-model provenance in the report, failure reasons in progress, the circuit breaker, CIs and ranking,
the endpoint notice, and the smaller points. Each test names the numbered problem it covers."""

from __future__ import annotations

import json
import os
import shlex
import socket
import stat
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from worldeval.cli import app
from worldeval.worldcast.samples import sample_dataset, sample_outputs

KEY = "sk-user-SECRET-55d1"
N_ITEMS = 15  # 4 sample cases x (PA, CP, VC) + OC for the 3 cases with outcome_weight > 0


def _write_script(path: Path, rules: list, default=None) -> Path:
    doc = {"label": "test answers", "rules": rules}
    if default is not None:
        doc["default"] = default
    path.write_text(json.dumps(doc))
    return path


def _judge(tmp_path, script: Path, *extra, outputs=None, model="correct", out=None):
    args = ["worldcast", "judge", "--dataset", str(sample_dataset()), "--outputs", str(outputs or sample_outputs(model)),
            "--model", model, "--out", str(out or tmp_path / "run"), "--judge-transport", "mock",
            "--judge-script", str(script), "--backoff", "0", "--max-attempts", "2", "--concurrency", "1", *extra]
    return CliRunner().invoke(app, args)


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "judgments.jsonl").read_text().splitlines() if line.strip()]


# 1 ---------------------------------------------------------------------------------------------------------------

def test_1_demo_runs_offline_and_labels_the_scripted_judge(tmp_path):
    t0 = time.monotonic()
    res = CliRunner().invoke(app, ["worldcast", "demo", "--out", str(tmp_path / "demo"), "--bootstrap", "200"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert time.monotonic() - t0 < 60
    demo = tmp_path / "demo"
    scores = json.loads((demo / "scores.json").read_text())["models"]
    # correct: PA 2 everywhere, OC 1, CP (3, 3, 3, 2), VC (3, 3, 2, 3) in demo_judge.json -> Final by hand
    finals = [(100 / 3) * (0.4 * 3 * 1.0 + 0.4 * cp + 0.2 * vc) for cp, vc in ((3, 3), (3, 3), (3, 2), (2, 3))]
    assert scores["correct"]["final"] == pytest.approx(sum(finals) / 4)
    assert scores["correct"]["rank"] == 1 and scores["shuffled"]["rank"] == 2
    assert scores["broken"]["final"] is None and scores["broken"]["rank"] is None and scores["broken"]["n_failed"] == 4
    man = json.loads((demo / "run" / "manifest.json").read_text())
    assert set(man["models"]) == {"correct", "shuffled", "broken"}
    assert all(m["transport"]["name"] == "mock" and m["transport"]["scripted"] for m in man["models"].values())
    html = (demo / "report.html").read_text()
    assert "Scripted judge" in html and "not a model's judgement" in html


def test_1_judge_with_mock_transport_and_a_script_file(tmp_path):
    script = _write_script(tmp_path / "s.json", [{"match": {"metric": "OC"}, "answer": {"score": 1, "evidence": "e"}}],
                           default={"score": 2, "evidence": "d"})
    res = _judge(tmp_path, script)
    assert res.exit_code == 0, res.output
    recs = _records(tmp_path / "run")
    assert len(recs) == N_ITEMS and all(r["status"] == "ok" for r in recs)
    assert {r["score"] for r in recs if r["metric"] == "OC"} == {1}
    assert {r["score"] for r in recs if r["metric"] != "OC"} == {2}
    # a bad script names the file and the field, exit 2
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"rules": [{"match": {"case": "x"}, "answer": {"score": 1}}]}))
    res = _judge(tmp_path, bad, out=tmp_path / "run2")
    assert res.exit_code == 2 and f"{bad} field 'rules[0].match': unknown key(s) ['case']" in res.output


# 2 and 5 ---------------------------------------------------------------------------------------------------------

def test_2_5_all_failed_exits_1_with_reasons_on_every_line(tmp_path):
    script = _write_script(tmp_path / "s.json", [], default="I would rather describe the pictures in prose.")
    res = _judge(tmp_path, script, "--circuit-breaker", "0")
    assert res.exit_code == 1, res.output
    assert f"correct: {N_ITEMS} of {N_ITEMS} item(s) failed; most common: {N_ITEMS}x unparseable answer" in res.output
    failed_lines = [line for line in res.output.splitlines() if ": failed: " in line]
    assert len(failed_lines) == N_ITEMS
    assert all("unparseable answer" in line for line in failed_lines)
    assert "None" not in res.output


def test_2_exit_0_when_every_item_is_ok_and_1_for_one_failure(tmp_path):
    script = _write_script(tmp_path / "s.json", [
        {"match": {"case_id": "goal_tiles", "metric": "VC"}, "http_status": 400}], default={"score": 1, "evidence": "e"})
    res = _judge(tmp_path, script)
    assert res.exit_code == 1 and "1 of 15 item(s) failed; most common: 1x HTTP 400" in res.output
    fixed = _write_script(tmp_path / "ok.json", [], default={"score": 1, "evidence": "e"})
    res = _judge(tmp_path, fixed)  # resumes: only the failed item is asked
    assert res.exit_code == 0 and "asked 1, kept 14, ok 1, failed 0" in res.output


# 3 ---------------------------------------------------------------------------------------------------------------

def test_3_mistyped_outputs_folder_is_exit_2_before_anything_is_written(tmp_path):
    script = _write_script(tmp_path / "s.json", [], default={"score": 1, "evidence": "e"})
    typo = tmp_path / "outptus"
    res = _judge(tmp_path, script, outputs=typo)
    assert res.exit_code == 2 and f"--outputs {typo}: does not exist" in res.output
    assert not (tmp_path / "run").exists()
    typo.mkdir()
    (typo / "something_else").mkdir()
    res = _judge(tmp_path, script, outputs=typo)
    assert res.exit_code == 2 and "holds no output folder of any of the dataset's 4 case(s)" in res.output
    assert "found something_else" in res.output and not (tmp_path / "run").exists()


# 4 ---------------------------------------------------------------------------------------------------------------

def test_4_report_shows_step_images_of_every_model_in_one_folder(tmp_path):
    from worldeval.report import render_report

    script = _write_script(tmp_path / "s.json", [], default={"score": 1, "evidence": "e"})
    for model in ("correct", "shuffled"):
        assert _judge(tmp_path, script, model=model).exit_code == 0
    man = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert man["models"]["correct"]["outputs"] == str(sample_outputs("correct").resolve())
    html = render_report([tmp_path / "run"], bootstrap=0)
    for model in ("correct", "shuffled"):
        sec = html[html.index(f'id="wc-rollout-{model}-phys_ball_drop"'):]
        sec = sec[:sec.index("</table>")]
        # phys_ball_drop is a step-image output (no adapter copy under states/): read from the model's own folder
        assert sec.count('class="wc-step"') == 4 and "no step images found" not in sec


# 6 ---------------------------------------------------------------------------------------------------------------

def test_6_circuit_breaker_stops_after_n_same_failures_and_resumes(tmp_path):
    script = _write_script(tmp_path / "s.json", [], default="Sure! The sequence looks plausible.")
    res = _judge(tmp_path, script, "--circuit-breaker", "3")
    assert res.exit_code == 3, res.output
    assert "the first 3 judged items all failed the same way: unparseable answer" in res.output
    recs = _records(tmp_path / "run")
    assert len(recs) == 3 and all(r["status"] == "failed" and r["attempts"] == 2 for r in recs)
    man = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert "the first 3 judged items" in man["runs"][-1]["aborted"]
    good = _write_script(tmp_path / "g.json", [], default={"score": 1, "evidence": "e"})
    res = _judge(tmp_path, good)
    assert res.exit_code == 0 and f"asked {N_ITEMS}, kept 0, ok {N_ITEMS}" in res.output


def test_6_breaker_kinds_and_one_success_disarms():
    from worldeval.judge import CircuitBreaker, failure_kind

    assert failure_kind("attempt 5: unparseable answer: no JSON", "I'm sorry, I can't help") == "refused to answer"
    assert failure_kind("attempt 1: HTTP 401: bad key") == "HTTP 401"
    assert failure_kind("attempt 5: HTTP 429: rate limited") is None  # transient: not the judge's habit
    b = CircuitBreaker(2)
    assert b.observe(False, "HTTP 404") is None and b.observe(False, "HTTP 404").startswith("the first 2")
    b = CircuitBreaker(2)
    assert b.observe(True, None) is None and b.observe(False, "x") is None and b.observe(False, "x") is None
    b = CircuitBreaker(2)
    assert b.observe(False, "a") is None and b.observe(False, "b") is None  # two different ways: no trip


# 7 ---------------------------------------------------------------------------------------------------------------

def _rec(model, cid, cat, metric, score):
    from worldeval.worldcast.judging.metrics import PROMPT_VERSIONS

    status = "ok" if score is not None else "failed"
    return {"model": model, "case_id": cid, "category": cat, "level": "L3", "outcome_weight": 0.0, "metric": metric,
            "step": None, "status": status, "score": score, "error": None if score is not None else "x",
            "judge_model": "j", "prompt_hash": PROMPT_VERSIONS[metric]}


def _run_with(tmp_path, cases: dict) -> Path:
    """cases: model -> [(case_id, category, (PA, CP, VC) or None for all failed)]."""
    run = tmp_path / "run"
    run.mkdir()
    lines = []
    for model, rows in cases.items():
        for cid, cat, s in rows:
            for metric, v in zip(("PA", "CP", "VC"), s or (None, None, None)):
                lines.append(json.dumps(_rec(model, cid, cat, metric, v)))
    (run / "judgments.jsonl").write_text("\n".join(lines) + "\n")
    return run


def test_7_bootstrap_ci_by_hand_ties_share_a_rank_and_unscored_are_apart(tmp_path):
    from worldeval.worldcast.scoring.scores import score_runs

    P, A = "physical_simulation", "adaptive_task_completion"
    run = _run_with(tmp_path, {
        # Finals: a1 = 100 (2,3,3), a2 = 0 (0,0,0) in one category, b = 50 alone in another (1, 1.5?)
        "m": [("a1", P, (2, 3, 3)), ("a2", P, (0, 0, 0)), ("b", A, (1, 1, 2))],
        "tie": [("a1", P, (2, 3, 3))], "tie2": [("a1", P, (2, 3, 3))],
        "dead": [("a1", P, None)],
    })
    res = score_runs([run], bootstrap=2000, seed=0)
    m = res["models"]["m"]
    fb = (100 / 3) * (0.4 * 3 * 0.5 + 0.4 * 1 + 0.2 * 2)  # b's Final by hand: 46.67
    assert m["final"] == pytest.approx((100 + 0 + fb) / 3)
    # stratified: category P redraws its 2 cases -> (100+100), (100+0) or (0+0), each >= 1/4 of replicates;
    # b is redrawn alone. So the 2.5% / 97.5% percentiles are the two extreme means exactly.
    assert m["final_ci"] == pytest.approx([(0 + 0 + fb) / 3, (100 + 100 + fb) / 3])
    assert m["VC_ci"] == pytest.approx([100 / 3 * (0 + 0 + 2) / 3, 100 / 3 * (3 + 3 + 2) / 3])
    assert res["models"]["tie"]["final_ci"] == pytest.approx([100.0, 100.0])
    ranks = {k: v["rank"] for k, v in res["models"].items()}
    assert ranks == {"tie": 1, "tie2": 1, "m": 3, "dead": None}
    assert score_runs([run], bootstrap=2000, seed=0) == res  # fixed seed: the same intervals
    assert score_runs([run], bootstrap=0)["models"]["m"]["final_ci"] is None

    out = CliRunner().invoke(app, ["worldcast", "score", str(run), "--bootstrap", "200"])
    assert out.exit_code == 0 and "not ranked (no case with every judgment ok): dead" in out.stdout
    rows = [line for line in out.stdout.splitlines() if line.startswith("│")]
    assert [r.split("│")[2].strip() for r in rows] == ["tie", "tie2", "m", "dead"]
    assert [r.split("│")[1].strip() for r in rows] == ["1", "1", "3", "-"]
    js = json.loads(CliRunner().invoke(app, ["worldcast", "score", str(run), "--json", "--bootstrap", "0"]).stdout)
    assert {"final", "TC", "CP", "VC", "L3", "L4", "categories", "n_cases", "n_failed"} <= set(js["models"]["m"])


def test_7_report_never_ranks_an_all_failed_model(tmp_path):
    from worldeval.report import render_report

    run = _run_with(tmp_path, {"dead": [("a1", "physical_simulation", None)]})
    html = render_report([run], bootstrap=0)
    board = html[html.index('id="worldcast-leaderboard"'):]
    board = board[:board.index("</table>")]
    assert "leaderboard-row" not in board and "no scored models" in board
    apart = html[html.index('id="worldcast-unscored"'):]
    assert 'data-model="dead"' in apart[:apart.index("</table>")]


# 8 ---------------------------------------------------------------------------------------------------------------

def test_8_endpoint_notice(tmp_path, monkeypatch):
    from worldeval.judge import JudgeConfig
    from worldeval.worldcast.judging.progress import endpoint_notice

    assert "api.openai.com (the openai SDK default" in endpoint_notice(JudgeConfig(model="m"), "openai_compat")
    cfg = JudgeConfig(model="m", base_url="http://user:pw@10.0.0.5:8000/v1", api_key=KEY)
    note = endpoint_notice(cfg, "openai_compat")
    assert note.startswith("judge endpoint: http://10.0.0.5:8000,") and "pw" not in note and KEY not in note
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    # smaller point: a closed port is exit 3 in judge (as in generate), after saying where it went
    res = CliRunner().invoke(app, [
        "worldcast", "judge", "--dataset", str(sample_dataset()), "--outputs", str(sample_outputs("correct")),
        "--model", "m", "--out", str(tmp_path / "r"), "--base-url", f"http://127.0.0.1:{port}/v1",
        "--judge-model", "j", "--api-key", KEY, "--no-cache"])
    assert res.exit_code == 3 and f"judge endpoint: http://127.0.0.1:{port}, judge model 'j'" in res.output
    assert KEY not in res.output


# smaller points ----------------------------------------------------------------------------------------------------

def test_files_follow_the_umask(tmp_path):
    from worldeval.runs import atomic_write_json

    old = os.umask(0o022)
    try:
        p = atomic_write_json(tmp_path / "manifest.json", {"a": 1})
        assert stat.S_IMODE(p.stat().st_mode) == 0o644
        os.umask(0o077)
        q = atomic_write_json(tmp_path / "private.json", {"a": 1})
        assert stat.S_IMODE(q.stat().st_mode) == 0o600
    finally:
        os.umask(old)


def test_missing_fields_say_missing(tmp_path):
    from worldeval.errors import CaseError
    from worldeval.worldcast.inputs.cases import load_cases
    from worldeval.worldcast.judging.records import JudgmentError, validate_record

    with pytest.raises(JudgmentError, match=r"field 'metric': missing"):
        validate_record({"model": "m", "case_id": "c", "category": "physical_simulation", "status": "ok", "score": 1})
    ds = tmp_path / "ds"
    ds.mkdir()
    (ds / "cases.jsonl").write_text(json.dumps({"id": "a", "category": "physical_simulation", "instruction": "x"}) + "\n")
    with pytest.raises(CaseError, match=r"line 1 field 'steps': missing"):
        load_cases(ds)


def test_choice_options_show_their_choices_in_help():
    res = CliRunner().invoke(app, ["worldcast", "judge", "--help"], env={"COLUMNS": "250", "TERMINAL_WIDTH": "250"})
    for choices in ("[low|medium|high]", "[paper|all]", "[changepoint|agentic]", "[openai|mock]"):
        assert choices in res.output, choices
    res = CliRunner().invoke(app, ["worldcast", "generate", "--help"], env={"COLUMNS": "250", "TERMINAL_WIDTH": "250"})
    assert "[interleaved|grid|video]" in res.output


def test_command_with_wrong_file_names_says_what_the_interface_expects(tmp_path):
    script = tmp_path / "model.py"
    script.write_text("import sys\nfrom PIL import Image\n"
                      "for k in (1, 2):\n    Image.new('RGB', (16, 16)).save(f'{sys.argv[1]}/step_{k}.png')\n")
    cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} {{out_dir}}"
    res = CliRunner().invoke(app, ["worldcast", "generate", "--dataset", str(sample_dataset()), "--out",
                                   str(tmp_path / "outs"), "--interface", "grid", "--command", cmd,
                                   "--case", "adapt_cube_box", "-q"])
    assert res.exit_code == 1
    assert "adapt_cube_box: --interface grid expects grid.png, got step_*.png" in res.output
    assert "staging" not in res.output
