"""Pose landmarks of the `hf` backend: top-down ViTPose / ViTPose++ for people and animals.

Dynamic Structure (paper eq. 5) compares skeleton segment lengths between the
input and a generated frame, so what matters here is that a joint index means
the same body part in both and that coordinates are in image pixels.
"""

from __future__ import annotations

import re

import numpy as np

from worldeval.opis.backends.base import Keypoints
from worldeval.opis.backends.hf_common import HFBackendError, load_model, model_version
from worldeval.opis.backends.hf_common import describe_processor, official_pixels, official_processor

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

# The word lists live with the rest of what a phrase says about motion.
from worldeval.opis.labels import ANIMAL_WORDS, PERSON_WORDS  # noqa: E402



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


# ViTPose++ experts by dataset (transformers' VitPose docs): COCO 0, AiC 1, MPII 2, AP-10K 3, APT-36K 4,
# COCO-WholeBody 5. COCO and AP-10K are the 17-keypoint sets whose skeletons are above.
COCO_DATASET_INDEX = 0
AP10K_DATASET_INDEX = 3
COCO_PERSON_LABELS = {"Nose", "L_Eye", "R_Eye", "L_Shoulder", "R_Shoulder", "L_Hip", "R_Hip", "L_Ankle", "R_Ankle"}


def has_coco_person_head(config) -> bool:
    """Whether the checkpoint declares COCO person joints (its id2label), whatever its experts."""
    labels = set((getattr(config, "id2label", None) or {}).values())
    return len(labels & COCO_PERSON_LABELS) >= 5


class VitPoseEstimator:
    """Top-down landmarks for a person or animal box; `supports` says which categories it covers.

    People go to the `human` model with ViTPose++'s COCO expert; animals to the
    `animal` model (an AP-10K head) with the AP-10K expert when it has experts.
    The ViTPose++ checkpoints in transformers keep only the COCO person head
    (the other datasets' heads are dropped in conversion), so one of them given
    as the animal model is refused: animal joints read off a person head would be
    wrong, not missing. Any other category gets no pose.
    """

    name = "vitpose"

    def __init__(
        self,
        human: str | None,
        animal: str | None,
        device,
        dtype=None,
        local_files_only: bool = True,
        pose_min_conf: float = 0.0,
        human_dataset_index: int = COCO_DATASET_INDEX,
        animal_dataset_index: int = AP10K_DATASET_INDEX,
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
            if J != 17:
                raise HFBackendError(option, name, f"expected a 17-keypoint head (COCO / AP-10K), got {J} keypoints")
            if kind == "animal" and has_coco_person_head(model.config):
                raise HFBackendError(option, name, "its head declares COCO person joints (config id2label): it cannot "
                                     "place animal joints; give an AP-10K ViTPose checkpoint")  # fmt: skip
            experts = int(getattr(model.config.backbone_config, "num_experts", 1))
            if experts > 1 and not 0 <= int(ds) < experts:
                raise HFBackendError(f"{'human' if kind == 'person' else 'animal'}_dataset_index", ds,
                                     f"{name} has {experts} experts")  # fmt: skip
            processor = official_processor(option, "vitpose", name, local_files_only)
            self.models[kind] = (model, COCO_EDGES if kind == "person" else AP10K_EDGES, int(ds) if experts > 1 else None,
                                 processor)  # fmt: skip
            self.versions[f"pose_{kind}"] = model_version(name, model) + (f"[dataset_index={ds}]" if experts > 1 else "")
            self.versions[f"pose_{kind}_preprocessing"] = describe_processor(processor)
        self.min_conf = float(pose_min_conf)

    def supports(self, category: str) -> bool:
        kind = category_kind(category)
        return kind is not None and kind in self.models

    def keypoints(self, image: np.ndarray, box, category: str | None = None) -> Keypoints | None:
        return self.keypoints_many(image, [box], [category])[0]

    def keypoints_many(self, image: np.ndarray, boxes: list, categories: list) -> list[Keypoints | None]:
        """`keypoints` for several (box, category) of one image: the boxes of a kind share one forward
        (a frame's people, then its animals), where one call per instance ran one forward each."""
        out: list[Keypoints | None] = [None] * len(boxes)
        H, W = image.shape[:2]
        by_kind: dict[str, list[tuple[int, tuple]]] = {}
        for k, (box, category) in enumerate(zip(boxes, categories)):
            kind = category_kind(category)
            if kind not in self.models:
                continue  # no model for this category: no pose, never another category's skeleton
            x, y, w, h = (float(v) for v in box)
            x0, y0, x1, y1 = max(0.0, x), max(0.0, y), min(float(W), x + w), min(float(H), y + h)
            if x1 - x0 >= 2 and y1 - y0 >= 2:
                by_kind.setdefault(kind, []).append((k, (x0, y0, x1, y1)))
        for kind, todo in by_kind.items():
            for (k, _), kp in zip(todo, self._landmarks(kind, image, [c for _, c in todo])):
                out[k] = kp
        return out

    def _landmarks(self, kind: str, image: np.ndarray, crops: list[tuple]) -> list[Keypoints]:
        """One forward of the `kind` model over the crops (x0, y0, x1, y1 inside the image) of one image."""
        import torch

        model, edges, ds, processor = self.models[kind]
        boxes = [[[x0, y0, x1 - x0, y1 - y0] for x0, y0, x1, y1 in crops]]
        px = official_pixels(processor, [image], self.device, self.dtype, boxes=boxes)
        kwargs = {} if ds is None else {"dataset_index": torch.full((len(crops),), ds, device=self.device)}
        with torch.inference_mode():
            out = model(pixel_values=px, **kwargs)
        out.heatmaps = out.heatmaps.float()
        found = []
        for (x0, y0, x1, y1), res in zip(crops, processor.post_process_pose_estimation(out, boxes=boxes)[0]):
            xy = res["keypoints"].numpy().astype(np.float64)
            conf = res["scores"].numpy().astype(np.float64).reshape(-1)
            # a landmark outside the object's box is a detection error, not a body part
            xy[:, 0] = np.clip(xy[:, 0], x0, x1 - 1e-6)
            xy[:, 1] = np.clip(xy[:, 1], y0, y1 - 1e-6)
            conf = np.where(conf >= self.min_conf, conf, 0.0)
            found.append(Keypoints(xy=xy.astype(np.float32), conf=conf.astype(np.float32), edges=list(edges)))
        return found
