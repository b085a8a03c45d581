"""The OPIS authors' dataset layout, read as downloaded (SPEC section 2).

A case of theirs is a folder holding `raw.jpg` and `reference_scene.json` (or, in older exports,
`artifacts/reference_scene.json`), found anywhere under the download root, usually as
`final/<subcategory>/<case_id>/`. `read_official_case` turns one into the same `CaseSpec` and masks
our own `case.json` gives, and a `Conversion` that says, field by field, what was kept verbatim, what
was converted and what was dropped (`worldeval opis import-official` prints it per case).

Conventions of their files that a reader must get right (read off their evaluator):
- every coordinate (boxes, masks) lives in `metadata.image_size` = [W, H]; when `raw.jpg` has another
  size, the annotation belongs to `metadata.processed_image_path` (a letterboxed copy), which is then I0;
- `bbox` is [x0, y0, x1, y1] in pixels with the maximum exclusive;
- `mask_path` (top level, or under the object's `metadata`) is relative to the folder of
  `reference_scene.json`; a pixel > 0 is the object; an object without one is its box;
- `metadata.mobility.evaluation_track`: static_geometry -> static, dynamic_identity -> dynamic,
  excluded -> excluded (carried, never scored); no mobility -> unlabeled (Presence and Identity only);
  their normalisation applies (an `unknown` kinematic class off the static track is excluded, an
  articulated or deformable one that is not excluded is dynamic).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from worldeval.errors import CaseError
from worldeval.geometry import mask_bbox
from worldeval.opis.casespec import CaseSpec, encode_rle
from worldeval.runs import atomic_write_json

SCENE_FILE = "reference_scene.json"
LEGACY_SCENE_FILE = "artifacts/reference_scene.json"
RAW_IMAGE = "raw.jpg"
PROMPT_FILE = "text_prompt.txt"
CONDITIONS_FILE = "conditions.json"
# Their default clip length when conditions.json does not give one.
DEFAULT_DURATION_S = 10.0
LAYOUT = "opis-official"

# The paper's ten subcategories in its three domains. Folder names are matched by these word stems
# (their repository fixes no spelling), so "home_indoor", "Home" and "home-scenes" are all home.
DOMAIN_OF_STEM = (
    ("home", "real_world"), ("public", "real_world"), ("natural", "real_world"), ("outdoor", "real_world"),
    ("urban", "real_world"), ("street", "real_world"), ("city", "real_world"),
    ("industr", "embodied"), ("factory", "embodied"), ("lab", "embodied"), ("simulat", "embodied"),
    ("embodied", "embodied"), ("robot", "embodied"),
    ("cartoon", "game"), ("anime", "game"), ("pixel", "game"), ("realistic", "game"), ("game", "game"),
)  # fmt: skip
UNKNOWN_DOMAIN = "unassigned"

TRACK_OF = {"static_geometry": "static", "dynamic_identity": "dynamic", "excluded": "excluded"}
KINEMATIC_CLASSES = ("rigid", "articulated", "deformable", "unknown")
# Per-object keys read into the instance itself; everything else is carried in `source`.
READ_KEYS = ("object_id", "category", "bbox", "attributes", "mask_path", "mask")


def is_official_case(folder: Path) -> bool:
    return (folder / RAW_IMAGE).is_file() and scene_file(folder) is not None


def scene_file(folder: Path) -> Path | None:
    for rel in (SCENE_FILE, LEGACY_SCENE_FILE):
        if (folder / rel).is_file():
            return folder / rel
    return None


def domain_of(subcategory: str) -> str:
    key = re.sub(r"[^a-z0-9]+", "_", subcategory.lower())
    for stem, domain in DOMAIN_OF_STEM:
        if stem in key:
            return domain
    return UNKNOWN_DOMAIN


@dataclass
class Conversion:
    """What became of one case's fields: kept verbatim, converted (and how), dropped (and why)."""

    kept: list[str] = field(default_factory=list)
    converted: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def line(self) -> str:
        parts = [f"kept {', '.join(self.kept)}", f"converted {'; '.join(self.converted)}"]
        if self.dropped:
            parts.append(f"dropped {'; '.join(self.dropped)}")
        if self.warnings:
            parts.append(f"warnings {'; '.join(self.warnings)}")
        return " | ".join(parts)


@dataclass
class OfficialCase:
    spec: CaseSpec
    image: np.ndarray  # I0: the image the annotation lives in
    image_path: Path
    masks: dict[str, np.ndarray]
    conversion: Conversion
    folder: Path


def _read_json_object(path: Path, what: str) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError) as exc:
        raise CaseError(path, what, f"cannot read: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise CaseError(path, what, f"invalid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise CaseError(path, what, f"must be a JSON object, got {type(data).__name__}")
    return data


def _read_rgb(path: Path, file: Path, fieldname: str) -> np.ndarray:
    from PIL import Image

    try:
        with Image.open(path) as im:
            return np.asarray(im.convert("RGB"))
    except Exception as exc:
        raise CaseError(file, fieldname, f"cannot read image {path.name}: {exc}") from exc


def _inside(base: Path, rel: Any, file: Path, fieldname: str) -> Path:
    if not isinstance(rel, str) or not rel.strip():
        raise CaseError(file, fieldname, f"must be a non-empty path, got {rel!r}")
    p = Path(rel)
    if p.is_absolute() or ".." in p.parts:
        raise CaseError(file, fieldname, f"path {rel!r} must be relative and stay inside the case folder")
    return base / p


def _image_size(meta: dict, file: Path) -> tuple[int, int]:
    size = meta.get("image_size", meta.get("processed_image_size"))
    ok = isinstance(size, list) and len(size) == 2 and all(isinstance(v, (int, float)) and v > 0 for v in size)
    if not ok:
        raise CaseError(file, "metadata.image_size", f"must be [W, H] of the annotated image, got {size!r}")
    return int(size[0]), int(size[1])


def _annotation_image(folder: Path, base: Path, meta: dict, file: Path, conv: Conversion) -> tuple[np.ndarray, Path]:
    """The image the boxes and masks belong to: raw.jpg when it has image_size, else the processed image."""
    W, H = _image_size(meta, file)
    raw = _read_rgb(folder / RAW_IMAGE, folder / RAW_IMAGE, RAW_IMAGE)
    if raw.shape[:2] == (H, W):
        conv.kept.append(f"{RAW_IMAGE} as I0 ({W}x{H})")
        return raw, folder / RAW_IMAGE
    rel = meta.get("processed_image_path")
    if rel is None:
        raise CaseError(file, "metadata.processed_image_path",
                        f"{RAW_IMAGE} is {raw.shape[1]}x{raw.shape[0]} but metadata.image_size is {W}x{H}, "
                        "and no processed image names the annotated one")
    path = _inside(base, rel, file, "metadata.processed_image_path")
    if not path.is_file():
        raise CaseError(file, "metadata.processed_image_path", f"{rel} not found")
    img = _read_rgb(path, file, "metadata.processed_image_path")
    if img.shape[:2] != (H, W):
        raise CaseError(path, "metadata.image_size", f"the processed image is {img.shape[1]}x{img.shape[0]}, not {W}x{H}")
    conv.converted.append(f"I0 = processed image {rel} ({W}x{H}; {RAW_IMAGE} is {raw.shape[1]}x{raw.shape[0]}, kept beside it)")
    return img, path


def _box_xyxy(obj: dict, where: str, file: Path, W: int, H: int) -> list[float] | None:
    box = obj.get("bbox")
    if box is None:
        return None
    ok = isinstance(box, list) and len(box) == 4 and all(isinstance(v, (int, float)) and math.isfinite(v) for v in box)
    if not ok:
        raise CaseError(file, f"{where}.bbox", f"must be [x0, y0, x1, y1] in pixels, got {box!r}")
    x0, y0, x1, y1 = (float(v) for v in box)
    if not (0 <= x0 < x1 <= W and 0 <= y0 < y1 <= H):
        raise CaseError(file, f"{where}.bbox", f"{box} is not a box inside the {W}x{H} image (xyxy, max exclusive)")
    return [x0, y0, x1, y1]


def _object_mask(obj: dict, where: str, base: Path, file: Path, W: int, H: int) -> tuple[np.ndarray, str]:
    from PIL import Image

    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    rel = obj.get("mask_path", meta.get("mask_path"))
    key = f"{where}.mask_path" if "mask_path" in obj else f"{where}.metadata.mask_path"
    if rel is None:
        box = _box_xyxy(obj, where, file, W, H)
        if box is None:
            raise CaseError(file, f"{where}.mask_path", "an object needs a mask_path or a bbox")
        m = np.zeros((H, W), bool)
        m[int(math.floor(box[1])):int(math.ceil(box[3])), int(math.floor(box[0])):int(math.ceil(box[2]))] = True
        return m, "box"
    path = _inside(base, rel, file, key)
    if not path.is_file():
        raise CaseError(file, key, f"{rel} not found")
    try:
        with Image.open(path) as im:
            m = np.asarray(im.convert("L")) > 0
    except Exception as exc:
        raise CaseError(path, key, f"cannot read mask: {exc}") from exc
    if m.shape != (H, W):
        raise CaseError(path, key, f"mask is {m.shape[1]}x{m.shape[0]} but metadata.image_size is {W}x{H}")
    return m, str(rel)


def mobility_of(obj: dict, where: str, file: Path) -> tuple[str, str | None, bool]:
    """(kinematics, track, labelled) after their normalisation; track None = unlabeled."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    mob = meta.get("mobility")
    if mob is None:
        kind = str(meta.get("instance_kind", meta.get("kind", ""))).lower()
        return (kind if kind in ("articulated", "deformable") else "rigid" if kind in ("static", "rigid") else "unknown",
                "dynamic" if kind in ("articulated", "deformable") else None, False)
    if not isinstance(mob, dict):
        raise CaseError(file, f"{where}.metadata.mobility", f"must be an object, got {type(mob).__name__}")
    kin = mob.get("kinematic_class", "unknown")
    if kin not in KINEMATIC_CLASSES:
        raise CaseError(file, f"{where}.metadata.mobility.kinematic_class",
                        f"{kin!r} is not one of {', '.join(KINEMATIC_CLASSES)}")
    tr = mob.get("evaluation_track", "excluded")
    if tr not in TRACK_OF:
        raise CaseError(file, f"{where}.metadata.mobility.evaluation_track", f"{tr!r} is not one of {', '.join(TRACK_OF)}")
    track = TRACK_OF[tr]
    motion = mob.get("motion_expectation", "unknown")
    static_case = kin == "rigid" and motion in ("world_static", "protocol_frozen") and track == "static"
    if not static_case:
        if kin == "unknown":
            track = "excluded"
        elif (kin in ("articulated", "deformable") or motion in ("independent_motion", "unknown")) and track != "excluded":
            track = "dynamic"
    return kin, track, True


def _attributes(obj: dict, where: str, file: Path) -> dict[str, Any]:
    attrs = obj.get("attributes", {})
    if attrs is None:
        return {}
    if not isinstance(attrs, dict):
        raise CaseError(file, f"{where}.attributes", f"must be an object, got {type(attrs).__name__}")
    return attrs


def _prompt(folder: Path, conditions: dict, conv: Conversion) -> str:
    p = folder / PROMPT_FILE
    if p.is_file():
        conv.kept.append(PROMPT_FILE)
        try:
            return p.read_text(encoding="utf-8-sig").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise CaseError(p, PROMPT_FILE, f"cannot read as UTF-8 text: {exc}") from exc
    i2v = conditions.get("i2v")
    if isinstance(i2v, dict) and isinstance(i2v.get("motion_prompt"), str):
        conv.converted.append("instruction = conditions.i2v.motion_prompt")
        return i2v["motion_prompt"].strip()
    return ""


def subcategory_of(folder: Path) -> str:
    """The folder above the case: `final/<subcategory>/<case_id>`."""
    return folder.resolve().parent.name or UNKNOWN_DOMAIN


def _read_objects(objects: Any, base: Path, file: Path, W: int, H: int):
    """(instances as case.json dicts, masks by id, count per track, masks made from boxes)."""
    if not isinstance(objects, list):
        raise CaseError(file, "objects", "must be a list of objects")

    instances, masks, seen = [], {}, {}
    n_box_masks, tracks = 0, {"static": 0, "dynamic": 0, "excluded": 0, "unlabeled": 0}
    for k, obj in enumerate(objects):
        where = f"objects[{k}]"
        if not isinstance(obj, dict):
            raise CaseError(file, where, f"must be an object, got {type(obj).__name__}")
        oid = obj.get("object_id")
        if not isinstance(oid, (str, int)) or not str(oid).strip():
            raise CaseError(file, f"{where}.object_id", f"must be a non-empty id, got {oid!r}")
        oid = str(oid)
        if oid in seen:
            raise CaseError(file, f"{where}.object_id", f"duplicate object id {oid!r} (also objects[{seen[oid]}])")
        seen[oid] = k
        category = obj.get("category", "object")
        if not isinstance(category, str) or not category.strip():
            raise CaseError(file, f"{where}.category", f"must be a non-empty noun phrase, got {category!r}")
        box = _box_xyxy(obj, where, file, W, H)
        m, mask_from = _object_mask(obj, where, base, file, W, H)
        if not m.any():
            raise CaseError(file, f"{where}.mask_path", f"the mask of {oid!r} is empty")
        n_box_masks += mask_from == "box"
        kin, track, _ = mobility_of(obj, where, file)
        tracks[track or "unlabeled"] += 1
        meta_o = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        source = {key: v for key, v in obj.items() if key not in READ_KEYS}
        source["mask_from"] = mask_from
        if box is not None:
            source["bbox_xyxy"] = box
        ambiguity = meta_o.get("ambiguity_group")
        instances.append({
            "id": oid, "category": category.strip(), "bbox": mask_bbox(m), "kinematics": kin, "track": track,
            "attributes": _attributes(obj, where, file),
            "ambiguity_group": None if ambiguity is None else str(ambiguity), "source": source,
        })  # fmt: skip
        masks[oid] = m

    return instances, masks, tracks, n_box_masks


def _summarise(conv: Conversion, n: int, sub: str, domain: str, n_box_masks: int, tracks: dict, duration: float) -> None:
    conv.kept += [f"{n} object ids", "categories", "attributes (free-form)",
                  "embedding, size_signature, center, metadata (under each instance's source)",
                  "ambiguity groups", f"subcategory {sub!r} -> domain {domain!r}"]
    conv.converted += ["bbox xyxy (max exclusive) -> xywh of the mask",
                       f"masks PNG > 0 -> COCO RLE ({n_box_masks} from boxes)" if n_box_masks else "masks PNG > 0 -> COCO RLE",
                       "mobility -> tracks " + ", ".join(f"{k} {v}" for k, v in tracks.items() if v),
                       f"duration {duration:g} s"]


def read_official_case(folder: str | Path, *, subcategory: str | None = None) -> OfficialCase:
    """Read one case folder of the authors' layout; raises CaseError naming file and field."""
    folder = Path(folder)
    file = scene_file(folder)
    if file is None:
        raise CaseError(folder / SCENE_FILE, SCENE_FILE, "file not found")
    if not (folder / RAW_IMAGE).is_file():
        raise CaseError(folder / RAW_IMAGE, RAW_IMAGE, "file not found")
    base = file.parent
    conv = Conversion()
    scene = _read_json_object(file, SCENE_FILE)
    meta = scene.get("metadata")
    if not isinstance(meta, dict):
        raise CaseError(file, "metadata", "must be an object holding image_size")
    conditions = _read_json_object(folder / CONDITIONS_FILE, CONDITIONS_FILE) if (folder / CONDITIONS_FILE).is_file() else {}
    image, image_path = _annotation_image(folder, base, meta, file, conv)
    H, W = image.shape[:2]
    instances, masks, tracks, n_box_masks = _read_objects(scene.get("objects"), base, file, W, H)
    sub = subcategory or subcategory_of(folder)
    domain = domain_of(sub)
    if domain == UNKNOWN_DOMAIN:
        conv.warnings.append(f"subcategory {sub!r} is none of the paper's ten: domain {UNKNOWN_DOMAIN!r}")
    instruction = _prompt(folder, conditions, conv)
    duration = DEFAULT_DURATION_S
    shared = conditions.get("shared_memory")
    if isinstance(shared, dict) and isinstance(shared.get("duration_seconds"), (int, float)) and shared["duration_seconds"] > 0:
        duration = float(shared["duration_seconds"])
    scene_id = conditions.get("scene_id") or scene.get("scene_id")
    spec_source = {
        "layout": LAYOUT, "folder": f"{folder.parent.name}/{folder.name}", "scene_id": scene_id,
        "schema_version": scene.get("schema_version"), "metadata": meta, "conditions": conditions,
        "duration_s": duration,
    }  # fmt: skip
    image_rel = image_path.relative_to(folder).as_posix()
    try:
        spec = CaseSpec.model_validate({
            "id": folder.name, "domain": domain, "subcategory": sub, "image": image_rel,
            "instruction": instruction, "camera_task": None, "instances": instances, "source": spec_source,
        })  # fmt: skip
    except Exception as exc:  # pydantic names the field; a case that cannot be represented is the file's fault
        raise CaseError(file, "objects", str(exc)) from exc

    _summarise(conv, len(instances), sub, domain, n_box_masks, tracks, duration)
    crops = sum(1 for o in scene["objects"] if isinstance(o, dict) and isinstance(o.get("metadata"), dict) and o["metadata"].get("crop_path"))
    if crops:
        conv.dropped.append(f"{crops} crop images (metadata.crop_path: cut again from I0 and the masks when needed; the path stays in source)")
    caches = [p.name for p in folder.glob("reference_*") if p.is_file() and p.name != SCENE_FILE]
    if caches:
        conv.dropped.append(f"their evaluator's caches {', '.join(sorted(caches))}")
    return OfficialCase(spec=spec, image=image, image_path=image_path, masks=masks, conversion=conv, folder=folder)


def find_official_cases(root: Path) -> list[Path]:
    """Case folders of the authors' layout under `root` (any depth), sorted by relative path."""
    root = Path(root)
    if is_official_case(root):
        return [root]
    return sorted({p.parent for p in root.rglob(RAW_IMAGE) if is_official_case(p.parent)},
                  key=lambda p: p.relative_to(root).as_posix())


def write_our_case(oc: OfficialCase, case_dir: Path) -> Path:
    """Write an imported case in our layout: I0 copied byte for byte (a re-encoded JPEG would change its
    pixels), masks as COCO RLE, everything else in case.json; raw.jpg kept beside a processed I0."""
    import shutil

    case_dir.mkdir(parents=True, exist_ok=True)
    image_name = "input" + oc.image_path.suffix.lower()
    shutil.copyfile(oc.image_path, case_dir / image_name)
    if oc.image_path != oc.folder / RAW_IMAGE:
        shutil.copyfile(oc.folder / RAW_IMAGE, case_dir / RAW_IMAGE)
    data = oc.spec.model_dump(mode="json", exclude_none=True)
    data["image"] = image_name
    data.pop("camera_task", None)
    for inst in data["instances"]:
        inst["mask"] = encode_rle(oc.masks[inst["id"]])
        inst.setdefault("track", None)  # null is meaningful: unlabeled
    CaseSpec.model_validate(data)
    return atomic_write_json(case_dir / "case.json", data)


def import_official(src: Path, out: Path) -> dict:
    """Every case of the authors' layout under `src` -> our layout under `out`; per case what was kept,
    converted and dropped; a case that cannot be read is recorded (file, field, message) and skipped."""
    folders = find_official_cases(Path(src))
    if not folders:
        raise CaseError(src, "dataset", "holds no case of the OPIS authors' layout (raw.jpg + reference_scene.json)")
    done, failed, ids = [], [], {}
    for folder in folders:
        if folder.name in ids:
            failed.append({"case": str(folder), "file": str(folder), "field": "case id",
                           "message": f"{folder.name!r} is also the id of {ids[folder.name]}"})
            continue
        ids[folder.name] = folder
        try:
            oc = read_official_case(folder)
            write_our_case(oc, Path(out) / oc.spec.id)
        except CaseError as exc:
            failed.append({"case": str(folder), "file": exc.file, "field": exc.field, "message": exc.reason})
            continue
        done.append({"case_id": oc.spec.id, "subcategory": oc.spec.subcategory, "domain": oc.spec.domain,
                     "instances": len(oc.spec.instances), "kept": oc.conversion.kept,
                     "converted": oc.conversion.converted, "dropped": oc.conversion.dropped,
                     "warnings": oc.conversion.warnings})
    atomic_write_json(Path(out) / "dataset.json", {"name": Path(src).name, "version": LAYOUT,
                                                  "cases": [d["case_id"] for d in done]})
    summary = {"source": str(src), "out": str(out), "imported": done, "failed": failed}
    atomic_write_json(Path(out) / "import.json", summary)
    return summary
