"""The `judgments.jsonl` record contract: validation names file, line and field; torn last line; append checks."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from worldeval.cli import app
from worldeval.worldcast.judging.records import JudgmentError, append_judgment, read_judgments, validate_record

GOOD = {"model": "m", "case_id": "c1", "category": "physical_simulation", "level": "L3", "outcome_weight": 0.0,
        "metric": "CP", "step": None, "status": "ok", "score": 2, "judge_model": "j", "prompt_hash": "x"}


@pytest.mark.parametrize("change,field,words", [
    ({"metric": "XX"}, "metric", "unknown metric"),
    ({"score": 4}, "score", "integer score in [0, 1, 2, 3]"),
    ({"score": True}, "score", "integer score"),
    ({"status": "failed"}, "score", "never a score"),
    ({"status": "maybe"}, "status", "must be one of"),
    ({"category": "cooking"}, "category", "unknown category"),
    ({"level": "L4"}, "level", "is level L3"),
    ({"outcome_weight": 0.7}, "outcome_weight", "[0, 0.5]"),
    ({"metric": "STEP", "score": 1}, "step", "needs a step index"),
    ({"step": 2}, "step", "has no step"),
    ({"model": ""}, "model", "non-empty string"),
    ({"attempts": "3"}, "attempts", "has type str"),
])
def test_validation_names_the_field(change, field, words):
    with pytest.raises(JudgmentError) as exc:
        validate_record({**GOOD, **change}, "run/judgments.jsonl", 7)
    assert exc.value.field == field and exc.value.line == 7
    assert str(exc.value).startswith(f"run/judgments.jsonl line 7 field '{field}': ") and words in str(exc.value)


def test_read_skips_only_a_torn_last_line(tmp_path):
    path = tmp_path / "judgments.jsonl"
    append_judgment(path, GOOD)
    append_judgment(path, {**GOOD, "metric": "STEP", "step": 1, "score": 0})
    with open(path, "a") as fh:
        fh.write('{"model": "m", "case_')  # a crash mid-append
    recs = read_judgments(path)
    assert [r["metric"] for r in recs] == ["CP", "STEP"]
    # the same torn text in the middle of the file is corruption, not a crash artefact
    with open(path, "a") as fh:
        fh.write("\n" + json.dumps(GOOD) + "\n")
    with pytest.raises(JudgmentError, match=r"line 3: invalid JSON"):
        read_judgments(path)


def test_append_refuses_a_bad_record(tmp_path):
    path = tmp_path / "judgments.jsonl"
    with pytest.raises(JudgmentError, match="field 'score'"):
        append_judgment(path, {**GOOD, "score": 9})
    assert not path.exists()


def test_score_cli_names_file_line_and_field(tmp_path):
    run = tmp_path / "run"
    append_judgment(run / "judgments.jsonl", GOOD)
    with open(run / "judgments.jsonl", "a") as fh:
        fh.write(json.dumps({**GOOD, "metric": "PA", "score": 5}) + "\n")
    res = CliRunner().invoke(app, ["worldcast", "score", str(run), "--json"])
    assert res.exit_code == 2
    assert "judgments.jsonl line 2 field 'score'" in res.output and "[0, 1, 2]" in res.output
