"""`worldeval worldcast demo`: WorldCast end to end on the packaged samples, offline."""

from __future__ import annotations

from pathlib import Path

import typer

from worldeval.stats import BOOTSTRAP_REPLICATES
from worldeval.worldcast.judging.progress import RichJudgeProgress
from worldeval.worldcast.samples.demo import DEMO_SCRIPT, run_demo
from worldeval.worldcast.scoring.scores import score_runs
from worldeval.worldcast.scoring.tables import print_scores


def demo_cmd(
    out: Path = typer.Option(Path("worldeval-worldcast-demo"), "--out", help="Folder for the run, scores.json and report.html."),
    bootstrap: int = typer.Option(BOOTSTRAP_REPLICATES, "--bootstrap", min=0, help="Case-bootstrap replicates for the CIs (0: none)."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress; only the leaderboard."),
) -> None:
    """WorldCast end to end on the packaged samples, offline: a scripted judge (mock transport), scores, report."""
    from rich.console import Console

    # here: the report loads matplotlib, too slow for `--help`
    from worldeval.report import build_report

    err = Console(stderr=True)
    if not quiet:
        err.print(f"judge: scripted answers (mock transport, worldcast/samples/{DEMO_SCRIPT.name}); nothing is sent "
                  "anywhere and no model judges these outputs", markup=False, highlight=False)
    with RichJudgeProgress(err, "judging", disable=quiet) as bar:
        def events_for(model: str):
            bar.label = f"judging {model}"
            return bar

        summary = run_demo(out, build_report, bootstrap=bootstrap, seed=seed, events_for=events_for)
    for model, j in summary["judged"].items():
        if j["failed"] and not quiet:
            err.print(f"{model}: {j['failed']} item(s) failed as the demo intends:", markup=False, highlight=False)
            for line in j["reasons"]:
                err.print(f"  {line}", markup=False, highlight=False)
    print_scores(score_runs([Path(summary["run"])], bootstrap=bootstrap, seed=seed), False)
    typer.echo(f"report: {summary['report']}  (scores: {summary['scores']}; {summary['seconds']:.1f} s)")


def register(app: typer.Typer) -> None:
    """Add `demo` to the `worldcast` command group."""
    app.command("demo")(demo_cmd)
