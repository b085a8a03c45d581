"""A judge script file: scripted answers for `--judge-transport mock --judge-script FILE`.

The file is one JSON object:

    {"label": "what these answers are (shown in the manifest and the report)",
     "rules": [
        {"match": {"model": "correct", "case_id": "phys_ball_drop", "metric": "PA"},
         "answer": {"score": 2, "evidence": "..."}},
        {"match": {"metric": "VC"}, "answer": "text exactly as a model would write it"},
        {"match": {"case_id": "goal_tiles"}, "http_status": 503}
     ],
     "default": {"score": 0, "evidence": "..."}}

A request takes the answer of the first rule whose every `match` field equals the
request's own (`model`, `case_id`, `metric`, `step`; `text` is a substring of the
prompt text). `answer` is a reply object (sent as its JSON text) or a string (the
raw reply); `http_status` makes the wire fail with that status instead. Without a
matching rule the `default` answers; with no default that request is an error
naming the request. Problems in the file are errors naming the file and field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from worldeval.judge.mock import MockTransport
from worldeval.judge.transport import JudgeHTTPError, JudgeRequest

MATCH_FIELDS = ("model", "case_id", "metric", "step", "text")


class JudgeScriptError(ValueError):
    def __init__(self, path: str | Path, field: str | None, reason: str):
        self.path, self.field, self.reason = str(path), field, reason
        super().__init__(f"{path}" + (f" field '{field}'" if field else "") + f": {reason}")


def _check_answer(path: Path, where: str, rule: dict) -> None:
    has_answer, has_status = "answer" in rule, "http_status" in rule
    if has_answer == has_status:
        raise JudgeScriptError(path, where, "needs exactly one of 'answer' or 'http_status'"
                               + (" (missing)" if not has_answer else ""))
    if has_answer and not isinstance(rule["answer"], (str, dict)):
        raise JudgeScriptError(path, f"{where}.answer", f"must be an object or a string, not {type(rule['answer']).__name__}")
    if has_status:
        st = rule["http_status"]
        if isinstance(st, bool) or not isinstance(st, int) or not 400 <= st <= 599:
            raise JudgeScriptError(path, f"{where}.http_status", f"must be an HTTP error status 400-599 (got {st!r})")


def _check_rule(path: Path, i: int, rule: Any) -> dict:
    where = f"rules[{i}]"
    if not isinstance(rule, dict):
        raise JudgeScriptError(path, where, f"must be an object, not {type(rule).__name__}")
    match = rule.get("match", {})
    if not isinstance(match, dict):
        raise JudgeScriptError(path, f"{where}.match", "must be an object")
    unknown = sorted(set(match) - set(MATCH_FIELDS))
    if unknown:
        raise JudgeScriptError(path, f"{where}.match", f"unknown key(s) {unknown}; known: {', '.join(MATCH_FIELDS)}")
    _check_answer(path, where, rule)
    return rule


def load_judge_script(path: str | Path) -> "ScriptedJudge":
    path = Path(path)
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise JudgeScriptError(path, None, "file not found") from None
    except json.JSONDecodeError as exc:
        raise JudgeScriptError(path, None, f"invalid JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(obj, dict):
        raise JudgeScriptError(path, None, "must be a JSON object with 'rules'")
    if "rules" not in obj:
        raise JudgeScriptError(path, "rules", "missing")
    if not isinstance(obj["rules"], list):
        raise JudgeScriptError(path, "rules", f"must be a list, not {type(obj['rules']).__name__}")
    rules = [_check_rule(path, i, r) for i, r in enumerate(obj["rules"])]
    default = obj.get("default")
    if default is not None and not isinstance(default, (str, dict)):
        raise JudgeScriptError(path, "default", "must be an object or a string")
    label = obj.get("label", "scripted answers")
    if not isinstance(label, str):
        raise JudgeScriptError(path, "label", "must be a string")
    return ScriptedJudge(path, rules, default, label)


class ScriptedJudge:
    """The callable a `MockTransport` runs: answers by the request's meta and text, from the rules."""

    def __init__(self, path: Path, rules: list[dict], default, label: str):
        self.path, self.rules, self.default, self.label = Path(path), rules, default, label

    def describe(self) -> dict:
        return {"script": str(self.path.resolve()), "label": self.label, "rules": len(self.rules), "scripted": True}

    def _matches(self, match: dict, request: JudgeRequest) -> bool:
        for k, v in match.items():
            if k == "text":
                if str(v) not in request.text:
                    return False
            elif request.meta.get(k) != v:
                return False
        return True

    def __call__(self, request: JudgeRequest):
        for rule in self.rules:
            if self._matches(rule.get("match", {}), request):
                if "http_status" in rule:
                    raise JudgeHTTPError(rule["http_status"], f"scripted failure from {self.path.name}")
                return rule["answer"]
        if self.default is not None:
            return self.default
        what = ", ".join(f"{k}={request.meta[k]!r}" for k in ("model", "case_id", "metric", "step") if k in request.meta)
        raise LookupError(f"{self.path}: no rule matches the request ({what or request.text[:80]!r}) and no 'default'")


class ScriptTransport(MockTransport):
    """The mock transport of a script file; its manifest entry names the script and says it is scripted."""

    def __init__(self, scripted: ScriptedJudge):
        super().__init__(scripted)
        self.scripted = scripted

    def describe(self) -> dict:
        return {"name": self.name, **self.scripted.describe()}
