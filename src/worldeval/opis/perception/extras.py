"""Extras stage: unmatched observations that count as extra objects (SPEC section 3).

Only inside the part of the frame that shows content seen in I0 (needs a
reliable camera), and never when the observation can be attributed to a
reference instance that is not accounted for (occluded, out of view, unknown),
to a matched observation, or to the projected place of a static instance.
Two routes:

* the segmenter's unmatched observations: its own detections for an inventory
  phrase (route `open` with a category, e.g. the hf backend's SAM 3 segments) count
  whatever they look like; finds of a search for an instance (and phrase-less
  segments) must look like an object (resemble an inventory object at least
  `extras.min_similarity`, and nearly as much as that object's own match when it
  has one: a second copy), or be a strong find, and in every case show that
  object's grey-level structure or keypoints (likeness >= `min_likeness`);
* new content (`changes.py`): compact regions where the frame differs from I0
  warped by the camera, whatever they look like; attributable when an unaccounted
  instance's structure likeness reaches `min_likeness`.
"""

from __future__ import annotations

import numpy as np

from worldeval.geometry import MaskStats, box_iou, mask_box, same_place
from worldeval.opis.backends.base import ROUTE_OPEN, ROUTE_PROJECTION, ROUTE_PROPAGATED, ROUTE_TEMPLATE, Observation
from worldeval.opis.perception import projection as P
from worldeval.opis.perception.changes import change_candidates
from worldeval.opis.perception.likeness import structure_similarity
from worldeval.opis.perception.persistent import ROUTE_PERSISTENT

UNACCOUNTED = (P.OCCLUDED, P.OUT_OF_VIEW, P.UNKNOWN, P.TOO_SMALL)  # reference states an unmatched find may be
WHOLE = 0.85  # completeness a strong find needs to count as a copy on its own


def strong_find(o, config, box=None) -> bool:
    """A whole second find by the instance's own keypoints, or by a near-perfect template correlation:
    a copy of it even on another background. Not the correlation of a small template (`box`, the
    instance's I0 box, under `small_side` px on average): a 28 x 34 px candle correlates with any bright
    fold of a curtain."""
    whole = o.completeness >= WHOLE
    by_features = o.feature_score >= config.extras.feature_score and whole
    distinctive = box is None or np.sqrt(max(0.0, box[2] * box[3])) >= config.association.small_side
    return by_features or (o.route == ROUTE_TEMPLATE and o.score >= config.extras.template_score and whole and distinctive)


def _explained(st, j: int, i_best: int, strong: bool, matched: set, conf: float, config, stats: MaskStats | None = None) -> bool:
    """The candidate is a piece of a matched object, lies at a projected place, or may be an
    instance that is not accounted for (unless it clearly looks like another one)."""
    o, obs, sim = st.obs[j], st.obs, st.assoc.similarity
    # A strong find may stand inside a larger object (a copy on a table), but never inside the
    # object it resembles: then it is a piece of that object found again.
    # The label of the object's own propagated mask can spread onto a look-alike beside it: a copy
    # there lies partly inside the mask, a piece of the object mostly (more than half).
    own = st.assoc.match[i_best]
    if any(same_place(o.mask, obs[k].mask, strong and k != own, 0.5 if k == own and obs[k].route == ROUTE_PROPAGATED else 0.2,
                      stats) for k in matched):
        return True
    if any(pr is not None and pr.mask is not None and same_place(o.mask, pr.mask, strong and i != i_best, stats=stats)
           for i, pr in enumerate(st.projs)):
        return True
    for i in range(st.n):
        if st.assoc.match[i] is None and st.visibility[i] in UNACCOUNTED:
            if np.isfinite(sim[i, j]) and sim[i, j] >= max(config.association.threshold, conf - config.extras.margin):
                return True
    return False



def persistent_candidates(st) -> list[Observation]:
    """The propagation grid's new static content in this frame (`persistent.py`), as observations; a
    region at a matched observation's place or a static instance's projected place is not new."""
    masks = st.propagated.new_content if st.propagated is not None else []
    if not masks:
        return []
    stats = MaskStats()
    # a small thing inside a much larger matched object may be new (a cup on a table). A matched
    # propagated mask is no place here: the route already keeps out its instance's label carried along
    # its track, and the mask (raw labels at `mask_threshold`) spreads over new things beside the track
    # (tuning, bmx-trees: the rider's mask over a third of a cat pasted 100 px from him)
    places = [(st.obs[j].mask, True) for j in st.assoc.match if j is not None and st.obs[j].route != ROUTE_PROPAGATED]
    places += [(pr.mask, False) for pr in st.projs if pr is not None and pr.mask is not None]
    out = []
    for m in masks:
        if any(same_place(m, p, allow_inside_larger=a, stats=stats) for p, a in places):
            continue
        box = mask_box(m)
        out.append(Observation(mask=m, box=box, category=None, score=float(m.sum()) / max(1.0, box[2] * box[3]),
                               source=ROUTE_PERSISTENT, route=ROUTE_PERSISTENT))
    return out


def new_content_extras(st, cands: list[Observation], config) -> None:
    """Add confirmed new-content candidates (change or persistent route) to the observations and the extras."""
    cands = [c for c in cands if not any(same_place(c.mask, st.obs[k].mask) for k in st.extras)]
    if not cands:
        return
    corr, energy = structure_similarity(st.bank, st.frame, cands)
    like = np.clip(corr, 0, 1) * np.minimum(1.0, energy / config.association.min_edge_energy)
    open_i = [i for i in range(st.n) if st.assoc.match[i] is None and st.visibility[i] in UNACCOUNTED]
    for c, col in zip(cands, like.T):
        if open_i and float(np.max(col[open_i])) >= config.association.min_likeness:
            continue
        st.obs.append(c)
        st.extras.append(len(st.obs) - 1)


def _like_enough(likeness, i: int, j: int, floor: float) -> bool:
    if likeness is None or not likeness.size:
        return True  # callers without a likeness matrix: appearance alone, as before
    v = likeness[i, j]
    return bool(np.isfinite(v) and v >= floor)


def confirm_extras(st, config) -> None:
    st.extras = []
    seen = P.frame_seen_region(st)
    if seen is not None:
        search_extras(st, seen, config)
        new_content_extras(st, change_candidates(st, seen), config)
    # the persistent route carries its own view of what I0 showed (the chained background), so it
    # names extras where the frame's camera cannot
    new_content_extras(st, persistent_candidates(st), config)


def search_extras(st, seen, config) -> None:
    if not len(st.obs):
        return
    assoc, sim = st.assoc, st.assoc.similarity
    matched = {j for j in assoc.match if j is not None}
    stats = MaskStats()
    for j, o in enumerate(st.obs):
        # a propagated mask is a reference instance carried forward, never a new object
        if j in matched or o.route in (ROUTE_PROJECTION, ROUTE_PROPAGATED) or not P.in_seen_region(o, seen, st.shape):
            continue
        col = sim[:, j] if sim.size else np.array([])
        if not len(col) or not np.isfinite(col).any():
            continue
        i_best = int(np.nanargmax(col))
        conf = float(col[i_best])
        # a segmenter's own detection for an inventory phrase is an object whatever it looks like
        # (SPEC section 3); a search find, or a phrase-less segment (SAM 2's point grid segments
        # the background too), is one only if it looks like an inventory object
        own = o.route == ROUTE_OPEN and o.category is not None
        strong = own or strong_find(o, config, st.bank.boxes[i_best])
        if not own and conf < config.extras.min_similarity:
            continue
        # a search find is a copy only if it is the object in grey-level structure or keypoints too,
        # not just a bright thin shape that correlates with the template (a mast beside a rocket)
        if not own and not _like_enough(assoc.likeness, i_best, j, config.association.min_likeness):
            continue
        # a weak find counts only as a second copy of an object matched elsewhere in the frame
        if not strong and (st.appearance[i_best] is None or conf < st.appearance[i_best] - config.extras.margin):
            continue
        if _explained(st, j, i_best, strong, matched, conf, config, stats):
            continue
        if any(box_iou(o.box, st.obs[k].box) > 0.3 for k in st.extras):
            continue
        st.extras.append(j)
