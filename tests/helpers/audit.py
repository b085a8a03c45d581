"""Small ground-truth clips re-laid out from the real DAVIS frames in shared/data (never copied into the repo)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from tests.helpers.paths import SHARED_DATA

DATA = SHARED_DATA
DAVIS = DATA / "davis2016_more"


def _palette_png(path: Path, labels: np.ndarray) -> None:
    from PIL import Image

    im = Image.fromarray(labels.astype(np.uint8), mode="P")
    pal = [0, 0, 0, 200, 0, 0, 0, 200, 0, 0, 0, 200] + [128] * (256 * 3 - 12)
    im.putpalette(pal)
    im.save(path)


def relayout(dst: Path, seq: str, layout: str = "A", frames: range = range(0, 40, 2), scale: float = 0.25,
             shift_later: int = 0, meta: dict | None = None) -> Path:
    """Write DAVIS sequence `seq` (every listed frame, shrunk by `scale`) as a clip under `dst`.

    layout "A": dst/<seq>/frames/*.jpg + masks/*.png (grey, 255 = the object, as DAVIS-2016);
    layout "B": dst/JPEGImages/480p/<seq>/ + dst/Annotations/480p/<seq>/ (palette, 1 = the object).
    `shift_later` moves every mask after the first this many pixels to the right (wrong ground truth).
    """
    import cv2

    src = DAVIS / seq
    names = sorted(p.stem for p in (src / "frames").glob("*.jpg"))
    if layout == "A":
        fdir, mdir = dst / seq / "frames", dst / seq / "masks"
    else:
        fdir, mdir = dst / "JPEGImages" / "480p" / seq, dst / "Annotations" / "480p" / seq
    fdir.mkdir(parents=True, exist_ok=True)
    mdir.mkdir(parents=True, exist_ok=True)
    for k, t in enumerate(frames):
        img = cv2.imread(str(src / "frames" / f"{names[t]}.jpg"))
        m = cv2.imread(str(src / "masks" / f"{names[t]}.png"), cv2.IMREAD_GRAYSCALE) > 127
        size = (round(img.shape[1] * scale), round(img.shape[0] * scale))
        img = cv2.resize(img, size, interpolation=cv2.INTER_AREA)
        m = cv2.resize(m.astype(np.uint8), size, interpolation=cv2.INTER_NEAREST) > 0
        if k > 0 and shift_later:
            m = np.roll(m, shift_later, axis=1)
        name = f"{k:05d}"
        cv2.imwrite(str(fdir / f"{name}.jpg"), img, [cv2.IMWRITE_JPEG_QUALITY, 95])
        if layout == "A":
            cv2.imwrite(str(mdir / f"{name}.png"), m.astype(np.uint8) * 255)
        else:
            _palette_png(mdir / f"{name}.png", m.astype(np.uint8))
    if meta is not None:
        (fdir.parent / "instances.json" if layout == "A" else mdir / "instances.json").write_text(json.dumps(meta))
    return dst


# ----------------------------------------------------------------------------- a hand-made OPIS run

BOX_A, BOX_B, BOX_X = [10.0, 20.0, 40.0, 30.0], [120.0, 40.0, 50.0, 50.0], [60.0, 70.0, 30.0, 30.0]

# (model, frame, instance) -> (visibility, matched, ambiguous, appearance, structure, structure_source)
HAND_ROWS = {
    ("m1", 8, "obj_001"): ("expected_visible", True, False, 0.9, 0.8, "static"),
    ("m1", 8, "obj_002"): ("expected_visible", True, False, 0.2, None, None),
    ("m1", 16, "obj_001"): ("expected_visible", True, False, 0.5, 0.1, "static"),
    ("m1", 16, "obj_002"): ("occluded", False, False, None, None, None),
    ("m2", 8, "obj_001"): ("unknown", False, True, None, None, None),
    ("m2", 8, "obj_002"): ("expected_visible", True, False, 0.6, None, None),
    ("m2", 16, "obj_001"): ("out_of_view", False, False, None, None, None),
    ("m2", 16, "obj_002"): ("expected_visible", True, False, 0.4, 0.9, "static"),
}
EXTRA_AT = {("m1", 8)}  # one confirmed extra observation (box BOX_X)


def make_case(root: Path) -> Path:
    """Case c1 on a real DAVIS frame (shrunk to 240x135) with two box-shaped instances."""
    import cv2

    from worldeval.opis.case import write_case

    img = cv2.imread(str(DAVIS / "blackswan" / "frames" / "00000.jpg"))[..., ::-1]
    img = cv2.resize(img, (240, 135), interpolation=cv2.INTER_AREA)
    masks = {}
    for iid, (x, y, w, h) in (("obj_001", BOX_A), ("obj_002", BOX_B)):
        m = np.zeros(img.shape[:2], bool)
        m[int(y):int(y + h), int(x):int(x + w)] = True
        masks[iid] = m
    spec = {"id": "c1", "domain": "real_world", "subcategory": "hand", "image": "input.png",
            "instances": [{"id": "obj_001", "category": "swan", "kinematics": "rigid", "track": "static"},
                          {"id": "obj_002", "category": "wall", "kinematics": "rigid", "track": "static"}]}
    write_case(root / "dataset" / "c1", spec, img, masks)
    return root / "dataset" / "c1"


def make_run(root: Path, run: str = "run", rows: dict | None = None, claims: dict | None = None) -> Path:
    """An OPIS run folder written by hand: parts, per-frame records and a 20-frame, 8 fps rollout.

    `claims` maps (model, frame, instance) to a list of {"text", "verdict"} put on the frame record's object.
    """
    import cv2

    from worldeval.media import write_video
    from worldeval.opis.archive import frame_from_records, write_case_part
    from worldeval.runs import atomic_write_json

    rows = HAND_ROWS if rows is None else rows
    case_dir = root / "dataset" / "c1"
    if not case_dir.exists():
        make_case(root)
    img = cv2.imread(str(case_dir / "input.png"))[..., ::-1]
    video = root / "rollouts" / "c1.mp4"
    if not video.exists():
        write_video(video, [img] * 20, 8)
    run_dir = root / run
    boxes = {"obj_001": BOX_A, "obj_002": BOX_B}
    for model in sorted({k[0] for k in rows}):
        recs, frames = [], []
        for fidx in (8, 16):
            objs = []
            for iid in ("obj_001", "obj_002"):
                key = (model, fidx, iid)
                if key not in rows:
                    continue
                vis, matched, amb, a, s, src = rows[key]
                recs.append({"frame": fidx, "instance_id": iid, "track": "static", "visibility": vis, "matched": matched,
                             "ambiguous": amb, "appearance": a, "structure": s, "structure_source": src})
                status = "matched" if matched else ("ambiguous" if amb else vis)
                obj = {"instance_id": iid, "category": "x", "status": status, "box": boxes[iid] if matched else None,
                       "appearance": a, "structure": s}
                if claims and key in claims:
                    obj["claims"] = claims[key]
                objs.append(obj)
            if (model, fidx) in EXTRA_AT:
                recs.append({"frame": fidx, "extra": True})
                objs.append({"instance_id": None, "category": None, "status": "extra", "box": BOX_X})
            frames.append({"frame": fidx, "time_s": fidx / 8, "objects": objs})
        df = frame_from_records(recs, model=model, case_id="c1", domain="real_world", subcategory="hand", n_reference=2, fps=8)
        write_case_part(run_dir, model, "c1", df)
        atomic_write_json(run_dir / "frames" / model / "c1.json",
                          {"model": model, "case_id": "c1", "video": str(video), "case_dir": str(case_dir), "fps": 8.0,
                           "num_frames": 20, "width": 240, "height": 135, "frames": frames})
    return run_dir
