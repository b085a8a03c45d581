"""The hf backend's frame-wide forwards equal the per-instance ones (tiny random-weight models).

Dense scenes made the per-instance forwards the hf backend's cost: a matcher forward for every
static instance's place, keypoint support and Structure, a pose forward per person. Each is now
one forward per frame; these tests hold it to the per-instance answer.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from worldeval.opis.backends.hf_geometry import HFMatcher  # noqa: E402
from worldeval.opis.backends.hf_pose import VitPoseEstimator  # noqa: E402


CPU = torch.device("cpu")


def _scene(h, w, seed):
    rng = np.random.default_rng(seed)
    img = (rng.random((h, w, 3)) * 60 + 100).astype(np.uint8)
    img[20:50, 15:45] = (200, 30, 30)
    img[60:80, 70:110] = (30, 40, 210)
    return img


def _masks(h, w, seed, n=6):
    rng = np.random.default_rng(seed)
    out = [None]
    for _ in range(n):
        m = np.zeros((h, w), bool)
        x, y = rng.integers(0, w - 10), rng.integers(0, h - 10)
        m[y : y + rng.integers(10, h // 2), x : x + rng.integers(10, w // 2)] = True
        out.append(m)
    return out


@pytest.mark.parametrize("key", ["lightglue", "eloftr"])
def test_one_forward_per_pair_equals_a_forward_per_call(tiny, key):
    shared = HFMatcher(tiny[key], CPU, match_long_side=128)
    img0 = _scene(90, 120, 1)
    frames = [np.ascontiguousarray(np.roll(_scene(90, 120, 1), k, axis=1)) for k in (3, 7)]
    calls = []
    forward = shared._forward
    shared._forward = lambda a, b: calls.append(1) or forward(a, b)
    for frame in frames:
        for m0 in _masks(90, 120, 2):
            for m1 in _masks(90, 120, 3)[:3]:
                got = shared.match(img0, frame, m0, m1)
                fresh = HFMatcher(tiny[key], CPU, match_long_side=128).match(img0, frame, m0, m1)
                np.testing.assert_array_equal(got.pts0, fresh.pts0)
                np.testing.assert_array_equal(got.pts1, fresh.pts1)
                np.testing.assert_array_equal(got.scores, fresh.scores)
        bg = _masks(90, 120, 4)[1]
        c = shared.match_background(img0, frame, bg)
        np.testing.assert_array_equal(c.pts0, HFMatcher(tiny[key], CPU, match_long_side=128).match(img0, frame, bg).pts0)
    assert len(calls) == len(frames)  # one forward per (I0, frame) pair, however many masks asked
    # another array with the same content is another pair: the cache goes by identity, never by chance
    again = frames[0].copy()
    shared.match(img0, again)
    assert len(calls) == len(frames) + 1


def test_pose_of_a_frames_people_in_one_forward_equals_one_box_at_a_time(tiny):
    pose = VitPoseEstimator(human=tiny["vitpose"], animal=None, device=CPU)
    img = _scene(120, 100, 5)
    boxes = [(20.0, 10.0, 40.0, 90.0), (70.0, 80.0, 60.0, 60.0), (5.5, 7.25, 30.5, 50.0), (200.0, 200.0, 10.0, 10.0),
             (10.0, 10.0, 1.0, 30.0), (30.0, 40.0, 50.0, 60.0)]
    cats = ["person", "young boy", "rider", "person", "person", "dog"]
    many = pose.keypoints_many(img, boxes, cats)
    assert len(many) == len(boxes)
    for box, cat, kp in zip(boxes, cats, many):
        one = pose.keypoints(img, box, cat)
        if one is None:
            assert kp is None  # outside, degenerate, or no model for the category
            continue
        assert kp.edges == one.edges
        np.testing.assert_allclose(kp.xy, one.xy, atol=1e-3)
        np.testing.assert_allclose(kp.conf, one.conf, atol=1e-4)
    assert [k is None for k in many] == [False, False, False, True, True, True]
    assert pose.keypoints_many(img, [], []) == []


def test_structure_stage_asks_for_the_frames_poses_once():
    from types import SimpleNamespace

    from worldeval.opis.backends.base import Keypoints
    from worldeval.opis.perception.structure import frame_poses

    asked = []

    def many(image, boxes, categories):
        asked.append(list(boxes))
        return [Keypoints(xy=np.zeros((2, 2)), conf=np.ones(2), edges=[(0, 1)]) for _ in boxes]

    def one(image, box, category=None):
        raise AssertionError("asked one box at a time")

    pose = SimpleNamespace(name="many", versions={}, supports=lambda c: c == "person", keypoints=one, keypoints_many=many)
    bank = SimpleNamespace(tracks=["dynamic", "static", "dynamic", "dynamic"], categories=["person", "person", "dog", "person"])
    obs = [SimpleNamespace(box=(float(k), 0.0, 5.0, 5.0)) for k in range(4)]
    st = SimpleNamespace(bank=bank, n=4, frame=np.zeros((10, 10, 3), np.uint8), obs=obs,
                         assoc=SimpleNamespace(match=[0, 1, 2, None]))
    got = frame_poses(st, SimpleNamespace(pose=pose))
    assert set(got) == {0} and asked == [[(0.0, 0.0, 5.0, 5.0)]]  # static, unsupported and unmatched left out
    one_at_a_time = SimpleNamespace(name="one", versions={}, supports=lambda c: True, keypoints=one)
    assert frame_poses(st, SimpleNamespace(pose=one_at_a_time)) is None
