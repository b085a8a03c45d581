"""Build an OPIS case (SPEC section 2) from one image.

Steps, each replaceable:
1. noun phrases: given by the user, or proposed by the configured VLM judge;
2. instance masks from box or point prompts: OpenCV GrabCut (embedded, CPU) or
   the `hf` backend's segmenter (SAM 2/3, text prompts) when requested;
3. duplicate removal: an instance whose mask overlaps an earlier one with
   IoU >= `dedup_iou` is dropped (the earlier prompt wins);
4. kinematics and track labels (track defaults to static for rigid objects,
   dynamic otherwise, as in the paper's routing); `label_prompt` (what
   `opis annotate` runs) infers them from the noun phrase when the user gave
   none: people and animals are articulated and dynamic, their parts dynamic;
5. reference embeddings with the evaluator's embedder, when it is importable;
6. geometry: a depth file, a depth model, or the flat fallback;
7. camera task and instruction.

Determinism: GrabCut's random initialisation is seeded, prompts are processed
in the given order and every output is written with sorted keys, so the same
inputs give the same case.

The flat fallback: without a depth source the scene is taken to be a
fronto-parallel plane at depth 1.0 (relative units) seen by a pinhole camera
with a 60 degree horizontal field of view. This is exact for camera rotation
(the homography K R K^-1 needs no depth) and an approximation under
translation; `case.json` records it as `annotation.geometry = "flat"` so a
user can tell it from measured depth.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from worldeval.errors import CaseError, InputError
from worldeval.geometry import box_iou, mask_bbox, mask_iou
from worldeval.judge import JudgeClient, JudgeImage
from worldeval.opis.backends.hf import build_hf_depth, build_hf_segmenter
from worldeval.opis.case import (
    DEFAULT_FPS, CameraKeyframe, CameraTask, Geometry, default_intrinsics, load_case, write_case,
)
from worldeval.opis.evaluate import load_backend
from worldeval.opis.labels import KINEMATICS, LIVING_WORDS, TRACKS, phrase_labels  # noqa: F401  (annotate's inference reads them)

SEGMENTERS = ("grabcut", "hf")


class AnnotateError(InputError):
    """Bad annotation input; names the file (or option) and the field."""



@dataclass
class ObjectPrompt:
    phrase: str
    box: list[float] | None = None  # x, y, w, h in the original image's pixels
    point: list[float] | None = None  # x, y
    kinematics: str = "rigid"
    track: str | None = None  # default: static for rigid objects, else dynamic
    attributes: dict[str, str] = field(default_factory=dict)
    claims: list[dict[str, str]] = field(default_factory=list)
    # where `kinematics` and `track` came from ("given", 'inferred from "swan"', "default"); filled by
    # the command line and `label_prompt`, recorded in case.json's annotation.prompts when set
    labels_from: dict[str, str] = field(default_factory=dict)

    def resolved_track(self) -> str:
        return self.track or ("static" if self.kinematics == "rigid" else "dynamic")

    def record(self) -> dict[str, Any]:
        """The prompt as case.json's annotation records it (no empty `labels_from`, so cases written
        without label inference stay byte for byte as before)."""
        out = asdict(self)
        if not out["labels_from"]:
            del out["labels_from"]
        return out


@dataclass
class AnnotateSpec:
    objects: list[ObjectPrompt]
    case_id: str = "case_0001"
    domain: str = "real_world"
    subcategory: str = "unspecified"
    instruction: str | None = None
    camera: str | dict[str, Any] = "pan-right-return"
    camera_amount: float | None = None
    duration_s: float = 10.0
    fps: float = DEFAULT_FPS
    max_side: int | None = None
    segmenter: str = "grabcut"
    dedup_iou: float = 0.8
    grabcut_iters: int = 5
    seed: int = 0
    depth: str | None = None  # path to .npy/.npz, "model", or None (flat fallback)
    embeddings: bool = True
    exclusive: bool = True  # an overlapped pixel belongs to the smaller (usually nearer) instance


# ---------------------------------------------------------------- labels from the noun phrase

def label_prompt(p: ObjectPrompt) -> ObjectPrompt:
    """Fill the labels the user did not give from the noun phrase, and say in `p.labels_from` where each came from.

    A label is given when `labels_from` says so (the command line marks what its options and the spec
    set) or when it differs from the field's default. Given labels always win; a track not given and not
    evident from the phrase follows the kinematics (static for rigid objects, else dynamic).
    """
    src = p.labels_from
    inferred = phrase_labels(p.phrase)
    if "kinematics" not in src:
        if p.kinematics != "rigid":
            src["kinematics"] = "given"
        elif inferred and inferred[0]:
            p.kinematics, src["kinematics"] = inferred[0], inferred[2]
        else:
            src["kinematics"] = "default"
    if "track" not in src:
        if p.track is not None:
            src["track"] = "given"
        elif inferred:
            p.track, src["track"] = inferred[1], inferred[2]
        else:
            src["track"] = "default" if p.kinematics == "rigid" else f"default for {p.kinematics} objects"
    return p


# ---------------------------------------------------------------- parsing


def parse_object_option(text: str, point: bool = False, where: str = "--object", k: int = 0) -> ObjectPrompt:
    """`"noun phrase:x,y,w,h"` (box) or, with point=True, `"noun phrase:x,y"`; `k`: its place among the objects."""
    if ":" not in text:
        raise AnnotateError(where, "object", f"{text!r}: expected 'noun phrase:x,y,w,h' (or 'phrase:x,y' with --point)")
    phrase, coords = text.rsplit(":", 1)
    try:
        nums = [float(v) for v in coords.split(",")]
    except ValueError as exc:
        raise AnnotateError(where, "object", f"{text!r}: coordinates must be numbers") from exc
    want = 2 if point else 4
    if len(nums) != want:
        raise AnnotateError(where, "object", f"{text!r}: expected {want} numbers after ':'")
    return check_prompt(ObjectPrompt(phrase=phrase.strip(), point=nums if point else None,
                                      box=None if point else nums), where, k)


def _fmt(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:g}" for v in values) + "]"


def check_prompt(p: ObjectPrompt, file: str | Path, k: int) -> ObjectPrompt:
    """`p` itself when its fields are usable; else AnnotateError naming `file` and `objects[k]`."""
    where = f"objects[{k}]"
    if not p.phrase or not p.phrase.strip():
        raise AnnotateError(file, f"{where}.phrase", "must be a non-empty noun phrase")
    if p.kinematics not in KINEMATICS:
        raise AnnotateError(file, f"{where}.kinematics", f"{p.kinematics!r} is not one of {KINEMATICS}")
    if p.track is not None and p.track not in TRACKS:
        raise AnnotateError(file, f"{where}.track", f"{p.track!r} is not one of {TRACKS}")
    if p.box is not None:
        if len(p.box) != 4 or not all(math.isfinite(v) for v in p.box):
            raise AnnotateError(file, f"{where}.box", f"{p.phrase!r} {p.box}: must be 4 finite numbers x, y, w, h")
        if p.box[2] <= 0 or p.box[3] <= 0:
            raise AnnotateError(file, f"{where}.box", f"{p.phrase!r} {_fmt(p.box)}: width and height must be positive "
                                "(a box is x, y, width, height: its top-left corner and its size)")
        if p.box[2] <= 1 or p.box[3] <= 1:
            raise AnnotateError(file, f"{where}.box", f"{p.phrase!r} {_fmt(p.box)}: width and height must be over 1 pixel")
    if p.point is not None and (len(p.point) != 2 or not all(math.isfinite(v) for v in p.point)):
        raise AnnotateError(file, f"{where}.point", f"{p.phrase!r} {p.point}: must be 2 finite numbers x, y")
    return p


def fit_prompt(p: ObjectPrompt, width: int, height: int, file: str | Path, k: int) -> str | None:
    """Clip `p`'s box to a `width` x `height` image; the note saying so, or None when it lay inside.

    A box or point that misses the image is an AnnotateError naming `file` and `objects[k]`: its mask
    would be empty, or GrabCut's from a sliver at the border, and either is a wrong case.
    """
    where, size = f"objects[{k}]", f"the {width}x{height} image"
    if p.point is not None and not (0 <= p.point[0] < width and 0 <= p.point[1] < height):
        raise AnnotateError(file, f"{where}.point", f"{p.phrase!r} {_fmt(p.point)} lies outside {size}")
    if p.box is None:
        return None
    x, y, w, h = p.box
    x0, y0, x1, y1 = max(0.0, x), max(0.0, y), min(float(width), x + w), min(float(height), y + h)
    if x1 - x0 <= 1 or y1 - y0 <= 1:
        raise AnnotateError(file, f"{where}.box", f"{p.phrase!r} {_fmt(p.box)} (x, y, width, height) does not "
                            f"overlap {size} (x in 0..{width}, y in 0..{height})")
    clipped = [x0, y0, x1 - x0, y1 - y0]
    if clipped == [float(v) for v in p.box]:
        return None
    note = f"{file}: {where}.box: {p.phrase!r} {_fmt(p.box)} reaches outside {size}; clipped to {_fmt(clipped)}"
    p.box = clipped
    return note


def load_spec_file(path: str | Path) -> tuple[AnnotateSpec, Path | None]:
    """A JSON annotation spec; returns the spec and the image path (relative to the spec file)."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise AnnotateError(path, "spec", "file not found") from exc
    except json.JSONDecodeError as exc:
        raise AnnotateError(path, "spec", f"invalid JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise AnnotateError(path, "spec", "must be a JSON object")
    image = raw.pop("image", None)
    objs = raw.pop("objects", [])
    if not isinstance(objs, list):
        raise AnnotateError(path, "objects", "must be a list")
    known = set(AnnotateSpec.__dataclass_fields__) - {"objects"}
    aliases = {"id": "case_id"}
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        key = aliases.get(key, key)
        if key not in known:
            raise AnnotateError(path, key, f"unknown field; known: {', '.join(sorted(known | {'image', 'objects', 'id'}))}")
        kwargs[key] = value
    if isinstance(kwargs.get("depth"), str) and kwargs["depth"] != "model":
        kwargs["depth"] = str((path.parent / kwargs["depth"]).resolve())
    prompts = []
    for k, o in enumerate(objs):
        if not isinstance(o, dict):
            raise AnnotateError(path, f"objects[{k}]", "must be an object")
        bad = set(o) - (set(ObjectPrompt.__dataclass_fields__) - {"labels_from"})
        if bad:
            raise AnnotateError(path, f"objects[{k}].{sorted(bad)[0]}", "unknown field")
        given = {label: "given" for label in ("kinematics", "track") if o.get(label) is not None}
        try:
            prompts.append(check_prompt(ObjectPrompt(**o, labels_from=given), path, k))
        except TypeError as exc:
            raise AnnotateError(path, f"objects[{k}]", str(exc)) from exc
    spec = AnnotateSpec(objects=prompts, **kwargs)
    return spec, (path.parent / image).resolve() if image else None


# ---------------------------------------------------------------- segmentation


def grabcut_mask(image: np.ndarray, box: list[float] | None = None, point: list[float] | None = None,
                 iters: int = 5, seed: int = 0, background: np.ndarray | None = None) -> np.ndarray:
    """Instance mask from a box (x, y, w, h) and/or a point (x, y) prompt with GrabCut.

    GrabCut runs on a crop around the prompt (the box grown by half its size),
    which keeps the colour models local and the cost independent of image size;
    when that finds (almost) nothing it is retried with a thin background ring.
    A point alone seeds a sure-foreground disc inside a square window whose
    border is background, and the component holding the point is kept; when
    only the seed disc survives, smaller windows are tried. When a box finds
    nothing with either ring, a last try seeds a sure-foreground core at the
    box centre (GrabCut can otherwise call a whole box of a colour that also
    fills the ring background).

    `background` (H x W bool, optional) marks pixels already given to other
    instances; inside the window they start as probable background, so an
    occluder in front of the object is not absorbed into its mask.
    """
    H, W = image.shape[:2]
    if box is None and point is None:
        raise ValueError("grabcut_mask needs a box or a point")
    disc = max(3, int(0.015 * min(H, W)))
    # (window side as a share of the image's short side, background margin); a box sets its own window.
    # A wide background ring models the surroundings best, but when it holds a look-alike
    # (a neighbouring coin, say) GrabCut can call the whole box background; a thin ring then helps.
    attempts = [(None, 0.5, False), (None, 0.08, False), (None, 0.08, True)] if box is not None \
        else [(0.35, 0.5, False), (0.35, 0.08, False), (0.2, 0.08, False)]
    full = np.zeros((H, W), dtype=bool)
    for side_frac, margin, core in attempts:
        if box is not None:
            x, y, w, h = box
            x0, y0 = max(0, int(math.floor(x))), max(0, int(math.floor(y)))
            x1, y1 = min(W, int(math.ceil(x + w))), min(H, int(math.ceil(y + h)))
        else:
            side = side_frac * min(H, W)
            x0, y0 = max(0, int(point[0] - side / 2)), max(0, int(point[1] - side / 2))
            x1, y1 = min(W, int(point[0] + side / 2)), min(H, int(point[1] + side / 2))
        if x1 - x0 < 2 or y1 - y0 < 2:
            raise ValueError(f"prompt box {[x0, y0, x1 - x0, y1 - y0]} is outside the image or too small")
        full = _grabcut_window(image, (x0, y0, x1, y1), margin, point, iters, seed, core, background)
        if box is not None and full.sum() >= 0.1 * (x1 - x0) * (y1 - y0):
            break
        if box is None and full.sum() > 4 * math.pi * disc * disc:
            break
    return full


def _grabcut_window(image: np.ndarray, box: tuple[int, int, int, int], margin: float,
                    point: list[float] | None, iters: int, seed: int, core: bool = False,
                    background: np.ndarray | None = None) -> np.ndarray:
    import cv2

    H, W = image.shape[:2]
    x0, y0, x1, y1 = box
    mx, my = int((x1 - x0) * margin) + 2, int((y1 - y0) * margin) + 2
    cx0, cy0, cx1, cy1 = max(0, x0 - mx), max(0, y0 - my), min(W, x1 + mx), min(H, y1 + my)
    crop = np.ascontiguousarray(image[cy0:cy1, cx0:cx1, :3].astype(np.uint8))
    mask = np.full(crop.shape[:2], cv2.GC_BGD, np.uint8)
    mask[y0 - cy0:y1 - cy0, x0 - cx0:x1 - cx0] = cv2.GC_PR_FGD
    if background is not None:
        mask[background[cy0:cy1, cx0:cx1] & (mask == cv2.GC_PR_FGD)] = cv2.GC_PR_BGD
    if core:
        centre = ((x0 + x1) // 2 - cx0, (y0 + y1) // 2 - cy0)
        cv2.ellipse(mask, centre, (max(1, (x1 - x0) // 6), max(1, (y1 - y0) // 6)), 0, 0, 360, cv2.GC_FGD, -1)
    if point is not None:
        r = max(3, int(0.015 * min(H, W)))
        cv2.circle(mask, (int(point[0]) - cx0, int(point[1]) - cy0), r, cv2.GC_FGD, -1)
    if (mask == cv2.GC_BGD).sum() == 0:
        # The prompt covers the whole image: GrabCut needs background samples, so use a thin border.
        mask[[0, -1], :] = cv2.GC_BGD
        mask[:, [0, -1]] = cv2.GC_BGD
    bgd = np.zeros((1, 65), np.float64)
    fgd = np.zeros((1, 65), np.float64)
    cv2.setRNGSeed(int(seed))
    cv2.grabCut(crop, mask, None, bgd, fgd, int(iters), cv2.GC_INIT_WITH_MASK)
    fg = (mask == cv2.GC_FGD) | (mask == cv2.GC_PR_FGD)
    fg = _clean(fg, None if point is None else (int(point[0]) - cx0, int(point[1]) - cy0))
    full = np.zeros((H, W), dtype=bool)
    full[cy0:cy1, cx0:cx1] = fg
    return full


def _clean(fg: np.ndarray, seed_xy: tuple[int, int] | None) -> np.ndarray:
    """Drop specks: keep the seeded component (point) or components >= 20% of the largest; fill holes."""
    import cv2
    from scipy import ndimage

    fg = cv2.morphologyEx(fg.astype(np.uint8), cv2.MORPH_OPEN, np.ones((3, 3), np.uint8)) > 0
    n, labels, stats, _ = cv2.connectedComponentsWithStats(fg.astype(np.uint8), connectivity=8)
    if n <= 1:
        return fg
    areas = stats[1:, cv2.CC_STAT_AREA]
    if seed_xy is not None and 0 <= seed_xy[1] < fg.shape[0] and 0 <= seed_xy[0] < fg.shape[1] \
            and labels[seed_xy[1], seed_xy[0]] > 0:
        keep = {int(labels[seed_xy[1], seed_xy[0]])}
    else:
        keep = {i + 1 for i, a in enumerate(areas) if a >= 0.2 * areas.max()}
    out = np.isin(labels, sorted(keep))
    return ndimage.binary_fill_holes(out)


def remove_duplicates(masks: list[np.ndarray], iou_threshold: float) -> tuple[list[int], list[tuple[int, int, float]]]:
    """Indices to keep (earlier prompts win) and (dropped, kept_duplicate_of, iou) records."""
    kept: list[int] = []
    dropped: list[tuple[int, int, float]] = []
    for i, m in enumerate(masks):
        best = max(((j, mask_iou(m, masks[j])) for j in kept), key=lambda x: x[1], default=None)
        if best is not None and best[1] >= iou_threshold:
            dropped.append((i, best[0], round(best[1], 4)))
        else:
            kept.append(i)
    return kept, dropped


class HFPromptSegmenter:
    """Masks from the `hf` backend (SAM 2/3 text prompts); boxes pick among the phrase's instances.

    Only the segmenter is loaded: its model options (`sam3=PATH`, `models_dir=DIR`,
    thresholds; default: the models folder of `worldeval models fetch`).
    """

    def __init__(self, device: str = "cpu", options: dict | None = None):
        try:
            self.segmenter = build_hf_segmenter(device=device, **(options or {}))
        except Exception as exc:
            raise AnnotateError("--backend", "hf", f"cannot load the hf segmenter: {exc}") from exc
        self.name = self.segmenter.name

    def masks(self, image: np.ndarray, prompt: ObjectPrompt) -> list[np.ndarray]:
        obs = self.segmenter.observe(image, [prompt.phrase])
        if prompt.box is not None:
            obs = sorted(obs, key=lambda o: -box_iou(o.box, prompt.box))[:1]
        elif prompt.point is not None:
            x, y = int(prompt.point[0]), int(prompt.point[1])
            obs = [o for o in obs if 0 <= y < o.mask.shape[0] and 0 <= x < o.mask.shape[1] and o.mask[y, x]][:1]
        return [np.asarray(o.mask, dtype=bool) for o in obs if np.asarray(o.mask).any()]


# ---------------------------------------------------------------- phrases from a VLM


def propose_phrases(image: np.ndarray, judge_config: Any, max_objects: int = 20) -> list[ObjectPrompt]:
    """Ask the configured VLM judge for distinct, movable objects with boxes.

    Background stuff (sky, floor, wall) and parts of other objects are asked to
    be left out; the answer is validated and boxes are clipped to the image.
    """
    H, W = image.shape[:2]
    prompt = (
        f"List the distinct physical objects in this {W}x{H} image that a video should keep unchanged. "
        "Give each as a short noun phrase with its bounding box in pixels. Leave out background regions "
        "(sky, ground, walls), parts of an object already listed, and anything you cannot see clearly. "
        f"Answer with JSON only: {{\"objects\": [{{\"phrase\": str, \"box\": [x, y, w, h]}}]}} (at most {max_objects})."
    )

    def validate(obj: dict) -> dict:
        items = obj.get("objects")
        if not isinstance(items, list):
            raise ValueError("'objects' must be a list")
        for it in items:
            if not isinstance(it, dict) or not isinstance(it.get("phrase"), str) or len(it.get("box", [])) != 4:
                raise ValueError("each object needs 'phrase' and a 4-number 'box'")
        return obj

    client = JudgeClient(judge_config)
    answer = client.ask_json([prompt, JudgeImage.from_array(image, label="input")], validator=validate, prefer_key=None)
    if not answer.ok:
        raise AnnotateError("judge", "objects", f"the VLM gave no usable object list: {answer.error}")
    out = []
    for it in answer.parsed["objects"][:max_objects]:
        x, y, w, h = (float(v) for v in it["box"])
        x, y = max(0.0, x), max(0.0, y)
        w, h = min(W - x, w), min(H - y, h)
        if w > 2 and h > 2 and it["phrase"].strip():
            out.append(ObjectPrompt(phrase=it["phrase"].strip().lower(), box=[x, y, w, h]))
    return out


# ---------------------------------------------------------------- camera and instruction

CAMERA_PRESETS = {
    # name: (description, keyframe builder(amount, duration) -> list of dicts); amount in degrees or depth units
    "pan-right-return": ("pans slowly to the right and comes back to the starting view", "yaw", 1),
    "pan-left-return": ("pans slowly to the left and comes back to the starting view", "yaw", -1),
    "tilt-up-return": ("tilts slowly up and comes back to the starting view", "pitch", 1),
    "tilt-down-return": ("tilts slowly down and comes back to the starting view", "pitch", -1),
    "truck-right-return": ("slides sideways to the right and comes back to the starting view", "tx", 1),
    "dolly-in-return": ("moves slowly forward and comes back to the starting position", "tz", 1),
    "hold": ("holds still", None, 0),
}
DEFAULT_AMOUNTS = {"yaw": 10.0, "pitch": 6.0, "tx": 0.08, "tz": 0.15}


def camera_preset(name: str, amount: float | None, duration_s: float, fps: float) -> CameraTask:
    if name not in CAMERA_PRESETS:
        raise AnnotateError("--camera", "camera", f"unknown preset {name!r}; choose from {', '.join(CAMERA_PRESETS)}")
    desc, axis, sign = CAMERA_PRESETS[name]
    if axis is None:
        kfs = [CameraKeyframe(t=0.0), CameraKeyframe(t=duration_s)]
    else:
        a = sign * (DEFAULT_AMOUNTS[axis] if amount is None else float(amount))

        def kf(t: float, v: float) -> CameraKeyframe:
            if axis == "yaw":
                return CameraKeyframe(t=t, yaw_deg=v)
            if axis == "pitch":
                return CameraKeyframe(t=t, pitch_deg=v)
            return CameraKeyframe(t=t, translation=[v, 0.0, 0.0] if axis == "tx" else [0.0, 0.0, v])

        kfs = [kf(0.0, 0.0), kf(duration_s / 2, a), kf(duration_s, 0.0)]
    return CameraTask(description=f"The camera {desc}.", duration_s=duration_s, fps=fps, keyframes=kfs)


def default_instruction(camera: CameraTask, phrases: list[str]) -> str:
    names = sorted(set(phrases))
    listed = ", ".join(names[:8]) + (" and more" if len(names) > 8 else "")
    return (f"{camera.description} Everything in the scene ({listed}) stays where it is and keeps its look, "
            "shape and colour; nothing appears or disappears.")


# ---------------------------------------------------------------- geometry


def flat_geometry(height: int, width: int) -> Geometry:
    return Geometry(depth=np.ones((height, width), np.float32), K=default_intrinsics(height, width),
                    valid=np.ones((height, width), bool))


def load_depth_file(path: str | Path, height: int, width: int) -> Geometry:
    """Depth from .npy (H x W) or .npz (`depth`, optional `K`, `valid`), resized to the image."""
    import cv2

    path = Path(path)
    try:
        data = np.load(path, allow_pickle=False)
    except Exception as exc:
        raise AnnotateError(path, "depth", f"cannot read: {exc}") from exc
    if isinstance(data, np.ndarray):
        depth, K, valid = data, None, None
    else:
        if "depth" not in data:
            raise AnnotateError(path, "depth", "the .npz has no 'depth' array")
        depth = data["depth"]
        K = data["K"] if "K" in data else None
        valid = data["valid"] if "valid" in data else None
    depth = np.asarray(depth, dtype=np.float32)
    if depth.ndim != 2:
        raise AnnotateError(path, "depth", f"must be a 2-D array, got shape {depth.shape}")
    ok = np.isfinite(depth) & (depth > 0)
    if valid is not None:
        ok &= np.asarray(valid, dtype=bool)
    h0, w0 = depth.shape
    if (h0, w0) != (height, width):
        sx, sy = width / w0, height / h0
        depth = cv2.resize(np.where(ok, depth, 0).astype(np.float32), (width, height), interpolation=cv2.INTER_NEAREST)
        ok = cv2.resize(ok.astype(np.uint8), (width, height), interpolation=cv2.INTER_NEAREST) > 0
        if K is not None:
            K = np.diag([sx, sy, 1.0]) @ np.asarray(K, dtype=np.float64)
    if not ok.any():
        raise AnnotateError(path, "depth", "no valid (finite, positive) depth values")
    depth = np.where(ok, depth, np.float32(np.median(depth[ok]))).astype(np.float32)
    return Geometry(depth=depth, K=np.asarray(K, dtype=np.float64) if K is not None else default_intrinsics(height, width),
                    valid=ok)


def _resize_geometry(g: Geometry, height: int, width: int) -> Geometry:
    import cv2

    h0, w0 = g.depth.shape
    if (h0, w0) == (height, width):
        return g
    sx, sy = width / w0, height / h0
    depth = cv2.resize(g.depth.astype(np.float32), (width, height), interpolation=cv2.INTER_NEAREST)
    valid = cv2.resize(g.valid.astype(np.uint8), (width, height), interpolation=cv2.INTER_NEAREST) > 0
    K = np.diag([sx, sy, 1.0]) @ np.asarray(g.K, dtype=np.float64)
    # Keep the principal point at the pixel-centre convention of default_intrinsics.
    K[0, 2] = (g.K[0, 2] + 0.5) * sx - 0.5
    K[1, 2] = (g.K[1, 2] + 0.5) * sy - 0.5
    return Geometry(depth=depth, K=K, valid=valid)


def model_geometry(image: np.ndarray, device: str = "cpu", options: dict | None = None) -> tuple[Geometry | None, str]:
    """Depth from the hf depth model (`depth=PATH`, `models_dir=DIR`, or the models folder), else the classical one."""
    reasons = []
    for name in ("hf", "classical"):
        try:
            if name == "hf":
                est = build_hf_depth(device=device, **_depth_options(options))
            else:
                est = load_backend(name, device=device).depth
        except Exception as exc:  # noqa: BLE001 - the next source is tried; the reason is kept
            reasons.append(f"{name}: {exc}")
            continue
        if est is None:
            reasons.append(f"{name}: no depth estimator")
            continue
        geometry, why = estimated_geometry(est, image)
        if geometry is None:
            reasons.append(f"{name}: {why}")
            continue
        return geometry, why
    return None, "; ".join(reasons) or "no depth model"


def estimated_geometry(est: Any, image: np.ndarray) -> tuple[Geometry | None, str]:
    """(Geometry, "model:<name>") from a loaded depth estimator, or (None, why it gave nothing usable)."""
    depth, K = est.estimate(image)
    H, W = image.shape[:2]
    depth = np.asarray(depth, dtype=np.float32)
    ok = np.isfinite(depth) & (depth > 0)
    if depth.shape != (H, W) or not ok.any():
        return None, f"depth of shape {depth.shape} without a valid value"
    depth = np.where(ok, depth, np.float32(np.median(depth[ok])))
    return Geometry(depth=depth, K=K if K is not None else default_intrinsics(H, W), valid=ok), f"model:{est.name}"


def _depth_options(options: dict | None) -> dict:
    keep = ("depth", "models_dir", "dtype", "local_files_only", "depth_size")
    return {k: v for k, v in (options or {}).items() if k in keep}


# ---------------------------------------------------------------- main entry


def resize_max_side(image: np.ndarray, max_side: int | None) -> tuple[np.ndarray, float]:
    import cv2

    h, w = image.shape[:2]
    if not max_side or max(h, w) <= max_side:
        return image, 1.0
    s = max_side / max(h, w)
    return cv2.resize(image, (max(1, round(w * s)), max(1, round(h * s))), interpolation=cv2.INTER_AREA), s


def annotate(image: np.ndarray, spec: AnnotateSpec, out_dir: str | Path, judge_config: Any = None,
             device: str = "cpu", on_step=None, geometry: tuple[Geometry, str] | None = None,
             backend_options: dict | None = None) -> Path:
    """Write the case folder `out_dir` for `image` (RGB uint8). Returns the case.json path.

    `geometry` = (Geometry at the image's original size, source label) overrides `spec.depth`.
    `backend_options`: the hf backend's options (model paths, `models_dir`, thresholds) for
    `--backend hf` and `--depth model`.
    """
    step = on_step or (lambda name: None)
    image = np.asarray(image)
    if image.ndim == 2:
        image = np.stack([image] * 3, axis=-1)
    if image.ndim != 3 or image.shape[2] < 3:
        raise AnnotateError("image", "image", f"expected an RGB image, got shape {image.shape}")
    image = np.ascontiguousarray(image[..., :3].astype(np.uint8))
    if spec.segmenter not in SEGMENTERS:
        raise AnnotateError("--backend", "backend", f"{spec.segmenter!r} is not one of {SEGMENTERS}")
    if not 0 < spec.dedup_iou <= 1:
        raise AnnotateError("--dedup-iou", "dedup_iou", "must be in (0, 1]")
    image, scale = resize_max_side(image, spec.max_side)
    H, W = image.shape[:2]

    prompts = list(spec.objects)
    proposed_by = "user"
    if not prompts:
        if judge_config is None:
            raise AnnotateError("--object", "objects", "no objects given and no VLM judge configured to propose them")
        step("proposing noun phrases (VLM)")
        prompts = [label_prompt(p) for p in propose_phrases(image, judge_config)]
        proposed_by = f"vlm:{judge_config.model}"
        scale_prompts = 1.0
    else:
        scale_prompts = scale
    for p in prompts:
        if p.box is not None:
            p.box = [v * scale_prompts for v in p.box]
        if p.point is not None:
            p.point = [v * scale_prompts for v in p.point]

    step(f"segmenting {len(prompts)} prompts ({spec.segmenter})")
    hf = HFPromptSegmenter(device, backend_options) if spec.segmenter == "hf" else None
    candidates: list[tuple[ObjectPrompt, np.ndarray, str]] = []
    failures = []
    for k, p in enumerate(prompts):
        masks: list[np.ndarray] = []
        source = spec.segmenter
        if hf is not None:
            masks = hf.masks(image, p)
        if not masks and (p.box is not None or p.point is not None):
            source = "grabcut"
            try:
                masks = [grabcut_mask(image, p.box, p.point, spec.grabcut_iters, seed=spec.seed + k)]
            except ValueError as exc:
                raise AnnotateError("objects", f"objects[{k}]", f"{p.phrase!r}: {exc}") from exc
        masks = [m for m in masks if m.sum() >= 16]
        if not masks:
            failures.append({"prompt": k, "phrase": p.phrase, "reason": "no mask"})
        for m in masks:
            candidates.append((p, m, source))

    del hf  # the segmenter's memory back before a depth model loads
    annotation = {"tool": "worldeval opis annotate", "phrases_from": proposed_by, "scale": round(scale, 6)}
    return assemble_case(image, spec, candidates, out_dir, annotation, failures, device=device, on_step=step,
                         geometry=geometry, backend_options=backend_options)


Candidate = tuple  # (ObjectPrompt, H x W bool mask, mask source label)


def exclusive_instances(candidates: list[Candidate], kept: list[int], shape: tuple[int, int]
                        ) -> tuple[dict[int, np.ndarray], list[int], list[dict]]:
    """Give each overlapped pixel to the smaller (usually nearer) instance; drop instances left (almost) empty."""
    final = {i: candidates[i][1] for i in kept}
    taken = np.zeros(shape, dtype=bool)
    for i in sorted(kept, key=lambda i: int(final[i].sum())):
        final[i] = final[i] & ~taken
        taken |= final[i]
    emptied = [i for i in kept if final[i].sum() < 16]
    failures = [{"prompt": i, "phrase": candidates[i][0].phrase, "reason": "covered by smaller instances"}
                for i in emptied]
    return final, [i for i in kept if i not in emptied], failures


def case_geometry(spec: AnnotateSpec, shape: tuple[int, int], image: np.ndarray, device: str,
                  given: tuple[Geometry, str] | None, backend_options: dict | None = None) -> tuple[Geometry, str]:
    """The geometry scaffold and where it came from (a given one, a depth file or model, else flat)."""
    H, W = shape
    geometry, source = None, "flat"
    if given is not None:
        geometry, source = _resize_geometry(given[0], H, W), given[1]
    elif spec.depth == "model":
        geometry, source = model_geometry(image, device, backend_options)
        if geometry is None:
            source = f"flat (depth model unavailable: {source})"
    elif spec.depth:
        geometry, source = load_depth_file(spec.depth, H, W), f"file:{Path(spec.depth).name}"
    return (geometry if geometry is not None else flat_geometry(H, W)), source


def case_camera(spec: AnnotateSpec) -> CameraTask:
    if isinstance(spec.camera, dict):
        try:
            return CameraTask.model_validate(spec.camera)
        except Exception as exc:
            raise AnnotateError("camera", "camera", f"invalid camera task: {exc}") from exc
    return camera_preset(spec.camera, spec.camera_amount, spec.duration_s, spec.fps)


def assemble_case(image: np.ndarray, spec: AnnotateSpec, candidates: list[Candidate], out_dir: str | Path,
                  annotation: dict, failures: list[dict] | None = None, device: str = "cpu", on_step=None,
                  geometry: tuple[Geometry, str] | None = None, embedder: Any = None,
                  backend_options: dict | None = None) -> Path:
    """Write the case from segmented candidates: IoU de-duplication (earlier candidates win), exclusive
    masks, ids, labels, geometry, camera task, instruction and reference embeddings (SPEC section 2).

    `annotation` is recorded in case.json (tool, provenance); the de-duplication, failures, geometry
    source and per-instance prompts are added here. Returns the case.json path.
    """
    step = on_step or (lambda name: None)
    failures = list(failures or [])
    H, W = image.shape[:2]
    kept, dropped = remove_duplicates([m for _, m, _ in candidates], spec.dedup_iou)
    if not kept:
        raise AnnotateError("objects", "objects", "no prompt produced a usable mask")
    final = {i: candidates[i][1] for i in kept}
    if spec.exclusive:
        final, kept, emptied = exclusive_instances(candidates, kept, (H, W))
        failures += emptied
    instances, masks_by_id = [], {}
    for n, i in enumerate(kept):
        p = candidates[i][0]
        iid = f"obj_{n + 1:03d}"
        instances.append({"id": iid, "category": p.phrase, "kinematics": p.kinematics, "track": p.resolved_track(),
                          "attributes": dict(sorted(p.attributes.items())), "claims": list(p.claims)})
        masks_by_id[iid] = final[i]
    step("geometry")
    geo, geo_source = case_geometry(spec, (H, W), image, device, geometry, backend_options)
    camera = case_camera(spec)
    case = {
        "id": spec.case_id, "domain": spec.domain, "subcategory": spec.subcategory, "image": "input.png",
        "instruction": spec.instruction or default_instruction(camera, [i["category"] for i in instances]),
        "camera_task": camera.model_dump(mode="json"),
        "instances": instances,
        "annotation": dict(annotation) | {
            "segmenter": spec.segmenter,
            "dedup_iou": spec.dedup_iou,
            "dropped_duplicates": [{"prompt": a, "duplicate_of_prompt": b, "iou": v} for a, b, v in dropped],
            "failed_prompts": failures,
            "geometry": geo_source,
            "image_sha256": hashlib.sha256(image.tobytes()).hexdigest(),
            "prompts": [candidates[i][0].record() | {"mask_source": candidates[i][2]} for i in kept],
        },
    }
    out_dir = Path(out_dir)
    if spec.embeddings:
        step("reference embeddings")
        emb = reference_embeddings(image, [masks_by_id[i["id"]] for i in instances], device, embedder)
        if emb is not None:
            vectors, name = emb
            out_dir.mkdir(parents=True, exist_ok=True)
            np.save(out_dir / "reference_embeddings.npy", vectors.astype(np.float32))
            case["reference_embeddings"] = {"file": "reference_embeddings.npy", "embedder": name,
                                            "order": [i["id"] for i in instances]}
    step("writing case")
    try:
        return write_case(out_dir, case, image, masks_by_id, geometry=geo, image_name="input.png")
    except CaseError as exc:
        raise AnnotateError(exc.file, exc.field, exc.reason) from exc


def reference_embeddings(image: np.ndarray, masks: list[np.ndarray], device: str = "cpu",
                         embedder: Any = None) -> tuple[np.ndarray, str] | None:
    """Appearance descriptors of the instances with `embedder`, by default the evaluator's classical one
    (None when unavailable)."""
    try:
        if embedder is None:
            embedder = load_backend("classical", device=device).embedder
        boxes = [tuple(mask_bbox(m)) for m in masks]
        return np.asarray(embedder.embed(image, masks, boxes), dtype=np.float32), embedder.name
    except Exception:
        return None


# ---------------------------------------------------------------- preview

# Distinct, saturated colours (RGB) for instance outlines; repeated past ten instances.
PREVIEW_COLOURS = [(230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48), (145, 30, 180),
                   (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 212)]


def preview_image(image: np.ndarray, masks: list[np.ndarray], labels: list[str]) -> np.ndarray:
    """`image` with each mask outlined in its own colour and labelled at its top-left; other pixels untouched."""
    import cv2

    out = np.ascontiguousarray(image[..., :3].copy())
    H, W = out.shape[:2]
    thick = max(2, round(min(H, W) / 240))
    scale = max(0.4, min(H, W) / 800)
    for k, (mask, label) in enumerate(zip(masks, labels)):
        colour = PREVIEW_COLOURS[k % len(PREVIEW_COLOURS)]
        contours, _ = cv2.findContours(mask.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
        cv2.drawContours(out, contours, -1, colour, thick)
        ys, xs = np.nonzero(mask)
        if not len(xs):
            continue
        (tw, th), base = cv2.getTextSize(label, cv2.FONT_HERSHEY_SIMPLEX, scale, 1)
        # the label sits just above the mask's box, pushed inside the image at the edges
        x = int(min(max(0, xs.min()), max(0, W - tw - 4)))
        y = int(min(max(th + base + 4, ys.min() - 2), H - 1))
        cv2.rectangle(out, (x, y - th - base - 4), (x + tw + 4, y), colour, -1)
        dark = sum(colour) > 380  # black text on light colours, white on dark ones
        cv2.putText(out, label, (x + 2, y - base - 2), cv2.FONT_HERSHEY_SIMPLEX, scale,
                    (0, 0, 0) if dark else (255, 255, 255), 1, cv2.LINE_AA)
    return out


def write_preview(case_dir: str | Path, name: str = "preview.png") -> Path:
    """`case_dir/preview.png`: I0 with every instance outlined and labelled "id category", to check the masks by eye."""
    from PIL import Image

    case_dir = Path(case_dir)
    case = load_case(case_dir, with_geometry=False)
    ids = [i.id for i in case.instances]
    picture = preview_image(case.image, [case.masks[i] for i in ids],
                            [f"{i.id} {i.category}" for i in case.instances])
    path = case_dir / name
    Image.fromarray(picture).save(path)
    return path
