"""Speed of the classical OPIS evaluator by the number of objects in a case: 1, 8, 25 and 50 instances.

Cases, built from the shared data (../shared/data) into a work folder:

* `n1`: DAVIS bmx-trees (854x480, 80 frames at 24 fps), the rider and the bike as one object
  (DAVIS 2016's single object of the clip);
* `n8`: sam2_bedroom (960x540, a real video, the camera moving): the two children, two pillows,
  the shelf, a candle, a jar and the lamp, masks by GrabCut from boxes (`annotate.grabcut_mask`);
* `n25`, `n50`: the same video, those eight plus the largest compact regions of a Felzenszwalb
  segmentation of the first frame (wall stripes, bed cover, curtain, dresser parts, ...) up to 25 / 50;
* `coco25` (with --coco): the six COCO photos of coco_multiobj in a 3 x 2 mosaic (960x540), their 25
  largest instance masks, rendered as a pan-and-return by the `oracle` reference producer.

Every repeat evaluates every case once, in turn (interleaved, so a change of the machine's load
reaches all of them alike); each evaluation is a new item of a run folder (case loading, reference
bank, propagation, measurement and the archive part all included). Printed per case: sampled
frames per second (min and median over repeats), wall and CPU seconds per frame (CPU: the whole
process, every thread; steadier than wall time on a shared machine), the stage split; then the
per-frame cost ratios n25/n1 and n50/n25, taken repeat by repeat (paired), min and median.

    .venv/bin/python benchmarks/opis_eval_speed.py [--repeats 3] [--max-frames 6] [--work DIR] [--coco]
        [--option search=lost] [--set GROUP.FIELD=VALUE] [--length full]

`--length full` builds 200-frame cases (the bedroom's whole clip, bmx-trees played forward and back
to the same length) and evaluates every sampled frame (22 a case), as `opis eval` runs a case; a
work folder holds cases of one length (`length.txt`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SIZES = ("n1", "n8", "n25", "n50")
# boxes (x, y, w, h) of the bedroom's own objects in its first frame, prompts for GrabCut
BEDROOM_OBJECTS = (
    ("girl", "person", "articulated", "dynamic", (310, 0, 210, 400)),
    ("boy", "person", "articulated", "dynamic", (145, 135, 150, 275)),
    ("pink_pillow", "pillow", "rigid", "static", (530, 288, 152, 128)),
    ("white_pillow", "pillow", "rigid", "static", (432, 318, 110, 85)),
    ("shelf", "shelf", "rigid", "static", (280, 105, 470, 35)),
    ("candle", "candle", "rigid", "static", (676, 74, 28, 34)),
    ("plant_jar", "jar", "rigid", "static", (584, 66, 36, 46)),
    ("lamp", "lamp", "rigid", "static", (860, 298, 36, 52)),
)


def _instance(iid: str, category: str, kinematics: str = "rigid", track: str = "static") -> dict:
    return {"id": iid, "category": category, "kinematics": kinematics, "track": track}


def _spec(case_id: str, instances: list[dict], camera: dict | None = None) -> dict:
    spec = {"id": case_id, "domain": "real_world", "subcategory": "indoor", "image": "input.png", "instances": instances}
    if camera is not None:
        spec["camera_task"] = camera
    return spec


def bounce(n: int, length: int) -> list[int]:
    """Frame indices 0..n-1 played forward, back, forward ... to `length` frames (each end shown once a turn)."""
    cycle = list(range(n)) + list(range(n - 2, 0, -1)) if n > 1 else [0]
    return [cycle[k % len(cycle)] for k in range(length)]


def build_bmx(data: Path, work: Path, length: int | None = None) -> None:
    from PIL import Image

    from worldeval.media import read_image, write_video
    from worldeval.opis.case import write_case

    davis = data / "davis_bmx_trees"
    frames = [read_image(p) for p in sorted((davis / "frames").glob("*.jpg"))]
    if length is not None:  # as long as the other cases, so one case's fixed cost is spread alike
        frames = [frames[k] for k in bounce(len(frames), length)]
    labels = np.asarray(Image.open(davis / "first_frame_instances_davis2017.png"))
    write_case(work / "n1" / "ds" / "n1", _spec("n1", [_instance("rider", "person", "articulated", "dynamic")]),
               frames[0], {"rider": labels > 0})
    write_video(work / "n1" / "ro" / "n1.mp4", frames, 24)


def compact_regions(image: np.ndarray, n: int, taken: np.ndarray | None = None) -> list[tuple[int, np.ndarray]]:
    """(segment label, mask) of the n largest object-like segments of a Felzenszwalb segmentation outside
    `taken`: 0.1-6 % of the frame (not a speck, not a wall) and filling 30 % of their box; largest first."""
    import cv2
    from skimage.segmentation import felzenszwalb

    H, W = image.shape[:2]
    seg = felzenszwalb(image, scale=300, sigma=0.8, min_size=400)
    regions = []
    for label in range(int(seg.max()) + 1):
        m = seg == label if taken is None else (seg == label) & ~taken
        area = int(m.sum())
        x, y, w, h = cv2.boundingRect(m.astype(np.uint8))
        if 0.001 * H * W <= area <= 0.06 * H * W and area >= 0.3 * w * h:
            regions.append((area, label, m))
    regions.sort(key=lambda r: (-r[0], r[1]))
    return [(label, m) for _, label, m in regions[:n]]


def bedroom_masks(image: np.ndarray, n: int) -> list[tuple[dict, np.ndarray]]:
    """The bedroom's eight GrabCut objects, then the largest compact segments of the rest, n in all."""
    from worldeval.opis.cases.annotate import grabcut_mask

    taken = np.zeros(image.shape[:2], bool)
    out = []
    for iid, cat, kin, track, box in BEDROOM_OBJECTS[:n]:
        m = grabcut_mask(image, list(box), background=taken) & ~taken
        out.append((_instance(iid, cat, kin, track), m))
        taken |= m
    if n <= len(out):
        return out
    out += [(_instance(f"region{label}", "region"), m) for label, m in compact_regions(image, n - len(out), taken)]
    if len(out) < n:
        raise SystemExit(f"bedroom: only {len(out)} objects found, {n} asked for")
    return out


def build_bedroom(data: Path, work: Path, sizes: list[str], n_frames: int) -> None:
    from worldeval.media import read_image, write_video
    from worldeval.opis.case import write_case

    paths = sorted((data / "sam2_bedroom" / "frames").glob("*.jpg"))[:n_frames]
    frames = [read_image(p) for p in paths]
    objects = bedroom_masks(frames[0], max(int(s[1:]) for s in sizes))
    for size in sizes:
        insts = objects[: int(size[1:])]
        write_case(work / size / "ds" / size, _spec(size, [i for i, _ in insts]), frames[0], {i["id"]: m for i, m in insts})
        write_video(work / size / "ro" / f"{size}.mp4", frames, 24)


def build_coco_mosaic(data: Path, work: Path, n: int = 25) -> None:
    """The six COCO photos tiled 3 x 2 at 320 x 270, their n largest instances, an oracle pan."""
    import cv2
    from PIL import Image

    from worldeval.opis.case import load_case, write_case
    from worldeval.opis.cases.coco import pan_camera_task, routing
    from worldeval.opis.producers.base import ProduceContext
    from worldeval.opis.producers.reference import reference_producer

    src = data / "coco_multiobj"
    index = json.loads((src / "instances.json").read_text())
    tile_w, tile_h = 320, 270
    mosaic = np.zeros((2 * tile_h, 3 * tile_w, 3), np.uint8)
    found = []
    for k, stem in enumerate(sorted(index)[:6]):
        oy, ox = (k // 3) * tile_h, (k % 3) * tile_w
        img = np.asarray(Image.open(src / "images" / f"{stem}.jpg").convert("RGB"))
        pal = np.asarray(Image.open(src / "instance_masks" / f"{stem}.png"))
        mosaic[oy : oy + tile_h, ox : ox + tile_w] = cv2.resize(img, (tile_w, tile_h), interpolation=cv2.INTER_AREA)
        small = cv2.resize(pal, (tile_w, tile_h), interpolation=cv2.INTER_NEAREST)
        for inst in index[stem]["instances"]:
            m = np.zeros(mosaic.shape[:2], bool)
            m[oy : oy + tile_h, ox : ox + tile_w] = small == int(inst["id"])
            if m.sum() >= 50:
                found.append((int(m.sum()), f"{stem}_{inst['id']}", inst["class"], m))
    found.sort(key=lambda r: (-r[0], r[1]))
    insts = [(_instance(iid, cat.replace("_", " "), *routing(cat)), m) for _, iid, cat, m in found[:n]]
    cid = f"coco{n}"
    write_case(work / cid / "ds" / cid, _spec(cid, [i for i, _ in insts], pan_camera_task(duration_s=3.0)), mosaic,
               {i["id"]: m for i, m in insts})
    case = load_case(work / cid / "ds" / cid)
    ctx = ProduceContext(dataset=work / cid / "ds", case_dirs=[work / cid / "ds" / cid])
    (work / cid / "ro").mkdir(parents=True, exist_ok=True)
    reference_producer("oracle").produce(case, work / cid / "ro" / f"{cid}.mp4", ctx)


# Video length of the cases: `short`, 80 frames (7 samples at 24 fps; the figures of earlier rounds),
# or `full`, the bedroom's 200 frames and bmx-trees played forward and back to 200 (22 samples each,
# nearer an OPIS case's 28 on average: 14,000 sampled frames over 500 cases).
LENGTHS = {"short": 80, "full": 200}


def build(data: Path, work: Path, coco: bool, length: str = "short") -> list[str]:
    """The cases' folders under `work` (reused when already there); their names in measuring order."""
    names = list(SIZES) + (["coco25"] if coco else [])
    frames = LENGTHS[length]
    marker = work / "length.txt"
    if marker.exists() and marker.read_text() != length:
        raise SystemExit(f"{work} holds {marker.read_text()} cases; use another --work for --length {length}")
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(length)
    if not (work / "n1" / "ro" / "n1.mp4").exists():
        build_bmx(data, work, None if length == "short" else frames)
    todo = [s for s in SIZES[1:] if not (work / s / "ro" / f"{s}.mp4").exists()]
    if todo:
        build_bedroom(data, work, todo, frames)
    if coco and not (work / "coco25" / "ro" / "coco25.mp4").exists():
        build_coco_mosaic(data, work)
    return names


def config_setting(pairs: list[str], base: dict | None = None) -> dict:
    """A run config from `GROUP.FIELD=VALUE` entries (VALUE as JSON), on top of `base`."""
    cfg: dict = dict(base or {})
    for p in pairs:
        key, _, value = p.partition("=")
        group, _, field = key.partition(".")
        if not field:
            raise SystemExit(f"--set {p!r}: write GROUP.FIELD=VALUE (e.g. propagation.chain_zones=false)")
        cfg.setdefault(group, {})[field] = json.loads(value)
    return cfg


def measure(work: Path, name: str, tag: str, cfg: dict, options: dict | None = None) -> dict:
    """One evaluation of case `name` as a new item of its run folder: frames, wall seconds, stage seconds."""
    from worldeval.opis.run import run_eval

    t0, c0 = time.perf_counter(), os.times()
    summary = run_eval(work / name / "ds", work / name / "ro", tag, work / name / "run", workers=0, config=cfg,
                       backend_options=options)
    wall, c1 = time.perf_counter() - t0, os.times()
    assert summary["done"], summary
    st = json.loads((work / name / "run" / "status" / tag / f"{name}.json").read_text())
    # CPU seconds of the whole process (every thread): steadier than wall time on a shared machine
    cpu = (c1.user - c0.user) + (c1.system - c0.system)
    return {"frames": st["frames"], "wall": wall, "cpu": cpu, "stages": st["timings"]}


def summarise(names: list[str], runs: dict[str, list[dict]]) -> dict:
    from worldeval.opis.evaluate import STAGES

    out: dict = {"cases": {}, "ratios": {}}
    for name in names:
        per = [r["wall"] / r["frames"] for r in runs[name]]
        cpu = [r["cpu"] / r["frames"] for r in runs[name]]
        totals = {k: sum(r["stages"].get(k, 0.0) for r in runs[name]) for k in STAGES}
        staged = sum(totals.values()) or 1.0
        out["cases"][name] = {
            "sampled_frames": runs[name][0]["frames"],
            "frames_per_s": {"min": 1 / max(per), "median": 1 / statistics.median(per)},
            "seconds_per_frame": {"min": min(per), "median": statistics.median(per)},
            "cpu_seconds_per_frame": {"min": min(cpu), "median": statistics.median(cpu)},
            # stage seconds are CPU-side (frames measured two at a time): shares, not wall time
            "share": {k: totals[k] / staged for k in STAGES},
        }
    for a, b in (("n25", "n1"), ("n50", "n25"), ("n8", "n1"), ("coco25", "n1")):
        if a in runs and b in runs:
            rs = [x["wall"] / x["frames"] / (y["wall"] / y["frames"]) for x, y in zip(runs[a], runs[b])]
            rc = [x["cpu"] / x["frames"] / (y["cpu"] / y["frames"]) for x, y in zip(runs[a], runs[b])]
            out["ratios"][f"{a}/{b}"] = {"min": min(rs), "median": statistics.median(rs),
                                         "cpu_min": min(rc), "cpu_median": statistics.median(rc)}
    return out


def report(out: dict) -> None:
    from worldeval.opis.evaluate import STAGES

    opts = ", ".join([f"{k}={v}" for k, v in out["options"].items()] + list(out.get("settings", []))) or "default options"
    frames = f"at most {out['max_frames']} sampled frames" if out["max_frames"] else "every sampled frame"
    print(f"classical backend ({opts}), {out.get('length', 'short')} cases, {out['repeats']} interleaved repeats, {frames} a case; "
          f"load average at start {out['load'][0]:.2f}, at end {out['load'][1]:.2f}")
    head = "".join(f"{k[:6]:>7s}" for k in STAGES)
    print(f"{'case':8s}{'frames':>7s}{'fr/s min':>9s}{'med':>7s}{'s/fr med':>9s}{'cpu/fr':>8s}  share %:{head}")
    for name, c in out["cases"].items():
        share = "".join(f"{100 * c['share'][k]:7.1f}" for k in STAGES)
        print(f"{name:8s}{c['sampled_frames']:7d}{c['frames_per_s']['min']:9.2f}{c['frames_per_s']['median']:7.2f}"
              f"{c['seconds_per_frame']['median']:9.3f}{c['cpu_seconds_per_frame']['median']:8.3f}          {share}")
    for k, r in out["ratios"].items():
        print(f"per-frame cost {k}: wall median {r['median']:.2f}x (min {r['min']:.2f}x), "
              f"CPU median {r['cpu_median']:.2f}x (min {r['cpu_min']:.2f}x)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[1].parent / "shared" / "data")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-frames", type=int, default=None,
                    help="sampled frames per case (EvalConfig.max_frames; default 6 with --length short, all with full; 0: all)")
    ap.add_argument("--length", choices=sorted(LENGTHS), default="short",
                    help="short: 80-frame cases; full: 200-frame cases evaluated as users run them (every sample)")
    ap.add_argument("--work", type=Path, default=None, help="build the cases here and keep them (default: a temporary folder)")
    ap.add_argument("--cases", default=None, help="comma-separated subset of n1,n8,n25,n50,coco25")
    ap.add_argument("--coco", action="store_true", help="also the 25-instance COCO mosaic (oracle pan)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--set", action="append", default=[], metavar="GROUP.FIELD=VALUE",
                    help="an evaluator setting of the run config (VALUE as JSON), e.g. propagation.chain_zones=false")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="classical backend option for every case (e.g. search=lost); repeatable")
    args = ap.parse_args(argv)
    for need in ("davis_bmx_trees", "sam2_bedroom") + (("coco_multiobj",) if args.coco else ()):
        if not (args.data / need).exists():
            print(f"data not found: {args.data / need}", file=sys.stderr)
            return 2
    tmp = None if args.work else tempfile.mkdtemp(prefix="opis_speed_")
    work = args.work or Path(tmp)
    try:
        names = build(args.data, work, args.coco or "coco25" in (args.cases or ""), args.length)
        names = [n for n in names if args.cases is None or n in args.cases.split(",")]
        if args.max_frames is None:
            args.max_frames = 6 if args.length == "short" else 0
        cfg = config_setting(args.set, {"max_frames": args.max_frames or None})
        options = dict(o.split("=", 1) for o in args.option)
        for name in names:  # run folders of an earlier call (another config) are scratch
            shutil.rmtree(work / name / "run", ignore_errors=True)
        load0 = os.getloadavg()[0]
        for name in names:  # warm-up: model load, first-touch costs
            measure(work, name, f"warmup{time.time_ns()}", cfg, options)
        runs: dict[str, list[dict]] = {n: [] for n in names}
        for r in range(args.repeats):
            for name in names:
                runs[name].append(measure(work, name, f"rep{r}_{time.time_ns()}", cfg, options))
        out = {"repeats": args.repeats, "length": args.length, "max_frames": args.max_frames, "options": options, "settings": args.set,
               "load": (load0, os.getloadavg()[0]), **summarise(names, runs)}
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(out, indent=2)) if args.json else report(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
