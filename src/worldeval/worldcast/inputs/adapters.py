"""Output adapters: every generation interface becomes the same ordered K states.

`<outputs>/<case_id>/` holds one of (SPEC section 4):
  * `step_1.png ... step_K.png` (+ optional `plan.json`, the text paired with each step),
  * `grid.png` (+ optional `grid.json`), cut into cells,
  * `video.mp4`, reduced to K keyframes by a keyframe selector.
Grid cells and keyframes are written under the run folder
(`states/<model>/<case_id>/step_k.*` with `adapter.json`), so what the judge
saw can be inspected later.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from worldeval.media import MediaError, read_image
from worldeval.runs import atomic_write_bytes, atomic_write_json
from worldeval.worldcast.inputs.cases import WorldCastCase
from worldeval.worldcast.inputs.errors import PathError
from worldeval.worldcast.inputs.grid import GridError, cut_grid, layout_for
from worldeval.worldcast.inputs.keyframes import ChangePointSelector, KeyframeError, KeyframeSelector, write_keyframes

IMAGE_EXTS = (".png", ".jpg", ".jpeg", ".webp")
VIDEO_NAMES = ("video.mp4", "video.webm", "video.mov", "video.mkv")
_STEP = re.compile(r"^step_(\d+)\.(png|jpg|jpeg|webp)$", re.IGNORECASE)


class OutputError(PathError):
    """A model output that cannot be read as K states, named by its file or folder."""


@dataclass
class StepSequence:
    case_id: str
    interface: str  # "steps" | "grid" | "video"
    images: list[Path]
    plans: list[str | None]
    record: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def read_plan(path: Path, n: int) -> list[str | None]:
    """plan.json as a list of strings, {"steps": [...]}, or {"1": "...", ...}."""
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise OutputError(path, f"invalid JSON: {exc.msg}") from None
    if isinstance(obj, dict) and "steps" in obj:
        obj = obj["steps"]
    if isinstance(obj, dict):
        plans: list[str | None] = [None] * n
        for k, v in obj.items():
            if not str(k).isdigit() or not (1 <= int(k) <= n):
                raise OutputError(path, f"key {k!r} is not a step number in 1..{n}")
            plans[int(k) - 1] = v
        obj = plans
    if not isinstance(obj, list):
        raise OutputError(path, "expected a list of step texts, {\"steps\": [...]} or {\"1\": text, ...}")
    out = []
    for i, v in enumerate(obj):
        if isinstance(v, dict):
            v = v.get("text", v.get("plan"))
        if v is not None and not isinstance(v, str):
            raise OutputError(path, f"step {i + 1}: plan text must be a string")
        out.append(v)
    if len(out) != n:
        raise OutputError(path, f"has {len(out)} step texts but the output has {n} step images")
    return out


def step_images(case_dir: Path) -> list[Path]:
    """The interleaved output's `step_k` image files of `case_dir`, in step order ([] when there are none).

    Two files for one step, or steps not numbered 1..N without gaps, are an OutputError naming the folder.
    """
    found: dict[int, Path] = {}
    for p in case_dir.iterdir():
        m = _STEP.match(p.name)
        if m and p.is_file():
            k = int(m.group(1))
            if k in found:
                raise OutputError(p, f"two files for step {k} ({found[k].name} and {p.name})")
            found[k] = p
    if not found:
        return []
    ks = sorted(found)
    if ks != list(range(1, len(ks) + 1)):
        missing = sorted(set(range(1, max(ks) + 1)) - set(ks))
        raise OutputError(case_dir, f"step images must be numbered 1..N without gaps; missing step(s) {missing}")
    return [found[k] for k in ks]


def _save_png(arr: np.ndarray, path: Path) -> None:
    from PIL import Image
    import io

    buf = io.BytesIO()
    # default compression: the cell's bytes are part of every request hash (and the frozen answers)
    Image.fromarray(arr).save(buf, format="PNG")
    atomic_write_bytes(path, buf.getvalue(), fsync=False)


def adapt_output(case: WorldCastCase, outputs: str | Path, states_dir: str | Path, keyframe_selector: KeyframeSelector | None = None) -> StepSequence:
    """The ordered states of one model output; raises OutputError/GridError/KeyframeError with the file named."""
    case_dir = Path(outputs) / case.id
    states_dir = Path(states_dir)
    if not case_dir.is_dir():
        raise OutputError(case_dir, "no output folder for this case")
    steps = step_images(case_dir)
    grid = next((case_dir / n for n in ("grid.png", "grid.jpg", "grid.jpeg", "grid.webp") if (case_dir / n).is_file()), None)
    video = next((case_dir / n for n in VIDEO_NAMES if (case_dir / n).is_file()), None)
    kinds = [k for k, v in (("steps", steps), ("grid", grid), ("video", video)) if v]
    if not kinds:
        raise OutputError(case_dir, "found no step_k images, grid.png or video.mp4")
    if len(kinds) > 1:
        raise OutputError(case_dir, f"holds more than one output kind ({', '.join(kinds)}); keep exactly one")
    warnings: list[str] = []
    if steps:
        for p in steps:
            try:
                read_image(p)
            except ValueError as exc:
                raise OutputError(p, str(exc).split(": ", 1)[-1]) from None
        if len(steps) != case.steps:
            # Judged as produced: a missing or extra state is the model's error, for the judge to see.
            warnings.append(f"case asks for {case.steps} steps, output has {len(steps)}")
        plan_path = case_dir / "plan.json"
        plans = read_plan(plan_path, len(steps)) if plan_path.is_file() else [None] * len(steps)
        return StepSequence(case.id, "steps", steps, plans, {"interface": "steps", "files": [p.name for p in steps]}, warnings)
    if grid is not None:
        (rows, cols), source = layout_for(case_dir, case.steps)
        try:
            img = read_image(grid)
        except ValueError as exc:
            raise OutputError(grid, str(exc).split(": ", 1)[-1]) from None
        cells, rec = cut_grid(img, rows, cols, grid)
        paths = []
        for k, cell in enumerate(cells, start=1):
            p = states_dir / f"step_{k}.png"
            _save_png(cell, p)
            paths.append(p)
        record = {"interface": "grid", "source": grid.name, "layout_source": source, **rec}
        atomic_write_json(states_dir / "adapter.json", record, fsync=False)  # re-made by every rerun
        return StepSequence(case.id, "grid", paths, [None] * len(paths), record, warnings)
    # video
    selector = keyframe_selector or ChangePointSelector()
    try:
        sel = selector.select(video, case.steps, case)
        paths = write_keyframes(sel, states_dir)
    except MediaError as exc:
        raise KeyframeError(video, str(exc)) from exc
    record = {"interface": "video", "source": video.name, "selection": sel.to_json()}
    record["selection"]["params"] = {k: v for k, v in sel.params.items() if k != "raw"}
    atomic_write_json(states_dir / "adapter.json", record)
    warnings += sel.warnings  # e.g. a keyframe pass that fell back
    return StepSequence(case.id, "video", paths, [None] * len(paths), record, warnings)
