"""Smoke-run the `hf` backend on real checkpoints (local folders) and time one frame per piece.

    python benchmarks/hf_gpu_smoke.py --device cuda --dtype bfloat16 \
        --sam3 /models/sam3 --dinov3 /models/dinov3-vitl16 --matcher /models/lightglue_superpoint \
        --depth /models/DepthPro-hf --vitpose /models/vitpose-plus-base \
        --image ../shared/data/davis_bmx_trees/<first frame>.jpg --phrases "person,bicycle,tree"

Without --image a synthetic 1280x720 frame is used. `--tiny DIR` builds tiny random-weight
models into DIR instead of reading checkpoints (checks the script itself, e.g. on CPU).
Prints one JSON object: per piece, load seconds and the median of --repeats timed calls
(after one warm-up call), plus what each call returned (counts and shapes).
Nothing is downloaded: models load with local_files_only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _timed(fn, device: str, repeats: int):
    out = fn()  # warm-up: kernels, caches (SAM 3 text features)
    times = []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        out = fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return out, statistics.median(times)


def _frame(path: str | None) -> np.ndarray:
    if path:
        from worldeval.media import read_image

        return read_image(path)
    rng = np.random.default_rng(0)
    img = (rng.random((720, 1280, 3)) * 40 + 90).astype(np.uint8)
    img[200:500, 300:600] = (200, 40, 40)
    yy, xx = np.mgrid[:720, :1280]
    img[(yy - 400) ** 2 + (xx - 900) ** 2 < 150**2] = (40, 60, 210)
    return img


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for opt in ("sam3", "sam2", "dinov3", "dinov2", "vitpose", "vitpose_animal", "depth", "matcher"):
        ap.add_argument(f"--{opt}", default=None, help=f"local folder (or cached hub id) of the {opt} model")
    ap.add_argument("--tiny", default=None, help="build tiny random models into this folder and use them")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default=None, help="float32 (default), bfloat16 or float16")
    ap.add_argument("--image", default=None)
    ap.add_argument("--phrases", default="person,bicycle,tree,car,dog")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--option", action="append", default=[], help="extra backend option KEY=VALUE (repeatable)")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from worldeval.opis.backends.hf import build_hf_backend

    models = {k: getattr(args, k) for k in ("sam3", "sam2", "dinov3", "dinov2", "vitpose", "vitpose_animal", "depth", "matcher")}
    if args.tiny:
        from worldeval.opis.backends.hf_tiny import build_tiny_models

        t = build_tiny_models(args.tiny)
        models = {"sam3": t["sam3"], "dinov3": t["dinov3"], "matcher": t["lightglue"], "depth": t["depth_pro"],
                  "vitpose": t["vitpose"]}  # fmt: skip
    models = {k: v for k, v in models.items() if v}
    extra = dict(kv.split("=", 1) for kv in args.option)
    if args.dtype:
        extra["dtype"] = args.dtype

    t0 = time.perf_counter()
    backend = build_hf_backend(args.device, **models, **extra)
    _sync(args.device)
    report: dict = {"device": args.device, "dtype": args.dtype or "float32", "load_s": round(time.perf_counter() - t0, 3),
                    "versions": backend.versions, "pieces": {}}  # fmt: skip
    frame = _frame(args.image)
    H, W = frame.shape[:2]
    report["frame"] = [H, W]
    phrases = [p.strip() for p in args.phrases.split(",") if p.strip()]

    obs, dt = _timed(lambda: backend.segmenter.observe(frame, phrases), args.device, args.repeats)
    report["pieces"]["segmenter"] = {"seconds": round(dt, 4), "observations": len(obs),
                                     "categories": sorted({str(o.category) for o in obs})}  # fmt: skip
    masks = [o.mask for o in obs] or [np.ones((H, W), bool)]
    boxes = [o.box for o in obs] or [(0.0, 0.0, float(W), float(H))]
    emb, dt = _timed(lambda: backend.embedder.embed(frame, masks, boxes), args.device, args.repeats)
    report["pieces"]["embedder"] = {"seconds": round(dt, 4), "shape": list(emb.shape),
                                    "max_norm_error": float(np.abs(np.linalg.norm(emb, axis=1) - 1).max())}  # fmt: skip
    moved = np.ascontiguousarray(np.roll(frame, W // 20, axis=1))  # a known 5% pan
    c, dt = _timed(lambda: backend.matcher.match(frame, moved), args.device, args.repeats)
    shift = np.median(c.pts1[:, 0] - c.pts0[:, 0]) if len(c.pts0) else None
    report["pieces"]["matcher"] = {"seconds": round(dt, 4), "matches": len(c.pts0),
                                   "median_dx": None if shift is None else float(shift), "expected_dx": W // 20}  # fmt: skip
    if backend.depth is not None:
        (depth, K), dt = _timed(lambda: backend.depth.estimate(frame), args.device, args.repeats)
        report["pieces"]["depth"] = {"seconds": round(dt, 4), "min": float(depth.min()), "max": float(depth.max()),
                                     "K": None if K is None else np.round(K, 2).tolist()}  # fmt: skip
    if backend.pose is not None:
        box = boxes[0]
        kp, dt = _timed(lambda: backend.pose.keypoints(frame, box), args.device, args.repeats)
        report["pieces"]["pose"] = {"seconds": round(dt, 4), "box": [round(v, 1) for v in box],
                                    "joints": None if kp is None else int(len(kp.xy)),
                                    "mean_conf": None if kp is None else float(kp.conf.mean())}  # fmt: skip
    if args.device.startswith("cuda"):
        import torch

        report["max_gpu_memory_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    report["frame_seconds"] = round(sum(p["seconds"] for p in report["pieces"].values()), 4)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
