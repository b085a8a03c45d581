"""Propagation stride and feature scale against association agreement and speed (classical backend).

For each (stride, feature long side) the real clips are evaluated as faithful rollouts (the clip
itself, its frame 0 as I0 with its ground-truth mask) and every sampled frame's decision is compared
with the ground truth: where the object clearly shows it must be matched with box IoU >= 0.3 (the
figure of `benchmarks/faithful_report.py`) and, stricter, with mask IoU >= 0.5 (the figure of
`opis audit`); where it is gone, unmatched. Speed is sampled frames per second of the whole
evaluation, and the propagation stage's share of it.

    .venv/bin/python benchmarks/propagation_tradeoff.py [--part tuning|reporting] [--strides 2,4,8]
        [--sides 480,640,854] [--data ../shared/data]

The defaults (stride 4, side 640) were chosen on the tuning part; run `--part reporting` only to
report. Timings on a shared machine are inflated by whatever else runs there.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path



def clip_decisions(clip, res, th) -> tuple[int, int, int]:
    """(decisions, agreed by box IoU >= 0.3, agreed by mask IoU >= 0.5) of one evaluated clip."""
    from worldeval.opis.case import decode_rle
    from worldeval.opis.perception.association import box_iou
    from worldeval.opis.checks.synth import int_box
    from worldeval.opis.checks.validate_real import CLIP_TARGET

    total = float(clip.masks[0].size)
    first = max(float(clip.masks[0].sum()) / total, 1e-9)
    n = box_ok = mask_ok = 0
    for fr in res.frames["frames"]:
        t = int(fr["frame"])
        gt = clip.masks[t]
        area = float(gt.sum()) / total
        obj = next(o for o in fr["objects"] if o["instance_id"] == CLIP_TARGET)
        matched = obj["status"] == "matched"
        if area >= th.clear_area and area >= th.clear_of_first * first:
            n += 1
            if matched:
                box_ok += box_iou(obj["box"], int_box(gt)) >= th.association_iou
                m = decode_rle(obj["mask"]).astype(bool)
                mask_ok += (m & gt).sum() / max(1, (m | gt).sum()) >= 0.5
        elif area < th.gone_area:
            n += 1
            box_ok += not matched
            mask_ok += not matched
    return n, box_ok, mask_ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("tuning", "reporting"), default="tuning")
    ap.add_argument("--strides", default="2,4,8")
    ap.add_argument("--sides", default="480,640,854")
    ap.add_argument("--data", type=Path, default=None)
    args = ap.parse_args(argv)
    from worldeval.opis.checks import holdout
    from worldeval.opis.case import load_case
    from worldeval.opis.evaluate import EvalConfig, evaluate_rollout, load_backend
    from worldeval.opis.checks.gtclips import write_variant
    from worldeval.opis.checks.validate_real import ClipThresholds, load_gt_clip, write_clip_case

    data = args.data or holdout.SHARED_DATA
    folders = holdout.tuning_clips(data) if args.part == "tuning" else holdout.reporting_clips(data)
    th = ClipThresholds()
    with tempfile.TemporaryDirectory() as tmp:
        clips = []
        for f in folders:
            clip = load_gt_clip(f)
            write_clip_case(clip, Path(tmp) / "cases" / clip.name)
            case = load_case(Path(tmp) / "cases" / clip.name)
            clips.append((clip, case, write_variant(clip.gt, "real", Path(tmp) / f"{clip.name}.mp4", clip.fps)))
        print(f"{'stride':>6} {'side':>5} {'box IoU>=0.3':>13} {'mask IoU>=0.5':>14} {'frames/s':>9} {'propagation share':>18}")
        for side in (int(v) for v in args.sides.split(",")):
            backend = load_backend("classical", features_side=side)
            for stride in (int(v) for v in args.strides.split(",")):
                cfg = EvalConfig(propagation={"stride": stride})
                n = box_ok = mask_ok = frames = 0
                wall, prop = 0.0, 0.0
                for clip, case, video in clips:
                    t0 = time.perf_counter()
                    res = evaluate_rollout(case, video, "faithful", backend, cfg)
                    wall += time.perf_counter() - t0
                    prop += res.timings["propagation"]
                    frames += len(res.frames["frames"])
                    d = clip_decisions(clip, res, th)
                    n, box_ok, mask_ok = n + d[0], box_ok + d[1], mask_ok + d[2]
                print(f"{stride:>6} {side:>5} {f'{box_ok}/{n} {box_ok / n:.0%}':>13} {f'{mask_ok}/{n} {mask_ok / n:.0%}':>14} "
                      f"{frames / wall:>9.2f} {prop / wall:>18.0%}", flush=True)
    print(f"measured on the {args.part} part ({', '.join(Path(f).name for f in folders)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
