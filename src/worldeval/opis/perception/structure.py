"""Structure measurements (paper section 4.3).

* static (eq. 4, source `static`): with depth (the case's geometry or a depth
  model's), median distance between where the background-fitted camera puts an
  instance's depth-lifted I0 correspondences and where they were matched, over
  the observed box diagonal, `s = exp(-rho / lambda_g)`. Uses every selected
  correspondence, not only camera inliers; needs a reliable camera and
  `min_correspondences`.
* static_flat (no depth, source `static_flat`; not the paper's eq. 4): the
  camera is a homography of the dominant plane, so the prediction is corrected
  by one similarity per instance (position, scale, rotation: what parallax of an
  off-plane rigid object does to first order) and the residual is scored as in
  eq. 4. It measures how far the object's keypoints are from moving as one rigid
  similarity: shear, stretch, squeeze and broken parts, not a drift in place.
  A case whose geometry declares `exact_plane` (`planar_scene`: a plane, or a
  camera that only turns) has an exact homography for every I0 pixel: no
  correction, and the row is eq. 4 (`static`), so a drift or a resize shows.
* pose (eq. 5): segment-length log-ratios against I0 after removing the
  median (one scale per instance), `s = mean exp(-|r - median r| / tau)`.
  Landmarks are lifted to 3-D with depth (I0: the case's geometry; frame: the
  backend's depth model) when both exist, else segments are measured in pixels.
* claims: a VLM judges the case's structural claims for the object in the
  frame; supported fraction per claim family (answers below the confidence
  threshold or "unknown" do not count), then the mean over families.
"""

from __future__ import annotations

import math

import numpy as np

from worldeval.judge.client import JudgeImage
from worldeval.judge.parse import AnswerError
from worldeval.opis.backends.base import BatchPoseEstimator, Keypoints
from worldeval.opis.labels import StructureSource
from worldeval.opis.perception.camera import frame_intrinsics


def own_region(bank, i: int) -> np.ndarray:
    """Instance i's own I0 pixels, slightly dilated for keypoints on its outline, minus other instances:
    objects held in a container must not vouch for the container's shape.

    Computed once per case (in the bank's cache): built per matched instance and frame it cost
    one full-image operation per other instance, n^2 per frame (a third of the 50-object case's time).
    """
    import cv2

    key = f"structure:own_region:{i}"
    if key in bank.cache:
        return bank.cache[key]
    r = max(2, int(round(0.02 * max(bank.boxes[i][2], bank.boxes[i][3]))))
    m0 = cv2.dilate(bank.masks[i].astype(np.uint8), np.ones((2 * r + 1, 2 * r + 1), np.uint8)).astype(bool)
    # another instance covers a pixel where more masks than instance i's own cover it
    m0 &= _cover_count(bank) <= bank.masks[i]
    bank.cache[key] = m0
    return m0


def _cover_count(bank) -> np.ndarray:
    """How many instance masks cover each I0 pixel (once per case: one pass over the masks, not one per instance)."""
    if "structure:cover_count" in bank.cache:
        return bank.cache["structure:cover_count"]
    count = np.zeros(bank.masks[0].shape, np.int32)
    for mk in bank.masks:
        count += mk
    bank.cache["structure:cover_count"] = count
    return count


def static_structure(
    bank, i: int, frame: np.ndarray, obs_box, cam, matcher, *, lambda_g: float = 0.05, min_correspondences: int = 6
) -> tuple[float | None, dict]:
    """s_stat for instance i matched to an observation with box `obs_box`; None when not measurable.

    The info dict's `source` is `static` (eq. 4 with depth) or `static_flat` (no depth, see the module doc)."""
    if cam is None or not cam.reliable:
        return None, {"reason": "camera unreliable"}
    import cv2

    H1, W1 = frame.shape[:2]
    m0 = own_region(bank, i)
    m1 = np.zeros((H1, W1), bool)
    ox, oy, ow, oh = obs_box
    pad = 0.1 * max(ow, oh)
    m1[max(0, int(oy - pad)) : int(oy + oh + pad) + 1, max(0, int(ox - pad)) : int(ox + ow + pad) + 1] = True
    corr = matcher.match(bank.image, frame, mask0=m0, mask1=m1)
    n = len(corr.pts0)
    if n < min_correspondences:
        return None, {"reason": f"{n} correspondences", "n": n}
    pred, z = cam.project(corr.pts0)
    exact = z is not None or cam.planar_scene
    if not exact:
        # Without depth the camera is a homography of the dominant plane; an object standing
        # off that plane is shifted and scaled by parallax. One similarity correction per
        # instance (4 dof: no shear, no anisotropic scale, so a squeezed shape still shows)
        # absorbs that before the residual is measured.
        fin = np.all(np.isfinite(pred), axis=1)
        if fin.sum() >= 3:
            M, _ = cv2.estimateAffinePartial2D(
                pred[fin].astype(np.float32), corr.pts1[fin].astype(np.float32), method=cv2.RANSAC,
                ransacReprojThreshold=max(2.0, 0.03 * math.hypot(obs_box[2], obs_box[3])),
            )
            if M is not None:
                pred = pred @ M[:, :2].T + M[:, 2]
    err = np.linalg.norm(pred - corr.pts1, axis=1)
    if z is not None:
        err = err[z > 0]
    err = err[np.isfinite(err)]
    if len(err) < min_correspondences:
        return None, {"reason": "projection failed", "n": n}
    diag = math.hypot(ow, oh)
    if diag <= 0:
        return None, {"reason": "empty box"}
    rho = float(np.median(err)) / diag
    return float(math.exp(-rho / lambda_g)), {"n": n, "rho": rho, "source": StructureSource.STATIC if exact else StructureSource.STATIC_FLAT}


def pose_structure(kp0, kp1, *, tau: float = 0.2, min_conf: float = 0.3, min_segments: int = 3) -> float | None:
    """Eq. 5 from two keypoint sets with the same skeleton; None when too few segments are visible in both."""
    if kp0 is None or kp1 is None:
        return None
    r = []
    for a, b in kp0.edges:
        if min(kp0.conf[a], kp0.conf[b], kp1.conf[a], kp1.conf[b]) < min_conf:
            continue
        l0 = float(np.linalg.norm(kp0.xy[a] - kp0.xy[b]))
        l1 = float(np.linalg.norm(kp1.xy[a] - kp1.xy[b]))
        if l0 <= 1e-6 or l1 <= 1e-6:
            continue
        r.append(math.log(l1 / l0))
    if len(r) < min_segments:
        return None
    r = np.asarray(r)
    return float(np.mean(np.exp(-np.abs(r - np.median(r)) / tau)))


class ClaimJudgeError(RuntimeError):
    """The structural-claims judge did not answer (timeout, endpoint error, unparseable answer)."""

    def __init__(self, message: str, field: str = "structure.claims"):
        self.field = field
        self.reason = message
        super().__init__(message)


VERDICTS = ("supported", "contradicted", "unknown")


def _validate_claims_answer(n: int):
    # AnswerError (not any ValueError): the judge client retries those and reports them as a failed answer
    def check(obj: dict) -> dict:
        items = obj.get("claims")
        if not isinstance(items, list) or len(items) != n:
            raise AnswerError(f"expected 'claims' to be a list of {n} objects")
        out = []
        for k, it in enumerate(items):
            if not isinstance(it, dict):
                raise AnswerError(f"claims[{k}] is not an object")
            v = str(it.get("verdict", "")).lower().strip()
            if v not in VERDICTS:
                raise AnswerError(f"claims[{k}].verdict must be one of {VERDICTS}")
            try:
                c = float(it.get("confidence"))
            except (TypeError, ValueError):
                raise AnswerError(f"claims[{k}].confidence must be a number in [0, 1]") from None
            if not 0.0 <= c <= 1.0:
                raise AnswerError(f"claims[{k}].confidence must be in [0, 1]")
            out.append({"verdict": v, "confidence": c})
        return {"claims": out}

    return check


# Our own wording of the task (the paper's prompts are not reused).
CLAIMS_SYSTEM = (
    "You check whether an object kept its physical structure in a generated video frame. "
    "You see a crop of the object in the original image and a crop of the same object in a later frame. "
    "For every numbered statement, decide from the later frame alone whether the statement still holds: "
    "'supported' if it clearly holds, 'contradicted' if it clearly does not, 'unknown' if the frame does not show enough. "
    "Pose, viewpoint, lighting and motion blur are allowed to change. Give a confidence between 0 and 1. "
    'Answer with JSON only: {"claims": [{"verdict": "...", "confidence": 0.0}, ...]} in the order given.'
)


def claims_structure(
    judge,
    ref_crop: np.ndarray,
    obs_crop: np.ndarray,
    category: str,
    claims: list,
    *,
    max_claims: int = 12,
    min_confidence: float = 0.7,
) -> tuple[float | None, dict]:
    """Supported fraction per claim family, averaged over families with at least one confident verdict."""
    claims = list(claims)[:max_claims]
    if not claims:
        return None, {"reason": "no claims"}
    lines = "\n".join(f"{k + 1}. {c.text}" for k, c in enumerate(claims))
    content = [
        f"Object: {category}\nStatements:\n{lines}",
        JudgeImage.from_array(ref_crop, label="original"),
        JudgeImage.from_array(obs_crop, label="later frame"),
    ]
    ans = judge.ask_json(content, validator=_validate_claims_answer(len(claims)), system=CLAIMS_SYSTEM, prefer_key="claims")
    if not ans.ok:
        raise ClaimJudgeError(f"structural-claims judge failed after {ans.attempts} attempt(s): {ans.error}")
    fam: dict[str, list[float]] = {}
    for c, v in zip(claims, ans.parsed["claims"]):
        if v["verdict"] == "unknown" or v["confidence"] < min_confidence:
            continue
        fam.setdefault(c.family, []).append(1.0 if v["verdict"] == "supported" else 0.0)
    if not fam:
        return None, {"reason": "no confident verdicts"}
    return float(np.mean([np.mean(v) for v in fam.values()])), {"families": {k: float(np.mean(v)) for k, v in fam.items()}}


# ----------------------------------------------------------------------------- the structure stage


def crop(image: np.ndarray, box, context: float = 0.1) -> np.ndarray:
    """`box` of `image` with `context` of its size around it (what the claims judge sees)."""
    H, W = image.shape[:2]
    x, y, w, h = box
    px, py = context * w, context * h
    x0, y0 = max(0, int(x - px)), max(0, int(y - py))
    x1, y1 = min(W, int(np.ceil(x + w + px))), min(H, int(np.ceil(y + h + py)))
    return np.ascontiguousarray(image[y0:max(y0 + 1, y1), x0:max(x0 + 1, x1)])


def lift_keypoints(kp, depth: np.ndarray, K: np.ndarray, radius: int = 2):
    """Keypoints lifted to camera space (J x 3) with `depth`: the median depth of a small window
    at each landmark (a thin limb's own pixel often shows the background). A landmark without
    valid depth gets confidence 0, so its segments are not measured."""
    if kp is None:
        return None
    Hd, Wd = depth.shape
    z = np.zeros(len(kp.xy))
    for k, (x, y) in enumerate(np.asarray(kp.xy, float)[:, :2]):
        xi, yi = int(round(x)), int(round(y))
        win = depth[max(0, yi - radius):min(Hd, yi + radius + 1), max(0, xi - radius):min(Wd, xi + radius + 1)]
        win = win[np.isfinite(win) & (win > 0)]
        z[k] = float(np.median(win)) if win.size else 0.0
    xy = np.asarray(kp.xy, np.float64)[:, :2]
    ray = np.concatenate([xy, np.ones((len(xy), 1))], 1) @ np.linalg.inv(K).T
    conf = np.where(z > 0, np.asarray(kp.conf, np.float64), 0.0)
    return Keypoints(xy=ray * z[:, None], conf=conf, edges=list(kp.edges))


def _frame_depth(st, backend):
    """(depth, K) of the frame from the backend's depth model, once per frame; None without one."""
    if backend.depth is None or st.bank.case.geometry is None:
        return None
    if st.frame_depth is None:
        d, K = backend.depth.estimate(st.frame)
        geo = st.bank.case.geometry
        K = np.asarray(K, np.float64) if K is not None else frame_intrinsics(geo.K, st.bank.shape, st.shape)
        st.frame_depth = (np.asarray(d, np.float32), K)
    return st.frame_depth


def _pose(st, i, ob, backend, config, poses: dict | None = None) -> float | None:
    """Eq. 5 on the landmarks in I0 and in the frame; lifted to 3-D (paper) when the case has depth and
    the backend a depth model for the frame, else in image pixels. `poses`: the frame's landmarks by
    instance where `frame_poses` found them in one batch."""
    bank, pose, cat = st.bank, backend.pose, st.bank.categories[i]
    key = f"pose0:{bank.ids[i]}"
    if key not in bank.cache:
        bank.cache[key] = pose.keypoints(bank.image, bank.boxes[i], category=cat)
    kp0 = bank.cache[key]
    kp1 = poses[i] if poses is not None and i in poses else pose.keypoints(st.frame, ob.box, category=cat)
    fd = _frame_depth(st, backend) if kp0 is not None and kp1 is not None else None
    if fd is not None:
        geo = bank.case.geometry
        kp0, kp1 = lift_keypoints(kp0, np.where(geo.valid, geo.depth, 0), geo.K), lift_keypoints(kp1, *fd)
    return pose_structure(kp0, kp1, tau=config.structure.pose_tau)


def instance_structure(st, i, ob, backend, config, judge, poses: dict | None = None) -> tuple[float | None, str | None]:
    """(score, source) for instance i matched to observation `ob`: static residual for static
    instances; else pose keypoints where the backend has them for the category, else the claims judge.
    `poses`: the frame's landmarks by instance, found in one batch (`frame_poses`)."""
    bank, frame, cam = st.bank, st.frame, st.cam
    if bank.tracks[i] == "static":
        s, info = static_structure(
            bank, i, frame, ob.box, cam, backend.matcher, lambda_g=config.structure.lambda_g,
            min_correspondences=config.structure.min_correspondences,
        )
        return (s, info["source"]) if s is not None else (None, None)
    if backend.pose is not None and backend.pose.supports(bank.categories[i]):
        s = _pose(st, i, ob, backend, config, poses)
        if s is not None:
            return s, StructureSource.POSE
    inst = bank.case.instances[i]
    if judge is not None and inst.claims:
        s, _ = claims_structure(
            judge, crop(bank.image, bank.boxes[i]), crop(frame, ob.box), bank.categories[i], inst.claims,
            max_claims=config.structure.max_claims, min_confidence=config.structure.claim_confidence,
        )
        if s is not None:
            return s, StructureSource.CLAIMS
    return None, None


def frame_poses(st, backend) -> dict | None:
    """The frame's landmarks of every matched instance that Structure measures by pose, in one batch
    (instance -> Keypoints or None), for a pose estimator that takes several boxes at once
    (`BatchPoseEstimator`: a forward per kind of object, not per instance); None for one that does not."""
    pose = backend.pose
    if not isinstance(pose, BatchPoseEstimator):
        return None
    bank, todo = st.bank, []
    for i in range(st.n):
        j = st.assoc.match[i]
        if j is not None and bank.tracks[i] != "static" and pose.supports(bank.categories[i]):
            todo.append((i, st.obs[j].box))
    if not todo:
        return {}
    found = pose.keypoints_many(st.frame, [b for _, b in todo], [bank.categories[i] for i, _ in todo])
    return {i: kp for (i, _), kp in zip(todo, found)}


def measure_structure(st, backend, config, judge) -> None:
    st.structure, st.structure_source = [None] * st.n, [None] * st.n
    poses = frame_poses(st, backend)
    for i in range(st.n):
        j = st.assoc.match[i]
        if j is not None:
            st.structure[i], st.structure_source[i] = instance_structure(st, i, st.obs[j], backend, config, judge, poses)
