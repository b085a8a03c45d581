"""Moving parts (perception/motion.py) on clips whose motion is known by construction."""

from __future__ import annotations

import numpy as np
import pytest

from worldeval.opis.perception.association import box_iou
from worldeval.opis.perception.motion import motion_proposals, neighbour_offset


def _scene(seed=0, h=240, w=320):
    import cv2

    rng = np.random.default_rng(seed)
    return cv2.GaussianBlur((rng.random((h + 80, w + 80, 3)) * 255).astype(np.uint8), (0, 0), 2.0)


def _frame(bg, pan: float, obj=None, at=(0, 0), h=240, w=320):
    """The background seen through a window shifted by `pan` px (a camera pan), an object pasted at `at`."""
    import cv2

    M = np.float32([[1, 0, -40 - pan], [0, 1, -40]])
    f = cv2.warpAffine(bg, M, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)
    if obj is not None:
        x, y = int(round(at[0])), int(round(at[1]))
        f[y : y + obj.shape[0], x : x + obj.shape[1]] = obj
    return f


def test_an_object_moving_against_a_panning_background_is_one_moving_part():
    bg, obj = _scene(0), _scene(5)[:50, :60]
    # the camera pans 3 px a frame; the object walks 4 px a frame the other way, and down
    frames = [_frame(bg, 3 * t, obj, (200 - 4 * t, 90 + 1.5 * t)) for t in range(5)]
    parts = motion_proposals(frames[2], [frames[0], frames[4]])
    truth = (200 - 8, 90 + 3, 60, 50)
    assert len(parts) == 1, [p.box for p in parts]
    assert box_iou(parts[0].box, truth) > 0.7, parts[0].box
    assert parts[0].route == "motion" and parts[0].category is None and parts[0].found_for == []


def test_a_camera_that_only_pans_moves_nothing_on_its_own():
    bg = _scene(1)
    frames = [_frame(bg, 3 * t) for t in range(5)]
    assert motion_proposals(frames[2], [frames[0], frames[4]]) == []
    # nor does an object that moves with the scene (a parked car seen from a panning camera)
    obj = _scene(6)[:50, :60]
    frames = [_frame(bg, 3 * t, obj, (150 - 3 * t, 100)) for t in range(5)]
    assert motion_proposals(frames[2], [frames[0], frames[4]]) == []
    assert motion_proposals(frames[2], []) == []


@pytest.mark.parametrize("fps,k", [(24, 2), (30, 2), (16, 1), (8, 1), (60, 5)])
def test_neighbours_are_a_twelfth_of_a_second_away(fps, k):
    assert neighbour_offset(fps) == k


def test_the_classical_segmenter_frames_a_dynamic_instance_at_its_moving_part():
    """I0 shows the object; later it has walked away: the search's template is re-located there."""
    from worldeval.opis.backends.classical import build_backend
    from worldeval.opis.case import Case, CaseSpec, mask_bbox
    from worldeval.opis.perception.reference import build_reference

    bg, obj = _scene(2), _scene(7)[:50, :60]
    i0 = _frame(bg, 0, obj, (200, 90))
    mask = np.zeros(i0.shape[:2], bool)
    mask[90:140, 200:260] = True
    spec = CaseSpec(id="t", domain="d", subcategory="s", image="i.png", instances=[
        {"id": "walker", "category": "thing", "kinematics": "rigid", "track": "dynamic", "bbox": mask_bbox(mask)}])
    from worldeval.opis.perception.frame import checks
    from worldeval.opis.perception.motion import wants_motion

    assert not checks(build_backend(pose="none"))["motion_proposals"]  # opt-in
    backend = build_backend(pose="none", motion="on")
    assert checks(backend)["motion_proposals"]
    bank = build_reference(Case(spec=spec, root=".", image=i0, masks={"walker": mask}))
    frames = [_frame(bg, 3 * t, obj, (120 - 4 * t, 60 + 1.5 * t)) for t in range(5)]
    parts = motion_proposals(frames[2], [frames[0], frames[4]])
    finds = backend.segmenter.observe_moving(frames[2], parts, bank)
    truth = (120 - 8, 60 + 3, 60, 50)
    assert wants_motion(bank, backend) and not wants_motion(bank, build_backend(pose="none"))
    assert finds and all(f.route == "moving" and f.found_for == ["walker"] for f in finds)
    assert max(box_iou(f.box, truth) for f in finds) > 0.8
    # a static instance is never framed at a moving part
    spec.instances[0].track = "static"
    bank = build_reference(Case(spec=spec, root=".", image=i0, masks={"walker": mask}))
    assert backend.segmenter.observe_moving(frames[2], parts, bank) == []
    assert not wants_motion(bank, backend)  # no dynamic instance: no neighbours decoded either
