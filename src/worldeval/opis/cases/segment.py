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

Pixels two masks both claim are later given to the smaller mask (an instance
whose box lies inside another's is taken to be in front of it). That rule has
no ground where neither box holds the other: two bowls side by side, the same
pink, each box reaching over the other's wall. There the contested pixels are
split by a two-label graph cut instead (`_split_contested`): each side's
colour model is learned from the pixels only it claims, with GrabCut's
contrast-sensitive smoothness, so the cut runs along the visible gap between
the two objects rather than along a box edge.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from worldeval.geometry import mask_iou
from worldeval.opis.cases.annotate import ObjectPrompt, grabcut_mask

MIN_PIXELS = 16
# a box with at least this share inside another box counts as held by it (in front of it)
HELD = 0.9
# GrabCut's smoothness weight (OpenCV's gamma) and the fixed-point scale of the cut's capacities
GAMMA = 50.0
CAP_SCALE = 16.0


def _best_overlap(mask: np.ndarray, found: list[np.ndarray]) -> tuple[int, float]:
    best = (-1, 0.0)
    for j, m in enumerate(found):
        v = mask_iou(mask, m)
        if v > best[1]:
            best = (j, v)
    return best


def grabcut_from_boxes(image: np.ndarray, prompts: list[ObjectPrompt], iters: int, seed: int
                       ) -> tuple[list[tuple[ObjectPrompt, np.ndarray, str]], list[dict]]:
    """Candidates in the prompts' order (masks computed smallest box first, contested pixels of
    side-by-side instances then split by `_split_contested`) and failure records."""
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
    _split_contested(image, prompts, masks, seed)
    for k in [k for k in sorted(masks) if masks[k].sum() < MIN_PIXELS]:
        failures.append({"prompt": k, "phrase": prompts[k].phrase,
                         "reason": "its pixels went to an overlapping instance"})
        del masks[k]
    cands = [(prompts[k], masks[k], "grabcut:vlm-box") for k in sorted(masks)]
    return cands, sorted(failures, key=lambda f: f["prompt"])


def _share_inside(a: list[float], b: list[float]) -> float:
    """Share of box a (x, y, w, h) lying inside box b."""
    iw = max(0.0, min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1]))
    return iw * ih / max(1e-9, a[2] * a[3])


def _split_contested(image: np.ndarray, prompts: list[ObjectPrompt], masks: dict[int, np.ndarray], seed: int) -> None:
    """Split, in place, the pixels claimed by two instances whose boxes overlap with neither holding the other."""
    keys = sorted(masks)
    for n, i in enumerate(keys):
        for j in keys[n + 1:]:
            bi, bj = prompts[i].box, prompts[j].box
            if _share_inside(bi, bj) >= HELD or _share_inside(bj, bi) >= HELD:
                continue
            both = masks[i] & masks[j]
            if both.sum() < MIN_PIXELS:
                continue
            third = np.zeros_like(both)
            for k in keys:
                if k not in (i, j):
                    third |= masks[k]
            to_j = _two_label_cut(image, masks[i] & ~both & ~third, masks[j] & ~both & ~third, both, seed + i + j)
            if to_j is not None:
                masks[i] &= ~to_j
                masks[j] &= ~(both & ~to_j)


def _colour_model(pixels: np.ndarray, seed: int) -> np.ndarray:
    """OpenCV GrabCut's 5-component colour model (1 x 65) learned from exactly these RGB pixels.

    GrabCut's initialisation learns its models from a labelled image; a one-column image of the
    pixels (each twice, once per class, as it needs both) gives the foreground model of just them.
    """
    import cv2

    col = np.ascontiguousarray(np.concatenate([pixels, pixels]).reshape(-1, 1, 3).astype(np.uint8))
    mask = np.full(col.shape[:2], cv2.GC_FGD, np.uint8)
    mask[:len(pixels)] = cv2.GC_BGD
    bgd, fgd = np.zeros((1, 65), np.float64), np.zeros((1, 65), np.float64)
    cv2.setRNGSeed(int(seed))
    cv2.grabCut(col, mask, None, bgd, fgd, 0, cv2.GC_INIT_WITH_MASK)
    return fgd


def _neg_log_density(pixels: np.ndarray, model: np.ndarray) -> np.ndarray:
    """-log density of RGB rows under a GrabCut colour model (5 weights, 5x3 means, 5x3x3 covariances)."""
    m = model.ravel()
    dens = np.zeros(len(pixels))
    x = pixels.astype(np.float64)
    for w, mu, cov in zip(m[:5], m[5:20].reshape(5, 3), m[20:65].reshape(5, 3, 3)):
        if w <= 0:
            continue
        d = x - mu
        q = np.einsum("ij,jk,ik->i", d, np.linalg.inv(cov), d)
        dens += w * np.exp(-0.5 * q) / np.sqrt((2 * np.pi) ** 3 * max(float(np.linalg.det(cov)), 1e-300))
    return -np.log(dens + 1e-300)


# 8-neighbourhood as (dy, dx, distance weight), each pair once
_NEIGHBOURS = ((0, 1, 1.0), (1, 0, 1.0), (1, 1, 2 ** -0.5), (1, -1, 2 ** -0.5))


def _pairs(shape: tuple[int, int], dy: int, dx: int) -> tuple[tuple[slice, slice], tuple[slice, slice]]:
    H, W = shape
    xa = slice(max(0, -dx), W - max(0, dx))
    xb = slice(max(0, dx), W + min(0, dx))
    return (slice(0, H - dy), xa), (slice(dy, H), xb)


def _two_label_cut(image: np.ndarray, only_i: np.ndarray, only_j: np.ndarray, both: np.ndarray, seed: int
                   ) -> np.ndarray | None:
    """The contested pixels a minimum cut gives to j (H x W bool), or None when a side has too few own pixels.

    Energy over the contested pixels: -log colour density under each side's model, plus GrabCut's
    smoothness gamma * exp(-beta |dI|^2) / distance wherever neighbours differ; a contested pixel next
    to a pixel only one side claims pays that weight for taking the other label.
    """
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import breadth_first_order, maximum_flow

    if only_i.sum() < 50 or only_j.sum() < 50:
        return None
    # the window of both instances, as GrabCut's contrast statistic (beta) is taken over its window
    ys, xs = np.nonzero(only_i | only_j | both)
    y0, y1, x0, x1 = ys.min(), ys.max() + 1, xs.min(), xs.max() + 1
    img = image[y0:y1, x0:x1].astype(np.float64)
    var, side_i, side_j = both[y0:y1, x0:x1], only_i[y0:y1, x0:x1], only_j[y0:y1, x0:x1]
    n = int(var.sum())
    idx = np.full(var.shape, -1, np.int64)
    idx[var] = np.arange(n)
    cost_i = _neg_log_density(img[var], _colour_model(image[only_i], seed))
    cost_j = _neg_log_density(img[var], _colour_model(image[only_j], seed + 1))
    diffs = []
    for dy, dx, w in _NEIGHBOURS:
        a, b = _pairs(var.shape, dy, dx)
        diffs.append((a, b, w, ((img[a] - img[b]) ** 2).sum(-1)))
    beta = 1.0 / (2.0 * np.mean(np.concatenate([d.ravel() for *_, d in diffs])) + 1e-12)
    rows, cols, caps = [], [], []
    for a, b, w, d2 in diffs:
        weight = GAMMA * w * np.exp(-beta * d2)
        for p, q in ((a, b), (b, a)):
            vp = var[p]
            np.add.at(cost_j, idx[p][vp & side_i[q]], weight[vp & side_i[q]])  # neighbour is i's
            np.add.at(cost_i, idx[p][vp & side_j[q]], weight[vp & side_j[q]])  # neighbour is j's
        link = var[a] & var[b]
        rows += [idx[a][link], idx[b][link]]
        cols += [idx[b][link], idx[a][link]]
        caps += [weight[link], weight[link]]
    # only the difference of a pixel's two costs matters; keep both >= 0 for the capacities
    low = np.minimum(cost_i, cost_j)
    cost_i, cost_j = cost_i - low, cost_j - low
    # source side = label i: cutting source->p (p takes j) costs cost_j, p->sink costs cost_i
    src, sink = n, n + 1
    rows += [np.full(n, src), np.arange(n)]
    cols += [np.arange(n), np.full(n, sink)]
    caps += [cost_j, cost_i]
    cap = np.minimum(np.round(np.concatenate(caps) * CAP_SCALE), 2 ** 30).astype(np.int32)
    graph = csr_matrix((cap, (np.concatenate(rows), np.concatenate(cols))), shape=(n + 2, n + 2))
    residual = graph - maximum_flow(graph, src, sink, method="dinic").flow
    residual.data = (residual.data > 0).astype(np.int8)
    residual.eliminate_zeros()
    on_i = np.zeros(n + 2, bool)
    on_i[breadth_first_order(residual, src, directed=True, return_predecessors=False)] = True
    out = np.zeros(image.shape[:2], dtype=bool)
    sub = out[y0:y1, x0:x1]
    sub[var] = ~on_i[:n]
    return out


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
            found.append((o.category, m, float(o.score), r))
            new += 1
        log.append({"round": r, "observations": len(obs), "new": new, "duplicates": dups})
        if new == 0:
            break
        covered = np.zeros(image.shape[:2], dtype=bool)
        for f in found:
            covered |= f[1]
        work = _paint_out(image, covered)
    return found, log
