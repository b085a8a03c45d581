"""Every WorldCast error about user input is a `worldeval.errors.InputError` that keeps its message."""

from __future__ import annotations

import json
import pickle

import pytest

from worldeval.errors import CaseError, InputError
from worldeval.worldcast.analysis.keyframe_agreement import HumanSelectionError, read_human_dir
from worldeval.worldcast.analysis.validity import VoteError, agreement
from worldeval.worldcast.inputs.adapters import OutputError
from worldeval.worldcast.inputs.cases import load_cases
from worldeval.worldcast.inputs.grid import GridError
from worldeval.worldcast.inputs.keyframes import KeyframeError
from worldeval.worldcast.judging.records import JudgmentError, validate_record
from worldeval.worldcast.judging.run import JudgeInputError, check_inputs
from worldeval.worldcast.samples import sample_dataset

# (error, what str() says, file, field, reason)
CASES = [
    (JudgmentError(None, None, "score", "must be an integer"), "judgment record field 'score': must be an integer",
     "judgment record", "score", "must be an integer"),
    (VoteError("votes.jsonl", 2, "winner", "bad"), "votes.jsonl vote 2 field 'winner': bad", "votes.jsonl", "winner", "bad"),
    (OutputError("out/c1", "no output folder for this case"), "out/c1: no output folder for this case", "out/c1", None,
     "no output folder for this case"),
    (GridError("out/c1/grid.png", "not 2x2"), "out/c1/grid.png: not 2x2", "out/c1/grid.png", None, "not 2x2"),
    (KeyframeError("v.mp4", "too short"), "v.mp4: too short", "v.mp4", None, "too short"),
    (HumanSelectionError("h/a/c1.json", "invalid JSON"), "h/a/c1.json: invalid JSON", "h/a/c1.json", None, "invalid JSON"),
    (JudgeInputError("--outputs out", "does not exist"), "--outputs out: does not exist", "--outputs out", None,
     "does not exist"),
]


def test_one_case_error_for_both_benchmarks(tmp_path):
    (tmp_path / "cases.jsonl").write_text('{"id": "a", "category": "visual_cues", "instruction": "x", "steps": 0}\n')
    with pytest.raises(CaseError) as exc:
        load_cases(tmp_path)
    e = exc.value
    assert isinstance(e, InputError) and isinstance(e, ValueError)
    assert (e.file, e.line, e.field) == (str(tmp_path / "cases.jsonl"), 1, "steps")
    assert str(e) == f"{tmp_path / 'cases.jsonl'} line 1 field 'steps': must be an integer >= 1 (got 0)"
    with pytest.raises(CaseError, match=r"cases.jsonl: cases.jsonl not found"):
        load_cases(tmp_path / "nowhere")


@pytest.mark.parametrize("exc, text, file, field, reason", CASES, ids=[type(c[0]).__name__ for c in CASES])
def test_input_errors_keep_their_message_and_name_file_and_field(exc, text, file, field, reason):
    assert isinstance(exc, InputError) and isinstance(exc, ValueError)
    assert (str(exc), exc.file, exc.field, exc.reason) == (text, file, field, reason)
    back = pickle.loads(pickle.dumps(exc))  # a worker's error reaches the writer whole
    assert type(back) is type(exc) and (str(back), back.file, back.field, back.reason) == (text, file, field, reason)


def test_raised_where_the_input_is_read(tmp_path):
    with pytest.raises(InputError, match="field 'status'"):
        validate_record({"model": "m", "case_id": "c", "category": "visual_cues", "metric": "PA", "status": "?"})
    with pytest.raises(InputError, match="--outputs .*does not exist"):
        check_inputs(load_cases(sample_dataset()), tmp_path / "missing")
    (tmp_path / "human" / "ann").mkdir(parents=True)
    (tmp_path / "human" / "ann" / "c1.json").write_text("{")
    with pytest.raises(InputError, match="invalid JSON"):
        read_human_dir(tmp_path / "human")
    votes = tmp_path / "votes.jsonl"
    votes.write_text(json.dumps({"case_id": "c", "model_a": "a", "model_b": "b", "winner": "maybe"}) + "\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "judgments.jsonl").write_text("")
    with pytest.raises(InputError, match=r"votes.jsonl vote 1 field 'winner'"):
        agreement([tmp_path / "run"], votes)
