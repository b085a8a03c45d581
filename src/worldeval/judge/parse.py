"""Getting one JSON object out of whatever a judge model wrote.

Servers without a JSON response mode (and some with it) wrap the object in a
Markdown fence or surround it with prose, so parsing tries, in order: the
whole text, fenced blocks, then every embedded `{...}` that decodes. An answer
with no decodable object is an `AnswerError`, which the client treats as
retryable, never as a score.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Iterable

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)


class AnswerError(ValueError):
    """The judge's answer has no usable JSON object or breaks the answer contract."""


def _objects_in(text: str) -> list[dict]:
    decoder = json.JSONDecoder()
    found = []
    i = text.find("{")
    while i != -1:
        try:
            obj, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            i = text.find("{", i + 1)
            continue
        if isinstance(obj, dict):
            found.append(obj)
        i = text.find("{", end)
    return found


def extract_json(text: str | None, prefer_key: str | None = "score") -> dict:
    """The JSON object in `text`; when several appear, the last one holding `prefer_key` wins.

    The last one, because models that reason before answering tend to restate
    the final object at the end (an inspect-challenge-revise answer may show an
    initial object and then the revised one).
    """
    if text is None or not str(text).strip():
        raise AnswerError("empty answer")
    text = str(text).strip()
    try:
        obj = json.loads(text)
        if isinstance(obj, dict):
            return obj
    except json.JSONDecodeError:
        pass
    candidates: list[dict] = []
    for block in _FENCE.findall(text):
        candidates.extend(_objects_in(block))
    if not candidates:
        candidates = _objects_in(text)
    if not candidates:
        raise AnswerError("no JSON object in the answer")
    if prefer_key:
        keyed = [c for c in candidates if prefer_key in c]
        if keyed:
            return keyed[-1]
    return candidates[-1]


def coerce_int(value: Any, field: str) -> int:
    """An integer score from 2, 2.0 or "2"; anything else is an AnswerError."""
    if isinstance(value, bool):
        raise AnswerError(f"{field} is a boolean, expected an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    raise AnswerError(f"{field}={value!r} is not an integer")


def score_validator(allowed: Iterable[int], extra: Callable[[dict], None] | None = None) -> Callable[[dict], dict]:
    """Validator for the `{"score": int, "evidence": str}` contract with scores restricted to `allowed`."""
    allowed = tuple(sorted(set(int(a) for a in allowed)))

    def validate(obj: dict) -> dict:
        if "score" not in obj:
            raise AnswerError("answer has no 'score' field")
        score = coerce_int(obj["score"], "score")
        if score not in allowed:
            raise AnswerError(f"score {score} outside the allowed levels {list(allowed)}")
        evidence = obj.get("evidence", "")
        if evidence is None:
            evidence = ""
        if not isinstance(evidence, str):
            evidence = json.dumps(evidence, ensure_ascii=False)
        out = dict(obj)
        out["score"] = score
        out["evidence"] = evidence
        if extra is not None:
            extra(out)
        return out

    validate.allowed = allowed  # type: ignore[attr-defined]
    return validate
