"""The reference bank: everything about a case's inventory computed once and reused for every frame."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from worldeval.opis.case import Case

MAX_QUERY_POINTS = 128  # the paper's geometric reference uses up to 128 query points per instance


@dataclass
class ReferenceBank:
    case: Case
    ids: list[str]
    categories: list[str]
    tracks: list[str]  # how perception follows each instance: static or dynamic
    kinematics: list[str]
    masks: list[np.ndarray]  # H x W bool, I0 coordinates
    boxes: list[tuple[float, float, float, float]]
    query_points: list[np.ndarray]  # Q x 2 (x, y) per instance
    background: np.ndarray  # H x W bool: I0 pixels outside every (dilated) instance mask
    embeddings: np.ndarray | None = None  # N x D
    attributes: list[dict[str, str]] = field(default_factory=list)
    archive_tracks: list[str] = field(default_factory=list)  # the archive's track label of each instance
    # per-case data computed once: a backend's own (classical search templates) and the pipeline's
    # (I0 keypoints inside each mask, I0 pose keypoints), keyed by who computed it
    cache: dict[str, Any] = field(default_factory=dict)

    @property
    def image(self) -> np.ndarray:
        return self.case.image

    @property
    def shape(self) -> tuple[int, int]:
        return self.case.shape

    def __len__(self) -> int:
        return len(self.ids)

    def index(self, instance_id: str) -> int:
        return self.ids.index(instance_id)


def _query_points(mask: np.ndarray, k: int = MAX_QUERY_POINTS) -> np.ndarray:
    """Up to k mask pixels on a regular grid (deterministic, spread over the whole instance)."""
    ys, xs = np.nonzero(mask)
    n = len(xs)
    if n <= k:
        return np.stack([xs, ys], 1).astype(np.float64)
    idx = np.linspace(0, n - 1, k).round().astype(int)
    return np.stack([xs[idx], ys[idx]], 1).astype(np.float64)


def build_reference(case: Case, embedder=None, dilate_px: int | None = None) -> ReferenceBank:
    """Reference bank of a case; with an embedder, the I0 crop embeddings e_i are computed here once."""
    import cv2

    H, W = case.shape
    ids, cats, tracks, kins, masks, boxes, qps, attrs = [], [], [], [], [], [], [], []
    union = np.zeros((H, W), bool)
    for inst in case.instances:
        m = case.masks[inst.id]
        ids.append(inst.id)
        cats.append(inst.category)
        tracks.append(inst.followed_as)
        kins.append(inst.kinematics)
        masks.append(m)
        boxes.append(tuple(float(v) for v in inst.bbox))
        qps.append(_query_points(m))
        # only words are compared with what a backend reads off a find; numbers and lists are carried
        attrs.append({k: v for k, v in inst.attributes.items() if isinstance(v, str)})
        union |= m
    # Target objects may move or change; a margin keeps their borders (and shadows) out of camera fitting.
    r = dilate_px if dilate_px is not None else max(3, int(round(0.01 * max(H, W))))
    dil = cv2.dilate(union.astype(np.uint8), cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * r + 1, 2 * r + 1)))
    bank = ReferenceBank(
        case=case,
        ids=ids,
        categories=cats,
        tracks=tracks,
        kinematics=kins,
        masks=masks,
        boxes=boxes,
        query_points=qps,
        background=~dil.astype(bool),
        attributes=attrs,
        archive_tracks=[inst.archive_track for inst in case.instances],
    )
    if embedder is not None and ids:
        bank.embeddings = np.asarray(embedder.embed(case.image, masks, boxes), dtype=np.float32)
    return bank
