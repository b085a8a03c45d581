"""Archives of the OPIS evaluator frozen before the pipeline refactor (issue 9).

`compute(tmp)` evaluates a fixed set of (case, rollout) pairs with the classical
backend: the real DAVIS and CoTracker clips (each on its own video and on the
other one's), a synthetic scene with a pasted copy (the extras route) and a
dynamic instance with structural claims answered by a scripted judge (the
claims route). `tests/opis/test_opis_frozen.py` compares the result with
`tests/data/opis_frozen.json`, written by running this module from the repository root:

    PYTHONPATH=src python -m tests.helpers.frozen_opis

Regenerate only when a change is meant to alter the numbers, and say so.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from tests.helpers.paths import TESTS

FROZEN = TESTS / "data" / "opis_frozen.json"


class ScriptedClaimsJudge:
    """Answers every claims question the same way: the first claim supported, the others contradicted."""

    def ask_json(self, content, validator=None, system=None, prefer_key=None):
        n = sum(1 for line in content[0].splitlines()[2:] if line.strip())
        claims = [{"verdict": "supported" if k == 0 else "contradicted", "confidence": 0.9} for k in range(n)]
        parsed = {"claims": claims}
        if validator is not None:
            parsed = validator(parsed)
        return SimpleNamespace(ok=True, parsed=parsed, attempts=1, error=None)


def _synthetic(root: Path):
    """(case_dir, same video, video with a pasted copy) of a textured object on a textured background."""
    import cv2

    from worldeval.media import write_video
    from worldeval.opis.case import write_case

    rng = np.random.default_rng(0)
    h, w = 144, 192
    img = cv2.GaussianBlur((rng.random((h, w, 3)) * 255).astype(np.uint8), (0, 0), 1.2)
    obj = np.zeros((h, w), bool)
    obj[40:100, 60:120] = True
    pat = (rng.random((60, 60, 3)) * 255).astype(np.uint8)
    pat[..., 0] = np.maximum(pat[..., 0], 180)
    img[40:100, 60:120] = cv2.GaussianBlur(pat, (0, 0), 0.8)
    spec = {"id": "dup", "domain": "synthetic", "subcategory": "tabletop", "image": "input.png",
            "instances": [{"id": "thing", "category": "red box", "kinematics": "rigid", "track": "static"}]}
    write_case(root / "ds" / "dup", spec, img, {"thing": obj})
    claimy = dict(spec, id="claimy", instances=[{
        "id": "thing", "category": "red box", "kinematics": "deformable", "track": "dynamic",
        "claims": [{"family": "parts", "text": "the box has four corners"},
                   {"family": "shape", "text": "the box is square"}]}])
    write_case(root / "ds" / "claimy", claimy, img, {"thing": obj})
    copy = img.copy()
    copy[40:100, 126:186] = img[40:100, 60:120]
    same = write_video(root / "same.mp4", [img] * 30, 10)
    dup = write_video(root / "dup.mp4", [copy] * 30, 10)
    return root / "ds" / "dup", root / "ds" / "claimy", same, dup


NAMES = ("davis", "apple", "apple_on_davis", "davis_on_apple", "dup_same", "dup_copy", "claimy")
REAL = NAMES[:4]


def pairs(tmp: Path, only=None) -> list[tuple[str, Path, Path, object]]:
    """(name, case_dir, video, judge) of every frozen evaluation (or of those named in `only`)."""
    from tests.helpers.opis_clips import build_apple, build_davis

    only = set(NAMES if only is None else only)
    out = []
    if only & set(REAL):
        davis_case, davis_video = build_davis(tmp)
        apple_case, apple_video = build_apple(tmp)
        out += [
            ("davis", davis_case, davis_video, None),
            ("apple", apple_case, apple_video, None),
            ("apple_on_davis", apple_case, davis_video, None),
            ("davis_on_apple", davis_case, apple_video, None),
        ]
    if only - set(REAL):
        dup_case, claimy_case, same, dup = _synthetic(tmp / "synthetic")
        out += [
            ("dup_same", dup_case, same, None),
            ("dup_copy", dup_case, dup, None),
            ("claimy", claimy_case, same, ScriptedClaimsJudge()),
        ]
    return [p for p in out if p[0] in only]


def _plain(v):
    if isinstance(v, (np.bool_, bool)):
        return bool(v)
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return None if math.isnan(v) else float(v)
    return v


def compute(tmp: Path, only=None) -> dict:
    """{name: {"rows": [...], "frames": [...]}} with rows sorted by (frame, instance, extra).

    Frames are measured one at a time, so the comparison does not depend on thread
    scheduling. (A static structure value was once seen to differ in the 4th
    decimal under heavy CPU load, before `media.write_video` fixed x264's thread
    count; the rollouts written here are now byte-identical run to run, and the
    cause of that one difference was not established.)
    """
    import os

    old = os.environ.get("WORLDEVAL_FRAME_THREADS")
    os.environ["WORLDEVAL_FRAME_THREADS"] = "1"
    try:
        return _compute(tmp, only)
    finally:
        if old is None:
            os.environ.pop("WORLDEVAL_FRAME_THREADS", None)
        else:
            os.environ["WORLDEVAL_FRAME_THREADS"] = old


def _compute(tmp: Path, only) -> dict:
    from worldeval.opis.case import load_case
    from worldeval.opis.evaluate import EvalConfig, evaluate_rollout, load_backend

    backend = load_backend("classical")
    out = {}
    for name, case_dir, video, judge in pairs(tmp, only):
        res = evaluate_rollout(load_case(case_dir), video, "frozen", backend, EvalConfig(), judge=judge)
        rows = [{k: _plain(v) for k, v in r.items()} for r in res.rows.to_dict("records")]
        rows.sort(key=lambda r: (r["frame"], r["instance_id"] or "", r["extra"], json.dumps(r, sort_keys=True)))
        out[name] = {"rows": rows, "frames": res.frames["frames"]}
    return out


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data = compute(Path(tmp))
    FROZEN.parent.mkdir(parents=True, exist_ok=True)
    FROZEN.write_text(json.dumps(data, indent=None, sort_keys=True, separators=(",", ":")) + "\n")
    print(f"wrote {FROZEN} ({FROZEN.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
