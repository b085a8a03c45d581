"""Pose landmarks of the `hf` backend: top-down ViTPose / ViTPose++ for people and animals.

Dynamic Structure (paper eq. 5) compares skeleton segment lengths between the
input and a generated frame, so what matters here is that a joint index means
the same body part in both and that coordinates are in image pixels.
"""

from __future__ import annotations

import re

import numpy as np

from worldeval.opis.backends.base import Keypoints
from worldeval.opis.backends.hf import IMAGENET_MEAN, IMAGENET_STD, HFBackendError, load_model, model_version

# COCO-17 person skeleton (0 nose, 1-2 eyes, 3-4 ears, 5-6 shoulders, 7-8 elbows, 9-10 wrists,
# 11-12 hips, 13-14 knees, 15-16 ankles)
COCO_EDGES = [
    (15, 13), (13, 11), (16, 14), (14, 12), (11, 12), (5, 11), (6, 12), (5, 6), (5, 7),
    (6, 8), (7, 9), (8, 10), (1, 2), (0, 1), (0, 2), (1, 3), (2, 4), (3, 5), (4, 6),
]  # fmt: skip
# AP-10K 17-keypoint animal skeleton (0-1 eyes, 2 nose, 3 neck, 4 tail root, 5-7 left front leg,
# 8-10 right front leg, 11-13 left hind leg, 14-16 right hind leg)
AP10K_EDGES = [
    (0, 1), (0, 2), (1, 2), (2, 3), (3, 4), (3, 5), (5, 6), (6, 7), (3, 8), (8, 9), (9, 10),
    (4, 11), (11, 12), (12, 13), (4, 14), (14, 15), (15, 16),
]  # fmt: skip

PERSON_WORDS = {
    "person", "people", "man", "men", "woman", "women", "boy", "girl", "child", "children", "kid", "baby",
    "human", "rider", "cyclist", "biker", "player", "pedestrian", "skier", "skateboarder", "surfer", "runner",
    "dancer", "athlete", "worker", "chef", "driver", "walker", "student", "soldier", "lady", "gentleman",
}  # fmt: skip
ANIMAL_WORDS = {
    "dog", "puppy", "cat", "kitten", "horse", "pony", "cow", "calf", "sheep", "lamb", "goat", "pig", "bear",
    "zebra", "giraffe", "elephant", "deer", "moose", "lion", "tiger", "leopard", "cheetah", "wolf", "fox",
    "rabbit", "bunny", "squirrel", "monkey", "gorilla", "chimpanzee", "panda", "camel", "donkey", "buffalo",
    "bison", "antelope", "rhino", "rhinoceros", "hippo", "hippopotamus", "kangaroo", "raccoon", "otter", "animal",
}  # fmt: skip


def _words(phrase: str) -> list[str]:
    out = []
    for w in re.findall(r"[a-z]+", phrase.lower()):
        out.append(w)
        if w.endswith("s") and len(w) > 3:
            out.append(w[:-1])  # plural: "dogs" names a dog
    return out


def category_kind(category: str | None) -> str | None:
    """'person', 'animal' or None from a noun phrase (its head noun is usually the last word)."""
    if not category:
        return None
    words = _words(category)
    if any(w in PERSON_WORDS for w in words):
        return "person"
    if any(w in ANIMAL_WORDS for w in words):
        return "animal"
    return None


def box_to_center_scale(box, aspect: float, padding: float = 1.25) -> tuple[np.ndarray, np.ndarray]:
    """Centre and size (w, h) of the crop window: the box padded and widened to the model's aspect (w / h)."""
    x, y, w, h = (float(v) for v in box)
    c = np.array([x + w / 2, y + h / 2], dtype=np.float64)
    if w > aspect * h:
        h = w / aspect
    else:
        w = h * aspect
    return c, np.array([w, h], dtype=np.float64) * padding


def decode_heatmaps(heatmaps: np.ndarray, center: np.ndarray, size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """J x h x w heatmaps -> (J x 2 image coordinates, J peak values).

    The arg-max is refined a quarter pixel towards the higher neighbour, then the
    heatmap grid (pixel centres) is mapped linearly onto the crop window.
    """
    J, hh, ww = heatmaps.shape
    flat = heatmaps.reshape(J, -1)
    idx = flat.argmax(1)
    conf = flat[np.arange(J), idx]
    px = (idx % ww).astype(np.float64)
    py = (idx // ww).astype(np.float64)
    for j in range(J):
        ix, iy = int(px[j]), int(py[j])
        if 0 < ix < ww - 1:
            px[j] += 0.25 * np.sign(heatmaps[j, iy, ix + 1] - heatmaps[j, iy, ix - 1])
        if 0 < iy < hh - 1:
            py[j] += 0.25 * np.sign(heatmaps[j, iy + 1, ix] - heatmaps[j, iy - 1, ix])
    x = center[0] - size[0] / 2 + (px + 0.5) * size[0] / ww
    y = center[1] - size[1] / 2 + (py + 0.5) * size[1] / hh
    return np.stack([x, y], 1), conf.astype(np.float64)


class VitPoseEstimator:
    """Top-down landmarks for a person or animal box; `supports` says which categories it covers."""

    name = "vitpose"

    def __init__(
        self,
        human: str | None,
        animal: str | None,
        device,
        dtype=None,
        local_files_only: bool = True,
        pose_min_conf: float = 0.0,
        human_dataset_index: int = 0,
        animal_dataset_index: int = 0,
    ):
        from transformers import VitPoseForPoseEstimation

        self.device, self.dtype = device, dtype
        self.models: dict[str, tuple] = {}
        self.versions = {}
        for kind, name, ds in (("person", human, human_dataset_index), ("animal", animal, animal_dataset_index)):
            if not name:
                continue
            option = "vitpose" if kind == "person" else "vitpose_animal"
            model = load_model(option, VitPoseForPoseEstimation, name, device, dtype, local_files_only)
            J = int(model.config.num_labels)
            edges = COCO_EDGES if kind == "person" else AP10K_EDGES
            if J != 17:
                raise HFBackendError(option, name, f"expected a 17-keypoint head (COCO / AP-10K), got {J} keypoints")
            self.models[kind] = (model, edges, int(ds))
            self.versions[f"pose_{kind}"] = model_version(name, model)
        self.min_conf = float(pose_min_conf)

    def supports(self, category: str) -> bool:
        kind = category_kind(category)
        return kind is not None and kind in self.models

    def keypoints(self, image: np.ndarray, box, category: str | None = None) -> Keypoints | None:
        import cv2
        import torch

        kind = category_kind(category) if category else None
        if kind not in self.models:
            kind = "person" if "person" in self.models else next(iter(self.models), None)
        if kind is None:
            return None
        model, edges, ds = self.models[kind]
        H, W = image.shape[:2]
        x, y, w, h = (float(v) for v in box)
        x0, y0, x1, y1 = max(0.0, x), max(0.0, y), min(float(W), x + w), min(float(H), y + h)
        if x1 - x0 < 2 or y1 - y0 < 2:
            return None
        ih, iw = (int(v) for v in model.config.backbone_config.image_size)
        center, size = box_to_center_scale((x0, y0, x1 - x0, y1 - y0), iw / ih)
        # affine map from the crop window to the model input (pixel centres to pixel centres)
        sx, sy = iw / size[0], ih / size[1]
        M = np.array(
            [[sx, 0, -(center[0] - size[0] / 2) * sx + 0.5 * sx - 0.5], [0, sy, -(center[1] - size[1] / 2) * sy + 0.5 * sy - 0.5]],
            dtype=np.float64,
        )
        crop = cv2.warpAffine(image, M, (iw, ih), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0)
        x_t = torch.from_numpy(crop).to(self.device).permute(2, 0, 1)[None].float() / 255.0
        mean = torch.tensor(IMAGENET_MEAN, device=self.device).view(1, 3, 1, 1)
        std = torch.tensor(IMAGENET_STD, device=self.device).view(1, 3, 1, 1)
        x_t = ((x_t - mean) / std).to(self.dtype or torch.float32)
        kwargs = {}
        if int(getattr(model.config.backbone_config, "num_experts", 1)) > 1:
            kwargs["dataset_index"] = torch.tensor([ds], device=self.device)
        with torch.inference_mode():
            heat = model(pixel_values=x_t, **kwargs).heatmaps[0].float().cpu().numpy()
        xy, conf = decode_heatmaps(heat, center, size)
        # a landmark outside the object's box is a detection error, not a body part
        xy[:, 0] = np.clip(xy[:, 0], x0, x1 - 1e-6)
        xy[:, 1] = np.clip(xy[:, 1], y0, y1 - 1e-6)
        conf = np.where(conf >= self.min_conf, conf, 0.0)
        return Keypoints(xy=xy.astype(np.float32), conf=conf.astype(np.float32), edges=list(edges))
