"""The persistent route (perception/persistent.py) on a real photo panned by a known camera."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from tests.helpers.paths import SHARED_DATA
from worldeval.opis.perception.persistent import PersistentContent, _tracked_step

PHOTO = SHARED_DATA / "coco_multiobj" / "images" / "000000000009.jpg"  # a tuning photo (640 x 480)
W, H, PAN = 300, 220, 3  # the view's size and its pan to the right, pixels a frame
GRID = list(range(4, 25, 4))
PATCH = (150, 90, 60, 50)  # x, y, w, h of the pasted patch in I0's view


def _photo() -> np.ndarray:
    if not PHOTO.exists():
        pytest.skip(f"shared data missing: {PHOTO}")
    return np.asarray(Image.open(PHOTO).convert("RGB"))


def _patch() -> np.ndarray:
    """A colour ramp (red across, green down, blue high) that nothing near its place in I0 resembles and
    that differs from itself shifted: a moving patch is never the same in two grid frames."""
    _, _, w, h = PATCH
    yy, xx = np.mgrid[0:h, 0:w]
    return np.stack([255 * xx // (w - 1), 255 * yy // (h - 1), np.full_like(xx, 230)], axis=2).astype(np.uint8)


def _view(photo: np.ndarray, t: int, paste_from: int | None = None, drift: int = 0, pan: int = PAN) -> np.ndarray:
    """Frame t of the pan; the patch stands on the scene from `paste_from` on (moving `drift` px a frame in it)."""
    x0 = pan * t
    scene = photo[:H].copy()
    if paste_from is not None and t >= paste_from:
        px, py, w, h = PATCH
        px += drift * t
        scene[py : py + h, px : px + w] = _patch()
    return np.ascontiguousarray(scene[:, x0 : x0 + W])


def _run(photo, pan: int = PAN, **paste) -> dict[int, list[np.ndarray]]:
    labels = np.zeros((0, H // 16, W // 16), np.float32)  # no instances
    pc = PersistentContent(_view(photo, 0, pan=pan), labels)
    out = {}
    for t in GRID:
        pc.step(t, _view(photo, t, pan=pan, **paste), labels)
        out[t] = pc.candidates()
    return out


def _iou_with_patch(m: np.ndarray, t: int) -> float:
    px, py, w, h = PATCH
    want = np.zeros((H, W), bool)
    want[py : py + h, px - PAN * t : px - PAN * t + w] = True
    return float((m & want).sum() / (m | want).sum())


def test_faithful_pan_has_no_new_content():
    photo = _photo()
    assert all(c == [] for c in _run(photo).values())


def test_pasted_patch_is_found_once_it_has_stood_for_the_window():
    photo = _photo()
    out = _run(photo, paste_from=2)
    # the patch is in every grid frame; the first has no window yet, the window needs two grid frames before
    assert out[4] == [] and out[8] == []
    for t in GRID[2:]:
        assert len(out[t]) == 1, t
        assert _iou_with_patch(out[t][0], t) > 0.7, t


def test_fast_pan_keeps_the_background_chain():
    """100 px between two grid frames (a third of the view): the corner tracks are lost, keypoint
    matching still chains the background."""
    photo = _photo()
    fast = 25
    none = np.zeros((0, H // 16, W // 16), np.float32)
    pc = PersistentContent(_view(photo, 0, pan=fast), none)
    for t in (4, 8):
        pc.step(t, _view(photo, t, pan=fast), none)
        prev, cur = pc.recent[-2], pc.recent[-1]
        assert _tracked_step(prev, cur, np.full((H, W), 255, np.uint8)) is None, t  # the fallback holds it
        assert cur.H is not None and abs(cur.H[0, 2] + fast * t) < 1.0 and abs(cur.H[1, 2]) < 1.0, t


def test_moving_patch_is_not_static_content():
    photo = _photo()
    assert all(c == [] for c in _run(photo, paste_from=2, drift=4).values())


def test_labelled_place_is_not_new_content():
    """Content under an instance's propagated label (here: the whole patch, every frame) belongs to it."""
    photo = _photo()
    px, py, w, h = PATCH
    pc_labels = {}
    for t in [0] + GRID:
        lab = np.zeros((1, H // 16, W // 16), np.float32)
        x0 = (px - PAN * t) // 16
        lab[0, py // 16 : (py + h) // 16 + 1, max(0, x0) : (px - PAN * t + w) // 16 + 1] = 1.0
        pc_labels[t] = lab
    pc = PersistentContent(_view(photo, 0), pc_labels[0])
    for t in GRID:
        pc.step(t, _view(photo, t, paste_from=2), pc_labels[t])
        assert pc.candidates() == [], t


@pytest.fixture(scope="module")
def panned_rollouts(tmp_path_factory):
    """A case on the tuning photo's first view (one static instance: a 60 x 60 block of the photo) and
    two rollouts of the pan: faithful, and with the patch standing on the scene from frame 2."""
    from worldeval.media import write_video
    from worldeval.opis.case import load_case, write_case

    photo = _photo()
    root = tmp_path_factory.mktemp("persistent_case")
    block = np.zeros((H, W), bool)
    block[130:190, 200:260] = True
    spec = {"id": "pan", "domain": "synthetic", "subcategory": "tabletop", "image": "input.png",
            "instances": [{"id": "block", "category": "block", "kinematics": "rigid", "track": "static"}]}
    write_case(root / "pan", spec, _view(photo, 0), {"block": block})
    videos = {}
    for name, paste in (("faithful", {}), ("pasted", {"paste_from": 2})):
        videos[name] = write_video(root / f"{name}.mp4", (_view(photo, t, **paste) for t in range(41)), 24.0, crf=0)
    return load_case(root / "pan"), videos


def _extras(case, video, monkeypatch) -> dict[int, list[dict]]:
    from worldeval.opis.evaluate import evaluate_rollout, load_backend
    from worldeval.opis.perception import extras

    # the camera's change route sees a synthetic pan as well; switched off, the persistent route is alone
    monkeypatch.setattr(extras, "change_candidates", lambda st, seen: [])
    res = evaluate_rollout(case, video, "m", load_backend("classical"))
    return {f["frame"]: [o for o in f["objects"] if o["status"] == "extra"] for f in res.frames["frames"]}


def test_a_pasted_patch_becomes_an_extra_of_the_persistent_route(panned_rollouts, monkeypatch):
    case, videos = panned_rollouts
    faithful = _extras(case, videos["faithful"], monkeypatch)
    assert faithful and all(v == [] for v in faithful.values())
    pasted = _extras(case, videos["pasted"], monkeypatch)
    assert pasted.keys() == faithful.keys()
    for t, found in pasted.items():
        assert [o["route"] for o in found] == ["persistent"], t
        x, y, w, h = found[0]["box"]
        px, py, pw, ph = PATCH
        # the patch's place in frame t: the view pans right by PAN px a frame
        assert abs(x - (px - PAN * t)) <= 3 and abs(y - py) <= 3 and abs(w - pw) <= 4 and abs(h - ph) <= 4, (t, found[0]["box"])
