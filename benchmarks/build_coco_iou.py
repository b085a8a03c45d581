"""Mask IoU of `opis build`'s classical fallback (GrabCut from VLM boxes) on the six COCO photos.

The VLM is the judge's mock transport, scripted to propose each photo's
annotated class names with the instance masks' boxes (2 px margin); each
annotated instance is compared with its best-overlapping case mask. Rows say
which half of the hold-out split (worldeval.opis.checks.holdout) a photo is in, and
the summary is given for all six photos and for each half. `--seeds` builds
the dataset once per GrabCut seed: single instances move by up to 0.2 IoU
between seeds (GrabCut's colour models start from a seeded k-means), so a
figure from one seed is one draw.

    PYTHONPATH=src python benchmarks/build_coco_iou.py [--large 0.1] [--seeds 0,1,2]
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
from PIL import Image

from worldeval.judge import JudgeClient, JudgeConfig, MockTransport
from worldeval.opis.cases.annotate import mask_iou
from worldeval.opis.cases.build import BuildConfig, build_dataset
from worldeval.opis.case import load_case
from worldeval.opis.checks.holdout import part_of

COCO = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "coco_multiobj"
TASK = {"camera": "pan-right-return", "amount": None, "instruction": "The camera pans right and back; nothing changes."}


def scripted(index: dict) -> tuple[dict, dict]:
    """Ground truth per photo [(class, mask, area fraction)] and the scripted screening answers."""
    truth, answers = {}, {}
    for iid, info in index.items():
        img = np.asarray(Image.open(COCO / "images" / f"{iid}.jpg").convert("RGB"))
        lab = np.asarray(Image.open(COCO / "instance_masks" / f"{iid}.png"))
        truth[iid] = [(i["class"].replace("_", " "), lab == i["id"], i["area_frac"]) for i in info["instances"]]
        objs = []
        for name, m, _ in truth[iid]:
            ys, xs = np.nonzero(m)
            objs.append({"phrase": name, "box": [int(xs.min()) - 2, int(ys.min()) - 2, int(xs.max() - xs.min()) + 5,
                                                 int(ys.max() - ys.min()) + 5], "kinematics": "rigid"})
        answers[img.tobytes()] = {"suitable": True, "reason": "benchmark", "objects": objs}
    return truth, answers


def measure(truth: dict, answers: dict, seed: int) -> dict[tuple[str, int], float]:
    """IoU per (photo, instance index) of one build with GrabCut seed `seed`."""
    def vlm(request):
        if "TASK SPECIFICATION" in request.text:
            return TASK
        return answers[np.asarray(Image.open(io.BytesIO(request.images[0].data)).convert("RGB")).tobytes()]

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ds"
        client = JudgeClient(JudgeConfig(model="scripted"), transport=MockTransport(vlm))
        build_dataset(COCO / "images", out, replace(BuildConfig(), seed=seed), client)
        ious = {}
        for iid, objs in truth.items():
            case = load_case(out / iid)
            for k, (_, m, _) in enumerate(objs):
                ious[(iid, k)] = max(mask_iou(cm, m) for cm in case.masks.values())
    return ious


def summary(label: str, values: list[float]) -> str:
    if not values:
        return f"{label}: no instances"
    return (f"{label}: {len(values)} instances, {sum(v >= 0.8 for v in values)} with IoU >= 0.8, "
            f"median {statistics.median(values):.3f}, mean {statistics.mean(values):.3f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--large", type=float, default=0.1, help="area fraction from which an instance counts as large")
    ap.add_argument("--seeds", default="0", help="comma-separated GrabCut seeds (BuildConfig.seed); one build each")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    truth, answers = scripted(json.loads((COCO / "instances.json").read_text()))
    runs = [measure(truth, answers, s) for s in seeds]
    print("photo         part       instance       area    " + "  ".join(f"seed {s}" for s in seeds))
    for iid, objs in truth.items():
        part = part_of("coco_multiobj", iid)
        for k, (name, _, frac) in enumerate(objs):
            mark = " L" if frac >= args.large else "  "
            print(f"{iid}  {part:9s}  {name:14s} {frac:.4f}{mark} " + "  ".join(f"{r[(iid, k)]:6.3f}" for r in runs))
    for s, r in zip(seeds, runs):
        print(f"seed {s}")
        for part in ("all", "tuning", "reporting"):
            vals = [v for (iid, k), v in r.items() if truth[iid][k][2] >= args.large
                    and part in ("all", part_of("coco_multiobj", iid))]
            print("  " + summary(f"large (>= {args.large:g} of the image), {part}", vals))


if __name__ == "__main__":
    main()
