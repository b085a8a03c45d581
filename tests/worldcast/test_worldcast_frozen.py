"""WorldCast output frozen before the judge transport and metric-spec refactor (issue 9).

The packaged samples are judged (both models, with designated-step checks) by a
scripted judge whose answers depend only on the request text; the resulting
`judgments.jsonl` (without latencies) and `worldcast score --json` output must
equal the files in tests/frozen/worldcast/, which were written by the code as
it was before the refactor. Request hashes are part of each record, so the
cache keys and every prompt text are frozen too.
"""

from __future__ import annotations

import json
from pathlib import Path

from worldeval.worldcast.inputs.cases import load_cases
from worldeval.worldcast.judging.metrics import PROMPT_VERSIONS
from worldeval.worldcast.samples import sample_dataset, sample_outputs

from tests.helpers.fake_judge import FakeJudge
from tests.helpers.paths import TESTS

FROZEN = TESTS / "frozen" / "worldcast"
PROMPT_HASHES = {"PA": "a4bc99860661", "OC": "547827bb0c14", "CP": "7d353d01ab3e", "VC": "a0b37aaabe8f",
                 "STEP": "9e757cc58955"}


def scripted_answer(text: str, model: str) -> str:
    """A judge reply decided by the request text only (so any transport gives the same run)."""
    case = next(c for c in load_cases(sample_dataset()) if c.instruction.strip() in text)
    n = sum(map(ord, case.id)) + (7 if model == "shuffled" else 0)
    if "DESIGNATED-STEP ACCURACY" in text:
        step = int(text.split("DESIGNATED STEP: step ")[1].split(" ")[0])
        return json.dumps({"step_index": step, "score": (n + step) % 2, "evidence": f"step {step} of {case.id}"})
    for marker, metric, levels in (("PROGRESS ALIGNMENT (PA)", "PA", 3), ("OUTCOME COMPLETION (OC)", "OC", 2),
                                   ("CAUSAL PLAUSIBILITY (CP)", "CP", 4), ("VISUAL CONSISTENCY (VC)", "VC", 4)):
        if marker in text:
            if (case.id, metric, model) == ("goal_tiles", "VC", "shuffled"):
                return "It looks consistent enough to me."  # never parseable: a recorded failure
            return "```json\n" + json.dumps({"score": (n + len(metric)) % levels, "evidence": f"{metric} {case.id}"}) + "\n```"
    raise AssertionError("unknown request")


def judge_samples(make_client, run: Path) -> None:
    from worldeval.worldcast.judging.run import run_judge

    for model in ("correct", "shuffled"):
        client = make_client(model)
        run_judge(sample_dataset(), sample_outputs(model), model, run, client, step_accuracy=True, step_scope="all")


# Fields added after the freeze by issue 13 (judge settings, response mode per call); checked apart.
ADDED_FIELDS = ("judge_settings", "response_mode", "sent_options", "step_scope")


def comparable(run: Path) -> list[dict]:
    recs = [json.loads(l) for l in (run / "judgments.jsonl").read_text().splitlines()]
    for r in recs:
        r.pop("latency_s", None)
        assert r.pop("judge_settings") == {"reasoning_effort": None, "temperature": 0.0, "max_tokens": None, "options": {}}
        assert r.pop("response_mode") == "json_schema" and r.pop("sent_options") == {"temperature": 0.0, "seed": 0}
        assert r.pop("step_scope", "all") == "all"
        assert not set(ADDED_FIELDS) & set(r)
    return sorted(recs, key=lambda r: (r["model"], r["case_id"], r["metric"], r["step"] or 0))


def scores(run: Path) -> dict:
    from worldeval.worldcast.scoring.scores import score_runs

    res = json.loads(json.dumps(score_runs([run], step_accuracy=True), sort_keys=True))
    # Added after the freeze by issue 21 (ranks and bootstrap CIs; none without --bootstrap): checked apart.
    assert res.pop("bootstrap") == {"level": 0.95, "replicates": 0, "seed": 0, "strata": "category"}
    ranks = {m: s.pop("rank") for m, s in res["models"].items()}
    assert ranks == {"correct": 2, "shuffled": 1}  # the frozen scores: shuffled's Final is the higher
    for m in res["models"].values():
        assert m.pop("step_accuracy_scope") == ["all"]
        assert all(m.pop(k) is None for k in ("final_ci", "TC_ci", "CP_ci", "VC_ci"))
    return res


def test_prompt_hashes_frozen():
    assert PROMPT_VERSIONS == PROMPT_HASHES


def _loopback_client(srv):
    from worldeval.judge import JudgeClient, JudgeConfig

    def make(model):
        srv.answer = lambda info: scripted_answer(info["text"], model)
        return JudgeClient(JudgeConfig(model="frozen-judge", base_url=srv.base_url, api_key="k", timeout_s=5,
                                       max_attempts=2, backoff_base_s=0.0, backoff_max_s=0.0))
    return make


def test_loopback_run_matches_frozen(tmp_path):

    srv = FakeJudge()
    try:
        judge_samples(_loopback_client(srv), tmp_path / "run")
    finally:
        srv.close()
    got, want = comparable(tmp_path / "run"), json.loads((FROZEN / "judgments.json").read_text())
    assert got == want
    assert scores(tmp_path / "run") == json.loads((FROZEN / "scores.json").read_text())


def test_mock_transport_run_matches_frozen(tmp_path):
    from worldeval.judge import JudgeClient, JudgeConfig, MockTransport

    def make(model):
        transport = MockTransport(lambda req: scripted_answer(req.text, model),
                                  usage={"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110})
        return JudgeClient(JudgeConfig(model="frozen-judge", max_attempts=2, backoff_base_s=0.0, backoff_max_s=0.0),
                           transport=transport)

    judge_samples(make, tmp_path / "run")
    assert comparable(tmp_path / "run") == json.loads((FROZEN / "judgments.json").read_text())
    assert scores(tmp_path / "run") == json.loads((FROZEN / "scores.json").read_text())


if __name__ == "__main__":  # regenerate (only when a change of the numbers is intended and explained)
    import tempfile


    with tempfile.TemporaryDirectory() as d:
        srv = FakeJudge()
        try:
            judge_samples(_loopback_client(srv), Path(d) / "run")
        finally:
            srv.close()
        FROZEN.mkdir(parents=True, exist_ok=True)
        (FROZEN / "judgments.json").write_text(json.dumps(comparable(Path(d) / "run"), indent=1, sort_keys=True) + "\n")
        (FROZEN / "scores.json").write_text(json.dumps(scores(Path(d) / "run"), indent=1, sort_keys=True) + "\n")
