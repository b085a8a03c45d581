"""`worldeval worldcast score`, and the checks of the judge on those scores: `agreement`, `judges`, `repeats`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List

import typer

from worldeval.cli.common import fail
from worldeval.stats import BOOTSTRAP_REPLICATES
from worldeval.worldcast.analysis.validity import agreement, judge_swap, repeats
from worldeval.worldcast.scoring.scores import score_runs
from worldeval.worldcast.scoring.tables import output_console, print_grid, print_scores, repeats_grid


def score_cmd(
    run_dirs: List[Path] = typer.Argument(..., help="Run folders holding judgments.jsonl."),
    as_json: bool = typer.Option(False, "--json", help="Print the SPEC JSON (plus rank and *_ci keys) instead of a table."),
    step_accuracy: bool = typer.Option(False, "--step-accuracy", help="Add the per-step accuracy curve."),
    bootstrap: int = typer.Option(BOOTSTRAP_REPLICATES, "--bootstrap", min=0, help="Case-bootstrap replicates for the 95% CIs (0: none)."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
) -> None:
    """Final, TC, CP, VC with 95% CIs, per category, L3, L4 per model (failures excluded and counted)."""
    try:
        res = score_runs(run_dirs, step_accuracy=step_accuracy, bootstrap=bootstrap, seed=seed)
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    if as_json:
        typer.echo(json.dumps(res, indent=2, sort_keys=True))
        return
    print_scores(res, step_accuracy)


def agreement_cmd(
    run_dirs: List[Path] = typer.Argument(..., help="Run folders with the judged models."),
    votes: Path = typer.Option(..., "--votes", help="JSONL of human pairwise votes (see docs/worldcast.md)."),
) -> None:
    """Judge-vs-human win rates, Pearson r per dimension and winner agreement (paper section 4.4)."""
    try:
        res = agreement(run_dirs, votes)
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    typer.echo(json.dumps(res, indent=2, sort_keys=True))


def judges_cmd(run_dirs: List[Path] = typer.Argument(..., help="Run folders of the same outputs scored by different judge models.")) -> None:
    """Model ranking per judge model and the Kendall tau between judges (judge swap)."""
    try:
        typer.echo(json.dumps(judge_swap(run_dirs), indent=2, sort_keys=True))
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))


def repeats_cmd(
    run_dirs: List[Path] = typer.Argument(..., help="One run folder per repeated generation round."),
    ddof: int = typer.Option(1, "--ddof", help="1: sample std (default); 0: population std."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Mean ± std per category across repeated generation runs (one run folder per round)."""
    try:
        res = repeats(run_dirs, ddof)
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    if as_json:
        typer.echo(json.dumps(res, indent=2, sort_keys=True))
        return
    grid = repeats_grid(res, ddof)
    print_grid(output_console(grid), grid)


def register(app: typer.Typer) -> None:
    """Add `score`, `agreement`, `judges` and `repeats` to the `worldcast` command group."""
    app.command("score")(score_cmd)
    app.command("agreement")(agreement_cmd)
    app.command("judges")(judges_cmd)
    app.command("repeats")(repeats_cmd)
