"""Projection of static reference instances into a frame, and their visibility state.

Visibility says whether an instance *should* be seen, before asking whether
it *is*: out of view (its projected query points leave the image), too small
(its projected box is below the minimum size), occluded (with a depth
reference: most projected points lie behind other projected I0 content), else
expected visible. Without a reliable camera a static instance's state is
unknown. Dynamic instances cannot be placed by a static projection: they are
only ever expected visible through a direct match.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from worldeval.opis.backends.base import ROUTE_PROPAGATED
from worldeval.opis.labels import Visibility

EXPECTED, OCCLUDED, OUT_OF_VIEW, TOO_SMALL, UNKNOWN = (Visibility.EXPECTED, Visibility.OCCLUDED, Visibility.OUT_OF_VIEW,
                                                       Visibility.TOO_SMALL, Visibility.UNKNOWN)  # short names for perception


@dataclass
class Projection:
    points: np.ndarray  # Q x 2 projected query points (all, including outside)
    inside: np.ndarray  # Q bool
    box: tuple[float, float, float, float] | None  # box of the in-view projected points
    mask: np.ndarray | None  # projected instance mask (frame size) or None
    state: str
    in_view_fraction: float


def project_instances(bank, cam, frame_shape, *, min_in_view: float = 0.5, min_side_px: float = 10.0,
                      min_area_frac: float = 1e-4, occluded_fraction: float = 0.5) -> list[Projection | None]:
    """One Projection per instance (None for dynamic instances or when the camera is unreliable)."""
    import cv2

    H1, W1 = frame_shape
    out: list[Projection | None] = []
    zbuf = None
    if cam.reliable and cam.kind == "pnp":
        zbuf = _zbuffer(bank, cam, frame_shape)
    for i in range(len(bank)):
        if bank.tracks[i] != "static" or not cam.reliable:
            out.append(None)
            continue
        q = bank.query_points[i]
        p, z = cam.project(q)
        finite = np.all(np.isfinite(p), axis=1) & (z > 0 if z is not None else True)
        inside = finite & (p[:, 0] >= 0) & (p[:, 0] <= W1 - 1) & (p[:, 1] >= 0) & (p[:, 1] <= H1 - 1)
        frac = float(inside.mean()) if len(inside) else 0.0
        mask = None
        box = None
        if inside.any():
            pi = p[inside]
            x0, y0 = pi.min(0)
            x1, y1 = pi.max(0)
            box = (float(x0), float(y0), float(x1 - x0 + 1), float(y1 - y0 + 1))
            if cam.kind == "homography":
                mask = cv2.warpPerspective(bank.masks[i].astype(np.uint8), cam.H, (W1, H1), flags=cv2.INTER_NEAREST).astype(bool)
            else:
                hull = cv2.convexHull(pi.astype(np.float32)).astype(np.int32)
                mk = np.zeros((H1, W1), np.uint8)
                cv2.fillConvexPoly(mk, hull, 1)
                mask = mk.astype(bool)
        if frac < min_in_view:
            state = OUT_OF_VIEW
        else:
            # the size of the whole projected instance, not only its visible part
            pf = p[finite]
            ext = pf.max(0) - pf.min(0) + 1 if len(pf) else np.zeros(2)
            if min(ext) < min_side_px or ext[0] * ext[1] < min_area_frac * H1 * W1:
                state = TOO_SMALL
            elif zbuf is not None and _occluded_share(p[inside], z[inside], zbuf) >= occluded_fraction:
                state = OCCLUDED
            else:
                state = EXPECTED
        out.append(Projection(p, inside, box, mask, state, frac))
    return out


def _zbuffer(bank, cam, frame_shape, step: int = 4) -> np.ndarray:
    """Nearest projected I0 depth per frame pixel block (coarse), from the depth-lifted reference."""
    H0, W0 = bank.shape
    H1, W1 = frame_shape
    ys, xs = np.mgrid[0:H0:step, 0:W0:step]
    pts = np.stack([xs.ravel(), ys.ravel()], 1).astype(np.float64)
    valid = bank.case.geometry.valid[ys.ravel(), xs.ravel()]
    p, z = cam.project(pts[valid])
    ok = np.isfinite(p).all(1) & (z > 0)
    p, z = p[ok], z[ok]
    bs = step
    gh, gw = H1 // bs + 1, W1 // bs + 1
    zb = np.full(gh * gw, np.inf)
    inside = (p[:, 0] >= 0) & (p[:, 0] < W1) & (p[:, 1] >= 0) & (p[:, 1] < H1)
    cell = (p[inside, 1] // bs).astype(int) * gw + (p[inside, 0] // bs).astype(int)
    np.minimum.at(zb, cell, z[inside])
    return zb.reshape(gh, gw)


def _occluded_share(p: np.ndarray, z: np.ndarray, zbuf: np.ndarray, step: int = 4, tol: float = 0.05) -> float:
    if len(p) == 0:
        return 0.0
    cy = np.clip((p[:, 1] // step).astype(int), 0, zbuf.shape[0] - 1)
    cx = np.clip((p[:, 0] // step).astype(int), 0, zbuf.shape[1] - 1)
    front = zbuf[cy, cx]
    return float(np.mean(z > front * (1 + tol)))


def in_seen_region(o, seen: np.ndarray, shape) -> bool:
    """Observation `o`'s box centre lies in the `seen_region` mask (and its mask is not empty)."""
    H, W = shape
    x, y, w, h = o.box
    cx, cy = int(min(W - 1, max(0, x + w / 2))), int(min(H - 1, max(0, y + h / 2)))
    return bool(seen[cy, cx]) and o.mask.sum() > 0


def frame_seen_region(st) -> np.ndarray | None:
    """`seen_region` of a frame state, computed once per frame (the embedding and extras stages both read it)."""
    cached = getattr(st, "seen", None)
    if cached is None or cached[0] is not st.cam:
        st.seen = (st.cam, seen_region(st.bank, st.cam, st.shape))
    return st.seen[1]


def seen_region(bank, cam, frame_shape, step: int = 8) -> np.ndarray | None:
    """Frame pixels that show scene content observed in I0 (None when the camera is unreliable)."""
    import cv2

    if not cam.reliable:
        return None
    H1, W1 = frame_shape
    H0, W0 = bank.shape
    if cam.kind == "homography":
        c = np.array([[0, 0], [W0 - 1, 0], [W0 - 1, H0 - 1], [0, H0 - 1]], np.float64)
        q, _ = cam.project(c)
        mk = np.zeros((H1, W1), np.uint8)
        cv2.fillConvexPoly(mk, np.round(q).astype(np.int32), 1)
        return mk.astype(bool)
    ys, xs = np.mgrid[0:H0:step, 0:W0:step]
    pts = np.stack([xs.ravel(), ys.ravel()], 1).astype(np.float64)
    valid = bank.case.geometry.valid[ys.ravel(), xs.ravel()]
    p, z = cam.project(pts[valid])
    ok = np.isfinite(p).all(1) & (z > 0)
    p = p[ok]
    inside = (p[:, 0] >= 0) & (p[:, 0] < W1) & (p[:, 1] >= 0) & (p[:, 1] < H1)
    mk = np.zeros((H1, W1), np.uint8)
    pi = np.round(p[inside]).astype(int)
    mk[pi[:, 1], pi[:, 0]] = 1
    r = max(3, int(step * 1.5))
    mk = cv2.dilate(mk, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * r + 1, 2 * r + 1)))
    return mk.astype(bool)


# ----------------------------------------------------------------------------- occlusion by what the frame shows


def _median_depth(bank, cam, i: int) -> float | None:
    """Median depth of instance i's projected query points in the frame's camera (None without depth)."""
    _, z = cam.project(bank.query_points[i])
    if z is None:
        return None
    z = z[np.isfinite(z) & (z > 0)]
    return float(np.median(z)) if len(z) else None


def _front_cover(st, i: int) -> np.ndarray:
    """Union of the masks that may stand in front of static instance i: the observations matched to
    other instances (a static one only when its projected depth, where the case has depth, is nearer)
    and those of dynamic instances (they move, so I0's depth says nothing about where they are now)."""
    bank, cam = st.bank, st.cam
    cover = np.zeros(st.shape, bool)
    zi = _median_depth(bank, cam, i) if cam.kind == "pnp" else None
    for k, j in enumerate(st.assoc.match):
        if j is None or k == i:
            continue
        if bank.tracks[k] == "static" and zi is not None:
            zk = _median_depth(bank, cam, k)
            if zk is None or zk >= zi:
                continue
        cover |= _own_extent(st, k, st.obs[j])
    return cover


def _own_extent(st, k: int, o) -> np.ndarray:
    """The part of instance k's matched mask that can stand in front of something.

    A propagated mask of a static instance can spill into a neighbour's place when the neighbour is
    gone (its labels win the hole, and labels are coarse at a feature cell's size); a static object
    does not move, so only the part at its own projected place counts. And only its core counts
    (label above the protocol's 0.5): the mask reaches further, to a label of
    `propagation.mask_threshold`, and that rim spreads over a removed neighbour's hole too.
    """
    if o.route != ROUTE_PROPAGATED:
        return o.mask
    mask = o.core_mask if o.core_mask is not None else o.mask
    pr = st.projs[k] if k < len(st.projs) else None
    if st.bank.tracks[k] != "static" or pr is None or pr.mask is None:
        return mask
    return mask & pr.mask


def resolve_occlusion(st, config) -> None:
    """Visibility of static instances the camera expects but association did not match.

    Most of the projected region covered by a nearer matched observation or a dynamic object:
    `occluded` (the object is hidden, not gone). Partly covered (between `partly_covered_share`
    and `occluded_share`): the visible rest may be too little to find, so the evidence cannot
    decide: `unknown`. Otherwise the instance stays expected visible, i.e. missing.
    """
    for i in range(st.n):
        pr = st.projs[i] if i < len(st.projs) else None
        if st.assoc.match[i] is not None or st.visibility[i] != EXPECTED or pr is None or pr.mask is None:
            continue
        area = int(pr.mask.sum())
        if area == 0:
            continue
        share = float((pr.mask & _front_cover(st, i)).sum()) / area
        if share >= config.camera.occluded_share:
            st.visibility[i] = OCCLUDED
        elif share >= config.camera.partly_covered_share:
            st.visibility[i] = UNKNOWN
