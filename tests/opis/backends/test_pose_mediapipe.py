"""MediaPipe person pose in the classical backend: real landmarks on a real DAVIS rider, eq. 5 on them."""

from __future__ import annotations

import sys

import cv2
import numpy as np
import pytest
from tests.helpers.paths import SHARED_DATA

DATA = SHARED_DATA / "davis_bmx_trees"


@pytest.fixture(scope="module")
def pose():
    pytest.importorskip("mediapipe")
    from worldeval.opis.backends.mediapipe_pose import load_pose

    est, version = load_pose()
    assert est is not None, version
    return est


@pytest.fixture(scope="module")
def rider():
    if not DATA.exists():
        pytest.skip("shared data not present")
    from PIL import Image

    img = np.asarray(Image.open(DATA / "frames" / "00000.jpg").convert("RGB"))
    mask = np.asarray(Image.open(DATA / "first_frame_instances_davis2017.png")) == 2  # label 2 is the person
    ys, xs = np.nonzero(mask)
    box = (float(xs.min()), float(ys.min()), float(xs.max() - xs.min() + 1), float(ys.max() - ys.min() + 1))
    return img, mask, box


def test_supports_people_only(pose):
    assert pose.supports("person") and pose.supports("bmx rider") and pose.supports("two women")
    assert not pose.supports("dog") and not pose.supports("bicycle")


def test_landmarks_lie_on_the_rider(pose, rider):
    img, mask, box = rider
    kp = pose.keypoints(img, box)
    assert kp is not None and kp.xy.shape == (33, 2) and kp.conf.shape == (33,)
    seen = kp.conf >= 0.5
    assert seen.sum() >= 15
    near = cv2.dilate(mask.astype(np.uint8), np.ones((9, 9), np.uint8)).astype(bool)
    xy = np.round(kp.xy[seen]).astype(int)
    inside = near[np.clip(xy[:, 1], 0, img.shape[0] - 1), np.clip(xy[:, 0], 0, img.shape[1] - 1)]
    assert inside.mean() >= 0.9, inside.mean()
    assert all(max(a, b) < 33 for a, b in kp.edges)
    assert pose.keypoints(img, box, category="bicycle") is None  # asked for a non-person: no landmarks


@pytest.mark.slow
def test_eq5_on_real_landmarks_ignores_scale_and_sees_a_stretch(pose, rider):
    from worldeval.opis.perception.structure import pose_structure

    img, _, box = rider
    x, y, w, h = box
    kp0 = pose.keypoints(img, box)
    assert pose_structure(kp0, kp0) == pytest.approx(1.0)
    # the same frame at 1.5x: one scale for all segments, removed by eq. 5's median
    big = cv2.resize(img, None, fx=1.5, fy=1.5, interpolation=cv2.INTER_LINEAR)
    s_big = pose_structure(kp0, pose.keypoints(big, (1.5 * x, 1.5 * y, 1.5 * w, 1.5 * h)))
    # stretched 1.6x vertically only: vertical segments (torso, legs) grow more than horizontal ones (shoulders, hips)
    tall = cv2.resize(img, (img.shape[1], int(1.6 * img.shape[0])), interpolation=cv2.INTER_LINEAR)
    s_tall = pose_structure(kp0, pose.keypoints(tall, (x, 1.6 * y, w, 1.6 * h)))
    assert s_big is not None and s_tall is not None
    assert s_big >= 0.7 and s_tall < s_big - 0.1, (s_big, s_tall)


def test_without_mediapipe_pose_is_unavailable_not_a_crash(monkeypatch):
    monkeypatch.setitem(sys.modules, "mediapipe", None)  # import now raises ImportError
    from worldeval.opis.backends.classical import build_backend
    from worldeval.opis.backends.mediapipe_pose import load_pose

    est, why = load_pose()
    assert est is None and why.startswith("unavailable: mediapipe not installed")
    backend = build_backend()
    assert backend.pose is None and backend.versions["pose"].startswith("unavailable")
    assert build_backend(pose="none").versions["pose"] == "off (pose=none)"
    with pytest.raises(ValueError, match="pose"):
        build_backend(pose="vitpose")


@pytest.mark.slow
def test_rider_gets_pose_structure_in_the_evaluator(tmp_path, pose):
    """End to end on the real bmx clip: the matched rider's dynamic structure comes from pose (eq. 5)."""
    from tests.helpers.opis_clips import build_davis

    from worldeval.opis.case import load_case
    from worldeval.opis.evaluate import EvalConfig, evaluate_rollout, load_backend

    case_dir, video = build_davis(tmp_path)
    backend = load_backend("classical")
    assert backend.versions["pose"].startswith("mediapipe 0.10")
    rows = evaluate_rollout(load_case(case_dir), video, "real", backend, EvalConfig()).rows
    rider = rows[(rows.instance_id == "rider") & rows.matched]
    assert len(rider) >= 2
    posed = rider[rider.structure_source == "pose"]
    assert len(posed) >= 1 and posed.structure.between(0, 1).all(), rider[["frame", "structure", "structure_source"]]
    # the bicycle is no person: never pose
    assert not (rows[rows.instance_id == "bike"].structure_source == "pose").any()
