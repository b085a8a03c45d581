"""Speed of the classical OPIS evaluator on the DAVIS bmx-trees clip (854x480, 80 frames at 24 fps).

Prints sampled frames per second and the share of time per stage (decode,
observation, camera, association, embedding, structure, writing). The first
rollout is a warm-up (model load, reference features); the measured runs
evaluate the same rollout again as new items of a run folder, so writing the
archive part, the per-frame record and the status record is included.

    .venv/bin/python benchmarks/opis_eval_speed.py [--repeats 3] [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def build(data: Path, tmp: Path) -> tuple[Path, Path]:
    from PIL import Image

    from worldeval.media import read_image, write_video
    from worldeval.opis.case import write_case

    davis = data / "davis_bmx_trees"
    frames = [read_image(p) for p in sorted((davis / "frames").glob("*.jpg"))]
    labels = np.asarray(Image.open(davis / "first_frame_instances_davis2017.png"))
    spec = {"id": "davis_bmx_trees", "domain": "real_world", "subcategory": "outdoor", "image": "input.png",
            "instances": [{"id": "rider", "category": "person", "kinematics": "articulated", "track": "dynamic"},
                          {"id": "bike", "category": "bicycle", "kinematics": "articulated", "track": "dynamic"}]}
    # label 2 is the person, label 1 the bicycle (checked visually; SOURCE.md has them swapped)
    write_case(tmp / "ds" / "davis_bmx_trees", spec, frames[0], {"rider": labels == 2, "bike": labels == 1})
    write_video(tmp / "ro" / "davis_bmx_trees.mp4", frames, 24)
    return tmp / "ds", tmp / "ro"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[1].parent / "shared" / "data")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--propagation-stride", type=int, default=None, help="EvalConfig.propagation_stride (default: the config's)")
    ap.add_argument("--no-propagation", action="store_true", help="the evaluator without the propagation stage")
    args = ap.parse_args(argv)
    if not (args.data / "davis_bmx_trees").exists():
        print(f"data not found: {args.data / 'davis_bmx_trees'}", file=sys.stderr)
        return 2
    from worldeval.opis.evaluate import STAGES
    from worldeval.opis.run import run_eval

    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        ds, ro = build(args.data, tmp)
        cfg = {"propagation": not args.no_propagation}
        if args.propagation_stride:
            cfg["propagation_stride"] = args.propagation_stride
        run_eval(ds, ro, "warmup", tmp / "run", workers=0, config=cfg)  # model load, first-touch costs
        totals = {k: 0.0 for k in STAGES}
        n_frames, wall = 0, 0.0
        for r in range(args.repeats):
            t0 = time.perf_counter()
            summary = run_eval(ds, ro, f"rep{r}", tmp / "run", workers=0, config=cfg)
            wall += time.perf_counter() - t0
            assert summary["done"], summary
            st = json.loads((tmp / "run" / "status" / f"rep{r}" / "davis_bmx_trees.json").read_text())
            n_frames += st["frames"]
            for k, v in st["timings"].items():
                totals[k] = totals.get(k, 0.0) + v
    staged = sum(totals.values())
    out = {
        "sampled_frames": n_frames,
        # Wall clock: frames of one rollout are measured two at a time, so summed
        # stage seconds exceed the elapsed time; they only give the shares.
        "frames_per_s": n_frames / wall,
        "stage_seconds_per_frame": staged / n_frames,
        "share": {k: totals[k] / staged for k in STAGES},
        "seconds": {k: round(totals[k], 3) for k in STAGES},
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"classical backend, DAVIS bmx-trees 854x480: {n_frames} sampled frames in {wall:.2f} s wall "
              f"-> {out['frames_per_s']:.2f} frames/s (run-folder writes included; "
              f"{out['stage_seconds_per_frame']:.3f} stage-seconds per frame)")
        for k in STAGES:
            print(f"  {k:12s} {100 * out['share'][k]:5.1f} %  ({totals[k]:.2f} s)")
        light = out["share"]["decode"] + out["share"]["association"]
        print(f"  decode + association: {100 * light:.1f} % (goal < 15 %)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
