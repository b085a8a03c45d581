"""Association and identity stages: which observation is which reference instance, and how alike they are.

`associate_observations` builds the eligibility of every (instance, observation)
pair (geometric gate, search provenance, keypoint support) and runs the
one-to-one association; `identify` turns its result into the ambiguity flag,
visibility state and appearance score of each instance (paper section 4.1-4.2).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from worldeval.opis.backends.base import ROUTE_MOVING, ROUTE_OPEN, ROUTE_PROJECTION, ROUTE_PROPAGATED, AppearanceEmbedder
from worldeval.opis.perception import projection as P
from worldeval.opis.perception.association import associate, eligibility, geometric_gates_for, instance_floors, likeness_matrix
from worldeval.opis.backends.efficientnet import cosine
from worldeval.opis.perception.likeness import structure_similarity
from worldeval.opis.perception.places import keypoint_support, support_needed
from worldeval.opis.perception.propagation import (mask_cover, part_match, propagated_visibility, propagation_evidence,
                                                   verified)
from worldeval.opis.scoring import TAU_I  # identity's tau_I: one home, the scoring rule's


def geometric_gates(st, config) -> np.ndarray:
    """n x m: a static instance the camera places may only match observations where it is projected."""
    bank, obs, n = st.bank, st.obs, st.n
    gates = np.ones((n, len(obs)), bool)
    if not obs or not st.cam.reliable:
        return gates
    id_index = {k: i for i, k in enumerate(bank.ids)}
    boxes = np.array([o.box for o in obs], np.float64).reshape(-1, 4)
    # each propagated mask's own instance (-1: none)
    owner = np.array([id_index.get(o.found_for[0] if o.found_for else None, -1) if o.route == ROUTE_PROPAGATED else -1
                      for o in obs])
    for i in range(n):
        if bank.tracks[i] != "static":
            continue
        pr = st.projs[i]
        if pr is None:
            gates[i] = False
            continue
        # mostly outside the frame by the camera, its own propagated mask at the part still in
        # view establishes that it is seen (a frame-filling couch under a zoom-in)
        seen = (owner == i) if pr.state == P.OUT_OF_VIEW else True
        gates[i] = geometric_gates_for(pr.box, boxes, st.shape, config.association.gate_tolerance) & seen
    return gates


def provenance(st) -> np.ndarray:
    """n x m: observation j was found by searching for instance i (an open detection: for every instance)."""
    bank = st.bank
    prov = np.ones((st.n, len(st.obs)), bool)
    id_index = {k: i for i, k in enumerate(bank.ids)}
    for j, o in enumerate(st.obs):
        owners = [w for w in o.found_for if w in id_index]
        if owners:
            prov[:, j] = False
            for w in owners:
                prov[id_index[w], j] = True
    return prov


def require_keypoint_support(st, gates: np.ndarray, matcher, config, structure: np.ndarray | None = None) -> None:
    """Close the gate of template-only (or weak keypoint-cluster) finds of a static instance that
    do not show its own keypoints (an inpainted smear can look right in colour).

    Texture-poor instances, which cannot show enough keypoints, are exempt, and so is a find whose
    grey-level structure matches the instance's firmly (`firm_likeness`; edge energy counted, so no
    smear reaches it): a recoloured object's luma changes, and with it its SIFT descriptors. With a
    matcher that detects no keypoints the check does not run (the run manifest says so).
    """
    if not st.cam.reliable:
        return
    bank = st.bank
    for i in range(st.n):
        if bank.tracks[i] != "static":
            continue
        need = support_needed(bank, i, st.cam, st.shape, matcher, config.structure.min_correspondences)
        if need == 0:
            continue
        for j, o in enumerate(st.obs):
            firm = o.feature_score >= config.extras.feature_score  # >= 8 SIFT inliers
            firm = firm or (structure is not None and structure[i, j] >= config.association.firm_likeness)
            # a propagated mask carries its own verification (its features against I0's)
            if not gates[i, j] or firm or o.route in (ROUTE_PROJECTION, ROUTE_PROPAGATED):
                continue
            if keypoint_support(bank, i, st.frame, matcher, o.box) < need:
                gates[i, j] = False


def structure_evidence(st, config) -> np.ndarray:
    """n x m colour-invariant structure likeness in [0, 1]: the structure correlation, scaled down where
    the observation shows much less edge energy than the reference (an inpainted smear)."""
    corr, energy = structure_similarity(st.bank, st.frame, st.obs)
    return np.clip(corr, 0.0, 1.0) * np.minimum(1.0, energy / config.association.min_edge_energy)


def keypoint_evidence(st) -> np.ndarray:
    """n x m: the score of a find by instance i's own I0 keypoints (a feature cluster or a supported
    projected place), NaN where the observation carries no keypoint evidence for i."""
    kp = np.full((st.n, len(st.obs)), np.nan)
    id_index = {k: i for i, k in enumerate(st.bank.ids)}
    for j, o in enumerate(st.obs):
        score = o.score if o.route == ROUTE_PROJECTION else o.feature_score
        if score <= 0:
            continue
        for w in o.found_for:
            if w in id_index:
                kp[id_index[w], j] = score
    return kp


def propagation_matrix(st) -> np.ndarray | None:
    """n x m: a verified propagated mask's evidence for its own instance (`propagation_evidence`), NaN elsewhere;
    None when the frame has no propagated observation."""
    if not any(o.route == ROUTE_PROPAGATED for o in st.obs):
        return None
    q = np.full((st.n, len(st.obs)), np.nan)
    id_index = {k: i for i, k in enumerate(st.bank.ids)}
    for j, o in enumerate(st.obs):
        if o.route == ROUTE_PROPAGATED and o.propagation is not None:
            for w in o.found_for:
                if w in id_index:
                    q[id_index[w], j] = propagation_evidence(o.propagation)
    return q


def _likeness_gates(st, gates: np.ndarray, route: str, floor: float) -> None:
    """Close the gate of every observation of `route` whose descriptor cosine with an instance is below `floor`."""
    if st.bank.embeddings is None:
        return
    for j, o in enumerate(st.obs):
        if o.route == route and o.embedding is not None:
            for i, ref in enumerate(st.bank.embeddings):
                gates[i, j] &= cosine(ref, o.embedding) >= floor


def moving_gates(st, gates: np.ndarray, config) -> None:
    """Close the gate of a find framed at a moving part (route `moving`) that does not look like the
    instance (descriptor cosine below `moving_min_similarity`): parallax moves parts of a static
    scene too, and a template framed there can show a passable grey-level structure."""
    _likeness_gates(st, gates, ROUTE_MOVING, config.association.moving_min_similarity)


def propagation_gates(st, gates: np.ndarray, config) -> None:
    """Close the gate of a propagated mask whose descriptor does not resemble its instance at all
    (cosine below `propagation.min_similarity`): a removed object's mask can survive on what was
    painted in its place, with features that still sit nearer I0's object than its background."""
    _likeness_gates(st, gates, ROUTE_PROPAGATED, config.propagation.min_similarity)


def lost_object_gates(st, gates: np.ndarray, config) -> None:
    """Where the propagation stage followed an instance and has no verified mask of it in this frame
    (it left, was covered, or what is at its place is not it), close the gate of every other find
    for it whose parts do not show the object's (`propagation.part_match` below the features'
    `part_floor`). The search judges a frame alone on grey-level structure, and once the object is
    gone its best place can be anything with a passable structure (a removed dog's smear: part match
    0.32, the dog itself 0.49-0.53); the object found again after an occlusion keeps its parts."""
    pf = st.propagated
    if pf is None or pf.part_floor is None:
        return
    for i in range(st.n):
        if verified(st.propagation.get(i), config):
            continue
        for j, o in enumerate(st.obs):
            if gates[i, j] and o.route != ROUTE_PROPAGATED:
                pm = part_match(pf, o.mask, i)
                gates[i, j] = pm is None or pm >= pf.part_floor


def propagation_support(st, i: int, mask: np.ndarray) -> float:
    """Mean over the mask's feature cells of instance i's label carried along its own track (0 without
    propagation): how much propagation says the object went there."""
    pf = st.propagated
    if pf is None or i + 1 >= pf.labels.shape[0]:
        return 0.0
    lab = pf.carried[i] if pf.carried is not None else pf.labels[i + 1]
    cover = mask_cover(pf, mask)
    total = float(cover.sum())
    return float((lab * cover).sum()) / total if total > 0 else 0.0


def pair_appearance(st, embedder, i: int, j: int) -> float | None:
    """Identity's appearance a_it of instance i and observation j, as `identify` would report it for a
    match (None without descriptors)."""
    e, bank = st.obs[j].embedding, st.bank
    if e is None or bank.embeddings is None:
        return None
    if isinstance(embedder, AppearanceEmbedder):
        return max(0.0, float(embedder.appearance(bank.embeddings[i], e, parts=_parts(st, i, j))))
    return max(0.0, float(cosine(bank.embeddings[i], e)))


def unsupported_gates(st, gates: np.ndarray, embedder, config) -> None:
    """Close the gate of a find for a moving instance that its own identity evidence rejects (appearance
    below tau_I) and that propagation does not support (its carried label there below
    `support_min_label`). In a crowd the search's best place for one person is often another person
    far from the first one's track, matched with appearance 0.00: the honest report is that the
    instance was not found (unknown), not that it changed. Its own propagated mask carries its own
    verification, and a static instance is gated by the camera."""
    if embedder is None:
        return
    for i in range(st.n):
        if st.bank.tracks[i] == "static":
            continue
        for j, o in enumerate(st.obs):
            if not gates[i, j] or o.route == ROUTE_PROPAGATED:
                continue
            if propagation_support(st, i, o.mask) >= config.association.support_min_label:
                continue
            a = pair_appearance(st, embedder, i, j)
            if a is not None and a < TAU_I:
                gates[i, j] = False


@dataclass
class PairEvidence:
    """What association knows of every (instance, observation) pair before any descriptor exists."""

    gates: np.ndarray  # n x m: the gates that read no descriptor (geometric, lost object, keypoint support)
    provenance: np.ndarray  # n x m (`provenance`)
    structure: np.ndarray | None  # n x m (`structure_evidence`); None without observations
    keypoints: np.ndarray | None  # n x m (`keypoint_evidence`)
    propagation: np.ndarray | None  # n x m (`propagation_matrix`)
    floors: list[float]  # per instance: the likeness it needs beyond `min_likeness`


def pair_evidence(st, matcher, config) -> PairEvidence:
    """The descriptor-free part of association's evidence. Every gate only closes pairs, so these gates
    and the descriptor ones (`descriptor_gates`) give the same eligibility in either order."""
    bank, obs = st.bank, st.obs
    gates = geometric_gates(st, config)
    lost_object_gates(st, gates, config)
    structure = structure_evidence(st, config) if obs else None
    require_keypoint_support(st, gates, matcher, config, structure)
    # where no geometric gate places the instance (dynamic, or static without a camera) only a clear
    # likeness may match it: a best-looking place of another clip reached 0.52 (DAVIS on the apple)
    floors = [config.association.ungated_min_appearance if (bank.tracks[i] != "static" or not st.cam.reliable) else 0.0
              for i in range(st.n)]
    return PairEvidence(gates, provenance(st), structure, keypoint_evidence(st) if obs else None, propagation_matrix(st), floors)


def descriptors_needed(st, ev: PairEvidence, config) -> np.ndarray:
    """Per observation: whether any rule can read its descriptor. One no instance may match whatever it
    looks like (no pair eligible on the descriptor-free evidence) and no extra rule may name (outside
    the seen part, a projected place or a propagated mask, or no instance's likeness reaching
    `min_likeness`) is never read: association's column of it is empty, and `extras.search_extras`
    passes it over. In a dense frame that is a quarter of the search finds (n25 bedroom)."""
    m = len(st.obs)
    if ev.structure is None:
        return np.ones(m, bool)
    like = likeness_matrix(ev.structure, ev.keypoints, ev.propagation)
    floors = instance_floors(st.n, config.association.min_likeness, ev.floors)
    need = eligibility(like, floors, ev.gates, ev.provenance, config.association.foreign_min_appearance).any(0)
    with np.errstate(invalid="ignore"):
        likely = (np.where(np.isfinite(like), like, -np.inf) >= config.association.min_likeness).any(0)
    seen = P.frame_seen_region(st)
    for j, o in enumerate(st.obs):
        if need[j]:
            continue
        if o.route == ROUTE_OPEN and o.category is not None:
            need[j] = True  # a segmenter's own detection for a phrase is an extra whatever it resembles
        elif seen is not None and likely[j] and o.route not in (ROUTE_PROJECTION, ROUTE_PROPAGATED):
            need[j] = P.in_seen_region(o, seen, st.shape)
    return need


def descriptor_gates(st, gates: np.ndarray, embedder, config) -> None:
    """The gates that read descriptors (closing pairs, in place)."""
    moving_gates(st, gates, config)
    propagation_gates(st, gates, config)
    unsupported_gates(st, gates, embedder, config)


def _descriptors(st) -> np.ndarray | None:
    """m x D observation descriptors, NaN rows where none was computed (`descriptors_needed`)."""
    obs = st.obs
    if not obs:
        return None
    known = [o.embedding for o in obs if o.embedding is not None]
    if len(known) == len(obs):
        return np.stack(known)
    dim = known[0].shape[0] if known else (st.bank.embeddings.shape[1] if st.bank.embeddings is not None else 0)
    if dim == 0:
        return None
    return np.stack([o.embedding if o.embedding is not None else np.full(dim, np.nan, np.float32) for o in obs])


def associate_observations(st, matcher, config, embedder=None, evidence: PairEvidence | None = None) -> None:
    """One-to-one association of the frame's observations (`evidence`: this frame's `pair_evidence`,
    computed here when not given)."""
    bank, obs = st.bank, st.obs
    ev = evidence or pair_evidence(st, matcher, config)
    gates = ev.gates.copy()
    descriptor_gates(st, gates, embedder, config)
    st.assoc = associate(
        bank.embeddings, _descriptors(st),
        bank.categories, [o.category for o in obs], bank.attributes, [o.attributes for o in obs],
        gates, [o.box for o in obs],
        threshold=config.association.threshold, margin=config.association.ambiguity_margin,
        min_appearance=config.association.min_likeness, provenance=ev.provenance,
        foreign_min_appearance=config.association.foreign_min_appearance, instance_min_appearance=ev.floors,
        structure=ev.structure, keypoints=ev.keypoints, propagation=ev.propagation,
    )  # fmt: skip


SMALL_FOR_IDENTITY = "small_for_identity"  # per-frame record reason: matched, too small to judge its identity


def small(bank, i: int, config) -> bool:
    """Instance i is under `small_side` pixels on average in I0 (square root of its box area)."""
    x, y, w, h = bank.boxes[i]
    return float(np.sqrt(max(0.0, w * h))) < config.association.small_side


def weak_static_tie(st, i: int, config) -> bool:
    """A tie between weak candidates for a static instance the camera places in view is no evidence
    that the object is there: it is reported by its projection (missing), not as unknown."""
    pr = st.projs[i]
    if st.bank.tracks[i] != "static" or pr is None or pr.state != P.EXPECTED:
        return False
    row = st.assoc.affinity[i]
    best = np.nanmax(row) if np.isfinite(row).any() else 0.0
    return bool(best < config.association.weak_tie_affinity)


def _parts(st, i: int, j: int) -> float | None:
    """The dense part match of instance i's matched observation j; None where the propagation stage did not run."""
    return None if st.propagated is None else part_match(st.propagated, st.obs[j].mask, i)


def identify(st, config, embedder=None) -> None:
    """Ambiguity, visibility and appearance per instance from the association.

    Appearance is the embedder's own `appearance` of the matched pair where it declares one
    (`AppearanceEmbedder`; with the frame's dense part match when the propagation stage ran), else
    the descriptors' cosine that association used.
    """
    assoc, bank = st.assoc, st.bank
    own = embedder.appearance if isinstance(embedder, AppearanceEmbedder) and bank.embeddings is not None else None
    st.ambiguous = [bool(assoc.ambiguous[i]) and not weak_static_tie(st, i, config) for i in range(st.n)]
    st.visibility, st.appearance = [], []
    for i in range(st.n):
        j = assoc.match[i]
        a = None
        if j is not None:
            e = st.obs[j].embedding
            if own is not None and e is not None:
                a = max(0.0, float(own(bank.embeddings[i], e, parts=_parts(st, i, j))))
            else:
                a = max(0.0, float(assoc.similarity[i, j]))
            if a < TAU_I and small(bank, i, config):
                # a few feature cells cannot tell a changed object from another one: not a failure
                assoc.match[i], a = None, None
                st.reasons[i] = SMALL_FOR_IDENTITY
        if a is not None:
            st.visibility.append(P.EXPECTED)
            st.appearance.append(a)
        elif i in st.reasons:
            st.visibility.append(P.UNKNOWN)
            st.appearance.append(None)
        elif st.ambiguous[i]:
            st.visibility.append(P.UNKNOWN)
            st.appearance.append(None)
        elif bank.tracks[i] == "static" and st.projs[i] is not None:
            st.visibility.append(st.projs[i].state)
            st.appearance.append(None)
        else:
            # no camera places it (a dynamic object): where its propagated mask went may still say why it is not seen
            st.visibility.append(propagated_visibility(st.propagated, i, st.propagation.get(i), config) or P.UNKNOWN)
            st.appearance.append(None)
