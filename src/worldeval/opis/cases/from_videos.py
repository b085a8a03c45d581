"""`opis cases-from-videos`: cases for videos a user already has (image-to-video outputs).

An image-to-video model was given an image; its video's first frame is the
closest record of that image, so frame 0 becomes I0 and the case is built
from it with `opis build`'s pipeline (same screening, cleaning, segmentation,
labels, task and geometry). The videos themselves become the rollouts folder
(`<case id>.<suffix>`, copied unchanged), so `opis eval --dataset DATASET
--rollouts ROLLOUTS` and `opis score` run on them directly.

Caveat, recorded in docs/building-cases.md: a decoded first frame carries the
video codec's compression, so I0 is slightly softer than the image the model
was actually given; when the original input images exist, build from those.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from worldeval.media import MediaError, decode_frames
from worldeval.opis.cases.build import LOG_NAME, BuildConfig, BuildError, build_dataset, case_id_for
from worldeval.opis.run import VIDEO_SUFFIXES
from worldeval.runs import append_jsonl, atomic_write_text


def collect_videos(videos: str | Path) -> list[Path]:
    """A video file, a folder of videos, or a list file (one path per line, relative to it)."""
    root = Path(videos)
    if root.is_dir():
        found = sorted(p for p in root.iterdir() if p.is_file() and p.suffix.lower() in VIDEO_SUFFIXES)
    elif root.is_file() and root.suffix.lower() in VIDEO_SUFFIXES:
        found = [root]
    elif root.is_file():
        found = [root.parent / line.strip() for line in root.read_text(encoding="utf-8").splitlines()
                 if line.strip() and not line.lstrip().startswith("#")]
    else:
        raise BuildError(root, "VIDEOS", "not found: give a video, a folder of videos or a list file")
    if not found:
        raise BuildError(root, "VIDEOS", "no videos found")
    return found


def first_frames(videos: list[Path], out: Path) -> tuple[dict[str, Path], list[dict]]:
    """Write each video's frame 0 to `out/.build/first_frames/<id>.png`: {case id: video}, failures."""
    from PIL import Image

    frames_dir = out / ".build" / "first_frames"
    frames_dir.mkdir(parents=True, exist_ok=True)
    by_id: dict[str, Path] = {}
    failed = []
    for v in videos:
        cid = case_id_for(v.stem)
        if cid in by_id:
            raise BuildError(v, "VIDEOS", f"two videos map to the case id {cid!r} ({by_id[cid].name}, {v.name})")
        png = frames_dir / f"{cid}.png"
        if not png.exists():
            try:
                frame = decode_frames(v, [0]).frames[0]
            except (MediaError, OSError, ValueError) as exc:
                failed.append({"image": cid, "file": str(v), "field": "video", "reason": f"cannot decode frame 0: {exc}"})
                append_jsonl(out / LOG_NAME, {"image": cid, "step": "done", "status": "failed", "file": str(v),
                                              "field": "video", "reason": f"cannot decode frame 0: {exc}"})
                continue
            tmp = png.with_name(png.stem + ".part.png")
            Image.fromarray(frame).save(tmp)
            tmp.replace(png)
        by_id[cid] = v
    return by_id, failed


def cases_from_videos(videos: str | Path, out: str | Path, cfg: BuildConfig, client: Any,
                      rollouts: str | Path | None = None, progress=None) -> dict:
    """Build the dataset `out` from the videos' first frames and the rollouts folder beside it."""
    out = Path(out)
    rollouts = Path(rollouts) if rollouts else out.parent / f"{out.name}_rollouts"
    out.mkdir(parents=True, exist_ok=True)
    by_id, failed = first_frames(collect_videos(videos), out)
    listing = out / ".build" / "first_frames.txt"
    atomic_write_text(listing, "".join(f"first_frames/{cid}.png\n" for cid in by_id))
    summary = build_dataset(listing, out, cfg, client, progress=progress)
    summary["failed"] = failed + summary["failed"]
    rollouts.mkdir(parents=True, exist_ok=True)
    for cid in summary["accepted"] + summary["skipped"]:
        if (out / cid / "case.json").exists() and cid in by_id:
            target = rollouts / f"{cid}{by_id[cid].suffix.lower()}"
            if not target.exists():
                shutil.copy2(by_id[cid], target)
    summary["rollouts"] = str(rollouts)
    return summary
