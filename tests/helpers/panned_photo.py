"""A real photo panned by a known camera, with a colour-ramp patch pasted on the scene: the persistent
extras route's test scene (tests/opis/perception/test_persistent.py, and the hf backend's)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.helpers.paths import SHARED_DATA

PHOTO = SHARED_DATA / "coco_multiobj" / "images" / "000000000009.jpg"  # a tuning photo (640 x 480)
W, H, PAN = 300, 220, 3  # the view's size and its pan to the right, pixels a frame
GRID = list(range(4, 25, 4))
PATCH = (150, 90, 60, 50)  # x, y, w, h of the pasted patch in I0's view


def photo() -> np.ndarray:
    if not PHOTO.exists():
        pytest.skip(f"shared data missing: {PHOTO}")
    return np.asarray(Image.open(PHOTO).convert("RGB"))


def patch() -> np.ndarray:
    """A colour ramp (red across, green down, blue high) that nothing near its place in I0 resembles and
    that differs from itself shifted: a moving patch is never the same in two grid frames."""
    _, _, w, h = PATCH
    yy, xx = np.mgrid[0:h, 0:w]
    return np.stack([255 * xx // (w - 1), 255 * yy // (h - 1), np.full_like(xx, 230)], axis=2).astype(np.uint8)


def view(photo: np.ndarray, t: int, paste_from: int | None = None, drift: int = 0, pan: int = PAN) -> np.ndarray:
    """Frame t of the pan; the patch stands on the scene from `paste_from` on (moving `drift` px a frame in it)."""
    x0 = pan * t
    scene = photo[:H].copy()
    if paste_from is not None and t >= paste_from:
        px, py, w, h = PATCH
        px += drift * t
        scene[py : py + h, px : px + w] = patch()
    return np.ascontiguousarray(scene[:, x0 : x0 + W])


def panned_case(root: Path):
    """A case on the photo's first view (one static instance: a 60 x 60 block of the photo) and two
    rollouts of the pan, 41 frames at 24 fps: faithful, and with the patch on the scene from frame 2."""
    from worldeval.media import write_video
    from worldeval.opis.case import load_case, write_case

    img = photo()
    block = np.zeros((H, W), bool)
    block[130:190, 200:260] = True
    spec = {"id": "pan", "domain": "synthetic", "subcategory": "tabletop", "image": "input.png",
            "instances": [{"id": "block", "category": "block", "kinematics": "rigid", "track": "static"}]}
    write_case(root / "pan", spec, view(img, 0), {"block": block})
    videos = {name: write_video(root / f"{name}.mp4", (view(img, t, **paste) for t in range(41)), 24.0, crf=0)
              for name, paste in (("faithful", {}), ("pasted", {"paste_from": 2}))}
    return load_case(root / "pan"), videos


def extras_by_frame(case, video, backend, monkeypatch) -> dict[int, list[dict]]:
    """Each sampled frame's extras, with the camera's change route switched off (it sees a synthetic
    pan as well; off, the persistent route is alone)."""
    from worldeval.opis.evaluate import evaluate_rollout
    from worldeval.opis.perception import extras

    monkeypatch.setattr(extras, "change_candidates", lambda st, seen: [])
    res = evaluate_rollout(case, video, "m", backend)
    return {f["frame"]: [o for o in f["objects"] if o["status"] == "extra"] for f in res.frames["frames"]}


def on_patch(box, t: int, tol: float = 4) -> bool:
    """Whether `box` (x, y, w, h) is the patch's box in frame t."""
    x, y, w, h = box
    px, py, pw, ph = PATCH
    return abs(x - (px - PAN * t)) <= tol and abs(y - py) <= tol and abs(w - pw) <= tol and abs(h - ph) <= tol
