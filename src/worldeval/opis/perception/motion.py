"""Moving-object proposals: where a sampled frame moves unlike its background (classical backend).

A search for the reference instances (SIFT clusters, brightness templates) cannot re-find an
object that turns or deforms; a segmenter would (SAM 3 in `hf`), but none runs offline here.
What every independently moving object does show is motion: between the sampled frame t and its
neighbours t - k and t + k of the video, its pixels move unlike the background. So:

1. dense optical flow (OpenCV DIS) from t to each neighbour, on grey copies at `SIDE` px;
2. the background motion is the homography that RANSAC fits to a grid of those flow vectors;
3. a pixel moves on its own where its flow is more than `RESIDUAL` px off that homography;
4. the object at t is where this holds towards BOTH neighbours (three-frame differencing: the
   background an object uncovers or covers differs towards the past and the future, the object
   itself does not), cleaned by a small opening and closing;
5. each connected part larger than `MIN_AREA` of the frame (and smaller than `MAX_AREA`) is one
   moving part (route `motion`, no category, no owner). The segmenter then frames its dynamic
   instances at these parts (`observe_moving`; classical: the brightness template re-located
   around each part), and those finds are the observations: association decides whose they are
   on the same likeness evidence as any other find (dynamic instances need
   `ungated_min_appearance`) and asks them to look like the instance (`moving_min_similarity`).

It departs from the paper, which segments every sampled frame on its own: this reads the two
neighbouring frames of the video (decoded for this; not sampled, nothing is measured on them).
A rollout with a camera that translates through a 3-D scene shows parallax, which step 2 does
not model; those parts become proposals too and are left to association's likeness floor.
The parameters were chosen on the tuning clip (davis_bmx_trees). It is opt-in (classical backend
option motion=on): on the reporting clips it did not raise association's agreement and it matched
the removed dog of libby in more frames (docs/validation.md, "Moving parts").
"""

from __future__ import annotations

import threading

import numpy as np

from worldeval.geometry import mask_box
from worldeval.opis.backends.base import ROUTE_MOTION, MovingPartsSegmenter, Observation

SIDE = 320  # long side of the grey copies the flow runs on
RESIDUAL = 1.0  # px at SIDE: flow this far off the background homography moves on its own
GRID = 8  # px at SIDE between the flow vectors the background homography is fitted to
MIN_AREA, MAX_AREA = 0.003, 0.5  # share of the frame a moving part must cover
NEIGHBOUR_SECONDS = 1.0 / 12.0  # neighbours this far from t (2 frames at 24 fps)

_LOCAL = threading.local()  # one DIS instance per thread: frames are measured two at a time


def neighbour_offset(fps: float) -> int:
    """Frames between a sampled frame and the neighbours its motion is measured against."""
    return max(1, int(round(float(fps) * NEIGHBOUR_SECONDS)))


def wants_motion(bank, backend) -> bool:
    """Moving parts are looked for when the segmenter frames instances there, on a case with a dynamic instance."""
    return motion_wanted(bank.tracks, backend)


def motion_wanted(tracks, backend) -> bool:
    """`wants_motion` from the instances' tracks alone (before the reference bank is built)."""
    return frames_moving_parts(backend) and any(t != "static" for t in tracks)


def frames_moving_parts(backend) -> bool:
    """The segmenter is a `MovingPartsSegmenter` and does so in this run."""
    seg = backend.segmenter
    return isinstance(seg, MovingPartsSegmenter) and bool(seg.frames_moving_parts)


def _grey(frame: np.ndarray) -> np.ndarray:
    import cv2

    H, W = frame.shape[:2]
    s = min(1.0, SIDE / max(H, W))
    g = cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY)
    return cv2.resize(g, (max(1, round(W * s)), max(1, round(H * s))), interpolation=cv2.INTER_AREA) if s < 1 else g


def _flow():
    import cv2

    dis = getattr(_LOCAL, "dis", None)
    if dis is None:
        dis = _LOCAL.dis = cv2.DISOpticalFlow_create(cv2.DISOPTICAL_FLOW_PRESET_FAST)
    return dis


def own_motion(g: np.ndarray, gn: np.ndarray) -> np.ndarray | None:
    """H x W bool: pixels of `g` whose flow to `gn` is more than RESIDUAL off the background homography."""
    import cv2

    flow = _flow().calc(g, gn, None)
    h, w = g.shape
    ys, xs = np.mgrid[GRID // 2 : h : GRID, GRID // 2 : w : GRID]
    p = np.stack([xs.ravel(), ys.ravel()], 1).astype(np.float32)
    q = p + flow[ys.ravel(), xs.ravel()]
    if len(p) < 8:
        return None
    Hm, _ = cv2.findHomography(p, q, cv2.RANSAC, RESIDUAL)
    if Hm is None:
        return None
    gy, gx = np.mgrid[0:h, 0:w].astype(np.float32)
    pred = cv2.perspectiveTransform(np.stack([gx, gy], -1).reshape(-1, 1, 2), Hm).reshape(h, w, 2)
    moved = np.stack([gx + flow[..., 0], gy + flow[..., 1]], -1)
    return np.linalg.norm(moved - pred, axis=-1) > RESIDUAL


def motion_proposals(frame: np.ndarray, neighbours: list[np.ndarray]) -> list[Observation]:
    """One observation per part of `frame` that moves on its own towards every neighbour."""
    import cv2

    if not neighbours:
        return []
    g = _grey(frame)
    both = None
    for nb in neighbours:
        m = own_motion(g, _grey(nb))
        if m is None:
            return []  # no background fit: nothing can be said to move on its own
        both = m if both is None else both & m
    m8 = cv2.morphologyEx(both.astype(np.uint8), cv2.MORPH_OPEN, np.ones((3, 3), np.uint8))
    m8 = cv2.morphologyEx(m8, cv2.MORPH_CLOSE, np.ones((5, 5), np.uint8))
    n, lab, stats, _ = cv2.connectedComponentsWithStats(m8)
    H, W = frame.shape[:2]
    out = []
    for c in range(1, n):
        share = stats[c, cv2.CC_STAT_AREA] / float(m8.size)
        if not (MIN_AREA <= share <= MAX_AREA):
            continue
        mask = cv2.resize((lab == c).astype(np.uint8), (W, H), interpolation=cv2.INTER_NEAREST).astype(bool)
        out.append(Observation(mask=mask, box=mask_box(mask), category=None, source="motion", route=ROUTE_MOTION))
    return out
