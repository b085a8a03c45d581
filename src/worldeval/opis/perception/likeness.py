"""Colour-invariant evidence that an observation is a reference instance (association, paper 4.1).

Association must decide whether an observation *is* instance i before appearance
fidelity is measured on the match (4.2); if the colour-sensitive appearance
cosine decided the match, a recoloured object would go unmatched instead of
failing Identity. This module compares grey-level structure only:

* brightness is the HSV value channel, max(R, G, B): a hue change leaves it as it
  was, while luma (0.299 R + 0.587 G + 0.114 B) moves with the hue;
* the structure descriptor is a histogram of unsigned gradient orientations of
  that channel in a 4 x 4 grid over the object's box (the box resampled to a
  fixed square, so scale does not matter), weighted by gradient magnitude inside
  the slightly grown mask (the outline counts), square-rooted (no single strong
  edge dominates) and centred, so unrelated crops land near 0 and a change of
  contrast does not change it;
* the edge energy (mean gradient magnitude inside the mask, relative to the
  reference's) says how much structure there is: an inpainted smear at the
  object's place has little, whatever its colour.
"""

from __future__ import annotations

import numpy as np

from worldeval.opis.backends.base import value_channel  # noqa: F401 (its home is the backends' base)

SIDE = 32  # box resampled to SIDE x SIDE
CELLS = 4  # CELLS x CELLS grid
BINS = 8  # unsigned orientations in [0, pi)


def brightness(image: np.ndarray) -> np.ndarray:
    """HSV value (max over RGB) as float32: unchanged by a change of hue."""
    return value_channel(image).astype(np.float32)


def _crop(v: np.ndarray, mask: np.ndarray, box) -> tuple[np.ndarray, np.ndarray] | None:
    import cv2

    H, W = v.shape
    x, y, w, h = (float(b) for b in box)
    pad = 0.08 * max(w, h) + 1.0  # keep the outline's edges inside the crop
    x0, y0 = int(max(0, np.floor(x - pad))), int(max(0, np.floor(y - pad)))
    x1, y1 = int(min(W, np.ceil(x + w + pad))), int(min(H, np.ceil(y + h + pad)))
    if x1 - x0 < 3 or y1 - y0 < 3:
        return None
    c = cv2.resize(v[y0:y1, x0:x1], (SIDE, SIDE), interpolation=cv2.INTER_AREA)
    m = cv2.resize(mask[y0:y1, x0:x1].astype(np.float32), (SIDE, SIDE), interpolation=cv2.INTER_AREA)
    m = cv2.dilate(m, np.ones((3, 3), np.uint8))
    return c, m


def describe(image: np.ndarray, masks, boxes, v: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(descriptors K x CELLS*CELLS*BINS, centred and unit length or zero; edge energies K)."""
    import cv2

    v = brightness(image) if v is None else v
    k = len(masks)
    desc = np.zeros((k, CELLS * CELLS * BINS), np.float32)
    energy = np.zeros(k, np.float32)
    cell = SIDE // CELLS
    for n, (m, b) in enumerate(zip(masks, boxes)):
        got = _crop(v, m, b)
        if got is None:
            continue
        c, w = got
        gx = cv2.Sobel(c, cv2.CV_32F, 1, 0, ksize=3)
        gy = cv2.Sobel(c, cv2.CV_32F, 0, 1, ksize=3)
        mag = np.hypot(gx, gy) * w
        if w.sum() < 1:
            continue
        energy[n] = float(mag.sum() / w.sum())
        ang = np.mod(np.arctan2(gy, gx), np.pi)
        bins = np.minimum((ang / np.pi * BINS).astype(int), BINS - 1)
        cy, cx = np.divmod(np.arange(SIDE * SIDE), SIDE)
        idx = ((cy // cell) * CELLS + (cx // cell)) * BINS + bins.ravel()
        hist = np.sqrt(np.bincount(idx, weights=mag.ravel(), minlength=desc.shape[1]))
        hist -= hist.mean()
        nrm = float(np.linalg.norm(hist))
        if nrm > 1e-6:
            desc[n] = hist / nrm
    return desc, energy


def reference_structure(bank) -> tuple[np.ndarray, np.ndarray]:
    """The reference instances' structure descriptors and edge energies (cached in the bank)."""
    key = "likeness:reference"
    if key not in bank.cache:
        bank.cache[key] = describe(bank.image, bank.masks, bank.boxes)
    return bank.cache[key]


def structure_similarity(bank, frame: np.ndarray, obs) -> tuple[np.ndarray, np.ndarray]:
    """n x m structure correlation in [-1, 1] and n x m edge-energy ratio (observation / reference, capped at 1)."""
    ref_d, ref_e = reference_structure(bank)
    if not len(obs):
        return np.zeros((len(ref_d), 0)), np.zeros((len(ref_d), 0))
    d, e = describe(frame, [o.mask for o in obs], [o.box for o in obs])
    sim = ref_d @ d.T
    ratio = np.minimum(1.0, e[None, :] / np.maximum(ref_e[:, None], 1e-6))
    return sim, ratio
