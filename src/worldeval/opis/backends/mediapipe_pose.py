"""Person pose for the classical backend: MediaPipe Pose (BlazePose, 33 landmarks), offline, CPU.

Dynamic Structure (paper eq. 5) needs the same body segment measured in I0
and in a generated frame. The paper uses ViTPose on people and animals and
lifts landmarks to 3-D with depth; here the landmarks stay in image pixels
(the classical backend has no depth) and only people are supported (BlazePose
has no animal model). The "full" landmark model and the person detector ship
inside the `mediapipe` wheel, so nothing is downloaded.

`mediapipe==0.10.21` is installed with `--no-deps` (its declared pins would
replace numpy 2 and OpenCV); it then needs only protobuf<5, absl-py,
flatbuffers and attrs. Without it `load_pose()` returns None with the reason,
and the run's manifest records pose as unavailable.
"""

from __future__ import annotations

import threading

import numpy as np

from worldeval.opis.backends.base import Keypoints
from worldeval.opis.backends.hf_pose import category_kind

# Body segments between BlazePose landmarks (11-12 shoulders, 13-14 elbows, 15-16 wrists,
# 23-24 hips, 25-26 knees, 27-28 ankles). Face and finger landmarks are left out: their
# segments are a few pixels long at benchmark resolutions, so their length ratios are noise.
BODY_EDGES = [
    (11, 12), (11, 13), (13, 15), (12, 14), (14, 16), (11, 23), (12, 24),
    (23, 24), (23, 25), (25, 27), (24, 26), (26, 28),
]  # fmt: skip
NUM_LANDMARKS = 33


class MediaPipePose:
    """PoseEstimator: BlazePose landmarks of the person in a box (crop padded by `margin` of the box size)."""

    name = "mediapipe-pose"

    def __init__(self, margin: float = 0.3, min_detection_confidence: float = 0.5):
        import mediapipe as mp

        self.version = getattr(mp, "__version__", "unknown")
        self.versions = {"pose": f"mediapipe {self.version} BlazePose full (33 landmarks, people only)"}
        self._solution = mp.solutions.pose
        self.margin = margin
        self.min_detection_confidence = min_detection_confidence
        self._graph = None
        # one MediaPipe graph is not safe to call from two threads; frames are measured two at a time
        self._lock = threading.Lock()

    def supports(self, category: str) -> bool:
        return category_kind(category) == "person"

    def _pose(self):
        if self._graph is None:
            # model_complexity=1 is the "full" landmark model, the one the wheel ships (0 and 2 are downloaded)
            self._graph = self._solution.Pose(
                static_image_mode=True, model_complexity=1, min_detection_confidence=self.min_detection_confidence
            )
        return self._graph

    def keypoints(self, image: np.ndarray, box, category: str | None = None) -> Keypoints | None:
        """33 landmarks in image pixels with their visibility as confidence; None when no person is found
        (or `category`, when given, is not a person)."""
        if category is not None and not self.supports(category):
            return None
        H, W = image.shape[:2]
        x, y, w, h = (float(v) for v in box)
        if w < 4 or h < 4:
            return None
        px, py = self.margin * w, self.margin * h
        x0, y0 = int(max(0, x - px)), int(max(0, y - py))
        x1, y1 = int(min(W, x + w + px)), int(min(H, y + h + py))
        crop = np.ascontiguousarray(image[y0:y1, x0:x1, :3].astype(np.uint8))
        with self._lock:
            res = self._pose().process(crop)
        if res.pose_landmarks is None:
            return None
        lm = res.pose_landmarks.landmark
        xy = np.array([[x0 + p.x * (x1 - x0), y0 + p.y * (y1 - y0)] for p in lm], dtype=np.float64)
        conf = np.clip(np.array([p.visibility for p in lm], dtype=np.float64), 0.0, 1.0)
        return Keypoints(xy=xy, conf=conf, edges=list(BODY_EDGES))


def load_pose() -> tuple[MediaPipePose | None, str]:
    """(estimator or None, a version line for the manifest that says why when it is unavailable)."""
    try:
        est = MediaPipePose()
    except ImportError:
        return None, "unavailable: mediapipe not installed (pip install --no-deps mediapipe==0.10.21, see README)"
    except Exception as exc:  # a wheel whose graph cannot start on this machine
        return None, f"unavailable: {type(exc).__name__}: {exc}"[:200]
    return est, est.versions["pose"]
