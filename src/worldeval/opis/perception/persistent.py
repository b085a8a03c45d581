"""New content that stays where it appeared: the extras stage's route on real video (issue 30).

The change route (`changes.py`) compares a frame with I0 warped by that frame's own camera. On
real video that camera is often unreliable (a long baseline, parallax, a moving subject), and
where it is reliable, water, an animal walking or children jumping change more of the view than
the route allows, so it never names an extra there. This route reads the background followed
over the propagation grid instead (`background.BackgroundChain`: one short step at a time, chained),
so I0 can be warped to any grid frame as long as no step failed.

At a sampled frame a pixel is *new static content* when

* it differs from I0 warped there by `changes.COLOUR_DIFF` (Lab);
* it was already the same (within `SAME_DIFF`) in the `WINDOW` grid frames before, warped to this
  frame, in each of them that shows it (`MIN_SHOWN` at least: a fast pan brings content into view
  within the window): it persists and stands still in the scene, as a pasted or invented object on a
  table or a wall does; water, a walking animal and a misfit step do not;
* no instance's label lies on it (I0's, or the one carried along its track in this frame or the
  window's frames), and I0 shows it (away from a band along the border). An object put on an
  annotated table is therefore left to the change route.

Compact regions of it (the change route's size rule; its fill rule, or half the convex hull) become
candidates when nothing near their place in the warped I0 explains them: the smallest RMS Lab
distance between the region and I0's pixels shifted by up to half the region's size is at least
`UNEXPLAINED`. Parallax and a slightly wrong homography move content by a few pixels, and it is
found again there; an object that was not in I0 is not. What it does not see: a new object that
moves (it is never the same in two grid frames), one that appears in the last `WINDOW` grid frames,
and anything after a failed step.
"""

from __future__ import annotations

import numpy as np

from worldeval.opis.perception.background import BackgroundChain, GridFrame
from worldeval.opis.perception.changes import COLOUR_DIFF, MAX_AREA_SHARE, MIN_AREA_SHARE, MIN_FILL, away_from_edge

ROUTE_PERSISTENT = "persistent"
WINDOW = 2  # grid frames before the sampled one in which new content must already stand
# window frames that must show a pixel: under a fast pan content enters the view within the window,
# and it is judged on the frames that show it (tuning: bmx-trees played twice as fast, a cat pasted,
# in view in one sampled frame that had entered the view one grid frame before: 0/1 with every
# window frame required, 1/1 with one; faithful tuning clips no extra either way)
MIN_SHOWN = 1
SAME_DIFF = 14.0  # Lab distance within which a pixel is the same in two warped grid frames
# working pixels within which a matching colour is looked for: a chained homography is a pixel or
# two off, and on texture (fur, print) that alone makes a pixel differ
NEW_REACH, SAME_REACH = 2, 1
# best-shift RMS Lab distance to I0 that no shifted I0 content explains. Tuning (davis_bmx_trees and
# sam2_bedroom, faithful and with a pasted cat): parallax and misfit regions 15-40, the cat 67-114
UNEXPLAINED = 56.0
CLOSE_PX = 5  # working pixels over which pieces of new content are joined into one region
# a region filling less of its box than the change route's MIN_FILL may still be an object when it
# fills half its convex hull (tuning, sam2_bedroom: the new part of a pasted lying cat fills 0.32-0.37
# of its box and 0.51-0.59 of its hull)
MIN_SOLIDITY = 0.5


class PersistentContent:
    """Names new static content at a grid frame (`candidates`) from the background chain (`background.py`).
    Where an instance's carried label lies (`background.LABEL_LEVEL`) is not new content."""

    def __init__(self, image0: np.ndarray | None = None, labels0: np.ndarray | None = None, chain: BackgroundChain | None = None):
        """Over `chain` (the propagation's), or a chain of its own from I0 and `labels0` (K x h x w
        at feature resolution), fed by `step`."""
        self.chain = chain if chain is not None else BackgroundChain(image0, labels0, keep=WINDOW + 1, after_failure=False)

    @property
    def first(self) -> GridFrame:
        return self.chain.first

    @property
    def recent(self) -> list[GridFrame]:
        """The window's grid frames and the newest (I0 among them at the start)."""
        return list(self.chain.recent)[-(WINDOW + 1) :]

    def step(self, index: int, frame: np.ndarray, labels: np.ndarray) -> None:
        """Take the next grid frame (RGB) with its instances' labels carried along their own tracks
        (K x h x w, `LabelPropagator.carried`), on a chain of its own."""
        self.chain.advance(index, frame)
        self.chain.label(labels)

    def candidates(self) -> list[np.ndarray]:
        """Full-resolution masks of new static content in the frame last stepped to."""
        import cv2

        recent = self.recent
        cur = recent[-1]
        if len(recent) < WINDOW + 1 or any(g.H is None for g in recent):
            return []
        h, w = cur.small.shape[:2]
        lab0, valid = self._warp(self.first, cur)
        valid = away_from_edge(valid)
        window = [(self._warp(g, cur), g) for g in recent[:-1]]
        shown = [away_from_edge(v) for (_, v), _g in window]
        seen = np.sum(shown, axis=0) >= MIN_SHOWN
        # where an instance stood in I0 is its place, not new content
        cand = valid & seen & ~cur.labelled & ~self._labelled_at(self.first, cur) & (_sq_dist(cur.lab, lab0) > COLOUR_DIFF**2)
        # the tests by the nearest colour within reach, only where the plain ones left a pixel (a
        # nearer colour can only lower the distance): a few per cent of the frame
        ys, xs = np.nonzero(cand)
        ok = _nearest_sq(cur.lab, lab0, ys, xs, NEW_REACH) > COLOUR_DIFF**2
        ys, xs = ys[ok], xs[ok]
        for ((lab_g, _v), g), show in zip(window, shown):
            ok = ~self._labelled_at(g, cur)[ys, xs] & (~show[ys, xs] | (_nearest_sq(cur.lab, lab_g, ys, xs, SAME_REACH) < SAME_DIFF**2))
            ys, xs = ys[ok], xs[ok]
        region = np.zeros((h, w), np.uint8)
        region[ys, xs] = 1
        region = cv2.morphologyEx(region, cv2.MORPH_OPEN, np.ones((3, 3), np.uint8))
        # an object's new pixels come in pieces (fur, print: parts of it match I0's colours); closing
        # joins the pieces of one object and filling its holes gives its outline's area, before its
        # size and fill are judged
        region = _fill_holes(cv2.morphologyEx(region, cv2.MORPH_CLOSE, np.ones((CLOSE_PX, CLOSE_PX), np.uint8))) & (valid & seen).astype(np.uint8)
        n, comp, stats, _ = cv2.connectedComponentsWithStats(region, connectivity=8)
        out = []
        for k in range(1, n):
            x, y, bw, bh, area = (int(v) for v in stats[k])
            if not (MIN_AREA_SHARE * h * w <= area <= MAX_AREA_SHARE * h * w):
                continue
            m = comp == k
            if area < MIN_FILL * bw * bh and _solidity(m, area) < MIN_SOLIDITY:
                continue
            if _explained_nearby(cur.lab, lab0, m, (x, y, bw, bh)):
                continue
            out.append(cv2.resize(m.astype(np.uint8), (cur.full[1], cur.full[0]), interpolation=cv2.INTER_NEAREST) > 0)
        return out

    def _labelled_at(self, g: GridFrame, cur: GridFrame) -> np.ndarray:
        import cv2

        h, w = cur.small.shape[:2]
        return cv2.warpPerspective(g.labelled.astype(np.uint8), cur.H @ np.linalg.inv(g.H), (w, h), flags=cv2.INTER_NEAREST) > 0

    def _warp(self, g: GridFrame, cur: GridFrame) -> tuple[np.ndarray, np.ndarray]:
        """Grid frame `g`'s Lab warped to `cur` by the chained background, and where it lands."""
        import cv2

        h, w = cur.small.shape[:2]
        M = cur.H @ np.linalg.inv(g.H)
        lab = cv2.warpPerspective(g.lab, M, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        valid = cv2.warpPerspective(np.ones(g.small.shape[:2], np.uint8), M, (w, h), flags=cv2.INTER_NEAREST) > 0
        return lab, valid


def _solidity(m: np.ndarray, area: int) -> float:
    """Area over the area of its convex hull: an object's outline is mostly convex, a residue along edges is not."""
    import cv2

    ys, xs = np.nonzero(m)
    hull = cv2.convexHull(np.stack([xs, ys], axis=1).astype(np.int32))
    return area / max(1.0, float(cv2.contourArea(hull)) + 0.5 * float(cv2.arcLength(hull, True)))


def _fill_holes(region: np.ndarray) -> np.ndarray:
    """`region` (uint8 0/1) with every hole filled: what the outside cannot reach is inside an outline."""
    import cv2

    h, w = region.shape
    canvas = np.zeros((h + 2, w + 2), np.uint8)
    canvas[1:-1, 1:-1] = region
    outside = canvas.copy()
    cv2.floodFill(outside, np.zeros((h + 4, w + 4), np.uint8), (0, 0), 2)
    return (outside[1:-1, 1:-1] != 2).astype(np.uint8)


def _sq_dist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    d = a - b
    return np.einsum("ijk,ijk->ij", d, d)


def _nearest_sq(a: np.ndarray, b: np.ndarray, ys: np.ndarray, xs: np.ndarray, reach: int) -> np.ndarray:
    """At pixels (ys, xs) of `a`: the squared Lab distance to the closest colour of `b` within `reach`
    pixels (Chebyshev; the border replicated)."""
    h, w = b.shape[:2]
    pa = a[ys, xs]
    best = np.full(len(ys), np.inf, np.float32)
    for dy in range(-reach, reach + 1):
        yy = np.clip(ys + dy, 0, h - 1)
        for dx in range(-reach, reach + 1):
            d = pa - b[yy, np.clip(xs + dx, 0, w - 1)]
            np.minimum(best, np.einsum("ij,ij->i", d, d), out=best)
    return best


def _explained_nearby(lab: np.ndarray, lab0: np.ndarray, m: np.ndarray, box: tuple[int, int, int, int]) -> bool:
    """Whether I0's content within half the region's size of its place has the region's colours (RMS Lab)."""
    import cv2

    x, y, bw, bh = box
    h, w = m.shape
    pad = max(4, int(0.5 * max(bw, bh)))
    x0, y0, x1, y1 = max(0, x - pad), max(0, y - pad), min(w, x + bw + pad), min(h, y + bh + pad)
    tm = np.repeat(m[y : y + bh, x : x + bw, None].astype(np.float32), 3, axis=2)
    r = cv2.matchTemplate(np.ascontiguousarray(lab0[y0:y1, x0:x1]), np.ascontiguousarray(lab[y : y + bh, x : x + bw]),
                          cv2.TM_SQDIFF, mask=tm)
    best = float(np.nan_to_num(r, nan=np.inf).min())
    return np.sqrt(max(0.0, best) / max(1.0, float(m[y : y + bh, x : x + bw].sum()))) < UNEXPLAINED
