"""Boxes and masks in pixels: a mask's tight box, the IoU of two boxes or of two masks, and whether one
mask can be explained by another (`same_place`, which the extras and the new-content finder both ask).

A box is (x, y, w, h) with (x, y) its top-left pixel; a mask's box covers its outermost pixels, so a
one-pixel mask has w = h = 1. Case building, perception and the audits all measure with these, so a
box or an overlap means the same number wherever it is computed.
"""

from __future__ import annotations

import numpy as np


def mask_box(mask: np.ndarray) -> tuple[float, float, float, float]:
    """Tight (x, y, w, h) box of a mask's non-zero pixels; all zeros for an empty mask.

    OpenCV's bounding rectangle of the non-zero pixels: the same box as the extremes of
    `np.nonzero`, some 20 times faster on a video frame (it runs for every observation made).
    """
    import cv2  # here, not at the top: loading a case or an archive needs no OpenCV

    m = np.asarray(mask)
    if m.ndim != 2 or m.size == 0:
        ys, xs = np.nonzero(m)
        if len(xs) == 0:
            return (0.0, 0.0, 0.0, 0.0)
        return (float(xs.min()), float(ys.min()), float(xs.max() - xs.min() + 1), float(ys.max() - ys.min() + 1))
    x, y, w, h = cv2.boundingRect(m.view(np.uint8) if m.dtype == bool else (m != 0).view(np.uint8))
    return (float(x), float(y), float(w), float(h))


def mask_bbox(mask: np.ndarray) -> list[float] | None:
    """`mask_box` as a case file's `bbox` list; None for an empty mask (a case then has no box to write)."""
    box = mask_box(mask)
    return list(box) if box[2] > 0 else None


def box_iou(a, b) -> float:
    """IoU of two (x, y, w, h) boxes; 0 when both are empty."""
    ax0, ay0, aw, ah = a
    bx0, by0, bw, bh = b
    ix = max(0.0, min(ax0 + aw, bx0 + bw) - max(ax0, bx0))
    iy = max(0.0, min(ay0 + ah, by0 + bh) - max(ay0, by0))
    inter = ix * iy
    union = aw * ah + bw * bh - inter
    return inter / union if union > 0 else 0.0


def mask_iou(a: np.ndarray, b: np.ndarray) -> float:
    """IoU of two same-shaped masks' non-zero pixels; 0 when both are empty."""
    inter = np.logical_and(a, b).sum()
    union = np.logical_or(a, b).sum()
    return float(inter / union) if union else 0.0


class MaskStats:
    """Bounding box and pixel count of each mask asked about, computed once per mask (one frame's worth).

    A candidate extra is compared with every matched mask and every projected place: with 50 objects
    thousands of whole-frame comparisons a frame, most of them of masks whose boxes do not even meet.
    """

    def __init__(self):
        self._seen: dict[int, tuple] = {}

    def __call__(self, mask: np.ndarray) -> tuple[tuple[int, int, int, int], int]:
        import cv2  # here, not at the top: loading a case or an archive needs no OpenCV

        hit = self._seen.get(id(mask))
        if hit is None or hit[0] is not mask:
            x, y, w, h = cv2.boundingRect(mask.view(np.uint8))
            # the mask is kept with its figures: its id cannot be reused by another mask meanwhile
            hit = self._seen[id(mask)] = (mask, (x, y, x + w, y + h), int(np.count_nonzero(mask)))
        return hit[1], hit[2]

    def overlap(self, a: np.ndarray, b: np.ndarray) -> int:
        """Pixels in both masks, counted inside the intersection of their boxes."""
        (ax0, ay0, ax1, ay1), _ = self(a)
        (bx0, by0, bx1, by1), _ = self(b)
        x0, y0, x1, y1 = max(ax0, bx0), max(ay0, by0), min(ax1, bx1), min(ay1, by1)
        if x1 <= x0 or y1 <= y0:
            return 0
        return int(np.count_nonzero(a[y0:y1, x0:x1] & b[y0:y1, x0:x1]))


def same_place(a: np.ndarray, b: np.ndarray, allow_inside_larger: bool = False, inside: float = 0.2,
               stats: MaskStats | None = None) -> bool:
    """Mask `a` (a candidate extra) can be explained by `b` (a matched object or a projected place).

    IoU > 0.3, or more than `inside` of `a` within `b`; with `allow_inside_larger`, not inside a `b`
    at least three times larger: a copy standing on a table lies inside the table's mask without being it.
    `stats` (bool masks of one frame): the same counts from each mask's box, computed once per mask.
    """
    if stats is not None and a.dtype == bool and b.dtype == bool:
        inter = float(stats.overlap(a, b))
        if inter == 0:
            return False
        sa, sb = float(stats(a)[1]), float(stats(b)[1])
    else:
        inter = float((a & b).sum())
        if inter == 0:
            return False
        sa, sb = float(a.sum()), float(b.sum())
    if inter / (sa + sb - inter) > 0.3:
        return True
    return inter / sa > inside and not (allow_inside_larger and sb >= 3.0 * sa)
