"""Synthetic rollouts with a known answer, for the metamorphic check `opis validate`.

Every rollout is the case image I0 seen by a camera that turns and comes back.
A pure rotation moves every pixel by the same homography `H_t = K R_t K^-1`
whatever the depth, so the faithful clip is exactly what an ideal world model
would show for that camera, for any real photo, without knowing its geometry.

The interventions edit ONE static target object of I0 *before* the camera
moves, so the edit is consistent through the whole pan (a world model that
forgot or changed the object would also do so consistently):

- `removed`    the target is inpainted away (OpenCV Telea);
- `recoloured` the target's hue is turned by a large angle (an achromatic
                target is tinted first, since it has no hue to turn);
- `squeezed`   the target is squeezed horizontally and sheared inside its own
                box; the background it vacates is inpainted;
- `duplicated` a copy of the target is pasted where no annotated instance is,
                inside the part of I0 that stays in view during the whole pan;
- `other_scene` another case's image under the same camera;
- `moved`      the target is shifted by ~0.6 of its size to a free place nearby
                (a nudge the association's geometric gate still admits); its
                old place is inpainted;
- `resized`    the target is shrunk uniformly to 70% about the bottom centre of
                its box (where it rests); the vacated background is inpainted;
- `pasted`     an object cut from ANOTHER case's photo (not a copy of an
                inventory object) is pasted on clear background seen in I0.

The camera path is a preset (`CAMERA_PATHS`): `pan` (turn right and a little
up), `tilt` (turn up while rolling about the optical axis) or `zoom` (focal
length up by a third with a slight turn). Rotation and focal-length change
both move every pixel by one homography `K_t R_t K^-1`, so all three are exact
for any photo.

Where the turned camera looks past the edge of I0 there is no content; that
border is filled with a strongly blurred, greyed smear of the nearest edge
pixels, so it holds no object-like structure that could pass for an object.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from worldeval.media import sample_frame_indices, write_video
from worldeval.opis.case import DEFAULT_FPS, Case, rotation_from_angles

# Bump when a change alters the rendered clips or the target choice, so resumed runs re-render.
SYNTH_VERSION = 5
INTERVENTIONS = ("faithful", "removed", "recoloured", "squeezed", "duplicated", "other_scene", "moved", "resized", "pasted")
# share of a mask's pixels that must project inside the frame for it to count as in view
IN_VIEW_SHARE = 0.75


class SynthError(Exception):
    """An intervention that cannot be built for a case (e.g. no usable target)."""


@dataclass
class PanTrajectory:
    """Move-and-return: yaw, pitch, roll and zoom follow a raised cosine 0 -> peak -> 0 over `duration_s`.

    `zoom` is the peak focal-length factor (1 = none): a zoom scales K about the
    principal point, so with the rotation the frame is still one homography of I0.
    The clip has `round(duration_s * fps) + 1` frames so its last frame is
    exactly the start pose (identity homography).
    """

    yaw_deg: float = 12.0
    pitch_deg: float = 3.0
    duration_s: float = 5.0
    fps: float = DEFAULT_FPS
    roll_deg: float = 0.0
    zoom: float = 1.0

    @property
    def num_frames(self) -> int:
        return int(round(self.duration_s * self.fps)) + 1

    def profile(self, frame: int) -> float:
        t = frame / self.fps
        return 0.5 * (1.0 - math.cos(2.0 * math.pi * min(t, self.duration_s) / self.duration_s))

    def rotation(self, frame: int) -> np.ndarray:
        s = self.profile(frame)
        return rotation_from_angles(self.yaw_deg * s, self.pitch_deg * s, self.roll_deg * s)

    def homography(self, frame: int, K: np.ndarray) -> np.ndarray:
        """Maps I0 pixels (x, y, 1) to the pixels of frame `frame`."""
        z = 1.0 + (self.zoom - 1.0) * self.profile(frame)
        Kt = K.astype(np.float64).copy()
        Kt[0, 0] *= z
        Kt[1, 1] *= z
        H = Kt @ self.rotation(frame) @ np.linalg.inv(K)
        return H / H[2, 2]

    def sampled(self, stride: int = 8, skip_seconds: float = 1.0) -> list[int]:
        return sample_frame_indices(self.num_frames, self.fps, stride, skip_seconds)


# Camera path presets (peaks; the clip length and frame rate come from the configured trajectory).
CAMERA_PATHS: dict[str, dict[str, float]] = {
    "pan": {"yaw_deg": 12.0, "pitch_deg": 3.0, "roll_deg": 0.0, "zoom": 1.0},
    "tilt": {"yaw_deg": 0.0, "pitch_deg": 9.0, "roll_deg": 6.0, "zoom": 1.0},
    "zoom": {"yaw_deg": 4.0, "pitch_deg": 0.0, "roll_deg": 0.0, "zoom": 1.33},
}


def camera_path(name: str, base: PanTrajectory | None = None) -> PanTrajectory:
    """The preset `name` with the clip length and frame rate of `base`."""
    if name not in CAMERA_PATHS:
        raise ValueError(f"unknown camera path {name!r} (choose {', '.join(CAMERA_PATHS)})")
    base = base or PanTrajectory()
    return PanTrajectory(duration_s=base.duration_s, fps=base.fps, **CAMERA_PATHS[name])


@dataclass
class SynthConfig:
    trajectory: PanTrajectory = field(default_factory=PanTrajectory)
    hue_turn_deg: float = 150.0
    min_saturation: float = 0.25  # below this median saturation a target is tinted before its hue is turned
    squeeze_x: float = 0.6
    max_shear: float = 0.3
    target_area: tuple[float, float] = (0.01, 0.30)  # share of the image
    min_fill: float = 0.2  # mask area / box area, so the target is an object and not a thin frame
    min_in_view_frames: float = 0.5  # share of sampled frames in which the target must be in view
    # Instances this large are surfaces things rest on (table, couch, bed); a copy may lie on one when the
    # photo has no clear background, covering at most `max_support_cover` of it.
    support_area: float = 0.15
    max_support_cover: float = 0.25
    border_grey: float = 0.5  # how much of the out-of-I0 fill is neutral grey
    target_policy: str = "sized"  # sized | largest | colourful (how eligible targets are ranked)
    move_shift: float = 0.6  # `moved`: shift as a share of the target's larger box side
    resize_scale: float = 0.7  # `resized`: uniform scale about the bottom centre of the box
    paste_area: float = 0.04  # `pasted`: area of the pasted object as a share of the image
    # Cases take the camera paths in turn (case k: paths[k % len]); empty: every case uses `trajectory`.
    camera_cycle: tuple[str, ...] = ()
    removal_fill: str = "telea"  # `removed`: REMOVAL_FILLS (telea | ns | blur | copy)


# ---------------------------------------------------------------- geometry


def project_points(H: np.ndarray, xy: np.ndarray) -> np.ndarray:
    p = np.c_[xy, np.ones(len(xy))] @ H.T
    return p[:, :2] / p[:, 2:3]


def in_view_share(mask: np.ndarray, H: np.ndarray, max_points: int = 4000) -> float:
    """Share of the mask's pixels that land inside the frame under H."""
    ys, xs = np.nonzero(mask)
    if len(xs) == 0:
        return 0.0
    if len(xs) > max_points:
        idx = np.linspace(0, len(xs) - 1, max_points).astype(int)
        xs, ys = xs[idx], ys[idx]
    p = project_points(H, np.c_[xs, ys].astype(np.float64))
    h, w = mask.shape
    inside = (p[:, 0] >= 0) & (p[:, 0] <= w - 1) & (p[:, 1] >= 0) & (p[:, 1] <= h - 1)
    return float(inside.mean())


def always_seen(shape: tuple[int, int], K: np.ndarray, traj: PanTrajectory, frames: list[int]) -> np.ndarray:
    """I0 pixels that project inside the frame at every listed frame (the frame rectangle pulled back by H^-1)."""
    h, w = shape
    ok = np.ones((h, w), bool)
    full = np.full((h, w), 255, np.uint8)
    for f in frames:
        back = cv2.warpPerspective(full, np.linalg.inv(traj.homography(f, K)), (w, h), flags=cv2.INTER_NEAREST)
        ok &= back > 0
    return ok


def render_frame(image: np.ndarray, H: np.ndarray, border: np.ndarray) -> np.ndarray:
    """I0 under homography H; pixels that see past I0's edge come from the prepared border image."""
    h, w = image.shape[:2]
    sharp = cv2.warpPerspective(image, H, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)
    valid = cv2.warpPerspective(np.ones((h, w), np.float32), H, (w, h), flags=cv2.INTER_LINEAR)
    if valid.min() >= 1.0 - 1e-6:
        return sharp
    fill = cv2.warpPerspective(border, H, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    return cv2.blendLinear(sharp, fill, valid, 1.0 - valid)


def border_image(image: np.ndarray, grey: float) -> np.ndarray:
    blurred = cv2.GaussianBlur(image, (0, 0), sigmaX=max(image.shape[:2]) / 20)
    return ((1 - grey) * blurred.astype(np.float32) + grey * 128.0).round().astype(np.uint8)


def render_rollout(image: np.ndarray, K: np.ndarray, traj: PanTrajectory, cfg: SynthConfig):
    border = border_image(image, cfg.border_grey)
    for f in range(traj.num_frames):
        yield render_frame(image, traj.homography(f, K), border)


# ---------------------------------------------------------------- interventions


def dilate(mask: np.ndarray, px: int) -> np.ndarray:
    """`mask` grown by `px` pixels with a round structuring element (a copy when px <= 0)."""
    if px <= 0:
        return mask.copy()
    k = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * px + 1, 2 * px + 1))
    return cv2.dilate(mask.astype(np.uint8), k) > 0


def int_box(mask: np.ndarray) -> tuple[int, int, int, int]:
    """Tight (x, y, w, h) box of a non-empty mask in whole pixels, as the synthetic records store it."""
    ys, xs = np.nonzero(mask)
    return int(xs.min()), int(ys.min()), int(xs.max() - xs.min() + 1), int(ys.max() - ys.min() + 1)


def inpaint_region(image: np.ndarray, region: np.ndarray, keep: np.ndarray | None = None) -> np.ndarray:
    """Fill `region` from its surroundings; pixels in `keep` (other objects) are never painted over."""
    hole = dilate(region, 4)
    if keep is not None:
        hole &= ~keep
    radius = int(np.clip(math.sqrt(hole.sum()) / 20, 3, 15))
    return cv2.inpaint(image, hole.astype(np.uint8) * 255, radius, cv2.INPAINT_TELEA)


def _hole(region: np.ndarray, keep: np.ndarray | None) -> np.ndarray:
    hole = dilate(region, 4)
    return hole & ~keep if keep is not None else hole


def fill_ns(image: np.ndarray, region: np.ndarray, keep: np.ndarray | None = None) -> np.ndarray:
    """OpenCV's Navier-Stokes inpainting: smoother than Telea, it carries edges further into the hole."""
    hole = _hole(region, keep)
    radius = int(np.clip(math.sqrt(hole.sum()) / 20, 3, 15))
    return cv2.inpaint(image, hole.astype(np.uint8) * 255, radius, cv2.INPAINT_NS)


def fill_blur(image: np.ndarray, region: np.ndarray, keep: np.ndarray | None = None) -> np.ndarray:
    """The hole filled with a wide normalised blur of what surrounds it: a featureless smudge."""
    hole = _hole(region, keep)
    k = max(15, int(math.sqrt(hole.sum()) // 2) * 2 + 1)
    w = (~hole).astype(np.float32)
    num = cv2.GaussianBlur(image.astype(np.float32) * w[..., None], (k, k), 0)
    den = np.maximum(cv2.GaussianBlur(w, (k, k), 0), 1e-3)[..., None]
    out = image.astype(np.float32).copy()
    out[hole] = (num / den)[hole]
    return out.round().clip(0, 255).astype(np.uint8)


def fill_copy(image: np.ndarray, region: np.ndarray, keep: np.ndarray | None = None) -> np.ndarray:
    """The hole filled with the texture beside it (the box's width to the left or right, or its height
    above or below, whichever overlaps the hole and the kept objects least), feathered at the edge:
    how a generative model paints plausible background over an object it forgot."""
    hole = _hole(region, keep)
    ys, xs = np.nonzero(hole)
    if not len(xs):
        return image.copy()
    H, W = hole.shape
    bw, bh = int(xs.max() - xs.min() + 1), int(ys.max() - ys.min() + 1)
    busy = hole | keep if keep is not None else hole
    best = None
    for dx, dy in ((-bw, 0), (bw, 0), (0, -bh), (0, bh)):
        x0, y0 = int(xs.min()) + dx, int(ys.min()) + dy
        if x0 < 0 or y0 < 0 or x0 + bw > W or y0 + bh > H:
            continue
        clash = float(busy[y0 : y0 + bh, x0 : x0 + bw].mean())
        if best is None or clash < best[0]:
            best = (clash, dx, dy)
    if best is None:
        return fill_blur(image, region, keep)
    _, dx, dy = best
    src = cv2.warpAffine(image, np.float32([[1, 0, -dx], [0, 1, -dy]]), (W, H), borderMode=cv2.BORDER_REFLECT)
    alpha = cv2.GaussianBlur(hole.astype(np.float32), (9, 9), 0)
    alpha[hole] = 1.0
    out = image * (1 - alpha[..., None]) + src * alpha[..., None]
    return out.round().clip(0, 255).astype(np.uint8)


# how `removed` paints the target away (`SynthConfig.removal_fill`, `opis validate --removal-fill`)
REMOVAL_FILLS = {"telea": inpaint_region, "ns": fill_ns, "blur": fill_blur, "copy": fill_copy}


def remove_object(image: np.ndarray, target: np.ndarray, others: np.ndarray, fill: str = "telea") -> np.ndarray:
    return REMOVAL_FILLS[fill](image, target, keep=others & ~target)


def recolour_object(image: np.ndarray, target: np.ndarray, hue_turn_deg: float, min_saturation: float) -> tuple[np.ndarray, dict]:
    """Turn the target's hue; an achromatic target is first given saturation so that the turn shows."""
    hsv = cv2.cvtColor(image, cv2.COLOR_RGB2HSV_FULL).astype(np.float32)  # H in 0..255 for 360 degrees
    s = hsv[..., 1][target] / 255.0
    tinted = bool(np.median(s) < min_saturation)
    if tinted:
        # Tint: give it a definite saturation, keep its shading (value) untouched.
        hsv[..., 1][target] = np.maximum(hsv[..., 1][target], 0.55 * 255)
    hsv[..., 0][target] = (hsv[..., 0][target] + hue_turn_deg / 360.0 * 256.0) % 256.0
    out = cv2.cvtColor(hsv.round().clip(0, 255).astype(np.uint8), cv2.COLOR_HSV2RGB_FULL)
    res = image.copy()
    res[target] = out[target]
    return res, {"hue_turn_deg": hue_turn_deg, "tinted": tinted, "median_saturation": float(np.median(s))}


def warp_object(image: np.ndarray, target: np.ndarray, others: np.ndarray, A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The target moved by the 2x3 affine A over its inpainted background; an occluder in front stays in front."""
    H, W = target.shape
    background = inpaint_region(image, target, keep=others & ~target)
    obj = cv2.warpAffine(image, A, (W, H), flags=cv2.INTER_LINEAR)
    m = cv2.warpAffine(target.astype(np.uint8) * 255, A, (W, H), flags=cv2.INTER_LINEAR) > 127
    m &= ~(others & ~target)
    out = background.copy()
    out[m] = obj[m]
    return out, m


def squeeze_object(
    image: np.ndarray, target: np.ndarray, others: np.ndarray, squeeze_x: float, max_shear: float
) -> tuple[np.ndarray, np.ndarray, dict]:
    """Squeeze the target horizontally about its box centre and shear it, keeping it inside its box."""
    x, y, w, h = int_box(target)
    cx, cy = x + (w - 1) / 2, y + (h - 1) / 2
    # Shear bounded so the squeezed, sheared object still fits the original box width.
    shear = float(min(max_shear, (1 - squeeze_x) * w / max(h, 1)))
    A = np.array([[squeeze_x, shear, cx - squeeze_x * cx - shear * cy], [0.0, 1.0, 0.0]], np.float64)
    out, m = warp_object(image, target, others, A)
    return out, m, {"squeeze_x": squeeze_x, "shear": shear, "affine": A.tolist()}


def resize_object(image: np.ndarray, target: np.ndarray, others: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray, dict]:
    """Scale the target uniformly about the bottom centre of its box (the point it rests on)."""
    x, y, w, h = int_box(target)
    cx, by = x + (w - 1) / 2, y + h - 1
    A = np.array([[scale, 0.0, cx - scale * cx], [0.0, scale, by - scale * by]], np.float64)
    out, m = warp_object(image, target, others, A)
    return out, m, {"scale": scale, "affine": A.tolist()}


def find_move_spot(target: np.ndarray, occupied: np.ndarray, allowed: np.ndarray, shift: float) -> dict | None:
    """Where the target goes when nudged: a free place (no pixel on `occupied`, all in `allowed`) whose
    displacement is at least 0.4 x its larger box side and closest to `shift` x that side, vertical
    displacement counting double (an object slid along its support is the usual mistake, not one lifted)."""
    x, y, w, h = int_box(target)
    crop = target[y : y + h, x : x + w]
    bad = (~allowed | occupied).astype(np.float32)
    overlap = cv2.matchTemplate(bad, crop.astype(np.float32), cv2.TM_CCORR)
    ys, xs = np.nonzero(overlap < 0.5)
    side = max(w, h)
    d = np.hypot(xs - x, ys - y)
    keep = d >= 0.4 * side
    if not keep.any():
        return None
    xs, ys, d = xs[keep], ys[keep], d[keep]
    order = np.lexsort((xs, ys, np.abs(d - shift * side) + np.abs(ys - y)))
    x0, y0 = int(xs[order[0]]), int(ys[order[0]])
    m = np.zeros_like(target)
    m[y0 : y0 + h, x0 : x0 + w] = crop
    return {"dx": x0 - x, "dy": y0 - y, "mask": m}


def move_object(image: np.ndarray, target: np.ndarray, others: np.ndarray, spot: dict) -> np.ndarray:
    A = np.array([[1.0, 0.0, spot["dx"]], [0.0, 1.0, spot["dy"]]], np.float64)
    return warp_object(image, target, others, A)[0]


def find_free_spot(
    target: np.ndarray, occupied: np.ndarray, allowed: np.ndarray, scales=(1.0, 0.85, 0.7, 0.55)
) -> dict | None:
    """Where a copy of the target fits with no pixel on an annotated instance and all pixels in `allowed`.

    Returns {"scale", "dx", "dy", "mask"} (mask in I0 coordinates) or None. Among the fitting places
    it takes the one farthest from every annotated instance, so the copy sits in clear background.
    """
    x, y, w, h = int_box(target)
    crop = target[y : y + h, x : x + w].astype(np.float32)
    bad = (~allowed | occupied).astype(np.float32)
    clearance = cv2.distanceTransform((~bad.astype(bool)).astype(np.uint8), cv2.DIST_L2, 5)
    H, W = target.shape
    for s in scales:
        cw, ch = max(1, int(round(w * s))), max(1, int(round(h * s)))
        if cw >= W or ch >= H:
            continue
        c = cv2.resize(crop, (cw, ch), interpolation=cv2.INTER_LINEAR) > 0.5
        # overlap[y0, x0] = bad pixels under the copy placed with its top-left at (x0, y0)
        overlap = cv2.matchTemplate(bad, c.astype(np.float32), cv2.TM_CCORR)
        fits = overlap < 0.5
        if not fits.any():
            continue
        ys, xs = np.nonzero(fits)
        centre = clearance[np.clip(ys + ch // 2, 0, H - 1), np.clip(xs + cw // 2, 0, W - 1)]
        # deterministic: most clearance, then top-most, then left-most
        order = np.lexsort((xs, ys, -centre))
        y0, x0 = int(ys[order[0]]), int(xs[order[0]])
        m = np.zeros_like(target)
        m[y0 : y0 + ch, x0 : x0 + cw] = c
        return {"scale": s, "x0": x0, "y0": y0, "w": cw, "h": ch, "mask": m}
    return None


def duplicate_object(image: np.ndarray, target: np.ndarray, spot: dict) -> np.ndarray:
    x, y, w, h = int_box(target)
    return paste_patch(image, image[y : y + h, x : x + w], spot)


def paste_patch(image: np.ndarray, patch: np.ndarray, spot: dict) -> np.ndarray:
    """`patch` resized to the spot's box and drawn where the spot's mask is."""
    patch = cv2.resize(patch, (spot["w"], spot["h"]), interpolation=cv2.INTER_AREA)
    out = image.copy()
    region = out[spot["y0"] : spot["y0"] + spot["h"], spot["x0"] : spot["x0"] + spot["w"]]
    m = spot["mask"][spot["y0"] : spot["y0"] + spot["h"], spot["x0"] : spot["x0"] + spot["w"]]
    region[m] = patch[m]
    return out


def other_scene_image(other: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Another image scaled to cover `shape` and centre-cropped to it."""
    h, w = shape
    oh, ow = other.shape[:2]
    s = max(h / oh, w / ow)
    r = cv2.resize(other, (max(w, int(math.ceil(ow * s))), max(h, int(math.ceil(oh * s)))), interpolation=cv2.INTER_AREA)
    y0, x0 = (r.shape[0] - h) // 2, (r.shape[1] - w) // 2
    return np.ascontiguousarray(r[y0 : y0 + h, x0 : x0 + w])


# ---------------------------------------------------------------- target choice


def _saturation(image: np.ndarray, mask: np.ndarray) -> float:
    hsv = cv2.cvtColor(image, cv2.COLOR_RGB2HSV_FULL)
    return float(np.median(hsv[..., 1][mask]) / 255.0)


def _contained(case: Case, target_id: str) -> list[str]:
    """Instances lying entirely inside the target's box."""
    x, y, w, h = int_box(case.masks[target_id])
    out = []
    for iid, m in case.masks.items():
        if iid == target_id:
            continue
        bx, by, bw, bh = int_box(m)
        if bx >= x and by >= y and bx + bw <= x + w and by + bh <= y + h:
            out.append(iid)
    return out


def _duplicate_spot(case: Case, target_id: str, seen: np.ndarray, cfg: SynthConfig) -> dict | None:
    """A place for the target's copy, keeping clear of the original by 15% of its size, so it reads
    as a second object and not as a continuation of the first."""
    target = case.masks[target_id]
    x, y, w, h = int_box(target)
    pad = int(round(0.15 * max(w, h)))
    near = np.zeros(case.shape, bool)
    near[max(0, y - pad) : y + h + pad, max(0, x - pad) : x + w + pad] = True
    return _free_spot(case, target, seen, cfg, near | dilate(target, 6), exclude=target_id)


def _free_spot(case: Case, shape: np.ndarray, seen: np.ndarray, cfg: SynthConfig, near: np.ndarray,
               exclude: str | None = None) -> dict | None:
    """Where an object of mask `shape` fits in content seen all along: clear background first, else on a
    large static supporting surface (table, couch) covering at most `max_support_cover` of it."""
    total = shape.size
    static = {i.id for i in case.instances if i.track == "static"}
    supports = {
        iid: m
        for iid, m in case.masks.items()
        if iid != exclude and iid in static and m.sum() / total >= cfg.support_area
    }
    strict = near.copy()
    for m in case.masks.values():
        strict |= dilate(m, 6)
    spot = find_free_spot(shape, strict, seen)
    if spot is not None:
        spot["on_support"] = None
        return spot
    if not supports:
        return None
    loose = near.copy()
    for iid, m in case.masks.items():
        if iid not in supports:
            loose |= dilate(m, 6)
    spot = find_free_spot(shape, loose, seen)
    if spot is None:
        return None
    cover = {iid: float((spot["mask"] & m).sum() / m.sum()) for iid, m in supports.items()}
    if max(cover.values()) > cfg.max_support_cover:
        return None
    spot["on_support"] = max(cover, key=cover.get)
    return spot


def paste_source(other: Case, case: Case, cfg: SynthConfig) -> dict | None:
    """The object of another photo to paste: a compact instance (fill >= `min_fill`, >= 0.5% of its image),
    preferably of a category this case's inventory lacks, scaled to `paste_area` of this image."""
    names = {i.category for i in case.instances}
    best = None
    for inst in other.instances:
        m = other.masks[inst.id]
        x, y, w, h = int_box(m)
        if m.mean() < 0.005 or m.sum() / (w * h) < max(cfg.min_fill, 0.3):
            continue
        key = (inst.category in names, abs(math.log(m.mean() / cfg.paste_area)), inst.id)
        if best is None or key < best[0]:
            best = (key, inst, m, (x, y, w, h))
    if best is None:
        return None
    _, inst, m, (x, y, w, h) = best
    H, W = case.shape
    s = min(1.5, math.sqrt(cfg.paste_area * H * W / m.sum()))
    cw, ch = min(W - 2, max(4, int(round(w * s)))), min(H - 2, max(4, int(round(h * s))))
    canvas = np.zeros((H, W), bool)
    canvas[:ch, :cw] = cv2.resize(m[y : y + h, x : x + w].astype(np.uint8), (cw, ch), interpolation=cv2.INTER_NEAREST) > 0
    patch = cv2.resize(other.image[y : y + h, x : x + w], (cw, ch), interpolation=cv2.INTER_AREA)
    return {"patch": patch, "shape": canvas, "from_case": other.id, "instance_id": inst.id, "category": inst.category,
            "scale": s}


def choose_target(case: Case, cfg: SynthConfig) -> dict:
    """The one static rigid object every intervention edits, chosen by fixed rules.

    Eligible: static track, rigid, area within `target_area`, filling >= `min_fill` of its box,
    in view in at least `min_in_view_frames` of the sampled frames, and a free spot for its copy.
    Policy "sized" (default) ranks the one closest to 6% of the image first, then the more colourful,
    then by id; "largest" and "colourful" rank by area or saturation.
    """
    traj = cfg.trajectory
    K = case.intrinsics()
    frames = traj.sampled()
    Hs = [traj.homography(f, K) for f in frames]
    seen = always_seen(case.shape, K, traj, frames)
    candidates, rejected = [], {}
    for inst in case.instances:
        m = case.masks[inst.id]
        area = float(m.mean())
        x, y, w, h = int_box(m)
        why = None
        if inst.track != "static" or inst.kinematics != "rigid":
            why = f"{inst.track}/{inst.kinematics}"
        elif not cfg.target_area[0] <= area <= cfg.target_area[1]:
            why = f"area {area:.3f} outside {cfg.target_area}"
        elif m.sum() / (w * h) < cfg.min_fill:
            why = f"fills {m.sum() / (w * h):.2f} of its box"
        elif np.mean([in_view_share(m, H) >= IN_VIEW_SHARE for H in Hs]) < cfg.min_in_view_frames:
            why = "out of view in most sampled frames"
        elif inner := _contained(case, inst.id):
            # a container (bowl, box) with annotated contents: removing or squeezing it would leave its
            # contents floating in place, which is not a clean single-object edit
            why = f"holds other instances ({', '.join(inner)})"
        if why is None:
            spot = _duplicate_spot(case, inst.id, seen, cfg)
            if spot is None:
                why = "no free spot for a copy"
        if why is not None:
            rejected[inst.id] = why
            continue
        sat = _saturation(case.image, m)
        candidates.append((abs(math.log(area / 0.06)), -sat, inst.id, spot, area, sat))
    if not candidates:
        raise SynthError(f"case {case.id}: no eligible target ({'; '.join(f'{k}: {v}' for k, v in rejected.items())})")
    if cfg.target_policy == "sized":
        candidates.sort(key=lambda c: (c[0], c[1], c[2]))
    elif cfg.target_policy == "largest":
        candidates.sort(key=lambda c: (-c[4], c[2]))
    elif cfg.target_policy == "colourful":
        candidates.sort(key=lambda c: (c[1], c[0], c[2]))
    else:
        raise ValueError(f"unknown target policy {cfg.target_policy!r} (sized, largest, colourful)")
    _, _, iid, spot, area, sat = candidates[0]
    inst = next(i for i in case.instances if i.id == iid)
    return {
        "instance_id": iid,
        "category": inst.category,
        "bbox": list(int_box(case.masks[iid])),
        "area": area,
        "saturation": sat,
        "spot": spot,
        "rejected": rejected,
    }


# ---------------------------------------------------------------- one case


def ground_truth(case: Case, traj: PanTrajectory, target_mask: np.ndarray | None, dup_mask: np.ndarray | None,
                 placed: dict[str, np.ndarray] | None = None) -> dict:
    """What is true of every frame of the clip: the camera homography and what share of the target
    (and of its copy) lies inside the frame. Frame k of every intervention shares these; an
    intervention that puts an object somewhere else (`moved`, `resized`, `pasted`) adds
    `<name>_in_view_share` for the object where it put it."""
    K = case.intrinsics()
    masks = {"target": target_mask, "duplicate": dup_mask, **(placed or {})}
    gt: dict[str, Any] = {"homography": [], **{f"{k}_in_view_share": [] for k in masks}}
    for f in range(traj.num_frames):
        H = traj.homography(f, K)
        gt["homography"].append(np.round(H, 8).tolist())
        for k, m in masks.items():
            gt[f"{k}_in_view_share"].append(None if m is None else round(in_view_share(m, H), 4))
    gt["in_view_share_threshold"] = IN_VIEW_SHARE
    return gt


def trajectory_for(cfg: SynthConfig, index: int) -> tuple[PanTrajectory, str | None]:
    """The camera of the `index`-th case: the configured trajectory, or the next preset of `camera_cycle`."""
    if not cfg.camera_cycle:
        return cfg.trajectory, None
    name = cfg.camera_cycle[index % len(cfg.camera_cycle)]
    return camera_path(name, cfg.trajectory), name


def _edit(name: str, case: Case, ctx: dict, cfg: SynthConfig) -> tuple[np.ndarray, dict, np.ndarray | None]:
    """(edited I0, parameters, mask of the object where the edit put it or None) for one target edit."""
    tmask, others, image = ctx["tmask"], ctx["others"], case.image
    if name == "removed":
        return remove_object(image, tmask, others, cfg.removal_fill), {"fill": cfg.removal_fill}, None
    if name == "recoloured":
        img, params = recolour_object(image, tmask, cfg.hue_turn_deg, cfg.min_saturation)
        return img, params, None
    if name == "squeezed":
        img, m, params = squeeze_object(image, tmask, others, cfg.squeeze_x, cfg.max_shear)
        params["squeezed_area_share"] = float(m.sum() / tmask.sum())
        return img, params, None
    if name == "duplicated":
        spot = ctx["spot"]
        params = {k: spot[k] for k in ("scale", "x0", "y0", "w", "h", "on_support")}
        return duplicate_object(image, tmask, spot), {**params, "bbox": list(int_box(spot["mask"]))}, None
    if name == "resized":
        img, m, params = resize_object(image, tmask, others, cfg.resize_scale)
        return img, {**params, "bbox": list(int_box(m))}, m
    if name == "moved":
        spot = _move_spot(case, ctx, cfg)
        if spot is None:
            raise SynthError("no free place to move the target to")
        return move_object(image, tmask, others, spot), {"dx": spot["dx"], "dy": spot["dy"], "bbox": list(int_box(spot["mask"]))}, spot["mask"]
    raise ValueError(f"unknown intervention {name!r}")


def _move_spot(case: Case, ctx: dict, cfg: SynthConfig) -> dict | None:
    """Clear of every other instance first; else the target may slide over a large static support
    (the couch or table it lies on), never over another object."""
    static = {i.id for i in case.instances if i.track == "static"}
    others = {iid: m for iid, m in case.masks.items() if iid != ctx["target_id"]}
    supports = {iid for iid, m in others.items() if iid in static and m.mean() >= cfg.support_area}
    for skip in (set(), supports):
        occupied = np.zeros(case.shape, bool)
        for iid, m in others.items():
            if iid not in skip:
                occupied |= dilate(m, 6)
        spot = find_move_spot(ctx["tmask"], occupied, ctx["seen"], cfg.move_shift)
        if spot is not None:
            return spot
    return None


def _paste(case: Case, other: Case | None, ctx: dict, cfg: SynthConfig) -> tuple[np.ndarray, dict, np.ndarray]:
    src = paste_source(other, case, cfg) if other is not None else None
    if src is None:
        raise SynthError("no other case with a compact object to paste" if other is not None else "no other case in the dataset")
    spot = _free_spot(case, src["shape"], ctx["seen"], cfg, np.zeros(case.shape, bool))
    if spot is None:
        raise SynthError("no free place for the pasted object")
    params = {k: src[k] for k in ("from_case", "instance_id", "category", "scale")}
    params.update({k: spot[k] for k in ("x0", "y0", "w", "h", "on_support")}, bbox=list(int_box(spot["mask"])))
    return paste_patch(case.image, src["patch"], spot), params, spot["mask"]


def synthesize_case(
    case: Case,
    out_dir: str | Path,
    other: Case | None = None,
    cfg: SynthConfig | None = None,
    interventions: tuple[str, ...] = INTERVENTIONS,
    index: int = 0,
) -> dict:
    """Write `out_dir/<intervention>/<case_id>.mp4` for each intervention; return the ground-truth record.

    The record names the target, each intervention's parameters and, per frame,
    the true camera homography and what share of the target (and of its copy) is in view.
    An intervention that cannot be built is recorded under "skipped" with the reason.
    `index` (the case's position in its dataset) picks its camera path when `cfg.camera_cycle` is set.
    """
    cfg = cfg or SynthConfig()
    traj, path_name = trajectory_for(cfg, index)
    cfg = SynthConfig(**{**cfg.__dict__, "trajectory": traj})
    out_dir = Path(out_dir)
    K = case.intrinsics()
    record: dict[str, Any] = {
        "case_id": case.id, "camera_path": path_name, "trajectory": asdict(traj), "num_frames": traj.num_frames,
        "fps": traj.fps, "K": K.tolist(), "border_fill": "blurred edge smear mixed with neutral grey",
        "videos": {}, "interventions": {}, "skipped": {},
    }
    try:
        target = choose_target(case, cfg)
    except SynthError as exc:
        target = None
        record["target"] = None
        record["target_error"] = str(exc)
    ctx = {"tmask": case.masks[target["instance_id"]] if target else None, "target_id": target and target["instance_id"],
           "others": np.zeros(case.shape, bool), "seen": always_seen(case.shape, K, traj, traj.sampled())}
    for iid, m in case.masks.items():
        if target is None or iid != target["instance_id"]:
            ctx["others"] |= m
    if target:
        ctx["spot"] = target.pop("spot")
        record["target"] = target
    images: dict[str, np.ndarray] = {}
    placed: dict[str, np.ndarray] = {}
    for name in interventions:
        try:
            if name == "faithful":
                img, params, where = case.image, {}, None
            elif name == "other_scene":
                if other is None:
                    raise SynthError("no other case in the dataset")
                img, params, where = other_scene_image(other.image, case.shape), {"other_case": other.id}, None
            elif name == "pasted":
                img, params, where = _paste(case, other, ctx, cfg)
            elif target is None:
                raise SynthError(record["target_error"])
            else:
                img, params, where = _edit(name, case, ctx, cfg)
        except SynthError as exc:
            record["skipped"][name] = str(exc)
            continue
        images[name] = img
        if where is not None:
            placed[name] = where
        video = out_dir / name / f"{case.id}.mp4"
        write_video(video, render_rollout(img, K, traj, cfg), traj.fps)
        record["videos"][name] = str(video)
        record["interventions"][name] = params
    dup = ctx["spot"]["mask"] if target is not None and "duplicated" in record["interventions"] else None
    record["ground_truth"] = ground_truth(case, traj, ctx["tmask"], dup, placed)
    record["_images"] = images  # in-memory only (tests, previews); dropped before writing JSON
    return record
