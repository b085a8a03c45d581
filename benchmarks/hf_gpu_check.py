"""Acceptance check of the `hf` backend for a GPU day: asserts, and exits non-zero naming the piece and the path.

    # real checkpoints (after `worldeval models fetch`), on the GPU:
    python benchmarks/hf_gpu_check.py --device cuda --dtype bfloat16 [--models-dir DIR] [--sam3 PATH ...]
    # tiny random models built on the spot, on CPU (shapes and plumbing only; CI runs this):
    python benchmarks/hf_gpu_check.py --tiny
    # full-size architectures with random weights (speed and memory only, no checkpoint needed):
    python benchmarks/hf_gpu_check.py --random-full --device cuda --dtype bfloat16 --frames 2000 --batch-size 8

Checks, in order (on ../shared/data/davis_bmx_trees):
1. every piece loads offline and runs once (load time, run time, peak memory);
2. shapes and ranges: frame-sized boolean masks, unit-norm embeddings, matches inside the
   images, positive finite depth, 17 joints inside the box;
3. quality, real checkpoints only: SAM 3 prompted "person" finds the rider in frame 0 with
   IoU >= 0.5 against the DAVIS mask; DINOv3 cosine of the rider's crops in frames 0 and 5
   beats rider vs background; LightGlue recovers a known 5% shift within 1 px (median);
4. end to end through the CLI: `opis annotate --backend hf --depth model` makes a case of
   frame 0, `opis eval --backend hf` measures a rollout of the clip; prints sampled frames/s,
   per-stage seconds and peak GPU memory.
`--sam3/--dinov3/--matcher/--depth/--vitpose PATH` override what --tiny or --random-full
builds (or the models folder): a path that does not exist fails at once, named.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "davis_bmx_trees"
PIECES = ("sam3", "dinov3", "matcher", "depth", "vitpose")
SHIFT = 0.05  # the known horizontal shift of the matcher check, share of the width


class CheckFailed(Exception):
    def __init__(self, piece: str, path: str, reason: str):
        self.piece, self.path, self.reason = piece, path, reason
        super().__init__(f"FAIL {piece}: {reason} ({path})")


def _check(cond: bool, piece: str, path: str, reason: str) -> None:
    if not cond:
        raise CheckFailed(piece, path, reason)


def _frame(k: int) -> np.ndarray:
    from worldeval.media import read_image

    return read_image(DATA / "frames" / f"{k:05d}.jpg")


def _mask(name: str) -> np.ndarray:
    from PIL import Image

    return np.array(Image.open(DATA / name))


def _box(mask: np.ndarray) -> tuple[float, float, float, float]:
    ys, xs = np.nonzero(mask)
    return float(xs.min()), float(ys.min()), float(xs.max() - xs.min() + 1), float(ys.max() - ys.min() + 1)


# ---------------------------------------------------------------- which models


def resolve_models(args, work: Path) -> dict[str, str]:
    """option -> checkpoint folder: built (--tiny / --random-full) or a models folder, then per-piece overrides."""
    from worldeval.opis.checkpoints.store import default_models_dir, models_in

    for piece in PIECES:  # a wrong path fails before anything is built
        given = getattr(args, piece)
        if given is not None:
            _check(Path(given).is_dir() and (Path(given) / "config.json").is_file(), piece, given,
                   "no checkpoint folder with a config.json at this path")  # fmt: skip
    if args.tiny:
        from worldeval.opis.checkpoints.tiny import build_tiny_models_dir

        models = build_tiny_models_dir(work / "tiny")
    elif args.random_full:
        from worldeval.opis.checkpoints.full import build_full_models

        todo = [p for p in PIECES if getattr(args, p) is None]
        models = build_full_models(work / "full", todo) if todo else {}
    else:
        models = models_in(args.models_dir or default_models_dir())
    for piece in PIECES:
        if getattr(args, piece) is not None:
            models[piece] = str(Path(getattr(args, piece)).resolve())
    for piece in PIECES:
        _check(piece in models, piece, str(Path(args.models_dir or default_models_dir()) / piece),
               "no checkpoint: give --" + piece + " PATH or run `worldeval models fetch`")  # fmt: skip
    # one models folder of links: the CLI runs below find every piece through it
    linked = work / "models"
    linked.mkdir(parents=True, exist_ok=True)
    for piece, path in models.items():
        link = linked / piece
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(Path(path).resolve(), target_is_directory=True)
    return {p: str(linked / p) for p in models}


# ---------------------------------------------------------------- pieces


def check_loading(models: dict[str, str], device: str, dtype) -> list[str]:
    from worldeval.opis.checkpoints.store import check_piece

    lines = []
    for piece, path in models.items():
        r = check_piece(piece, path, _frame(0), device, dtype)
        _check(r.ok, piece, path, r.detail)
        lines.append(r.line())
    return lines


def check_shapes(backend, models: dict[str, str]) -> dict:
    """What must hold for any weights."""
    f0 = _frame(0)
    H, W = f0.shape[:2]
    obs = backend.segmenter.observe(f0, ["person", "bicycle", "tree"])
    for o in obs:
        _check(o.mask.shape == (H, W) and o.mask.dtype == bool and 0 <= o.score <= 1, "sam3", models["sam3"],
               f"observation mask {o.mask.shape} {o.mask.dtype}, score {o.score}")  # fmt: skip
    rider = _mask("first_frame_instances_davis2017.png") == 1
    e = backend.embedder.embed(f0, [rider], [_box(rider)])
    _check(e.shape[0] == 1 and abs(float(np.linalg.norm(e[0])) - 1) < 1e-3, "dinov3", models["dinov3"],
           f"embedding shape {e.shape}, norm {np.linalg.norm(e[0]):.4f}")  # fmt: skip
    c = backend.matcher.match(f0, _frame(5))
    inside = np.all((c.pts0 >= 0) & (c.pts0 <= [W - 1, H - 1])) and np.all((c.pts1 >= 0) & (c.pts1 <= [W - 1, H - 1]))
    _check(bool(inside), "matcher", models["matcher"], "correspondences outside the images")
    depth, K = backend.depth.estimate(f0)
    _check(depth.shape == (H, W) and bool(np.all(np.isfinite(depth))) and float(depth.min()) > 0, "depth", models["depth"],
           f"depth {depth.shape}, min {np.nanmin(depth):.4g}, finite {np.isfinite(depth).all()}")  # fmt: skip
    kp = backend.pose.keypoints(f0, _box(rider), "person")
    x, y, w, h = _box(rider)
    ok = kp is not None and kp.xy.shape == (17, 2) and np.all((kp.xy >= [x, y]) & (kp.xy <= [x + w, y + h]))
    _check(bool(ok), "vitpose", models["vitpose"], "joints missing or outside the person's box")
    return {"observations": len(obs), "matches": len(c.pts0), "depth_range": [float(depth.min()), float(depth.max())],
            "intrinsics": K is not None}  # fmt: skip


def check_quality(backend, models: dict[str, str]) -> dict:
    """Real checkpoints only: the paper's models must see the rider, tell it from the background, follow a pan."""
    f0, f5 = _frame(0), _frame(5)
    H, W = f0.shape[:2]
    rider = _mask("first_frame_instances_davis2017.png") == 1
    people = [o for o in backend.segmenter.observe(f0, ["person"]) if o.category == "person"]
    best = max((float((o.mask & rider).sum() / max(1, (o.mask | rider).sum())) for o in people), default=0.0)
    _check(best >= 0.5, "sam3", models["sam3"], f"'person' in frame 0: best IoU with the rider {best:.3f} < 0.5")
    # identity: the rider (+bike, the DAVIS-2016 union mask) in frames 0 and 5 vs a background crop of frame 0
    u0, u5 = _mask("masks_union_davis2016/00000.png") > 0, _mask("masks_union_davis2016/00005.png") > 0
    bx, by, bw, bh = _box(u0)
    bg_x = 0.0 if bx > W / 2 else float(W - bw)  # the same-size window on the other side of the frame
    bg = np.zeros_like(u0)
    bg[int(by) : int(by + bh), int(bg_x) : int(bg_x + bw)] = True
    e = backend.embedder.embed(f0, [u0, bg], [_box(u0), _box(bg)])
    e5 = backend.embedder.embed(f5, [u5], [_box(u5)])
    same, other = float(e[0] @ e5[0]), float(e[0] @ e[1])
    _check(same > other, "dinov3", models["dinov3"], f"rider 0 vs 5 cosine {same:.3f} <= rider vs background {other:.3f}")
    # a crop pair with a known pan: x in the left crop is x - s in the right one
    s = int(round(SHIFT * W))
    c = backend.matcher.match(np.ascontiguousarray(f0[:, s:]), np.ascontiguousarray(f0[:, : W - s]))
    err = float(np.median(np.abs((c.pts0[:, 0] + s) - c.pts1[:, 0]))) if len(c.pts0) else float("inf")
    dy = float(np.median(np.abs(c.pts0[:, 1] - c.pts1[:, 1]))) if len(c.pts0) else float("inf")
    _check(len(c.pts0) >= 50 and err <= 1.0 and dy <= 1.0, "matcher", models["matcher"],
           f"{s} px shift: {len(c.pts0)} matches, median error x {err:.2f} px, y {dy:.2f} px")  # fmt: skip
    return {"sam3_rider_iou": round(best, 4), "dinov3_same_vs_background": [round(same, 4), round(other, 4)],
            "matcher_shift_error_px": round(err, 3), "matcher_matches": len(c.pts0)}  # fmt: skip


# ---------------------------------------------------------------- end to end through the CLI


def _cli(args: list[str]) -> int:
    from worldeval.cli import app
    import typer

    print("$ worldeval " + " ".join(args), flush=True)
    try:
        typer.main.get_command(app).main(args=args, standalone_mode=False)
    except SystemExit as exc:
        return int(exc.code or 0)
    except Exception as exc:  # noqa: BLE001 - click's Exit / errors: an exit status
        code = getattr(exc, "exit_code", None)
        if code is None:
            raise
        return int(code)
    return 0


def check_end_to_end(models: dict[str, str], work: Path, device: str, dtype: str | None, frames: int,
                     batch_size: int | None) -> dict:  # fmt: skip
    import torch

    from worldeval.media import write_video

    os.environ["WORLDEVAL_MODELS_DIR"] = str(Path(models["sam3"]).parent)  # annotate's hf models
    rider = _mask("first_frame_instances_davis2017.png")
    objs = []
    for label, phrase in ((1, "person"), (2, "bicycle")):
        x, y, w, h = _box(rider == label)
        objs += ["--object", f"{phrase}:{x:.0f},{y:.0f},{w:.0f},{h:.0f}"]
    dataset, case = work / "dataset", work / "dataset" / "bmx_0001"
    t_annotate = time.perf_counter()
    hf_opts = ["--backend-option", f"models_dir={Path(models['sam3']).parent}"]
    if dtype:
        hf_opts += ["--backend-option", f"dtype={dtype}"]
    code = _cli(["opis", "annotate", str(DATA / "frames" / "00000.jpg"), "--out", str(case), *objs, "--backend", "hf",
                 "--depth", "model", "--device", device, "--camera", "pan-left-return", "--quiet", *hf_opts])  # fmt: skip
    t_annotate = time.perf_counter() - t_annotate
    _check(code == 0 and (case / "case.json").exists(), "annotate", str(case), f"opis annotate --backend hf exit {code}")
    spec = json.loads((case / "case.json").read_text())
    _check(len(spec["instances"]) >= 1, "annotate", str(case / "case.json"), "no instance annotated")
    geo = spec["annotation"]["geometry"]
    _check(geo.startswith("model:"), "depth", models["depth"], f"opis annotate --depth model fell back to {geo!r}")
    n, clip = frames, len(list((DATA / "frames").glob("*.jpg")))
    # longer than the clip: it plays forwards and backwards (a long rollout for a throughput figure)
    bounce = [k % (2 * clip - 2) for k in range(n)]
    rollouts = work / "rollouts"
    write_video(rollouts / "bmx_0001.mp4", (_frame(k if k < clip else 2 * clip - 2 - k) for k in bounce), fps=24)
    run = work / "run"
    opts = list(hf_opts)
    if batch_size:
        opts += ["--batch-size", str(batch_size)]
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    code = _cli(["opis", "eval", "--dataset", str(dataset), "--rollouts", str(rollouts), "--model", "check", "--out", str(run),
                 "--backend", "hf", "--device", device, "--workers", "0", "--quiet", "--force", *opts])  # fmt: skip
    wall = time.perf_counter() - t0
    _check(code == 0, "eval", str(run), f"opis eval --backend hf exit {code}")
    manifest = json.loads((run / "manifest.json").read_text())
    _check(manifest["summary"]["done"] == 1 and manifest["summary"]["failed"] == 0, "eval", str(run / "manifest.json"),
           f"summary {manifest['summary']}")  # fmt: skip
    sampled = len(json.loads((run / "frames" / "check" / "bmx_0001.json").read_text())["frames"])
    stages = manifest["timings"]["stages_s"]
    measured = sum(v for k, v in stages.items() if k != "writing")
    out = {"annotate_s": round(t_annotate, 2), "frames_in_clip": n, "sampled_frames": sampled, "wall_s": round(wall, 2),
           "sampled_frames_per_s_wall": round(sampled / wall, 3),
           "sampled_frames_per_s_measuring": round(sampled / max(measured, 1e-9), 3), "stages_s": stages,
           "instances": len(spec["instances"]), "annotation_geometry": spec["annotation"]["geometry"],
           "annotation_masks": [p["mask_source"] for p in spec["annotation"]["prompts"]]}  # fmt: skip
    if device.startswith("cuda"):
        out["peak_gpu_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    return out


# ---------------------------------------------------------------- main


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--tiny", action="store_true", help="tiny random models built here, on CPU: shapes and plumbing")
    mode.add_argument("--random-full", action="store_true", help="full-size random-weight models: speed and memory")
    for p in PIECES:
        ap.add_argument(f"--{p}", default=None, metavar="PATH", help=f"checkpoint folder of the {p} piece")
    ap.add_argument("--models-dir", default=None, help="models folder (default: WORLDEVAL_MODELS_DIR or ~/.cache/worldeval/models)")
    ap.add_argument("--device", default=None, help="cuda (default) or cpu (default with --tiny)")
    ap.add_argument("--dtype", default=None, help="float32 (default), bfloat16 or float16")
    ap.add_argument("--frames", type=int, default=80, help="rollout length in frames (24 fps: sampled from frame 24, every 8th); "
                    "beyond the clip's 80 it plays back and forth")
    ap.add_argument("--batch-size", type=int, default=None, help="frames per segmenter/embedder batch in opis eval")
    ap.add_argument("--work", default=None, help="working folder (default: a temporary one)")
    ap.add_argument("--json", default=None, help="write the report here")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    device = args.device or ("cpu" if args.tiny else "cuda")
    os.environ["HF_HUB_OFFLINE"] = "1"
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    work = Path(args.work or tempfile.mkdtemp(prefix="hf_gpu_check_"))
    report: dict = {"mode": "tiny" if args.tiny else "random-full" if args.random_full else "checkpoints",
                    "device": device, "dtype": args.dtype or "float32", "work": str(work)}  # fmt: skip
    try:
        t0 = time.perf_counter()
        models = resolve_models(args, work)
        report["models"], report["models_ready_s"] = models, round(time.perf_counter() - t0, 1)
        if not args.random_full:  # random full-size weights: speed and memory only, measured end to end
            for line in check_loading(models, device, args.dtype):
                print(line, flush=True)
            from worldeval.opis.backends.hf import build_hf_backend

            backend = build_hf_backend(device, models_dir=str(Path(models["sam3"]).parent), dtype=args.dtype)
            report["shapes"] = check_shapes(backend, models)
            if not args.tiny:
                report["quality"] = check_quality(backend, models)
            del backend
            gc.collect()
        report["end_to_end"] = check_end_to_end(models, work, device, args.dtype, args.frames, args.batch_size)
    except CheckFailed as exc:
        report["failed"] = {"piece": exc.piece, "path": exc.path, "reason": exc.reason}
        print(str(exc), file=sys.stderr, flush=True)
    print(json.dumps(report, indent=1, default=str), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))
    if "failed" in report:
        return 1
    print(f"PASS ({report['mode']}, {device})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
