"""Evaluator settings shared by every stage of the per-frame pipeline."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class AssociationConfig(BaseModel):
    """Matching a frame's finds to I0's instances (perception/identity.py, perception/association.py)."""

    model_config = ConfigDict(extra="forbid")
    threshold: float = 0.35
    ambiguity_margin: float = 0.05
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
    # an instance under this many pixels on average (square root of its I0 box area) is small: about
    # 2.5 cells of a stride-16 feature map, too few for its template or its descriptor to single it out
    small_side: float = 40.0
    # label of a moving instance carried to a find that lets propagation vouch for it where its
    # appearance does not (perception.identity.unsupported_gates)
    support_min_label: float = 0.3


class CameraConfig(BaseModel):
    """The camera fitted on I0's background, and what its projection of I0's instances says (perception/camera.py, perception/projection.py)."""

    model_config = ConfigDict(extra="forbid")
    holdout: float = 0.2
    min_in_view: float = 0.5  # share of projected query points inside the frame to count as in view
    min_side_px: float = 10.0  # projected instance smaller than this (either side) is too small
    occluded_share: float = 0.5  # share of an unmatched static instance's projected region covered in front: occluded
    partly_covered_share: float = 0.25  # ... at least this but under occluded_share: unknown (cannot decide)


class StructureConfig(BaseModel):
    """The structure measurement of a matched instance (perception/structure.py)."""

    model_config = ConfigDict(extra="forbid")
    lambda_g: float = 0.05
    pose_tau: float = 0.2
    max_claims: int = 12
    claim_confidence: float = 0.7
    min_correspondences: int = 6  # for the static structure residual


class ExtrasConfig(BaseModel):
    """A find that matches no instance but copies one of them: an extra (perception/extras.py)."""

    model_config = ConfigDict(extra="forbid")
    min_similarity: float = 0.5  # an extra must look like an object of the inventory at least this much
    margin: float = 0.1  # ... and nearly as much as the matched instance it resembles, unless found strongly:
    feature_score: float = 0.44  # feature-route score n/(n+10): >= 8 RANSAC inliers
    template_score: float = 0.85  # template-route normalised cross-correlation
    # new static content followed over the propagation grid (perception/persistent.py): needs the
    # propagation stage; off gives the extras of the search and change routes alone
    persistent: bool = True


class PropagationConfig(BaseModel):
    """Propagation stage (perception/propagation.py): I0's masks carried through the video by label
    propagation, as in the DAVIS protocol of Jabri et al. 2020 / Caron et al. 2021 (their values)."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool = True  # runs when the backend supplies dense features
    stride: int = 4  # every k-th video frame (and every sampled one): the protocol's; 8 is faster (docs/validation.md)
    topk: int = 5
    temperature: float = 0.07
    memory: int = 4  # last propagated frames kept beside I0
    radius: int = 6  # feature cells a location may move between two remembered frames
    # also search a remembered frame where the background moved since it (fast pans). Off: on the
    # tuning clip played 2-3x faster it kept the rider in 5/5 frames where one window kept 3/5, but on
    # the held-out clips it gained nothing and let removed objects match more often (docs/validation.md)
    compensate: bool = False
    # label at which an upsampled location joins its instance's mask; below 0.5 a location must also
    # hold no other instance's larger label. The protocol's 0.5 leaves a stride-16 mask at about 0.6
    # of the object's area (tuning clip: 3/9 frames at mask IoU >= 0.5; 0.4 -> 5/9, 0.3 -> 6/9,
    # 0.25 and 0.2 -> 6/9 at lower mean IoU; docs/validation.md)
    mask_threshold: float = 0.3
    # verification of a propagated mask (a removed object's mask can survive on what replaced it)
    min_mass: float = 0.2  # label mass over I0's
    min_carried: float = 0.5  # share of a mask's label carried along its own track (not found again elsewhere)
    # share of the mask above the protocol's 0.5: a removed object's label fades to a haze of
    # 0.3-0.5 (audit: 0.01 and 0.13 where it was matched; objects there 0.41-0.96; docs/validation.md)
    min_core: float = 0.25
    # core below which a static instance's propagated mask stands only beside a find of its own at the
    # same place (a search or template find): a painted-over object's label keeps a core of 0.27-0.35
    # for the first second, every static object of the tuning photos kept 0.68 or more (docs/validation.md)
    weak_core: float = 0.5
    min_object_share: float = 0.5  # cells closer to I0's object than to any background (I0's, the frame's own surround)
    # descriptor cosine a propagated mask needs to be matched (tuning: the inpainted-away rider
    # -0.05-0.04, the apple propagated into the bmx video 0.10-0.11; the rider 0.31-0.63, hue-turned 0.15-0.45)
    min_similarity: float = 0.15
    same_place: float = 0.5  # box IoU at which a search find of the same instance is the propagated one again
    # where the camera is unreliable, let the chained background (`background.py`) place each static
    # instance's search zone as a reliable camera does (frame.chain_places), in frames where propagation
    # confirms the chain (`frame.chain_agrees`). Without that check the held-out dense clips lost 62 of
    # 216 matches (a wrong step put in-view objects outside the frame); with it 2 of 216, and none at
    # twice the speed (docs/validation.md, "Search zones from the chained background")
    chain_zones: bool = True
    # a frame's chain zones stand only where propagation confirms the chain (`frame.chain_agrees`): this
    # many static instances followed, and this share of them inside their carried zones (tuning,
    # sam2_bedroom at 50 objects: 6/7 to 16/16 in every frame with a chain)
    chain_min_followed: int = 3
    chain_agreement: float = 0.8


GROUPS: dict[str, type[BaseModel]] = {"association": AssociationConfig, "camera": CameraConfig, "structure": StructureConfig,
                                      "extras": ExtrasConfig, "propagation": PropagationConfig}
# Before issue 32 the settings were flat: a grouped field's flat name is its name behind its group's
# prefix (extras, propagation) or one of its own (_FLAT_RENAMED); the other groups' fields kept theirs.
_FLAT_PREFIX = {"extras": "extra_", "propagation": "propagation_"}
_FLAT_RENAMED = {("association", "threshold"): "association_threshold", ("camera", "holdout"): "camera_holdout",
                 ("propagation", "enabled"): "propagation"}
# flat name -> (group, field in the group)
FLAT_NAMES: dict[str, tuple[str, str]] = {
    _FLAT_RENAMED.get((g, f), _FLAT_PREFIX.get(g, "") + f): (g, f) for g, model in GROUPS.items() for f in model.model_fields
}


def _is_flat(key: str, value: Any) -> bool:
    # `propagation` names both the flat on/off flag and the group: a bool is the flag
    return key in FLAT_NAMES and (key not in GROUPS or isinstance(value, bool))


def _nest(data: dict) -> dict:
    """`data` with every flat key moved into its group; a setting given both flat and grouped is an error."""
    out = {k: v for k, v in data.items() if not _is_flat(k, v)}
    for flat, value in data.items():
        if not _is_flat(flat, value):
            continue
        group, field = FLAT_NAMES[flat]
        given = out.get(group, {})
        if isinstance(given, BaseModel):
            given = {f: getattr(given, f) for f in given.model_fields_set}
        if not isinstance(given, dict):
            continue  # not a group: the group's own validation says so
        if field in given:
            raise ValueError(f"{flat} and {group}.{field} both given; give one")
        out[group] = {**given, field: value}
    return out


class EvalConfig(BaseModel):
    """Evaluator settings; defaults are the paper's (section 5.1) where it gives one.

    Grouped by the stage that reads them (`association`, `camera`, `structure`, `extras`,
    `propagation`). Frame sampling (`stride`, `skip_seconds`, `max_frames`, `first_frame`), the
    decode size (`max_side`) and the `seed` stay at the top: they are no one stage's, they decide
    which frames, at which size, every stage sees, and the seed drives both the camera fit and the
    per-frame random state of the whole frame.

    Until issue 32 the settings were one flat model. Its names are still accepted, as keywords
    (`EvalConfig(propagation_stride=8, propagation=False)`) and in the dicts older run manifests
    hold, and land in their group (FLAT_NAMES: `propagation_stride` -> `propagation.stride`, the
    flag `propagation` -> `propagation.enabled`); `model_dump` writes the grouped form.
    """

    model_config = ConfigDict(extra="forbid")
    stride: int = 8
    skip_seconds: float = 1.0
    max_frames: int | None = None  # keep only the first samples (the OPIS authors' evaluator: 64)
    first_frame: Literal["round", "at_or_after"] = "round"  # media.FIRST_FRAME_RULES
    max_side: int | None = None  # decode frames at most this large (None: native size)
    seed: int = 0
    association: AssociationConfig = Field(default_factory=AssociationConfig)
    camera: CameraConfig = Field(default_factory=CameraConfig)
    structure: StructureConfig = Field(default_factory=StructureConfig)
    extras: ExtrasConfig = Field(default_factory=ExtrasConfig)
    propagation: PropagationConfig = Field(default_factory=PropagationConfig)

    @model_validator(mode="before")
    @classmethod
    def _grouped(cls, data: Any) -> Any:
        return _nest(data) if isinstance(data, dict) else data
