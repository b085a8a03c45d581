"""The propagation stage: I0's instance masks carried through the rollout by label propagation.

A searched-for object that turns, deforms or changes its light is lost by template and keypoint
search; the standard remedy of self-supervised video object segmentation is label propagation
(Jabri et al. 2020, "Space-Time Correspondence as a Contrastive Random Walk"; the DAVIS protocol
of Caron et al. 2021): every location of a new frame takes the labels of the locations it resembles
most in a memory of frames already labelled. Here the labels are I0's instance masks, jointly
(channel 0 the background, one channel per reference instance, so neighbours compete for every
location), the memory is I0 itself (global: any location) plus the last `propagation.memory`
propagated frames (local: within `propagation.radius` feature cells, objects move little between
two steps), each location keeps its `propagation.topk` best affinities, softmax at
`propagation.temperature`, and the labels are the weighted sum.

Propagation runs over the video's own frames every `propagation.stride` frames (and every sampled
frame), before the sampled frames are measured: each step needs the one before. What it hands the
per-frame stages is a `PropagatedFrame` per sampled frame; `propagated_observations` turns it into
observations (route `propagated`) with the evidence that verifies them (`PropagationEvidence`):
propagation alone is not a verdict, since a removed object's mask can survive on whatever took its
place.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from worldeval.geometry import mask_box
from worldeval.opis.backends.base import ROUTE_PROPAGATED, DenseFeatures, Observation, PropagationEvidence
from worldeval.opis.perception.background import BackgroundChain, full_homography
from worldeval.opis.perception.persistent import WINDOW, PersistentContent
from worldeval.opis.perception.projection import OCCLUDED, OUT_OF_VIEW

BACKGROUND = 0  # label channel of the background; instance k is channel k + 1


@dataclass
class PropagatedFrame:
    """Labels of one sampled frame at feature resolution, with that frame's features."""

    index: int
    labels: np.ndarray  # (K + 1) x h x w float32, sums to 1 at every location
    features: np.ndarray  # h x w x C, unit vectors
    last_seen: list[tuple | None] = field(default_factory=list)  # per instance: (box at feature scale, leaving the frame) when last present
    reference: "PropagationReference | None" = None  # I0's side, which verification compares with
    part_floor: float | None = None  # the features' `part_floor`: the part match a search find needs where propagation lost its instance
    carried: np.ndarray | None = None  # K x h x w: the part of each instance's label carried along its own track
    new_content: list[np.ndarray] = field(default_factory=list)  # full-resolution masks of new static content (`persistent.py`)
    # I0's full-resolution pixels -> this frame's by the chained background (`background.py`); None where
    # the chain does not run or a step of it failed
    background: np.ndarray | None = None
    # observation masks already brought to the feature grid (`mask_cover`, `mask_cells`): each mask is
    # compared with many instances, and resizing it cost more than the comparison
    cells: dict = field(default_factory=dict, repr=False, compare=False)
    covers: dict = field(default_factory=dict, repr=False, compare=False)


@dataclass
class PropagationReference:
    """I0's side of the propagation: its features, labels and per-instance mass (share of the frame)."""

    features: np.ndarray  # h0 x w0 x C
    labels: np.ndarray  # (K + 1) x h0 x w0
    mass: np.ndarray  # K: each instance's label mass as a share of the frame
    # feature rows of I0's cells by label channel (`label_features`), gathered once per case
    _rows: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def n(self) -> int:
        return self.labels.shape[0] - 1

    def label_features(self, channel: int) -> np.ndarray:
        """Features (cells x C) of I0's cells whose label `channel` exceeds 0.5 (0: the background, k + 1: instance k)."""
        rows = self._rows.get(channel)
        if rows is None:
            f0 = self.features.reshape(-1, self.features.shape[-1])
            rows = self._rows[channel] = f0[self.labels[channel].reshape(-1) > 0.5]
        return rows


def reference_labels(masks: list[np.ndarray], h: int, w: int) -> np.ndarray:
    """(K + 1) x h x w soft labels of the instance masks at feature resolution (area-averaged)."""
    import cv2

    inst = [cv2.resize(m.astype(np.float32), (w, h), interpolation=cv2.INTER_AREA) for m in masks]
    inst = np.stack(inst) if inst else np.zeros((0, h, w), np.float32)
    total = inst.sum(0)
    # masks are exclusive in a case, but area averaging at an edge can sum past 1
    scale = np.maximum(1.0, total)
    inst = inst / scale
    bg = np.clip(1.0 - inst.sum(0), 0.0, 1.0)
    return np.concatenate([bg[None], inst]).astype(np.float32)


def build_propagation_reference(image: np.ndarray, masks: list[np.ndarray], features: DenseFeatures) -> PropagationReference:
    f0 = np.asarray(features.dense(image), np.float32)
    lab = reference_labels(masks, *f0.shape[:2])
    return PropagationReference(features=f0, labels=lab, mass=lab[1:].reshape(len(masks), -1).mean(1))


def _window(h: int, w: int, radius: int):
    """(hw x P long, hw x P bool): the cells within `radius` (Chebyshev) of each cell, the reach of a
    remembered frame, as clamped flat indices, and which of them lie outside the frame."""
    import torch

    ys, xs = np.divmod(np.arange(h * w), w)
    d = np.arange(-radius, radius + 1)
    dy, dx = np.repeat(d, d.size), np.tile(d, d.size)
    ny, nx = ys[:, None] + dy[None], xs[:, None] + dx[None]
    off = (ny < 0) | (ny >= h) | (nx < 0) | (nx >= w)
    nbr = np.clip(ny, 0, h - 1) * w + np.clip(nx, 0, w - 1)
    return torch.from_numpy(nbr.astype(np.int64)), torch.from_numpy(off)


class LabelPropagator:
    """One propagation pass over a rollout: feed frames in order, get their labels.

    Beside the labels it keeps, per instance, the part of its label carried along the object's own
    track (`carried`): from the remembered frames' carried labels, and from I0 only near where the
    track was in the step before (within `radius` cells, I0's own place at the first step). Labels
    that I0's memory puts anywhere else are the object found again somewhere new: after an
    occlusion, or on another thing that resembles it (a different car driving in where the removed
    one stood). The labels themselves are the protocol's; `carried` only says where they came from.
    """

    def __init__(self, ref: PropagationReference, topk: int = 5, temperature: float = 0.07, memory: int = 4, radius: int = 6):
        import torch

        self.ref_f = torch.from_numpy(ref.features.reshape(-1, ref.features.shape[-1]))
        self.ref_l = torch.from_numpy(ref.labels.reshape(ref.labels.shape[0], -1).T.copy())
        self.topk, self.temperature, self.radius = int(topk), float(temperature), int(radius)
        self.recent: deque = deque(maxlen=max(0, int(memory)))
        self._window_cache: dict = {}
        self.track = torch.from_numpy(ref.labels[1:].copy())  # K x h0 x w0: where each instance's track was last
        self.carried: np.ndarray | None = None  # K x h x w of the last step

    def step(self, features: np.ndarray, to_memory: list | None = None) -> np.ndarray:
        """(K + 1) x h x w labels of a frame from its h x w x C features. `to_memory`: per remembered
        frame (oldest first), the 3 x 3 map of this frame's cell coordinates to that frame's where the
        background moved (None: no estimate): its window is then searched at both places."""
        import torch

        h, w, c = features.shape
        tgt = torch.from_numpy(np.ascontiguousarray(features.reshape(-1, c), dtype=np.float32))
        n0 = self.ref_l.shape[0]
        aff0 = tgt @ self.ref_f.T
        keep = [m[0].shape[0] == tgt.shape[0] for m in self.recent]
        local = [m for m, k in zip(self.recent, keep) if k]  # (another size cannot happen within one video)
        if local:
            # a remembered frame is only reachable within `radius` cells: its affinities are gathered
            # at each location's (2r + 1)^2 window (out-of-frame places -inf) instead of computed and
            # masked for every pair, which keeps the top-k over hw0 + n (2r + 1)^2 entries, not hw0 + n hw
            moves = [M for M, k in zip(to_memory or [None] * len(keep), keep) if k]
            nbrs, offs = self._windows(h, w, moves)
            affs = [aff0] + [(tgt @ f.T).gather(1, nb).masked_fill_(of, float("-inf")) for (f, _, _), nb, of in zip(local, nbrs, offs)]
            vals, idx = torch.cat(affs, 1).topk(min(self.topk, aff0.shape[1] + len(local) * nbrs.shape[2]), dim=1)
            lab, car = self._pick(idx, n0, local, nbrs)
        else:
            vals, idx = aff0.topk(min(self.topk, aff0.shape[1]), dim=1)
            lab, car = self.ref_l[idx], self.ref_l[:, 1:][idx]
        wts = torch.softmax(vals / self.temperature, dim=1)
        out = (wts[..., None] * lab).sum(1)  # hw x (K + 1)
        carried = (wts[..., None] * (car * self._near_track(h, w, idx < n0))).sum(1)  # hw x K
        self.recent.append((tgt, out, carried))
        self.track = carried.T.reshape(-1, h, w)
        self.carried = self.track.contiguous().numpy()
        return out.T.reshape(-1, h, w).contiguous().numpy()

    def _windows(self, h: int, w: int, moves: list):
        """(n x hw x P long, n x hw x P bool) for the n remembered frames: each location's window, and where
        the background moved by a cell or more, a second window at its moved place (cells of the first
        masked there, so no cell counts twice); P doubles only when some frame has a second window."""
        import torch

        nbr, off = self._window(h, w)
        second = [None if M is None else _moved_window(h, w, self.radius, M) for M in moves]
        if all(s is None for s in second):
            return nbr[None].expand(len(moves), -1, -1), off[None].expand(len(moves), -1, -1)
        none = torch.ones_like(off)
        nbrs = torch.stack([torch.cat([nbr, nbr if s is None else s[0]], 1) for s in second])
        offs = torch.stack([torch.cat([off, none if s is None else s[1]], 1) for s in second])
        return nbrs, offs

    def _window(self, h: int, w: int):
        """(hw x P long, hw x P bool): each location's (2r + 1)^2 window of cells (flat index, clamped) and
        which of them fall outside the frame."""
        got = self._window_cache.get((h, w))
        if got is None:
            got = self._window_cache[(h, w)] = _window(h, w, self.radius)
        return got

    def _pick(self, idx, n0: int, local: list, nbr):
        """(hw x topk x (K + 1), hw x topk x K): the labels and carried labels the top-k chose, rows of
        I0's where the index is below `n0`, else of a remembered frame at a place of the window."""
        import torch

        p = nbr.shape[2]
        mem = (idx - n0).clamp(min=0)
        which = (mem // p).clamp(max=len(local) - 1)
        cell = nbr[which, torch.arange(idx.shape[0])[:, None], mem % p]  # the remembered frame's cell at that window place
        from_i0, i0 = (idx < n0)[..., None], idx.clamp(max=n0 - 1)
        lab = torch.where(from_i0, self.ref_l[i0], torch.stack([m[1] for m in local])[which, cell])
        car = torch.where(from_i0, self.ref_l[:, 1:][i0], torch.stack([m[2] for m in local])[which, cell])
        return lab, car

    def _near_track(self, h: int, w: int, from_i0):
        """hw x topk x K factor: 1 for remembered frames' entries, and for I0's entries where the location
        lies within `radius` cells of its instance's last track (carried label above 0.5)."""
        import torch
        import torch.nn.functional as F

        track = self.track[None].float()
        if track.shape[-2:] != (h, w):
            track = F.interpolate(track, size=(h, w), mode="bilinear", align_corners=False)
        near = F.max_pool2d((track > 0.5).float(), 2 * self.radius + 1, stride=1, padding=self.radius)[0]  # K x h x w
        near = near.reshape(near.shape[0], -1).T  # hw x K
        return torch.where(from_i0[..., None], near[:, None, :], torch.ones(()))


def _moved_window(h: int, w: int, radius: int, M: np.ndarray):
    """(hw x P long, hw x P bool) or None: the (2r + 1)^2 window around where `M` sends each cell, flat
    indices clamped, masked outside the frame and inside the cell's own window; None when `M` moves no
    cell by a whole cell (the own window already covers it)."""
    import torch

    ys, xs = np.divmod(np.arange(h * w), w)
    p = M @ np.stack([xs, ys, np.ones_like(xs)]).astype(np.float64)
    cx, cy = np.round(p[0] / p[2]).astype(np.int64), np.round(p[1] / p[2]).astype(np.int64)
    if not ((cx != xs) | (cy != ys)).any():
        return None
    d = np.arange(-radius, radius + 1)
    dy, dx = np.repeat(d, d.size), np.tile(d, d.size)
    ny, nx = cy[:, None] + dy[None], cx[:, None] + dx[None]
    off = (ny < 0) | (ny >= h) | (nx < 0) | (nx >= w)
    off |= (np.abs(ny - ys[:, None]) <= radius) & (np.abs(nx - xs[:, None]) <= radius)
    nbr = np.clip(ny, 0, h - 1) * w + np.clip(nx, 0, w - 1)
    return torch.from_numpy(nbr), torch.from_numpy(off)


def propagation_grid(num_frames: int, sampled: list[int], stride: int) -> list[int]:
    """Video frames the propagation visits: every `stride`-th frame and every sampled one, up to the last sample."""
    if not sampled:
        return []
    last = max(sampled)
    return sorted(set(range(max(1, stride), last + 1, max(1, stride))) | set(sampled))


def _last_seen(labels: np.ndarray, k: int, min_cells: float = 0.5, edge_band: float = 0.25) -> tuple | None:
    """(box at feature scale, whether it is leaving the frame) of instance k's label mass, or None when it has none.

    Leaving: the mask touches a side of the frame and its centre lies within `edge_band` of that side.
    Touching alone is not enough: a large object (a rider and bike) touches the bottom in every frame.
    """
    m = labels[k + 1] > 0.5
    if m.sum() < min_cells:
        return None
    box = mask_box(m)
    h, w = m.shape
    x, y, bw, bh = box
    ys, xs = np.nonzero(m)
    cx, cy = (xs.mean() + 0.5) / w, (ys.mean() + 0.5) / h
    leaving = ((x <= 0 and cx < edge_band) or (x + bw >= w and cx > 1 - edge_band)
               or (y <= 0 and cy < edge_band) or (y + bh >= h and cy > 1 - edge_band))
    return box, bool(leaving)


def propagate_rollout(ref: PropagationReference, frames: dict[int, np.ndarray], grid: list[int], sampled: list[int],
                      features: DenseFeatures, config, image0: np.ndarray | None = None) -> dict[int, PropagatedFrame]:
    """Propagate I0's labels over `grid` (frames: index -> RGB); the sampled frames' results."""
    return dict(iter_propagation(ref, frames, grid, sampled, features, config, image0))


def iter_propagation(ref: PropagationReference, frames: dict[int, np.ndarray], grid: list[int], sampled: list[int],
                     features: DenseFeatures, config, image0: np.ndarray | None = None):
    """(index, PropagatedFrame) of each sampled frame, in order, as soon as propagation reaches it.
    With I0 (`image0`) and `extras.persistent` on, the grid also feeds the new-static-content route."""
    prop = LabelPropagator(ref, topk=config.propagation.topk, temperature=config.propagation.temperature,
                           memory=config.propagation.memory, radius=config.propagation.radius)
    compensate, persistent = image0 is not None and config.propagation.compensate, image0 is not None and config.extras.persistent
    # the background followed over the grid: where the remembered frames' windows moved to, and the
    # persistent route's chain (kept: I0, the remembered frames and the newest)
    chain = (BackgroundChain(image0, ref.labels[1:], keep=max(WINDOW, prop.recent.maxlen) + 2, after_failure=compensate)
             if compensate or persistent else None)
    content = PersistentContent(chain=chain) if persistent else None
    want = set(sampled)
    last: list[tuple | None] = [None] * ref.n
    for t in grid:
        f = np.asarray(features.dense(frames[t]), np.float32)
        if chain is not None:
            chain.advance(t, frames[t])
        lab = prop.step(f, chain.moved(len(prop.recent), f.shape[:2]) if compensate else None)
        if chain is not None:
            chain.label(prop.carried if prop.carried is not None else lab[1:])
        seen_before = list(last)
        # where each object's own track was (not where I0's memory found a look-alike): a removed
        # car is not "out of view" because another car leaves the frame
        track = np.concatenate([lab[:1], prop.carried]) if prop.carried is not None else lab
        for k in range(ref.n):
            seen = _last_seen(track, k)
            if seen is not None:
                last[k] = seen
        if t in want:
            yield t, PropagatedFrame(index=t, labels=lab, features=f, last_seen=seen_before, reference=ref,
                                     part_floor=features.part_floor, carried=prop.carried,
                                     new_content=content.candidates() if content is not None else [],
                                     background=full_homography(chain.first, chain.recent[-1]) if chain is not None else None)


def surround(cells: np.ndarray, background: np.ndarray, gap: int = 1, width: int = 2) -> np.ndarray:
    """Cells of a ring around `cells` (bool h x w): `gap` cells away, `width` cells wide, labelled background now.

    The gap keeps out the cells that straddle the mask's edge and so mix object and surround."""
    import cv2

    def grown(r: int) -> np.ndarray:
        k = cv2.getStructuringElement(cv2.MORPH_RECT, (2 * r + 1, 2 * r + 1))
        return cv2.dilate(cells.astype(np.uint8), k) > 0

    return grown(gap + width) & ~grown(gap) & background


def object_share(ref: PropagationReference, feats: np.ndarray, cells: np.ndarray, k: int,
                 labels: np.ndarray | None = None) -> float:
    """Share of the cells (bool h x w) whose features are closer to I0's instance k than to any background.

    Each side's closeness is the best cosine over its cells. The object side is I0's instance k (label
    above 0.5); the background side is I0's background and, given this frame's `labels`, the frame's
    own surround of the mask (`surround`). I0's background alone misses a removed object whose place was
    filled with a continuation of what lies around it (inpainting, or a model painting the place over):
    that filling resembles its surround in this frame more than any part of I0's object, while a real
    object differs from its surround, or it could not be segmented in the first place.
    """
    obj, bg = ref.label_features(k + 1), ref.label_features(BACKGROUND)
    if not cells.any() or not len(obj):
        return 0.0
    around = feats[surround(cells, labels[BACKGROUND] > 0.5)] if labels is not None else feats[:0]
    if not len(bg) and not len(around):
        return 1.0
    q = feats[cells]
    best_obj = (q @ obj.T).max(1)
    best_bg = np.full(len(q), -np.inf, np.float32)
    if len(bg):
        best_bg = (q @ bg.T).max(1)
    if len(around):
        best_bg = np.maximum(best_bg, (q @ around.T).max(1))
    return float((best_obj > best_bg).mean())


def part_match(pf: "PropagatedFrame", mask: np.ndarray, k: int) -> float | None:
    """Mean over the mask's feature cells of the best cosine to I0's instance-k cells; None without cells.

    A part-level likeness: every part of the object now is compared with the part of I0's object it
    resembles most, so a turning object whose parts stay the same keeps a high value where one pooled
    descriptor of the whole crop does not (a car seen from the front and then from the side)."""
    ref = pf.reference
    if ref is None:
        return None
    q = mask_cells(pf, mask)
    obj = ref.label_features(k + 1)
    if q is None or not len(obj):
        return None
    return float((q @ obj.T).max(1).mean())


def mask_cover(pf: "PropagatedFrame", mask: np.ndarray) -> np.ndarray:
    """h x w share of each feature cell the mask covers (area-averaged). Kept per mask for the frame
    (a frame's observation masks are made once and never edited)."""
    hit = pf.covers.get(id(mask))
    if hit is not None and hit[0] is mask:
        return hit[1]
    h, w = pf.features.shape[:2]
    H, W = mask.shape[:2]
    x, y, bw, bh = (int(v) for v in mask_box(mask))
    # OpenCV's area average (cv2.resize, INTER_AREA) as two weight matrices applied to the mask's box
    # only: the same shares to float32 rounding, without converting and resizing the whole frame for
    # every observation (a quarter of the propagation stage's own time on a 25-object frame)
    sub = mask[y : y + bh, x : x + bw].astype(np.float64)
    cover = (area_weights(H, h)[:, y : y + bh] @ sub @ area_weights(W, w)[:, x : x + bw].T).astype(np.float32)
    # the mask is kept with its cover: its id cannot be reused by another mask while the entry lives
    pf.covers[id(mask)] = (mask, cover)
    return cover


@lru_cache(maxsize=16)
def area_weights(n: int, m: int) -> np.ndarray:
    """m x n weights of OpenCV's INTER_AREA resize from n to m samples along one axis (its
    `computeResizeAreaTab`): each output averages the inputs its interval [k n/m, (k+1) n/m) covers,
    a partly covered input by the covered share. Read-only: it is shared."""
    scale = n / m
    wts = np.zeros((m, n))
    for k in range(m):
        f1 = k * scale
        f2 = f1 + scale
        cell = min(scale, n - f1)
        s2 = min(math.floor(f2), n - 1)
        s1 = min(math.ceil(f1), s2)
        if s1 - f1 > 1e-3:
            wts[k, s1 - 1] = (s1 - f1) / cell
        wts[k, s1:s2] = 1.0 / cell
        if f2 - s2 > 1e-3:
            wts[k, s2] = min(f2 - s2, 1.0, cell) / cell
    wts.setflags(write=False)
    return wts


def mask_cells(pf: "PropagatedFrame", mask: np.ndarray) -> np.ndarray | None:
    """Features (cells x C) of the frame's feature cells `mask` covers more than half (an object smaller
    than a cell: the cell it covers most); None when it covers none. Kept per mask for the frame."""
    hit = pf.cells.get(id(mask))
    if hit is not None and hit[0] is mask:
        return hit[1]
    cover = mask_cover(pf, mask)
    cells = cover > 0.5
    q = None
    if cells.any():
        q = pf.features[cells]
    elif cover.max() > 0:
        q = pf.features[cover >= cover.max()]
    # the mask is kept with its cells: its id cannot be reused by another mask while the entry lives
    pf.cells[id(mask)] = (mask, q)
    return q


def propagated_observations(bank, frame: np.ndarray, pf: PropagatedFrame, threshold: float = 0.5) -> list[Observation]:
    """One observation per reference instance whose propagated mask is not empty in this frame.

    The mask is the instance's label upsampled to the frame where it exceeds `threshold` and every
    other instance's label (instances stay exclusive below the protocol's 0.5), and where most of
    the label came along the object's own track (`carried`): a place the label reached by finding
    the object again elsewhere, a pasted copy beside it, is not part of it. Its evidence, from the
    feature cells whose label exceeds 0.5: label mass relative to I0's (both as shares of their
    frames), `object_share` and `carried_share`; from the mask: mean label (confidence) and the
    share above 0.5 (`core`).
    """
    import cv2

    H, W = frame.shape[:2]
    ref = pf.reference
    out = []
    n = len(bank)
    ups = [cv2.resize(pf.labels[k + 1], (W, H), interpolation=cv2.INTER_LINEAR) if (pf.labels[k + 1] > 0.5).any() else None
           for k in range(n)]
    live = [u for u in ups if u is not None]
    top = None
    if len(live) > 1:  # in place: np.max over the list stacks K frame-sized copies first
        top = live[0].copy()
        for u in live[1:]:
            np.maximum(top, u, out=top)
    for k in range(n):
        up = ups[k]
        if up is None:
            continue
        # every per-pixel test below needs up > threshold, which only the frame part around the cells
        # above it can reach: the tests run on that part (`_label_window`) and the rest stays False
        win = _label_window(pf.labels[k + 1], threshold, (H, W))
        if win is None:
            continue
        ys, xs = win
        u = up[ys, xs]
        part = u > threshold
        if top is not None:
            part &= u >= top[ys, xs]
        if pf.carried is not None:
            part &= cv2.resize(pf.carried[k], (W, H), interpolation=cv2.INTER_LINEAR)[ys, xs] >= 0.5 * u
        if not part.any():
            continue
        cells = pf.labels[k + 1] > 0.5
        core_part = part & (u > 0.5)
        mask, core = np.zeros((H, W), bool), np.zeros((H, W), bool)
        mask[ys, xs], core[ys, xs] = part, core_part
        x, y, w, h = mask_box(part)
        mass = float(pf.labels[k + 1].mean()) / max(float(ref.mass[k]), 1e-9)
        ev = PropagationEvidence(mass=mass, confidence=float(u[part].mean()), object_share=object_share(ref, pf.features, cells, k, pf.labels),
                                 carried=carried_share(pf, cells, k), core=float(core_part.sum()) / float(part.sum()))
        out.append(Observation(mask=mask, box=(x + xs.start, y + ys.start, w, h), category=bank.categories[k], score=ev.confidence,
                               source="propagation", route=ROUTE_PROPAGATED, found_for=[bank.ids[k]], propagation=ev,
                               core_mask=core))
    return out


def _label_window(label: np.ndarray, threshold: float, shape: tuple[int, int]) -> tuple[slice, slice] | None:
    """(rows, columns) of the frame outside which a label map upsampled bilinearly to `shape` stays at or
    below `threshold`; None where no cell exceeds it.

    OpenCV's bilinear upsampling makes output pixel x from cells floor(fx) and floor(fx) + 1, fx = (x + 0.5)
    w / W - 0.5: a convex combination, so it exceeds the threshold only next to a cell that does. The
    cells are taken a hair below the threshold and the window two pixels wider than that reach, so
    float rounding cannot put a pixel above it outside."""
    rows, cols = np.nonzero(label > threshold - 1e-6)
    if not len(rows):
        return None
    h, w = label.shape
    H, W = shape

    def reach(c0: int, c1: int, n: int, N: int) -> slice:
        lo = math.floor((c0 - 0.5) * N / n - 0.5) - 2
        hi = math.ceil((c1 + 1.5) * N / n - 0.5) + 2
        return slice(max(0, lo), min(N, hi))

    return reach(int(rows.min()), int(rows.max()), h, H), reach(int(cols.min()), int(cols.max()), w, W)


def carried_share(pf: PropagatedFrame, cells: np.ndarray, k: int) -> float:
    """Share of instance k's label inside `cells` that came along its own track (1 without that record)."""
    if pf.carried is None:
        return 1.0
    total = float(pf.labels[k + 1][cells].sum())
    return 1.0 if total <= 0 else float(min(1.0, pf.carried[k][cells].sum() / total))


def verified(ev: PropagationEvidence | None, config) -> bool:
    """A propagated mask may stand for its object: enough of its I0 mass left, mostly on object-like
    features, mostly carried along the object's own track (not the object found again somewhere new),
    and with a core of confident label (a removed object's label fades to a haze over what replaced it)."""
    return (ev is not None and ev.mass >= config.propagation.min_mass and ev.object_share >= config.propagation.min_object_share
            and ev.carried >= config.propagation.min_carried and ev.core >= config.propagation.min_core)


def needs_find(ev: PropagationEvidence, track: str, config) -> bool:
    """A static instance's propagated mask with a weak core (under `propagation.weak_core`) is not
    enough on its own: a static object does not move, so its own find (search, template) is there to be
    had where it still shows, while a label that survived on what replaced it finds nothing. A moving
    object's core is weak whenever it moves fast (the tuning clip's rider: 0.45), so it is exempt."""
    return track == "static" and ev.core < config.propagation.weak_core


def propagation_evidence(ev: PropagationEvidence) -> float:
    """The propagated mask's evidence of being its instance, in [0, 1]: its object share.

    Not its confidence: labels are soft (a mean of 0.6-0.7 inside the mask on the tuning clip), and how
    sure the propagation is says less about identity than what the mask's features resemble in I0."""
    return float(ev.object_share)


def propagated_visibility(pf: PropagatedFrame | None, i: int, ev: PropagationEvidence | None, config) -> str | None:
    """Visibility of an unmatched instance from where its propagated mask went; None when it cannot say.

    Mass that left the frame (the instance was last seen leaving it, `_last_seen`, and has too little
    mass now): `out_of_view`. Its last place now mostly labelled as another instance (a neighbour
    moved in front): `occluded`. A mask still verified but unmatched, or lost in the open, says nothing.
    """
    if pf is None or i >= len(pf.last_seen) or pf.last_seen[i] is None or (ev is not None and verified(ev, config)):
        return None
    (x, y, w, h), at_edge = pf.last_seen[i]
    if at_edge:
        return OUT_OF_VIEW
    place = np.zeros(pf.labels.shape[1:], bool)
    place[int(y) : int(y + h), int(x) : int(x + w)] = True
    others = np.delete(pf.labels[1:], i, axis=0)
    if others.size and place.any():
        covered = (others.max(0) > 0.5) & place
        if covered.sum() >= config.camera.occluded_share * place.sum():
            return OCCLUDED
    return None
