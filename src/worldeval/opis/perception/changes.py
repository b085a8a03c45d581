"""Changed content inside what I0 showed: candidate new objects for the extras stage (SPEC section 3).

A search for the inventory's own objects never finds an object that was not in
I0, so the extras stage also looks at what changed: I0 warped by the estimated
camera (homography kind) is compared with the frame, and compact regions of
changed content inside the seen part become candidates. Reliability first:

* only with a reliable homography camera (with a depth pose the warp would
  need the whole depth map; not done);
* a region where a reference instance stood in I0 or stands now (its projected
  place, a matched observation) is not new content, unless it is a small thing
  inside a much larger instance that is matched (an object put on a table; an
  unmatched instance's place changes because the instance is gone); a band along the
  edge of the seen part is ignored (resampling and border fill);
* when more than `MAX_CHANGED_SHARE` of the seen part changed, the warp does not
  explain the frame (parallax, lighting, another scene): no candidates at all;
* a candidate is a connected region of at least `MIN_AREA_SHARE` of the frame,
  filling at least `MIN_FILL` of its box, with edge structure of its own
  (an object, not a colour drift): its brightness edges differ from the
  warped I0's at that place.
"""

from __future__ import annotations

import numpy as np

from worldeval.geometry import mask_box, same_place
from worldeval.opis.backends.base import Observation
from worldeval.opis.perception.likeness import brightness

WORK_SIDE = 320  # the comparison runs at this longest side
COLOUR_DIFF = 28.0  # Lab distance (8-bit OpenCV Lab units) that counts as changed content
MAX_CHANGED_SHARE = 0.06  # a faithful frame changes < 1 % (measured on the tuning photos); a misfit camera 10 %+
MIN_AREA_SHARE = 0.004
MAX_AREA_SHARE = 0.25
MIN_FILL = 0.35
MIN_EDGE_CHANGE = 0.35  # share of the region's edge energy not present in the warped I0
ROUTE_CHANGE = "change"


def downscale(img: np.ndarray, s: float):
    """`img` resized by `s` (area averaging), each side at least one pixel."""
    import cv2

    H, W = img.shape[:2]
    return cv2.resize(img, (max(1, round(W * s)), max(1, round(H * s))), interpolation=cv2.INTER_AREA)


def working_scale(shape: tuple[int, ...]) -> float:
    """The factor that brings an image of `shape` to the comparison's working size (never up)."""
    return min(1.0, WORK_SIDE / max(shape[0], shape[1]))


def blurred_lab(img: np.ndarray) -> np.ndarray:
    """Lab of `img` after a light blur (float32): resampling and compression noise are not changes."""
    import cv2

    return cv2.cvtColor(cv2.GaussianBlur(img, (5, 5), 1.2), cv2.COLOR_RGB2LAB).astype(np.float32)


def away_from_edge(valid: np.ndarray) -> np.ndarray:
    """`valid` less a band along its edge (3 % of the working size): resampling and border fill live there."""
    import cv2

    h, w = valid.shape
    band = max(2, round(0.03 * max(h, w)))
    return cv2.erode(valid.astype(np.uint8), np.ones((2 * band + 1, 2 * band + 1), np.uint8)) > 0


def _grad(v: np.ndarray) -> np.ndarray:
    import cv2

    return np.hypot(cv2.Sobel(v, cv2.CV_32F, 1, 0, ksize=3), cv2.Sobel(v, cv2.CV_32F, 0, 1, ksize=3))


def change_map(st, seen: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, float] | None:
    """(changed mask, frame edges, warped-I0 edges, scale) at the working size; None when the warp cannot say."""
    import cv2

    cam = st.cam
    if cam is None or not cam.reliable or cam.kind != "homography" or cam.H is None:
        return None
    s = working_scale(st.shape)
    Hs = np.diag([s, s, 1.0]) @ cam.H  # I0 px -> frame px -> working px
    f = downscale(st.frame, s)
    h, w = f.shape[:2]
    warped = cv2.warpPerspective(st.bank.image, Hs, (w, h), flags=cv2.INTER_LINEAR)
    valid = cv2.warpPerspective(np.ones(st.bank.shape, np.uint8), Hs, (w, h), flags=cv2.INTER_NEAREST) > 0
    valid &= downscale(seen.astype(np.uint8), s) > 0
    valid = away_from_edge(valid)
    changed = (np.linalg.norm(blurred_lab(f) - blurred_lab(warped), axis=2) > COLOUR_DIFF) & valid
    # thin residuals along edges (sub-pixel misalignment, compression) are not objects
    changed = cv2.morphologyEx(changed.astype(np.uint8), cv2.MORPH_OPEN, np.ones((3, 3), np.uint8)) > 0
    if changed.sum() > MAX_CHANGED_SHARE * max(1, valid.sum()):
        return None
    return changed, _grad(brightness(f)), _grad(brightness(warped)), s


def known_places(st, s: float, shape: tuple[int, int]) -> list[tuple[np.ndarray, bool]]:
    """Working-size masks of what reference instances account for (each one's I0 place warped by the
    camera, its projected place, its matched observation), each with whether a small new thing may
    stand inside it: only where the instance is matched (it is there, so the change is not its absence)."""
    import cv2

    h, w = shape
    Hs = np.diag([s, s, 1.0]) @ st.cam.H
    out = []
    for i, m in enumerate(st.bank.masks):
        here = st.assoc.match[i] is not None
        out.append((cv2.warpPerspective(m.astype(np.uint8), Hs, (w, h), flags=cv2.INTER_NEAREST) > 0, here))
        pr = st.projs[i] if i < len(st.projs) else None
        if pr is not None and pr.mask is not None:
            out.append((cv2.resize(pr.mask.astype(np.uint8), (w, h), interpolation=cv2.INTER_NEAREST) > 0, here))
        if here:
            om = st.obs[st.assoc.match[i]].mask
            out.append((cv2.resize(om.astype(np.uint8), (w, h), interpolation=cv2.INTER_NEAREST) > 0, True))
    return [(m, a) for m, a in out if m.any()]


def change_candidates(st, seen: np.ndarray) -> list[Observation]:
    """Compact regions of new content inside the seen part, as observations (full-resolution masks).

    A region explained by a reference instance's place (`geometry.same_place`: overlapping it, unless
    it is a small thing standing inside a much larger matched instance, e.g. on a table) is not new."""
    import cv2


    got = change_map(st, seen)
    if got is None:
        return []
    changed, e_f, e_w, s = got
    h, w = changed.shape
    n, lab, stats, _ = cv2.connectedComponentsWithStats(changed.astype(np.uint8), connectivity=8)
    places = None
    out = []
    for k in range(1, n):
        x, y, bw, bh, area = (int(v) for v in stats[k])
        if not (MIN_AREA_SHARE * h * w <= area <= MAX_AREA_SHARE * h * w) or area < MIN_FILL * bw * bh:
            continue
        region = lab == k
        ef = float(e_f[region].sum())
        if ef <= 0 or float(np.maximum(0.0, e_f[region] - e_w[region]).sum()) / ef < MIN_EDGE_CHANGE:
            continue
        places = known_places(st, s, (h, w)) if places is None else places
        if any(same_place(region, p, allow_inside_larger=a) for p, a in places):
            continue
        H1, W1 = st.shape
        full = cv2.resize(region.astype(np.uint8), (W1, H1), interpolation=cv2.INTER_NEAREST) > 0
        out.append(Observation(mask=full, box=mask_box(full), category=None, score=area / float(bw * bh),
                               source="change", route=ROUTE_CHANGE))
    return out
