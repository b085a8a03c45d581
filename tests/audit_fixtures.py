"""Small ground-truth clips re-laid out from the real DAVIS frames in shared/data (never copied into the repo)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
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
