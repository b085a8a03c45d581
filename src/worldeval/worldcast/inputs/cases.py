"""WorldCast cases (`<dataset>/cases.jsonl`, SPEC section 4) with validation.

Every problem is a `CaseError` (`worldeval.errors`, the one case error of both
benchmarks) naming the file, the line and the field, so a dataset author can fix
it without guessing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from worldeval.errors import CaseError

L3_CATEGORIES = ("observation_conditioned_transitions", "physical_simulation", "adaptive_task_completion")
L4_CATEGORIES = (
    "visual_cues", "physical_properties", "visual_goal_realization", "logic_and_rules", "in_context_procedural_learning",
)
CATEGORY_ORDER = L3_CATEGORIES + L4_CATEGORIES
CATEGORY_LEVEL = {**{c: "L3" for c in L3_CATEGORIES}, **{c: "L4" for c in L4_CATEGORIES}}
CATEGORY_TITLE = {
    "observation_conditioned_transitions": "Observation-Conditioned Transitions",
    "physical_simulation": "Physical Simulation",
    "adaptive_task_completion": "Adaptive Task Completion",
    "visual_cues": "Visual Cues",
    "physical_properties": "Physical Properties",
    "visual_goal_realization": "Visual Goal Realization",
    "logic_and_rules": "Logic and Rules",
    "in_context_procedural_learning": "In-Context Procedural Learning",
}
# The column heads of the tables and the report, where the titles are too wide.
CATEGORY_SHORT = {
    "observation_conditioned_transitions": "ObsCond", "physical_simulation": "PhysSim",
    "adaptive_task_completion": "Adaptive", "visual_cues": "VisCues", "physical_properties": "PhysProp",
    "visual_goal_realization": "VisGoal", "logic_and_rules": "Logic", "in_context_procedural_learning": "InCtxProc",
}
MAX_OUTCOME_WEIGHT = 0.5
# Image roles that show the end state itself ("a direct endpoint reference" in the paper's step analysis).
ENDPOINT_ROLE_WORDS = frozenset({"goal", "target", "final", "end", "endpoint"})
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_KNOWN = {"id", "category", "level", "instruction", "images", "steps", "hints", "outcome_weight"}


@dataclass(frozen=True)
class ReferenceImage:
    path: Path  # absolute
    rel: str
    role: str


@dataclass
class WorldCastCase:
    id: str
    category: str
    level: str
    instruction: str
    images: list[ReferenceImage]
    steps: int
    hints: list[str] = field(default_factory=list)
    outcome_weight: float = 0.0
    line: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def has_endpoint_reference(self) -> bool:
        """Whether an input image shows the requested end state (role goal_state, target, final_state, ...)."""
        return any(ENDPOINT_ROLE_WORDS & set(re.split(r"[^a-z]+", im.role.lower())) for im in self.images)


def _parse_case(obj: object, path: Path, line: int, root: Path) -> WorldCastCase:
    def err(fld: str | None, reason: str) -> CaseError:
        return CaseError(path, fld, reason, line=line)

    if not isinstance(obj, dict):
        raise err(None, f"expected a JSON object, got {type(obj).__name__}")
    for required in ("id", "category", "instruction", "steps"):
        if required not in obj:
            raise err(required, "missing (a required field)")
    cid = obj.get("id")
    if not isinstance(cid, str) or not _ID.match(cid):
        raise err("id", f"must be a non-empty name of letters, digits, '_', '-', '.' (got {cid!r})")
    category = obj.get("category")
    if category not in CATEGORY_LEVEL:
        raise err("category", f"unknown category {category!r}; expected one of {sorted(CATEGORY_LEVEL)}")
    level = obj.get("level", CATEGORY_LEVEL[category])
    if level != CATEGORY_LEVEL[category]:
        raise err("level", f"category {category} is level {CATEGORY_LEVEL[category]}, not {level!r}")
    instruction = obj.get("instruction")
    if not isinstance(instruction, str) or not instruction.strip():
        raise err("instruction", "must be a non-empty string")
    steps = obj.get("steps")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise err("steps", f"must be an integer >= 1 (got {steps!r})")
    hints = obj.get("hints", [])
    if hints is None:
        hints = []
    if not isinstance(hints, list) or not all(isinstance(h, str) for h in hints):
        raise err("hints", "must be a list of strings")
    ow = obj.get("outcome_weight", 0.0)
    if isinstance(ow, bool) or not isinstance(ow, (int, float)) or not (0.0 <= float(ow) <= MAX_OUTCOME_WEIGHT):
        raise err("outcome_weight", f"must be a number in [0, {MAX_OUTCOME_WEIGHT}] (got {ow!r})")
    images_raw = obj.get("images", [])
    if not isinstance(images_raw, list):
        raise err("images", "must be a list of {path, role} objects")
    images = []
    resolved_root = root.resolve()
    for i, im in enumerate(images_raw):
        fld = f"images[{i}]"
        if isinstance(im, str):
            im = {"path": im, "role": "reference"}
        if not isinstance(im, dict) or not isinstance(im.get("path"), str) or not im["path"]:
            raise err(fld, "must be an object with a 'path' string")
        role = im.get("role", "reference")
        if not isinstance(role, str) or not role:
            raise err(f"{fld}.role", "must be a non-empty string")
        rel = im["path"]
        if Path(rel).is_absolute():
            raise err(f"{fld}.path", f"{rel!r} must be relative to the dataset folder")
        p = (root / rel).resolve()
        try:
            p.relative_to(resolved_root)
        except ValueError:
            raise err(f"{fld}.path", f"{rel!r} points outside the dataset folder") from None
        if not p.is_file():
            raise err(f"{fld}.path", f"{rel!r} does not exist under {root}")
        images.append(ReferenceImage(p, rel, role))
    extra = {k: v for k, v in obj.items() if k not in _KNOWN}
    return WorldCastCase(cid, category, level, instruction, images, steps, list(hints), float(ow), line, extra)


def load_cases(dataset: str | Path) -> list[WorldCastCase]:
    """All cases of `<dataset>/cases.jsonl` in file order; the first problem raises `CaseError`."""
    root = Path(dataset)
    path = root / "cases.jsonl"
    if not path.is_file():
        raise CaseError(path, None, "cases.jsonl not found (a WorldCast dataset is a folder holding it)")
    cases: list[WorldCastCase] = []
    seen: dict[str, int] = {}
    with open(path, encoding="utf-8") as fh:
        for n, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise CaseError(path, None, f"invalid JSON: {exc.msg} at column {exc.colno}", line=n) from None
            case = _parse_case(obj, path, n, root)
            if case.id in seen:
                raise CaseError(path, "id", f"duplicate id {case.id!r} (first on line {seen[case.id]})", line=n)
            seen[case.id] = n
            cases.append(case)
    if not cases:
        raise CaseError(path, None, "no cases")
    return cases
