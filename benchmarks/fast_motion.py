"""Fast motion on real clips: the real-clip checks of `opis validate --clip` on clips played k times faster.

Issue 30 asks that a large, fast object be found (the DAVIS protocol's motocross-jump, bmx, dance);
the shared data has no such clip, so each clip of a part of the hold-out split is played k times
faster at its own length (`validate_real.speed_up_clip`: every k-th frame, forward and back): the
object and the camera move k times as far between two frames, and the clip keeps its number of
sampled frames. Per clip and speed it prints the faithful clip's matches on the object (box IoU
>= 0.3 with the ground truth) where it shows, and the removed clip's matches (it should have none).

    .venv/bin/python benchmarks/fast_motion.py [--part tuning|reporting] [--speeds 1,2,3] [--out DIR]
        [--workers 2] [--compare] [--data ../shared/data]

`--compare` also runs every speed with the propagation's moved memory windows on
(`propagation.compensate`, off by default; docs/validation.md, "Fast motion").
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run(args, speed: int, settings: dict, tag: str) -> dict:
    from worldeval.opis.checks import holdout
    from worldeval.opis.checks.validate_real import run_validate_clips, speed_up_clip

    clips = holdout.reporting_clips(args.data) if args.part == "reporting" else holdout.tuning_clips(args.data)
    if speed > 1:
        clips = [speed_up_clip(c, speed, args.out / f"clips_x{speed}") for c in clips]
    res = run_validate_clips(clips, args.out / f"x{speed}_{tag}", workers=args.workers, log=lambda *a: None, config=settings)
    out = {}
    for name, v in res["clips"].items():
        m = {k: v["checks"][k].get("measurements", {}) for k in ("faithful", "removed")}
        f, r = m["faithful"], m["removed"]
        out[name] = {"faithful_on_target": len(f.get("on_target_frames", [])), "faithful_shows": f.get("shows_frames"),
                     "removed_matched": len(r.get("matched_frames", [])), "removed_shows": r.get("shows_frames")}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("tuning", "reporting"), default="tuning")
    ap.add_argument("--speeds", default="1,2,3")
    ap.add_argument("--out", type=Path, default=Path("fast_motion_out"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--data", type=Path, default=HERE.parent.parent / "shared" / "data")
    ap.add_argument("--compare", action="store_true", help="also with propagation.compensate on")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    variants = {"default": {}}
    if args.compare:
        variants["compensate"] = {"propagation": {"compensate": True}}
    table: dict = {}
    for speed in (int(s) for s in args.speeds.split(",")):
        for tag, settings in variants.items():
            table[f"x{speed} {tag}"] = run(args, speed, settings, tag)
            print(f"x{speed} {tag}: done", file=sys.stderr, flush=True)
    (args.out / "fast_motion.json").write_text(json.dumps(table, indent=1))
    print(f"part {args.part}: faithful clip matched on the object / frames it shows; removed clip matched / frames it showed")
    for row, clips in table.items():
        cells = "  ".join(f"{c}: {v['faithful_on_target']}/{v['faithful_shows']} rm {v['removed_matched']}/{v['removed_shows']}"
                          for c, v in clips.items())
        total_on = sum(v["faithful_on_target"] for v in clips.values())
        total = sum(v["faithful_shows"] or 0 for v in clips.values())
        print(f"{row:24s} all {total_on}/{total}  {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
