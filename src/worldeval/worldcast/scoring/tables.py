"""WorldCast's terminal tables (the leaderboard, step accuracy, repeats), fitted to the console's width.

The leaderboard has up to 19 columns; forced wide, it wrapped at 80 columns into an
unreadable mess. Here a table that does not fit is split into several narrower ones
that each repeat the key columns (rank, model), most important columns first; long
model names fold inside their cell; on a console too narrow for even that, each row
is stacked as a two-column table of column name and value. Output that goes to a file or a pipe has no
width to fit: there the tables keep their natural width, one line per model.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

from worldeval.worldcast.inputs.cases import CATEGORY_ORDER, CATEGORY_SHORT, L3_CATEGORIES, L4_CATEGORIES
from worldeval.worldcast.scoring.scores import ordered_models

MIN_FOLD = 10  # a folded cell narrower than this is harder to read than a stacked row


@dataclass
class Grid:
    """A table's content: the first `keep` columns are repeated in every part a split makes; `fold`
    columns may wrap (long names), the others never do; `groups` (column indices) stay together and,
    when the table must be split, come in this order."""

    title: str
    header: list[str]
    rows: list[list[str]]
    keep: int = 1
    fold: tuple[int, ...] = (0,)
    groups: list[list[int]] = field(default_factory=list)
    left: tuple[int, ...] = (0,)


def _natural(grid: Grid) -> list[int]:
    return [max(cell_len(str(x)) for x in [h] + [r[i] for r in grid.rows]) for i, h in enumerate(grid.header)]


def _cost(widths: list[int]) -> int:
    # rich's default box: one border per column plus the closing one, and one space of padding each side.
    return sum(w + 3 for w in widths) + 1


def _widths(grid: Grid, width: int) -> list[int]:
    """Each column's width: natural when the whole table fits; else foldable key columns give way (down to
    MIN_FOLD) so that the key columns take at most half the width and leave the rest to the others."""
    w = _natural(grid)
    if _cost(w) <= width:
        return w
    for i in grid.fold:
        if i < grid.keep:
            others = sum(w[j] + 3 for j in range(grid.keep) if j != i)
            w[i] = min(w[i], max(MIN_FOLD, width // 2 - 1 - others - 3))
    return w


def split_columns(grid: Grid, width: int) -> list[list[int]] | None:
    """Column indices of each part (key columns first), packing whole groups greedily in their order;
    None (stack the rows instead) when the key columns would fill more than half of every part, or not
    even they and one other column fit."""
    w = _widths(grid, width)
    keep = list(range(grid.keep))
    rest = list(range(grid.keep, len(w)))
    if _cost(w) <= width:
        return [keep + rest]
    keys = [w[i] for i in keep]
    if 2 * _cost(keys) > width or _cost(keys + [max((w[i] for i in rest), default=0)]) > width:
        return None
    groups = grid.groups or [[i] for i in rest]
    grouped = {i for g in groups for i in g}
    pieces = [g for g in groups if g] + [[i] for i in rest if i not in grouped]
    parts: list[list[int]] = []
    current: list[int] = []
    for group in pieces:
        # A group starts a new part only when it then fits whole; a wider one fills parts column by column.
        whole = _cost([w[i] for i in keep + group]) <= width
        if current and whole and _cost([w[i] for i in keep + current + group]) > width:
            parts.append(current)
            current = []
        for i in group:
            if current and _cost([w[j] for j in keep + current + [i]]) > width:
                parts.append(current)
                current = []
            current.append(i)
    if current:
        parts.append(current)
    return [keep + p for p in parts]


def _table(grid: Grid, cols: list[int], title: str, widths: list[int]) -> Table:
    table = Table(title=title)
    for i in cols:
        folds = i in grid.fold
        table.add_column(grid.header[i], justify="left" if i in grid.left else "right", no_wrap=not folds,
                         overflow="fold", max_width=widths[i] if folds else None)
    for r in grid.rows:
        table.add_row(*(r[i] for i in cols))
    return table


def _stacked(grid: Grid) -> list[Table]:
    """One two-column table per row (`column`, `value`): readable on any width."""
    out = []
    for r in grid.rows:
        table = Table(title=grid.title if not out else None, show_header=False)
        table.add_column(overflow="fold")
        table.add_column(overflow="fold")
        for h, v in zip(grid.header, r):
            table.add_row(h, v)
        out.append(table)
    return out


def fitted(grid: Grid, width: int) -> list[Table]:
    """The tables that show `grid` within `width` columns."""
    parts = split_columns(grid, width)
    if parts is None:
        return _stacked(grid)
    w = _widths(grid, width)
    return [_table(grid, cols, grid.title if k == 0 else f"(continued, part {k + 1} of {len(parts)})", w)
            for k, cols in enumerate(parts)]


def output_console(*grids: Grid) -> Console:
    """stdout's console: a terminal's own width (or COLUMNS when set); piped, wide enough for the widest
    grid, since splitting a table for no screen only makes it harder to read back or grep."""
    console = Console()
    if console.is_terminal or os.environ.get("COLUMNS", "").isdigit():
        return console
    return Console(width=max([console.width] + [_cost(_natural(g)) for g in grids]))


def print_grid(console, grid: Grid) -> None:
    for table in fitted(grid, console.width):
        console.print(table)


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _fmt_ci(ci) -> str:
    return "-" if not ci else f"{ci[0]:.1f}-{ci[1]:.1f}"


def table_rows(result: dict) -> tuple[list[str], list[list[str]]]:
    """Rows like the paper's Table 1: L3 categories, L3, L4 categories, L4, overall, then TC/CP/VC."""
    header = (["#", "model"] + [CATEGORY_SHORT[c] for c in L3_CATEGORIES] + ["L3"]
              + [CATEGORY_SHORT[c] for c in L4_CATEGORIES] + ["L4", "Overall", "95% CI", "TC", "CP", "VC", "cases",
                                                              "failed"])
    rows = []
    ranked, unscored = ordered_models(result)
    for m in ranked + unscored:
        s = result["models"][m]
        cats = s["categories"]
        rank = "-" if s.get("rank") is None else str(s["rank"])
        rows.append([rank, m] + [_fmt(cats.get(c)) for c in L3_CATEGORIES] + [_fmt(s["L3"])]
                    + [_fmt(cats.get(c)) for c in L4_CATEGORIES]
                    + [_fmt(s["L4"]), _fmt(s["final"]), _fmt_ci(s.get("final_ci")), _fmt(s["TC"]), _fmt(s["CP"]),
                       _fmt(s["VC"]), str(s["n_cases"]), str(s["n_failed"])])
    return header, rows


def score_grid(res: dict) -> Grid:
    """The leaderboard of `worldcast score`: Table 1's layout when it fits; split, the overall columns
    come first, then the L3 and the L4 categories."""
    header, rows = table_rows(res)
    b = res.get("bootstrap") or {}
    ci = (f"95% CI: case bootstrap within categories, {b['replicates']} replicates, seed {b['seed']}"
          if b.get("replicates") else "no CIs (--bootstrap 0)")
    at = {h: i for i, h in enumerate(header)}
    overall = [at[h] for h in ("Overall", "95% CI", "TC", "CP", "VC", "cases", "failed")]
    l3 = [at[CATEGORY_SHORT[c]] for c in L3_CATEGORIES] + [at["L3"]]
    l4 = [at[CATEGORY_SHORT[c]] for c in L4_CATEGORIES] + [at["L4"]]
    return Grid(f"WorldCast (0-100; categories, L3, L4 and Overall are Final scores; {ci})", header, rows,
                keep=2, fold=(1,), groups=[overall, l3, l4], left=(1,))


def step_grid(res: dict) -> Grid:
    """Designated-step accuracy per step index: percent (cases judged), one row per model."""
    steps = sorted({int(k) for s in res["models"].values() for k in (s.get("step_accuracy") or {})})
    rows = []
    for m, s in res["models"].items():
        curve = s.get("step_accuracy") or {}
        cells = []
        for k in steps:
            v = curve.get(str(k))
            cells.append("-" if v is None or v["accuracy"] is None else f"{v['accuracy']:.1f} ({v['n']})")
        rows.append([m, ",".join(s.get("step_accuracy_scope") or [])] + cells)
    return Grid("Designated-step accuracy (%; cases in brackets)", ["model", "scope"] + [f"step {k}" for k in steps],
                rows, keep=1, fold=(0, 1), left=(0, 1))


def print_scores(res: dict, step_accuracy: bool, console: Console | None = None) -> None:
    """The leaderboard (and the step-accuracy table) on `console`, default stdout's (`output_console`)."""
    grids = [score_grid(res)] + ([step_grid(res)] if step_accuracy else [])
    console = console or output_console(*grids)
    print_grid(console, grids[0])
    _, unscored = ordered_models(res)
    if unscored:
        console.print(f"not ranked (no case with every judgment ok): {', '.join(unscored)}")
    for grid in grids[1:]:
        print_grid(console, grid)


def repeats_grid(res: dict, ddof: int) -> Grid:
    """Mean ± std per category, L3, L4 and overall across repeated runs."""
    cols = list(CATEGORY_ORDER) + ["L3", "L4", "overall"]
    rows = []
    for m, stats in res["models"].items():
        cells = []
        for c in cols:
            st = stats.get(c)
            if st is None:
                cells.append("-")
            elif st["std"] is None:
                cells.append(f"{st['mean']:.1f}")
            else:
                cells.append(f"{st['mean']:.1f} ± {st['std']:.2f}")
        rows.append([m] + cells)
    n3 = len(L3_CATEGORIES)
    groups = [[len(cols) - 2, len(cols) - 1, len(cols)], list(range(1, n3 + 1)), list(range(n3 + 1, len(cols) - 2))]
    return Grid(f"WorldCast over repeated runs: mean ± std (ddof={ddof})",
                ["model"] + [CATEGORY_SHORT.get(c, c) for c in cols], rows, keep=1, fold=(0,), groups=groups)
