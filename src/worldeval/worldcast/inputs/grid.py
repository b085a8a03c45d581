"""Cutting a grid image (one picture holding all K states) into its cells.

Layout: `grid.json` `{"layout": "RxC"}` when present, otherwise fixed by the
step count (2 -> 1x2, 4 -> 2x2, 6 -> 2x3; SPEC section 4). Cells are read
row-major.

Generators often draw thin gutters between cells or a frame around the
collage. A gutter is found as a run of near-uniform lines (rows or columns
whose pixels barely vary along their length) close to where a cut is expected;
gutters are accepted only when every expected cut has one, all of one colour
and width, and are removed; otherwise cuts fall at the nominal positions.
Thin uniform runs at the outer edges (a frame) are trimmed: in the gutter
colour when there are gutters, otherwise only when very thin. A thin full-length separator far from every expected cut
means the image holds a different number of cells than declared, which is an
error, as is a cell shape no generator would produce.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from worldeval.worldcast.inputs.errors import PathError

DEFAULT_LAYOUTS = {2: (1, 2), 4: (2, 2), 6: (2, 3)}
MAX_CELL_ASPECT = 2.6  # width/height (or its inverse) beyond this is not a plausible grid cell
UNIFORM_STD = 10.0  # per-channel std (0-255) along a line below which the line counts as a separator
MAX_GUTTER_FRAC = 0.08  # a separator run wider than this fraction of a cell is background, not a gutter
SEARCH_FRAC = 0.15  # how far from the nominal cut (fraction of a cell) a gutter is looked for
MAX_FRAME_FRAC = 0.03  # without gutters, only an edge run this thin (fraction of a cell) is taken for a frame
COLOUR_STEP = 3.0  # neighbouring uniform lines differing more than this (0-255) belong to different runs
ALT_TOL_FRAC = 0.015  # position tolerance (fraction of the image) for separators of another cell count


class GridError(PathError):
    """A grid image or grid.json that cannot be cut into the case's states."""


def parse_layout(text: object, where: str | Path) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*[xX×]\s*(\d+)\s*", str(text)) if isinstance(text, str) else None
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise GridError(where, f"field 'layout' must look like '2x3' (rows x columns), got {text!r}")
    return int(m.group(1)), int(m.group(2))


def layout_for(case_dir: Path, steps: int) -> tuple[tuple[int, int], str]:
    """(rows, cols) and where the layout came from."""
    gj = case_dir / "grid.json"
    if gj.is_file():
        try:
            obj = json.loads(gj.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise GridError(gj, f"invalid JSON: {exc.msg}") from None
        if not isinstance(obj, dict) or "layout" not in obj:
            raise GridError(gj, "field 'layout' is missing")
        rows, cols = parse_layout(obj["layout"], gj)
        if rows * cols != steps:
            raise GridError(gj, f"layout {rows}x{cols} holds {rows * cols} cells but the case asks for {steps} steps")
        return (rows, cols), "grid.json"
    if steps not in DEFAULT_LAYOUTS:
        raise GridError(
            case_dir / "grid.png",
            f"no default grid layout for {steps} steps (defaults exist for 2, 4, 6); add grid.json with "
            '{"layout": "RxC"}',
        )
    return DEFAULT_LAYOUTS[steps], "default"


def _line_stats(img: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Per column (axis=1) or row (axis=0): is it near-uniform along its length, and its mean colour."""
    f = img.astype(np.float32)
    along = 0 if axis == 1 else 1
    std = f.std(axis=along).max(axis=-1)
    mean = f.mean(axis=along)
    return std < UNIFORM_STD, mean


def _runs(mask: np.ndarray, colour: np.ndarray) -> list[tuple[int, int]]:
    """Half-open [start, end) runs of uniform lines of one colour.

    Splitting on colour keeps a white gutter apart from an off-white cell
    background next to it, so the gutter is found at its true width.
    """
    out = []
    n = len(mask)
    i = 0
    while i < n:
        if mask[i]:
            j = i + 1
            while j < n and mask[j] and np.abs(colour[j] - colour[j - 1]).max() < COLOUR_STEP:
                j += 1
            out.append((i, j))
            i = j
        else:
            i += 1
    return out


@dataclass
class AxisCuts:
    spans: list[tuple[int, int]]  # [start, end) of each cell along this axis
    gutters: list[tuple[int, int]]
    trimmed: tuple[int, int]


@dataclass
class _Lines:
    """The runs of uniform lines along one axis of a grid image, and the scales cuts are judged at."""

    length: int  # pixels along the axis
    colour: np.ndarray  # mean colour of every line
    runs: list[tuple[int, int]]
    cell0: float  # nominal cell size
    max_gutter: int  # widest run that is still a gutter

    def run_colour(self, r: tuple[int, int]) -> np.ndarray:
        return self.colour[r[0]:r[1]].mean(axis=0)


def _axis_cuts(img: np.ndarray, n: int, axis: int, path: str | Path) -> AxisCuts:
    length = img.shape[1] if axis == 1 else img.shape[0]
    mask, colour = _line_stats(img, axis)
    cell0 = length / n
    lines = _Lines(length, colour, _runs(mask, colour), cell0, max(1, int(round(MAX_GUTTER_FRAC * cell0))))
    found, gutter_colour = _gutters(lines, n)
    if gutter_colour is not None:
        found = _widen_gutters(img, axis, lines, found, gutter_colour)
    lo, hi = _frame(lines, gutter_colour)
    if hi - lo < n:
        raise GridError(path, f"image too small to cut into {n} cells along {'width' if axis == 1 else 'height'}")
    _check_cell_count(lines, n, lo, hi, axis, path)
    spans = _spans(found, n, lo, hi)
    sizes = [b - a for a, b in spans]
    if min(sizes) <= 0 or max(sizes) > 1.35 * min(sizes):
        raise GridError(path, f"cells along this axis have very unequal sizes {sizes}; the layout does not fit the image")
    return AxisCuts(spans, [found[j] for j in sorted(found)], (lo, length - hi))


def _gutters(lines: _Lines, n: int) -> tuple[dict[int, tuple[int, int]], np.ndarray | None]:
    """1. Gutters: a thin one-colour run near each nominal interior cut, by cut index, and their colour.

    Either every interior cut has one, all of one colour and width, or none counts (no colour).
    """
    window = SEARCH_FRAC * lines.cell0
    found: dict[int, tuple[int, int]] = {}
    for j in range(1, n):
        x = j * lines.cell0
        near = [r for r in lines.runs if r[0] < x + window and r[1] > x - window and 0 < r[0] and r[1] < lines.length
                and r[1] - r[0] <= lines.max_gutter]
        if near:
            found[j] = min(near, key=lambda r: abs((r[0] + r[1]) / 2 - x))
    if n > 1 and len(found) == n - 1:
        cols = np.stack([lines.run_colour(r) for r in found.values()])
        widths = [r[1] - r[0] for r in found.values()]
        if np.abs(cols - cols[0]).max() < COLOUR_STEP and max(widths) - min(widths) <= 2:
            return found, cols.mean(axis=0)
    return {}, None


def _widen_gutters(img: np.ndarray, axis: int, lines: _Lines, found: dict[int, tuple[int, int]],
                   gutter_colour: np.ndarray) -> dict[int, tuple[int, int]]:
    """Lossy compression smears a gutter's outermost lines into the cells; take those along."""
    std = img.astype(np.float32).std(axis=0 if axis == 1 else 1).max(axis=-1)
    length, colour = lines.length, lines.colour

    def gutterish(i: int) -> bool:
        return 0 <= i < length and std[i] < 2.5 * UNIFORM_STD and np.abs(colour[i] - gutter_colour).max() < 40

    def content(i: int) -> bool:
        return 0 <= i < length and std[i] >= 2.5 * UNIFORM_STD

    # Only a line or two, and only when real content follows right after: a wider uniform band
    # next to the gutter is the cell's own background and stays in the cell.
    out = {}
    for j, (a, b) in found.items():
        for t in (1, 2):
            if all(gutterish(a - i) for i in range(1, t + 1)) and content(a - t - 1):
                a -= t
                break
        for t in (1, 2):
            if all(gutterish(b + i - 1) for i in range(1, t + 1)) and content(b + t):
                b += t
                break
        out[j] = (a, b)
    return out


def _frame(lines: _Lines, gutter_colour: np.ndarray | None) -> tuple[int, int]:
    """2. A frame: a thin edge run, in the gutter colour when there are gutters, else only a very thin one.

    Returns [lo, hi), the part of the axis inside the frame.
    """
    lo, hi = 0, lines.length
    for r in lines.runs:
        w = r[1] - r[0]
        if r[0] != 0 and r[1] != lines.length:
            continue
        if gutter_colour is not None:
            ok = w <= lines.max_gutter and np.abs(lines.run_colour(r) - gutter_colour).max() < COLOUR_STEP
        else:
            ok = w <= max(1, int(round(MAX_FRAME_FRAC * lines.cell0)))
        if ok and r[0] == 0:
            lo = r[1]
        elif ok:
            hi = r[0]
    return lo, hi


def _check_cell_count(lines: _Lines, n: int, lo: int, hi: int, axis: int, path: str | Path) -> None:
    """GridError when the picture holds a different number of states than declared (e.g. a 1x3 collage read as 1x2).

    The sign of it: thin separators of one colour and width, evenly spaced for another cell count.
    """
    cell = (hi - lo) / n
    thin = [r for r in lines.runs if lo < r[0] and r[1] < hi and 2 <= r[1] - r[0] <= lines.max_gutter]
    expected = [lo + j * cell for j in range(1, n)]
    tol = ALT_TOL_FRAC * (hi - lo)
    for m in range(2, 9):
        if m == n:
            continue
        alt = [lo + j * (hi - lo) / m for j in range(1, m)]
        if not any(all(abs(x - e) > tol for e in expected) for x in alt):
            continue
        match = []
        for x in alt:
            cand = [r for r in thin if abs((r[0] + r[1]) / 2 - x) <= tol]
            if not cand:
                break
            match.append(min(cand, key=lambda r: abs((r[0] + r[1]) / 2 - x)))
        else:
            cols = np.stack([lines.run_colour(r) for r in match])
            widths = [r[1] - r[0] for r in match]
            if np.abs(cols - cols[0]).max() < COLOUR_STEP and max(widths) - min(widths) <= 1:
                name = "columns" if axis == 1 else "rows"
                raise GridError(
                    path,
                    f"the image shows separators for {m} {name} but the layout asks for {n}; "
                    f"check grid.json or the number of states in the image",
                )


def _spans(found: dict[int, tuple[int, int]], n: int, lo: int, hi: int) -> list[tuple[int, int]]:
    """3. Cuts: [start, end) of every cell; gutters are removed, elsewhere the cut is at the nominal position."""
    cell = (hi - lo) / n
    bounds: list[tuple[int, int]] = []
    for j in range(1, n):
        if j in found:
            bounds.append(found[j])
        else:
            c = int(round(lo + j * cell))
            bounds.append((c, c))
    spans = []
    start = lo
    for end, nxt in bounds:
        spans.append((start, end))
        start = nxt
    spans.append((start, hi))
    return spans


def cut_grid(img: np.ndarray, rows: int, cols: int, path: str | Path = "grid.png") -> tuple[list[np.ndarray], dict]:
    """Cells of `img` in row-major order, and a record of where the cuts fell."""
    if img.ndim != 3 or img.shape[2] < 3:
        raise GridError(path, f"expected an RGB image, got shape {img.shape}")
    img = img[..., :3]
    h, w = img.shape[:2]
    cell_aspect = (w / cols) / (h / rows)
    if cell_aspect > MAX_CELL_ASPECT or cell_aspect < 1 / MAX_CELL_ASPECT:
        raise GridError(
            path,
            f"a {w}x{h} image cannot hold a {rows}x{cols} grid: each cell would have aspect {cell_aspect:.2f} "
            f"(width/height); wrong layout or not a grid",
        )
    xc = _axis_cuts(img, cols, axis=1, path=path)
    yc = _axis_cuts(img, rows, axis=0, path=path)
    cells = []
    boxes = []
    for (y0, y1) in yc.spans:
        for (x0, x1) in xc.spans:
            cells.append(np.ascontiguousarray(img[y0:y1, x0:x1]))
            boxes.append([int(x0), int(y0), int(x1), int(y1)])
    record = {
        "layout": f"{rows}x{cols}",
        "image_size": [int(w), int(h)],
        "cells_xyxy": boxes,
        "column_gutters": [list(map(int, g)) for g in xc.gutters],
        "row_gutters": [list(map(int, g)) for g in yc.gutters],
        "border_trim": {"x": list(map(int, xc.trimmed)), "y": list(map(int, yc.trimmed))},
    }
    return cells, record
