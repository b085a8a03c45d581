"""Geometry of the `hf` backend: monocular depth (DepthPro, Depth Anything) and correspondences
(LightGlue on SuperPoint keypoints, EfficientLoFTR).

The paper uses MoGe-2 depth and MASt3R matches; neither is in `transformers`,
so these are the closest models it ships (docs/backends.md).
"""

from __future__ import annotations

import math

import numpy as np

from worldeval.opis.backends.base import Correspondences
from worldeval.opis.backends.hf import (
    HALF,
    IMAGENET_MEAN,
    IMAGENET_STD,
    HFBackendError,
    load_config,
    load_model,
    model_version,
    to_pixels,
)

# relative (affine-invariant) disparity is mapped to depths in [1, 1 / RELATIVE_NEAR]
RELATIVE_NEAR = 0.1


def _resize_map(x, size: tuple[int, int]) -> np.ndarray:
    import torch.nn.functional as F

    return F.interpolate(x[None, None].float(), size=size, mode="bilinear", align_corners=False)[0, 0].cpu().numpy()


def disparity_to_depth(disp: np.ndarray) -> np.ndarray:
    """Relative disparity -> positive relative depth: robustly normalised to [0, 1], then inverted.

    Depth Anything's relative models predict disparity up to an unknown scale
    and shift; this keeps the order of depths (what occlusion reasoning needs)
    and bounds the range, with the far end at 1 / RELATIVE_NEAR times the near end.
    """
    d = np.asarray(disp, dtype=np.float64)
    finite = np.isfinite(d)
    if not finite.any():
        return np.full(d.shape, 1.0 / RELATIVE_NEAR, dtype=np.float32)
    lo, hi = np.percentile(d[finite], [1, 99])
    dn = np.clip((np.where(finite, d, lo) - lo) / (hi - lo), 0.0, 1.0) if hi > lo else np.zeros_like(d)
    return (1.0 / (RELATIVE_NEAR + (1.0 - RELATIVE_NEAR) * dn)).astype(np.float32)


class HFDepthEstimator:
    """(depth H x W float32 > 0, intrinsics 3x3 or None) for one image."""

    def __init__(self, model_name: str, device, dtype=None, local_files_only: bool = True, depth_size: int | None = None):
        import transformers

        cfg = load_config("depth", model_name, local_files_only)
        self.kind = cfg.model_type
        if self.kind == "depth_pro":
            cls = transformers.DepthProForDepthEstimation
        elif self.kind in ("depth_anything", "prompt_depth_anything"):
            cls = transformers.DepthAnythingForDepthEstimation
        else:
            raise HFBackendError("depth", model_name, f"expected DepthPro or Depth Anything, got model_type {self.kind!r}")
        self.name = self.kind
        self.device, self.dtype = device, dtype
        self.model = load_model("depth", cls, model_name, device, dtype, local_files_only)
        c = self.model.config
        if self.kind == "depth_pro":
            # DepthPro runs at a fixed size: its patch encoder tiles the image at the configured ratios
            side = int(round(c.patch_size / min(c.scaled_images_ratios)))
            self.fixed = (side, side)
            self.metric = bool(c.use_fov_model)
        else:
            self.fixed = None
            self.patch = int(c.patch_size if not isinstance(c.patch_size, (list, tuple)) else c.patch_size[0])
            self.short_side = int(depth_size or 518)
            self.metric = getattr(c, "depth_estimation_type", "relative") == "metric"
        self.versions = {"depth": model_version(model_name, self.model)}

    def _input_size(self, H: int, W: int) -> tuple[int, int]:
        if self.fixed is not None:
            return self.fixed
        s = self.short_side / min(H, W)
        p = self.patch
        return max(p, int(round(H * s / p)) * p), max(p, int(round(W * s / p)) * p)

    def estimate(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        import torch

        H, W = image.shape[:2]
        size = self._input_size(H, W)
        mean, std = (HALF, HALF) if self.kind == "depth_pro" else (IMAGENET_MEAN, IMAGENET_STD)
        px = to_pixels(image, size, mean, std, self.device, self.dtype)
        with torch.inference_mode():
            out = self.model(pixel_values=px)
        pred = out.predicted_depth[0].float()
        K = None
        if self.kind == "depth_pro":
            fov = getattr(out, "field_of_view", None)
            fov_deg = float(fov.reshape(-1)[0]) if fov is not None else float("nan")
            inv = pred
            if math.isfinite(fov_deg) and 1.0 < fov_deg < 179.0:
                f = 0.5 * W / math.tan(math.radians(fov_deg) / 2)
                # canonical inverse depth -> metric inverse depth at this image width
                inv = pred * (W / f)
                K = np.array([[f, 0, (W - 1) / 2], [0, f, (H - 1) / 2], [0, 0, 1]], dtype=np.float64)
            inv_full = _resize_map(inv, (H, W))
            # without a focal length the inverse depth has no scale: treat it like relative disparity
            depth = 1.0 / np.clip(inv_full, 1e-4, 1e4) if K is not None else disparity_to_depth(inv_full)
        elif self.metric:
            depth = np.clip(_resize_map(pred, (H, W)), 1e-3, None)
        else:
            depth = disparity_to_depth(_resize_map(pred, (H, W)))
        depth = np.where(np.isfinite(depth), depth, 1.0 / RELATIVE_NEAR).astype(np.float32)
        return depth, K


def _gray_pixels(image: np.ndarray, size: tuple[int, int], device, dtype=None):
    """Both matchers read luminance only, in [0, 1], as 3 equal channels."""
    import torch
    import torch.nn.functional as F

    x = torch.from_numpy(np.require(image, requirements=["C", "W"])).to(device).permute(2, 0, 1)[None].float() / 255.0
    g = 0.2989 * x[:, 0] + 0.5870 * x[:, 1] + 0.1140 * x[:, 2]
    g = F.interpolate(g[:, None], size=size, mode="bilinear", align_corners=False, antialias=True)
    g = g.repeat(1, 3, 1, 1)
    return g.to(dtype) if dtype is not None else g


def _inside(mask: np.ndarray | None, pts: np.ndarray) -> np.ndarray:
    if mask is None:
        return np.ones(len(pts), dtype=bool)
    H, W = mask.shape[:2]
    xi = np.clip(np.round(pts[:, 0]).astype(int), 0, W - 1)
    yi = np.clip(np.round(pts[:, 1]).astype(int), 0, H - 1)
    return np.asarray(mask, dtype=bool)[yi, xi]


class HFMatcher:
    """Point correspondences from LightGlue (SuperPoint keypoints) or EfficientLoFTR (semi-dense)."""

    # No keypoints of I0 alone: the keypoint-support check of template finds does not run (see the run manifest).
    detects_keypoints = False

    def __init__(
        self,
        model_name: str,
        device,
        dtype=None,
        local_files_only: bool = True,
        match_long_side: int = 640,
        min_match_score: float = 0.0,
        max_matches: int = 4096,
    ):
        import transformers

        cfg = load_config("matcher", model_name, local_files_only)
        self.kind = cfg.model_type
        if self.kind == "lightglue":
            cls = transformers.LightGlueForKeypointMatching
            self.multiple = 8
        elif self.kind == "efficientloftr":
            cls = transformers.EfficientLoFTRForKeypointMatching
            # coarse features at 1/8, aggregated by 4 in attention: sides must divide by 32
            self.multiple = 32
        else:
            raise HFBackendError("matcher", model_name, f"expected LightGlue or EfficientLoFTR, got model_type {self.kind!r}")
        self.name = self.kind
        self.device, self.dtype = device, dtype
        self.model = load_model("matcher", cls, model_name, device, dtype, local_files_only)
        self.long_side = int(match_long_side)
        self.min_score = float(min_match_score)
        self.max_matches = int(max_matches)
        self.versions = {"matcher": model_version(model_name, self.model)}

    def keypoints_in(self, image: np.ndarray, mask: np.ndarray) -> None:
        return None

    def _input_size(self, H: int, W: int) -> tuple[int, int]:
        s = self.long_side / max(H, W)
        m = self.multiple
        return max(m, int(round(H * s / m)) * m), max(m, int(round(W * s / m)) * m)

    def match(self, img0, img1, mask0=None, mask1=None) -> Correspondences:
        import torch

        (H0, W0), (H1, W1) = img0.shape[:2], img1.shape[:2]
        for k, (m, shape) in enumerate(((mask0, (H0, W0)), (mask1, (H1, W1)))):
            if m is not None and tuple(np.shape(m)[:2]) != shape:
                raise ValueError(f"match: mask{k} is {np.shape(m)[:2]} but image{k} is {shape}")
        # both images of a pair share one tensor, so one input size (from the first image's aspect)
        h, w = self._input_size(H0, W0)
        px = torch.stack([_gray_pixels(img0, (h, w), self.device, self.dtype)[0],
                          _gray_pixels(img1, (h, w), self.device, self.dtype)[0]])[None]  # fmt: skip
        with torch.inference_mode():
            out = self.model(pixel_values=px)
        if self.kind == "lightglue":
            p0, p1, sc = self._lightglue_pairs(out)
        else:
            p0, p1, sc = self._loftr_pairs(out, h, w)
        # model coordinates are relative to the input size: back to each image's pixels
        p0 = p0 * np.array([W0, H0], dtype=np.float64)
        p1 = p1 * np.array([W1, H1], dtype=np.float64)
        p0 = np.clip(p0, 0, [W0 - 1, H0 - 1])
        p1 = np.clip(p1, 0, [W1 - 1, H1 - 1])
        keep = (sc >= self.min_score) & _inside(mask0, p0) & _inside(mask1, p1)
        p0, p1, sc = p0[keep], p1[keep], sc[keep]
        order = np.argsort(-sc, kind="stable")[: self.max_matches]
        return Correspondences(pts0=p0[order].astype(np.float32), pts1=p1[order].astype(np.float32), scores=sc[order].astype(np.float32))

    @staticmethod
    def _lightglue_pairs(out):
        valid = out.mask[0].bool()  # 2 x K: padding of the keypoint lists
        kp0 = out.keypoints[0, 0].float().cpu().numpy()
        kp1 = out.keypoints[0, 1].float().cpu().numpy()
        m0 = out.matches[0, 0].cpu().numpy()
        s0 = out.matching_scores[0, 0].float().cpu().numpy()
        v0 = valid[0].cpu().numpy()
        n1 = int(valid[1].sum())
        ok = v0 & (m0 > -1) & (m0 < n1)
        idx = np.flatnonzero(ok)
        return kp0[idx].astype(np.float64), kp1[m0[idx]].astype(np.float64), s0[idx].astype(np.float64)

    @staticmethod
    def _loftr_pairs(out, h: int, w: int):
        # `matches[0, 0, j]` is the coarse cell of image 0 matched to cell j of image 1
        # (mutual nearest neighbours). We pair cells by these indices and use cell
        # centres: the refined keypoint lists are not index-aligned for pairs whose
        # cell order differs between the images.
        m = out.matches[0, 0].cpu().numpy()
        s = out.matching_scores[0, 0].float().cpu().numpy()
        n = m.shape[0]
        # coarse grid of the input: n cells at a stride of h * w / n pixels squared
        stride = math.sqrt(h * w / n)
        gw = int(round(w / stride))
        j = np.flatnonzero(m > -1)
        i = m[j]

        def centre(idx):
            return np.stack([(idx % gw + 0.5) * stride / w, (idx // gw + 0.5) * stride / h], 1).astype(np.float64)

        return centre(i), centre(j), s[j].astype(np.float64)
