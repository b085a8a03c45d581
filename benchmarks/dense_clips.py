"""Dense cases on real clips: 25 or 50 object-like regions of a clip's first frame, evaluated on the clip itself.

A real video is a perfect world model, so every static region that is in view should stay matched and
no extra should appear; the figures count how far the evaluator falls short, and its speed. The
regions are the largest compact segments of a Felzenszwalb segmentation of the first frame (as the
bedroom's n25/n50 speed cases past their eight named objects, `opis_eval_speed.bedroom_masks`), all
declared static: a region on a moving animal or car then moves like a static object that a model
moved, which the evaluator must not take for the object staying put. Default clips: the four
davis2016_more clips (the reporting part), each at its whole length; `--part tuning`: the tuning
part's clips with frames (davis_bmx_trees, sam2_bedroom). `--speed k` plays each clip k times faster
at its own length (`validate_real.pingpong`: every k-th frame, forward and back), so the camera moves
k times as far between two grid frames.

Compare two evaluator settings on the same cases with `--set` (a run config entry, e.g.
`--set propagation.chain_zones=false`); each setting is a run folder of its own under `--work`.

    .venv/bin/python benchmarks/dense_clips.py [--n 25,50] [--work DIR] [--set GROUP.FIELD=VALUE] [--tag NAME]
        [--part reporting|tuning] [--speed K] [--option KEY=VALUE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from opis_eval_speed import _instance, _spec, compact_regions, config_setting  # noqa: E402  (the speed cases' helpers)


def clip_folders(data: Path, part: str) -> list[Path]:
    """The part's real clips that have a frames/ folder (the hold-out split's own lists)."""
    from worldeval.opis.checks import holdout

    if part == "reporting":
        return holdout.reporting_clips(data)
    return [data / name for name in ("davis_bmx_trees", "sam2_bedroom") if holdout.part_of(name) == "tuning"]


def build(work: Path, folder: Path, n: int, speed: int = 1) -> str | None:
    """The case `<clip>[-x<speed>]-n<n>` under work/ds and its video under work/ro; None when the frame
    has too few regions."""
    from worldeval.media import read_image, write_video
    from worldeval.opis.case import write_case
    from worldeval.opis.checks.validate_real import pingpong

    cid = f"{folder.name}{f'-x{speed}' if speed > 1 else ''}-n{n}"
    if (work / "ro" / f"{cid}.mp4").exists():
        return cid
    paths = sorted((folder / "frames").glob("*.jpg"))
    frames = [read_image(paths[i]) for i in (pingpong(len(paths), speed) if speed > 1 else range(len(paths)))]
    masks = [m for _, m in compact_regions(frames[0], n)]
    if len(masks) < n:
        print(f"{folder.name}: only {len(masks)} regions, {n} asked for; skipped")
        return None
    insts = [_instance(f"region{k}", "region") for k in range(n)]
    write_case(work / "ds" / cid, _spec(cid, insts), frames[0], {i["id"]: m for i, m in zip(insts, masks)})
    write_video(work / "ro" / f"{cid}.mp4", frames, 24)
    return cid


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[1].parent / "shared" / "data")
    ap.add_argument("--work", type=Path, default=Path("dense_clips_work"))
    ap.add_argument("--n", default="25,50")
    ap.add_argument("--set", action="append", default=[], metavar="GROUP.FIELD=VALUE")
    ap.add_argument("--tag", default="default")
    ap.add_argument("--part", choices=("reporting", "tuning"), default="reporting")
    ap.add_argument("--speed", type=int, default=1, help="play each clip this many times faster")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="a classical backend option, e.g. search=lost (the zone scan before search=placed)")
    args = ap.parse_args(argv)
    import pandas as pd

    from worldeval.opis.run import run_eval

    sizes = [int(v) for v in args.n.split(",")]
    cases = [c for f in clip_folders(args.data, args.part) for n in sizes if (c := build(args.work, f, n, args.speed))]
    out = args.work / "runs" / args.tag
    t0 = time.perf_counter()
    options = dict(o.split("=", 1) for o in args.option)
    summary = run_eval(args.work / "ds", args.work / "ro", args.tag, out, workers=0, config=config_setting(args.set, {"max_frames": None}),
                       backend_options=options)
    wall = time.perf_counter() - t0
    rows = pd.read_parquet(out / "measurements" / f"{args.tag}.parquet")
    frames = rows.groupby(["case_id", "frame"]).agg(extra=("extra", "any"))
    print(f"{args.tag}: {len(summary['done'])} cases, {len(frames)} sampled frames, {wall:.1f} s ({len(frames) / wall:.2f} sampled frames/s)")
    print("case                  rows  in view  matched  unknown  frames with an extra")
    for cid in cases:
        r = rows[rows.case_id == cid]
        seen = r.visibility == "expected_visible"
        f = frames.loc[cid]
        print(f"{cid:20s} {len(r):5d} {int(seen.sum()):8d} {int((seen & r.matched).sum()):8d} "
              f"{int((r.visibility == 'unknown').sum()):8d}  {int(f.extra.sum())}/{len(f)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
