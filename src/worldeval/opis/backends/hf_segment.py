"""Segmenters of the `hf` backend: SAM 3 (text-prompted concept segmentation) and SAM 2 (prompted, no text).

Both return observations found in the generated frame alone; the reference is
used only by SAM 2, to know where box prompts are worth trying, never to label
what it finds (its observations carry no category: SAM 2 cannot read a noun phrase).
"""

from __future__ import annotations

import numpy as np

from worldeval.opis.backends.base import Observation
from worldeval.opis.backends.hf_common import load_model, model_version
from worldeval.opis.backends.hf_common import HFBackendError, TensorPrep


def _square_size(value) -> tuple[int, int]:
    if isinstance(value, (list, tuple)):
        return int(value[0]), int(value[-1])
    return int(value), int(value)


def _tight_box(mask: np.ndarray) -> tuple[float, float, float, float] | None:
    ys = np.flatnonzero(mask.any(axis=1))
    xs = np.flatnonzero(mask.any(axis=0))
    if len(xs) == 0:
        return None
    return float(xs[0]), float(ys[0]), float(xs[-1] - xs[0] + 1), float(ys[-1] - ys[0] + 1)


def _greedy_dedupe(lowres: list[np.ndarray], scores: list[float], iou: float) -> list[int]:
    """Indices kept, best score first, dropping any mask overlapping a kept one above `iou`.

    Runs on the model's low-resolution masks: a uniform stretch scales every
    area by the same factor, so IoU there matches IoU at frame size closely.
    """
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    kept: list[int] = []
    flat = [m.reshape(-1) for m in lowres]
    for i in order:
        a = flat[i]
        area = a.sum()
        if area == 0:
            continue
        dup = False
        for j in kept:
            inter = np.logical_and(a, flat[j]).sum()
            union = area + flat[j].sum() - inter
            if union > 0 and inter / union > iou:
                dup = True
                break
        if not dup:
            kept.append(int(i))
    return kept


def _upsample_masks(logits, size: tuple[int, int], threshold: float, probabilities: bool = False,
                    chunk: int = 8) -> list[np.ndarray]:
    """N x h x w mask logits (torch) -> N boolean H x W masks, bilinear over the whole (stretched) frame.

    `probabilities`: resize sigmoid(logits) and threshold those (SAM 3's official
    post-processing), instead of resizing the logits (SAM 2's). Thresholding
    happens on the device, chunk by chunk, so a frame's worth of full-resolution
    float masks never sits in memory at once.
    """
    import torch.nn.functional as F

    out: list[np.ndarray] = []
    for s in range(0, logits.shape[0], chunk):
        part = logits[s : s + chunk, None].float()
        if probabilities:
            part = part.sigmoid()
        up = F.interpolate(part, size=size, mode="bilinear", align_corners=False)[:, 0]
        out.extend(m for m in (up > threshold).cpu().numpy())
    return out


class Sam3Segmenter:
    """`Sam3Model` prompted with each noun phrase of the case; one observation per kept query.

    `score_threshold` 0.3 and `mask_threshold` 0.5 are the defaults of the official
    post-processing (`Sam3Processor.post_process_instance_segmentation`): a query's
    score is sigmoid(class logit) x sigmoid(presence logit), its mask the resized
    mask probability above 0.5.
    """

    name = "sam3"
    evidence: frozenset[str] = frozenset()  # open detections: no instance search, no keypoint clusters

    def __init__(
        self,
        model_name: str,
        device,
        dtype=None,
        local_files_only: bool = True,
        score_threshold: float = 0.3,
        mask_threshold: float = 0.5,
        dedupe_iou: float = 0.7,
        max_observations: int = 64,
        phrase_batch: int = 8,
        min_area_frac: float = 2e-4,
        batch_size: int = 1,
    ):
        from transformers import AutoTokenizer, Sam3Model

        self.device, self.dtype = device, dtype
        self.model = load_model("sam3", Sam3Model, model_name, device, dtype, local_files_only)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(model_name), local_files_only=local_files_only)
        except Exception as exc:  # noqa: BLE001
            raise HFBackendError("sam3", model_name, f"cannot load the SAM 3 text tokenizer: {exc}") from exc
        cfg = self.model.config
        self.prep = TensorPrep.from_checkpoint("sam3", "sam3", model_name, local_files_only)
        self.prep.check_size("sam3", _square_size(cfg.vision_config.backbone_config.image_size), "vision image_size")
        self.max_text_len = int(getattr(cfg.text_config, "max_position_embeddings", 32))
        self.score_threshold = float(score_threshold)
        self.mask_threshold = float(mask_threshold)
        self.dedupe_iou = float(dedupe_iou)
        self.max_observations = int(max_observations)
        self.phrase_batch = max(1, int(phrase_batch))
        self.min_area_frac = float(min_area_frac)
        self.frame_batch = max(1, int(batch_size))  # frames per image-encoder batch in a run (BatchSegmenter)
        self._text: dict[str, tuple] = {}  # phrase -> (prompt features 1 x L x D, attention mask 1 x L)
        self.versions = {"segmenter": model_version(model_name, self.model), "segmenter_preprocessing": self.prep.describe()}

    def _text_features(self, phrases: list[str]):
        import torch

        missing = [p for p in dict.fromkeys(phrases) if p not in self._text]
        if missing:
            tok = self.tokenizer(
                missing, padding="max_length", max_length=self.max_text_len, truncation=True, return_tensors="pt"
            )
            ids = tok["input_ids"].to(self.device)
            am = tok["attention_mask"].to(self.device)
            with torch.inference_mode():
                out = self.model.get_text_features(input_ids=ids, attention_mask=am)
            for k, p in enumerate(missing):
                self._text[p] = (out.pooler_output[k : k + 1], am[k : k + 1])
        feats = torch.cat([self._text[p][0] for p in phrases])
        masks = torch.cat([self._text[p][1] for p in phrases])
        return feats, masks

    def observe(self, frame: np.ndarray, phrases: list[str], reference=None) -> list[Observation]:
        return self.observe_batch([frame], phrases, reference)[0]

    def observe_batch(self, frames: list[np.ndarray], phrases: list[str], reference=None) -> list[list[Observation]]:
        """`observe` for several frames, their images encoded in one batch (the costly part of SAM 3)."""
        import torch

        phrases = [p.strip() for p in dict.fromkeys(phrases) if p and p.strip()]
        if not phrases or not len(frames):
            return [[] for _ in frames]
        with torch.inference_mode():
            vis = self.model.get_vision_features(pixel_values=self.prep(list(frames), self.device, self.dtype))
        return [self._frame_observations(frame, vis, b, phrases) for b, frame in enumerate(frames)]

    def _candidates(self, vis, b: int, phrases: list[str]) -> list[tuple[float, str, object]]:
        """(score, phrase, low-res mask logits) of every query above the score threshold, frame `b` of `vis`."""
        import torch
        from transformers.modeling_outputs import BaseModelOutputWithPooling

        cands = []
        with torch.inference_mode():
            for start in range(0, len(phrases), self.phrase_batch):
                chunk = phrases[start : start + self.phrase_batch]
                n = len(chunk)
                feats, am = self._text_features(chunk)
                # one image, n prompts: the image features are shared, not recomputed
                ve = type(vis)(
                    fpn_hidden_states=tuple(h[b : b + 1].expand(n, *h.shape[1:]) for h in vis.fpn_hidden_states),
                    fpn_position_encoding=tuple(p[b : b + 1].expand(n, *p.shape[1:]) for p in vis.fpn_position_encoding),
                )
                out = self.model(
                    vision_embeds=ve, text_embeds=BaseModelOutputWithPooling(pooler_output=feats), attention_mask=am
                )
                scores = out.pred_logits.float().sigmoid()
                if out.presence_logits is not None:
                    scores = scores * out.presence_logits.float().sigmoid()
                for k, phrase in enumerate(chunk):
                    for q in torch.nonzero(scores[k] > self.score_threshold).flatten().tolist():
                        cands.append((float(scores[k, q]), phrase, out.pred_masks[k, q].float()))
        return cands

    def _frame_observations(self, frame: np.ndarray, vis, b: int, phrases: list[str]) -> list[Observation]:
        import torch

        H, W = frame.shape[:2]
        cands = self._candidates(vis, b, phrases)
        if not cands:
            return []
        cands.sort(key=lambda c: -c[0])
        cands = cands[: 4 * self.max_observations]
        lowres = [(c[2].sigmoid() > self.mask_threshold).cpu().numpy() for c in cands]
        kept = _greedy_dedupe(lowres, [c[0] for c in cands], self.dedupe_iou)[: self.max_observations]
        if not kept:
            return []
        masks = _upsample_masks(torch.stack([cands[i][2] for i in kept]), (H, W), self.mask_threshold, probabilities=True)
        obs = []
        min_area = self.min_area_frac * H * W
        for row, i in enumerate(kept):
            mask = masks[row]
            box = _tight_box(mask)
            if box is None or mask.sum() < max(1.0, min_area):
                continue
            score, phrase, _ = cands[i]
            obs.append(Observation(mask=mask, box=box, category=phrase, score=score, source="sam3"))
        return obs


def reference_boxes(reference, frame_shape: tuple[int, int]) -> list[tuple[float, float, float, float]]:
    """Boxes (x, y, w, h) of the instances of `reference` (the case's ReferenceBank: `boxes` in I0's
    pixels, `shape` I0's (H, W)), rescaled to the frame's size."""
    if reference is None:
        return []
    (H, W), (H0, W0) = frame_shape, reference.shape
    sy, sx = H / H0, W / W0
    out = []
    for b in reference.boxes:
        x, y, w, h = (float(v) for v in b[:4])
        if w > 0 and h > 0:
            out.append((x * sx, y * sy, w * sx, h * sy))
    return out


class Sam2Segmenter:
    """`Sam2Model` prompted with a point grid and with the reference boxes (fallback when SAM 3 is absent)."""

    name = "sam2"
    evidence: frozenset[str] = frozenset()

    def __init__(
        self,
        model_name: str,
        device,
        dtype=None,
        local_files_only: bool = True,
        points_per_side: int = 16,
        iou_threshold: float = 0.7,
        dedupe_iou: float = 0.7,
        max_observations: int = 64,
        point_batch: int = 64,
        min_area_frac: float = 2e-4,
        mask_threshold: float = 0.0,
    ):
        from transformers import Sam2Model

        self.device, self.dtype = device, dtype
        self.model = load_model("sam2", Sam2Model, model_name, device, dtype, local_files_only)
        self.prep = TensorPrep.from_checkpoint("sam2", "sam2", model_name, local_files_only)
        self.prep.check_size("sam2", _square_size(self.model.config.prompt_encoder_config.image_size), "prompt image_size")
        self.input_size = self.prep.size
        self.points_per_side = int(points_per_side)
        self.iou_threshold = float(iou_threshold)
        self.dedupe_iou = float(dedupe_iou)
        self.max_observations = int(max_observations)
        self.point_batch = max(1, int(point_batch))
        self.min_area_frac = float(min_area_frac)
        self.mask_threshold = float(mask_threshold)  # SAM 2 masks are logits: 0 is probability 0.5
        self.versions = {"segmenter": model_version(model_name, self.model), "segmenter_preprocessing": self.prep.describe()}

    def observe(self, frame: np.ndarray, phrases: list[str], reference=None) -> list[Observation]:
        import torch

        H, W = frame.shape[:2]
        S_h, S_w = self.input_size
        px = self.prep(frame, self.device, self.dtype)
        cands: list[tuple[float, str, object]] = []
        with torch.inference_mode():
            emb = self.model.get_image_embeddings(px)
            n = self.points_per_side
            if n > 0:
                g = (np.arange(n) + 0.5) / n
                pts = np.stack(np.meshgrid(g * S_w, g * S_h), -1).reshape(-1, 2).astype(np.float32)
                for s in range(0, len(pts), self.point_batch):
                    p = torch.from_numpy(pts[s : s + self.point_batch]).to(self.device)
                    out = self.model(
                        image_embeddings=emb,
                        input_points=p[None, :, None, :],
                        input_labels=torch.ones(1, len(p), 1, dtype=torch.long, device=self.device),
                        multimask_output=True,
                    )
                    iou = out.iou_scores[0].float()  # P x 3
                    best = iou.argmax(-1)
                    for k in range(len(p)):
                        b = int(best[k])
                        if float(iou[k, b]) >= self.iou_threshold:
                            cands.append((float(iou[k, b]), "sam2-grid", out.pred_masks[0, k, b].float()))
            boxes = reference_boxes(reference, (H, W))
            if boxes:
                xyxy = np.array([[x * S_w / W, y * S_h / H, (x + w) * S_w / W, (y + h) * S_h / H] for x, y, w, h in boxes])
                bt = torch.from_numpy(xyxy.astype(np.float32)).to(self.device)[None]
                out = self.model(image_embeddings=emb, input_boxes=bt, multimask_output=False)
                for k in range(bt.shape[1]):
                    score = float(out.iou_scores[0, k, 0])
                    if score >= self.iou_threshold:
                        cands.append((score, "sam2-box", out.pred_masks[0, k, 0].float()))
        if not cands:
            return []
        lowres = [(c[2] > self.mask_threshold).cpu().numpy() for c in cands]
        kept = _greedy_dedupe(lowres, [c[0] for c in cands], self.dedupe_iou)[: self.max_observations]
        if not kept:
            return []
        masks = _upsample_masks(torch.stack([cands[i][2] for i in kept]), (H, W), self.mask_threshold)
        obs = []
        min_area = self.min_area_frac * H * W
        for row, i in enumerate(kept):
            mask = masks[row]
            # a mask covering nearly the whole frame is the background, not an object
            if mask.sum() < max(1.0, min_area) or mask.mean() > 0.9:
                continue
            box = _tight_box(mask)
            score = float(min(1.0, max(0.0, cands[i][0])))
            obs.append(Observation(mask=mask, box=box, category=None, score=score, source=cands[i][1]))
        return obs
