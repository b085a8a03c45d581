"""The backend contract of OPIS evaluation: what a backend may hand to the pipeline.

A backend is a bundle of small pieces; each can be swapped alone (a new
segmenter or embedder is one file implementing one of these protocols). Every
piece of evidence the pipeline (`opis/perception/frame.py`) reads from a backend
is a declared field or method here; optional evidence is declared as such
(`Segmenter.evidence`, `Matcher.detects_keypoints`, `DenseFeatures.part_floor`)
and the checks that need it are listed per run in the manifest (`checks`), never
skipped silently. An optional ability is a protocol of its own (`MovingPartsSegmenter`,
`LostOnlySegmenter`, `BatchSegmenter`, `AppearanceEmbedder`, `BatchEmbedder`,
`BatchPoseEstimator`), which the pipeline asks for with `isinstance`, never by probing
for an attribute.
Scoring never imports this module: the measurement archive is the seam.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from worldeval.geometry import box_iou, mask_box  # noqa: F401  (a backend's boxes: part of the API here)

# Observation routes: how an observation was found.
ROUTE_OPEN = "open"  # a segmenter's own detection (text prompt, point grid, box prompt)
ROUTE_FEATURES = "features"  # a cluster of one instance's I0 keypoints matched into the frame
ROUTE_TEMPLATE = "template"  # a correlation peak of one instance's colour template
ROUTE_PROJECTION = "projection"  # the pipeline's proposal at the place the camera puts a static instance
ROUTE_MOTION = "motion"  # the pipeline's proposal where the frame moves unlike its background (perception/motion.py)
ROUTE_MOVING = "moving"  # a segmenter's find of one instance framed at such a moving part (`observe_moving`)
ROUTE_PROPAGATED = "propagated"  # an instance's I0 mask carried to the frame by label propagation (perception/propagation.py)

# Optional evidence a segmenter may put on its observations (declared in `Segmenter.evidence`).
EVIDENCE_FEATURE_SCORE = "feature_score"
EVIDENCE_COMPLETENESS = "completeness"
EVIDENCE_FOUND_FOR = "found_for"




@dataclass
class PropagationEvidence:
    """What verifies a propagated mask (route `propagated`): it may have survived its object."""

    mass: float  # the instance's label mass in this frame over its mass in I0 (each a share of its frame)
    confidence: float  # mean propagated label inside the mask, in [mask threshold, 1]
    object_share: float  # share of the mask's feature cells closer to I0's object than to any background
    carried: float = 1.0  # share of the mask's label carried along the object's own track (`LabelPropagator`)
    core: float = 1.0  # share of the mask whose label exceeds the protocol's 0.5


@dataclass
class Observation:
    """One object found in a generated frame, extracted without looking at the reference identities' scores."""

    mask: np.ndarray  # H x W bool
    box: tuple[float, float, float, float]  # x, y, w, h
    category: str | None = None  # noun phrase it was found for, if any
    score: float = 1.0  # detector / segmenter confidence in [0, 1]
    embedding: np.ndarray | None = None  # L2-normalised appearance descriptor
    attributes: dict[str, str] = field(default_factory=dict)
    source: str = ""  # which search produced it, free text (for reports and debugging)
    route: str = ROUTE_OPEN  # how it was found: one of the ROUTE_* names
    # Strength of keypoint evidence n / (n + 10), n = RANSAC inliers of the instance's own I0
    # keypoints at this place (also when another route's find of the same place was kept); 0: none.
    feature_score: float = 0.0
    # Ids of the instances whose search found it, the search that made it first; association lets
    # only these instances match it freely. Empty: an open detection, any instance may match it.
    found_for: list[str] = field(default_factory=list)
    # Share of the searched instance that lands inside the frame (a copy must be whole to count
    # as an extra on strong evidence alone); 0.0 when the segmenter cannot say.
    completeness: float = 0.0
    propagation: PropagationEvidence | None = None  # set on route `propagated` only
    # route `propagated`: the part of the mask whose label exceeds the protocol's 0.5 (what can
    # stand in front of another object); None elsewhere
    core_mask: np.ndarray | None = None


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
    versions: dict[str, str]  # entries this piece adds to the run manifest
    evidence: frozenset[str]  # optional Observation fields it fills: EVIDENCE_* names
    # Optionally a `MovingPartsSegmenter` (below).

    def observe(self, frame: np.ndarray, phrases: list[str], reference=None) -> list[Observation]:
        """Object observations in `frame` for the case's noun phrases.

        `reference` (the case's ReferenceBank) may be used to know *what to look
        for* (e.g. a template search), never to decide identity: association does that.
        """
        ...


@runtime_checkable
class MovingPartsSegmenter(Segmenter, Protocol):
    """A segmenter that can frame its dynamic instances where a frame moves on its own (the classical search)."""

    frames_moving_parts: bool  # whether it does so in this run (classical: backend option motion=on)

    def observe_moving(self, frame: np.ndarray, moving: list[Observation], reference) -> list[Observation]:
        """Finds of the dynamic instances framed at `moving` (perception/motion.py's moving parts)."""
        ...


@runtime_checkable
class LostOnlySegmenter(Segmenter, Protocol):
    """A segmenter that can leave out the instances the propagation stage already follows (classical
    search=placed or lost)."""

    searches_lost_only: bool  # whether it does so in this run

    def observe(self, frame: np.ndarray, phrases: list[str], reference=None,
                followed: set[int] | None = None, windows: dict | None = None, gated: bool = True,
                places: dict | None = None) -> list[Observation]:
        """`Segmenter.observe`, searching only for the instances not in `followed` (indices into the bank),
        and for an instance in `windows` only where a find could match it: the zone (x0, y0, x1, y1) its
        centre must lie in, or None for nowhere (`frame.search_windows`). `gated`: the zones are the
        camera's geometric gates, so one find in a zone is enough; False (zones from the chained
        background, no gate in association): keep as many places in a zone as over the whole frame.
        `places`: instance -> the box (x, y, w, h) the zone was grown from, where the instance should be
        (`frame.search_places`); a segmenter may start its search there (classical search=placed)."""
        ...


@runtime_checkable
class BatchSegmenter(Segmenter, Protocol):
    """A segmenter that can take several frames at once (the hf SAM 3 segmenter)."""

    frame_batch: int  # frames per call the run should hand it (1: one at a time)

    def observe_batch(self, frames: list[np.ndarray], phrases: list[str], reference=None) -> list[list[Observation]]:
        """`observe` for each frame; the same observations as one frame at a time (up to float rounding)."""
        ...


@runtime_checkable
class Embedder(Protocol):
    name: str
    versions: dict[str, str]
    # Crops one forward must hold for a descriptor to be what any larger batch gives it (1: the batch
    # never matters). A frame embeds at least this many of its crops where it has them, so skipping
    # the ones no rule reads (`identity.descriptors_needed`) leaves every other descriptor's bits alone.
    min_batch: int

    def embed(self, image: np.ndarray, masks: list[np.ndarray], boxes: list[tuple[float, float, float, float]]) -> np.ndarray:
        """N x D L2-normalised crop descriptors (colour-aware: identity includes colour pattern)."""
        ...


@runtime_checkable
class AppearanceEmbedder(Embedder, Protocol):
    def appearance(self, ref: np.ndarray, obs: np.ndarray, parts: float | None = None) -> float:
        """a_it (paper eq. 3) of a matched pair from their two descriptors, where it is not their cosine.

        The cosine still serves association; identity asks this instead (perception/identity.py).
        `parts`: the dense part match of the observation against I0's object (`propagation.part_match`)
        when the propagation stage ran, else None; an embedder may ignore it."""
        ...


@runtime_checkable
class BatchEmbedder(Embedder, Protocol):
    def embed_many(self, items: list[tuple[np.ndarray, list, list]]) -> list[np.ndarray]:
        """`embed` for several (image, masks, boxes), crops of all images sharing the model's batches."""
        ...


@runtime_checkable
class DenseFeatures(Protocol):
    """Per-location features of a whole frame, for label propagation (perception/propagation.py)."""

    name: str
    versions: dict[str, str]
    # the part match (`propagation.part_match`) a search find needs where propagation lost its
    # instance, calibrated to these features; None: no such floor (association does not ask it)
    part_floor: float | None

    def dense(self, image: np.ndarray) -> np.ndarray:
        """h x w x C float32 unit vectors on a regular grid over the image (same grid for same-size images)."""
        ...


@runtime_checkable
class Matcher(Protocol):
    name: str
    versions: dict[str, str]
    detects_keypoints: bool  # whether keypoints_in can answer (a detector-free matcher cannot)

    def match(
        self, img0: np.ndarray, img1: np.ndarray, mask0: np.ndarray | None = None, mask1: np.ndarray | None = None
    ) -> Correspondences:
        """Point correspondences between two images, restricted to the masks when given."""
        ...

    def match_background(self, img0: np.ndarray, img1: np.ndarray, background: np.ndarray) -> Correspondences:
        """The camera's correspondences: I0's unannotated `background` (H x W bool) to the whole frame.

        A matcher may give the background a feature budget of its own here (the classical one
        does); `match(img0, img1, mask0=background)` is a valid answer.
        """
        ...

    def keypoints_in(self, image: np.ndarray, mask: np.ndarray) -> np.ndarray | None:
        """N x 2 (x, y) of the keypoints this matcher detects in `image` inside `mask`; None without a detector."""
        ...


@runtime_checkable
class DepthEstimator(Protocol):
    name: str
    versions: dict[str, str]

    def estimate(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(depth H x W float32, intrinsics 3x3 or None)."""
        ...


@runtime_checkable
class PoseEstimator(Protocol):
    name: str
    versions: dict[str, str]

    def supports(self, category: str) -> bool: ...

    def keypoints(
        self, image: np.ndarray, box: tuple[float, float, float, float], category: str | None = None
    ) -> Keypoints | None:
        """Keypoints of the object of `category` inside `box` (None: none confident enough)."""
        ...


@runtime_checkable
class BatchPoseEstimator(PoseEstimator, Protocol):
    """A pose estimator that takes several boxes of one image at once (the hf ViTPose estimator)."""

    def keypoints_many(self, image: np.ndarray, boxes: list, categories: list) -> list[Keypoints | None]:
        """`keypoints` of each (box, category), in order; the same answers as one box at a time."""
        ...


@dataclass
class Backend:
    """The perception pieces one evaluation uses. Optional pieces may be None.

    `versions` is what the run manifest records under `backends.<name>`.
    """

    name: str
    segmenter: Segmenter
    embedder: Embedder
    matcher: Matcher
    depth: DepthEstimator | None = None
    pose: PoseEstimator | None = None
    versions: dict[str, str] = field(default_factory=dict)
    features: DenseFeatures | None = None  # dense features for the propagation stage (None: it does not run)




def value_channel(image: np.ndarray) -> np.ndarray:
    """HSV value, max(R, G, B), in the image's own dtype.

    Per channel with OpenCV: numpy's reduction over the last (3-wide) axis is some 50 times
    slower on a video frame (10 ms against 0.15 ms at 854 x 480), and it ran many times a frame.
    """
    import cv2

    if image.ndim == 2:
        return image
    if image.shape[2] != 3:
        return image.max(axis=2)
    r, g, b = cv2.split(np.ascontiguousarray(image))
    return cv2.max(cv2.max(r, g), b)
