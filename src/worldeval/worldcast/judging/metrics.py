"""The WorldCast judge metrics, one spec object each, and the one Final formula (SPEC section 5).

A `JudgeMetric` says everything judging, scoring and the report need about a
metric: its score levels, its rubric and answer contract (hence its prompt
hash), which generated images the judge sees, how an answer is validated,
which score dimension it feeds and with what weight. Code iterates over
`METRICS` instead of keeping parallel tables.

Final = (100/3) * (0.4 * 3*TC + 0.4 * CP + 0.2 * VC), where
TC = (1 - w_o) * PA/2 + w_o * OC (OC only when w_o > 0, else TC = PA/2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from worldeval.judge.parse import AnswerError, score_validator
from worldeval.worldcast.inputs.cases import WorldCastCase
from worldeval.worldcast.judging import prompts as P

SEES = ("sequence", "final", "designated_step")
# Which cases get designated-step checks. "paper": the four-step cases without an endpoint reference image
# (section 4.3.2: the per-step curve over 195 such cases); "all": every case, every generated state.
STEP_SCOPES = ("paper", "all")
PAPER_STEP_COUNT = 4


@dataclass(frozen=True)
class Dimension:
    """A reported score dimension: its weight in Final and its top value (TC is 0-1, CP and VC 0-3)."""

    key: str
    weight: float
    top: int
    scale: int  # factor bringing the dimension onto the 0-3 scale of the Final formula


DIMENSIONS = {"TC": Dimension("TC", 0.4, 1, 3), "CP": Dimension("CP", 0.4, 3, 1), "VC": Dimension("VC", 0.2, 3, 1)}


@dataclass(frozen=True)
class JudgeMetric:
    key: str
    name: str
    levels: tuple[int, ...]
    rubric: str
    contract: str
    sees: str  # "sequence": every state; "final": the last state only; "designated_step": one state and its plan
    dimension: str | None  # the score dimension it feeds (None: reported on its own, as step accuracy)
    outcome_only: bool = False  # asked only for cases with outcome_weight > 0

    @property
    def top(self) -> int:
        return max(self.levels)

    @property
    def per_step(self) -> bool:
        return self.sees == "designated_step"

    @property
    def prompt_hash(self) -> str:
        return P.prompt_version(self.rubric, self.contract)

    def rubric_text(self) -> str:
        return self.rubric + "\n" + P.COMMON

    def asked_for(self, case: WorldCastCase, step_scope: str = "paper") -> bool:
        if self.per_step:
            return step_case(case, step_scope)
        return case.outcome_weight > 0 if self.outcome_only else True

    def final_weight(self, outcome_weight: float = 0.0) -> float:
        """Weight of this metric's score, as a fraction of its top level, in Final/100 (the weights sum to 1)."""
        if self.dimension is None:
            return 0.0
        w = DIMENSIONS[self.dimension].weight
        if self.dimension != "TC":
            return w
        return w * (outcome_weight if self.outcome_only else 1 - outcome_weight)

    def validator(self, step: int | None = None) -> Callable[[dict], dict]:
        return score_validator(self.levels, _step_check(step) if self.per_step else None)

    def answer_schema(self, step: int | None = None) -> dict:
        """JSON schema of the answer contract, for endpoints with structured output."""
        props: dict[str, Any] = {"score": {"type": "integer", "enum": list(self.levels)}, "evidence": {"type": "string"}}
        if self.per_step:
            props = {"step_index": {"type": "integer", "enum": [step]}, **props}
        return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}

    def contract_text(self, step: int | None = None) -> str:
        if self.per_step:
            return self.contract.format(step=step)
        return self.contract.format(levels=", ".join(str(v) for v in self.levels))


def step_case(case: WorldCastCase, scope: str = "paper") -> bool:
    """Whether `case` gets designated-step checks under `scope` (see STEP_SCOPES)."""
    if scope not in STEP_SCOPES:
        raise ValueError(f"step scope must be one of {STEP_SCOPES}, not {scope!r}")
    return scope == "all" or (case.steps == PAPER_STEP_COUNT and not case.has_endpoint_reference)


def _step_check(step: int | None):
    def extra(obj: dict) -> None:
        # A judge that scores another step than the one shown is answering the wrong question.
        si = obj.get("step_index", step)
        try:
            si = int(si)
        except (TypeError, ValueError):
            si = None
        if si != step:
            raise AnswerError(f"step_index {obj.get('step_index')!r} does not match the designated step {step}")

    return extra


METRICS: dict[str, JudgeMetric] = {m.key: m for m in (
    JudgeMetric("PA", "Progress Alignment", (0, 1, 2), P.RUBRICS["PA"], P.SCORE_CONTRACT, "sequence", "TC"),
    JudgeMetric("OC", "Outcome Completion", (0, 1), P.RUBRICS["OC"], P.SCORE_CONTRACT, "final", "TC", outcome_only=True),
    JudgeMetric("CP", "Causal Plausibility", (0, 1, 2, 3), P.RUBRICS["CP"], P.SCORE_CONTRACT, "sequence", "CP"),
    JudgeMetric("VC", "Visual Consistency", (0, 1, 2, 3), P.RUBRICS["VC"], P.SCORE_CONTRACT, "sequence", "VC"),
    JudgeMetric("STEP", "Designated-Step Accuracy", (0, 1), P.RUBRICS["STEP"], P.STEP_CONTRACT, "designated_step", None),
)}
CASE_METRICS = tuple(k for k, m in METRICS.items() if not m.per_step)  # the ones a case score is made of
PROMPT_VERSIONS = {k: m.prompt_hash for k, m in METRICS.items()}


def task_completion(pa: int | None, oc: int | None, outcome_weight: float) -> float | None:
    if pa is None:
        return None
    w = outcome_weight
    if w > 0:
        if oc is None:
            return None
        return (1 - w) * pa / 2 + w * oc
    return pa / 2


def final_score(tc: float | None, cp: int | None, vc: int | None) -> float | None:
    """The one Final formula; None when any dimension is unknown (a failure is never a 0)."""
    values = {"TC": tc, "CP": cp, "VC": vc}
    if any(v is None for v in values.values()):
        return None
    return (100.0 / 3.0) * sum(d.weight * d.scale * values[k] for k, d in DIMENSIONS.items())


def case_final(scores: dict[str, int | None], outcome_weight: float) -> float | None:
    """Final of one case from its metric scores ({"PA": 2, "OC": 1, "CP": 3, "VC": 2})."""
    return final_score(task_completion(scores.get("PA"), scores.get("OC"), outcome_weight), scores.get("CP"),
                       scores.get("VC"))


def build_judge_content(metric: str | JudgeMetric, case: WorldCastCase, images: list, plans: list | None = None,
                        step: int | None = None, image_loader=None) -> list[Any]:
    """Content parts (text and images, in order) of one judge request.

    `images` are the generated states in order (paths or already-loaded images);
    `image_loader` turns a path into what the judge client sends.
    """
    spec = METRICS[metric] if isinstance(metric, str) else metric
    load = image_loader or (lambda p: p)
    parts: list[Any] = [spec.rubric_text()]
    parts.append(f"TEXT INSTRUCTION (what the generator was asked to do):\n{case.instruction.strip()}")
    if case.hints:
        parts.append("JUDGE-ONLY HINTS:\n" + "\n".join(f"- {h.strip()}" for h in case.hints))
    else:
        parts.append("JUDGE-ONLY HINTS: (none for this case)")
    if case.images:
        parts.append(f"REFERENCE AND INITIAL IMAGES ({len(case.images)}), given to the generator as input:")
        for i, ref in enumerate(case.images, start=1):
            parts.append(f"Reference image {i} (role: {ref.role.replace('_', ' ')}):")
            parts.append(load(ref.path))
    else:
        parts.append("REFERENCE AND INITIAL IMAGES: (none; the task is given by text only)")
    parts += _generated_parts(spec, case, images, plans, step, load)
    parts.append(spec.contract_text(step))
    return parts


def _generated_parts(spec: JudgeMetric, case: WorldCastCase, images: list, plans, step, load) -> list[Any]:
    n = len(images)
    if spec.sees == "final":
        return ["FINAL GENERATED IMAGE (the last state only; the intermediate states are deliberately withheld):",
                load(images[-1])]
    if spec.sees == "designated_step":
        if step is None or not 1 <= step <= n:
            raise ValueError(f"designated step {step!r} outside 1..{n}")
        plan = (plans or [None] * n)[step - 1]
        return [f"DESIGNATED STEP: step {step} of {n} requested states.",
                "TEXT PLAN THE GENERATOR PAIRED WITH THIS STEP:\n" + (plan.strip() if plan else "(no text plan was provided)"),
                f"DESIGNATED GENERATED IMAGE (step {step}):", load(images[step - 1])]
    parts: list[Any] = [f"GENERATED SEQUENCE: {n} states, in order. The task asked for {case.steps}."]
    for k, im in enumerate(images, start=1):
        parts += [f"Generated state {k} of {n}:", load(im)]
    return parts
