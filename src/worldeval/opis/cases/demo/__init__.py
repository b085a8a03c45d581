"""The demo benchmark: real photos bundled with scikit-image, annotated by this project.

`cases.json` (next to this file) holds hand-drawn object boxes and noun phrases
for a few of `skimage.data`'s sample photos. `build_demo_dataset` turns them
into OPIS case folders with `worldeval.opis.cases.annotate` (GrabCut masks), fully
offline: the photos ship inside the installed scikit-image package.

The motorcycle photo is the left view of a Middlebury stereo pair and comes
with its disparity map; its depth is Z = f * B / (d + doffs) with the pair's
calibration scaled to the bundled resolution (approximate, in metres). The
other photos use the flat fallback, and their camera tasks are rotations,
which need no depth.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any, Callable

import numpy as np

from worldeval.opis.cases.annotate import AnnotateSpec, ObjectPrompt, annotate
from worldeval.opis.case import Geometry
from worldeval.runs import atomic_write_json

# Middlebury 2014 "Motorcycle" calibration (full resolution 2964 px wide), scaled by 1/4 to skimage's copy.
_STEREO_FULL = {"f": 3979.911, "cx": 1244.772, "cy": 1019.507, "baseline_m": 0.193001, "doffs": 124.343}
_STEREO_SCALE = 0.25


def demo_spec() -> dict[str, Any]:
    return json.loads(resources.files("worldeval.opis.cases.demo").joinpath("cases.json").read_text(encoding="utf-8"))


def load_photo(name: str) -> np.ndarray:
    """An RGB photo bundled with scikit-image (no download)."""
    import skimage.data as data

    if name == "motorcycle_left":
        image = data.stereo_motorcycle()[0]
    else:
        fn = getattr(data, name, None)
        if fn is None:
            raise ValueError(f"scikit-image has no bundled photo {name!r}")
        image = fn()
    image = np.asarray(image)
    if image.ndim == 2:
        image = np.stack([image] * 3, axis=-1)
    return np.ascontiguousarray(image[..., :3].astype(np.uint8))


def stereo_geometry() -> Geometry:
    """Metric depth of `motorcycle_left` from the bundled disparity map."""
    import skimage.data as data

    _, _, disp = data.stereo_motorcycle()
    disp = np.asarray(disp, dtype=np.float64)
    s = _STEREO_SCALE
    f, doffs = _STEREO_FULL["f"] * s, _STEREO_FULL["doffs"] * s
    valid = np.isfinite(disp) & (disp > 0)
    depth = np.where(valid, f * _STEREO_FULL["baseline_m"] / (np.where(valid, disp, 0) + doffs), 0.0)
    K = np.array([[f, 0, _STEREO_FULL["cx"] * s], [0, f, _STEREO_FULL["cy"] * s], [0, 0, 1]], dtype=np.float64)
    fill = float(np.median(depth[valid]))
    return Geometry(depth=np.where(valid, depth, fill).astype(np.float32), K=K, valid=valid)


def build_demo_dataset(out: str | Path, on_case: Callable[[str], None] | None = None,
                       cases: list[str] | None = None, embeddings: bool = False) -> Path:
    """Write the demo dataset (dataset.json + one folder per case) under `out`; returns `out`."""
    spec = demo_spec()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ids = []
    for entry in spec["cases"]:
        if cases and entry["id"] not in cases:
            continue
        prompts = [ObjectPrompt(**o) for o in entry["objects"]]
        aspec = AnnotateSpec(
            objects=prompts,
            case_id=entry["id"],
            domain=entry["domain"],
            subcategory=entry["subcategory"],
            camera=entry.get("camera", "pan-right-return"),
            camera_amount=entry.get("camera_amount"),
            duration_s=float(spec["duration_s"]),
            fps=float(spec["fps"]),
            max_side=int(spec["max_side"]),
            instruction=entry.get("instruction"),
            embeddings=embeddings,
        )
        geometry = (stereo_geometry(), "stereo:middlebury-motorcycle") if entry.get("depth") == "stereo" else None
        annotate(load_photo(entry["photo"]), aspec, out / entry["id"], geometry=geometry)
        ids.append(entry["id"])
        if on_case:
            on_case(entry["id"])
    atomic_write_json(out / "dataset.json", {"name": spec["name"], "version": spec["version"], "cases": ids})
    return out
