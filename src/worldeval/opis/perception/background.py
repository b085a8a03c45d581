"""I0's background followed over the propagation grid, one short step at a time.

Real video rarely gives a camera from I0 to a far frame (a long baseline, parallax, a moving
subject), but two grid frames a few video frames apart are easy to relate: corners outside every
instance's carried label are tracked from the grid frame before (Lucas-Kanade, forward and
backward; matched SIFT keypoints where tracking loses them, as in a fast pan), and a RANSAC
homography is fitted per step. Chained, the steps warp I0 to any grid frame as long as none
failed (the persistent route, `persistent.py`), and the last few relate the frames propagation
remembers to the new one (its moved windows, `propagation.LabelPropagator.step`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from worldeval.opis.perception.changes import blurred_lab, downscale, working_scale

# an instance's carried label at which its place is not background (nor new content, for the
# persistent route): the protocol's mask level. Below it lies the haze an instance's label spreads
# over a look-alike next to its track (tuning, sam2_bedroom: a jar's label at 0.25-0.5 over a cat
# pasted below it hid the cat in 7 of 7 frames; at 0.5, 1 of 7)
LABEL_LEVEL = 0.5
LABEL_GROW = 3  # working pixels the labelled places are grown by (a stride-16 cell is about 5)
# background tracking between two grid frames (working size)
CORNERS, CORNER_QUALITY, CORNER_GAP = 200, 0.01, 8
LK_WINDOW, LK_LEVELS, LK_BACK = 15, 3, 1.0  # forward-backward disagreement (px) a kept track may have
RANSAC_PX, MIN_TRACKS = 1.5, 20
MATCH_FEATURES, MATCH_RATIO = 500, 0.75  # SIFT where tracking fails: keypoints a grid frame, Lowe's ratio


@dataclass
class GridFrame:
    index: int
    small: np.ndarray  # working-size RGB
    gray: np.ndarray
    H: np.ndarray | None  # I0's working pixels -> this frame's (None once a step failed)
    labelled: np.ndarray  # working-size bool: some instance's carried label is here
    full: tuple[int, int]  # the frame's own size (H, W)
    step: np.ndarray | None = None  # the grid frame before's working pixels -> this frame's (None: not fitted)
    _lab: np.ndarray | None = None

    @property
    def lab(self) -> np.ndarray:
        """Working-size Lab, blurred as the change route blurs (only the persistent window's frames need it)."""
        if self._lab is None:
            self._lab = blurred_lab(self.small)
        return self._lab


def grid_frame(index: int, frame: np.ndarray, labels: np.ndarray | None, H) -> GridFrame:
    """Each frame at its own working size: a rollout need not have I0's size or shape (the chain's
    first step, I0 to the first grid frame, takes up the difference). `labels` None: set later (`label`)."""
    import cv2

    fh, fw = frame.shape[:2]
    small = downscale(frame, working_scale(frame.shape))
    g = GridFrame(index, small, cv2.cvtColor(small, cv2.COLOR_RGB2GRAY), H, np.zeros(small.shape[:2], bool), (fh, fw))
    if labels is not None:
        label(g, labels)
    return g


def label(g: GridFrame, labels: np.ndarray) -> None:
    """Mark where the instances' labels (K x h x w at feature resolution) lie in grid frame `g`, grown a little."""
    import cv2

    size = (g.small.shape[1], g.small.shape[0])
    inst = labels.max(0) if labels.shape[0] else np.zeros(labels.shape[1:], np.float32)
    lab = cv2.resize(inst.astype(np.float32), size, interpolation=cv2.INTER_LINEAR) >= LABEL_LEVEL
    k = 2 * LABEL_GROW + 1
    g.labelled = cv2.dilate(lab.astype(np.uint8), np.ones((k, k), np.uint8)) > 0


def full_homography(first: GridFrame, g: GridFrame) -> np.ndarray | None:
    """The chained background as a map of I0's full-resolution pixels to grid frame `g`'s (None once a step failed)."""
    if g.H is None:
        return None

    def scale(f: GridFrame) -> np.ndarray:
        return np.diag([f.small.shape[1] / f.full[1], f.small.shape[0] / f.full[0], 1.0])

    return np.linalg.inv(scale(g)) @ g.H @ scale(first)


class BackgroundChain:
    """Fed the propagation grid in order: `advance` to a frame (its step fitted on the frame before's
    background), then `label` it with its instances' carried labels (the next step's mask)."""

    def __init__(self, image0: np.ndarray, labels0: np.ndarray, keep: int, after_failure: bool = True):
        """`labels0`: I0's instance labels, K x h x w at feature resolution; `keep`: grid frames kept (I0
        first); `after_failure`: go on fitting steps once the chain from I0 broke (only `moved` reads them)."""
        self.first = grid_frame(0, image0, labels0, np.eye(3))
        self.recent: deque = deque([self.first], maxlen=max(2, int(keep)))
        self.after_failure = bool(after_failure)

    def advance(self, index: int, frame: np.ndarray) -> GridFrame:
        prev = self.recent[-1]
        cur = grid_frame(index, frame, None, None)
        if prev.H is not None or self.after_failure:
            cur.step = _background_step(prev, cur)
        if prev.H is not None and cur.step is not None:
            cur.H = cur.step @ prev.H
        self.recent.append(cur)
        return cur

    def label(self, labels: np.ndarray) -> None:
        """The newest frame's instance labels, carried along their own tracks (`LabelPropagator.carried`):
        the raw labels also land on whatever resembles an instance, and a new object often does."""
        label(self.recent[-1], labels)

    def moved(self, n: int, cells: tuple[int, int]) -> list[np.ndarray | None]:
        """For the `n` grid frames before the newest (oldest first): the 3 x 3 map of the newest frame's
        feature-cell coordinates (`cells` = h x w of its map) to that frame's, or None where a step
        between them failed or the frame is no longer kept."""
        frames = list(self.recent)
        cur = frames[-1]
        out: list[np.ndarray | None] = []
        to_cur: np.ndarray | None = np.eye(3)  # working pixels of frames[k] -> the newest frame's
        for k in range(len(frames) - 2, len(frames) - 2 - n, -1):
            if k < 0 or to_cur is None or frames[k + 1].step is None:
                to_cur = None
            else:
                to_cur = to_cur @ frames[k + 1].step
            out.append(None if to_cur is None else _cells(frames[k], cells) @ np.linalg.inv(to_cur) @ np.linalg.inv(_cells(cur, cells)))
        return out[::-1]


def _cells(g: GridFrame, cells: tuple[int, int]) -> np.ndarray:
    """Working pixel -> feature cell coordinates of grid frame `g` (pixel centres onto cell centres)."""
    h, w = cells
    wh, ww = g.small.shape[:2]
    sx, sy = w / ww, h / wh
    return np.array([[sx, 0.0, 0.5 * sx - 0.5], [0.0, sy, 0.5 * sy - 0.5], [0.0, 0.0, 1.0]])


def _background_step(prev: GridFrame, cur: GridFrame) -> np.ndarray | None:
    """Homography from `prev`'s working pixels to `cur`'s, fitted on the background outside the labels:
    tracked corners, or where tracking loses them (a pan of more than about a tenth of the frame
    between two grid frames), matched SIFT keypoints."""
    mask = (~prev.labelled).astype(np.uint8) * 255
    H = _tracked_step(prev, cur, mask)
    return H if H is not None else _matched_step(prev, cur, mask)


def _fit(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    import cv2

    if len(a) < MIN_TRACKS:
        return None
    H, inl = cv2.findHomography(a, b, cv2.RANSAC, RANSAC_PX)
    return H if H is not None and int(inl.sum()) >= MIN_TRACKS else None


def _matched_step(prev: GridFrame, cur: GridFrame, mask: np.ndarray) -> np.ndarray | None:
    import cv2

    sift = cv2.SIFT_create(MATCH_FEATURES)
    k0, d0 = sift.detectAndCompute(prev.gray, mask)
    k1, d1 = sift.detectAndCompute(cur.gray, None)
    if d0 is None or d1 is None or len(k0) < MIN_TRACKS or len(k1) < 2:
        return None
    pairs = [m for m in cv2.BFMatcher(cv2.NORM_L2).knnMatch(d0, d1, k=2) if len(m) == 2 and m[0].distance < MATCH_RATIO * m[1].distance]
    a = np.float32([k0[m[0].queryIdx].pt for m in pairs]).reshape(-1, 1, 2)
    b = np.float32([k1[m[0].trainIdx].pt for m in pairs]).reshape(-1, 1, 2)
    return _fit(a, b)


def _tracked_step(prev: GridFrame, cur: GridFrame, mask: np.ndarray) -> np.ndarray | None:
    import cv2

    if prev.gray.shape != cur.gray.shape:
        return None  # I0 and a rollout of another size: tracking assumes one image size, matching does not
    p0 = cv2.goodFeaturesToTrack(prev.gray, CORNERS, CORNER_QUALITY, CORNER_GAP, mask=mask)
    if p0 is None or len(p0) < MIN_TRACKS:
        return None
    win = (LK_WINDOW, LK_WINDOW)
    p1, ok1, _ = cv2.calcOpticalFlowPyrLK(prev.gray, cur.gray, p0, None, winSize=win, maxLevel=LK_LEVELS)
    back, ok2, _ = cv2.calcOpticalFlowPyrLK(cur.gray, prev.gray, p1, None, winSize=win, maxLevel=LK_LEVELS)
    ok = (ok1[:, 0] == 1) & (ok2[:, 0] == 1) & (np.linalg.norm((back - p0)[:, 0], axis=1) < LK_BACK)
    return _fit(p0[ok], p1[ok])
