"""One sampled frame through the OPIS measurement pipeline (paper section 4).

`measure_frame` is the whole per-frame evaluator as a sequence of named stages
over one `FrameState`; each stage reads what earlier stages put there and adds
its own part:

    camera     -> cam                 I0 -> frame camera from background correspondences
    project    -> projs               static instances' projected places and visibility states
    observe    -> obs                 backend segmenter's observations of the frame (a segmenter that
                                      searches for lost instances only: where the camera's gate lets a
                                      find match), and its finds of dynamic instances at the frame's
                                      moving parts (classical)
    propagate  -> obs                 verified propagated masks
    propose    -> obs                 place proposals where the camera puts a static instance
    embed      -> obs[*].embedding    appearance descriptors of observations without one that a rule
                                      can read (eligible for an instance on the descriptor-free
                                      evidence, or a possible extra)
    associate  -> assoc               gates, provenance and keypoint support, one-to-one matching
    identity   -> ambiguous, visibility, appearance
    occlusion  -> visibility          unmatched static instances covered by a nearer matched or dynamic object
    extras     -> extras              unmatched observations that count as extra objects
    structure  -> structure, structure_source

`frame_records` turns the finished state into archive rows and per-frame records;
`checks` says which evidence checks a backend lets run (the run manifest's `checks`).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field

import numpy as np

from worldeval.geometry import box_iou
from worldeval.opis.backends.base import (EVIDENCE_COMPLETENESS, EVIDENCE_FEATURE_SCORE, EVIDENCE_FOUND_FOR, Backend,
                                          LostOnlySegmenter, Observation, PropagationEvidence)
from worldeval.opis.case import encode_rle
from worldeval.opis.labels import TRACKS, Status
from worldeval.opis.perception import projection as P
from worldeval.opis.perception.association import Association, gate_zone
from worldeval.opis.perception.camera import CameraEstimate, camera_record, estimate_camera
from worldeval.opis.perception.config import EvalConfig
from worldeval.opis.perception.extras import confirm_extras
from worldeval.opis.perception.identity import associate_observations, descriptors_needed, identify, pair_evidence
from worldeval.opis.perception.motion import frames_moving_parts, motion_proposals, wants_motion
from worldeval.opis.perception.places import propose_places
from worldeval.opis.perception.propagation import PropagatedFrame, needs_find, propagated_observations, verified
from worldeval.opis.perception.reference import ReferenceBank
from worldeval.opis.perception.structure import measure_structure


@dataclass
class FrameState:
    """Everything the stages know about one frame; lists are per reference instance unless noted."""

    bank: ReferenceBank
    frame: np.ndarray  # H x W x 3 RGB
    index: int  # frame number in the rollout
    obs: list[Observation] = field(default_factory=list)  # per observation
    cam: CameraEstimate | None = None
    projs: list[P.Projection | None] = field(default_factory=list)
    assoc: Association | None = None
    ambiguous: list[bool] = field(default_factory=list)
    visibility: list[str] = field(default_factory=list)
    appearance: list[float | None] = field(default_factory=list)
    extras: list[int] = field(default_factory=list)  # observation indices
    structure: list[float | None] = field(default_factory=list)
    structure_source: list[str | None] = field(default_factory=list)
    frame_depth: tuple | None = None  # (depth, K) of the frame from the backend's depth model, when asked for
    neighbours: list[np.ndarray] = field(default_factory=list)  # video frames next to this one (motion proposals)
    propagated: PropagatedFrame | None = None  # this frame's labels from the propagation stage, when it ran
    propagation: dict[int, PropagationEvidence | None] = field(default_factory=dict)  # instance -> its propagated mask's evidence, verified or not
    propagated_obs: list[Observation] | None = None  # the propagated masks as observations (`propagated_finds`)
    reasons: dict[int, str] = field(default_factory=dict)  # instance -> why its state is what it is, where a rule says
    seen: tuple | None = None  # (camera, its `projection.seen_region`): `projection.frame_seen_region`'s cache

    @property
    def shape(self) -> tuple[int, int]:
        return self.frame.shape[:2]

    @property
    def n(self) -> int:
        return len(self.bank)


@dataclass
class FrameResult:
    rows: list[dict]  # archive rows without the rollout's common columns, frame and time
    objects: list[dict]  # the per-frame record's objects
    masks: dict[str, np.ndarray]  # instance id -> matched observation mask
    camera: dict = field(default_factory=dict)  # the per-frame record's camera: support, correspondences, held-out error


def checks(backend: Backend, judge=None) -> dict[str, bool]:
    """Which of the pipeline's evidence checks run with this backend (and judge); false ones are skipped.

    keypoint_support: a template-only or weak find of a static instance must show the instance's own
        I0 keypoints (needs a matcher that detects keypoints: `Matcher.detects_keypoints`);
    search_provenance: an observation found by searching for one instance needs a clearer likeness
        to match another (needs `Observation.found_for`);
    extras_by_keypoints / extras_by_template: a whole second find by the instance's keypoints / a
        near-perfect template correlation counts as an extra copy even when it resembles the object
        less than its match (needs `Observation.feature_score` and `Observation.completeness`);
    place_proposals, static_structure: always (they need only `Matcher.match`);
    motion_proposals: the segmenter frames its dynamic instances where the frame moves unlike its
        background, from the neighbouring video frames (a `MovingPartsSegmenter` that does so in this
        run: classical with motion=on; cases with a dynamic instance only);
    pose_structure: a pose estimator is present; claims_structure: a judge is configured.
    """
    ev = backend.segmenter.evidence
    return {
        "keypoint_support": bool(backend.matcher.detects_keypoints),
        "search_provenance": EVIDENCE_FOUND_FOR in ev,
        "extras_by_keypoints": EVIDENCE_FEATURE_SCORE in ev and EVIDENCE_COMPLETENESS in ev,
        "extras_by_template": EVIDENCE_COMPLETENESS in ev,
        "place_proposals": True,
        "motion_proposals": frames_moving_parts(backend),
        "static_structure": True,
        "pose_structure": backend.pose is not None,
        "claims_structure": judge is not None,
    }


def observe(st: FrameState, backend: Backend, config: EvalConfig | None = None) -> None:
    seg = backend.segmenter
    if isinstance(seg, LostOnlySegmenter) and seg.searches_lost_only:
        places = search_places(st, config)
        found = seg.observe(st.frame, st.bank.categories, reference=st.bank, followed=followed_instances(st, config),
                            windows=zones_of(places, st.shape, config), gated=camera_places(st), places=places)
    else:
        found = seg.observe(st.frame, st.bank.categories, reference=st.bank)
    st.obs = list(found)


def propagated_finds(st: FrameState, config: EvalConfig) -> list[Observation]:
    """The frame's propagated masks as observations, verified or not (computed once per frame)."""
    if st.propagated_obs is None:
        st.propagated_obs = [] if st.propagated is None else propagated_observations(
            st.bank, st.frame, st.propagated, config.propagation.mask_threshold)
    return st.propagated_obs


def followed_instances(st: FrameState, config: EvalConfig | None) -> set[int]:
    """Instances whose verified propagated mask stands for them in this frame, for a segmenter that then
    searches only for the others (`LostOnlySegmenter`: the classical backend's search=lost)."""
    return set(followed_masks(st, config))


def followed_masks(st: FrameState, config: EvalConfig | None) -> dict[int, Observation]:
    """Instance -> its propagated mask, for the instances that mask stands for (`followed_instances`)."""
    if config is None or st.propagated is None:
        return {}
    id_index = {k: i for i, k in enumerate(st.bank.ids)}
    followed = {}
    for o in propagated_finds(st, config):
        i = id_index[o.found_for[0]]
        # a weak static mask needs its own find (`propagate`), so the search still looks for it
        if verified(o.propagation, config) and not needs_find(o.propagation, st.bank.tracks[i], config):
            followed[i] = o
    return followed


def search_windows(st: FrameState, config: EvalConfig | None) -> dict[int, tuple | None]:
    """Where a search find could match each static instance the camera places: the zone (x0, y0, x1, y1)
    its box centre must lie in to pass the geometric gate (`association.gate_zone`: the projected
    box grown by half its size on each side and the gate's margin), or None where no search find can
    match it (out of view, or no part of it projected into the frame: only its own propagated mask
    may). Instances the camera does not place are absent: they are searched over the whole frame.
    A find outside the zone could only have been an extra or another instance's match; such finds
    are no longer made (docs/validation.md, "Search where the gate lets a find match").
    Where the camera is unreliable, the chained background may place the static instances instead
    (`chain_places`, where propagation confirms the chain; the option `propagation.chain_zones`)."""
    return zones_of(search_places(st, config), st.shape, config)


def zones_of(places: dict[int, tuple | None], shape, config: EvalConfig | None) -> dict[int, tuple | None]:
    """Each placed instance's box (`search_places`) grown into the zone the gate admits a find's centre in."""
    if config is None:
        return {}
    tol = config.association.gate_tolerance
    return {i: None if b is None else gate_zone(b, shape, tol) for i, b in places.items()}


def search_places(st: FrameState, config: EvalConfig | None) -> dict[int, tuple | None]:
    """Where each static instance should be in this frame (x, y, w, h): its box as a reliable camera projects
    it, or else as the chained background carries it (`chain_places`); None where no search find can match
    it. The places a search starts from (a segmenter with `places`) and the zones it keeps to (`zones_of`)."""
    if config is None:
        return {}
    if not camera_places(st):
        return chain_places(st, config)
    out: dict[int, tuple | None] = {}
    for i, pr in enumerate(st.projs):
        if pr is None or st.bank.tracks[i] != "static":
            continue
        gone = pr.state == P.OUT_OF_VIEW or pr.box is None
        out[i] = None if gone else tuple(float(v) for v in pr.box)
    return out


def camera_places(st: FrameState) -> bool:
    """Whether a reliable camera projected the instances (their search zones are then its geometric gates)."""
    return st.cam is not None and st.cam.reliable and bool(st.projs)


def chain_places(st: FrameState, config: EvalConfig) -> dict[int, tuple | None]:
    """Places of the static instances from the chained background (`PropagatedFrame.background`),
    for a frame whose camera is unreliable: each I0 box carried by the chain; None where the carried
    box lies wholly outside the frame. Short steps between grid frames hold where one fit from I0
    does not (a moving subject, a small background), and each static instance otherwise costs a scan
    of the whole frame. The place only says where to search: with no reliable camera there is still no
    geometric gate in association. A chain step can be fitted wrong, and nothing in the chain shows it
    (on a held-out dense clip one put in-view objects outside the frame), so the places stand only in
    frames where propagation confirms them (`chain_agrees`, on their gate zones); in the others the
    frame is searched whole (docs/validation.md, "Search zones from the chained background")."""
    H = st.propagated.background if (config.propagation.chain_zones and st.propagated is not None) else None
    if H is None:
        return {}
    places = carried_boxes(st, H)
    return places if chain_agrees(st, zones_of(places, st.shape, config), config) else {}


def carried_boxes(st: FrameState, H: np.ndarray) -> dict[int, tuple | None]:
    """Each static instance's I0 box carried by the homography H (I0 -> frame) as the box of its four
    corners; None where it lies wholly outside the frame (absent where a corner falls behind the camera)."""
    fh, fw = st.shape
    out: dict[int, tuple | None] = {}
    for i, (x, y, w, h) in enumerate(st.bank.boxes):
        if st.bank.tracks[i] != "static":
            continue
        corners = np.array([[x, y, 1], [x + w, y, 1], [x, y + h, 1], [x + w, y + h, 1]], np.float64) @ H.T
        if not np.all(corners[:, 2] > 1e-9):
            continue  # a corner behind the camera: the chain does not place it
        xy = corners[:, :2] / corners[:, 2:]
        x0, y0 = xy.min(0)
        x1, y1 = xy.max(0)
        out[i] = None if (x1 <= 0 or y1 <= 0 or x0 >= fw or y0 >= fh) else (float(x0), float(y0), float(x1 - x0), float(y1 - y0))
    return out


def chain_agrees(st: FrameState, zones: dict[int, tuple | None], config: EvalConfig) -> bool:
    """Whether propagation, an independent cue, confirms the chain in this frame: of the static instances
    it follows (`followed_instances`), at least `propagation.chain_min_followed`, and at least the share
    `propagation.chain_agreement` of them have their propagated mask's box centre inside their carried
    zone. A chain step fitted wrong moves every carried box alike, so the instances propagation
    follows show it; with too few of them nothing shows it, and the frame is searched whole."""
    static = [(i, o) for i, o in followed_masks(st, config).items() if st.bank.tracks[i] == "static"]
    inside = 0
    for i, o in static:
        x, y, w, h = o.box
        z = zones.get(i)
        inside += z is not None and z[0] <= x + w / 2 <= z[2] and z[1] <= y + h / 2 <= z[3]
    count = len(static)
    p = config.propagation
    return count >= p.chain_min_followed and inside >= p.chain_agreement * count


def propose_moving(st: FrameState, backend: Backend) -> None:
    if not (st.neighbours and wants_motion(st.bank, backend)):
        return
    # The moving parts say where an object is, not which or how framed: the segmenter frames its
    # instances there, and only those finds become observations (a bare blob matched nothing on the
    # tuning clip, and would cost an embedding each).
    moving = motion_proposals(st.frame, st.neighbours)
    placed = backend.segmenter.observe_moving(st.frame, moving, st.bank) if moving else []
    known = [o.box for o in st.obs]
    st.obs.extend(o for o in placed if not any(box_iou(o.box, b) > 0.8 for b in known))


def propagate(st: FrameState, config: EvalConfig) -> None:
    """Verified propagated masks join the observations; association weighs them against the search finds."""
    if st.propagated is None:
        return
    id_index = {k: i for i, k in enumerate(st.bank.ids)}
    for o in propagated_finds(st, config):
        st.propagation[id_index[o.found_for[0]]] = o.propagation
        if not verified(o.propagation, config):
            continue
        same = [q for q in st.obs if q.found_for == o.found_for and box_iou(q.box, o.box) >= config.propagation.same_place]
        if not same and needs_find(o.propagation, st.bank.tracks[id_index[o.found_for[0]]], config):
            continue
        # A search find of the same instance at the same place is the same object found twice; the
        # propagated mask keeps its shape (a template keeps I0's), so it stands for both. Finds
        # elsewhere stay and compete in association: propagation can drift onto a neighbour, and a
        # find inside the propagated mask may be a copy the mask spread over (a duplicated object).
        st.obs = [q for q in st.obs if not any(q is s for s in same)]
        st.obs.append(o)


def camera(st: FrameState, backend: Backend, config: EvalConfig) -> None:
    st.cam = estimate_camera(st.bank, st.frame, backend.matcher, holdout=config.camera.holdout, seed=config.seed)


def project(st: FrameState, config: EvalConfig) -> None:
    st.projs = P.project_instances(st.bank, st.cam, st.shape, min_in_view=config.camera.min_in_view, min_side_px=config.camera.min_side_px)


def propose(st: FrameState, backend: Backend, config: EvalConfig) -> None:
    st.obs.extend(propose_places(st, backend.matcher, config))


def embed(st: FrameState, backend: Backend, needed: np.ndarray | None = None) -> None:
    """Descriptors of the observations without one; with `needed` (`identity.descriptors_needed`) only of
    those a rule can read, topped up with others to the embedder's `min_batch` where the frame has that
    many (so each descriptor is computed in the same kind of batch as with all of them)."""
    todo = [k for k, o in enumerate(st.obs) if o.embedding is None]
    if needed is not None and todo:
        want = [k for k in todo if needed[k]]
        spare = [k for k in todo if not needed[k]]
        todo = sorted(want + spare[: max(0, min(len(todo), backend.embedder.min_batch) - len(want))])
    if todo:
        embs = backend.embedder.embed(st.frame, [st.obs[k].mask for k in todo], [st.obs[k].box for k in todo])
        for k, e in zip(todo, embs):
            st.obs[k].embedding = np.asarray(e, np.float32)


def measure_frame(bank: ReferenceBank, frame: np.ndarray, backend: Backend, config: EvalConfig, judge=None,
                  index: int = 0, timer=None, observations: list | None = None,
                  neighbours: list[np.ndarray] | None = None, propagated: PropagatedFrame | None = None) -> FrameResult:
    """Measure one frame: the stages in order (`timer(stage)` is a context manager summing seconds).

    `observations`: the segmenter's observations of this frame when already made in a batch of frames.
    `neighbours`: the video's frames `motion.neighbour_offset` before and after this one, for the
    moving-object proposals of a segmenter that asks for them (none: no motion proposals).
    `propagated`: this frame's `propagation.PropagatedFrame` (none: the propagation stage did not run).
    """
    timer = timer or (lambda stage: nullcontext())
    st = FrameState(bank=bank, frame=frame, index=index, neighbours=list(neighbours or []), propagated=propagated)
    # the camera first: it reads only I0 and the frame, and its projections say where a search find could match
    with timer("camera"):
        camera(st, backend, config)
        project(st, config)
    with timer("observation"):
        if observations is None:
            observe(st, backend, config)
        else:
            st.obs = list(observations)
        propose_moving(st, backend)
    with timer("propagation"):
        propagate(st, config)
    with timer("camera"):
        propose(st, backend, config)
    with timer("association"):
        evidence = pair_evidence(st, backend.matcher, config)
        needed = descriptors_needed(st, evidence, config)
    with timer("embedding"):
        embed(st, backend, needed)
    with timer("association"):
        associate_observations(st, backend.matcher, config, backend.embedder, evidence)
        identify(st, config, backend.embedder)
        P.resolve_occlusion(st, config)
        confirm_extras(st, config)
    with timer("structure"):
        measure_structure(st, backend, config, judge)
    return frame_records(st)


def _box_list(b) -> list[float] | None:
    return None if b is None else [round(float(v), 2) for v in b]


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 4)


def _evidence_record(ev) -> dict | None:
    """The instance's propagated mask in this frame (whether or not it was verified), for reports and audits."""
    if ev is None:
        return None
    return {"mass": _round(ev.mass), "confidence": _round(ev.confidence), "object_share": _round(ev.object_share),
            "carried": _round(ev.carried), "core": _round(ev.core)}


def frame_records(st: FrameState) -> FrameResult:
    """Archive rows (one per instance, one per extra) and the per-frame record's objects."""
    bank, obs = st.bank, st.obs
    rows, objects, masks = [], [], {}
    for i in range(st.n):
        j = st.assoc.match[i]
        # An unlabeled or excluded instance has no Structure track: its structure never enters a score.
        structured = bank.archive_tracks[i] in TRACKS
        rows.append({
            "instance_id": bank.ids[i], "track": bank.archive_tracks[i], "visibility": st.visibility[i],
            "matched": j is not None, "ambiguous": st.ambiguous[i], "extra": False, "appearance": st.appearance[i],
            "structure": st.structure[i] if structured else None,
            "structure_source": st.structure_source[i] if structured else None,
        })  # fmt: skip
        rle = None
        if j is not None:
            status, box = Status.MATCHED, obs[j].box
            masks[bank.ids[i]] = obs[j].mask
            rle = encode_rle(obs[j].mask)
        elif st.ambiguous[i]:
            status, box = Status.AMBIGUOUS, None
        else:
            status = {P.EXPECTED: Status.MISSING}.get(st.visibility[i], st.visibility[i])
            box = st.projs[i].box if st.projs[i] is not None else None
        objects.append({
            "instance_id": bank.ids[i], "category": bank.categories[i], "status": status, "box": _box_list(box),
            "appearance": _round(st.appearance[i]), "structure": _round(st.structure[i]),
            # the matched observation's own mask (COCO RLE; its box is `box`), for audits against ground truth
            "mask": rle, "route": obs[j].route if j is not None else None,
            "propagation": _evidence_record(st.propagation.get(i)),
        })  # fmt: skip
        if i in st.reasons:
            objects[-1]["reason"] = st.reasons[i]
    for j in st.extras:
        rows.append({
            "instance_id": None, "track": None, "visibility": None, "matched": False, "ambiguous": False, "extra": True,
            "appearance": None, "structure": None, "structure_source": None,
        })  # fmt: skip
        objects.append({
            "instance_id": None, "category": obs[j].category, "status": Status.EXTRA, "box": _box_list(obs[j].box),
            "appearance": None, "structure": None, "route": obs[j].route,
        })  # fmt: skip
    return FrameResult(rows, objects, masks, camera_record(st.cam))
