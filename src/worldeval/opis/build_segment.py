"""Instance masks for `opis build`: concept segmentation over rounds (hf), or GrabCut from VLM boxes (classical).

The paper queries SAM 3 with each cleaned noun phrase over several rounds and
removes overlapping duplicates by mask IoU across phrases and rounds. With the
`hf` backend that is what happens here: round 1 asks for every concept on the
image; each later round asks again on the image with the instances found so
far painted out (in the mean colour of the rest), so instances the first
answer missed can surface; a round that adds nothing ends the search. A new
mask is a duplicate when its IoU with an earlier one reaches `dedup_iou`.

The classical backend has no concept segmenter. It falls back to the VLM's
boxes and OpenCV GrabCut (`annotate.grabcut_mask`), one mask per proposed
instance, smallest box first: pixels already given to a smaller instance start
as probable background for the larger ones, so an object in front of another
is not absorbed into it. Instances without a box cannot be segmented this way
and are recorded as failed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from worldeval.opis.annotate import ObjectPrompt, grabcut_mask, mask_iou

MIN_PIXELS = 16


def _best_overlap(mask: np.ndarray, found: list[np.ndarray]) -> tuple[int, float]:
    best = (-1, 0.0)
    for j, m in enumerate(found):
        v = mask_iou(mask, m)
        if v > best[1]:
            best = (j, v)
    return best


def grabcut_from_boxes(image: np.ndarray, prompts: list[ObjectPrompt], iters: int, seed: int
                       ) -> tuple[list[tuple[ObjectPrompt, np.ndarray, str]], list[dict]]:
    """Candidates in the prompts' order (masks computed smallest box first) and failure records."""
    H, W = image.shape[:2]
    order = sorted((k for k, p in enumerate(prompts) if p.box is not None),
                   key=lambda k: (prompts[k].box[2] * prompts[k].box[3], k))
    taken = np.zeros((H, W), dtype=bool)
    masks: dict[int, np.ndarray] = {}
    failures = [{"prompt": k, "phrase": p.phrase, "reason": "no box: GrabCut needs one"}
                for k, p in enumerate(prompts) if p.box is None]
    for k in order:
        try:
            m = grabcut_mask(image, prompts[k].box, None, iters, seed=seed + k, background=taken)
        except ValueError as exc:
            failures.append({"prompt": k, "phrase": prompts[k].phrase, "reason": str(exc)})
            continue
        if m.sum() < MIN_PIXELS:
            failures.append({"prompt": k, "phrase": prompts[k].phrase, "reason": "GrabCut found no object in the box"})
            continue
        masks[k] = m
        taken |= m
    cands = [(prompts[k], masks[k], "grabcut:vlm-box") for k in sorted(masks)]
    return cands, sorted(failures, key=lambda f: f["prompt"])


def _paint_out(image: np.ndarray, covered: np.ndarray) -> np.ndarray:
    out = image.copy()
    rest = ~covered
    fill = image[rest].mean(axis=0) if rest.any() else np.full(3, 127.0)
    out[covered] = np.round(fill).astype(np.uint8)
    return out


def concept_rounds(segmenter: Any, image: np.ndarray, concepts: list[str], rounds: int, dedup_iou: float
                   ) -> tuple[list[tuple[str, np.ndarray, float, int]], list[dict]]:
    """(concept, mask, score, round) per instance found, and one record per round (found, duplicates)."""
    found: list[tuple[str, np.ndarray, float, int]] = []
    log: list[dict] = []
    work = image
    for r in range(1, max(1, rounds) + 1):
        obs = segmenter.observe(work, list(concepts)) if concepts else []
        new, dups = 0, []
        for o in obs:
            m = np.asarray(o.mask, dtype=bool)
            if m.sum() < MIN_PIXELS or o.category not in concepts:
                continue
            j, v = _best_overlap(m, [f[1] for f in found])
            if v >= dedup_iou:
                dups.append({"concept": o.category, "duplicate_of": j, "iou": round(v, 4)})
                continue
            found.append((o.category, m, float(getattr(o, "score", 1.0)), r))
            new += 1
        log.append({"round": r, "observations": len(obs), "new": new, "duplicates": dups})
        if new == 0:
            break
        covered = np.zeros(image.shape[:2], dtype=bool)
        for f in found:
            covered |= f[1]
        work = _paint_out(image, covered)
    return found, log
