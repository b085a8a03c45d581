"""What a case.json holds: its schema (`CaseSpec` and its parts, validated by pydantic) and the
COCO run-length encoding of its masks.

Both case layouts are read into these: ours (`opis/case.py`) and the OPIS authors'
(`opis/official/layout.py`), so this module imports neither.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from worldeval.opis.labels import CASE_KINEMATICS, CASE_TRACKS, TRACKS, UNLABELED, Kinematics, Track, phrase_labels

# The frame rate of a camera task, synthetic rollout or clip that names none.
DEFAULT_FPS = 24.0


class Claim(BaseModel):
    model_config = ConfigDict(extra="forbid")
    family: str
    text: str


class Instance(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str
    category: str
    mask: dict[str, Any] | None = None
    mask_png: str | None = None
    bbox: list[float] | None = None
    kinematics: Literal[CASE_KINEMATICS]
    # null: unlabeled (Presence and Identity only); "excluded": carried, never scored. The key itself
    # is required, so a forgotten track is an error rather than a silently unlabeled object.
    track: Literal[CASE_TRACKS] | None
    # Free-form: strings are compared with what a backend reads off a find; other values are carried.
    attributes: dict[str, Any] = Field(default_factory=dict)
    claims: list[Claim] = Field(default_factory=list)
    # Objects one cannot tell apart by appearance (the authors' `ambiguity_group`), carried for reports.
    ambiguity_group: str | None = None
    # Fields of an imported inventory with no counterpart here (the authors' embedding, size signature,
    # centre, motion expectation), kept verbatim and never read by perception: backends embed I0 themselves.
    source: dict[str, Any] | None = None

    @property
    def archive_track(self) -> str:
        """The label its rows carry in the measurement archive's `track` column."""
        return self.track if self.track is not None else UNLABELED

    @property
    def followed_as(self) -> str:
        """How perception follows it. An instance without a Structure track (unlabeled, excluded) is
        dynamic when articulated or deformable, or when its kinematics is unknown and its phrase names a
        person, an animal or a part of one; else static: the camera model places it, so a large rigid
        thing (a table) is not left for the search to cut into unclaimed pieces."""
        if self.track in TRACKS:
            return self.track
        if self.kinematics == Kinematics.UNKNOWN:
            return Track.DYNAMIC if phrase_labels(self.category) else Track.STATIC
        return Track.STATIC if self.kinematics == Kinematics.RIGID else Track.DYNAMIC

    @field_validator("id", "category")
    @classmethod
    def _non_empty(cls, v: str) -> str:
        if not v or not v.strip():
            raise ValueError("must be a non-empty string")
        return v


class CameraKeyframe(BaseModel):
    """Camera pose at time `t` relative to the input view.

    Angles in degrees: yaw turns the camera right, pitch turns it up, roll turns
    it clockwise. `translation` is the camera centre's motion in reference
    camera coordinates (x right, y down, z forward), in the depth map's units.
    """

    model_config = ConfigDict(extra="forbid")
    t: float
    yaw_deg: float = 0.0
    pitch_deg: float = 0.0
    roll_deg: float = 0.0
    translation: list[float] = Field(default_factory=lambda: [0.0, 0.0, 0.0])


class CameraTask(BaseModel):
    model_config = ConfigDict(extra="allow")
    description: str = ""
    duration_s: float = 10.0
    fps: float = DEFAULT_FPS
    keyframes: list[CameraKeyframe] = Field(default_factory=lambda: [CameraKeyframe(t=0.0)])

    def pose_at(self, t: float) -> CameraKeyframe:
        """Piecewise-linear interpolation of the keyframes (held constant outside them)."""
        kfs = sorted(self.keyframes, key=lambda k: k.t)
        if t <= kfs[0].t:
            return kfs[0]
        if t >= kfs[-1].t:
            return kfs[-1]
        for a, b in zip(kfs, kfs[1:]):
            if a.t <= t <= b.t:
                u = 0.0 if b.t == a.t else (t - a.t) / (b.t - a.t)
                lerp = lambda x, y: x + u * (y - x)  # noqa: E731
                return CameraKeyframe(
                    t=t,
                    yaw_deg=lerp(a.yaw_deg, b.yaw_deg),
                    pitch_deg=lerp(a.pitch_deg, b.pitch_deg),
                    roll_deg=lerp(a.roll_deg, b.roll_deg),
                    translation=[lerp(x, y) for x, y in zip(a.translation, b.translation)],
                )
        return kfs[-1]


def rotation_from_angles(yaw_deg: float, pitch_deg: float, roll_deg: float) -> np.ndarray:
    """World-to-camera rotation R_t of a camera turned by (yaw, pitch, roll) from the reference.

    A reference-camera point X maps to R_t @ (X - C_t) in the new camera.
    """
    y, p, r = (math.radians(v) for v in (yaw_deg, pitch_deg, roll_deg))
    # Camera turning right by yaw = points rotate left in camera coords: rotation about y by -yaw.
    Ry = np.array([[math.cos(y), 0, -math.sin(y)], [0, 1, 0], [math.sin(y), 0, math.cos(y)]])
    # Camera tilting up = points move down (y grows downward): rotation about x.
    Rx = np.array([[1, 0, 0], [0, math.cos(p), math.sin(p)], [0, -math.sin(p), math.cos(p)]])
    Rz = np.array([[math.cos(r), math.sin(r), 0], [-math.sin(r), math.cos(r), 0], [0, 0, 1]])
    return Rz @ Rx @ Ry


class CaseSpec(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str
    domain: str
    subcategory: str
    image: str
    instruction: str = ""
    camera_task: CameraTask | dict[str, Any] | None = None
    instances: list[Instance]
    # Where an imported case came from (the authors' layout: folder, scene id, scene metadata,
    # conditions, clip length), kept verbatim for reports and for matching their runs.
    source: dict[str, Any] | None = None

    def camera(self) -> CameraTask:
        if isinstance(self.camera_task, CameraTask):
            return self.camera_task
        if isinstance(self.camera_task, dict):
            return CameraTask.model_validate(self.camera_task)
        # No camera task (the authors' cases carry only a clip length): a held camera for that long.
        duration = (self.source or {}).get("duration_s")
        return CameraTask(duration_s=float(duration)) if duration else CameraTask()


def encode_rle(mask: np.ndarray) -> dict[str, Any]:
    from pycocotools import mask as mask_utils

    rle = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
    return {"size": [int(v) for v in rle["size"]], "counts": rle["counts"].decode("ascii")}


def decode_rle(rle: dict[str, Any]) -> np.ndarray:
    from pycocotools import mask as mask_utils

    r = dict(rle)
    if isinstance(r.get("counts"), list):
        h, w = r["size"]
        r = mask_utils.frPyObjects(r, h, w)
    elif isinstance(r.get("counts"), str):
        r["counts"] = r["counts"].encode("ascii")
    return mask_utils.decode(r).astype(bool)
