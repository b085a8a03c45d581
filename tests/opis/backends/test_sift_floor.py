"""The frame's ordinary SIFT keypoints taken from its contrast-floor pass (`SiftMatcher._strongest`)
equal an ordinary pass of their own, keypoint for keypoint and descriptor for descriptor."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.paths import SHARED_DATA


def _frames():
    from worldeval.media import read_image

    picks = [SHARED_DATA / "davis2016_more" / "car-roundabout" / "frames" / "00010.jpg",
             SHARED_DATA / "davis2016_more" / "blackswan" / "frames" / "00000.jpg",  # a tie at the budget's edge
             SHARED_DATA / "sam2_bedroom" / "frames" / "00000.jpg"]
    return [read_image(p) for p in picks if p.exists()]


@pytest.mark.skipif(not (SHARED_DATA / "davis2016_more").exists(), reason="needs ../shared/data")
def test_strongest_of_the_floor_pass_is_the_ordinary_pass_on_real_frames():
    from worldeval.opis.backends.classical import SiftMatcher

    frames = _frames()
    assert len(frames) == 3
    for frame in frames:
        m = SiftMatcher()
        direct = m._detect(frame, m.nfeatures, None, None)
        floor = m._detect(frame, 4 * m.nfeatures, m.contrast_floor, None)
        derived = m._strongest(floor)
        assert len(floor.xy) > len(direct.xy) > 100  # the floor pass finds more; the ordinary one is its top
        np.testing.assert_array_equal(derived.xy, direct.xy)
        np.testing.assert_array_equal(derived.desc, direct.desc)
        np.testing.assert_array_equal(derived.response, direct.response)


def test_the_budget_keeps_every_keypoint_as_strong_as_the_last_one_kept():
    """OpenCV's retainBest keeps ties at its budget's edge; the contrast test drops what is under the threshold."""
    from worldeval.opis.backends.classical import SIFT_CONTRAST, SIFT_LAYERS, Features, SiftMatcher

    t = SIFT_CONTRAST / SIFT_LAYERS
    resp = np.array([0.9, 0.5, 0.3, 0.3, 0.3, 0.2, t * 1.001, t * 0.99], np.float32).astype(np.float64)
    f = Features(np.arange(16, dtype=float).reshape(8, 2), np.eye(8, 128, dtype=np.float32), (10, 10), resp)
    assert len(SiftMatcher(nfeatures=3)._strongest(f).xy) == 5  # the two ties of the third are kept
    assert len(SiftMatcher(nfeatures=6)._strongest(f).xy) == 6
    assert len(SiftMatcher(nfeatures=0)._strongest(f).xy) == 7  # no budget: only the contrast test
    np.testing.assert_array_equal(SiftMatcher(nfeatures=2)._strongest(f).desc, f.desc[:2])
