"""Perception protocols for OPIS evaluation.

A backend is a bundle of small pieces; each can be swapped alone (a new
segmenter or embedder is one file implementing one of these protocols).
Scoring never imports this module: the measurement archive is the seam.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass
class Observation:
    """One object found in a generated frame, extracted without looking at the reference identities' scores."""

    mask: np.ndarray  # H x W bool
    box: tuple[float, float, float, float]  # x, y, w, h
    category: str | None = None  # noun phrase it was found for, if any
    score: float = 1.0  # detector / segmenter confidence in [0, 1]
    embedding: np.ndarray | None = None  # L2-normalised appearance descriptor
    attributes: dict[str, str] = field(default_factory=dict)
    source: str = ""  # which search produced it (for reports and debugging)


@dataclass
class Correspondences:
    pts0: np.ndarray  # N x 2 pixel coords in the reference image (x, y)
    pts1: np.ndarray  # N x 2 pixel coords in the generated frame
    scores: np.ndarray  # N match confidences


@dataclass
class Keypoints:
    xy: np.ndarray  # J x 2
    conf: np.ndarray  # J
    edges: list[tuple[int, int]]  # skeleton segments (joint index pairs)


@runtime_checkable
class Segmenter(Protocol):
    name: str

    def observe(self, frame: np.ndarray, phrases: list[str], reference=None) -> list[Observation]:
        """Object observations in `frame` for the case's noun phrases.

        `reference` (the case's ReferenceBank) may be used to know *what to look
        for* (e.g. a template search), never to decide identity: association does that.
        """
        ...


@runtime_checkable
class Embedder(Protocol):
    name: str

    def embed(self, image: np.ndarray, masks: list[np.ndarray], boxes: list[tuple[float, float, float, float]]) -> np.ndarray:
        """N x D L2-normalised crop descriptors (colour-aware: identity includes colour pattern)."""
        ...


@runtime_checkable
class Matcher(Protocol):
    name: str

    def match(
        self, img0: np.ndarray, img1: np.ndarray, mask0: np.ndarray | None = None, mask1: np.ndarray | None = None
    ) -> Correspondences:
        """Point correspondences between two images, restricted to the masks when given."""
        ...


@runtime_checkable
class DepthEstimator(Protocol):
    name: str

    def estimate(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(depth H x W float32, intrinsics 3x3 or None)."""
        ...


@runtime_checkable
class PoseEstimator(Protocol):
    name: str

    def supports(self, category: str) -> bool: ...

    def keypoints(self, image: np.ndarray, box: tuple[float, float, float, float]) -> Keypoints | None: ...


@dataclass
class Backend:
    """The perception pieces one evaluation uses. Optional pieces may be None."""

    name: str
    segmenter: Segmenter
    embedder: Embedder
    matcher: Matcher
    depth: DepthEstimator | None = None
    pose: PoseEstimator | None = None
    versions: dict[str, str] = field(default_factory=dict)
