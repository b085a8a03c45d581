"""Geometry of the `hf` backend: monocular depth (DepthPro, Depth Anything) and correspondences
(LightGlue on SuperPoint keypoints, EfficientLoFTR).

The paper uses MoGe-2 depth and MASt3R matches; neither is in `transformers`,
so these are the closest models it ships (docs/backends.md).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict

import numpy as np

from worldeval.opis.backends.base import Correspondences
from worldeval.opis.backends.hf_common import HFBackendError, load_config, load_model, model_version
from worldeval.opis.backends.hf_common import TensorPrep, describe_processor, official_pixels, official_processor

# relative (affine-invariant) disparity is mapped to depths in [1, 1 / RELATIVE_NEAR]
RELATIVE_NEAR = 0.1


def _resize_map(x, size: tuple[int, int]) -> np.ndarray:
    import torch.nn.functional as F

    return F.interpolate(x[None, None].float(), size=size, mode="bilinear", align_corners=False)[0, 0].cpu().numpy()


def _normalise(d: np.ndarray) -> np.ndarray:
    """Robustly to [0, 1] (1st to 99th percentile); non-finite values count as the low end."""
    d = np.asarray(d, dtype=np.float64)
    finite = np.isfinite(d)
    if not finite.any():
        return np.zeros(d.shape)
    lo, hi = np.percentile(d[finite], [1, 99])
    return np.clip((np.where(finite, d, lo) - lo) / (hi - lo), 0.0, 1.0) if hi > lo else np.zeros_like(d)


def disparity_to_depth(disp: np.ndarray) -> np.ndarray:
    """Relative disparity -> positive relative depth: robustly normalised to [0, 1], then inverted.

    Depth Anything's relative models predict disparity up to an unknown scale
    and shift; this keeps the order of depths (what occlusion reasoning needs)
    and bounds the range, with the far end at 1 / RELATIVE_NEAR times the near end.
    """
    if not np.isfinite(np.asarray(disp, dtype=np.float64)).any():
        return np.full(np.shape(disp), 1.0 / RELATIVE_NEAR, dtype=np.float32)
    return (1.0 / (RELATIVE_NEAR + (1.0 - RELATIVE_NEAR) * _normalise(disp))).astype(np.float32)


def relative_to_depth(rel: np.ndarray) -> np.ndarray:
    """Relative depth (larger is farther, unknown scale and shift) -> depths in [1, 1 / RELATIVE_NEAR], same order."""
    return (1.0 + (1.0 / RELATIVE_NEAR - 1.0) * _normalise(rel)).astype(np.float32)


# config model_type -> (transformers class, what its output means without extra input)
DEPTH_MODELS = {
    "depth_pro": ("DepthProForDepthEstimation", "inverse depth"),
    "depth_anything": ("DepthAnythingForDepthEstimation", "disparity"),
    # without a prompt depth map, Prompt Depth Anything predicts relative depth (its head is trained on
    # prompt-normalised depth, not disparity), so it is not inverted
    "prompt_depth_anything": ("PromptDepthAnythingForDepthEstimation", "relative depth"),
}


class HFDepthEstimator:
    """(depth H x W float32 > 0, intrinsics 3x3 or None) for one image."""

    def __init__(self, model_name: str, device, dtype=None, local_files_only: bool = True, depth_size: int | None = None):
        import transformers

        cfg = load_config("depth", model_name, local_files_only)
        self.kind = cfg.model_type
        if self.kind not in DEPTH_MODELS:
            raise HFBackendError("depth", model_name, f"expected one of {sorted(DEPTH_MODELS)}, got model_type {self.kind!r}")
        cls = getattr(transformers, DEPTH_MODELS[self.kind][0])
        self.name = self.kind
        self.device, self.dtype = device, dtype
        self.model = load_model("depth", cls, model_name, device, dtype, local_files_only)
        c = self.model.config
        if self.kind == "depth_pro":
            self.prep, self.processor = TensorPrep.from_checkpoint("depth", "depth_pro", model_name, local_files_only), None
            # DepthPro runs at a fixed size: its patch encoder tiles the image at the configured ratios
            side = int(round(c.patch_size / min(c.scaled_images_ratios)))
            self.prep.check_size("depth", (side, side), "patch_size / min(scaled_images_ratios)")
            self.metric = bool(c.use_fov_model)
            described = self.prep.describe()
        else:
            self.prep, self.processor = None, official_processor("depth", self.kind, model_name, local_files_only)
            self.call_kwargs = {"size": {"height": int(depth_size), "width": int(depth_size)}} if depth_size else {}
            self.metric = getattr(c, "depth_estimation_type", "relative") == "metric"
            described = describe_processor(self.processor) + (f" size {depth_size}" if depth_size else "")
        self.versions = {"depth": model_version(model_name, self.model), "depth_preprocessing": described}

    def _pixels(self, image: np.ndarray):
        if self.prep is not None:
            return self.prep(image, self.device, self.dtype)
        return official_pixels(self.processor, [image], self.device, self.dtype, **self.call_kwargs)

    def estimate(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        import torch

        H, W = image.shape[:2]
        with torch.inference_mode():
            out = self.model(pixel_values=self._pixels(image))
        pred = out.predicted_depth[0].float()
        K = None
        if self.kind == "depth_pro":
            depth, K = self._depth_pro(out, pred, H, W)
        elif self.metric:
            depth = np.clip(_resize_map(pred, (H, W)), 1e-3, None)
        elif self.kind == "prompt_depth_anything":
            depth = relative_to_depth(_resize_map(pred, (H, W)))
        else:
            depth = disparity_to_depth(_resize_map(pred, (H, W)))
        depth = np.where(np.isfinite(depth), depth, 1.0 / RELATIVE_NEAR).astype(np.float32)
        return depth, K

    @staticmethod
    def _depth_pro(out, pred, H: int, W: int):
        fov = getattr(out, "field_of_view", None)
        fov_deg = float(fov.reshape(-1)[0]) if fov is not None else float("nan")
        inv, K = pred, None
        if math.isfinite(fov_deg) and 1.0 < fov_deg < 179.0:
            f = 0.5 * W / math.tan(math.radians(fov_deg) / 2)
            # canonical inverse depth -> metric inverse depth at this image width
            inv = pred * (W / f)
            K = np.array([[f, 0, (W - 1) / 2], [0, f, (H - 1) / 2], [0, 0, 1]], dtype=np.float64)
        inv_full = _resize_map(inv, (H, W))
        # without a focal length the inverse depth has no scale: treat it like relative disparity
        depth = 1.0 / np.clip(inv_full, 1e-4, 1e4) if K is not None else disparity_to_depth(inv_full)
        return depth, K


PAIR_CACHE = 4  # image pairs whose matches are kept (frames measured at once each hold one)


def _identity(image: np.ndarray) -> tuple:
    return (image.__array_interface__["data"][0], image.shape, image.strides)


def _inside(mask: np.ndarray | None, pts: np.ndarray) -> np.ndarray:
    if mask is None:
        return np.ones(len(pts), dtype=bool)
    H, W = mask.shape[:2]
    xi = np.clip(np.round(pts[:, 0]).astype(int), 0, W - 1)
    yi = np.clip(np.round(pts[:, 1]).astype(int), 0, H - 1)
    return np.asarray(mask, dtype=bool)[yi, xi]


class HFMatcher:
    """Point correspondences from LightGlue (SuperPoint keypoints) or EfficientLoFTR (semi-dense).

    In float16/bfloat16 LightGlue keeps its weights in float32 and runs its
    attention under autocast, with the SuperPoint detector outside it: a cast of
    the keypoints themselves to bfloat16 would put them on a grid of 1/256 of the
    image side (2.5 px at 640 px). EfficientLoFTR's points come from cell indices
    here, so it runs wholly in the reduced precision.
    """

    def __init__(
        self,
        model_name: str,
        device,
        dtype=None,
        local_files_only: bool = True,
        match_long_side: int | None = None,
        min_match_score: float = 0.0,
        max_matches: int = 4096,
    ):
        import torch
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
        # LightGlue's SuperPoint finds keypoints in one image alone (the pipeline's keypoint-support
        # check); EfficientLoFTR is detector-free, so that check does not run with it (run manifest: checks)
        self.detects_keypoints = self.kind == "lightglue"
        self._keypoints: tuple[bytes, np.ndarray] | None = None  # the last image's keypoints, by content digest
        self._pairs: OrderedDict = OrderedDict()  # (img0, img1) identities -> their matches (`pair_matches`)
        self._pairs_lock = threading.Lock()
        self.device = device
        half = dtype is not None and dtype != torch.float32
        self.autocast = dtype if (half and self.kind == "lightglue") else None
        self.dtype = None if self.autocast is not None else dtype
        self.model = load_model("matcher", cls, model_name, device, self.dtype, local_files_only)
        if self.autocast is not None:
            self._detector_in_fp32()
        self.processor = official_processor("matcher", self.kind, model_name, local_files_only)
        self.long_side = int(match_long_side) if match_long_side else None
        self.min_score = float(min_match_score)
        self.max_matches = int(max_matches)
        self.versions = {"matcher": model_version(model_name, self.model) + (f"[autocast {dtype}]" if self.autocast else ""),
                         "matcher_preprocessing": describe_processor(self.processor)
                         + (f" long side {self.long_side}" if self.long_side else "")}  # fmt: skip

    def keypoints_in(self, image: np.ndarray, mask: np.ndarray) -> np.ndarray | None:
        """SuperPoint keypoints of `image` (its pixels, x, y) inside `mask`; None for EfficientLoFTR."""
        import hashlib

        import torch

        if not self.detects_keypoints:
            return None
        H, W = image.shape[:2]
        digest = hashlib.blake2b(np.ascontiguousarray(image).tobytes(), digest_size=16).digest() + bytes(str((H, W)), "ascii")
        if self._keypoints is None or self._keypoints[0] != digest:
            size = self._input_size(H, W)
            kw = {"size": {"height": size[0], "width": size[1]}} if size else {}
            px = official_pixels(self.processor, [[image, image]], self.device, self.dtype, **kw)[:, 0]
            with torch.inference_mode():
                det = self.model.keypoint_detector(px.float() if self.autocast is not None else px)
            rel = det.keypoints[0][det.mask[0].bool()].float().cpu().numpy()
            self._keypoints = (digest, rel.astype(np.float64) * np.array([W, H], dtype=np.float64))
        xy = self._keypoints[1]
        return xy[_inside(mask, xy)].astype(np.float32)

    def _detector_in_fp32(self) -> None:
        import torch

        det = self.model.keypoint_detector
        forward = det.forward
        device_type = torch.device(self.device).type

        def fp32_forward(pixel_values, *args, **kwargs):
            with torch.autocast(device_type, enabled=False):
                return forward(pixel_values.float(), *args, **kwargs)

        det.forward = fp32_forward

    def _input_size(self, H: int, W: int) -> tuple[int, int] | None:
        if self.long_side is None:
            return None  # the checkpoint's configured size
        s = self.long_side / max(H, W)
        m = self.multiple
        return max(m, int(round(H * s / m)) * m), max(m, int(round(W * s / m)) * m)

    def _forward(self, img0, img1):
        import torch

        size = self._input_size(*img0.shape[:2])
        kw = {"size": {"height": size[0], "width": size[1]}} if size else {}
        px = official_pixels(self.processor, [[img0, img1]], self.device, self.dtype, **kw)
        h, w = px.shape[-2:]
        with torch.inference_mode():
            if self.autocast is None:
                return self.model(pixel_values=px), h, w
            with torch.autocast(torch.device(self.device).type, dtype=self.autocast):
                return self.model(pixel_values=px.float()), h, w

    def match(self, img0, img1, mask0=None, mask1=None) -> Correspondences:
        (H0, W0), (H1, W1) = img0.shape[:2], img1.shape[:2]
        for k, (m, shape) in enumerate(((mask0, (H0, W0)), (mask1, (H1, W1)))):
            if m is not None and tuple(np.shape(m)[:2]) != shape:
                raise ValueError(f"match: mask{k} is {np.shape(m)[:2]} but image{k} is {shape}")
        p0, p1, sc = self.pair_matches(img0, img1)
        keep = (sc >= self.min_score) & _inside(mask0, p0) & _inside(mask1, p1)
        p0, p1, sc = p0[keep], p1[keep], sc[keep]
        order = np.argsort(-sc, kind="stable")[: self.max_matches]
        return Correspondences(pts0=p0[order].astype(np.float32), pts1=p1[order].astype(np.float32), scores=sc[order].astype(np.float32))

    def pair_matches(self, img0, img1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(points in img0, points in img1, scores) of every match of the pair, in each image's pixels.

        The masks of `match` only select among these, so one forward serves every call on the same
        pair: the camera, each static instance's place, keypoint support and Structure all match I0
        with the same frame (one forward a frame instead of one per instance and check). Kept for the
        last few pairs, by the arrays' identity (frames and I0 are never changed in place).
        """
        key = (_identity(img0), _identity(img1))
        with self._pairs_lock:
            hit = self._pairs.get(key)
            if hit is not None and hit[0] is img0 and hit[1] is img1:
                self._pairs.move_to_end(key)
                return hit[2]
        (H0, W0), (H1, W1) = img0.shape[:2], img1.shape[:2]
        # both images of a pair share one tensor, so one input size
        out, h, w = self._forward(img0, img1)
        if self.kind == "lightglue":
            p0, p1, sc = self._lightglue_pairs(out)
        else:
            p0, p1, sc = self._loftr_pairs(out, h, w)
        # model coordinates are relative to the input size: back to each image's pixels
        p0 = np.clip(p0 * np.array([W0, H0], dtype=np.float64), 0, [W0 - 1, H0 - 1])
        p1 = np.clip(p1 * np.array([W1, H1], dtype=np.float64), 0, [W1 - 1, H1 - 1])
        for a in (p0, p1, sc):
            a.setflags(write=False)  # shared by every caller of the pair
        with self._pairs_lock:
            self._pairs[key] = (img0, img1, (p0, p1, sc))
            while len(self._pairs) > PAIR_CACHE:
                self._pairs.popitem(last=False)
        return p0, p1, sc

    def match_background(self, img0, img1, background) -> Correspondences:
        """The camera's correspondences: the learned matchers rank matches over the whole pair, so
        the background simply keeps its share of them (no budget of its own)."""
        return self.match(img0, img1, mask0=background)

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
