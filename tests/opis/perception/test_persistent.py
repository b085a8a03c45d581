"""The persistent route (perception/persistent.py) on a real photo panned by a known camera."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.panned_photo import GRID, PAN, PATCH, H, W, extras_by_frame, on_patch, panned_case
from tests.helpers.panned_photo import patch as _patch
from tests.helpers.panned_photo import photo as _photo
from tests.helpers.panned_photo import view as _view
from worldeval.opis.perception.background import _tracked_step
from worldeval.opis.perception.persistent import PersistentContent


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


def _at(photo, x0: int, pasted: bool) -> np.ndarray:
    scene = photo[:H].copy()
    if pasted:
        px, py, w, h = PATCH
        scene[py : py + h, px : px + w] = _patch()
    return np.ascontiguousarray(scene[:, x0 : x0 + W])


# a fast pan away from the patch's place and back (view offsets by grid frame): the grid frame of 8
# does not show the patch (scene x 150-210 against its view 200-500, less the edge band)
AWAY_AND_BACK = {4: 100, 8: 200, 12: 100, 16: 50}


def _away_and_back(photo, pasted: bool) -> dict[int, list[np.ndarray]]:
    none = np.zeros((0, H // 16, W // 16), np.float32)
    pc = PersistentContent(_at(photo, 0, False), none)
    out = {}
    for t, x0 in AWAY_AND_BACK.items():
        pc.step(t, _at(photo, x0, pasted), none)
        assert pc.recent[-1].H is not None and abs(pc.recent[-1].H[0, 2] + x0) < 1.0, t
        out[t] = pc.candidates()
    return out


def test_content_back_in_view_is_judged_on_the_window_frames_that_show_it():
    """At 12 the window (4, 8) shows the patch only in 4: it stood there, the same, so it is new static
    content; a window that had to show it whole would wait for two grid frames in view."""
    photo = _photo()
    out = _away_and_back(photo, pasted=True)
    for t in (12, 16):
        assert len(out[t]) == 1, t
        px, py, w, h = PATCH
        want = np.zeros((H, W), bool)
        want[py : py + h, px - AWAY_AND_BACK[t] : px - AWAY_AND_BACK[t] + w] = True
        assert (out[t][0] & want).sum() / (out[t][0] | want).sum() > 0.7, t
    assert all(c == [] for c in _away_and_back(photo, pasted=False).values())


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


def test_a_pasted_patch_becomes_an_extra_of_the_persistent_route(tmp_path, monkeypatch):
    from worldeval.opis.evaluate import load_backend

    case, videos = panned_case(tmp_path)
    backend = load_backend("classical")
    faithful = extras_by_frame(case, videos["faithful"], backend, monkeypatch)
    assert faithful and all(v == [] for v in faithful.values())
    pasted = extras_by_frame(case, videos["pasted"], backend, monkeypatch)
    assert pasted.keys() == faithful.keys()
    for t, found in pasted.items():
        assert [o["route"] for o in found] == ["persistent"], t
        assert on_patch(found[0]["box"], t), (t, found[0]["box"])


def test_a_rollout_of_another_size_gives_masks_of_its_own_size():
    """Frames are measured at their own size (I0 is not resized to them): the chain's first step,
    I0 to a frame 1.5x larger, is fitted on matched keypoints, and the masks come at the frame's size."""
    import cv2

    photo = _photo()
    none = np.zeros((0, H // 16, W // 16), np.float32)
    pc = PersistentContent(_view(photo, 0), none)
    big = (int(W * 1.5), int(H * 1.5))
    for t in GRID:
        pc.step(t, cv2.resize(_view(photo, t, paste_from=2), big, interpolation=cv2.INTER_LINEAR), none)
        assert pc.recent[-1].H is not None, t
        found = pc.candidates()
        if t >= GRID[2]:
            assert len(found) == 1 and found[0].shape == (big[1], big[0]), t
            ys, xs = np.nonzero(found[0])
            px, py, w, h = PATCH
            assert abs(xs.min() / 1.5 - (px - PAN * t)) <= 3 and abs(ys.min() / 1.5 - py) <= 3, t


def test_the_chain_goes_on_fitting_steps_after_a_failure_only_when_asked():
    """A blank grid frame breaks the chain from I0 (no corners, no keypoints); the steps after it are
    fitted only for the moved memory windows (`after_failure`), which need short chains, not I0's."""
    from worldeval.opis.perception.background import BackgroundChain

    photo = _photo()
    none = np.zeros((0, H // 16, W // 16), np.float32)
    blank = np.full_like(_view(photo, 4), 128)
    for after, fitted in ((True, True), (False, False)):
        chain = BackgroundChain(_view(photo, 0), none, keep=4, after_failure=after)
        for t, frame in ((4, blank), (8, _view(photo, 8)), (12, _view(photo, 12))):
            chain.advance(t, frame)
            chain.label(none)
        assert chain.recent[1].step is None and all(g.H is None for g in list(chain.recent)[1:])
        assert (chain.recent[-1].step is not None) is fitted
        assert (chain.moved(1, (H // 16, W // 16))[0] is not None) is fitted


def test_the_chained_background_at_full_resolution_undoes_each_frames_working_scale():
    from worldeval.opis.perception.background import GridFrame, full_homography

    def grid(full, small, H):
        img = np.zeros((*small, 3), np.uint8)
        return GridFrame(0, img, img[..., 0], H, np.zeros(small, bool), full)

    # I0 at 960 x 540 worked at half size; the frame at 640 x 360 worked at 320 x 180 (a half too)
    first = grid((540, 960), (270, 480), np.eye(3))
    step = np.array([[0.5, 0.0, 10.0], [0.0, 0.5, 5.0], [0.0, 0.0, 1.0]])  # working px: shrink by 2, shift (10, 5)
    g = grid((360, 640), (180, 320), step)
    H = full_homography(first, g)
    # I0 pixel (400, 200) -> working (200, 100) -> (110, 55) -> the frame's full (220, 110)
    p = H @ np.array([400.0, 200.0, 1.0])
    assert p[:2] / p[2] == pytest.approx([220.0, 110.0])
    assert full_homography(first, grid((360, 640), (180, 320), None)) is None  # the chain broke
