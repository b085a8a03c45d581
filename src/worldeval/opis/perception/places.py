"""Keypoint evidence at a static instance's place: place proposals and the support a find must show.

Appearance alone would let an inpainted smear at the right place pass as the
object; these checks ask for the instance's own I0 keypoints, matched into the
frame, where the camera (or the find itself) puts them.
"""

from __future__ import annotations

import numpy as np

from worldeval.geometry import box_iou, mask_box
from worldeval.opis.backends.base import ROUTE_PROJECTION, Observation
from worldeval.opis.perception import projection as P


def propose_places(st, matcher, config) -> list[Observation]:
    """Observations at the projected place of static instances the camera puts in view.

    A removed or recoloured object must be judged at its place, not only where a search found
    something; the proposal stands only with the instance's own keypoints found where the camera puts
    them, as many as a find must show (`support_needed`): a texture-poor instance, which cannot show
    enough, is proposed at its place and association judges it by its structure likeness there.
    """
    bank, out = st.bank, []
    for i, pr in enumerate(st.projs):
        if pr is None or pr.state != P.EXPECTED or pr.mask is None or pr.box is None:
            continue
        m = pr.mask
        if m.sum() < 4:
            continue
        if any(box_iou(o.box, pr.box) > 0.5 for o in st.obs + out if o.found_for[:1] == [bank.ids[i]]):
            continue
        support = projection_support(bank, i, st.frame, st.cam, matcher, pr.box)
        if support < support_needed(bank, i, st.cam, st.shape, matcher, config.structure.min_correspondences):
            continue
        out.append(Observation(mask=m, box=mask_box(m), category=None, score=support / (support + 10.0),
                               source=f"projection:{bank.ids[i]}", route=ROUTE_PROJECTION, found_for=[bank.ids[i]]))
    return out


def support_needed(bank, i: int, cam, shape, matcher, min_correspondences: int) -> int:
    """Keypoint support a template-only match of static instance i must show (0: texture-poor, exempt, or
    the matcher detects no keypoints of its own)."""
    key = f"kp_in_mask:{bank.ids[i]}"
    if key not in bank.cache:
        bank.cache[key] = matcher.keypoints_in(bank.image, bank.masks[i]) if matcher.detects_keypoints else None
    kp = bank.cache[key]
    if kp is None or len(kp) == 0:
        return 0
    p, _ = cam.project(kp)
    H1, W1 = shape
    inside = np.isfinite(p).all(1) & (p[:, 0] >= 0) & (p[:, 0] < W1) & (p[:, 1] >= 0) & (p[:, 1] < H1)
    need = min(min_correspondences, int(0.2 * inside.sum()))
    return need if need >= 3 else 0


def _matches_near(bank, i, frame, matcher, box):
    H1, W1 = frame.shape[:2]
    x, y, w, h = box
    pad = 0.15 * max(w, h)
    m1 = np.zeros((H1, W1), bool)
    m1[max(0, int(y - pad)) : int(y + h + pad) + 1, max(0, int(x - pad)) : int(x + w + pad) + 1] = True
    return matcher.match(bank.image, frame, mask0=bank.masks[i], mask1=m1)


def projection_support(bank, i, frame, cam, matcher, box) -> int:
    """Number of the instance's I0 keypoints matched inside its projected box and landing where the camera predicts."""
    corr = _matches_near(bank, i, frame, matcher, box)
    if len(corr.pts0) == 0:
        return 0
    w, h = box[2], box[3]
    pred, _ = cam.project(corr.pts0)
    err = np.linalg.norm(pred - corr.pts1, axis=1)
    tol = max(4.0, 0.1 * float(np.hypot(w, h)))
    return int(np.sum(np.isfinite(err) & (err < tol)))


def keypoint_support(bank, i, frame, matcher, box) -> int:
    """Number of the instance's I0 keypoints matched near `box` that move together (one similarity transform).

    Consistency among themselves instead of with the camera: the find is already gated by the
    camera, and an object standing off the homography's plane (no depth) lands away from the
    plane's prediction. Matches restricted to a small box pass the ratio test easily; only a set
    that moves together is evidence of the object.
    """
    corr = _matches_near(bank, i, frame, matcher, box)
    if len(corr.pts0) < 3:
        return int(len(corr.pts0))
    import cv2

    w, h = box[2], box[3]
    _, inl = cv2.estimateAffinePartial2D(
        corr.pts0.astype(np.float32), corr.pts1.astype(np.float32), method=cv2.RANSAC,
        ransacReprojThreshold=max(3.0, 0.05 * float(np.hypot(w, h))),
    )
    return 0 if inl is None else int(inl.sum())
