"""A one-object synthetic case (textured background, one textured red box) for the run_eval and `opis eval` tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from worldeval.opis.case import write_case


def one_object_scene(seed: int = 0, h: int = 144, w: int = 192):
    """A textured background with one textured object (enough keypoints for SIFT on both)."""
    rng = np.random.default_rng(seed)
    import cv2

    bg = cv2.GaussianBlur((rng.random((h, w, 3)) * 255).astype(np.uint8), (0, 0), 1.2)
    img = bg.copy()
    obj = np.zeros((h, w), bool)
    obj[40:100, 60:120] = True
    pat = (rng.random((60, 60, 3)) * 255).astype(np.uint8)
    pat[..., 0] = np.maximum(pat[..., 0], 180)  # reddish object
    img[40:100, 60:120] = cv2.GaussianBlur(pat, (0, 0), 0.8)
    return img, obj


def one_object_case(root: Path, cid: str, track="static", claims=None, bad_mask=False):
    img, obj = one_object_scene()
    inst = {"id": "thing", "category": "red box", "kinematics": "rigid" if track == "static" else "deformable", "track": track}
    if claims:
        inst["claims"] = claims
    spec = {"id": cid, "domain": "synthetic", "subcategory": "tabletop", "image": "input.png", "instances": [inst]}
    write_case(root / cid, spec, img, {"thing": obj})
    if bad_mask:
        data = json.loads((root / cid / "case.json").read_text())
        data["instances"][0]["mask"]["size"] = [10, 10]
        (root / cid / "case.json").write_text(json.dumps(data))
    return img
