"""`opis audit --gt` on the shared real clips: DAVIS bmx-trees, the four DAVIS-2016 clips, CoTracker apple.

The clips are laid out for the audit in a scratch folder (symlinks to shared/data, plus an
`instances.json` per clip naming the object and its routing; the apple video is decoded to frames
and its soft first-frame mask thresholded at 127 as its SOURCE.md says). bmx-trees has per-frame
masks only for the rider and bike together (DAVIS-2016 union), so it is audited as one instance.
The apple has a mask for frame 0 only: it contributes identity and structure decisions, no
association or visibility ones, and no interventions.

    PYTHONPATH=src python benchmarks/audit_shared.py [--out DIR] [--backend classical] [--workers 1] [--json] [--force]

Rerunning on the same DIR resumes (15 s); after the evaluator changed, pass --force (or a new DIR).

Prints Table 13 (pooled) and the per-clip table, and writes DIR/audit.json and DIR/decisions.csv.
Timings on a shared machine are inflated by whatever else runs there.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

# clip -> (source folder, masks folder name, instances.json)
DAVIS_CLIPS = {
    "blackswan": ("davis2016_more/blackswan", "masks", {"255": {"category": "black swan", "kinematics": "articulated", "track": "dynamic"}}),
    "car-roundabout": ("davis2016_more/car-roundabout", "masks", {"255": {"category": "car", "kinematics": "rigid", "track": "dynamic"}}),
    "dog": ("davis2016_more/dog", "masks", {"255": {"category": "dog", "kinematics": "articulated", "track": "dynamic"}}),
    "libby": ("davis2016_more/libby", "masks", {"255": {"category": "dog", "kinematics": "articulated", "track": "dynamic"}}),
    "bmx-trees": ("davis_bmx_trees", "masks_union_davis2016",
                  {"255": {"category": "person riding a bicycle", "kinematics": "articulated", "track": "dynamic"}}),
}


def _link(dst: Path, src: Path) -> None:
    if dst.is_symlink() or dst.exists():
        dst.unlink()
    dst.symlink_to(src.resolve())


def lay_out(gt: Path) -> Path:
    """The shared clips in the audit's `<clip>/frames + <clip>/masks` layout under `gt`."""
    for name, (src, masks, instances) in DAVIS_CLIPS.items():
        clip = gt / name
        clip.mkdir(parents=True, exist_ok=True)
        _link(clip / "frames", DATA / src / "frames")
        _link(clip / "masks", DATA / src / masks)
        (clip / "instances.json").write_text(json.dumps({"fps": 24, "instances": instances}, indent=1))
    _apple(gt / "cotracker_apple")
    return gt


def _apple(clip: Path) -> None:
    import numpy as np
    from PIL import Image

    from worldeval.media import decode_frames, probe_video

    video = DATA / "cotracker_apple" / "apple.mp4"
    info = probe_video(video)
    (clip / "frames").mkdir(parents=True, exist_ok=True)
    (clip / "masks").mkdir(parents=True, exist_ok=True)
    if len(list((clip / "frames").glob("*.png"))) != info.num_frames:
        frames = decode_frames(video, indices=list(range(info.num_frames))).frames
        for t, f in enumerate(frames):
            Image.fromarray(f).save(clip / "frames" / f"{t:05d}.png")
    soft = np.asarray(Image.open(DATA / "cotracker_apple" / "apple_mask.png").convert("L"))
    Image.fromarray(((soft > 127) * 255).astype(np.uint8)).save(clip / "masks" / "00000.png")
    meta = {"fps": float(info.fps), "instances": {"255": {"category": "apple", "kinematics": "rigid", "track": "static"}}}
    (clip / "instances.json").write_text(json.dumps(meta, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/worldeval-audit-shared"))
    ap.add_argument("--backend", default="classical")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print the --json object of opis audit")
    ap.add_argument("--force", action="store_true", help="redo rollouts and evaluation (needed after evaluator changes)")
    args = ap.parse_args()

    from rich.console import Console

    from worldeval.opis.checks.audit import AuditConfig, render, run_audit

    gt = lay_out(args.out / "gt")
    t0 = time.perf_counter()
    res = run_audit(gt, args.out / "audit", AuditConfig(backend=args.backend, device=args.device, workers=args.workers, force=args.force),
                    log=lambda m: print(m, flush=True))
    if args.json:
        print(json.dumps({k: res[k] for k in ("checks", "clips", "confusions")}, indent=2))
    else:
        for t in render(res):
            Console(width=200).print(t)
        print(json.dumps(res["confusions"], indent=1))
    print(f"errors: {res['errors'] or 'none'}; wall {time.perf_counter() - t0:.0f} s; details {args.out / 'audit'}")


if __name__ == "__main__":
    main()
