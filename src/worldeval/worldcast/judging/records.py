"""`judgments.jsonl`: the WorldCast seam between judging and scoring (SPEC section 5).

One line per judge call on an item (model, case, metric[, step]). A rerun
appends, so the latest line of an item wins. Every line is a JSON object:

    model, case_id, category, level, outcome_weight   what was judged
    metric, metric_name, step                         which judge question (step only for STEP)
    judge_model, prompt_hash, interface               who asked what, on which output interface
    judge_settings                                    reasoning_effort, temperature, max_tokens, options asked for
    response_mode, sent_options                       json_schema | json_object | text, and the options actually
                                                      sent on the last attempt (after refusals were learned)
    status "ok" | "failed", score, evidence           the result (score null when failed, never 0)
    raw, error, attempt_errors, attempts, latency_s,  the call log
    usage, cached, request_hash, n_states, warnings

Reading validates every line and names the file, the line and the field of a
problem. Only a torn last line (a crash in the middle of an append) is
skipped, since the rerun that follows redoes that item.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from worldeval.runs import append_jsonl
from worldeval.worldcast.inputs.cases import CATEGORY_LEVEL, MAX_OUTCOME_WEIGHT
from worldeval.worldcast.inputs.errors import LineError
from worldeval.worldcast.judging.metrics import METRICS

JUDGMENTS = "judgments.jsonl"
STATUSES = ("ok", "failed")
_OPTIONAL_TYPES: dict[str, tuple] = {
    "judge_model": (str,), "prompt_hash": (str,), "error": (str, type(None)), "evidence": (str, type(None)),
    "raw": (str, type(None)), "attempts": (int,), "latency_s": (int, float), "usage": (dict,), "cached": (bool,),
    "request_hash": (str, type(None)), "n_states": (int,), "warnings": (list,), "attempt_errors": (list,),
    "interface": (str, type(None)), "metric_name": (str,), "judge_settings": (dict,),
    "response_mode": (str, type(None)), "sent_options": (dict,), "step_scope": (str,),
}


class JudgmentError(LineError):
    """A `judgments.jsonl` line that breaks the record contract; names file, line and field."""

    unnamed = "judgment record"


def item_key(rec: dict) -> tuple:
    return (rec["model"], rec["case_id"], rec["metric"], rec.get("step"))


def latest_records(records: list[dict]) -> dict[tuple, dict]:
    """The latest record of every item (a rerun's line replaces an earlier one)."""
    out: dict[tuple, dict] = {}
    for r in records:
        if {"model", "case_id", "metric"} <= r.keys():
            out[item_key(r)] = r
    return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def validate_record(rec: Any, path: str | Path | None = None, line: int | None = None) -> dict:
    """Check one record against the contract; returns it unchanged or raises `JudgmentError`."""
    def bad(field: str | None, reason: str) -> JudgmentError:
        return JudgmentError(path, line, field, reason)

    if not isinstance(rec, dict):
        raise bad(None, f"expected a JSON object, got {type(rec).__name__}")
    for key in ("model", "case_id", "category", "metric", "status"):
        if key not in rec:
            raise bad(key, "missing (a required field)")
    if rec["status"] == "ok" and "score" not in rec:
        raise bad("score", "missing (an ok record needs its score)")
    for key in ("model", "case_id"):
        if not isinstance(rec.get(key), str) or not rec[key]:
            raise bad(key, f"must be a non-empty string (got {rec.get(key)!r})")
    if rec.get("category") not in CATEGORY_LEVEL:
        raise bad("category", f"unknown category {rec.get('category')!r}")
    if "level" in rec and rec["level"] not in (None, CATEGORY_LEVEL[rec["category"]]):
        raise bad("level", f"category {rec['category']} is level {CATEGORY_LEVEL[rec['category']]}, not {rec['level']!r}")
    ow = rec.get("outcome_weight", 0.0)
    if ow is not None and (isinstance(ow, bool) or not isinstance(ow, (int, float)) or not 0 <= ow <= MAX_OUTCOME_WEIGHT):
        raise bad("outcome_weight", f"must be a number in [0, {MAX_OUTCOME_WEIGHT}] (got {ow!r})")
    spec = METRICS.get(rec.get("metric"))
    if spec is None:
        raise bad("metric", f"unknown metric {rec.get('metric')!r}; expected one of {list(METRICS)}")
    step = rec.get("step")
    if spec.per_step and (not _is_int(step) or step < 1):
        raise bad("step", f"a {spec.key} record needs a step index >= 1 (got {step!r})")
    if not spec.per_step and step is not None:
        raise bad("step", f"a {spec.key} record has no step (got {step!r})")
    if rec.get("status") not in STATUSES:
        raise bad("status", f"must be one of {list(STATUSES)} (got {rec.get('status')!r})")
    score = rec.get("score")
    if rec["status"] == "ok" and (not _is_int(score) or score not in spec.levels):
        raise bad("score", f"an ok {spec.key} record needs an integer score in {list(spec.levels)} (got {score!r})")
    if rec["status"] == "failed" and score is not None:
        raise bad("score", f"a failed record has no score (got {score!r}); a failure is never a score")
    for key, types in _OPTIONAL_TYPES.items():
        if key in rec and not isinstance(rec[key], types):
            raise bad(key, f"has type {type(rec[key]).__name__}")
    return rec


def read_judgments(path: str | Path) -> list[dict]:
    """Every record of one `judgments.jsonl`, validated, in file order."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found")
    lines = path.read_text(encoding="utf-8").splitlines()
    last = max((i for i, t in enumerate(lines) if t.strip()), default=-1)
    out = []
    for i, text in enumerate(lines):
        if not text.strip():
            continue
        try:
            rec = json.loads(text)
        except json.JSONDecodeError as exc:
            if i == last:
                continue  # torn by a crash mid-append; the rerun redoes that item
            raise JudgmentError(path, i + 1, None, f"invalid JSON: {exc.msg} at column {exc.colno}") from None
        out.append(validate_record(rec, path, i + 1))
    return out


def append_judgment(path: str | Path, rec: dict, writer=None) -> None:
    """Validate, then append one record (fsynced, or through `writer`, a `runs.JsonlAppender`), so a bad
    record fails where it is made."""
    if writer is not None:
        writer.append(validate_record(rec, path))
    else:
        append_jsonl(path, validate_record(rec, path))


def judgment_base(model: str, case, metric: str, step: int | None, judge_model: str, interface: str | None,
                  judge_settings: dict | None = None) -> dict:
    spec = METRICS[metric]
    rec = {
        "model": model, "case_id": case.id, "category": case.category, "level": case.level,
        "outcome_weight": case.outcome_weight, "metric": metric, "metric_name": spec.name,
        "step": step, "judge_model": judge_model, "prompt_hash": spec.prompt_hash, "interface": interface,
    }
    if judge_settings is not None:
        rec["judge_settings"] = judge_settings
    return rec


def failure_fields(error: str) -> dict:
    """The result fields of an item that failed before any judge answer (bad output, a bug)."""
    return {"status": "failed", "score": None, "evidence": None, "raw": None, "error": error, "attempts": 0,
            "latency_s": 0.0, "usage": {}, "cached": False, "request_hash": None}


def answer_fields(answer) -> dict:
    """The result fields of one `JudgeAnswer`."""
    return {
        "status": "ok" if answer.ok else "failed",
        "score": answer.parsed["score"] if answer.ok else None,
        "evidence": answer.parsed.get("evidence") if answer.ok else None,
        "raw": answer.raw,
        "error": answer.error,
        "attempt_errors": answer.errors,
        "attempts": answer.attempts,
        "latency_s": round(answer.latency_s, 4),
        "usage": answer.usage,
        "cached": answer.cached,
        "request_hash": answer.request_hash,
        "response_mode": answer.response_mode,
        "sent_options": answer.sent,
    }
