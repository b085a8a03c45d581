"""OPIS evaluation: from a case and a rollout video to measurement-archive rows (SPEC section 3).

`evaluate_rollout` runs the paper's evaluator on one (case, video): per sampled
frame it extracts observations, estimates the camera from background
correspondences, projects the static instances, associates observations with
the reference inventory, decides visibility, measures identity and structure
and confirms extras. `run_eval` does that for a dataset and a folder of
rollouts, writing a resumable run folder (parts, per-frame records, status
records, manifest); one item's failure is recorded and the run goes on.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from types import SimpleNamespace
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict

from worldeval.opis.archive import COLUMNS
from worldeval.opis.backends.base import Backend, Observation
from worldeval.opis.case import Case, CaseError, Geometry, default_intrinsics, encode_rle, load_case
from worldeval.opis.perception import projection as P
from worldeval.opis.perception.association import associate, box_iou, geometric_gate
from worldeval.opis.perception.camera import CameraEstimate, estimate_camera
from worldeval.opis.perception.reference import ReferenceBank, build_reference
from worldeval.opis.perception.structure import claims_structure, pose_structure, static_structure

STAGES = ("decode", "observation", "camera", "association", "embedding", "structure", "writing")
VIDEO_SUFFIXES = (".mp4", ".mov", ".mkv", ".webm", ".avi", ".m4v", ".gif")


class EvalConfig(BaseModel):
    """Evaluator settings; defaults are the paper's (section 5.1) where it gives one."""

    model_config = ConfigDict(extra="forbid")
    association_threshold: float = 0.35
    ambiguity_margin: float = 0.05
    min_appearance: float = 0.2  # appearance evidence a pair needs before category/attributes can count
    lambda_g: float = 0.05
    pose_tau: float = 0.2
    max_claims: int = 12
    claim_confidence: float = 0.7
    stride: int = 8
    skip_seconds: float = 1.0
    max_side: int | None = None  # decode frames at most this large (None: native size)
    foreign_min_appearance: float = 0.5  # appearance needed to match an observation another instance's search found
    weak_tie_affinity: float = 0.5  # a static instance's ambiguity between finds all below this counts as missing
    ungated_min_appearance: float = 0.5  # appearance a static instance needs when no reliable camera gates it
    gate_tolerance: float = 0.05  # geometric gate margin, share of the frame diagonal
    min_in_view: float = 0.5  # share of projected query points inside the frame to count as in view
    min_side_px: float = 10.0  # projected instance smaller than this (either side) is too small
    min_correspondences: int = 6  # for the static structure residual
    extra_min_similarity: float = 0.5  # an extra must look like an object of the inventory at least this much
    extra_margin: float = 0.1  # ... and nearly as much as the matched instance it resembles, unless found strongly:
    extra_feature_score: float = 0.44  # feature-route score n/(n+10): >= 8 RANSAC inliers
    extra_template_score: float = 0.85  # template-route normalised cross-correlation
    camera_holdout: float = 0.2
    seed: int = 0


@dataclass
class RolloutResult:
    rows: pd.DataFrame
    frames: dict
    timings: dict[str, float]
    masks: dict = field(default_factory=dict)  # (frame, instance_id) -> matched observation mask, when asked for


@dataclass
class EvalItem:
    case_dir: str
    video: str
    model: str
    backend: str = "classical"
    backend_options: dict = field(default_factory=dict)
    device: str = "cpu"
    config: dict = field(default_factory=dict)
    judge: dict | None = None  # JudgeConfig fields; the key travels only in memory

    @property
    def case_id(self) -> str:
        return Path(self.case_dir).name


@dataclass
class ItemResult:
    model: str
    case_id: str
    rows: pd.DataFrame | None = None
    frames: dict | None = None
    timings: dict = field(default_factory=dict)
    error: dict | None = None  # {"file", "field", "message"}
    backend_versions: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None


class _Timer:
    """Seconds per stage, summed over frames (with frame threads: CPU-side time, not wall)."""

    def __init__(self):
        import threading

        self.t = {k: 0.0 for k in STAGES}
        self._lock = threading.Lock()

    @contextmanager
    def __call__(self, stage: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            dt = time.perf_counter() - t0
            with self._lock:
                self.t[stage] = self.t.get(stage, 0.0) + dt


# ----------------------------------------------------------------------------- backends


def load_backend(name: str = "classical", device: str = "cpu", **options) -> Backend:
    if name == "classical":
        from worldeval.opis.backends.classical import build_backend

        return build_backend(device=device, **options)
    if name == "hf":
        from worldeval.opis.backends import hf

        return hf.build_hf_backend(device=device, **options)
    raise ValueError(f"unknown backend {name!r}; choose classical or hf")


_BANKS: dict[tuple, tuple[Case, Backend, ReferenceBank]] = {}


def reference_for(case: Case, backend: Backend) -> ReferenceBank:
    """The case's reference bank, built once per (case object, backend) and reused across rollouts."""
    key = (id(case), id(backend))
    hit = _BANKS.get(key)
    if hit is not None and hit[0] is case and hit[1] is backend:
        return hit[2]
    if case.geometry is None and backend.depth is not None:
        depth, K = backend.depth.estimate(case.image)
        depth = np.asarray(depth, np.float32)
        valid = np.isfinite(depth) & (depth > 0)
        case.geometry = Geometry(depth=np.where(valid, depth, 0).astype(np.float32),
                                 K=np.asarray(K if K is not None else default_intrinsics(*case.shape), np.float64), valid=valid)
    bank = build_reference(case, backend.embedder)
    if len(_BANKS) > 8:
        _BANKS.clear()
    _BANKS[key] = (case, backend, bank)
    return bank


# ----------------------------------------------------------------------------- one rollout


def _frame_threads() -> int:
    """Frames measured at once inside one rollout.

    WORLDEVAL_FRAME_THREADS overrides. By default two in the main process (a single
    rollout, the demo, a benchmark) and one inside pool workers, which already
    share the cores between rollouts.
    """
    import multiprocessing
    import os

    env = os.environ.get("WORLDEVAL_FRAME_THREADS")
    if env:
        return max(1, int(env))
    if multiprocessing.parent_process() is not None:
        return 1
    return max(1, min(2, os.cpu_count() or 1))


def evaluate_rollout(
    case: Case, video: str | Path, model: str, backend: Backend, config: EvalConfig | None = None, judge=None,
    keep_masks: bool = False,
) -> RolloutResult:
    from worldeval.media import MediaError, decode_frames, probe_video, sample_frame_indices

    config = config or EvalConfig()
    timer = _Timer()
    video = Path(video)
    with timer("decode"):
        info = probe_video(video)
        indices = sample_frame_indices(info.num_frames, info.fps, config.stride, config.skip_seconds)
        if not indices:
            raise MediaError(video, f"too short to sample: {info.num_frames} frames at {info.fps:g} fps")
        sampled = decode_frames(video, indices=indices, max_side=config.max_side)
    with timer("embedding"):
        bank = reference_for(case, backend)
    rows: list[dict] = []
    frame_records: list[dict] = []
    masks: dict = {}
    def one(fidx_frame):
        import cv2

        fidx, frame = fidx_frame
        # OpenCV's RANSAC draws from a per-thread generator; seeding it per frame makes a
        # frame's measurements independent of which thread or worker ran the frames before it.
        cv2.setRNGSeed(int(config.seed) + int(fidx))
        return _evaluate_frame(bank, frame, backend, config, timer, judge, masks if keep_masks else None, int(fidx))

    # Sampled frames are measured independently; OpenCV and torch release the GIL, so two
    # frames in flight use both cores of a small machine. Results do not depend on the order.
    threads = _frame_threads()
    pairs = list(zip(sampled.indices, sampled.frames))
    if threads > 1 and len(pairs) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=threads) as pool:
            results = list(pool.map(one, pairs))
    else:
        results = [one(p) for p in pairs]
    for (fidx, _frame), (recs, objs) in zip(pairs, results):
        t_s = fidx / info.fps
        for r in recs:
            r["frame"] = int(fidx)
            r["time_s"] = float(t_s)
        rows.extend(recs)
        frame_records.append({"frame": int(fidx), "time_s": float(t_s), "objects": objs})
    common = {
        "model": model,
        "case_id": case.id,
        "domain": case.spec.domain,
        "subcategory": case.spec.subcategory,
        "n_reference": len(case.instances),
    }
    df = _rows_frame(rows, common)
    frames = {
        "model": model,
        "case_id": case.id,
        "video": str(video.resolve()),
        "case_dir": str(Path(case.root).resolve()),
        "fps": float(info.fps),
        "num_frames": int(info.num_frames),
        "width": int(sampled.frames[0].shape[1]),
        "height": int(sampled.frames[0].shape[0]),
        "frames": frame_records,
    }
    return RolloutResult(rows=df, frames=frames, timings=dict(timer.t), masks=masks)


def _rows_frame(rows: list[dict], common: dict) -> pd.DataFrame:
    df = pd.DataFrame([{**common, **r} for r in rows], columns=list(COLUMNS))
    for c in ("model", "case_id", "domain", "subcategory"):
        df[c] = df[c].astype(object)
    df["n_reference"] = df["n_reference"].astype(np.int32)
    df["frame"] = df["frame"].astype(np.int32)
    df["time_s"] = df["time_s"].astype(float)
    for c in ("matched", "ambiguous", "extra"):
        df[c] = df[c].astype(bool)
    for c in ("appearance", "structure"):
        df[c] = pd.to_numeric(df[c], errors="coerce").astype(float)
    for c in ("instance_id", "track", "visibility", "structure_source"):
        df[c] = df[c].astype(object).where(df[c].notna(), None)
    return df


def _box_list(b) -> list[float] | None:
    return None if b is None else [round(float(v), 2) for v in b]


def _evaluate_frame(bank: ReferenceBank, frame: np.ndarray, backend: Backend, config: EvalConfig, timer: _Timer, judge,
                    keep: dict | None = None, fidx: int = 0):
    shape = frame.shape[:2]
    n = len(bank)
    with timer("observation"):
        obs: list[Observation] = list(backend.segmenter.observe(frame, bank.categories, reference=bank))
    with timer("camera"):
        cam = estimate_camera(bank, frame, backend.matcher, holdout=config.camera_holdout, seed=config.seed)
        projs = P.project_instances(bank, cam, shape, min_in_view=config.min_in_view, min_side_px=config.min_side_px)
        # Where geometry says a static instance must be, look there too: a removed or
        # recoloured object must be judged at its place, not only where a search found something.
        for i, pr in enumerate(projs):
            if pr is None or pr.state != P.EXPECTED or pr.mask is None or pr.box is None:
                continue
            m = pr.mask
            if m.sum() < 4:
                continue
            if any(box_iou(o.box, pr.box) > 0.5 for o in obs if o.source.endswith(":" + bank.ids[i])):
                continue
            # Appearance alone would let an inpainted smear at the right place pass as the object;
            # the proposal stands only with the instance's own keypoints found where the camera puts them.
            support = _projection_support(bank, i, frame, cam, backend.matcher, pr)
            if support < config.min_correspondences:
                continue
            obs.append(Observation(mask=m, box=_mask_box(m), category=None, score=support / (support + 10.0),
                                   source=f"projection:{bank.ids[i]}"))
    with timer("embedding"):
        todo = [k for k, o in enumerate(obs) if o.embedding is None]
        if todo:
            embs = backend.embedder.embed(frame, [obs[k].mask for k in todo], [obs[k].box for k in todo])
            for k, e in zip(todo, embs):
                obs[k].embedding = np.asarray(e, np.float32)
    with timer("association"):
        m = len(obs)
        gates = np.ones((n, m), bool)
        for i in range(n):
            if bank.tracks[i] != "static" or not cam.reliable:
                continue
            pr = projs[i]
            for j, o in enumerate(obs):
                gates[i, j] = pr is not None and pr.state != P.OUT_OF_VIEW and geometric_gate(pr.box, o.box, shape, config.gate_tolerance)
        # which instance's search produced each observation ("route:<instance id>"); other sources are open to all
        provenance = np.ones((n, m), bool)
        id_index = {k: i for i, k in enumerate(bank.ids)}
        for j, o in enumerate(obs):
            owners = [w for w in getattr(o, "found_for", [o.source.partition(":")[2]]) if w in id_index]
            if owners:
                provenance[:, j] = False
                for w in owners:
                    provenance[id_index[w], j] = True
        # A static instance that the camera places must also show its own keypoints where a
        # template-only (or weak SIFT-cluster) find claims it (an inpainted smear can look right in colour); only
        # texture-poor instances, which cannot show enough keypoints, are exempt.
        if cam.reliable:
            for i in range(n):
                if bank.tracks[i] != "static":
                    continue
                need = _support_needed(bank, i, cam, shape, config.min_correspondences)
                if need == 0:
                    continue
                for j, o in enumerate(obs):
                    firm = getattr(o, "feature_score", 0.0) >= config.extra_feature_score  # >= 8 SIFT inliers
                    if not gates[i, j] or firm or o.source.startswith("projection:"):
                        continue
                    if _keypoint_support(bank, i, frame, cam, backend.matcher, o.box) < need:
                        gates[i, j] = False
        # without a camera nothing places a static instance: only a clear likeness may match it
        inst_floor = [
            config.ungated_min_appearance if (bank.tracks[i] == "static" and not cam.reliable) else 0.0 for i in range(n)
        ]
        obs_emb = np.stack([o.embedding for o in obs]) if m else None
        assoc = associate(
            bank.embeddings,
            obs_emb,
            bank.categories,
            [o.category for o in obs],
            bank.attributes,
            [o.attributes for o in obs],
            gates,
            [o.box for o in obs],
            threshold=config.association_threshold,
            margin=config.ambiguity_margin,
            min_appearance=config.min_appearance,
            provenance=provenance,
            foreign_min_appearance=config.foreign_min_appearance,
            instance_min_appearance=inst_floor,
        )
        ambiguous = [bool(assoc.ambiguous[i]) and not _weak_static_tie(bank, i, projs, assoc, config) for i in range(n)]
        visibility, appearance = [], []
        for i in range(n):
            j = assoc.match[i]
            if j is not None:
                visibility.append(P.EXPECTED)
                appearance.append(max(0.0, float(assoc.similarity[i, j])))
            elif ambiguous[i]:
                visibility.append(P.UNKNOWN)
                appearance.append(None)
            elif bank.tracks[i] == "static" and projs[i] is not None:
                visibility.append(projs[i].state)
                appearance.append(None)
            else:
                visibility.append(P.UNKNOWN)
                appearance.append(None)
        extras = _confirm_extras(bank, obs, assoc, projs, visibility, appearance, cam, shape, config)
    with timer("structure"):
        structure: list[float | None] = [None] * n
        source: list[str | None] = [None] * n
        for i in range(n):
            j = assoc.match[i]
            if j is None:
                continue
            s, src = _structure(bank, i, frame, obs[j], cam, backend, config, judge)
            structure[i], source[i] = s, src
    recs, objs = [], []
    for i in range(n):
        j = assoc.match[i]
        recs.append(
            {
                "instance_id": bank.ids[i],
                "track": bank.tracks[i],
                "visibility": visibility[i],
                "matched": j is not None,
                "ambiguous": ambiguous[i],
                "extra": False,
                "appearance": appearance[i],
                "structure": structure[i],
                "structure_source": source[i],
            }
        )
        if j is not None:
            status, box = "matched", obs[j].box
            if keep is not None:
                keep[(fidx, bank.ids[i])] = obs[j].mask
        elif ambiguous[i]:
            status, box = "ambiguous", None
        else:
            status = {"expected_visible": "missing"}.get(visibility[i], visibility[i])
            box = projs[i].box if projs[i] is not None else None
        objs.append(
            {
                "instance_id": bank.ids[i],
                "category": bank.categories[i],
                "status": status,
                "box": _box_list(box),
                "appearance": None if appearance[i] is None else round(appearance[i], 4),
                "structure": None if structure[i] is None else round(structure[i], 4),
                # the matched observation's own mask (COCO RLE), for audits against ground truth
                "mask": encode_rle(obs[j].mask) if j is not None else None,
            }
        )
    for j in extras:
        recs.append(
            {
                "instance_id": None,
                "track": None,
                "visibility": None,
                "matched": False,
                "ambiguous": False,
                "extra": True,
                "appearance": None,
                "structure": None,
                "structure_source": None,
            }
        )
        objs.append(
            {"instance_id": None, "category": obs[j].category, "status": "extra", "box": _box_list(obs[j].box), "appearance": None, "structure": None}
        )
    return recs, objs


def _weak_static_tie(bank, i, projs, assoc, config) -> bool:
    """A tie between weak candidates for a static instance the camera places in view is no evidence
    that the object is there: it is reported by its projection (missing), not as unknown."""
    if bank.tracks[i] != "static" or projs[i] is None or projs[i].state != P.EXPECTED:
        return False
    row = assoc.affinity[i]
    best = np.nanmax(row) if np.isfinite(row).any() else 0.0
    return bool(best < config.weak_tie_affinity)


def _support_needed(bank, i, cam, shape, min_correspondences: int) -> int:
    """Keypoint support a template-only match of static instance i must show (0: texture-poor, exempt)."""
    key = f"kp_in_mask:{bank.ids[i]}"
    if key not in bank.cache:
        pts = bank.cache.get("classical", {}).get("f0")
        if pts is None:
            bank.cache[key] = None
        else:
            m = bank.masks[i]
            x = np.clip(np.round(pts.xy[:, 0]).astype(int), 0, m.shape[1] - 1)
            y = np.clip(np.round(pts.xy[:, 1]).astype(int), 0, m.shape[0] - 1)
            bank.cache[key] = pts.xy[m[y, x]]
    kp = bank.cache[key]
    if kp is None or len(kp) == 0:
        return 0
    p, _ = cam.project(kp)
    H1, W1 = shape
    inside = np.isfinite(p).all(1) & (p[:, 0] >= 0) & (p[:, 0] < W1) & (p[:, 1] >= 0) & (p[:, 1] < H1)
    need = min(min_correspondences, int(0.2 * inside.sum()))
    return need if need >= 3 else 0


def _keypoint_support(bank, i, frame, cam, matcher, box) -> int:
    # consistency among themselves instead of with the camera: the find is already gated by the
    # camera, and an object standing off the homography's plane (no depth) lands away from the
    # plane's prediction
    return _projection_support(bank, i, frame, cam, matcher, SimpleNamespace(box=box), check_camera=False)


def _projection_support(bank, i, frame, cam, matcher, pr, check_camera: bool = True) -> int:
    """Number of the instance's I0 keypoints matched inside its projected box and landing where the camera predicts."""
    H1, W1 = frame.shape[:2]
    x, y, w, h = pr.box
    pad = 0.15 * max(w, h)
    m1 = np.zeros((H1, W1), bool)
    m1[max(0, int(y - pad)) : int(y + h + pad) + 1, max(0, int(x - pad)) : int(x + w + pad) + 1] = True
    corr = matcher.match(bank.image, frame, mask0=bank.masks[i], mask1=m1)
    if len(corr.pts0) == 0:
        return 0
    if not check_camera:
        # matches restricted to a small box pass the ratio test easily; only a set that moves
        # together (one similarity transform) is evidence of the object
        if len(corr.pts0) < 3:
            return int(len(corr.pts0))
        import cv2

        _, inl = cv2.estimateAffinePartial2D(
            corr.pts0.astype(np.float32), corr.pts1.astype(np.float32), method=cv2.RANSAC,
            ransacReprojThreshold=max(3.0, 0.05 * float(np.hypot(w, h))),
        )
        return 0 if inl is None else int(inl.sum())
    pred, _ = cam.project(corr.pts0)
    err = np.linalg.norm(pred - corr.pts1, axis=1)
    tol = max(4.0, 0.1 * float(np.hypot(w, h)))
    return int(np.sum(np.isfinite(err) & (err < tol)))


def _mask_box(mask: np.ndarray):
    ys, xs = np.nonzero(mask)
    return (float(xs.min()), float(ys.min()), float(xs.max() - xs.min() + 1), float(ys.max() - ys.min() + 1))


def _confirm_extras(bank, obs, assoc, projs, visibility, appearance, cam: CameraEstimate, shape, config) -> list[int]:
    """Unmatched observations that count as extra objects (SPEC section 3).

    Only inside the part of the frame that shows content seen in I0 (needs a
    reliable camera), only when the observation looks like an object (it
    resembles an inventory object at least `extra_min_similarity`, and nearly
    as much as that object's own match when it has one: a second copy), and
    never when it can be attributed to a reference instance that is not
    accounted for (occluded, out of view, unknown), to a matched observation,
    or to the projected place of a static instance.
    """
    seen = P.seen_region(bank, cam, shape)
    if seen is None or not len(obs):
        return []
    H, W = shape
    matched = {j for j in assoc.match if j is not None}
    out: list[int] = []
    sim = assoc.similarity
    for j, o in enumerate(obs):
        if j in matched or o.source.startswith("projection:"):
            continue
        x, y, w, h = o.box
        cx, cy = int(min(W - 1, max(0, x + w / 2))), int(min(H - 1, max(0, y + h / 2)))
        if not seen[cy, cx] or o.mask.sum() == 0:
            continue
        col = sim[:, j] if sim.size else np.array([])
        if not len(col) or not np.isfinite(col).any():
            continue
        i_best = int(np.nanargmax(col))
        conf = float(col[i_best])
        if conf < config.extra_min_similarity:
            continue
        # A strong second find of an instance (a SIFT cluster of its own keypoints, or a near-perfect
        # template correlation) is a copy of it even on another background; weaker finds must
        # resemble the object nearly as much as its real match does.
        whole = getattr(o, "completeness", 0.0) >= 0.85
        by_features = getattr(o, "feature_score", 0.0) >= config.extra_feature_score and whole
        strong = by_features or (o.source.startswith("template:") and o.score >= config.extra_template_score and whole)
        # a weak find counts only as a second copy of an object matched elsewhere in the frame
        if not strong and (appearance[i_best] is None or conf < appearance[i_best] - config.extra_margin):
            continue
        # A strong find may stand inside a larger object (a copy on a table), but never inside the
        # object it resembles: then it is a piece of that object found again.
        own = assoc.match[i_best]
        if any(_same_place(o.mask, obs[k].mask, strong and k != own) for k in matched):
            continue
        if any(
            pr is not None and pr.mask is not None and _same_place(o.mask, pr.mask, strong and i != i_best)
            for i, pr in enumerate(projs)
        ):
            continue
        attributable = False
        for i in range(len(bank)):
            if assoc.match[i] is None and visibility[i] in (P.OCCLUDED, P.OUT_OF_VIEW, P.UNKNOWN, P.TOO_SMALL):
                # it could be that instance (which we cannot account for) unless it clearly looks like another one
                if np.isfinite(sim[i, j]) and sim[i, j] >= max(config.association_threshold, conf - config.extra_margin):
                    attributable = True
                    break
        if attributable:
            continue
        if any(box_iou(o.box, obs[k].box) > 0.3 for k in out):
            continue
        out.append(j)
    return out


def _same_place(a: np.ndarray, b: np.ndarray, allow_inside_larger: bool = False) -> bool:
    """Mask `a` (a candidate extra) can be explained by `b` (a matched object or a projected place).

    Any overlap beyond 20 % of `a` counts; with `allow_inside_larger`, not inside a `b` at least
    three times larger: a copy standing on a table lies inside the table's mask without being it.
    """
    inter = float((a & b).sum())
    if inter == 0:
        return False
    sa, sb = float(a.sum()), float(b.sum())
    if inter / (sa + sb - inter) > 0.3:
        return True
    return inter / sa > 0.2 and not (allow_inside_larger and sb >= 3.0 * sa)


def _structure(bank, i, frame, ob, cam, backend, config, judge) -> tuple[float | None, str | None]:
    if bank.tracks[i] == "static":
        s, _ = static_structure(
            bank, i, frame, ob.box, cam, backend.matcher, lambda_g=config.lambda_g, min_correspondences=config.min_correspondences
        )
        return (s, "static") if s is not None else (None, None)
    cat = bank.categories[i]
    if backend.pose is not None and backend.pose.supports(cat):
        key = f"pose0:{bank.ids[i]}"
        import inspect

        kw = {"category": cat} if "category" in inspect.signature(backend.pose.keypoints).parameters else {}
        if key not in bank.cache:
            bank.cache[key] = backend.pose.keypoints(bank.image, bank.boxes[i], **kw)
        kp1 = backend.pose.keypoints(frame, ob.box, **kw)
        s = pose_structure(bank.cache[key], kp1, tau=config.pose_tau)
        if s is not None:
            return s, "pose"
    inst = bank.case.instances[i]
    if judge is not None and inst.claims:
        s, _ = claims_structure(
            judge,
            _crop(bank.image, bank.boxes[i]),
            _crop(frame, ob.box),
            cat,
            inst.claims,
            max_claims=config.max_claims,
            min_confidence=config.claim_confidence,
        )
        if s is not None:
            return s, "claims"
    return None, None


def _crop(image: np.ndarray, box, context: float = 0.1) -> np.ndarray:
    H, W = image.shape[:2]
    x, y, w, h = box
    px, py = context * w, context * h
    x0, y0 = max(0, int(x - px)), max(0, int(y - py))
    x1, y1 = min(W, int(np.ceil(x + w + px))), min(H, int(np.ceil(y + h + py)))
    return np.ascontiguousarray(image[y0:max(y0 + 1, y1), x0:max(x0 + 1, x1)])


# ----------------------------------------------------------------------------- one item (worker side)


def _error(file, fieldname, message, kind=None) -> dict:
    rec = {"file": None if file is None else str(file), "field": fieldname, "message": str(message)}
    if kind:
        rec["type"] = kind
    return rec


def find_rollout(rollouts: str | Path, case_id: str) -> Path:
    """`<rollouts>/<case_id>.<any video suffix>`; the .mp4 path when none exists (reported missing later)."""
    root = Path(rollouts)
    for suf in VIDEO_SUFFIXES:
        p = root / f"{case_id}{suf}"
        if p.exists():
            return p
    return root / f"{case_id}.mp4"


def _judge_client(judge: dict | None):
    if not judge:
        return None
    from worldeval.judge.client import JudgeClient, JudgeConfig

    return JudgeClient(JudgeConfig(**judge))


def _cached(key, factory):
    try:
        from worldeval.executor import worker_cache
    except ImportError:  # pragma: no cover - the executor module ships with the package
        return factory()
    return worker_cache(key, factory)


def evaluate_item(item: EvalItem) -> ItemResult:
    """Evaluate one (model, case) in a worker; every failure becomes a structured error, never an exception."""
    from worldeval.media import MediaError
    from worldeval.opis.perception.structure import ClaimJudgeError

    res = ItemResult(model=item.model, case_id=item.case_id)
    video = Path(item.video)
    try:
        case = load_case(item.case_dir)
        res.case_id = case.id
        if not video.exists():
            res.error = _error(video, "rollout", f"no rollout video for case {case.id} (expected {video.name})", "MissingRollout")
            return res
        config = EvalConfig(**item.config)
        opts = dict(item.backend_options)
        backend = _cached(("opis-backend", item.backend, item.device, json.dumps(opts, sort_keys=True, default=str)),
                          lambda: load_backend(item.backend, item.device, **opts))
        res.backend_versions = {"name": backend.name, **backend.versions}
        judge = None
        if item.judge:
            judge = _cached(("opis-judge", json.dumps(item.judge, sort_keys=True, default=str)), lambda: _judge_client(item.judge))
        out = evaluate_rollout(case, video, item.model, backend, config, judge=judge)
        res.rows, res.frames, res.timings = out.rows, out.frames, out.timings
    except CaseError as exc:
        res.error = _error(exc.file, exc.field, exc.reason, "CaseError")
    except MediaError as exc:
        res.error = _error(exc.path, "video", exc.reason, "MediaError")
    except ClaimJudgeError as exc:
        res.error = _error(video, exc.field, exc.reason, "JudgeError")
    except Exception as exc:  # an evaluator bug on one item must not stop the run
        import traceback

        res.error = _error(video, "evaluation", f"{type(exc).__name__}: {exc}", type(exc).__name__)
        res.error["traceback"] = traceback.format_exc(limit=8)
    return res


# ----------------------------------------------------------------------------- a whole run


def _write_part(run_dir: Path, model: str, case_id: str, df: pd.DataFrame) -> Path:
    try:
        from worldeval.opis.archive import write_case_part
    except ImportError:  # pragma: no cover
        from worldeval.opis.archive import write_archive

        return write_archive(df, run_dir / "parts" / model / f"{case_id}.parquet")
    return write_case_part(run_dir, model, case_id, df)


def run_eval(
    dataset: str | Path,
    rollouts: str | Path,
    model: str,
    out: str | Path,
    backend: str = "classical",
    device: str = "cpu",
    workers: int = 1,
    executor: str = "local",
    address: str | None = None,
    force: bool = False,
    judge=None,
    config: EvalConfig | dict | None = None,
    backend_options: dict | None = None,
    progress: Any = None,
) -> dict:
    """Evaluate every case of `dataset` against `<rollouts>/<case_id>.mp4`; returns a summary dict."""
    from worldeval import runs
    from worldeval.opis.archive import consolidate
    from worldeval.opis.case import iter_case_dirs

    t_start = time.time()
    dataset, rollouts, run_dir = Path(dataset), Path(rollouts), Path(out)
    if isinstance(config, dict):
        config = EvalConfig(**config)
    config = config or EvalConfig()
    backend_options = dict(backend_options or {})
    judge_dict = None
    judge_public = None
    if judge is not None:
        if isinstance(judge, dict):
            judge_dict = dict(judge)
        else:
            from dataclasses import asdict

            judge_dict = asdict(judge)
        judge_public = {k: v for k, v in judge_dict.items() if k != "api_key"}
        judge_public["api_key_set"] = bool(judge_dict.get("api_key"))
    # the model is not part of the hashed config: several models share one run folder
    run_config = {
        "backend": backend,
        "backend_options": backend_options,
        "eval": config.model_dump(),
        "judge": {k: v for k, v in (judge_public or {}).items() if k in ("model", "base_url")} or None,
    }
    chash = runs.config_hash(run_config)
    case_dirs = iter_case_dirs(dataset)
    fingerprint = runs.fingerprint_dir(dataset)
    old = runs.check_resume(run_dir, config_hash=chash, dataset_fingerprint=fingerprint, force=force)
    manifest = runs.base_manifest(
        "opis eval",
        {**run_config, "model": model, "dataset": str(dataset.resolve()), "rollouts": str(rollouts.resolve()), "device": device,
         "workers": workers, "executor": executor, "judge": judge_public},
        (old or {}).get("backends", {}),
    )
    manifest["config_hash"] = chash
    manifest["dataset_fingerprint"] = fingerprint
    manifest["dataset"] = str(dataset.resolve())
    manifest["rollouts"] = str(rollouts.resolve())
    manifest["models"] = sorted(set((old or {}).get("models", [])) | {model})
    runs.atomic_write_json(run_dir / "manifest.json", manifest)

    items, skipped = [], []
    for cd in case_dirs:
        cid = cd.name
        if runs.is_done(run_dir, model, cid, chash):
            skipped.append(cid)
            continue
        items.append(
            EvalItem(
                case_dir=str(cd), video=str(find_rollout(rollouts, cid)), model=model, backend=backend,
                backend_options=backend_options, device=device, config=config.model_dump(), judge=judge_dict,
            )
        )

    totals = {k: 0.0 for k in STAGES}
    errors: list[dict] = []
    done: list[str] = []
    versions: dict = dict(manifest.get("backends") or {})

    def on_result(item: EvalItem, result) -> None:
        if not isinstance(result, ItemResult):  # the executor reports a crashed or raising worker as an exception
            err = _error(getattr(result, "file", None) or item.video, getattr(result, "field", None) or "worker",
                         getattr(result, "message", None) or str(result), getattr(result, "kind", type(result).__name__))
            result = ItemResult(model=item.model, case_id=item.case_id, error=err)
        cid = item.case_id
        t0 = time.perf_counter()
        if result.ok:
            _write_part(run_dir, model, cid, result.rows)
            runs.atomic_write_json(run_dir / "frames" / model / f"{cid}.json", result.frames)
            result.timings["writing"] = result.timings.get("writing", 0.0) + time.perf_counter() - t0
            runs.write_status(run_dir, model, cid, "done", config_hash=chash, timings=result.timings,
                              frames=len(result.frames["frames"]))
            done.append(cid)
            if result.backend_versions:
                versions[backend] = result.backend_versions
        else:
            # a failed item leaves no stale measurements behind
            for p in (run_dir / "parts" / model / f"{cid}.parquet", run_dir / "frames" / model / f"{cid}.json"):
                p.unlink(missing_ok=True)
            runs.write_status(run_dir, model, cid, "failed", error=result.error, config_hash=chash, timings=result.timings)
            errors.append({"case_id": cid, **{k: v for k, v in result.error.items() if k != "traceback"}})
        for k, v in result.timings.items():
            totals[k] = totals.get(k, 0.0) + float(v)

    if items:
        try:
            from worldeval.executor import run_items
        except ImportError:  # pragma: no cover
            run_items = None
        if run_items is None or (workers == 0 and executor == "local"):
            for it in items:
                on_result(it, evaluate_item(it))
        else:
            from worldeval.executor import default_resources

            res_kw = {"resources": default_resources(backend, device)}
            run_items(evaluate_item, items, workers=workers, executor=executor, address=address,
                      on_result=on_result, progress=progress, **res_kw)
    consolidate(run_dir)
    manifest["backends"] = versions
    manifest["timings"] = {"wall_s": round(time.time() - t_start, 3), "stages_s": {k: round(v, 3) for k, v in totals.items()}}
    manifest["summary"] = {"done": len(done), "failed": len(errors), "skipped": len(skipped), "cases": len(case_dirs)}
    runs.atomic_write_json(run_dir / "manifest.json", manifest)
    return {
        "run_dir": str(run_dir),
        "model": model,
        "cases": len(case_dirs),
        "done": done,
        "skipped": skipped,
        "failed": errors,
        "timings": manifest["timings"],
    }
