"""`worldeval report RUN_DIR... --out report.html`."""

from __future__ import annotations

from pathlib import Path

import typer

from worldeval.stats import BOOTSTRAP_REPLICATES


def report_cmd(
    run_dirs: list[Path] = typer.Argument(..., help="OPIS and/or WorldCast run folders."),
    out: Path = typer.Option(Path("report.html"), "--out", "-o", help="HTML file to write."),
    title: str = typer.Option("worldeval report", help="Page title."),
    bootstrap: int = typer.Option(BOOTSTRAP_REPLICATES, help="Bootstrap replicates for the OPIS CI (0: no intervals)."),
    seed: int = typer.Option(0, help="Bootstrap seed."),
    max_cases: int = typer.Option(20, help="Cases drawn with images and plots (-1: all); the rest stay in the tables."),
    frames_per_case: int = typer.Option(4, help="Sampled frames shown per rollout."),
    thumb_side: int = typer.Option(224, help="Longest side of embedded images in pixels."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print nothing but errors."),
) -> None:
    """Write one self-contained HTML report (tables, plots, per-case views; opens offline)."""
    # here: the report loads matplotlib, too slow for `--help`
    from worldeval.report import ReportError, build_report, unreadable_run_dirs

    try:
        skipped = unreadable_run_dirs(run_dirs)
        path = build_report(
            run_dirs, out, title=title, bootstrap=bootstrap, seed=seed, max_cases=max_cases,
            frames_per_case=frames_per_case, thumb_side=thumb_side,
        )
    except ReportError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    # Printed even with --quiet: a folder silently missing from a report reads as a model that did nothing.
    for folder, why in skipped.items():
        typer.echo(f"warning: {folder}: {why}; left out of the report", err=True)
    if not quiet:
        size = path.stat().st_size / 1e6
        typer.echo(f"report written: {path} ({size:.1f} MB)")


def register(app: typer.Typer) -> None:
    """Add `report` to the top-level command."""
    app.command("report")(report_cmd)
