"""Appearance embeddings of the `hf` backend: DINOv3 (the paper's choice) or DINOv2 on masked instance crops.

Identity is the cosine between the reference crop's descriptor and the
generated crop's, so both crops are prepared the same way: the box plus a
little context, pixels outside the instance mask set to the normalisation
mean (zero after normalising, so the background does not vote), letterboxed
to a square so the object's proportions survive the resize.
"""

from __future__ import annotations

import numpy as np

from worldeval.opis.backends.hf_common import HFBackendError, load_config, load_model, model_version
from worldeval.opis.backends.hf_common import (
    IMAGENET_MEAN,
    TensorPrep,
    describe_processor,
    official_pixels,
    official_processor,
)

POOLINGS = ("cls", "mean", "cls+mean")
COLOR_BINS = 4  # per RGB channel: a coarse joint colour histogram of 64 bins


def _model_class(option: str, model_type: str):
    import transformers

    table = {
        "dinov3_vit": "DINOv3ViTModel",
        "dinov2": "Dinov2Model",
        "dinov2_with_registers": "Dinov2WithRegistersModel",
    }
    if model_type not in table:
        raise HFBackendError(option, model_type, f"expected a DINOv3 ViT or DINOv2 model, got model_type {model_type!r}")
    return getattr(transformers, table[model_type])


def masked_crop(image: np.ndarray, mask: np.ndarray | None, box, context: float, mean=IMAGENET_MEAN) -> np.ndarray:
    """Square crop around `box` (+`context` of its size each side); outside the mask -> the normalisation mean."""
    H, W = image.shape[:2]
    x, y, w, h = (float(v) for v in box)
    w, h = max(w, 1.0), max(h, 1.0)
    x0 = int(np.floor(max(0.0, x - context * w)))
    y0 = int(np.floor(max(0.0, y - context * h)))
    x1 = int(np.ceil(min(float(W), x + w + context * w)))
    y1 = int(np.ceil(min(float(H), y + h + context * h)))
    if x1 - x0 < 2 or y1 - y0 < 2:
        # a box outside or at the edge of the image: take the nearest 2x2 pixels rather than nothing
        x0, y0 = min(max(0, x0), W - 2), min(max(0, y0), H - 2)
        x1, y1 = x0 + 2, y0 + 2
    crop = image[y0:y1, x0:x1].astype(np.float32)
    fill = np.array(mean, dtype=np.float32) * 255.0
    if mask is not None:
        m = np.asarray(mask, dtype=bool)[y0:y1, x0:x1]
        if m.any():
            crop = np.where(m[..., None], crop, fill)
    ch, cw = crop.shape[:2]
    side = max(ch, cw)
    canvas = np.empty((side, side, 3), dtype=np.float32)
    canvas[:] = fill
    oy, ox = (side - ch) // 2, (side - cw) // 2
    canvas[oy : oy + ch, ox : ox + cw] = crop
    return canvas


def color_histogram(image: np.ndarray, mask: np.ndarray | None, box) -> np.ndarray:
    """L2-normalised joint RGB histogram of the instance's pixels (its box when the mask is empty)."""
    H, W = image.shape[:2]
    x, y, w, h = (float(v) for v in box)
    x0, y0 = max(0, int(np.floor(x))), max(0, int(np.floor(y)))
    x1, y1 = min(W, int(np.ceil(x + max(w, 1.0)))), min(H, int(np.ceil(y + max(h, 1.0))))
    x1, y1 = max(x1, min(W, x0 + 1)), max(y1, min(H, y0 + 1))
    pix = image[y0:y1, x0:x1].reshape(-1, 3)
    if mask is not None:
        m = np.asarray(mask, dtype=bool)[y0:y1, x0:x1].reshape(-1)
        if m.any():
            pix = pix[m]
    q = (pix.astype(np.int64) * COLOR_BINS) // 256
    idx = (q[:, 0] * COLOR_BINS + q[:, 1]) * COLOR_BINS + q[:, 2]
    hist = np.bincount(idx, minlength=COLOR_BINS**3).astype(np.float64)
    n = np.linalg.norm(hist)
    return (hist / n if n > 0 else hist).astype(np.float32)


class DinoEmbedder:
    """N x D L2-normalised crop descriptors from a DINOv3 (or DINOv2) ViT.

    `color_weight` w in [0, 1) appends a colour histogram so that the cosine of
    two descriptors is (1 - w) * cos(DINO) + w * cos(colour); 0 (default) is the
    paper's configuration, pure DINO.
    """

    # a batch changes a descriptor only within the device's float tolerance (tests/opis/backends: batched
    # against one crop at a time), so a frame may embed as few crops as it needs
    min_batch = 1

    def __init__(
        self,
        model_name: str,
        device,
        dtype=None,
        local_files_only: bool = True,
        option: str = "dinov3",
        embed_size: int | None = None,
        pooling: str = "cls",
        color_weight: float = 0.0,
        embed_batch: int = 16,
        context: float = 0.1,
    ):
        if pooling not in POOLINGS:
            raise HFBackendError("pooling", pooling, f"expected one of {POOLINGS}")
        if not 0.0 <= float(color_weight) < 1.0:
            raise HFBackendError("color_weight", color_weight, "must be in [0, 1)")
        cfg = load_config(option, model_name, local_files_only)
        cls = _model_class(option, cfg.model_type)
        self.name = option
        self.device, self.dtype = device, dtype
        self.model = load_model(option, cls, model_name, device, dtype, local_files_only)
        self._setup_preprocessing(option, cfg.model_type, model_name, local_files_only, embed_size)
        self.pooling = pooling
        self.color_weight = float(color_weight)
        self.batch = max(1, int(embed_batch))
        self.context = float(context)
        self.num_prefix = 1 + int(getattr(self.model.config, "num_register_tokens", 0) or 0)
        self.versions = {"embedder": model_version(model_name, self.model) + f"[{pooling},cw={self.color_weight:g}]",
                         "embedder_preprocessing": self.prep_description}  # fmt: skip

    def _setup_preprocessing(self, option, model_type, model_name, local_files_only, embed_size) -> None:
        """The checkpoint's own preprocessing; `embed_size` (a departure from it) forces a square input side."""
        patch = self.model.config.patch_size
        patch = int(patch[0] if isinstance(patch, (list, tuple)) else patch)
        side = None if embed_size is None else max(patch, int(round(int(embed_size) / patch)) * patch)
        if model_type == "dinov3_vit":
            self.prep = TensorPrep.from_checkpoint(option, model_type, model_name, local_files_only)
            self.processor, self.mean = None, self.prep.mean
            self.size = (side, side) if side else self.prep.size
            self.prep_description = self.prep.describe() + (f" resized to {side}" if side else "")
        else:
            self.processor = official_processor(option, model_type, model_name, local_files_only)
            # with `embed_size`, the whole crop at side x side: no centre crop cutting the object's edges
            self.size = {"size": {"height": side, "width": side}, "do_center_crop": False} if side else {}
            self.prep, self.mean = None, tuple(self.processor.image_mean)
            self.prep_description = describe_processor(self.processor) + (f" resized to {side}" if side else "")

    def pixels(self, crops: list[np.ndarray]):
        """N x 3 x h x w model input for uint8 crops."""
        if self.processor is not None:
            return official_pixels(self.processor, crops, self.device, self.dtype, **self.size)
        return self.prep(crops, self.device, self.dtype, size=self.size)

    @property
    def dim(self) -> int:
        d = int(self.model.config.hidden_size) * (2 if self.pooling == "cls+mean" else 1)
        return d + (COLOR_BINS**3 if self.color_weight > 0 else 0)

    def _pool(self, out):
        import torch
        import torch.nn.functional as F

        cls = out.pooler_output.float()
        mean = out.last_hidden_state[:, self.num_prefix :].float().mean(1)
        if self.pooling == "cls":
            v = cls
        elif self.pooling == "mean":
            v = mean
        else:
            v = torch.cat([F.normalize(cls, dim=-1), F.normalize(mean, dim=-1)], -1)
        return F.normalize(v, dim=-1)

    def embed(self, image: np.ndarray, masks: list[np.ndarray], boxes: list) -> np.ndarray:
        return self.embed_many([(image, masks, boxes)])[0]

    def embed_many(self, items: list[tuple[np.ndarray, list, list]]) -> list[np.ndarray]:
        """`embed` for several (image, masks, boxes): the crops of all images share the model's batches."""
        import torch

        for image, masks, boxes in items:
            if len(masks) != len(boxes):
                raise ValueError(f"embed: {len(masks)} masks but {len(boxes)} boxes")
        jobs = [(image, m, b) for image, masks, boxes in items for m, b in zip(masks, boxes)]
        feats = []
        with torch.inference_mode():
            for s in range(0, len(jobs), self.batch):
                crops = [masked_crop(im, m, b, self.context, self.mean).round().astype(np.uint8) for im, m, b in jobs[s : s + self.batch]]
                feats.append(self._pool(self.model(pixel_values=self.pixels(crops))).cpu().numpy())
        dino = np.concatenate(feats).astype(np.float32) if feats else np.zeros((0, self.dim), np.float32)
        if self.color_weight > 0 and len(jobs):
            col = np.stack([color_histogram(im, m, b) for im, m, b in jobs])
            dino = np.concatenate([np.sqrt(1 - self.color_weight) * dino, np.sqrt(self.color_weight) * col], 1)
        n = np.linalg.norm(dino, axis=1, keepdims=True)
        dino = (dino / np.maximum(n, 1e-12)).astype(np.float32)
        bounds = np.cumsum([0] + [len(boxes) for _, _, boxes in items])
        return [dino[bounds[k] : bounds[k + 1]] for k in range(len(items))]


class DinoDenseFeatures:
    """DenseFeatures protocol from the embedder's own ViT: its patch tokens over the whole frame.

    DINO patch features are the strongest known features for label propagation (Caron et al. 2021
    evaluate DINO on DAVIS this way). The frame is resized so that its long side is about `side`
    pixels, each side a multiple of the patch size, normalised with the checkpoint's mean and std,
    and the last layer's patch tokens (registers and CLS dropped) are L2-normalised per location.
    """

    name = "dino-patch-tokens"
    # no part match calibrated to DINO tokens: the lost-object gate does not run (docs/backends.md)
    part_floor = None

    def __init__(self, embedder: DinoEmbedder, side: int = 640):
        self.embedder = embedder
        patch = embedder.model.config.patch_size
        self.patch = int(patch[0] if isinstance(patch, (list, tuple)) else patch)
        self.side = int(side)
        if embedder.processor is not None:
            self.mean, self.std = tuple(embedder.processor.image_mean), tuple(embedder.processor.image_std)
        else:
            self.mean, self.std = embedder.prep.mean, embedder.prep.std
        self.versions = {"dense_features": f"{embedder.versions['embedder']} patch tokens, long side ~{self.side} px, L2-normalised"}

    def grid(self, shape: tuple[int, int]) -> tuple[int, int]:
        """(rows, columns) of patches for a frame of `shape` (H, W)."""
        H, W = shape
        s = self.side / max(H, W)
        return max(1, int(round(H * s / self.patch))), max(1, int(round(W * s / self.patch)))

    def dense(self, image: np.ndarray) -> np.ndarray:
        import cv2
        import torch

        gh, gw = self.grid(image.shape[:2])
        x = cv2.resize(image, (gw * self.patch, gh * self.patch), interpolation=cv2.INTER_AREA).astype(np.float32) / 255.0
        x = (x - np.array(self.mean, np.float32)) / np.array(self.std, np.float32)
        model = self.embedder.model
        pix = torch.from_numpy(x).permute(2, 0, 1)[None].contiguous().to(self.embedder.device)
        if self.embedder.dtype is not None:
            pix = pix.to(self.embedder.dtype)
        with torch.inference_mode():
            tokens = model(pixel_values=pix).last_hidden_state[0, self.embedder.num_prefix :].float()
            tokens = torch.nn.functional.normalize(tokens, dim=-1)
        if tokens.shape[0] != gh * gw:
            raise ValueError(f"dense features: {tokens.shape[0]} patch tokens for a {gh} x {gw} grid")
        return tokens.reshape(gh, gw, -1).cpu().numpy()
