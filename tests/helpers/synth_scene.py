"""A small textured scene with three annotated objects (disc, square, person) for the synthesis, claims and
validate tests."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from worldeval.opis.case import Case, load_case, write_case

H_IMG, W_IMG = 240, 320


def synth_scene(seed: int = 0):
    """A textured background with a red disc (target-sized), a blue square and a 'person' blob."""
    rng = np.random.default_rng(seed)
    noise = rng.normal(0, 1, (H_IMG // 8, W_IMG // 8, 3))
    bg = cv2.resize(noise, (W_IMG, H_IMG), interpolation=cv2.INTER_CUBIC)
    img = np.clip(140 + 25 * bg, 0, 255).astype(np.uint8)
    yy, xx = np.mgrid[0:H_IMG, 0:W_IMG]
    disc = (xx - 150) ** 2 + (yy - 110) ** 2 <= 26**2
    square = (xx >= 230) & (xx < 270) & (yy >= 40) & (yy < 80)
    person = (xx - 60) ** 2 / 15**2 + (yy - 150) ** 2 / 45**2 <= 1
    # red disc with a darker ring so it has structure, blue square, skin-toned person
    img[disc] = [200, 30, 30]
    img[disc & ((xx - 150) ** 2 + (yy - 110) ** 2 <= 12**2)] = [120, 20, 20]
    img[square] = [30, 40, 190]
    img[person] = [210, 170, 140]
    masks = {"disc": disc, "square": square, "person": person}
    return img, masks


def synth_case(tmp_path: Path, seed: int = 0, name: str = "synthcase") -> Case:
    img, masks = synth_scene(seed)
    spec = {
        "id": name,
        "domain": "test",
        "subcategory": "synthetic",
        "image": "input.png",
        "instances": [
            {"id": "disc", "category": "red disc", "kinematics": "rigid", "track": "static"},
            {"id": "square", "category": "blue box", "kinematics": "rigid", "track": "static"},
            {"id": "person", "category": "person", "kinematics": "articulated", "track": "dynamic"},
        ],
    }
    write_case(tmp_path / name, spec, img, masks)
    return load_case(tmp_path / name)
