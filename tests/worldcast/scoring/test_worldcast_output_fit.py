"""WorldCast output a new user reads: terminal tables that fit the terminal, failure lines with real paths,
failure counts that agree with the reasons listed, and a report whose leaderboard stays inside the page
and whose chart legend hides no bar."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from worldeval.cli import app

LONG = "stabilityai/stable-video-diffusion-img2vid-xt-1-1"
MODELS = ["correct", LONG, "model-three", "m4"]


def wide_run(root: Path) -> Path:
    """Every category of both levels, four models, one with a long name: the widest leaderboard."""
    from worldeval.worldcast.judging.metrics import PROMPT_VERSIONS
    from worldeval.worldcast.inputs.cases import L3_CATEGORIES, L4_CATEGORIES

    run = root / "run"
    run.mkdir(parents=True)
    lines = []
    for mi, model in enumerate(MODELS):
        for cat in L3_CATEGORIES + L4_CATEGORIES:
            for k in range(2):
                for metric, v in zip(("PA", "CP", "VC"), (2 - (mi + k) % 3, 3 - mi % 4, 3 - k)):
                    lines.append(json.dumps({
                        "model": model, "case_id": f"{cat}_{k}", "category": cat,
                        "level": "L3" if cat in L3_CATEGORIES else "L4", "outcome_weight": 0.0, "metric": metric,
                        "step": None, "status": "ok", "score": v, "error": None, "judge_model": "j",
                        "prompt_hash": PROMPT_VERSIONS[metric]}))
    (run / "judgments.jsonl").write_text("\n".join(lines) + "\n")
    return run


@pytest.fixture(scope="module")
def scores(tmp_path_factory):
    from worldeval.worldcast.scoring.scores import score_runs

    return score_runs([wide_run(tmp_path_factory.mktemp("wide"))], bootstrap=50, seed=0)


def render(fn, width: int) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    fn(console)
    return console.export_text()


# 1: terminal tables ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("width", [30, 45, 60, 80, 120])
def test_leaderboard_fits_the_console_width(scores, width):
    from worldeval.worldcast.scoring.tables import table_rows
    from worldeval.worldcast.scoring.tables import print_scores

    text = render(lambda c: print_scores(scores, False, console=c), width)
    assert max(len(line) for line in text.splitlines()) <= width, text
    header, rows = table_rows(scores)
    for h in header:  # nothing dropped: every column is somewhere
        assert h in text
    for r in rows:
        assert all(v in text for v in r[2:])
    assert "stabilityai" in text  # the long name folds, it is not cut


def test_at_80_columns_each_part_repeats_rank_and_model_and_overall_comes_first(scores):
    from worldeval.worldcast.scoring.tables import print_scores

    text = render(lambda c: print_scores(scores, False, console=c), 80)
    heads = [line for line in text.splitlines() if line.startswith("┃ #")]
    assert len(heads) > 1 and all("┃ model" in h for h in heads)
    assert "Overall" in heads[0] and "95% CI" in heads[0] and "ObsCond" not in heads[0]


def test_a_wide_console_keeps_table_1_in_one_piece(scores):
    from worldeval.worldcast.scoring.tables import print_scores

    text = render(lambda c: print_scores(scores, False, console=c), 400)
    heads = [line for line in text.splitlines() if line.startswith("┃ #")]
    assert len(heads) == 1 and heads[0].index("ObsCond") < heads[0].index("L3") < heads[0].index("Overall")


def test_repeats_table_fits_80_columns(tmp_path):
    from worldeval.worldcast.scoring.tables import print_grid, repeats_grid

    res = {"models": {LONG: {"physical_simulation": {"mean": 55.5, "std": 1.25}, "L3": {"mean": 55.5, "std": None},
                             "overall": {"mean": 50.0, "std": 12.5}}}}
    text = render(lambda c: print_grid(c, repeats_grid(res, 1)), 80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "55.5 ± 1.25" in text and "50.0 ± 12.50" in text


def test_piped_output_keeps_one_line_per_model(tmp_path, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    run = wide_run(tmp_path)
    res = CliRunner().invoke(app, ["worldcast", "score", str(run), "--bootstrap", "0"])
    assert res.exit_code == 0, res.output
    assert len([line for line in res.stdout.splitlines() if line.startswith("┃ #")]) == 1


# 3 and 4: failures in the demo -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("wcdemo") / "demo"
    res = CliRunner().invoke(app, ["worldcast", "demo", "--out", str(out), "--bootstrap", "50"], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    return out, res.output


def test_demo_at_80_columns_has_no_longer_line(demo):
    out, text = demo
    long = [line for line in text.splitlines() if len(line) > 80 and not line.startswith("report: ")]
    assert not long, long


def test_failure_lines_show_real_paths(demo):
    out, text = demo
    def squeeze(s: str) -> str:  # rich wraps long lines at 80 columns, folding a long path too
        return re.sub(r"\s+", "", s)

    assert "<path>" not in text
    flat = squeeze(text)
    assert squeeze(f"logic_hanoi2 PA: failed: output: {out / 'outputs' / 'broken' / 'logic_hanoi2'}: no output") in flat
    assert squeeze(f"{out / 'outputs' / 'broken' / 'adapt_cube_box' / 'grid.png'}: cannot read image") in flat


def test_failed_count_agrees_with_the_reasons_listed(demo):
    out, text = demo
    judged = json.loads((out / "demo_summary.json").read_text())["judged"]
    for model, j in judged.items():
        assert sum(int(r.split("x ", 1)[0]) for r in j["reasons"]) == j["failed"], (model, j)
    assert judged["broken"]["failed"] == 15 and len(judged["broken"]["reasons"]) == 4
    lines = text.splitlines()
    at = next(k for k, line in enumerate(lines) if line.startswith("broken: 15 item(s) failed"))
    counts = [int(m.group(1)) for line in lines[at + 1:] if (m := re.match(r"  (\d+)x ", line))]
    assert sum(counts) == 15


def test_reason_summary_says_what_it_leaves_out():
    from worldeval.worldcast.judging.run import JudgeRunResult, reason_of

    res = JudgeRunResult(Path("run"))
    errors = ([f"output: out/m/case{k}: no output folder for this case" for k in range(5)]
              + ["attempt 2: unparseable answer"] * 3 + ["HTTP 400"] * 2 + ["timeout"] + ["HTTP 500"])
    for e in errors:
        res.count(e)
    res.failed = len(errors)
    # a relative path is blanked whole, so the same fault in five folders is one reason
    assert reason_of(errors[0]) == reason_of(errors[1]) == "output: <path>: no output folder for this case"
    lines = res.reason_lines(None)
    assert lines[0] == "5x output: out/m/case0: no output folder for this case (and 4 other path(s))"
    assert lines[1] == "3x unparseable answer"
    assert sum(int(x.split("x ", 1)[0]) for x in lines) == len(errors)
    summary = res.reason_summary(3)
    assert summary.endswith("(showing 10 of 12; 2 more reason(s) in judgments.jsonl)")
    assert "showing" not in res.reason_summary(None)


def test_judge_summary_prints_a_real_path(tmp_path):
    from worldeval.worldcast.samples import sample_dataset, sample_outputs

    outputs = tmp_path / "outs"
    shutil.copytree(sample_outputs("correct"), outputs)
    shutil.rmtree(outputs / "logic_hanoi2")
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"rules": [], "default": {"score": 1, "evidence": "e"}}))
    res = CliRunner().invoke(app, [
        "worldcast", "judge", "--dataset", str(sample_dataset()), "--outputs", str(outputs), "--model", "m",
        "--out", str(tmp_path / "run"), "--judge-transport", "mock", "--judge-script", str(script)],
        env={"COLUMNS": "200"})
    assert res.exit_code == 1
    assert "<path>" not in res.output
    assert f"most common: 4x output: {outputs / 'logic_hanoi2'}: no output folder for this case" in res.output


# 2: the report --------------------------------------------------------------------------------------------------

def test_chart_legend_is_outside_the_bars_and_inside_the_figure():
    from worldeval.report.worldcast import score_figure

    table = {m: {k: 100.0 for k in ("final", "TC", "CP", "VC")} for m in MODELS}
    fig = score_figure(MODELS, table)
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent(r)
    assert not legend.overlaps(ax.get_window_extent(r))  # beside the plot area, not on it
    assert all(not legend.overlaps(p.get_window_extent(r)) for p in ax.patches)
    box = fig.bbox
    for ext in [legend] + [t.get_window_extent(r) for t in ax.get_xticklabels()]:
        assert box.x0 <= ext.x0 and ext.x1 <= box.x1 and box.y0 <= ext.y0 and ext.y1 <= box.y1
    assert max(len(t.get_text()) for t in ax.get_xticklabels()) <= 24


def test_leaderboard_sits_in_a_scrolling_box(tmp_path):
    from worldeval.report import render_report

    html = render_report([wide_run(tmp_path)], bootstrap=0)
    assert re.search(r"\.table-scroll\s*\{[^}]*max-width:100%[^}]*overflow-x:auto", html)
    box = html[html.index('<div class="table-scroll" id="worldcast-leaderboard-box">'):]
    assert box.index('<table id="worldcast-leaderboard">') < box.index("</table></div>")
    head = box[:box.index("</thead>")]
    assert '<abbr title="observation_conditioned_transitions">ObsCond</abbr>' in head


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("window", ["1400,1000", "800,1000"])
def test_leaderboard_fits_the_page_in_a_browser(tmp_path, window):
    from tests.helpers.browser import chromium, offline_page

    chromium()
    from worldeval.report import build_report

    report = build_report([wide_run(tmp_path)], tmp_path / "report.html", bootstrap=50)
    with offline_page(report, window=window) as page:
        m = page.execute_script("""
            const t = document.getElementById('worldcast-leaderboard'), box = t.parentElement;
            return {page: document.documentElement.clientWidth, doc: document.documentElement.scrollWidth,
                    table: t.scrollWidth, box: box.clientWidth, boxScroll: box.scrollWidth,
                    boxRight: box.getBoundingClientRect().right};""")
    assert m["doc"] <= m["page"] and m["boxRight"] <= m["page"], m  # the page never scrolls sideways
    if window.startswith("1400"):
        assert m["table"] <= m["box"], m  # at 1400 px the whole leaderboard is visible
    else:
        assert m["boxScroll"] > m["box"], m  # narrower, the box scrolls instead of the page
