"""Rendering the input image I0 from a moved camera (used by the reference producers).

The camera convention is the one of `worldeval.opis.case`: a reference-camera
point X appears at `R_t @ (X - C_t)` in the camera at time t, with R_t from
`rotation_from_angles` and C_t the keyframe `translation`.

A pure rotation is rendered exactly with the homography `K R K^-1`. A camera
that also translates needs depth: every pixel is lifted with the reference
depth, moved, projected and splatted with a z-buffer (nearer pixels win).
Pixels no source pixel lands on are inpainted when they lie inside the old
field of view (disocclusions, splat cracks); outside it they take the value of
a plane-induced homography at the median depth, which is also the exact
answer everywhere when the depth is a fronto-parallel plane (the flat fallback).
Content outside I0 is filled by replicating the border, which invents no new
objects (a reflected border would duplicate objects and confuse association).
"""

from __future__ import annotations

import numpy as np

from worldeval.opis.case import CameraKeyframe, rotation_from_angles


def pose_matrices(pose: CameraKeyframe) -> tuple[np.ndarray, np.ndarray]:
    R = rotation_from_angles(pose.yaw_deg, pose.pitch_deg, pose.roll_deg)
    C = np.asarray(pose.translation, dtype=np.float64).reshape(3)
    return R, C


def rotation_homography(K: np.ndarray, R: np.ndarray) -> np.ndarray:
    """Pixel map of a camera rotated by R about its centre: x' ~ K R K^-1 x."""
    return K @ R @ np.linalg.inv(K)


def plane_homography(K: np.ndarray, R: np.ndarray, C: np.ndarray, depth: float) -> np.ndarray:
    """Pixel map induced by the fronto-parallel plane z = depth of the reference camera.

    For X on the plane, n^T X / d = 1 with n = (0, 0, 1), so
    R (X - C) = (R - R C n^T / d) X.
    """
    n = np.array([0.0, 0.0, 1.0])
    M = R - np.outer(R @ C, n) / float(depth)
    return K @ M @ np.linalg.inv(K)


def warp_homography(image: np.ndarray, H: np.ndarray, size: tuple[int, int] | None = None) -> np.ndarray:
    import cv2

    h, w = image.shape[:2]
    W, Hh = size if size is not None else (w, h)
    return cv2.warpPerspective(image, H, (W, Hh), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)


class ViewRenderer:
    """Renders images of one reference camera (fixed K and depth) from moved poses.

    Lifting the pixels to 3-D depends only on the depth, so it is done once per
    case rather than once per frame.
    """

    def __init__(self, K: np.ndarray, depth: np.ndarray | None = None, valid: np.ndarray | None = None):
        self.K = np.asarray(K, dtype=np.float64)
        self.Kinv = np.linalg.inv(self.K)
        self.depth = None
        self.flat = True
        self.median = 1.0
        self._X: np.ndarray | None = None
        if depth is not None:
            d = np.asarray(depth, dtype=np.float64)
            ok = np.isfinite(d) & (d > 0)
            if valid is not None:
                ok &= np.asarray(valid, dtype=bool)
            if not ok.any():
                raise ValueError("depth map has no valid pixels")
            self.median = float(np.median(d[ok]))
            self.flat = bool(ok.all() and np.ptp(d[ok]) <= 1e-6 * self.median)
            self.depth = np.where(ok, d, self.median)

    def _lifted(self) -> np.ndarray:
        if self._X is None:
            h, w = self.depth.shape
            vs, us = np.mgrid[0:h, 0:w]
            pix = np.stack([us.ravel(), vs.ravel(), np.ones(h * w)], axis=0).astype(np.float64)
            self._X = (self.Kinv @ pix) * self.depth.ravel()[None, :]
        return self._X

    def render(self, image: np.ndarray, pose: CameraKeyframe) -> np.ndarray:
        R, C = pose_matrices(pose)
        if not np.any(C):
            return warp_homography(image, rotation_homography(self.K, R))
        if self.depth is None:
            raise ValueError("a translating camera needs a depth map to render")
        base = warp_homography(image, plane_homography(self.K, R, C, self.median))
        if self.flat:
            return base  # a flat scene: the plane homography is exact
        return self._splat(image, R, C, base)

    def _splat(self, image: np.ndarray, R: np.ndarray, C: np.ndarray, base: np.ndarray) -> np.ndarray:
        h, w = self.depth.shape
        P = self.K @ R  # project R (X - C) in one product
        q = P @ self._lifted() - (P @ C).reshape(3, 1)
        z = q[2]
        front = z > 1e-6
        src = np.flatnonzero(front)
        u = np.rint(q[0, front] / z[front]).astype(np.int64)
        v = np.rint(q[1, front] / z[front]).astype(np.int64)
        zf = z[front]
        inside = (u >= 0) & (u < w) & (v >= 0) & (v < h)
        idx = v[inside] * w + u[inside]
        zf, src = zf[inside], src[inside]
        # z-buffer: sort by target pixel, then by depth; the first of each target pixel is the nearest.
        order = _radix_order(idx, zf)
        idx, src = idx[order], src[order]
        first = np.ones(len(idx), dtype=bool)
        first[1:] = idx[1:] != idx[:-1]
        out = base.reshape(-1, base.shape[-1]).copy()
        out[idx[first]] = image.reshape(-1, image.shape[-1])[src[first]]
        out = out.reshape(base.shape)
        # Pixels nothing landed on inside the old field of view are disocclusions and splat
        # cracks: the plane warp there could show a foreground object a second time (a ghost),
        # so they are inpainted from their surroundings. Outside the old view the base stays.
        hit = np.zeros(h * w, dtype=np.uint8)
        hit[idx[first]] = 1
        seen = self._seen_mask(R, C, (h, w))
        holes = ((hit.reshape(h, w) == 0) & seen).astype(np.uint8)
        if holes.any():
            import cv2

            out = cv2.inpaint(np.ascontiguousarray(out), holes, 3, cv2.INPAINT_TELEA)
        return out

    def _seen_mask(self, R: np.ndarray, C: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
        import cv2

        h, w = shape
        ones = np.full((h, w), 255, np.uint8)
        Hm = plane_homography(self.K, R, C, self.median)
        return cv2.warpPerspective(ones, Hm, (w, h), flags=cv2.INTER_NEAREST, borderMode=cv2.BORDER_CONSTANT) > 0


def _radix_order(idx: np.ndarray, z: np.ndarray) -> np.ndarray:
    """Same order as np.lexsort((z, idx)) with depth quantised to 16 bits, in O(n).

    NumPy's stable argsort is a radix sort for 16-bit keys, so three passes
    (depth, low and high bits of the pixel index) beat one comparison sort.
    """
    span = float(z.max() - z.min()) or 1.0
    zq = np.minimum((z - z.min()) / span * 65535.0, 65535.0).astype(np.uint16)
    order = np.argsort(zq, kind="stable")
    order = order[np.argsort((idx[order] & 0xFFFF).astype(np.uint16), kind="stable")]
    return order[np.argsort((idx[order] >> 16).astype(np.uint16), kind="stable")]


def render_view(
    image: np.ndarray,
    K: np.ndarray,
    pose: CameraKeyframe,
    depth: np.ndarray | None = None,
    valid: np.ndarray | None = None,
) -> np.ndarray:
    """I0 seen from `pose` (same size and intrinsics as the reference camera)."""
    return ViewRenderer(K, depth, valid).render(image, pose)


def project_points(points_xy: np.ndarray, K: np.ndarray, pose: CameraKeyframe, depth: np.ndarray | float) -> np.ndarray:
    """Where reference pixels (N x 2, with their depth) land in the camera at `pose` (N x 2)."""
    R, C = pose_matrices(pose)
    pts = np.asarray(points_xy, dtype=np.float64)
    d = np.broadcast_to(np.asarray(depth, dtype=np.float64), (len(pts),))
    pix = np.concatenate([pts, np.ones((len(pts), 1))], axis=1).T
    X = (np.linalg.inv(K) @ pix) * d[None, :]
    Xc = R @ (X - C.reshape(3, 1))
    p = K @ Xc
    return (p[:2] / p[2]).T
