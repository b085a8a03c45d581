"""End-to-end WorldCast judging: through the CLI against the loopback judge server (real `openai` client, faults,
the key on the wire), and in-process through the mock transport where the wire is not what is tested."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from worldeval.cli import app
from worldeval.worldcast.inputs.cases import load_cases
from worldeval.worldcast.judging.metrics import PROMPT_VERSIONS
from worldeval.worldcast.samples import sample_dataset, sample_outputs

from tests.helpers.fake_judge import FakeJudge
from tests.helpers.worldcast_judge import SCORES, STEP_LEN, WEIGHTS, hand_final, scripted

KEY = "sk-test-SECRET-7f3a9c"


@pytest.fixture
def judge_server():
    cases = load_cases(sample_dataset())
    state = {"model": "correct"}
    srv = FakeJudge(lambda info: scripted(info, cases, state["model"]), slow_s=1.0)
    srv.state = state
    yield srv
    srv.close()


class MockJudge:
    """The same scripted judge in-process: `infos` are the requests as FakeJudge.describe sees them."""

    def __init__(self, model: str = "correct"):
        self.cases = load_cases(sample_dataset())
        self.model = model
        self.infos: list[dict] = []

    def __call__(self, request):
        info = FakeJudge.describe(request.body())
        self.infos.append(info)
        return scripted(info, self.cases, self.model)

    def client(self, judge_model: str = "fake-judge-1"):
        from worldeval.judge import JudgeClient, JudgeConfig, MockTransport

        return JudgeClient(JudgeConfig(model=judge_model, max_attempts=3, backoff_base_s=0.0),
                           transport=MockTransport(self))


def _judge(runner, srv, model, out, cache, extra=(), rc=0):
    args = ["worldcast", "judge", "--dataset", str(sample_dataset()), "--outputs", str(sample_outputs(model)),
            "--model", model, "--out", str(out), "--base-url", srv.base_url, "--judge-model", "fake-judge-1",
            "--api-key", KEY, "--timeout", "0.4", "--backoff", "0.01", "--max-attempts", "3", "--concurrency", "4",
            "--cache", str(cache), "-q", *extra]
    res = runner.invoke(app, args)
    assert res.exit_code == rc, res.output + str(res.exception)
    return res


def _score(runner, *dirs, extra=()):
    res = runner.invoke(app, ["worldcast", "score", *map(str, dirs), "--json", *extra])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_judge_run_faults_scores_resume_cache_and_no_key(judge_server, tmp_path):
    srv = judge_server
    runner = CliRunner()
    run = tmp_path / "run"
    cache = tmp_path / "cache" / "judge.sqlite"
    F = srv.faults
    F[("correct", "phys_ball_drop", "PA", None)] = ["500", "500"]
    F[("correct", "adapt_cube_box", "CP", None)] = ["429", "429"]
    F[("correct", "adapt_cube_box", "PA", None)] = ["range"]
    F[("correct", "logic_hanoi2", "VC", None)] = ["fenced"]
    F[("correct", "logic_hanoi2", "PA", None)] = ["embedded"]
    F[("correct", "goal_tiles", "OC", None)] = ["slow"]
    F[("correct", "goal_tiles", "PA", None)] = ["prose!"]
    res = _judge(runner, srv, "correct", run, cache, rc=1)  # one item failed: exit 1, with its reason
    assert "1 of 15 item(s) failed; most common: 1x unparseable answer" in res.output

    # 15 items and the preflight request; extra requests: 2x500, 2x429, 1 out-of-range, 1 timeout, 2 more prose attempts
    assert srv.count(FakeJudge.preflight_request) == 1
    assert srv.count() == 1 + 15 + 2 + 2 + 1 + 1 + 2
    recs = [json.loads(l) for l in (run / "judgments.jsonl").read_text().splitlines()]
    assert len(recs) == 15
    by = {(r["case_id"], r["metric"]): r for r in recs}
    failed = [r for r in recs if r["status"] != "ok"]
    assert [(r["case_id"], r["metric"]) for r in failed] == [("goal_tiles", "PA")]
    assert failed[0]["score"] is None and failed[0]["attempts"] == 3 and "unparseable" in failed[0]["error"]
    assert failed[0]["raw"].startswith("The sequence looks")
    assert by[("phys_ball_drop", "PA")]["attempts"] == 3 and by[("phys_ball_drop", "PA")]["score"] == 2
    assert by[("adapt_cube_box", "CP")]["attempts"] == 3
    assert by[("goal_tiles", "OC")]["attempts"] == 2 and any("timeout" in e for e in by[("goal_tiles", "OC")]["attempt_errors"])
    assert "```json" in by[("logic_hanoi2", "VC")]["raw"] and by[("logic_hanoi2", "VC")]["score"] == 3
    assert ("phys_ball_drop", "OC") not in by  # outcome_weight 0: OC never asked
    for r in recs:
        assert r["judge_model"] == "fake-judge-1" and r["prompt_hash"] == PROMPT_VERSIONS[r["metric"]]
        assert r["latency_s"] >= 0 and r["model"] == "correct"

    # OC sees the references and the final image only; the others see references + every state.
    refs = {c.id: len(c.images) for c in load_cases(sample_dataset())}
    for req in srv.requests:
        if FakeJudge.preflight_request(req):
            continue
        if req.get("metric") == "OC":
            assert len(req["images"]) == refs[req["case"]] + 1
            assert "Generated state 2" not in req["text"]
        elif req.get("metric") in ("PA", "CP", "VC"):
            assert len(req["images"]) == refs[req["case"]] + STEP_LEN[req["case"]]
        # judge-only hints reach the judge
        c = next(c for c in load_cases(sample_dataset()) if c.id == req["case"])
        assert all(h in req["text"] for h in c.hints)

    # Scores: goal_tiles has no PA, so no TC and no Final; it counts as failed, never as 0.
    s = _score(runner, run)["models"]["correct"]
    finals = {c: hand_final(pa, oc, cp, vc, WEIGHTS[c]) for c, (pa, oc, cp, vc) in SCORES["correct"].items()}
    ok_cases = ["phys_ball_drop", "adapt_cube_box", "logic_hanoi2"]
    assert s["n_cases"] == 4 and s["n_failed"] == 1
    assert s["final"] == pytest.approx(sum(finals[c][0] for c in ok_cases) / 3)
    assert s["final"] == pytest.approx((93.3333333 + 86.6666667 + 86.0) / 3)
    assert s["TC"] == pytest.approx(100 * (1.0 + 1.0 + 0.65) / 3)
    assert s["CP"] == pytest.approx(100 / 3 * (3 + 2 + 3 + 3) / 4)
    assert s["VC"] == pytest.approx(100 / 3 * (2 + 3 + 3 + 3) / 4)
    assert s["L3"] == pytest.approx((finals["phys_ball_drop"][0] + finals["adapt_cube_box"][0]) / 2)
    assert s["L4"] == pytest.approx(finals["logic_hanoi2"][0])
    assert s["categories"]["visual_goal_realization"] is None
    assert s["categories"]["logic_and_rules"] == pytest.approx(86.0)

    # Resume: only the failed item is asked again (after the new run's preflight request).
    srv.faults.clear()
    before = srv.count()
    _judge(runner, srv, "correct", run, cache)
    assert srv.count() == before + 2
    s = _score(runner, run)["models"]["correct"]
    assert s["n_failed"] == 0
    assert s["final"] == pytest.approx(sum(f for f, _ in finals.values()) / 4)
    assert s["categories"]["visual_goal_realization"] == pytest.approx(80.0)
    # A second rerun asks nothing.
    before = srv.count()
    _judge(runner, srv, "correct", run, cache)
    assert srv.count() == before

    # The cache survives a restart: a fresh run folder (new process state, same cache file) sends nothing.
    run2 = tmp_path / "run2"
    _judge(runner, srv, "correct", run2, cache)
    assert srv.count() == before
    assert _score(runner, run2)["models"]["correct"]["final"] == pytest.approx(s["final"])
    recs2 = [json.loads(l) for l in (run2 / "judgments.jsonl").read_text().splitlines()]
    assert all(r["cached"] for r in recs2) and len(recs2) == 15

    # The second model in the same run folder; both are scored and ranked.
    srv.state["model"] = "shuffled"
    _judge(runner, srv, "shuffled", run, cache)
    both = _score(runner, run)["models"]
    exp = sum(hand_final(pa, oc, cp, vc, WEIGHTS[c])[0] for c, (pa, oc, cp, vc) in SCORES["shuffled"].items()) / 4
    assert both["shuffled"]["final"] == pytest.approx(exp)
    assert both["shuffled"]["final"] < both["correct"]["final"]
    assert set(both["correct"]) >= {"final", "TC", "CP", "VC", "L3", "L4", "categories", "n_cases", "n_failed"}

    # The readable table prints both models.
    res = runner.invoke(app, ["worldcast", "score", str(run)])
    assert res.exit_code == 0 and "correct" in res.stdout and "shuffled" in res.stdout

    # Grid cells were saved where the judge saw them; the manifest exists; the key is nowhere.
    assert (run / "states" / "correct" / "goal_tiles" / "step_4.png").is_file()
    man = json.loads((run / "manifest.json").read_text())
    assert man["config"]["judge"]["model"] == "fake-judge-1" and man["prompt_versions"] == PROMPT_VERSIONS
    assert man["config"]["judge"]["api_key_set"] is True
    for folder in (run, run2, cache.parent):
        for p in folder.rglob("*"):
            if p.is_file():
                assert KEY.encode() not in p.read_bytes(), p
    # ...but it was sent to the server.
    assert all(r["auth"] == f"Bearer {KEY}" for r in srv.requests)


def test_step_accuracy_paper_scope(tmp_path):
    """The paper's curve: four-step cases without an endpoint reference image, per step index."""
    from worldeval.worldcast.judging.run import run_judge

    runner, judge, run = CliRunner(), MockJudge(), tmp_path / "run"
    run_judge(sample_dataset(), sample_outputs("correct"), "correct", run, judge.client(), step_accuracy=True)
    # adapt_cube_box (2 steps) and logic_hanoi2 (3) are not four-step cases; goal_tiles (4) shows its goal state
    steps = [(r["case"], r["step"]) for r in judge.infos if r["metric"] == "STEP"]
    assert sorted(steps) == [("phys_ball_drop", k) for k in (1, 2, 3, 4)]
    res = _score(runner, run, extra=["--step-accuracy"])["models"]["correct"]
    assert res["step_accuracy_scope"] == ["paper"]
    assert {k: (v["accuracy"], v["n"]) for k, v in res["step_accuracy"].items()} == \
        {"1": (100.0, 1), "2": (100.0, 1), "3": (0.0, 1), "4": (100.0, 1)}  # phys_ball_drop step 3 is wrong
    # the readable table has one column per step index
    table = runner.invoke(app, ["worldcast", "score", str(run), "--step-accuracy"])
    assert table.exit_code == 0 and "step 3" in table.stdout and "0.0 (1)" in table.stdout


def test_step_accuracy_curve_all_cases(tmp_path):
    from worldeval.worldcast.judging.run import run_judge

    runner, judge, run = CliRunner(), MockJudge(), tmp_path / "run"
    run_judge(sample_dataset(), sample_outputs("correct"), "correct", run, judge.client(), step_accuracy=True,
              step_scope="all")
    n_steps = sum(STEP_LEN.values())
    assert sum(r["metric"] == "STEP" for r in judge.infos) == n_steps
    # Step requests carry only the designated image besides the references.
    refs = {c.id: len(c.images) for c in judge.cases}
    for r in judge.infos:
        if r["metric"] == "STEP":
            assert f"DESIGNATED GENERATED IMAGE (step {r['step']})" in r["text"]
            assert len(r["images"]) == refs[r["case"]] + 1
    s = _score(runner, run, extra=["--step-accuracy"])["models"]["correct"]
    curve = s["step_accuracy"]
    # hand count: step 1 all four right; step 2: logic wrong (3/4); step 3: phys wrong, logic+goal right (2/3); step 4: 2/2
    assert curve["1"]["accuracy"] == pytest.approx(100.0) and curve["1"]["n"] == 4
    assert curve["2"]["accuracy"] == pytest.approx(75.0)
    assert curve["3"]["accuracy"] == pytest.approx(200 / 3) and curve["3"]["n"] == 3
    assert curve["4"]["accuracy"] == pytest.approx(100.0) and curve["4"]["n"] == 2
    # The ball's plan text reached the step judge.
    assert any("It bounces up" in r["text"] for r in judge.infos if r["metric"] == "STEP")


def test_missing_output_is_a_recorded_failure_and_resumable(tmp_path):
    from worldeval.worldcast.judging.run import run_judge

    runner, judge = CliRunner(), MockJudge()
    outputs = tmp_path / "outs"
    shutil.copytree(sample_outputs("correct"), outputs)
    shutil.rmtree(outputs / "logic_hanoi2")
    run = tmp_path / "run"
    client = judge.client()
    run_judge(sample_dataset(), outputs, "correct", run, client)
    recs = [json.loads(l) for l in (run / "judgments.jsonl").read_text().splitlines()]
    bad = [r for r in recs if r["case_id"] == "logic_hanoi2"]
    assert len(bad) == 4 and all(r["status"] == "failed" and "no output folder" in r["error"] for r in bad)
    s = _score(runner, run)["models"]["correct"]
    assert s["n_failed"] == 1 and s["categories"]["logic_and_rules"] is None
    # The output appears; the rerun judges only that case.
    shutil.copytree(sample_outputs("correct") / "logic_hanoi2", outputs / "logic_hanoi2")
    before = len(judge.infos)
    run_judge(sample_dataset(), outputs, "correct", run, client)
    assert len(judge.infos) == before + 4 and {r["case"] for r in judge.infos[before:]} == {"logic_hanoi2"}
    assert _score(runner, run)["models"]["correct"]["n_failed"] == 0


def test_other_judge_in_same_folder_is_refused(tmp_path):
    from worldeval.worldcast.judging.run import run_judge

    run = tmp_path / "run"
    run_judge(sample_dataset(), sample_outputs("correct"), "correct", run, MockJudge().client(), case_ids=["phys_ball_drop"])
    with pytest.raises(ValueError, match="new run folder"):
        run_judge(sample_dataset(), sample_outputs("correct"), "correct", run, MockJudge().client("other"))
