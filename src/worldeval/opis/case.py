"""OPIS cases (SPEC section 2): the fixed, input-grounded reference of one rollout.

A case folder holds `case.json`, the input image I0, optional instance mask PNGs
and an optional `geometry.npz`. Loading validates everything a later step relies
on, so perception code can trust a `Case` without re-checking it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from worldeval.errors import CaseError
from worldeval.geometry import mask_bbox
# the case's schema and mask encoding: read here by whoever loads or writes a case
from worldeval.opis.casespec import (  # noqa: F401
    DEFAULT_FPS, CameraKeyframe, CameraTask, CaseSpec, Claim, Instance, decode_rle, encode_rle, rotation_from_angles,
)
from worldeval.opis.official.layout import find_official_cases, is_official_case, read_official_case
from worldeval.runs import atomic_write_json

# bbox may disagree with the mask's tight box by this much (pixels, or share of the box side)
BBOX_TOLERANCE_PX = 3.0
BBOX_TOLERANCE_FRAC = 0.05


@dataclass
class Geometry:
    depth: np.ndarray  # (H, W) float32
    K: np.ndarray  # (3, 3) float64
    valid: np.ndarray  # (H, W) bool
    # Optional key `exact_plane` (our extension of SPEC's geometry.npz): the depth is a plane and a
    # homography is exact for every pixel of every frame (a planar scene, or a camera that only turns,
    # as `opis validate --plane-depth` renders). annotate's flat fallback is NOT this: it is a guess.
    exact_plane: bool = False

    def save(self, path: Path) -> None:
        extra = {"exact_plane": np.array(True)} if self.exact_plane else {}
        np.savez_compressed(path, depth=self.depth.astype(np.float32), K=self.K.astype(np.float64), valid=self.valid, **extra)


def default_intrinsics(height: int, width: int, hfov_deg: float = 60.0) -> np.ndarray:
    """Pinhole intrinsics for an image with no calibration: a 60 degree horizontal field of view."""
    f = 0.5 * width / math.tan(math.radians(hfov_deg) / 2)
    return np.array([[f, 0, (width - 1) / 2], [0, f, (height - 1) / 2], [0, 0, 1]], dtype=np.float64)


@dataclass
class Case:
    spec: CaseSpec
    root: Path
    image: np.ndarray  # H x W x 3 uint8 RGB (I0)
    masks: dict[str, np.ndarray]  # instance id -> H x W bool
    geometry: Geometry | None = None
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def instances(self) -> list[Instance]:
        return self.spec.instances

    @property
    def shape(self) -> tuple[int, int]:
        return self.image.shape[0], self.image.shape[1]

    def intrinsics(self) -> np.ndarray:
        if self.geometry is not None:
            return self.geometry.K
        return default_intrinsics(*self.shape)


def _inside(root: Path, rel: str, file: Path, fieldname: str) -> Path:
    p = Path(rel)
    if p.is_absolute() or ".." in p.parts:
        raise CaseError(file, fieldname, f"path {rel!r} must be relative and stay inside the case folder")
    full = (root / p).resolve()
    if root.resolve() not in full.parents and full != root.resolve():
        raise CaseError(file, fieldname, f"path {rel!r} leaves the case folder")
    return full


def read_json(path: Path) -> Any:
    """Parse a JSON file; a missing or malformed file is a CaseError naming it."""
    if not path.exists():
        raise CaseError(path, path.name, "file not found")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise CaseError(path, path.name, f"invalid JSON: {exc}") from exc


def _read_spec(cj: Path) -> CaseSpec:
    raw = read_json(cj)
    try:
        spec = CaseSpec.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        raise CaseError(cj, loc or "case.json", err["msg"]) from exc
    if isinstance(spec.camera_task, dict):
        try:
            spec.camera_task = CameraTask.model_validate(spec.camera_task)
        except ValidationError as exc:
            err = exc.errors()[0]
            raise CaseError(cj, "camera_task." + ".".join(str(x) for x in err["loc"]), err["msg"]) from exc
    return spec


def load_case(case_dir: str | Path, with_geometry: bool = True) -> Case:
    """Load and validate one case folder; raises CaseError naming file and field."""
    from PIL import Image

    root = Path(case_dir)
    cj = root / "case.json"
    if not cj.exists():
        official = _load_official(root, with_geometry)
        if official is not None:
            return official
    spec = _read_spec(cj)
    img_path = _inside(root, spec.image, cj, "image")
    if not img_path.exists():
        raise CaseError(cj, "image", f"{spec.image} not found")
    try:
        with Image.open(img_path) as im:
            image = np.asarray(im.convert("RGB"))
    except Exception as exc:
        raise CaseError(img_path, "image", f"cannot read image: {exc}") from exc
    H, W = image.shape[:2]

    seen: set[str] = set()
    masks: dict[str, np.ndarray] = {}
    for k, inst in enumerate(spec.instances):
        where = f"instances[{k}]"
        if inst.id in seen:
            raise CaseError(cj, f"{where}.id", f"duplicate instance id {inst.id!r}")
        seen.add(inst.id)
        if inst.mask is not None:
            size = inst.mask.get("size")
            if not (isinstance(size, list) and len(size) == 2):
                raise CaseError(cj, f"{where}.mask.size", "must be [H, W]")
            if list(size) != [H, W]:
                raise CaseError(cj, f"{where}.mask.size", f"mask is {size[0]}x{size[1]} but the image is {H}x{W}")
            try:
                m = decode_rle(inst.mask)
            except Exception as exc:
                raise CaseError(cj, f"{where}.mask.counts", f"not a valid COCO RLE: {exc}") from exc
        elif inst.mask_png is not None:
            mp = _inside(root, inst.mask_png, cj, f"{where}.mask_png")
            if not mp.exists():
                raise CaseError(cj, f"{where}.mask_png", f"{inst.mask_png} not found")
            try:
                with Image.open(mp) as im:
                    m = np.asarray(im.convert("L")) > 127
            except Exception as exc:
                raise CaseError(mp, f"{where}.mask_png", f"cannot read mask: {exc}") from exc
            if m.shape != (H, W):
                raise CaseError(mp, f"{where}.mask_png", f"mask is {m.shape[0]}x{m.shape[1]} but the image is {H}x{W}")
        else:
            raise CaseError(cj, f"{where}.mask", "instance needs 'mask' (COCO RLE) or 'mask_png'")
        if not m.any():
            raise CaseError(cj, f"{where}.mask", "mask is empty")
        tight = mask_bbox(m)
        if inst.bbox is None:
            inst.bbox = tight
        else:
            if len(inst.bbox) != 4 or any(not math.isfinite(v) for v in inst.bbox):
                raise CaseError(cj, f"{where}.bbox", "must be 4 finite numbers [x, y, w, h]")
            for name, a, b, side in zip(("x", "y", "w", "h"), inst.bbox, tight, (tight[2], tight[3]) * 2):
                if abs(a - b) > max(BBOX_TOLERANCE_PX, BBOX_TOLERANCE_FRAC * side):
                    raise CaseError(
                        cj, f"{where}.bbox", f"{name}={a:g} disagrees with the mask's box {tight} (instance {inst.id})"
                    )
        masks[inst.id] = m

    geometry = None
    gpath = root / "geometry.npz"
    if with_geometry and gpath.exists():
        geometry = _load_geometry(gpath, H, W)
    return Case(spec=spec, root=root, image=image, masks=masks, geometry=geometry)


def _load_official(root: Path, with_geometry: bool) -> Case | None:
    """A case folder of the OPIS authors' layout, or None when the folder is not one."""
    if not is_official_case(root):
        return None
    oc = read_official_case(root)
    geometry = None
    if with_geometry and (root / "geometry.npz").exists():
        geometry = _load_geometry(root / "geometry.npz", *oc.image.shape[:2])
    return Case(spec=oc.spec, root=root, image=oc.image, masks=oc.masks, geometry=geometry)


def _load_geometry(gpath: Path, H: int, W: int) -> Geometry:
    try:
        data = np.load(gpath, allow_pickle=False)
    except Exception as exc:
        raise CaseError(gpath, "geometry.npz", f"cannot read: {exc}") from exc
    for key in ("depth", "K"):
        if key not in data:
            raise CaseError(gpath, key, "missing array")
    depth = np.asarray(data["depth"], dtype=np.float32)
    K = np.asarray(data["K"], dtype=np.float64)
    valid = np.asarray(data["valid"], dtype=bool) if "valid" in data else np.isfinite(depth) & (depth > 0)
    if depth.shape != (H, W):
        raise CaseError(gpath, "depth", f"shape {depth.shape} does not match the image {H}x{W}")
    if valid.shape != (H, W):
        raise CaseError(gpath, "valid", f"shape {valid.shape} does not match the image {H}x{W}")
    if K.shape != (3, 3) or not np.all(np.isfinite(K)):
        raise CaseError(gpath, "K", "must be a finite 3x3 matrix")
    if K[0, 0] <= 0 or K[1, 1] <= 0:
        raise CaseError(gpath, "K", "focal lengths must be positive")
    bad = valid & ~(np.isfinite(depth) & (depth > 0))
    if bad.any():
        n = int(bad.sum())
        raise CaseError(gpath, "depth", f"{n} pixels marked valid hold NaN, inf or non-positive depth")
    exact_plane = bool(np.asarray(data["exact_plane"]).all()) if "exact_plane" in data else False
    return Geometry(depth=depth, K=K, valid=valid, exact_plane=exact_plane)


def is_case_dir(folder: Path) -> bool:
    """A case of ours (case.json) or of the authors' layout (raw.jpg + reference_scene.json)."""
    return (folder / "case.json").is_file() or is_official_case(folder)


def iter_case_dirs(dataset: str | Path) -> list[Path]:
    """Case folders of a dataset: dataset.json order when present; else the folder itself when it is a
    case; else every case below it, ours (`*/case.json`) and the authors' (`final/<subcategory>/<case>`,
    at any depth: the download root, `final/`, one subcategory). A folder holding no case is an error,
    as are two cases with the same id (the folder name: rollouts are `<case_id>.mp4`)."""
    root = Path(dataset)
    if not root.is_dir():
        raise CaseError(root, "dataset", "not a directory")
    dj = root / "dataset.json"
    if dj.exists():
        meta = read_json(dj)
        cases = meta.get("cases")
        if not isinstance(cases, list):
            raise CaseError(dj, "cases", "must be a list of case ids")
        out = []
        for cid in cases:
            if not isinstance(cid, str) or "/" in cid or cid in ("", ".", ".."):
                raise CaseError(dj, "cases", f"invalid case id {cid!r}")
            out.append(root / cid)
        return out
    if is_case_dir(root):
        return [root]
    found = sorted(p.parent for p in root.glob("*/case.json"))
    found += [p for p in find_official_cases(root) if not (p / "case.json").is_file()]
    if not found:
        raise CaseError(root, "dataset", "holds no case: no case.json below it, and no folder with raw.jpg and "
                        "reference_scene.json (the OPIS authors' layout)")
    by_id: dict[str, Path] = {}
    for p in found:
        if p.name in by_id:
            raise CaseError(p, "case id", f"{p.name!r} is also the id of {by_id[p.name]} (case ids are folder names)")
        by_id[p.name] = p
    return found


def write_case(
    case_dir: str | Path,
    spec: dict[str, Any] | CaseSpec,
    image: np.ndarray,
    masks: dict[str, np.ndarray],
    geometry: Geometry | None = None,
    image_name: str = "input.png",
) -> Path:
    """Write a case folder (masks as COCO RLE, bbox from the mask). Returns the case.json path."""
    from PIL import Image

    root = Path(case_dir)
    root.mkdir(parents=True, exist_ok=True)
    data = spec.model_dump(mode="json", exclude_none=True) if isinstance(spec, CaseSpec) else json.loads(json.dumps(spec))
    data["image"] = image_name
    Image.fromarray(np.asarray(image, dtype=np.uint8)).save(root / image_name)
    for inst in data["instances"]:
        m = masks[inst["id"]]
        inst.pop("mask_png", None)
        inst["mask"] = encode_rle(m)
        inst["bbox"] = mask_bbox(m)
    if geometry is not None:
        geometry.save(root / "geometry.npz")
    CaseSpec.model_validate(data)  # fail here, not at load time
    return atomic_write_json(root / "case.json", data)
