"""Structural claims (paper section 4.3): established once from I0 by a VLM, judged per frame later.

`opis annotate --claims` asks the configured judge, for every dynamic instance,
for at most 12 short, localized statements about the object's structure as I0
shows it, each in one family:

- `parts`         which parts it has ("the mug has one handle"),
- `connectivity`  what is attached to what ("the handle joins the body on the right"),
- `local_shape`   the shape of a named part ("the rim is circular"),
- `material`      what a named part is made of / its surface ("the blade is metal").

They go into `case.json` (SPEC section 2, `instances[].claims`). The evaluator
judges them on each matched frame (perception/structure.claims_structure:
supported / contradicted / unknown, confidence >= 0.7). Dynamic instances
only: static ones are measured geometrically (eq. 4). People get claims too,
as the fallback for frames where no pose is found.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from worldeval.errors import InputError
from worldeval.geometry import mask_bbox
from worldeval.judge.client import JudgeClient, JudgeImage
from worldeval.judge.parse import AnswerError
from worldeval.opis.case import load_case
from worldeval.opis.perception.structure import crop
from worldeval.runs import atomic_write_json

FAMILIES = ("parts", "connectivity", "local_shape", "material")
_FAMILY_ALIASES = {"local shape": "local_shape", "shape": "local_shape", "part": "parts", "materials": "material",
                   "connection": "connectivity", "connections": "connectivity"}
MAX_CLAIMS = 12
MAX_CLAIM_CHARS = 200

# Our own wording of the task (the paper's prompts are not reused).
CLAIMS_SYSTEM = (
    "You help check later whether an object kept its physical structure. You see a photo and a crop of one object in it. "
    "Write short factual statements about that object's structure as this photo shows it, each about one place on the object "
    "(name the part: 'the left handle', 'the rear wheel'). Each statement belongs to one family: "
    "'parts' (which parts it has and how many), 'connectivity' (which part is attached to which), "
    "'local_shape' (the shape of a named part), 'material' (what a named part is made of or its surface). "
    "Only state what is clearly visible. Do not describe colour alone, position in the photo, pose, or the camera. "
    'Answer with JSON only: {"claims": [{"family": "...", "text": "..."}, ...]}.'
)


class ClaimsError(InputError, ValueError):
    """A claims request that cannot be made, named by option and field; a ValueError, as it always was."""


def _family(value: Any) -> str | None:
    f = str(value or "").strip().lower().replace("-", " ")
    f = _FAMILY_ALIASES.get(f, f.replace(" ", "_"))
    return f if f in FAMILIES else None


def claims_validator(max_claims: int):
    """Accept 1..any claims with a known family and a non-empty text; keep the first `max_claims`.
    A broken answer raises AnswerError, so the client asks again."""
    def check(obj: dict) -> dict:
        items = obj.get("claims")
        if not isinstance(items, list) or not items:
            raise AnswerError("expected 'claims' to be a non-empty list of objects")
        out = []
        for k, it in enumerate(items):
            if not isinstance(it, dict):
                raise AnswerError(f"claims[{k}] is not an object")
            fam = _family(it.get("family"))
            if fam is None:
                raise AnswerError(f"claims[{k}].family must be one of {FAMILIES}")
            text = " ".join(str(it.get("text") or "").split())
            if not text:
                raise AnswerError(f"claims[{k}].text is empty")
            out.append({"family": fam, "text": text[:MAX_CLAIM_CHARS]})
        return {"claims": out[:max_claims], "offered": len(out)}

    return check


def ask_claims(client: JudgeClient, image: np.ndarray, box, category: str, kinematics: str, max_claims: int = MAX_CLAIMS) -> dict:
    """One judge request for one object: {"claims": [...], "offered": n} or {"error": message}."""
    x, y, w, h = (round(float(v)) for v in box)
    content = [
        f"Object: {category} ({kinematics}), box x={x}, y={y}, w={w}, h={h} in the photo.\n"
        f"Give at most {max_claims} statements, spread over the families that apply to this object.",
        JudgeImage.from_array(image, label="photo"),
        JudgeImage.from_array(crop(image, box, context=0.15), label="object"),
    ]
    ans = client.ask_json(content, validator=claims_validator(max_claims), system=CLAIMS_SYSTEM, prefer_key="claims",
                          cache_extra={"task": "opis-claims", "max_claims": max_claims})
    if not ans.ok:
        return {"error": f"claims judge failed after {ans.attempts} attempt(s): {ans.error}"}
    return ans.parsed


def add_claims(case_dir: str | Path, client: JudgeClient, max_claims: int = MAX_CLAIMS, redo: bool = False, log=lambda m: None) -> dict:
    """Ask for the claims of every dynamic instance of the case in `case_dir` and store them in its case.json.

    Instances that already hold claims are kept unless `redo`; a failed request is recorded under
    `annotation.claims.failures` and the other instances go on (run again to retry the failed ones).
    """
    if not 1 <= max_claims <= MAX_CLAIMS:
        raise ClaimsError("--max-claims", "max_claims", f"must be in 1..{MAX_CLAIMS} (the paper's limit)")
    case = load_case(case_dir, with_geometry=False)
    path = Path(case.root) / "case.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    summary: dict[str, Any] = {"model": client.config.model, "max_claims": max_claims, "objects": {},
                               "failures": []}
    for k, inst in enumerate(case.instances):
        if inst.track != "dynamic" or (inst.claims and not redo):
            continue
        res = ask_claims(client, case.image, case.spec.instances[k].bbox or mask_bbox(case.masks[inst.id]),
                         inst.category, inst.kinematics, max_claims)
        if "error" in res:
            summary["failures"].append({"instance_id": inst.id, "message": res["error"]})
            log(f"claims {inst.id}: {res['error']}")
            continue
        data["instances"][k]["claims"] = res["claims"]
        summary["objects"][inst.id] = {"claims": len(res["claims"]), "offered": res["offered"]}
        log(f"claims {inst.id}: {len(res['claims'])} ({', '.join(sorted({c['family'] for c in res['claims']}))})")
    data.setdefault("annotation", {})["claims"] = summary
    atomic_write_json(path, data)
    return summary


def judge_client(config):
    """The client `opis annotate --claims` asks (a seam: tests hand in an in-process MockTransport here)."""
    return JudgeClient(config)
