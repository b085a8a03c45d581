"""Evaluator settings shared by every stage of the per-frame pipeline."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class EvalConfig(BaseModel):
    """Evaluator settings; defaults are the paper's (section 5.1) where it gives one."""

    model_config = ConfigDict(extra="forbid")
    association_threshold: float = 0.35
    ambiguity_margin: float = 0.05
    lambda_g: float = 0.05
    pose_tau: float = 0.2
    max_claims: int = 12
    claim_confidence: float = 0.7
    stride: int = 8
    skip_seconds: float = 1.0
    max_frames: int | None = None  # keep only the first samples (the OPIS authors' evaluator: 64)
    first_frame: Literal["round", "at_or_after"] = "round"  # media.FIRST_FRAME_RULES
    max_side: int | None = None  # decode frames at most this large (None: native size)
    min_likeness: float = 0.35  # colour-invariant evidence (structure or own keypoints) a pair needs to be eligible
    min_edge_energy: float = 0.6  # edge energy share of the reference below which structure likeness is scaled down
    firm_likeness: float = 0.75  # structure likeness that stands in for keypoint support (tuning photos: targets 0.78-0.99)
    foreign_min_appearance: float = 0.5  # likeness needed to match an observation another instance's search found
    weak_tie_affinity: float = 0.5  # a static instance's ambiguity between finds all below this counts as missing
    ungated_min_appearance: float = 0.55  # likeness a dynamic instance, or a static instance needs when no reliable camera gates it
    # cosine a find framed at a moving part needs: parallax moves static scenery too (tuning: the DAVIS
    # case on the apple's orbiting camera 0.14-0.23; the rider and bike at their moving parts 0.25-0.56)
    moving_min_similarity: float = 0.25
    gate_tolerance: float = 0.05  # geometric gate margin, share of the frame diagonal
    min_in_view: float = 0.5  # share of projected query points inside the frame to count as in view
    min_side_px: float = 10.0  # projected instance smaller than this (either side) is too small
    occluded_share: float = 0.5  # share of an unmatched static instance's projected region covered in front: occluded
    partly_covered_share: float = 0.25  # ... at least this but under occluded_share: unknown (cannot decide)
    min_correspondences: int = 6  # for the static structure residual
    extra_min_similarity: float = 0.5  # an extra must look like an object of the inventory at least this much
    extra_margin: float = 0.1  # ... and nearly as much as the matched instance it resembles, unless found strongly:
    extra_feature_score: float = 0.44  # feature-route score n/(n+10): >= 8 RANSAC inliers
    extra_template_score: float = 0.85  # template-route normalised cross-correlation
    # an instance under this many pixels on average (square root of its I0 box area) is small: about
    # 2.5 cells of a stride-16 feature map, too few for its template or its descriptor to single it out
    small_side: float = 40.0
    # label of a moving instance carried to a find that lets propagation vouch for it where its
    # appearance does not (perception.identity.unsupported_gates)
    support_min_label: float = 0.3
    camera_holdout: float = 0.2
    # Propagation stage (perception/propagation.py): I0's masks carried through the video by label
    # propagation, as in the DAVIS protocol of Jabri et al. 2020 / Caron et al. 2021 (their values).
    propagation: bool = True  # runs when the backend supplies dense features
    propagation_stride: int = 4  # every k-th video frame (and every sampled one): the protocol's; 8 is faster (docs/validation.md)
    propagation_topk: int = 5
    propagation_temperature: float = 0.07
    propagation_memory: int = 4  # last propagated frames kept beside I0
    propagation_radius: int = 6  # feature cells a location may move between two remembered frames
    # label at which an upsampled location joins its instance's mask; below 0.5 a location must also
    # hold no other instance's larger label. The protocol's 0.5 leaves a stride-16 mask at about 0.6
    # of the object's area (tuning clip: 3/9 frames at mask IoU >= 0.5; 0.4 -> 5/9, 0.3 -> 6/9,
    # 0.25 and 0.2 -> 6/9 at lower mean IoU; docs/validation.md)
    propagation_mask_threshold: float = 0.3
    # verification of a propagated mask (a removed object's mask can survive on what replaced it)
    propagation_min_mass: float = 0.2  # label mass over I0's
    propagation_min_carried: float = 0.5  # share of a mask's label carried along its own track (not found again elsewhere)
    # share of the mask above the protocol's 0.5: a removed object's label fades to a haze of
    # 0.3-0.5 (audit: 0.01 and 0.13 where it was matched; objects there 0.41-0.96; docs/validation.md)
    propagation_min_core: float = 0.25
    propagation_min_object_share: float = 0.5  # cells closer to I0's object than to any background (I0's, the frame's own surround)
    # descriptor cosine a propagated mask needs to be matched (tuning: the inpainted-away rider
    # -0.05-0.04, the apple propagated into the bmx video 0.10-0.11; the rider 0.31-0.63, hue-turned 0.15-0.45)
    propagation_min_similarity: float = 0.15
    propagation_same_place: float = 0.5  # box IoU at which a search find of the same instance is the propagated one again
    seed: int = 0
