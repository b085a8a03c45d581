"""Build OPIS cases (SPEC section 2) from the `coco_multiobj` sample of COCO photos.

The source folder holds, per image id: `images/<id>.jpg`, a palette PNG
`instance_masks/<id>.png` (0 = background, k = instance k of `instances.json`,
larger instances painted first so each value is the instance's *visible*
pixels) and `instances.json` (`{id: {"size": [W, H], "instances": [{"id",
"class", "area_frac"}]}}`).

One case per image. Every annotated instance with visible pixels enters the
reference inventory. COCO carries no mobility labels, so the routing is a
documented rule: people and animals are articulated and go to the dynamic
track; every other category is a rigid object on the static track (what is on a
table or a couch in these photos does not move by itself). No `geometry.npz`
is written: there is no measured depth for these photos and inventing one would
be dishonest, so the evaluator falls back to its flat (homography) geometry,
which is exact for the pure-rotation rollouts that `opis validate` synthesises.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from worldeval.errors import CaseError
from worldeval.opis.case import DEFAULT_FPS, read_json, write_case
from worldeval.opis.labels import COCO_ANIMALS, COCO_PEOPLE
from worldeval.runs import atomic_write_json

# COCO-80 categories that move by themselves; everything else is treated as a static rigid object.
PEOPLE, ANIMALS = COCO_PEOPLE, COCO_ANIMALS

DOMAIN = "real_world"
SUBCATEGORY = "coco_multiobj"

# The pan-and-return camera that `opis validate` synthesises (see synth.PanTrajectory); written into
# each case so a camera-conditioned model is asked for the same motion.
PAN_YAW_DEG = 12.0
PAN_PITCH_DEG = 3.0
PAN_DURATION_S = 5.0
PAN_FPS = DEFAULT_FPS


def routing(category: str) -> tuple[str, str]:
    """(kinematics, track) for a COCO class name."""
    name = category.strip().lower().replace(" ", "_")
    if name in PEOPLE or name in ANIMALS:
        return "articulated", "dynamic"
    return "rigid", "static"


def pan_camera_task(
    yaw_deg: float = PAN_YAW_DEG,
    pitch_deg: float = PAN_PITCH_DEG,
    duration_s: float = PAN_DURATION_S,
    fps: float = PAN_FPS,
    step_s: float = 0.25,
) -> dict[str, Any]:
    """Keyframes of the smooth pan-and-return (raised-cosine profile) sampled every `step_s`."""
    keyframes = []
    n = int(round(duration_s / step_s))
    for k in range(n + 1):
        t = min(duration_s, k * step_s)
        s = 0.5 * (1.0 - math.cos(2.0 * math.pi * t / duration_s))
        keyframes.append({"t": round(t, 4), "yaw_deg": round(yaw_deg * s, 4), "pitch_deg": round(pitch_deg * s, 4)})
    return {
        "description": f"the camera turns right by {yaw_deg:g} degrees and up by {pitch_deg:g} degrees, "
        f"then returns to the starting view; no translation",
        "duration_s": duration_s,
        "fps": fps,
        "keyframes": keyframes,
    }


def _load_index(src: Path) -> dict[str, Any]:
    path = src / "instances.json"
    index = read_json(path)
    if not isinstance(index, dict) or not index:
        raise CaseError(path, "instances.json", "must be a non-empty object keyed by image id")
    return index


def build_case(src: Path, image_id: str, entry: dict[str, Any], out_dir: Path) -> Path:
    """Write one case folder for COCO image `image_id`; returns the case folder."""
    from PIL import Image

    index_path = src / "instances.json"
    img_path = src / "images" / f"{image_id}.jpg"
    mask_path = src / "instance_masks" / f"{image_id}.png"
    for p in (img_path, mask_path):
        if not p.exists():
            raise CaseError(p, image_id, "file not found")
    with Image.open(img_path) as im:
        image = np.asarray(im.convert("RGB"))
    with Image.open(mask_path) as im:
        if im.mode not in ("P", "L"):
            raise CaseError(mask_path, "mode", f"expected a palette/greyscale label PNG, got mode {im.mode}")
        labels = np.asarray(im)
    H, W = image.shape[:2]
    if labels.shape != (H, W):
        raise CaseError(mask_path, "size", f"label map is {labels.shape[1]}x{labels.shape[0]} but the image is {W}x{H}")
    size = entry.get("size")
    if size is not None and list(size) != [W, H]:
        raise CaseError(index_path, f"{image_id}.size", f"says {size} but the image is [{W}, {H}]")
    items = entry.get("instances")
    if not isinstance(items, list) or not items:
        raise CaseError(index_path, f"{image_id}.instances", "must be a non-empty list")

    instances, masks = [], {}
    for k, item in enumerate(items):
        try:
            label, cls = int(item["id"]), str(item["class"])
        except (KeyError, TypeError, ValueError) as exc:
            raise CaseError(index_path, f"{image_id}.instances[{k}]", f"needs integer 'id' and 'class': {exc}") from exc
        mask = labels == label
        if not mask.any():
            continue  # entirely painted over by a smaller instance: nothing of it is visible in I0
        kinematics, track = routing(cls)
        iid = f"obj_{label:03d}"
        instances.append(
            {
                "id": iid,
                "category": cls.replace("_", " "),
                "kinematics": kinematics,
                "track": track,
                "source": {"label": label, "area_frac": float(mask.mean())},
            }
        )
        masks[iid] = mask
    if not instances:
        raise CaseError(mask_path, image_id, "no instance has visible pixels")

    cats = sorted({i["category"] for i in instances})
    spec = {
        "id": f"coco_{image_id}",
        "domain": DOMAIN,
        "subcategory": SUBCATEGORY,
        "image": "input.png",
        "instruction": (
            "A still scene with " + ", ".join(cats) + ". The camera slowly turns right and a little up, "
            "then comes back to the starting view. Nothing in the scene moves."
        ),
        "camera_task": pan_camera_task(),
        "instances": instances,
        "source": {
            "dataset": "coco_multiobj",
            "image": f"images/{image_id}.jpg",
            "masks": f"instance_masks/{image_id}.png",
            "note": "COCO train2017 photo and instance polygons; see the dataset's SOURCE.md for licences",
        },
    }
    case_dir = out_dir / spec["id"]
    write_case(case_dir, spec, image, masks, geometry=None, image_name="input.png")
    return case_dir


def build_coco_dataset(src: str | Path, out: str | Path, image_ids: list[str] | None = None) -> list[Path]:
    """Build every case of `src` (or the given image ids) under `out`, plus `dataset.json`."""
    src, out = Path(src), Path(out)
    index = _load_index(src)
    ids = sorted(index) if image_ids is None else list(image_ids)
    for i in ids:
        if i not in index:
            raise CaseError(src / "instances.json", i, "image id not in the index")
    out.mkdir(parents=True, exist_ok=True)
    dirs = [build_case(src, i, index[i], out) for i in ids]
    atomic_write_json(
        out / "dataset.json",
        {"name": "coco_multiobj", "version": "1", "cases": [d.name for d in dirs]},
    )
    return dirs
