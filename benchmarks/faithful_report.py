"""The evaluator's acceptance figures (`worldeval.opis.checks.figures`), measured on the REPORTING part of ../shared/data only.

The hold-out split is `worldeval.opis.checks.holdout` (docs/validation.md): three COCO
photos and the four davis2016_more clips are reported on; nothing tuned on them.
It runs `opis validate` on the reporting photos and the real-clip checks on the
reporting clips, then prints one line per figure with pass / FAIL / not measured.
A figure whose check is not built yet is printed "not measured", never passed.

    .venv/bin/python benchmarks/faithful_report.py [--out faithful_report_out] [--workers 2]
        [--seconds 5] [--max-frames N] [--skip-photos] [--skip-clips] [--backend classical] [--data ../shared/data]
        [--part reporting|tuning]   (tuning: the tuning photos and davis_bmx_trees, for whoever tunes)

Reruns resume the synthesis; the evaluation is always redone (it is what is measured).
Timings on the shared 2-core machine are inflated by other work.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def photo_part(args, out: Path, log) -> tuple[list, dict]:
    from worldeval.opis.checks import holdout
    from worldeval.opis.checks import figures as vf
    from worldeval.opis.archive import read_archive
    from worldeval.opis.cases.coco import build_coco_dataset
    from worldeval.opis.checks.synth import CAMERA_PATHS, PanTrajectory, SynthConfig
    from worldeval.opis.checks.validate import ValidateConfig, run_validate

    ds = out / "photos_dataset"
    part = holdout.REPORTING if args.part == "reporting" else holdout.TUNING
    build_coco_dataset(args.data / "coco_multiobj", ds, list(part["coco_multiobj"]))
    # the three photos take the pan, tilt and zoom camera paths in turn
    synth = SynthConfig(trajectory=PanTrajectory(duration_s=args.seconds), camera_cycle=tuple(CAMERA_PATHS))
    cfg = ValidateConfig(synth=synth, backend=args.backend, workers=args.workers)
    result = run_validate(ds, out / "photos", cfg, log=log)
    records = {cid: json.loads((out / "photos" / "synth" / f"{cid}.json").read_text()) for cid in result["cases"]}
    df = read_archive(sorted(result["run_dirs"].values()))
    figs = vf.photo_recoloured(df, records)
    figs.append(vf.photo_removed(df, records))
    figs.append(vf.photo_pasted(result))
    figs.append(vf.extras_per_frame(df, "faithful", "photos: extras per frame on faithful rollouts"))
    figs += vf.pass_rate_figures("photos:", result["pass_rates"])
    return figs, result


def clip_part(args, out: Path, log) -> tuple[list, dict]:
    from worldeval.opis.checks import holdout
    from worldeval.opis.checks import figures as vf
    from worldeval.opis.checks.validate_real import run_validate_clips

    clips = holdout.reporting_clips(args.data) if args.part == "reporting" else holdout.tuning_clips(args.data)
    result = run_validate_clips(clips, out / "clips", backend=args.backend, workers=args.workers,
                                log=log, max_frames=args.max_frames)
    figs = vf.clip_figures(result)
    figs.append(vf.clip_identity_failures(result))
    figs += vf.pass_rate_figures("real:", result["pass_rates"])
    return figs, result


def demo_part(out: Path, log) -> list:
    """The demo (skimage photos, not part of the shared data split: it was looked at while tuning)."""
    from worldeval.cli.demo import run_demo
    from worldeval.opis.checks import figures as vf
    from worldeval.opis.archive import read_archive

    summary = run_demo(out, bootstrap=0, quiet=True)
    scores = json.loads((out / "scores.json").read_text())
    log(f"demo: {summary['seconds']}")
    return vf.demo_figures(scores, read_archive(summary["runs"]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("faithful_report_out"))
    ap.add_argument("--data", type=Path, default=None, help="the shared data folder (default ../shared/data)")
    ap.add_argument("--part", choices=("reporting", "tuning"), default="reporting",
                    help="which part of the hold-out split to measure on (the acceptance figures come from reporting)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--backend", default="classical")
    ap.add_argument("--seconds", type=float, default=5.0, help="length of the synthetic photo rollouts")
    ap.add_argument("--max-frames", type=int, default=None, help="use only the first N frames of each real clip")
    ap.add_argument("--skip-photos", action="store_true")
    ap.add_argument("--skip-clips", action="store_true")
    ap.add_argument("--demo", action="store_true", help="also run `worldeval demo` (a few minutes) and report its figures")
    args = ap.parse_args(argv)
    from worldeval.opis.checks import holdout
    from worldeval.opis.checks import figures as vf

    args.data = args.data or holdout.SHARED_DATA
    args.out.mkdir(parents=True, exist_ok=True)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    figs, t0 = [], time.perf_counter()
    if args.skip_photos:
        figs.append(vf.not_measured("photos", "", "skipped (--skip-photos)"))
    else:
        figs += photo_part(args, args.out, log)[0]
    if args.skip_clips:
        figs.append(vf.not_measured("real clips", "", "skipped (--skip-clips)"))
    else:
        figs += clip_part(args, args.out, log)[0]
    if args.demo:
        figs += demo_part(args.out / "demo", log)
    else:
        figs.append(vf.not_measured("demo figures", "see check_figures.demo_figures", "run with --demo"))
    figs += [
        vf.not_measured("real: Presence on a crowded real scene", ">= 80", "no crowded clip with per-frame ground truth in ../shared/data"),
        vf.not_measured("classical speed", ">= 4 sampled frames/s", "benchmarks/opis_eval_speed.py"),
    ]
    width = max(len(f.name) for f in figs)
    print(f"{'figure'.ljust(width)}  {'status':12}  value  [required]")
    for f in figs:
        print(f"{f.name.ljust(width)}  {f.status:12}  {f.value}  [{f.required}]")
    print(f"measured on the {args.part} part of the hold-out split (worldeval.opis.checks.holdout)")
    summary = {"part": args.part, "figures": [f.as_dict() for f in figs], "seconds": round(time.perf_counter() - t0, 1)}
    (args.out / "faithful_report.json").write_text(json.dumps(summary, indent=2, default=str))
    print(f"details: {args.out / 'faithful_report.json'} ({summary['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
