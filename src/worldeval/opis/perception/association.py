"""Partial one-to-one association of observations with the reference inventory (paper section 4.1).

Affinity of (instance i, observation j) is a weighted mean of the evidence
present: colour-invariant structure likeness (`likeness.py`), keypoint
evidence of the instance's own I0 keypoints, embedding similarity, attribute
agreement, category agreement; the weights are renormalised over the kinds of
evidence the pair actually has. A pair is eligible only when (a) it shows
evidence that it is the object, not only that it is of its kind: a likeness
(the larger of structure and keypoint evidence) of at least `min_likeness`
(category agreement alone never establishes a match) and (b) for a static
instance with a reliable projection, the observation lies where the geometry
puts the instance (the geometric gate). Appearance (the colour-sensitive
embedding cosine) only contributes to the affinity: identity (4.2) measures it
on the match, so a recoloured object is matched with low appearance rather
than left unmatched. Without a likeness matrix (callers that have none) the
embedding cosine stands in for it. The assignment
maximises total affinity (Hungarian, scipy), pairs below the association
threshold are null, and a match whose runner-up (another distinct observation
for the instance, or another unassigned instance for the observation) comes
within the ambiguity margin is flagged ambiguous (unless the match is the instance's verified
propagated mask and the rival another observation: the mask's continuity decides).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from worldeval.geometry import box_iou
from worldeval.opis.perception.config import AssociationConfig

# the evaluator's settings are the defaults of a bare `associate` call (tests, notebooks)
DEFAULTS = AssociationConfig()

W_EMBED, W_ATTR, W_CAT = 0.6, 0.15, 0.25
# with a likeness matrix the colour-sensitive embedding counts less than the structure evidence
W_STRUCT, W_KEYPOINTS, W_EMBED_WITH_STRUCT = 0.4, 0.25, 0.2
# a verified propagated mask is the strongest evidence of which object is which: it followed the
# object from I0 through every frame in between, where a search judges one frame alone
W_PROPAGATION = 0.6


@dataclass
class Association:
    affinity: np.ndarray  # N_ref x N_obs (NaN where ineligible)
    similarity: np.ndarray  # N_ref x N_obs embedding cosine (NaN where missing)
    match: list[int | None]  # observation index per instance
    ambiguous: list[bool]
    likeness: np.ndarray | None = None  # N_ref x N_obs evidence of being the object itself (see module doc)


def _norm(s: str | None) -> str:
    return " ".join((s or "").lower().split())


def category_similarity(a: str | None, b: str | None) -> float | None:
    if not a or not b:
        return None
    a, b = _norm(a), _norm(b)
    if a == b:
        return 1.0
    ta, tb = set(a.split()), set(b.split())
    # the head noun (last word) carries the category; modifiers count partly
    if a.split()[-1] == b.split()[-1]:
        return 0.5 + 0.5 * len(ta & tb) / len(ta | tb)
    return 0.0


def attribute_similarity(a: dict, b: dict) -> float | None:
    keys = [k for k in a if k in b]
    if not keys:
        return None
    return float(np.mean([_norm(str(a[k])) == _norm(str(b[k])) for k in keys]))


# the geometric gate grows the projected box by this share of its size on each side (plus its margin)
GATE_GROWTH = 0.5


def geometric_gate(proj_box, obs_box, frame_shape, tol_frac: float = 0.05) -> bool:
    """The observation's centre lies within the projected box grown by half its size plus a frame-relative margin."""
    if proj_box is None:
        return False
    px, py, pw, ph = proj_box
    ox, oy, ow, oh = obs_box
    cx, cy = ox + ow / 2, oy + oh / 2
    margin = tol_frac * float(np.hypot(*frame_shape))
    dx = abs(cx - (px + pw / 2)) - (pw / 2 + GATE_GROWTH * pw)
    dy = abs(cy - (py + ph / 2)) - (ph / 2 + GATE_GROWTH * ph)
    if max(dx, dy) > margin:
        return False
    # the camera also fixes the size: a find much larger or smaller than the projection is something else
    # (e.g. a scrap left after the object was removed)
    r = np.sqrt(max(ow * oh, 1.0) / max(pw * ph, 1.0))
    return 0.6 <= r <= 1.67


def geometric_gates_for(proj_box, obs_boxes: np.ndarray, frame_shape, tol_frac: float = 0.05) -> np.ndarray:
    """`geometric_gate` of one projected box against every observation box (m x 4 x, y, w, h) at once:
    the same float64 arithmetic, element by element."""
    b = np.asarray(obs_boxes, np.float64).reshape(-1, 4)
    if proj_box is None:
        return np.zeros(len(b), bool)
    px, py, pw, ph = proj_box
    ox, oy, ow, oh = b.T
    cx, cy = ox + ow / 2, oy + oh / 2
    margin = tol_frac * float(np.hypot(*frame_shape))
    dx = np.abs(cx - (px + pw / 2)) - (pw / 2 + GATE_GROWTH * pw)
    dy = np.abs(cy - (py + ph / 2)) - (ph / 2 + GATE_GROWTH * ph)
    r = np.sqrt(np.maximum(ow * oh, 1.0) / max(pw * ph, 1.0))
    return ~(np.maximum(dx, dy) > margin) & (0.6 <= r) & (r <= 1.67)


def gate_zone(proj_box, frame_shape, tol_frac: float = 0.05) -> tuple[float, float, float, float]:
    """(x0, y0, x1, y1): where `geometric_gate` admits an observation's centre (its size test aside)."""
    px, py, pw, ph = proj_box
    margin = tol_frac * float(np.hypot(*frame_shape))
    cx, cy = px + pw / 2, py + ph / 2
    rx, ry = pw / 2 + GATE_GROWTH * pw + margin, ph / 2 + GATE_GROWTH * ph + margin
    return (cx - rx, cy - ry, cx + rx, cy + ry)


def instance_floors(n: int, min_appearance: float, instance_min: list[float] | None = None) -> list[float]:
    """The likeness each of n instances needs to be eligible: `min_appearance`, or its own floor where higher."""
    return [min_appearance if instance_min is None else max(min_appearance, instance_min[i]) for i in range(n)]


def likeness_matrix(structure: np.ndarray, keypoints: np.ndarray | None, propagation: np.ndarray | None = None) -> np.ndarray:
    """Evidence that observation j is instance i itself: the largest of structure, keypoint and propagation evidence."""
    like = structure if keypoints is None else np.fmax(structure, keypoints)
    return like if propagation is None else np.fmax(like, propagation)


def eligibility(like: np.ndarray, floors, gates: np.ndarray | None, provenance: np.ndarray | None,
                foreign_min_appearance: float) -> np.ndarray:
    """n x m: pair (i, j) has enough likeness (`like`: the likeness matrix, or the embedding cosine without
    one) for instance i's floor, clearer likeness when j was found for another instance, and an open gate.

    The whole matrix at once; every comparison in `like`'s own dtype, as a pair at a time compared
    its element with a Python float."""
    n, m = like.shape
    floors = np.asarray(floors, dtype=like.dtype).reshape(n, 1)
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(like) & ~(like < floors)
        if provenance is not None:
            # found while searching for someone else: it is ours only if it resembles us clearly,
            # and more than it resembles the instance(s) it was found for
            prov = np.asarray(provenance, bool)
            owners = np.where(prov, like, np.nan).astype(like.dtype)
            owned = prov.any(0) & np.isfinite(owners).any(0)
            best_owner = np.full(m, np.nan, like.dtype)
            best_owner[owned] = np.nanmax(owners[:, owned], axis=0)
            foreign_min = like.dtype.type(foreign_min_appearance)
            ok &= prov | ~((like < foreign_min) | (like <= best_owner[None, :]))
    if gates is not None:
        ok &= np.asarray(gates, bool)
    return ok


def evidence_sums(sim: np.ndarray, structure, keypoints, propagation=None) -> tuple[np.ndarray, np.ndarray]:
    """n x m (weighted sum, weight) of the appearance, structure, keypoint and propagation terms each pair has.

    In float64 and in the order a pair at a time added them (Python floats are IEEE doubles), so every
    element equals that pair's own sum."""
    s_e = np.asarray(sim, np.float64)
    fin = np.isfinite(s_e)
    pos = np.where(fin, np.maximum(0.0, np.where(fin, s_e, 0.0)), 0.0)
    if structure is None:
        num = np.where(fin, W_EMBED * pos, 0.0)
        den = np.where(fin, W_EMBED, 0.0)
    else:
        num = W_STRUCT * np.asarray(structure, np.float64)
        den = np.full(num.shape, W_STRUCT)
        num = np.where(fin, num + W_EMBED_WITH_STRUCT * pos, num)
        den = np.where(fin, den + W_EMBED_WITH_STRUCT, den)
        if keypoints is not None:
            num, den = _add_term(num, den, keypoints, W_KEYPOINTS)
    if propagation is not None:
        num, den = _add_term(num, den, propagation, W_PROPAGATION)
    return num, den


def _add_term(num: np.ndarray, den: np.ndarray, values, weight: float) -> tuple[np.ndarray, np.ndarray]:
    """`weight * values` added where the values are finite."""
    v = np.asarray(values, np.float64)
    fin = np.isfinite(v)
    return np.where(fin, num + weight * np.where(fin, v, 0.0), num), np.where(fin, den + weight, den)


def _label_terms(num, den, ok, ref_attrs, obs_attrs, ref_categories, obs_categories) -> None:
    """Attribute and category agreement added (in place) to the eligible pairs that have them: only
    observations with attributes or a category can (a search find has neither)."""
    seen: dict = {}
    for j in range(num.shape[1]):
        if not (obs_attrs[j] or obs_categories[j]):
            continue
        for i in np.flatnonzero(ok[:, j]):
            n_, d_ = float(num[i, j]), float(den[i, j])
            s_a = attribute_similarity(ref_attrs[i], obs_attrs[j]) if ref_attrs[i] and obs_attrs[j] else None
            if s_a is not None:
                n_, d_ = n_ + W_ATTR * s_a, d_ + W_ATTR
            key = (ref_categories[i], obs_categories[j])
            if key not in seen:
                seen[key] = category_similarity(*key)
            if seen[key] is not None:
                n_, d_ = n_ + W_CAT * seen[key], d_ + W_CAT
            num[i, j], den[i, j] = n_, d_


def affinity_matrix(like, sim, floors, gates, provenance, foreign_min_appearance, structure, keypoints, propagation,
                    ref_attrs, obs_attrs, ref_categories, obs_categories) -> np.ndarray:
    """n x m weighted mean of the evidence each eligible pair has (attributes, category, structure,
    keypoints, appearance, propagation; weights renormalised), NaN where the pair is not eligible."""
    ok = eligibility(like, floors, gates, provenance, foreign_min_appearance)
    num, den = evidence_sums(sim, structure, keypoints, propagation)
    _label_terms(num, den, ok, ref_attrs, obs_attrs, ref_categories, obs_categories)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(ok, num / np.where(ok, den, 1.0), np.nan)


def associate(
    ref_emb: np.ndarray | None,
    obs_emb: np.ndarray | None,
    ref_categories: list[str],
    obs_categories: list[str | None],
    ref_attrs: list[dict],
    obs_attrs: list[dict],
    gates: np.ndarray | None,
    obs_boxes: list,
    *,
    threshold: float = DEFAULTS.threshold,
    margin: float = DEFAULTS.ambiguity_margin,
    min_appearance: float = DEFAULTS.min_likeness,
    distinct_iou: float = 0.3,
    provenance: np.ndarray | None = None,
    foreign_min_appearance: float = DEFAULTS.foreign_min_appearance,
    instance_min_appearance: list[float] | None = None,
    structure: np.ndarray | None = None,
    keypoints: np.ndarray | None = None,
    propagation: np.ndarray | None = None,
) -> Association:
    """`provenance[i, j]` is true when observation j was found by searching for instance i (or by a
    search that names no instance); an observation found for another instance needs the higher
    `foreign_min_appearance` likeness before it can be matched to i.

    `structure[i, j]` in [0, 1] is colour-invariant structure likeness and `keypoints[i, j]` in [0, 1]
    the instance's own keypoint evidence (NaN: none). With `structure`, the floors `min_appearance`,
    `foreign_min_appearance` and `instance_min_appearance` apply to the likeness max(structure, keypoints)
    instead of the embedding cosine. `propagation[i, j]` in [0, 1] is a verified propagated mask's evidence
    for its own instance (NaN elsewhere); it counts as likeness and as an affinity term."""
    from scipy.optimize import linear_sum_assignment

    n, m = len(ref_categories), len(obs_categories)
    aff = np.full((n, m), np.nan)
    sim = np.full((n, m), np.nan)
    if n == 0 or m == 0:
        return Association(aff, sim, [None] * n, [False] * n, np.full((n, m), np.nan))
    if ref_emb is not None and obs_emb is not None:
        a = ref_emb / (np.linalg.norm(ref_emb, axis=1, keepdims=True) + 1e-12)
        b = obs_emb / (np.linalg.norm(obs_emb, axis=1, keepdims=True) + 1e-12)
        sim = a @ b.T
    like = sim if structure is None else likeness_matrix(structure, keypoints, propagation)
    floors = instance_floors(n, min_appearance, instance_min_appearance)
    aff = affinity_matrix(like, sim, floors, gates, provenance, foreign_min_appearance, structure, keypoints, propagation,
                          ref_attrs, obs_attrs, ref_categories, obs_categories)
    cost = np.where(np.isfinite(aff), -aff, 1e3)
    rows, cols = linear_sum_assignment(cost)
    match: list[int | None] = [None] * n
    for r, c in zip(rows, cols):
        if np.isfinite(aff[r, c]) and aff[r, c] >= threshold:
            match[r] = int(c)
    followed = np.isfinite(propagation) if propagation is not None else None
    if followed is not None:
        _prefer_followed(aff, match, followed, threshold=threshold, margin=margin)
    ambiguous = _ambiguous(aff, match, obs_boxes, threshold=threshold, margin=margin, distinct_iou=distinct_iou, followed=followed)
    for i in range(n):
        if ambiguous[i]:
            match[i] = None
    return Association(aff, sim, match, ambiguous, like)


def _prefer_followed(aff, match, followed, *, threshold, margin) -> None:
    """Where an instance's best observation is a search find and its own verified propagated mask
    (free, above the threshold) comes within the ambiguity margin, the mask is its match: a tie
    between a look-alike found in one frame and the object followed from I0 is not a tie."""
    taken = {c for c in match if c is not None}
    for i, j in enumerate(match):
        if j is None or followed[i, j]:
            continue
        for j2 in np.flatnonzero(followed[i]):
            if j2 not in taken and np.isfinite(aff[i, j2]) and aff[i, j2] >= max(threshold, aff[i, j] - margin):
                taken.discard(j)
                taken.add(int(j2))
                match[i] = int(j2)
                break


def _ambiguous(aff, match, obs_boxes, *, threshold, margin, distinct_iou, followed=None) -> list[bool]:
    """`followed[i, j]`: observation j is instance i's verified propagated mask. Matched to it, the
    instance is not ambiguous with a look-alike elsewhere (a pasted copy): the mask followed the
    object from I0 through every frame in between, where a search find judges one frame alone."""
    n, m = aff.shape
    assigned = np.zeros(m, bool)
    assigned[[c for c in match if c is not None]] = True
    unmatched = np.array([c is None for c in match], bool)
    finite = np.isfinite(aff)
    ambiguous = [False] * n
    for i, j in enumerate(match):
        if j is None:
            continue
        best = aff[i, j]
        # another, spatially distinct observation almost as good for this instance (a followed
        # mask has no such rival)
        if followed is None or not followed[i, j]:
            close = finite[i] & (np.where(finite[i], aff[i], -np.inf) >= best - margin) & ~assigned
            close[j] = False
            if any(box_iou(obs_boxes[j], obs_boxes[j2]) < distinct_iou for j2 in np.flatnonzero(close)):
                ambiguous[i] = True
        # another instance, left without a match, that wants this observation almost as much
        col = np.where(finite[:, j], aff[:, j], -np.inf)
        rivals = unmatched & finite[:, j] & (col >= best - margin) & (col >= threshold)
        rivals[i] = False
        if rivals.any():
            ambiguous[i] = True
            for i2 in np.flatnonzero(rivals):
                ambiguous[int(i2)] = True
    return ambiguous
