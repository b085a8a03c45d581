"""Thumbnails for self-contained HTML pages (the report, a build's case review, the manual audit page):
downscaling, box and mask outlines, inline JPEG data URIs.

Everything is embedded as a data URI so a page opens from disk with no network.
"""

from __future__ import annotations

import base64

import cv2
import numpy as np


def downscale(img: np.ndarray, max_side: int) -> tuple[np.ndarray, float]:
    """Shrink so the longer side is at most `max_side`; returns the image and the scale applied."""
    h, w = img.shape[:2]
    s = min(1.0, max_side / max(h, w)) if max_side else 1.0
    if s >= 1.0:
        return img, 1.0
    out = cv2.resize(img, (max(1, round(w * s)), max(1, round(h * s))), interpolation=cv2.INTER_AREA)
    return out, s


def draw_boxes(img: np.ndarray, boxes: list[tuple[list[float], tuple[int, int, int], str | None]], scale: float = 1.0,
               thickness: int = 2) -> np.ndarray:
    """Outline [x, y, w, h] boxes (given in the original image's pixels) on a copy of `img`.

    Boxes are clipped to the image; a box fully outside it is skipped (a
    projected position of a missing object can lie off-screen).
    """
    out = np.ascontiguousarray(img.copy())
    H, W = out.shape[:2]
    for box, color, label in boxes:
        if box is None or len(box) != 4:
            continue
        try:
            x, y, w, h = (float(v) * scale for v in box)
        except (TypeError, ValueError):
            continue
        if not all(np.isfinite([x, y, w, h])) or w <= 0 or h <= 0:
            continue
        x0, y0 = int(round(max(0.0, x))), int(round(max(0.0, y)))
        x1, y1 = int(round(min(W - 1.0, x + w))), int(round(min(H - 1.0, y + h)))
        if x1 <= x0 or y1 <= y0:
            continue
        cv2.rectangle(out, (x0, y0), (x1, y1), color, thickness, lineType=cv2.LINE_AA)
        if label:
            _label(out, label, x0, y0, color)
    return out


def draw_mask_outlines(img: np.ndarray, masks: list[tuple[np.ndarray, tuple[int, int, int], str | None]],
                       scale: float = 1.0, thickness: int = 2) -> np.ndarray:
    """Outline each H x W bool mask (in the original image's pixels) on a copy of `img`.

    Contours are traced at the mask's own resolution and then scaled, so a thin
    part of an object survives the downscaling of a thumbnail. Holes are outlined
    too: they are part of what the annotation says the object is not.
    """
    out = np.ascontiguousarray(img.copy())
    for mask, color, label in masks:
        m = np.asarray(mask)
        if m.ndim != 2 or not m.any():
            continue
        contours, _ = cv2.findContours(m.astype(np.uint8), cv2.RETR_LIST, cv2.CHAIN_APPROX_NONE)
        scaled = [np.round(c.astype(np.float64) * scale).astype(np.int32) for c in contours]
        cv2.drawContours(out, scaled, -1, color, thickness)
        if label:
            ys, xs = np.nonzero(m)
            _label(out, label, int(round(xs.min() * scale)), int(round(ys.min() * scale)), color)
    return out


def _label(out: np.ndarray, label: str, x0: int, y0: int, color: tuple[int, int, int]) -> None:
    """White text on a `color` tag just above (x0, y0), or just below it at the image's top edge."""
    H, W = out.shape[:2]
    fs = 0.35
    (tw, th), _ = cv2.getTextSize(label, cv2.FONT_HERSHEY_SIMPLEX, fs, 1)
    ty = y0 - 2 if y0 - th - 3 >= 0 else min(H - 1, y0 + th + 2)
    cv2.rectangle(out, (x0, ty - th - 2), (min(W - 1, x0 + tw + 2), ty + 1), color, -1)
    cv2.putText(out, label, (x0 + 1, ty - 1), cv2.FONT_HERSHEY_SIMPLEX, fs, (255, 255, 255), 1, cv2.LINE_AA)


def jpeg_data_uri(img: np.ndarray, quality: int = 80) -> str:
    """RGB uint8 array -> `data:image/jpeg;base64,...`."""
    arr = np.asarray(img)
    if arr.ndim == 2:
        arr = np.stack([arr] * 3, axis=-1)
    bgr = cv2.cvtColor(np.ascontiguousarray(arr[..., :3].astype(np.uint8)), cv2.COLOR_RGB2BGR)
    ok, buf = cv2.imencode(".jpg", bgr, [int(cv2.IMWRITE_JPEG_QUALITY), int(quality)])
    if not ok:
        raise ValueError("JPEG encoding failed")
    return "data:image/jpeg;base64," + base64.b64encode(buf.tobytes()).decode("ascii")
