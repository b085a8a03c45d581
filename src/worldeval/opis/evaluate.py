"""OPIS evaluation: from a case and a rollout video to measurement-archive rows (SPEC section 3).

`evaluate_rollout` runs the paper's evaluator on one (case, video): it samples
frames, builds the case's reference bank once, and measures every sampled frame
with the stage sequence of `opis/perception/frame.py` (observe, camera,
project, embed, associate, identity, extras, structure). The run folder around
it (items, resume, parts, status, manifest) is `opis/run.py`.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from worldeval.executor.worker import worker_threads
from worldeval.media import MediaError, SampledFrames, decode_frames, probe_video, sample_frame_indices
from worldeval.opis.archive import COLUMNS
from worldeval.opis.backends import registry
from worldeval.opis.backends.base import Backend, BatchEmbedder, BatchSegmenter
from worldeval.opis.backends.efficientnet import torch_threads
from worldeval.opis.case import Case, Geometry, default_intrinsics
from worldeval.opis.perception.config import EvalConfig
from worldeval.opis.perception.frame import measure_frame
from worldeval.opis.perception.motion import motion_wanted, neighbour_offset
from worldeval.opis.perception.propagation import build_propagation_reference, propagate_rollout, propagation_grid
from worldeval.opis.perception.reference import ReferenceBank, build_reference

__all__ = ["EvalConfig", "RolloutResult", "STAGES", "evaluate_rollout", "load_backend", "reference_for", "rollout_warnings"]

STAGES = ("decode", "propagation", "observation", "camera", "association", "embedding", "structure", "writing")
# A rollout whose width/height ratio is within this of I0's counts as the same shape (a few pixels
# of rounding by an encoder or a resize are not a crop or a stretch).
ASPECT_TOLERANCE = 0.01

@dataclass
class RolloutResult:
    rows: pd.DataFrame
    frames: dict
    timings: dict[str, float]
    masks: dict = field(default_factory=dict)  # (frame, instance_id) -> matched observation mask, when asked for
    warnings: list[dict] = field(default_factory=list)  # {"code", "message"}: see `rollout_warnings`


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


def load_backend(name: str = "classical", device: str = "cpu", module_path: str | None = None, **options) -> Backend:
    """The backend `name` names (registered, entry point or module:builder; see backends/registry.py)."""
    return registry.build(name, device=device, module_path=module_path, **options)


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

    WORLDEVAL_FRAME_THREADS overrides. By default at most two: in the main process (a single
    rollout, the demo, a benchmark) two where there are two cores; in a pool worker or Ray actor
    as many as its share of the cores allows (`opis eval`'s default one worker on two cores: two,
    where it once took one and left a core idle; two workers on two cores: one each).
    """
    import multiprocessing
    import os

    env = os.environ.get("WORLDEVAL_FRAME_THREADS")
    if env:
        return max(1, int(env))
    share = worker_threads()
    if share is not None:
        return max(1, min(2, share))
    if multiprocessing.parent_process() is not None:
        return 1
    return max(1, min(2, os.cpu_count() or 1))


@contextmanager
def _blas_threads(n: int):
    """The BLAS library's thread count (numpy's OpenBLAS) capped for a block and restored after it
    (a process-wide setting)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=n, user_api="blas"):
        yield


@contextmanager
def _opencv_threads(n: int):
    """OpenCV's worker-thread count set for a block and restored after it (a process-wide setting)."""
    import cv2

    before = cv2.getNumThreads()
    cv2.setNumThreads(n)
    try:
        yield
    finally:
        cv2.setNumThreads(before)


def _frame_chunks(pairs: list, backend: Backend) -> list[list]:
    """The sampled frames in the batches a batch segmenter asks for (all of them in one chunk otherwise)."""
    seg = backend.segmenter
    n = max(1, int(seg.frame_batch)) if isinstance(seg, BatchSegmenter) else 1
    if n == 1:
        return [pairs] if pairs else []
    return [pairs[s : s + n] for s in range(0, len(pairs), n)]


def _observe_batch(bank: ReferenceBank, frames: list[np.ndarray], backend: Backend, timer) -> list:
    """Observations (embedded) of a batch of frames, or None per frame where the segmenter takes one at a time."""
    seg = backend.segmenter
    if not (isinstance(seg, BatchSegmenter) and int(seg.frame_batch) > 1):
        return [None] * len(frames)
    with timer("observation"):
        obs = seg.observe_batch(frames, bank.categories, reference=bank)
    if isinstance(backend.embedder, BatchEmbedder):
        with timer("embedding"):
            embs = backend.embedder.embed_many([(f, [o.mask for o in ob], [o.box for o in ob]) for f, ob in zip(frames, obs)])
        for ob, e in zip(obs, embs):
            for o, v in zip(ob, e):
                o.embedding = np.asarray(v, np.float32)
    return obs


def _neighbour_indices(indices: list[int], info, case: Case, backend: Backend) -> dict[int, tuple[int, ...]]:
    """Per sampled frame, the video frames its moving-object proposals compare it with (none: not wanted)."""
    if not motion_wanted([inst.followed_as for inst in case.instances], backend):
        return {}
    k = neighbour_offset(info.fps)
    return {t: tuple(n for n in (t - k, t + k) if 0 <= n < info.num_frames) for t in indices}


def _propagation_grid(info, indices: list[int], backend: Backend, config: EvalConfig) -> list[int]:
    if not (config.propagation.enabled and backend.features is not None):
        return []
    return propagation_grid(info.num_frames, indices, config.propagation.stride)


def propagation_reference(bank: ReferenceBank, backend: Backend):
    """I0's features and labels for the propagation stage, computed once per reference bank."""
    key = ("propagation", backend.features.name, tuple(sorted(backend.features.versions.items())))
    if key not in bank.cache:
        bank.cache[key] = build_propagation_reference(bank.image, bank.masks, backend.features)
    return bank.cache[key]


def _decode_beside_reference(case: Case, video: Path, info, indices: list[int], grid: list[int], backend: Backend,
                             config: EvalConfig, timer):
    """(reference bank, motion neighbours, decoded frames by index, the sampled frames).

    The reference side (I0's crop descriptors, its propagation features) reads only the case: it is
    built on a thread of its own while the video decodes, each part with the torch thread count it
    always had (the floats depend on it; the archive is the same bit for bit)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as side:
        ref_side = side.submit(_reference_side, case, backend, bool(grid), timer)
        with timer("decode"):
            near = _neighbour_indices(indices, info, case, backend)
            wanted = sorted(set(indices) | set(grid) | {n for pair in near.values() for n in pair})
            decoded = decode_frames(video, indices=wanted, max_side=config.max_side)
            by_index = dict(zip(wanted, decoded.frames))
            sampled = SampledFrames(info=decoded.info, indices=list(indices), frames=[by_index[i] for i in indices])
        return ref_side.result(), near, by_index, sampled


def _reference_side(case: Case, backend: Backend, propagating: bool, timer) -> ReferenceBank:
    """The case's reference bank and, when the propagation stage runs, its I0 reference (both cached)."""
    with timer("embedding"):
        bank = reference_for(case, backend)
    if propagating:
        with timer("propagation"), torch_threads(_frame_threads()):
            propagation_reference(bank, backend)
    return bank


def _propagate(bank: ReferenceBank, backend: Backend, frames: dict, grid: list[int], indices: list[int], config: EvalConfig) -> dict:
    """The sampled frames' propagated labels (empty when the stage does not run).

    Run to the end before any sampled frame is measured. Overlapping it with the measurement (a
    thread of its own) was tried: on 2 cores propagation is then the critical path (one thread,
    sharing the cores) and the rollout got no faster (1.76 against 1.88 frames/s on bmx-trees).
    """
    if not grid:
        return {}

    # each step needs the one before, so the frames cannot share the cores: the network may
    # use all of them here (the crop embedder keeps to one thread while frames run in parallel)
    with torch_threads(_frame_threads()):
        return propagate_rollout(propagation_reference(bank, backend), frames, grid, indices, backend.features, config, bank.image)


def evaluate_rollout(
    case: Case, video: str | Path, model: str, backend: Backend, config: EvalConfig | None = None, judge=None,
    keep_masks: bool = False,
) -> RolloutResult:
    config = config or EvalConfig()
    timer = _Timer()
    video = Path(video)
    with timer("decode"):
        info = probe_video(video)
        indices = sample_frame_indices(info.num_frames, info.fps, config.stride, config.skip_seconds,
                                       config.max_frames, config.first_frame)
        if not indices:
            raise MediaError(video, f"too short to sample: {info.num_frames} frames at {info.fps:g} fps")
    grid = _propagation_grid(info, indices, backend, config)
    bank, near, by_index, sampled = _decode_beside_reference(case, video, info, indices, grid, backend, config, timer)
    with timer("propagation"):
        propagated = _propagate(bank, backend, by_index, grid, indices, config)
    for i in set(grid) - set(indices) - {n for pair in near.values() for n in pair}:
        by_index.pop(i, None)  # only the sampled frames and motion neighbours are needed from here
    rows: list[dict] = []
    frame_records: list[dict] = []
    masks: dict = {}

    def one(fidx_frame_obs):
        import cv2

        fidx, frame, obs = fidx_frame_obs
        # OpenCV's RANSAC draws from a per-thread generator; seeding it per frame makes a
        # frame's measurements independent of which thread or worker ran the frames before it.
        cv2.setRNGSeed(int(config.seed) + int(fidx))
        nb = [by_index[n] for n in near.get(int(fidx), ())]
        return measure_frame(bank, frame, backend, config, judge, index=int(fidx), timer=timer, observations=obs, neighbours=nb,
                             propagated=propagated.get(int(fidx)))

    # Sampled frames are measured independently; OpenCV and torch release the GIL, so two
    # frames in flight use both cores of a small machine. Results do not depend on the order.
    threads = _frame_threads()
    pairs = list(zip(sampled.indices, sampled.frames))
    results = []
    for chunk in _frame_chunks(pairs, backend):
        items = [(f, fr, o) for (f, fr), o in zip(chunk, _observe_batch(bank, [fr for _, fr in chunk], backend, timer))]
        if threads > 1 and len(items) > 1:
            from concurrent.futures import ThreadPoolExecutor

            # the frames in flight already fill the cores: OpenCV's and OpenBLAS's own workers on top
            # of them only contend (n25, 2 cores: 5 % less wall and CPU for the whole run with one
            # OpenCV thread per frame; SIFT's keypoints are put in one order whatever the thread count;
            # one BLAS thread halved association's time, docs/backends.md "Eighth step")
            with ThreadPoolExecutor(max_workers=threads) as pool, _opencv_threads(1), _blas_threads(1):
                results.extend(pool.map(one, items))
        else:
            results.extend(one(it) for it in items)
    for (fidx, _frame), res in zip(pairs, results):
        t_s = fidx / info.fps
        for r in res.rows:
            r["frame"] = int(fidx)
            r["time_s"] = float(t_s)
        rows.extend(res.rows)
        frame_records.append({"frame": int(fidx), "time_s": float(t_s), "camera": res.camera, "objects": res.objects})
        if keep_masks:
            masks.update({(int(fidx), iid): m for iid, m in res.masks.items()})
    common = {
        "model": model,
        "case_id": case.id,
        "domain": case.spec.domain,
        "subcategory": case.spec.subcategory,
        "n_reference": len(case.instances),
    }
    frames = _rollout_record(model, case, video, info, sampled.frames[0].shape, frame_records)
    return RolloutResult(rows=_rows_frame(rows, common), frames=frames, timings=dict(timer.t), masks=masks,
                         warnings=rollout_warnings(case, info) + static_failure_warnings(rows, frame_records))


# A static instance missing in more than this share of the frames that expect it is flagged (issue 31):
# either the model forgot it, or it moves on its own and the camera model cannot place it.
STATIC_MISSING_SHARE = 0.5


def static_failure_warnings(rows: list[dict], frame_records: list[dict]) -> list[dict]:
    """`static_missing`: static instances the camera model expected but that were missing in most frames."""
    reliable = {r["frame"]: bool((r.get("camera") or {}).get("reliable")) for r in frame_records}
    expected: dict[str, list[int]] = {}
    for r in rows:
        if r.get("track") == "static" and r.get("visibility") == "expected_visible":
            expected.setdefault(r["instance_id"], []).append(0 if r.get("matched") else int(r["frame"]))
    flagged = {i: [f for f in fs if f] for i, fs in expected.items()
               if len(fs) >= 2 and sum(1 for f in fs if f) > STATIC_MISSING_SHARE * len(fs)}
    if not flagged:
        return []
    parts = [f"{i} in {len(fr)} of {len(expected[i])}" for i, fr in sorted(flagged.items())]
    n_cam = sum(reliable.get(f, False) for fr in flagged.values() for f in fr)
    n_all = sum(len(fr) for fr in flagged.values())
    return [{"code": "static_missing", "message": (
        f"static instance(s) missing in most frames that expect them ({'; '.join(parts)}; the camera fit was reliable "
        f"in {n_cam} of those {n_all} instance-frames): either the model lost them, or they move on their own and the "
        "camera model cannot place them where I0 had them (then give them the dynamic track: --track dynamic, or "
        "kinematics articulated/deformable)")}]


def rollout_warnings(case: Case, info) -> list[dict]:
    """What the rollout `info` (a `media.VideoInfo`) differs in from its case without failing it.

    Each is {"code", "message"}; the rollout is measured all the same. The codes and what the
    evaluator does in each case are documented in docs/data-formats.md ("What the run checks").
    """
    out = _size_warnings(case.shape, int(info.width or 0), int(info.height or 0))
    cam = case.spec.camera()
    expected = float(cam.duration_s) * float(info.fps)
    if info.num_frames < expected - 1 - 1e-6:
        out.append({"code": "short_clip", "message": (
            f"the clip is {info.num_frames / info.fps:.2f} s ({info.num_frames} frames at {info.fps:g} fps), the case asks "
            f"for {cam.duration_s:g} s ({expected:.0f} frames): the scores cover only the frames there, so what a "
            "model forgets later (and the later temporal bins) is not measured")})
    if case.spec.camera_task is None:
        out.append({"code": "no_camera_task", "message": (
            f"the case has no camera task: the camera is taken as held and the clip length as {cam.duration_s:g} s "
            "(what short_clip checks); no measurement changes, since the evaluator fits every frame's camera from "
            "the frame itself")})
    return out


def _size_warnings(shape0: tuple[int, int], width: int, height: int) -> list[dict]:
    """aspect_mismatch or size_mismatch between I0 (`shape0` = H, W) and the video's frames."""
    h0, w0 = shape0
    # an encoder pads an odd side by one pixel (yuv420p needs even sizes): not a real difference
    if not (width and height) or (abs(width - w0) <= 1 and abs(height - h0) <= 1):
        return []
    what = f"the video is {width}x{height}, I0 is {w0}x{h0}"
    how = ("frames are not resized to I0: each is measured at its own size, and I0's objects are placed in it by the "
           "camera fitted from I0 to the frame")
    ratio = (width / height) / (w0 / h0)
    if abs(ratio - 1) > ASPECT_TOLERANCE:
        return [{"code": "aspect_mismatch", "message": (
            f"{what} (aspect {width / height:.2f} against {w0 / h0:.2f}): {how}, which then has to absorb a crop or a "
            "stretch (with depth, a pose whose intrinsics assume a stretch): objects cropped away are not expected, "
            "stretched ones look less like I0's, and where no camera fits, static Structure goes unmeasured, so P, I "
            "and S change with the frame's shape, not with memory. Render at I0's aspect ratio")}]
    return [{"code": "size_mismatch", "message": (
        f"{what} (same aspect ratio): {how}, which absorbs the scale. A smaller frame has fewer keypoints: the camera "
        "fit and static Structure (min_correspondences on the object) fail more often, so C_S and S drop, and objects "
        "below min_side_px count as too small to expect")}]


def _rollout_record(model: str, case: Case, video: Path, info, shape, frame_records: list[dict]) -> dict:
    """The per-frame record of one rollout (`frames/<model>/<case>.json`)."""
    return {
        "model": model,
        "case_id": case.id,
        "video": str(video.resolve()),
        "case_dir": str(Path(case.root).resolve()),
        "fps": float(info.fps),
        "num_frames": int(info.num_frames),
        "width": int(shape[1]),
        "height": int(shape[0]),
        "frames": frame_records,
    }


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


