"""Real video with ground-truth instance masks: loading, OPIS cases, and mask-driven interventions.

Two folder layouts are read (one clip per folder):

* `<DIR>/<clip>/frames/*.jpg|png` and `<DIR>/<clip>/masks/*.png`, a mask named like its frame
  (a `<DIR>` that itself holds `frames/` is one clip);
* DAVIS / YouTube-VOS: `<DIR>/JPEGImages[/<level>]/<clip>/` and `<DIR>/Annotations[/<level>]/<clip>/`,
  where `<level>` is a resolution folder such as `480p` (480p is preferred when several exist).

Frames sorted by name are the frame order. A mask is a palette or grey PNG whose value k marks
instance k and 0 the background; any other distinct value is an instance id (DAVIS-2016 marks its
single object with 255). The frame-0 mask is required and fixes the reference inventory; later
masks are optional, and a value that first appears after frame 0 is ignored (a new object is no
reference instance). An optional `instances.json` next to `frames/` (or in the clip's
Annotations folder) names the instances and sets their routing and the clip's frame rate:
`{"fps": 24, "instances": {"1": {"category": "rider", "kinematics": "articulated",
"track": "dynamic", "attributes": {...}, "claims": [...]}}}`. Without it an instance is a generic
"object", deformable, on the dynamic track (real footage gives no reason to call anything static).

Interventions (written only when every frame after frame 0 has a mask, so an edit never flickers
off): the target (the largest frame-0 instance) recoloured inside its mask, inpainted away inside
a dilated mask, and another clip's object pasted into the frames. `shown_masks` says, for any
variant and frame, which pixels of each reference instance the video actually shows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from worldeval.errors import InputError
from worldeval.media import write_video
from worldeval.opis.case import DEFAULT_FPS, write_case
from worldeval.opis.cases.annotate import camera_preset, default_instruction
from worldeval.opis.checks.synth import recolour_object
from worldeval.opis.labels import KINEMATICS, TRACKS

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
VARIANTS = ("real", "recoloured", "removed", "pasted")
MAX_INSTANCES = 64  # more distinct values than this is a soft or compressed mask, not a label map


class GTError(InputError):
    """Ground truth that cannot be used; names the file and the field."""


@dataclass
class GTClip:
    name: str
    root: Path  # the clip folder (layout A) or its JPEGImages folder (layout B)
    frames: list[Path]
    masks: dict[int, Path]  # frame index -> mask file
    fps: float
    size: tuple[int, int]  # (H, W) of every frame
    instance_values: list[int]  # label values present in frame 0, ascending
    meta: dict[str, Any] = field(default_factory=dict)  # instances.json, validated
    meta_path: Path | None = None

    def __len__(self) -> int:
        return len(self.frames)

    def instance_id(self, value: int) -> str:
        return f"obj_{value:03d}"

    def image(self, t: int) -> np.ndarray:
        return read_rgb(self.frames[t])

    def labels(self, t: int) -> np.ndarray | None:
        """The label map of frame t (None when frame t has no mask)."""
        p = self.masks.get(t)
        return None if p is None else read_labels(p, self.size)

    def instance_masks(self, t: int) -> dict[str, np.ndarray] | None:
        """Reference instance id -> bool mask in frame t (None when frame t has no mask)."""
        lab = self.labels(t)
        if lab is None:
            return None
        return {self.instance_id(v): lab == v for v in self.instance_values}

    @property
    def fully_masked(self) -> bool:
        return len(self.masks) == len(self.frames)

    def instance_info(self, value: int) -> dict[str, Any]:
        info = dict((self.meta.get("instances") or {}).get(str(value), {}))
        info.setdefault("category", "object")
        info.setdefault("kinematics", "deformable")
        info.setdefault("track", "static" if info["kinematics"] == "rigid" else "dynamic")
        return info


# ----------------------------------------------------------------------------- reading


def read_rgb(path: Path) -> np.ndarray:
    from PIL import Image

    try:
        with Image.open(path) as im:
            return np.asarray(im.convert("RGB"))
    except Exception as exc:
        raise GTError(path, "frame", f"cannot read image: {exc}") from exc


def read_labels(path: Path, size: tuple[int, int] | None = None) -> np.ndarray:
    """Integer label map of a palette or grey PNG; `size` (H, W) is checked when given."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            if im.mode not in ("P", "L", "1", "I", "I;16"):
                raise GTError(path, "mask", f"expected a palette or grey label PNG, got mode {im.mode}")
            lab = np.asarray(im.convert("L") if im.mode == "1" else im).astype(np.int32)
    except GTError:
        raise
    except Exception as exc:
        raise GTError(path, "mask", f"cannot read mask: {exc}") from exc
    if size is not None and lab.shape != tuple(size):
        raise GTError(path, "mask", f"mask is {lab.shape[1]}x{lab.shape[0]} but its frame is {size[1]}x{size[0]}")
    return lab


def _image_size(path: Path) -> tuple[int, int]:
    from PIL import Image

    try:
        with Image.open(path) as im:
            return im.size[1], im.size[0]
    except Exception as exc:
        raise GTError(path, "frame", f"cannot read image: {exc}") from exc


def _images(folder: Path, suffixes=IMAGE_SUFFIXES) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in suffixes)


def _load_meta(path: Path | None) -> dict[str, Any]:
    if path is None or not path.exists():
        return {}
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise GTError(path, "instances.json", f"invalid JSON: {exc}") from exc
    if not isinstance(meta, dict):
        raise GTError(path, "instances.json", "must be an object")
    if "fps" in meta and not (isinstance(meta["fps"], (int, float)) and meta["fps"] > 0):
        raise GTError(path, "fps", f"must be a positive number, got {meta['fps']!r}")
    insts = meta.get("instances", {})
    if isinstance(insts, list):  # [{"id": 1, ...}] is accepted too
        insts = {str(i.get("id")): {k: v for k, v in i.items() if k != "id"} for i in insts if isinstance(i, dict)}
    if not isinstance(insts, dict):
        raise GTError(path, "instances", "must map label values to {category, kinematics, track}")
    for key, info in insts.items():
        where = f"instances.{key}"
        if not isinstance(info, dict):
            raise GTError(path, where, "must be an object")
        if "category" in info and not (isinstance(info["category"], str) and info["category"].strip()):
            raise GTError(path, f"{where}.category", "must be a non-empty noun phrase")
        if info.get("kinematics", "rigid") not in KINEMATICS:
            raise GTError(path, f"{where}.kinematics", f"{info['kinematics']!r} is not one of {KINEMATICS}")
        if info.get("track", "static") not in TRACKS:
            raise GTError(path, f"{where}.track", f"{info['track']!r} is not one of {TRACKS}")
    meta["instances"] = insts
    return meta


def load_clip(name: str, frames_dir: Path, masks_dir: Path, fps: float = DEFAULT_FPS, meta_path: Path | None = None) -> GTClip:
    """Check one clip's files (sizes, names, frame-0 mask) and return it; raises GTError naming the file."""
    frames_dir, masks_dir = Path(frames_dir), Path(masks_dir)
    if not frames_dir.is_dir():
        raise GTError(frames_dir, "frames", "frame folder not found")
    frames = _images(frames_dir)
    if not frames:
        raise GTError(frames_dir, "frames", "no .jpg/.png frames")
    index = {p.stem: t for t, p in enumerate(frames)}
    masks: dict[int, Path] = {}
    for mp in _images(masks_dir, (".png",)) if masks_dir.is_dir() else []:
        if mp.stem not in index:
            raise GTError(mp, "mask", f"mask without a frame: no frame named {mp.stem}.* in {frames_dir}")
        masks[index[mp.stem]] = mp
    size = _image_size(frames[0])
    if 0 not in masks:
        raise GTError(masks_dir / f"{frames[0].stem}.png", "frame 0 mask", "the first frame needs a mask (it defines the instances)")
    for t, mp in sorted(masks.items()):
        fsize = _image_size(frames[t])
        if fsize != size:
            raise GTError(frames[t], "frame", f"frame is {fsize[1]}x{fsize[0]} but frame 0 is {size[1]}x{size[0]}")
        if _image_size(mp) != size:
            h, w = _image_size(mp)
            raise GTError(mp, "mask", f"mask is {w}x{h} but its frame {frames[t].name} is {size[1]}x{size[0]}")
    lab0 = read_labels(masks[0], size)
    values = sorted(int(v) for v in np.unique(lab0) if v != 0)
    if not values:
        raise GTError(masks[0], "frame 0 mask", "empty: no instance pixels (all background)")
    if len(values) > MAX_INSTANCES:
        raise GTError(masks[0], "frame 0 mask", f"{len(values)} distinct values: a soft or compressed mask, not a label map")
    meta = _load_meta(meta_path)
    return GTClip(name=name, root=frames_dir.parent, frames=frames, masks=masks, fps=float(meta.get("fps", fps)),
                  size=size, instance_values=values, meta=meta, meta_path=meta_path)


def _level(folder: Path) -> Path:
    """`JPEGImages` or its resolution level (`480p` preferred) when its children hold no images."""
    subs = sorted(p for p in folder.iterdir() if p.is_dir())
    if any(_images(s) for s in subs):
        return folder
    levels = [s for s in subs if any(c.is_dir() for c in s.iterdir())]
    for s in levels:
        if s.name == "480p":
            return s
    return levels[0] if levels else folder


def find_clips(root: str | Path) -> list[tuple[str, Path, Path, Path | None]]:
    """(clip name, frames folder, masks folder, instances.json path or None) for every clip under `root`."""
    root = Path(root)
    if not root.is_dir():
        raise GTError(root, "gt", "not a directory")
    if (root / "frames").is_dir():
        return [(root.name, root / "frames", root / "masks", root / "instances.json")]
    if (root / "JPEGImages").is_dir():
        jpeg = _level(root / "JPEGImages")
        ann = root / "Annotations" / jpeg.relative_to(root / "JPEGImages")
        return [(d.name, d, ann / d.name, ann / d.name / "instances.json") for d in sorted(jpeg.iterdir()) if d.is_dir()]
    clips = [(d.name, d / "frames", d / "masks", d / "instances.json") for d in sorted(root.iterdir()) if (d / "frames").is_dir()]
    if not clips:
        raise GTError(root, "gt", "no clips: expected <clip>/frames + <clip>/masks or JPEGImages/ + Annotations/")
    return clips


def load_clips(root: str | Path, fps: float = DEFAULT_FPS) -> tuple[list[GTClip], dict[str, dict]]:
    """Every clip under `root` that loads, and {clip: {"file", "field", "message"}} for those that do not."""
    clips, errors = [], {}
    for name, fdir, mdir, meta in find_clips(root):
        try:
            clips.append(load_clip(name, fdir, mdir, fps, meta))
        except GTError as exc:
            errors[name] = {"file": str(exc.file), "field": exc.field, "message": exc.reason}
    return clips, errors


# ----------------------------------------------------------------------------- case and rollouts


def build_case(clip: GTClip, case_dir: str | Path) -> Path:
    """The OPIS case of the clip's frame 0 (instances from the frame-0 mask); returns the case folder."""
    image, masks0 = clip.image(0), clip.instance_masks(0)
    instances = []
    for v in clip.instance_values:
        info = clip.instance_info(v)
        inst = {"id": clip.instance_id(v), "category": info["category"], "kinematics": info["kinematics"],
                "track": info["track"], "source": {"label": v}}
        for key in ("attributes", "claims"):
            if info.get(key):
                inst[key] = info[key]
        instances.append(inst)
    camera = camera_preset("hold", None, len(clip) / clip.fps, clip.fps)
    camera.description = "The camera moves as in the real footage."
    spec = {
        "id": clip.name, "domain": "real_world", "subcategory": "ground_truth_video", "image": "input.png",
        "instruction": default_instruction(camera, [i["category"] for i in instances]),
        "camera_task": camera.model_dump(mode="json"), "instances": instances,
        "source": {"frames": str(clip.frames[0].parent), "mask": str(clip.masks[0]), "tool": "worldeval opis audit"},
    }
    write_case(case_dir, spec, image, masks0, geometry=None, image_name="input.png")
    return Path(case_dir)


def target_value(clip: GTClip) -> int:
    """The instance the interventions edit: the largest one in frame 0 (lowest value on a tie)."""
    lab0 = clip.labels(0)
    return max(clip.instance_values, key=lambda v: (int((lab0 == v).sum()), -v))


def _dilate(mask: np.ndarray, px: int) -> np.ndarray:
    import cv2

    k = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * px + 1, 2 * px + 1))
    return cv2.dilate(mask.astype(np.uint8), k) > 0


@dataclass
class Paste:
    """Where another clip's object goes: scale and top-left corner in this clip's frames."""

    donor: GTClip
    value: int
    scale: float
    x: int
    y: int

    def patch(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """(RGB pixels, bool mask) of the donor object at frame t (cycled; frame 0's mask where t has none)."""
        import cv2

        td = t % len(self.donor)
        if td not in self.donor.masks:
            td = 0
        img, lab = self.donor.image(td), self.donor.labels(td)
        m = lab == self.value
        if not m.any():
            img, m = self.donor.image(0), self.donor.labels(0) == self.value
        ys, xs = np.nonzero(m)
        y0, y1, x0, x1 = ys.min(), ys.max() + 1, xs.min(), xs.max() + 1
        size = (max(1, round((x1 - x0) * self.scale)), max(1, round((y1 - y0) * self.scale)))
        rgb = cv2.resize(img[y0:y1, x0:x1], size, interpolation=cv2.INTER_AREA)
        mk = cv2.resize(m[y0:y1, x0:x1].astype(np.uint8), size, interpolation=cv2.INTER_NEAREST) > 0
        return rgb, mk

    def region(self, t: int, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        """(full-frame bool mask of the pasted pixels, full-frame RGB holding them)."""
        rgb, mk = self.patch(t)
        H, W = shape
        full, pix = np.zeros((H, W), bool), np.zeros((H, W, 3), np.uint8)
        h, w = min(mk.shape[0], H - self.y), min(mk.shape[1], W - self.x)
        full[self.y:self.y + h, self.x:self.x + w] = mk[:h, :w]
        pix[self.y:self.y + h, self.x:self.x + w] = rgb[:h, :w]
        return full, pix


def plan_paste(clip: GTClip, donor: GTClip, max_share: float = 0.35) -> Paste:
    """Put the donor's largest object, scaled to at most `max_share` of the frame's sides, in the
    corner of this clip's frames that its instances cover least over the whole clip."""
    H, W = clip.size
    value = target_value(donor)
    m0 = donor.labels(0) == value
    ys, xs = np.nonzero(m0)
    bh, bw = ys.max() - ys.min() + 1, xs.max() - xs.min() + 1
    scale = min(1.0, max_share * H / bh, max_share * W / bw)
    ph, pw = int(round(bh * scale)), int(round(bw * scale))
    cover = np.zeros((H, W), np.int32)
    for t in sorted(clip.masks):
        cover += clip.labels(t) > 0
    margin_y, margin_x = H // 20, W // 20
    corners = [(margin_x, margin_y), (W - pw - margin_x, margin_y), (margin_x, H - ph - margin_y), (W - pw - margin_x, H - ph - margin_y)]
    corners = [(max(0, x), max(0, y)) for x, y in corners]
    x, y = min(corners, key=lambda c: (int(cover[c[1]:c[1] + ph, c[0]:c[0] + pw].sum()), c[1], c[0]))
    return Paste(donor=donor, value=value, scale=float(scale), x=int(x), y=int(y))


def inpaint_away(image: np.ndarray, hole: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Fill `hole` from its surroundings, never painting over `keep` (the other instances).

    A small Telea radius: a real object hole is large, and a wide radius costs ten times more
    without filling it any better (the fill is a smear either way).
    """
    import cv2

    hole = hole & ~keep
    if not hole.any():
        return image
    return cv2.inpaint(image, hole.astype(np.uint8) * 255, 3, cv2.INPAINT_TELEA)


def variant_frames(clip: GTClip, variant: str, paste: Paste | None = None, hue_turn_deg: float = 150.0) -> Iterator[np.ndarray]:
    """The frames of one variant; frame 0 is always the real I0 (the case's input image)."""
    tv = target_value(clip)
    diag = float(np.hypot(*clip.size))
    for t in range(len(clip)):
        img = clip.image(t)
        if t == 0 or variant == "real":
            yield img
            continue
        lab = clip.labels(t)
        target = lab == tv
        if variant == "recoloured":
            yield recolour_object(img, target, hue_turn_deg, 0.25)[0] if target.any() else img
        elif variant == "removed":
            # DAVIS outlines leave a rim of the object outside its mask; the hole reaches past it
            hole = _dilate(target, max(2, int(0.006 * diag))) if target.any() else target
            yield inpaint_away(img, hole, (lab > 0) & ~hole)
        elif variant == "pasted":
            full, pix = paste.region(t, clip.size)
            out = img.copy()
            out[full] = pix[full]
            yield out
        else:
            raise ValueError(f"unknown variant {variant!r}; choose from {VARIANTS}")


def shown_masks(clip: GTClip, variant: str, t: int, paste: Paste | None = None) -> dict[str, np.ndarray] | None:
    """What of each reference instance the variant's frame t shows (None when frame t has no mask)."""
    masks = clip.instance_masks(t)
    if masks is None or t == 0 or variant in ("real", "recoloured"):
        return masks
    if variant == "removed":
        masks[clip.instance_id(target_value(clip))] = np.zeros(clip.size, bool)
    elif variant == "pasted":
        full, _ = paste.region(t, clip.size)
        masks = {k: m & ~full for k, m in masks.items()}
    return masks


def write_variant(clip: GTClip, variant: str, path: str | Path, fps: float | None = None, paste: Paste | None = None,
                  crf: int = 0) -> Path:
    """The variant as an H.264 mp4. Lossless by default: the audit compares decisions with
    the ground-truth masks, so it measures the clip's own pixels rather than compression artefacts."""
    return write_video(path, variant_frames(clip, variant, paste), fps or clip.fps, crf=crf)
