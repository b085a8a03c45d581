"""Cases and rollouts built from the real clips in ../shared/data (never copied into the repo)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tests.helpers.paths import SHARED_DATA

DATA = SHARED_DATA
DAVIS = DATA / "davis_bmx_trees"
APPLE = DATA / "cotracker_apple"


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"test data not available: {path}")
    return path


def _png(path: Path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im)


def davis_frames() -> list[np.ndarray]:
    from worldeval.media import read_image

    return [read_image(p) for p in sorted((need(DAVIS) / "frames").glob("*.jpg"))]


def davis_union_mask(index: int) -> np.ndarray:
    return _png(DAVIS / "masks_union_davis2016" / f"{index:05d}.png") > 127


def build_davis(tmp: Path) -> tuple[Path, Path]:
    """(case_dir, video): first frame as I0 with the rider and bike masks, the 80 frames at 24 fps.

    SOURCE.md lists 1=rider, 2=bike, but the palette PNG holds the bicycle
    (wheels, frame) under label 1 and the person under label 2: checked by
    overlaying both on frame 0 (label 2 is the tall upright shape on the saddle).
    """
    from worldeval.media import write_video
    from worldeval.opis.case import write_case

    frames = davis_frames()
    labels = _png(DAVIS / "first_frame_instances_davis2017.png")
    masks = {"rider": labels == 2, "bike": labels == 1}
    spec = {
        "id": "davis_bmx_trees",
        "domain": "real_world",
        "subcategory": "outdoor",
        "image": "input.png",
        "instruction": "a rider on a bmx bike rides along a graffiti wall behind trees",
        "instances": [
            {"id": "rider", "category": "person", "kinematics": "articulated", "track": "dynamic"},
            {"id": "bike", "category": "bicycle", "kinematics": "articulated", "track": "dynamic"},
        ],
    }
    case_dir = tmp / "davis" / "davis_bmx_trees"
    write_case(case_dir, spec, frames[0], masks)
    video = write_video(tmp / "davis_rollouts" / "davis_bmx_trees.mp4", frames, 24)
    return case_dir, video


def build_apple(tmp: Path) -> tuple[Path, Path]:
    """(case_dir, video): first decoded frame as I0 with the given apple mask, the clip itself as the rollout."""
    import shutil

    from worldeval.media import decode_frames
    from worldeval.opis.case import write_case

    need(APPLE)
    first = decode_frames(APPLE / "apple.mp4", indices=[0]).frames[0]
    mask = _png(APPLE / "apple_mask.png")
    if mask.ndim == 3:
        mask = mask[..., 0]
    spec = {
        "id": "cotracker_apple",
        "domain": "real_world",
        "subcategory": "tabletop",
        "image": "input.png",
        "instances": [{"id": "apple", "category": "red apple", "kinematics": "rigid", "track": "static"}],
    }
    case_dir = tmp / "apple" / "cotracker_apple"
    write_case(case_dir, spec, first, {"apple": mask > 127})
    vdir = tmp / "apple_rollouts"
    vdir.mkdir(parents=True, exist_ok=True)
    video = vdir / "cotracker_apple.mp4"
    shutil.copyfile(APPLE / "apple.mp4", video)
    return case_dir, video
