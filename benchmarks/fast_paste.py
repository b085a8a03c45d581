"""A pasted object under fast camera motion, on tuning data only: the tuning analogue of the real-clip pasted check.

`opis validate --clip` pastes another clip's object into a clip; the tuning part of the hold-out split
has one clip with masks (bmx-trees), so there is no other tuning clip to take an object from. Here
the object comes from a tuning photo instead (COCO 443's cat, 009's first bowl, cut by their masks)
and goes in with `validate_real`'s own paste (`paste_source`, `paste_place`, `pasted_frames`: placed
on the scene, carried by the background's homography), into the tuning clips played k times faster
(`speed_up_clip`). The apple and the bedroom have no per-frame masks: their frame-0 target mask
(the apple's, the two children's by GrabCut from the speed benchmark's boxes) stands for every frame,
which only the removed and recoloured rollouts (not evaluated here) would read.

Printed per clip: sampled frames with the pasted object in view (>= 75 % of it inside the frame) and
how many of them have an extra, and the faithful clip's frames with an extra.

    .venv/bin/python benchmarks/fast_paste.py [--cases bmx:1:cat443,bmx:2:cat443,...] [--out DIR]
        [--set GROUP.FIELD=VALUE] [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from opis_eval_speed import BEDROOM_OBJECTS, config_setting  # noqa: E402  (the speed cases' boxes and --set)

CASES = "bmx:1:cat443,bmx:2:cat443,bmx:3:cat443,apple:3:cat443,bedroom:3:cat443,apple:1:bowl009"
PHOTO_OBJECTS = {"cat443": ("000000000443", 1), "bowl009": ("000000000009", 2)}  # photo id, instance value


def _clip_folder(dest: Path, frames, mask0: np.ndarray) -> Path:
    """A DAVIS-layout folder (frames/, masks/) of BGR `frames`, `mask0` standing for every frame's mask."""
    import cv2

    if (dest / "masks").is_dir():
        return dest
    (dest / "frames").mkdir(parents=True)
    (dest / "masks").mkdir()
    for k, im in enumerate(frames):
        cv2.imwrite(str(dest / "frames" / f"{k:05d}.jpg"), im, [cv2.IMWRITE_JPEG_QUALITY, 95])
        cv2.imwrite(str(dest / "masks" / f"{k:05d}.png"), mask0.astype(np.uint8) * 255)
    return dest


def photo_object(data: Path, key: str, work: Path) -> Path:
    """A one-frame clip folder of a tuning photo with one of its instance masks (the object to paste)."""
    import cv2
    from PIL import Image

    from worldeval.opis.checks import holdout

    pid, value = PHOTO_OBJECTS[key]
    if holdout.part_of("coco_multiobj", pid) != "tuning":
        raise SystemExit(f"photo {pid} is not in the tuning part")
    img = cv2.imread(str(data / "coco_multiobj" / "images" / f"{pid}.jpg"))
    labels = np.asarray(Image.open(data / "coco_multiobj" / "instance_masks" / f"{pid}.png"))
    return _clip_folder(work / "src" / key, [img], labels == value)


def tuning_clip(data: Path, name: str, work: Path) -> Path:
    import cv2

    if name == "bmx":
        return data / "davis_bmx_trees"
    if name == "apple":
        from worldeval.media import decode_frames, probe_video

        video = data / "cotracker_apple" / "apple.mp4"
        every = list(range(probe_video(video).num_frames))
        frames = [cv2.cvtColor(f, cv2.COLOR_RGB2BGR) for f in decode_frames(video, every).frames]
        mask = cv2.imread(str(data / "cotracker_apple" / "apple_mask.png"), cv2.IMREAD_GRAYSCALE) > 127
        return _clip_folder(work / "src" / "apple", frames, mask)
    if name == "bedroom":
        from worldeval.opis.cases.annotate import grabcut_mask

        frames = [cv2.imread(str(p)) for p in sorted((data / "sam2_bedroom" / "frames").iterdir())]
        rgb = cv2.cvtColor(frames[0], cv2.COLOR_BGR2RGB)
        mask = np.zeros(rgb.shape[:2], bool)
        for *_, box in BEDROOM_OBJECTS[:2]:  # the two children
            mask |= grabcut_mask(rgb, list(box))
        return _clip_folder(work / "src" / "bedroom", frames, mask)
    raise SystemExit(f"unknown clip {name!r} (bmx, apple, bedroom)")


def synthesise(data: Path, work: Path, cases: list[str]) -> dict[str, dict]:
    from worldeval.opis.checks.validate_real import load_gt_clip, speed_up_clip, synthesize_clip

    records = {}
    for entry in cases:
        clip_name, k, obj = entry.split(":")
        name = f"{clip_name}_x{k}_{obj}"
        rec_path = work / "synth" / f"{name}.json"
        if rec_path.exists():
            records[name] = json.loads(rec_path.read_text())
            continue
        folder = tuning_clip(data, clip_name, work)
        if int(k) > 1:
            folder = speed_up_clip(folder, int(k), work / f"x{k}")
        clip = load_gt_clip(folder)
        clip.name = name
        rec = synthesize_clip(clip, load_gt_clip(photo_object(data, obj, work), 1), work / "synth")
        rec_path.write_text(json.dumps(rec))
        records[name] = rec
    return records


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=CASES, help="CLIP:SPEED:OBJECT, comma-separated (clips bmx, apple, bedroom; objects cat443, bowl009)")
    ap.add_argument("--out", type=Path, default=Path("fast_paste_out"))
    ap.add_argument("--set", action="append", default=[], metavar="GROUP.FIELD=VALUE", help="an evaluator setting")
    ap.add_argument("--tag", default="default", help="name of this setting's run folders")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--data", type=Path, default=HERE.parent.parent / "shared" / "data")
    args = ap.parse_args()
    from worldeval.opis.checks.validate_real import assess_clips
    from worldeval.opis.run import run_eval

    config = config_setting(args.set)
    records = synthesise(args.data, args.out, args.cases.split(","))
    run_dirs = {}
    for iv in ("faithful", "pasted"):
        videos, cases = args.out / args.tag / "videos" / iv, args.out / args.tag / "cases"
        videos.mkdir(parents=True, exist_ok=True)
        cases.mkdir(parents=True, exist_ok=True)
        for name in records:  # only this selection's clips, linked
            for src, dst in ((args.out / "synth" / "rollouts" / iv / f"{name}.mp4", videos / f"{name}.mp4"),
                             (args.out / "synth" / "cases" / name, cases / name)):
                if not dst.exists():
                    os.symlink(src.resolve(), dst)
        run_dirs[iv] = args.out / args.tag / "runs" / iv
        run_eval(cases, videos, iv, run_dirs[iv], backend="classical", workers=args.workers, force=True, config=config or None)
    result = assess_clips(run_dirs, records)
    print(f"{'clip':24s} {'pasted: extra / in view':>24s} {'faithful: frames with an extra':>32s}")
    for name, v in result["clips"].items():
        p = v["checks"]["pasted"].get("measurements", {})
        f = v["checks"]["faithful"].get("measurements", {})
        n_in = p.get("pasted_in_view_frames") or 0
        hit = round((p.get("extra_share_where_pasted_in_view") or 0) * n_in)
        print(f"{name:24s} {f'{hit}/{n_in}':>24s} {_extra_frames(run_dirs['faithful'], name):>32s}")
    return 0


def _extra_frames(run_dir: Path, case_id: str) -> str:
    from worldeval.opis.archive import read_archive

    df = read_archive([str(run_dir)])
    rows = df[df["case_id"] == case_id]
    return f"{rows[rows['extra'].astype(bool)]['frame'].nunique()}/{rows['frame'].nunique()}"


if __name__ == "__main__":
    sys.exit(main())
