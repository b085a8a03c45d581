"""Cases in the OPIS authors' dataset layout, written from real photos and their instance masks.

`write_official_case` writes what their dataset holds per case (raw.jpg, reference_scene.json with
xyxy boxes, PNG masks under `reference_scene_assets/masks/`, mobility, a 24-d colour histogram as
their embedding, conditions.json or text_prompt.txt), so the readers are tested on the files as the
authors lay them out, not on our own format.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from worldeval.opis.checks.holdout import SHARED_DATA

COCO = SHARED_DATA / "coco_multiobj"
MOBILITY = {
    "static": {"kinematic_class": "rigid", "motion_expectation": "world_static", "evaluation_track": "static_geometry",
               "geometry_eligible": True},
    "dynamic": {"kinematic_class": "deformable", "motion_expectation": "independent_motion",
                "evaluation_track": "dynamic_identity", "geometry_eligible": False},
    "excluded": {"kinematic_class": "unknown", "motion_expectation": "unknown", "evaluation_track": "excluded"},
}  # fmt: skip


def colour_histogram(image: np.ndarray, mask: np.ndarray, bins: int = 8) -> list[float]:
    """A 3 x 8 = 24-d histogram of the masked pixels, L2-normalised (the kind of embedding their files carry)."""
    px = image[mask]
    h = np.concatenate([np.histogram(px[:, c], bins=bins, range=(0, 256))[0] for c in range(3)]).astype(float)
    n = np.linalg.norm(h)
    return [round(float(v), 6) for v in (h / n if n else h)]


def coco_photo(stem: str) -> tuple[np.ndarray, dict[int, np.ndarray], dict[int, str]]:
    """(image, instance masks by palette index, class names) of a shared COCO photo."""
    if not (COCO / "instances.json").is_file():
        pytest.skip(f"shared data {COCO} not present")
    image = np.asarray(Image.open(COCO / "images" / f"{stem}.jpg").convert("RGB"))
    palette = np.asarray(Image.open(COCO / "instance_masks" / f"{stem}.png"))
    names = {int(i["id"]): i["class"] for i in json.loads((COCO / "instances.json").read_text())[stem]["instances"]}
    masks = {k: palette == k for k in names if (palette == k).any()}
    return image, masks, {k: names[k] for k in masks}


def box_xyxy(mask: np.ndarray) -> list[int]:
    ys, xs = np.nonzero(mask)
    return [int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1]


def write_official_case(folder: Path, image: np.ndarray, objects: list[dict], *, prompt: str | None = "the camera pans",
                        duration_s: float | None = None, scene_id: str | None = None) -> Path:
    """One case folder of their layout. Each object: `id`, `category`, `mask`, and `track` one of
    static / dynamic / excluded / None (None: no mobility, unlabeled); optional `attributes`, `ambiguity_group`,
    `mask_path` (False: no mask file, the box stands for it)."""
    folder.mkdir(parents=True, exist_ok=True)
    Image.fromarray(image).save(folder / "raw.jpg", quality=95)
    H, W = image.shape[:2]
    out = []
    for k, o in enumerate(objects):
        meta: dict = {}
        entry = {"object_id": o["id"], "category": o["category"], "bbox": box_xyxy(o["mask"]),
                 "center": [float(v) for v in np.mean(np.argwhere(o["mask"])[:, ::-1], axis=0)],
                 "attributes": o.get("attributes", {"mean_rgb": [float(v) for v in image[o["mask"]].mean(0)]}),
                 "embedding": colour_histogram(image, o["mask"]),
                 "size_signature": {"aspect_ratio": 1.0}, "metadata": meta}
        if o.get("mask_path", True) is not False:
            rel = f"reference_scene_assets/masks/ref_{k:04d}.png"
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(o["mask"].astype(np.uint8) * 255).save(folder / rel)
            meta["mask_path"] = rel
        if o.get("track") is not None:
            meta["mobility"] = dict(MOBILITY[o["track"]])
        if o.get("ambiguity_group") is not None:
            meta["ambiguity_group"] = o["ambiguity_group"]
        out.append(entry)
    scene = {"schema_version": 2, "scene_id": scene_id or folder.name, "objects": out,
             "metadata": {"image_size": [W, H], "source_image_size": [W, H], "processed_image_size": [W, H]}}
    (folder / "reference_scene.json").write_text(json.dumps(scene, indent=1))
    if prompt is not None:
        (folder / "text_prompt.txt").write_text(prompt + "\n")
    if duration_s is not None:
        (folder / "conditions.json").write_text(json.dumps({"shared_memory": {"duration_seconds": duration_s}}))
    return folder


def coco_official_case(root: Path, subcategory: str, stem: str, tracks: dict[int, str | None] | None = None) -> Path:
    """A shared COCO photo as one case of their layout under `root/final/<subcategory>/<stem>`."""
    image, masks, names = coco_photo(stem)
    tracks = tracks or {}
    objects = [{"id": f"ref_{k:04d}", "category": names[k], "mask": m, "track": tracks.get(k, "static")}
               for k, m in masks.items()]
    return write_official_case(root / "final" / subcategory / stem, image, objects)
