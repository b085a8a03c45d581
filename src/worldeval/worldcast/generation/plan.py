"""Language-side helpers of the generation harness: the per-step plan and the step inspection.

* The plan (prompt enhancer, Plan & Iterate, agentic harness): an LLM turns
  the user's task and reference images into one concrete description per
  requested state (`{"steps": [...]}`, exactly K strings).
* The inspection (agentic harness): a VLM compares one generated step with
  its planned state and the previous state and says whether to regenerate,
  with a corrected instruction. It steers generation only; scores come from
  the judge, never from here.

Both are asked through `JudgeClient` (chat completions, JSON answers,
retries); neither ever sees the case's judge-only hints, which are not even
passed to these functions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from worldeval.judge.client import JudgeClient, JudgeImage
from worldeval.judge.parse import AnswerError, coerce_int
from worldeval.worldcast.inputs.cases import WorldCastCase

PLAN_PROMPT = """You write the shot list for an image generator that must show a process as {k} ordered images.

Read the user's task and study any reference images. Then describe each of the {k} states the images must show,
in order. For every state say what is visible: which objects, how many, where they are, what has changed since the
previous state and what stays the same (identity, count, viewpoint, background, style). Reason about the physics,
rules or logic of the task so that each state follows from the one before and the last state meets the goal.
Describe scenes, not pictures of text: the images must not carry step numbers, captions, arrows or other guide
marks unless the task itself asks for visible text.

USER TASK:
{task}
"""

PLAN_CONTRACT = """Answer with one JSON object only:
{{"steps": ["state 1 ...", "state 2 ...", ...], "notes": "anything the generator should keep in mind"}}
"steps" must hold exactly {k} non-empty strings, one per state, in order."""

INSPECT_PROMPT = """You review one image made for state {k} of {n} of a planned image sequence, to decide whether it
should be generated again. You are not grading the model; you only check this image against its plan.

Check: does the candidate show the planned state (objects, counts, positions, the change this state needs)?
Does it keep what the earlier state and the references fix (same objects, viewpoint, background, style) except
for the planned change? Does it avoid captions, step numbers, arrows or guide marks the task did not ask for?

USER TASK:
{task}

PLANNED STATE {k} OF {n}:
{plan}
"""

INSPECT_CONTRACT = """Answer with one JSON object only:
{"score": <2 if the image shows the planned state, 1 if it is close but has a fixable problem, 0 if it is wrong>,
 "problems": "what is wrong, or an empty string",
 "revised_prompt": "an instruction for generating this state again that fixes the problems (empty when score is 2)"}"""


def _references(case: WorldCastCase, max_side: int | None) -> list[Any]:
    parts: list[Any] = []
    if case.images:
        parts.append(f"REFERENCE IMAGES ({len(case.images)}), the task's inputs:")
        for i, ref in enumerate(case.images, start=1):
            parts.append(f"Reference {i} ({ref.role.replace('_', ' ')}):")
            parts.append(JudgeImage.from_path(ref.path, max_side))
    return parts


def plan_validator(k: int):
    def validate(obj: dict) -> dict:
        steps = obj.get("steps")
        if not isinstance(steps, list) or len(steps) != k:
            raise AnswerError(f"'steps' must be a list of exactly {k} entries")
        out = []
        for i, s in enumerate(steps):
            if isinstance(s, dict):
                s = s.get("description", s.get("text"))
            if not isinstance(s, str) or not s.strip():
                raise AnswerError(f"steps[{i}] must be a non-empty string")
            out.append(s.strip())
        notes = obj.get("notes", "")
        return {"steps": out, "notes": notes if isinstance(notes, str) else json.dumps(notes)}

    return validate


def make_plan(client: JudgeClient, case: WorldCastCase) -> dict:
    """{"steps": [K texts], "notes", "model", "attempts", "raw"}; a failed answer raises PlanError."""
    content = [PLAN_PROMPT.format(k=case.steps, task=case.instruction.strip()), *_references(case, 1024),
               PLAN_CONTRACT.format(k=case.steps)]
    ans = client.ask_json(content, validator=plan_validator(case.steps), prefer_key="steps",
                          cache_extra={"purpose": "generation_plan", "k": case.steps})
    if not ans.ok:
        raise PlanError(f"plan from {client.config.model!r} failed after {ans.attempts} attempt(s): {ans.error}")
    return {**ans.parsed, "model": client.config.model, "attempts": ans.attempts, "raw": ans.raw}


class PlanError(ValueError):
    """The planning or enhancing LLM gave no usable plan."""


def with_plan(prompt: str, plan: list[str] | None) -> str:
    if not plan:
        return prompt
    lines = "\n".join(f"{i}. {t}" for i, t in enumerate(plan, start=1))
    return f"{prompt}\n\nPlanned states, in order:\n{lines}"


def step_prompt(case: WorldCastCase, plan: list[str], k: int, revision: str | None = None) -> str:
    """The images-API instruction for state k: the task, this state's plan, and what the inputs are."""
    n = len(plan)
    parts = [case.instruction.strip(), "", f"Generate state {k} of {n} of this process. It must show: {plan[k - 1]}"]
    if k > 1:
        parts.append(f"The first input image is state {k - 1}. Keep everything this state does not change (objects, "
                     "counts, viewpoint, background, style) and change only what this state requires.")
    elif case.images:
        parts.append("The input images are the task's own references; the scene starts from them.")
    parts.append("Draw no step numbers, captions, arrows or guide marks unless the task asks for visible text.")
    if revision:
        parts.append(f"A review of an earlier attempt at this state asked for this correction: {revision}")
    return "\n".join(parts)


def inspect_validator(obj: dict) -> dict:
    score = coerce_int(obj.get("score"), "score")
    if score not in (0, 1, 2):
        raise AnswerError(f"score {score} outside 0..2")
    problems = obj.get("problems", "")
    revised = obj.get("revised_prompt", "")
    return {"score": score, "problems": problems if isinstance(problems, str) else json.dumps(problems),
            "revised_prompt": revised if isinstance(revised, str) else json.dumps(revised)}


def inspect_step(client: JudgeClient, case: WorldCastCase, plan: list[str], k: int,
                 previous: Path | None, candidate: Path) -> dict:
    """The inspector's verdict on one candidate: {"ok", "score", "problems", "revised_prompt", "attempts", ...}."""
    content: list[Any] = [INSPECT_PROMPT.format(k=k, n=len(plan), task=case.instruction.strip(), plan=plan[k - 1])]
    content += _references(case, 1024)
    if previous is not None:
        content += [f"EARLIER STATE {k - 1} (already chosen):", JudgeImage.from_path(previous, 1024)]
    content += [f"CANDIDATE FOR STATE {k}:", JudgeImage.from_path(candidate, 1024), INSPECT_CONTRACT]
    ans = client.ask_json(content, validator=inspect_validator, cache_extra={"purpose": "generation_inspection", "k": k})
    rec = {"ok": ans.ok, "model": client.config.model, "attempts": ans.attempts, "raw": ans.raw, "error": ans.error}
    if ans.ok:
        rec.update(ans.parsed)
    return rec
