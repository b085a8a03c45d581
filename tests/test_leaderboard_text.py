"""The printed leaderboards (`opis score`, `worldeval demo`): coverage beside each component, and the note under them."""

from __future__ import annotations

import inspect

from rich.console import Console

from worldeval.cli.demo import leaderboard, print_leaderboard, run_demo
from worldeval.cli.opis.score import LEADERBOARD_NOTE, render_tables
from worldeval.opis.scoring import ScoreConfig


def _model(P, I, S, C_P, C_I, C_S, opis, ci):
    return {"P": P, "I": I, "S": S, "C_S": C_S, "OPIS": opis, "OPIS_ci": ci, "n_cases": 5,
            "coverage": {"C_P": C_P, "C_I": C_I, "static": 50.0, "dynamic": 0.0, "unknown": 0.0, "no_s": 0},
            "variants": {}, "domains": {}, "subcategories": {}, "density": {}, "temporal": {}}


def _result() -> dict:
    """Two demo-like models: one repeats I0, one is defined on one case in ten frames."""
    return {
        "variant": "strict",
        "config": {"weights": {"P": 0.2, "I": 0.4, "S": 0.4}, "ci_level": 0.95},
        "models": {
            "static": _model(100.0, 98.0, 98.7, 100.0, 100.0, 100.0, 98.7, [97.0, 99.5]),
            "swapped": _model(100.0, 0.0, 0.0, 10.0, 10.0, 0.0, 20.0, [0.0, 20.0]),
        },
        "cases": [],
    }


def _text(print_fn, *args) -> str:
    console = Console(record=True, width=220)
    print_fn(*args, console)
    return console.export_text()


def test_score_table_shows_coverage_beside_each_component_and_the_note():
    text = _text(render_tables, _result())
    header = next(line for line in text.splitlines() if "C_P (%)" in line)
    cols = [c.strip() for c in header.split("┃" if "┃" in header else "|") if c.strip()]
    assert cols[:7] == ["Model", "P", "C_P (%)", "I", "C_I (%)", "S", "C_S (%)"]
    row = next(line for line in text.splitlines() if "swapped" in line and "20.00" in line)
    assert "10.00" in row  # C_P and C_I of the model defined on few frames
    assert " ".join(LEADERBOARD_NOTE.split()) in " ".join(text.split())
    assert "repeats I0" in LEADERBOARD_NOTE and "memory, not motion" in LEADERBOARD_NOTE
    assert "few frames" in LEADERBOARD_NOTE


def test_demo_leaderboard_shows_coverage_and_the_note():
    rows = leaderboard(_result())
    assert [r["model"] for r in rows] == ["static", "swapped"]
    assert rows[1]["C_P"] == 10.0 and rows[1]["C_I"] == 10.0 and rows[1]["C_S"] == 0.0
    summary = {"leaderboard": rows, "ranking_ok": True, "ranking": "ok", "out": "DIR", "report": None,
               "report_note": "skipped", "seconds": dict.fromkeys(("total", "dataset", "rollouts", "evaluate", "score", "report"), 1.0)}
    text = _text(print_leaderboard, summary)
    header = next(line for line in text.splitlines() if "C_P%" in line)
    assert header.index("P") < header.index("C_P%") < header.index("I ") < header.index("C_I%") < header.index("C_S%")
    swapped = next(line for line in text.splitlines() if "swapped" in line)
    cells = [c.strip() for c in swapped.replace("│", "|").split("|") if c.strip()]
    assert cells[2:5] == ["100.0", "10.0", "0.0"]  # P, then its coverage C_P, then I
    assert " ".join(LEADERBOARD_NOTE.split()) in " ".join(text.split())


def test_demo_bootstraps_as_many_replicates_as_opis_score():
    assert inspect.signature(run_demo).parameters["bootstrap"].default == ScoreConfig.bootstrap
