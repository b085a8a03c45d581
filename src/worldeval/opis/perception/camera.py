"""Camera motion from I0 to a generated frame, fitted on background correspondences only.

All annotated target masks (dilated) are excluded from the fit, as in the
paper: a moved or changed object must not pull the camera, and no instance's
Structure is measured against a camera fitted on that instance. There is no
fallback support: a background too weak for a reliable fit gives an
unreliable camera (recorded per frame with its reason). A deterministic
share of the matches is held out of the fit; the camera counts as reliable
only when enough held-out matches agree with it. With the case's depth the
camera is a pose from PnP (RANSAC) and points project with their depth; without
depth (or with a flat one) it is a homography, exact for a pure rotation and
for planar scenes. A case whose geometry declares `exact_plane` says its scene is
such a one (`planar_scene`): its homography is then the exact camera of every I0
pixel, so static Structure is eq. 4 without a parallax correction (structure.py).
A flat depth alone does not (annotate's flat fallback is a guess, not a plane).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class CameraEstimate:
    reliable: bool
    kind: str | None = None  # "homography" | "pnp" | None
    H: np.ndarray | None = None  # I0 pixels -> frame pixels (homography kind)
    rvec: np.ndarray | None = None
    tvec: np.ndarray | None = None
    K0: np.ndarray | None = None
    K1: np.ndarray | None = None
    depth: np.ndarray | None = None  # I0 depth (pnp kind)
    planar_scene: bool = False  # homography kind, and the case's geometry declares exact_plane: exact for every I0 pixel
    frame_shape: tuple[int, int] = (0, 0)
    stats: dict = field(default_factory=dict)
    reason: str = ""

    def project(self, pts0: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Frame positions of I0 pixels (N x 2) and, for a pose, their depth in the new camera."""
        import cv2

        pts0 = np.asarray(pts0, dtype=np.float64).reshape(-1, 2)
        if len(pts0) == 0:
            return np.zeros((0, 2)), None
        if self.kind == "homography":
            p = cv2.perspectiveTransform(pts0.reshape(-1, 1, 2), self.H).reshape(-1, 2)
            return p, None
        if self.kind == "pnp":
            X = _lift(pts0, self.depth, self.K0)
            R, _ = cv2.Rodrigues(self.rvec)
            Xc = X @ R.T + self.tvec.reshape(1, 3)
            z = Xc[:, 2]
            with np.errstate(divide="ignore", invalid="ignore"):
                uv = (Xc @ self.K1.T)[:, :2] / z[:, None]
            return uv, z
        raise ValueError("camera has no model")


def _lift(pts: np.ndarray, depth: np.ndarray, K: np.ndarray) -> np.ndarray:
    H, W = depth.shape
    x = np.clip(np.round(pts[:, 0]).astype(int), 0, W - 1)
    y = np.clip(np.round(pts[:, 1]).astype(int), 0, H - 1)
    z = depth[y, x].astype(np.float64)
    Kinv = np.linalg.inv(K)
    ray = np.concatenate([pts, np.ones((len(pts), 1))], 1) @ Kinv.T
    return ray * z[:, None]


def frame_intrinsics(K0: np.ndarray, shape0: tuple[int, int], shape1: tuple[int, int]) -> np.ndarray:
    """Intrinsics of a frame of another size, assuming the same field of view (per-axis scaling)."""
    sx, sy = shape1[1] / shape0[1], shape1[0] / shape0[0]
    K1 = K0.copy().astype(np.float64)
    K1[0, 0] *= sx
    K1[0, 2] = (K0[0, 2] + 0.5) * sx - 0.5
    K1[1, 1] *= sy
    K1[1, 2] = (K0[1, 2] + 0.5) * sy - 0.5
    return K1


def estimate_camera(
    bank,
    frame: np.ndarray,
    matcher,
    *,
    holdout: float = 0.2,
    seed: int = 0,
    min_matches: int = 12,
    inlier_px: float | None = None,
) -> CameraEstimate:
    """The I0 -> frame camera fitted on the unannotated background only (the paper's rule).

    There is no fallback onto annotated objects or the whole image: a camera fitted on an
    instance would vouch for that instance's own place and Structure. When the background
    cannot support a reliable fit the camera is unreliable, and static instances are then
    `unknown`, never missing.
    """
    corr = matcher.match_background(bank.image, frame, bank.background)
    return _fit(bank, frame, corr, "background", holdout=holdout, seed=seed, min_matches=min_matches, inlier_px=inlier_px)


def camera_record(cam: CameraEstimate | None) -> dict:
    """What the per-frame record says about the camera: model, support, correspondences, held-out error."""
    if cam is None:
        return {"reliable": False, "kind": None, "support": None, "reason": "no camera stage"}
    st = cam.stats
    med = st.get("heldout_median_px")
    return {
        "reliable": bool(cam.reliable), "kind": cam.kind, "support": st.get("support"),
        "correspondences": st.get("matches"), "fit_inliers": st.get("fit_inliers"), "heldout": st.get("heldout"),
        "heldout_inlier_rate": st.get("heldout_inlier_rate"),
        "heldout_median_px": None if med is None or not np.isfinite(med) else round(float(med), 3),
        "reason": cam.reason or None,
    }  # fmt: skip


def _fit(bank, frame, corr, support: str, *, holdout, seed, min_matches, inlier_px) -> CameraEstimate:
    import cv2

    H1, W1 = frame.shape[:2]
    diag = float(np.hypot(H1, W1))
    thr = inlier_px if inlier_px is not None else max(2.0, 0.006 * diag)
    n = len(corr.pts0)
    stats = {"matches": int(n), "support": support}
    if n < min_matches:
        return CameraEstimate(False, frame_shape=(H1, W1), stats=stats, reason=f"only {n} matches ({support})")
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)
    n_hold = max(4, int(round(holdout * n)))
    hold, fit = order[:n_hold], order[n_hold:]
    p0, p1 = corr.pts0.astype(np.float64), corr.pts1.astype(np.float64)
    cv2.setRNGSeed(seed)

    geo = bank.case.geometry
    use_pnp = geo is not None and _depth_is_informative(geo)
    cam: CameraEstimate
    if use_pnp:
        K0 = geo.K
        K1 = frame_intrinsics(K0, bank.shape, (H1, W1))
        Hh, Ww = geo.depth.shape
        xi = np.clip(np.round(p0[:, 0]).astype(int), 0, Ww - 1)
        yi = np.clip(np.round(p0[:, 1]).astype(int), 0, Hh - 1)
        ok = geo.valid[yi, xi]
        fit = fit[ok[fit]]
        hold = hold[ok[hold]]
        if len(fit) < 6:
            return CameraEstimate(False, frame_shape=(H1, W1), stats=stats, reason="too few background matches with depth")
        X = _lift(p0[fit], geo.depth, K0)
        okp, rvec, tvec, inl = cv2.solvePnPRansac(
            X.astype(np.float64), p1[fit].astype(np.float64), K1, None,
            reprojectionError=thr, iterationsCount=500, confidence=0.999, flags=cv2.SOLVEPNP_EPNP,
        )
        if not okp or inl is None or len(inl) < 6:
            return CameraEstimate(False, frame_shape=(H1, W1), stats=stats, reason="PnP failed")
        inl = inl.ravel()
        rvec, tvec = cv2.solvePnPRefineLM(X[inl], p1[fit][inl], K1, None, rvec, tvec)
        cam = CameraEstimate(True, "pnp", rvec=rvec, tvec=tvec, K0=K0, K1=K1, depth=geo.depth, frame_shape=(H1, W1))
        n_inl = len(inl)
    else:
        Hm, inl = cv2.findHomography(p0[fit], p1[fit], cv2.RANSAC, thr, maxIters=1000, confidence=0.995)
        if Hm is None or inl is None:
            return CameraEstimate(False, frame_shape=(H1, W1), stats=stats, reason="homography failed")
        n_inl = int(inl.sum())
        cam = CameraEstimate(True, "homography", H=Hm, frame_shape=(H1, W1), planar_scene=geo is not None and geo.exact_plane)
    fit_rate = n_inl / max(1, len(fit))
    pred, z = cam.project(p0[hold])
    err = np.linalg.norm(pred - p1[hold], axis=1)
    if z is not None:
        err[~(z > 0)] = np.inf
    hold_ok = int(np.sum(err < 2 * thr))
    hold_rate = hold_ok / max(1, len(hold))
    stats.update(
        {
            "fit_inliers": int(n_inl),
            "fit_inlier_rate": round(fit_rate, 4),
            "heldout": int(len(hold)),
            "heldout_inlier_rate": round(hold_rate, 4),
            "heldout_median_px": float(np.median(err)) if len(err) else None,
        }
    )
    cam.stats = stats
    reasons = []
    if n_inl < 10:
        reasons.append(f"{n_inl} fit inliers")
    if hold_ok < 3 or hold_rate < max(0.25, 0.5 * fit_rate):
        reasons.append(f"held-out agreement {hold_rate:.2f} (fit inlier rate {fit_rate:.2f})")
    if cam.kind == "homography" and not _homography_sane(cam.H, bank.shape, (H1, W1)):
        reasons.append("degenerate homography")
    if reasons:
        cam.reliable = False
        cam.reason = "; ".join(reasons)
    return cam


def _depth_is_informative(geo) -> bool:
    d = geo.depth[geo.valid]
    if d.size < 16:
        return False
    return float(np.std(d) / (np.mean(d) + 1e-9)) > 0.02


def _homography_sane(Hm: np.ndarray, shape0, shape1) -> bool:
    """The I0 frame must map to a convex, not absurdly scaled quadrilateral."""
    import cv2

    h, w = shape0
    c = np.array([[0, 0], [w, 0], [w, h], [0, h]], np.float64).reshape(-1, 1, 2)
    q = cv2.perspectiveTransform(c, Hm).reshape(-1, 2)
    if not np.all(np.isfinite(q)):
        return False
    if not cv2.isContourConvex(q.astype(np.float32)):
        return False
    area = cv2.contourArea(q.astype(np.float32))
    ratio = area / float(shape1[0] * shape1[1])
    return 0.05 < ratio < 20.0
