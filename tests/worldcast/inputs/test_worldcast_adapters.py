"""Grid cutting, step images + plan.json, and case validation."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from worldeval.errors import CaseError
from worldeval.worldcast.inputs.adapters import OutputError, adapt_output
from worldeval.worldcast.inputs.cases import load_cases
from worldeval.worldcast.inputs.grid import GridError, cut_grid

RNG = np.random.default_rng(1234)


def textured_cell(h, w, seed):
    """A cell with content everywhere (no uniform rows/columns), so any off-by-one cut is detected."""
    r = np.random.default_rng(seed)
    base = r.integers(30, 220, size=3)
    noise = r.integers(-25, 25, size=(h, w, 3))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def flat_scene_cell(h, w, seed):
    """A synthetic 'rendered' cell: flat background with a few shapes (has uniform margins)."""
    r = np.random.default_rng(seed)
    cell = np.full((h, w, 3), 240, np.uint8)
    for _ in range(3):
        y0, x0 = r.integers(h // 5, h // 2), r.integers(w // 5, w // 2)
        cell[y0:y0 + h // 4, x0:x0 + w // 4] = r.integers(0, 200, size=3)
    return cell


def assemble(cells, rows, cols, gutter=0, border=0, colour=255):
    h, w = cells[0].shape[:2]
    H = 2 * border + rows * h + (rows - 1) * gutter
    W = 2 * border + cols * w + (cols - 1) * gutter
    img = np.full((H, W, 3), colour, np.uint8)
    for k, c in enumerate(cells):
        r, q = divmod(k, cols)
        y, x = border + r * (h + gutter), border + q * (w + gutter)
        img[y:y + h, x:x + w] = c
    return img


@pytest.mark.parametrize("rows,cols", [(1, 2), (2, 2), (2, 3)])
@pytest.mark.parametrize("gutter,border", [(0, 0), (4, 0), (6, 3), (0, 2)])
@pytest.mark.parametrize("maker", [textured_cell, flat_scene_cell])
def test_cut_grid_exact_cells(rows, cols, gutter, border, maker):
    h, w = 90, 120
    cells = [maker(h, w, 10 * rows + cols + k) for k in range(rows * cols)]
    img = assemble(cells, rows, cols, gutter, border, colour=255 if maker is textured_cell else 0)
    out, rec = cut_grid(img, rows, cols)
    assert len(out) == rows * cols
    for k, (got, want) in enumerate(zip(out, cells)):
        assert got.shape == want.shape, (k, rec)
        assert np.array_equal(got, want), (k, rec)
    if gutter:
        assert len(rec["column_gutters"]) == cols - 1 and all(b - a == gutter for a, b in rec["column_gutters"])


def test_cut_grid_tolerates_jpeg_noise_in_gutters():
    import io

    cells = [textured_cell(96, 128, k) for k in range(4)]
    img = assemble(cells, 2, 2, gutter=4, border=0)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="JPEG", quality=92)
    jpg = np.asarray(Image.open(buf).convert("RGB"))
    out, rec = cut_grid(jpg, 2, 2)
    for got, want in zip(out, cells):
        # cut exactly at the gutters: shapes equal, content close (JPEG is lossy)
        assert got.shape == want.shape, rec
        assert np.abs(got.astype(int) - want.astype(int)).mean() < 12


def test_wrong_aspect_is_a_clear_error():
    img = np.zeros((400, 100, 3), np.uint8)
    with pytest.raises(GridError, match="cannot hold a 1x2 grid"):
        cut_grid(img, 1, 2, "x/grid.png")


def test_wrong_cell_count_is_detected_from_gutters():
    cells = [textured_cell(90, 90, k) for k in range(3)]
    img = assemble(cells, 1, 3, gutter=5)
    with pytest.raises(GridError, match="separators for 3 columns"):
        cut_grid(img, 1, 2)


def _case_line(**kw):
    base = {"id": "c1", "category": "physical_simulation", "instruction": "do it", "steps": 2, "images": []}
    base.update(kw)
    return json.dumps(base)


def _write_ds(tmp_path, lines):
    ds = tmp_path / "ds"
    ds.mkdir(exist_ok=True)
    (ds / "cases.jsonl").write_text("\n".join(lines) + "\n")
    return ds


def test_grid_layout_rules(tmp_path):
    ds = _write_ds(tmp_path, [_case_line(id="g4", steps=4), _case_line(id="g3", steps=3), _case_line(id="g6", steps=6)])
    cases = {c.id: c for c in load_cases(ds)}
    outs = tmp_path / "outs"
    cells = [textured_cell(60, 80, k) for k in range(6)]
    for cid, (r, c) in (("g4", (2, 2)), ("g3", (1, 3)), ("g6", (2, 3))):
        (outs / cid).mkdir(parents=True)
        Image.fromarray(assemble(cells[: r * c], r, c, gutter=3)).save(outs / cid / "grid.png")
    seq = adapt_output(cases["g4"], outs, tmp_path / "st" / "g4")
    assert seq.interface == "grid" and len(seq.images) == 4 and seq.record["layout_source"] == "default"
    assert np.array_equal(np.asarray(Image.open(seq.images[3])), cells[3])
    seq = adapt_output(cases["g6"], outs, tmp_path / "st" / "g6")
    assert np.array_equal(np.asarray(Image.open(seq.images[4])), cells[4])  # row-major: row 2, column 2
    with pytest.raises(GridError, match="no default grid layout for 3 steps"):
        adapt_output(cases["g3"], outs, tmp_path / "st" / "g3")
    (outs / "g3" / "grid.json").write_text('{"layout": "1x3"}')
    assert len(adapt_output(cases["g3"], outs, tmp_path / "st" / "g3").images) == 3
    (outs / "g3" / "grid.json").write_text('{"layout": "2x2"}')
    with pytest.raises(GridError, match="holds 4 cells but the case asks for 3"):
        adapt_output(cases["g3"], outs, tmp_path / "st" / "g3")
    (outs / "g3" / "grid.json").write_text('{"layout": "three"}')
    with pytest.raises(GridError, match="grid.json.*'layout'"):
        adapt_output(cases["g3"], outs, tmp_path / "st" / "g3")


def test_step_images_and_plan(tmp_path):
    ds = _write_ds(tmp_path, [_case_line(id="s", steps=3)])
    case = load_cases(ds)[0]
    d = tmp_path / "outs" / "s"
    d.mkdir(parents=True)
    for k in (1, 2, 3):
        Image.fromarray(textured_cell(20, 20, k)).save(d / f"step_{k}.png")
    (d / "plan.json").write_text(json.dumps(["a", "b", "c"]))
    seq = adapt_output(case, tmp_path / "outs", tmp_path / "st")
    assert [p.name for p in seq.images] == ["step_1.png", "step_2.png", "step_3.png"] and seq.plans == ["a", "b", "c"]
    (d / "plan.json").write_text(json.dumps({"1": "a", "3": "c"}))
    assert adapt_output(case, tmp_path / "outs", tmp_path / "st").plans == ["a", None, "c"]
    (d / "plan.json").write_text(json.dumps(["a"]))
    with pytest.raises(OutputError, match="plan.json: has 1 step texts"):
        adapt_output(case, tmp_path / "outs", tmp_path / "st")
    (d / "plan.json").unlink()
    (d / "step_2.png").unlink()
    with pytest.raises(OutputError, match=r"missing step\(s\) \[2\]"):
        adapt_output(case, tmp_path / "outs", tmp_path / "st")
    (d / "step_2.png").write_bytes(b"not a png")
    with pytest.raises(OutputError, match="step_2.png"):
        adapt_output(case, tmp_path / "outs", tmp_path / "st")
    Image.fromarray(textured_cell(20, 20, 9)).save(d / "step_2.png")
    Image.fromarray(textured_cell(20, 20, 9)).save(d / "grid.png")
    with pytest.raises(OutputError, match="more than one output kind"):
        adapt_output(case, tmp_path / "outs", tmp_path / "st")


@pytest.mark.parametrize("line,field,msg", [
    (_case_line(category="cooking"), "category", "unknown category"),
    (_case_line(level="L4"), "level", "is level L3"),
    (_case_line(steps=0), "steps", ">= 1"),
    (_case_line(steps=True), "steps", ">= 1"),
    (_case_line(outcome_weight=0.6), "outcome_weight", "[0, 0.5]"),
    (_case_line(outcome_weight=-0.1), "outcome_weight", "[0, 0.5]"),
    (_case_line(instruction=""), "instruction", "non-empty"),
    (_case_line(hints="be careful"), "hints", "list of strings"),
    (_case_line(images=[{"path": "../secret.png", "role": "initial_state"}]), "images[0].path", "outside the dataset"),
    (_case_line(images=[{"path": "nope.png", "role": "initial_state"}]), "images[0].path", "does not exist"),
    (_case_line(id="bad id"), "id", "non-empty name"),
])
def test_case_validation_names_line_and_field(tmp_path, line, field, msg):
    (tmp_path / "secret.png").write_bytes(b"x")
    ds = _write_ds(tmp_path, [_case_line(id="ok0"), line])
    with pytest.raises(CaseError) as ei:
        load_cases(ds)
    e = ei.value
    assert e.line == 2 and e.field == field and msg in str(e)
    assert f"line 2 field '{field}'" in str(e)


def test_case_validation_json_and_duplicates(tmp_path):
    ds = _write_ds(tmp_path, [_case_line(), "{not json"])
    with pytest.raises(CaseError, match="line 2: invalid JSON"):
        load_cases(ds)
    ds = _write_ds(tmp_path, [_case_line(), _case_line()])
    with pytest.raises(CaseError, match="duplicate id 'c1' \\(first on line 1\\)"):
        load_cases(ds)


def test_packaged_samples_cut_to_the_rendered_states(tmp_path):
    from worldeval.worldcast.samples import make as ms
    from worldeval.worldcast.samples import sample_dataset, sample_outputs

    cases = {c.id: c for c in load_cases(sample_dataset())}
    assert {c.level for c in cases.values()} == {"L3", "L4"}
    want = {
        "adapt_cube_box": [ms.box_state((106, 30), False), ms.box_state((106, 66), True)],
        "logic_hanoi2": [ms.hanoi_state([[2], [1], []]), ms.hanoi_state([[], [1], [2]]), ms.hanoi_state([[], [], [2, 1]])],
        "goal_tiles": [ms.tiles_state(k) for k in range(1, 5)],
    }
    for cid, states in want.items():
        seq = adapt_output(cases[cid], sample_outputs("correct"), tmp_path / cid)
        assert len(seq.images) == len(states) == cases[cid].steps
        for p, s in zip(seq.images, states):
            assert np.array_equal(np.asarray(Image.open(p).convert("RGB")), np.asarray(s)), (cid, p)
    # The shuffled tiles grid holds the same states in another order.
    seq = adapt_output(cases["goal_tiles"], sample_outputs("shuffled"), tmp_path / "shuf")
    got = [np.asarray(Image.open(p).convert("RGB")) for p in seq.images]
    assert [next(k for k, s in enumerate(want["goal_tiles"]) if np.array_equal(g, np.asarray(s))) for g in got] == [2, 0, 3, 1]
    total = sum(p.stat().st_size for p in sample_dataset().parent.rglob("*") if p.is_file())
    assert total < 2 * 1024 * 1024


def test_sample_generator_is_deterministic(tmp_path):
    from worldeval.worldcast.samples.make import build
    from worldeval.worldcast.samples import samples_root

    build(tmp_path / "s")
    for p in samples_root().rglob("*"):
        if p.is_file():
            q = tmp_path / "s" / p.relative_to(samples_root())
            assert q.read_bytes() == p.read_bytes(), p


def test_cli_judge_reports_bad_dataset_and_missing_judge(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from worldeval.cli import app

    monkeypatch.delenv("WORLDEVAL_JUDGE_MODEL", raising=False)
    ds = _write_ds(tmp_path, [_case_line(), _case_line(id="c2", outcome_weight=0.9)])
    base = ["worldcast", "judge", "--dataset", str(ds), "--outputs", str(tmp_path), "--model", "m",
            "--out", str(tmp_path / "run"), "--base-url", "http://127.0.0.1:9/v1", "--no-cache"]
    res = CliRunner().invoke(app, base + ["--judge-model", "j"])
    assert res.exit_code == 2 and "line 2 field 'outcome_weight'" in res.output
    res = CliRunner().invoke(app, base)
    assert res.exit_code == 2 and "no judge model" in res.output
