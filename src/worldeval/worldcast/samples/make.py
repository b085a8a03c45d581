"""Render the packaged WorldCast sample cases (run: `python -m worldeval.worldcast.samples.make`).

Four small synthetic cases whose correct order of states is known by
construction (a bouncing ball, putting a cube into a box, a two-disc Tower of
Hanoi, building a tile pattern from a goal picture), each with two outputs:
`correct` (the right states in the right order, in the interface noted below)
and `shuffled` (the same states out of order, or with an illegal move).
The cases exercise every non-video interface: step images with a plan.json,
a 1x2 grid with an outer frame, a 1x3 grid with gutters and grid.json, and a
2x2 grid without gutters. Everything is drawn with PIL primitives, so the
files are tiny and byte-identical on every run.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from worldeval.worldcast.samples import samples_root

W, H = 160, 120
SKY = (225, 235, 245)
FLOOR = (120, 90, 60)


def _canvas(bg=SKY) -> tuple[Image.Image, ImageDraw.ImageDraw]:
    im = Image.new("RGB", (W, H), bg)
    return im, ImageDraw.Draw(im)


# -- case 1: ball dropped onto the floor ------------------------------------
def ball_state(y_centre: float, squash: float = 1.0) -> Image.Image:
    im, d = _canvas()
    d.rectangle([0, 100, W, H], fill=FLOOR)
    rx, ry = 12 / squash ** 0.5, 12 * squash
    cy = min(y_centre, 100 - ry)
    d.ellipse([80 - rx, cy - ry, 80 + rx, cy + ry], fill=(210, 30, 30))
    return im


# -- case 2: cube into box ----------------------------------------------------
def box_state(cube_xy: tuple[int, int], inside: bool) -> Image.Image:
    im, d = _canvas((240, 240, 230))
    d.rectangle([0, 100, W, H], fill=(150, 150, 150))
    d.rectangle([90, 60, 140, 100], fill=(180, 130, 70))  # box front
    x, y = cube_xy
    if inside:
        d.rectangle([x, y, x + 18, y + 18], fill=(40, 170, 60))
        d.rectangle([90, 78, 140, 100], fill=(180, 130, 70))  # front wall hides the lower part
    else:
        d.rectangle([x, y, x + 18, y + 18], fill=(40, 170, 60))
    return im


# -- case 3: Tower of Hanoi with two discs --------------------------------------
PEGS = (35, 80, 125)


def hanoi_state(pegs: list[list[int]]) -> Image.Image:
    """pegs[i] lists disc sizes bottom to top (2 = large, 1 = small)."""
    im, d = _canvas((250, 250, 250))
    d.rectangle([5, 100, W - 5, 106], fill=(90, 60, 30))
    for x in PEGS:
        d.rectangle([x - 2, 40, x + 2, 100], fill=(90, 60, 30))
    colours = {1: (30, 90, 200), 2: (230, 150, 20)}
    for x, stack in zip(PEGS, pegs):
        for level, size in enumerate(stack):
            half = 10 + 8 * size
            y1 = 100 - level * 14
            d.rectangle([x - half, y1 - 12, x + half, y1], fill=colours[size])
    return im


# -- case 4: tiles into a goal pattern ------------------------------------------
TILE = {"R": (220, 40, 40), "G": (40, 170, 60), "B": (40, 80, 220), "Y": (240, 200, 30)}
TOP_ORDER = "RGBY"
GOAL_ORDER = "BRYG"


def tiles_state(moved: int, show_top: bool = True) -> Image.Image:
    """The first `moved` tiles of GOAL_ORDER sit in the bottom row slots; the rest stay on top."""
    im, d = _canvas((245, 245, 245))
    placed = set(GOAL_ORDER[:moved])
    for i, c in enumerate(TOP_ORDER):
        x = 15 + i * 36
        if show_top and c not in placed:
            d.rectangle([x, 15, x + 26, 41], fill=TILE[c])
    for i in range(4):
        x = 15 + i * 36
        d.rectangle([x - 2, 73, x + 28, 103], outline=(160, 160, 160), width=2)
        if i < moved:
            d.rectangle([x, 75, x + 26, 101], fill=TILE[GOAL_ORDER[i]])
    return im


def goal_picture() -> Image.Image:
    im, d = _canvas((245, 245, 245))
    for i, c in enumerate(GOAL_ORDER):
        x = 15 + i * 36
        d.rectangle([x - 2, 73, x + 28, 103], outline=(160, 160, 160), width=2)
        d.rectangle([x, 75, x + 26, 101], fill=TILE[c])
    return im


def make_grid(cells: list[Image.Image], rows: int, cols: int, gutter: int = 0, border: int = 0,
              colour=(255, 255, 255)) -> Image.Image:
    w, h = cells[0].size
    gw = border * 2 + cols * w + (cols - 1) * gutter
    gh = border * 2 + rows * h + (rows - 1) * gutter
    grid = Image.new("RGB", (gw, gh), colour)
    for k, c in enumerate(cells):
        r, q = divmod(k, cols)
        grid.paste(c, (border + q * (w + gutter), border + r * (h + gutter)))
    return grid


def _save(im: Image.Image, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    im.save(path, format="PNG", optimize=True)


CASES = [
    {
        "id": "phys_ball_drop", "category": "physical_simulation", "level": "L3",
        "instruction": "The red ball in the picture is let go. Show four moments in order: the ball falling, the ball "
                       "hitting the floor, the ball bouncing back up (not as high as where it started), and the ball "
                       "finally resting on the floor.",
        "images": [{"path": "phys_ball_drop/input_1.png", "role": "initial_state"}],
        "steps": 4,
        "hints": ["The ball squashes slightly only at the moment of impact.",
                  "The bounce peak must be lower than the release height; the ball ends at rest on the floor."],
        "outcome_weight": 0.0,
    },
    {
        "id": "adapt_cube_box", "category": "adaptive_task_completion", "level": "L3",
        "instruction": "Get the green cube into the brown box. Show two states.",
        "images": [{"path": "adapt_cube_box/input_1.png", "role": "initial_state"}],
        "steps": 2,
        "hints": ["The cube has to be lifted over the box wall before it can be inside.",
                  "At the end the cube is inside the box, partly hidden by the front wall."],
        "outcome_weight": 0.2,
    },
    {
        "id": "logic_hanoi2", "category": "logic_and_rules", "level": "L4",
        "instruction": "Move the whole tower to the right-hand peg. Only one disc moves at a time and a larger disc may "
                       "never lie on a smaller one. Show the position after each move.",
        "images": [{"path": "logic_hanoi2/input_1.png", "role": "initial_state"}],
        "steps": 3,
        "hints": ["Solution: small disc to the middle peg, large disc to the right peg, small disc onto the large disc.",
                  "The orange disc must never be on top of the blue disc."],
        "outcome_weight": 0.3,
    },
    {
        "id": "goal_tiles", "category": "visual_goal_realization", "level": "L4",
        "instruction": "Move the coloured tiles from the top row into the empty slots so that the slots end up looking "
                       "like the goal picture. Fill the slots from left to right, one tile per step.",
        "images": [{"path": "goal_tiles/input_1.png", "role": "initial_state"},
                   {"path": "goal_tiles/goal.png", "role": "goal_state"}],
        "steps": 4,
        "hints": ["The goal order of the slots from left to right is blue, red, yellow, green.",
                  "A tile leaves the top row when it is placed; no tile is duplicated."],
        "outcome_weight": 0.5,
    },
]


def build(out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    ds = out / "dataset"
    correct = out / "outputs" / "correct"
    shuffled = out / "outputs" / "shuffled"
    ds.mkdir(parents=True)
    with open(ds / "cases.jsonl", "w", encoding="utf-8") as fh:
        for c in CASES:
            fh.write(json.dumps(c, ensure_ascii=False) + "\n")

    # 1. ball: step images + plan.json (correct), shuffled order (shuffled)
    _save(ball_state(25), ds / "phys_ball_drop/input_1.png")
    ball = [ball_state(60), ball_state(100, squash=0.7), ball_state(55), ball_state(100)]
    plans = ["The ball falls toward the floor.", "It hits the floor and squashes a little.",
             "It bounces up, lower than where it started.", "It comes to rest on the floor."]
    for k, im in enumerate(ball, start=1):
        _save(im, correct / f"phys_ball_drop/step_{k}.png")
    (correct / "phys_ball_drop/plan.json").write_text(json.dumps({"steps": plans}, indent=1) + "\n")
    order = [3, 1, 4, 2]
    for k, j in enumerate(order, start=1):
        _save(ball[j - 1], shuffled / f"phys_ball_drop/step_{k}.png")
    (shuffled / "phys_ball_drop/plan.json").write_text(json.dumps({"steps": [plans[j - 1] for j in order]}, indent=1) + "\n")

    # 2. cube: 1x2 grid with a thin outer frame (default layout for 2 steps); shuffled = reversed
    _save(box_state((30, 82), False), ds / "adapt_cube_box/input_1.png")
    cube = [box_state((106, 30), False), box_state((106, 66), True)]
    _save(make_grid(cube, 1, 2, gutter=0, border=3, colour=(0, 0, 0)), correct / "adapt_cube_box/grid.png")
    _save(make_grid(cube[::-1], 1, 2, gutter=0, border=3, colour=(0, 0, 0)), shuffled / "adapt_cube_box/grid.png")

    # 3. hanoi: 1x3 grid with white gutters and grid.json; the broken output makes an illegal move
    _save(hanoi_state([[2, 1], [], []]), ds / "logic_hanoi2/input_1.png")
    hanoi = [hanoi_state([[2], [1], []]), hanoi_state([[], [1], [2]]), hanoi_state([[], [], [2, 1]])]
    broken = [hanoi_state([[2], [1], []]), hanoi_state([[], [1, 2], []]), hanoi_state([[], [], [1, 2]])]
    for kind, states in (("correct", hanoi), ("shuffled", broken)):
        base = out / "outputs" / kind / "logic_hanoi2"
        _save(make_grid(states, 1, 3, gutter=6, colour=(255, 255, 255)), base / "grid.png")
        (base / "grid.json").write_text(json.dumps({"layout": "1x3"}) + "\n")

    # 4. tiles: 2x2 grid without gutters (default layout for 4 steps); shuffled cells
    _save(tiles_state(0), ds / "goal_tiles/input_1.png")
    _save(goal_picture(), ds / "goal_tiles/goal.png")
    tiles = [tiles_state(k) for k in range(1, 5)]
    _save(make_grid(tiles, 2, 2), correct / "goal_tiles/grid.png")
    _save(make_grid([tiles[i] for i in (2, 0, 3, 1)], 2, 2), shuffled / "goal_tiles/grid.png")

    # The known truth, for tests and docs: which output is right, and the cells each grid holds.
    truth = {
        "correct": {"phys_ball_drop": "steps", "adapt_cube_box": "grid 1x2 framed", "logic_hanoi2": "grid 1x3 gutters",
                    "goal_tiles": "grid 2x2"},
        "shuffled": {"phys_ball_drop": "order 3,1,4,2", "adapt_cube_box": "order 2,1",
                     "logic_hanoi2": "illegal move (large disc on small)", "goal_tiles": "order 3,1,4,2"},
    }
    (out / "truth.json").write_text(json.dumps(truth, indent=1, sort_keys=True) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=samples_root())
    args = ap.parse_args()
    build(args.out)
    total = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file())
    print(f"wrote {args.out} ({total / 1024:.1f} KiB)")


if __name__ == "__main__":
    main()
