"""Mask IoU of `opis build`'s classical fallback (GrabCut from VLM boxes) on the six COCO photos.

The VLM is the judge's mock transport, scripted to propose each photo's
annotated class names with the instance masks' boxes (2 px margin); each
annotated instance is compared with its best-overlapping case mask.

    PYTHONPATH=src python benchmarks/build_coco_iou.py [--large 0.1]
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

from worldeval.judge import JudgeClient, JudgeConfig, MockTransport
from worldeval.opis.annotate import mask_iou
from worldeval.opis.build import BuildConfig, build_dataset
from worldeval.opis.case import load_case

COCO = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "coco_multiobj"
TASK = {"camera": "pan-right-return", "amount": None, "instruction": "The camera pans right and back; nothing changes."}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--large", type=float, default=0.1, help="area fraction from which an instance counts as large")
    args = ap.parse_args()
    index = json.loads((COCO / "instances.json").read_text())
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

    def vlm(request):
        if "TASK SPECIFICATION" in request.text:
            return TASK
        return answers[np.asarray(Image.open(io.BytesIO(request.images[0].data)).convert("RGB")).tobytes()]

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ds"
        client = JudgeClient(JudgeConfig(model="scripted"), transport=MockTransport(vlm))
        build_dataset(COCO / "images", out, BuildConfig(), client)
        large = []
        for iid, objs in truth.items():
            case = load_case(out / iid)
            for name, m, frac in objs:
                iou = max(mask_iou(cm, m) for cm in case.masks.values())
                print(f"{iid}  {name:14s} area {frac:.4f}  IoU {iou:.3f}")
                if frac >= args.large:
                    large.append(iou)
    print(f"large (>= {args.large:g} of the image): {len(large)} instances, {sum(v >= 0.8 for v in large)} with "
          f"IoU >= 0.8, median {statistics.median(large):.3f}, mean {statistics.mean(large):.3f}")


if __name__ == "__main__":
    main()
