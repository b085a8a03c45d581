"""`worldeval opis score`: measurement archives -> OPIS tables or the JSON object of SPEC section 3."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer

from worldeval.cli.common import FlagsCommand
from worldeval.opis import scoring
from worldeval.opis.archive import ArchiveError
# The options' defaults are scoring's own, so the command cannot drift from the Python API.
from worldeval.opis.official.v3 import BOOTSTRAP as OFFICIAL_BOOTSTRAP
from worldeval.opis.scoring import ALL_VARIANTS, OFFICIAL, ScoreConfig
from worldeval.runs import atomic_write_text

__all__ = ["LEADERBOARD_NOTE", "coverage", "register", "score_cmd", "score_runs", "render_tables"]

# Printed under every leaderboard (here and `worldeval demo`): the two ways its top rows mislead.
LEADERBOARD_NOTE = ("A model that repeats I0 can score at the top: nothing moves, so nothing is lost (OPIS measures "
                    "memory, not motion). A component with low coverage (C_P, C_I, C_S: % of sampled frames it is "
                    "defined on) rests on few frames.")


def score_runs(paths, config=None) -> dict:
    """Python API: score run folders / Parquet files; see `worldeval.opis.scoring.score_runs`."""
    return scoring.score_runs(paths, config or ScoreConfig())


def _fmt(x, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _variant_table(result: dict, console) -> None:
    from rich.table import Table

    if result.get("contract"):
        console.print(f"{OFFICIAL}: the OPIS authors' aggregation (contract {result['contract']}): headline "
                      "100 P^wP I^wI S^wS per case, case -> subcategory -> domain means; the interval is their flat "
                      "case bootstrap; the diagnostics below follow the paper's strict rules.")
    t = Table(title="Aggregation variants (OPIS from the same measurements)")
    t.add_column("Model")
    for v in ALL_VARIANTS:
        t.add_column(v, justify="right")
    for name, m in result["models"].items():
        t.add_row(name, *[_fmt(m["variants"].get(v)) for v in ALL_VARIANTS])
    console.print(t)


def coverage(m: dict) -> dict:
    """A scored model's coverage of each component in percent: C_P, C_I, C_S (None: undefined)."""
    cov = m.get("coverage") or {}
    return {"C_P": cov.get("C_P"), "C_I": cov.get("C_I"), "C_S": m.get("C_S")}


def _main_table(result: dict, console) -> None:
    """Table 2: each component beside its coverage, OPIS with its interval, and the note on reading it."""
    from rich.table import Table

    cfg = result["config"]
    w = cfg["weights"]
    level = int(round(100 * cfg["ci_level"]))
    t = Table(title=f"OPIS results (variant: {result['variant']}; weights P/I/S = {w['P']:g}/{w['I']:g}/{w['S']:g})")
    t.add_column("Model")
    for c in ("P", "C_P (%)", "I", "C_I (%)", "S", "C_S (%)"):
        t.add_column(c, justify="right")
    t.add_column(f"OPIS [{level}% CI]", justify="right")
    t.add_column("cases", justify="right")
    for name, m in result["models"].items():
        ci, cov = m["OPIS_ci"], coverage(m)
        opis = _fmt(m["OPIS"]) + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")
        t.add_row(name, _fmt(m["P"]), _fmt(cov["C_P"]), _fmt(m["I"]), _fmt(cov["C_I"]), _fmt(m["S"]), _fmt(cov["C_S"]),
                  opis, str(m["n_cases"]))
    console.print(t)
    console.print(LEADERBOARD_NOTE)


def render_tables(result: dict, console=None) -> None:
    """Print the paper-style tables (Table 2, 5, 6, 4, 10 and the temporal diagnostic)."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    models = result["models"]
    _main_table(result, console)
    _variant_table(result, console)

    domains = sorted({d for m in models.values() for d in m["domains"]})
    t = Table(title="OPIS by domain (subcategories averaged equally)")
    t.add_column("Model")
    for d in domains:
        t.add_column(d, justify="right")
    for name, m in models.items():
        t.add_row(name, *[_fmt(m["domains"].get(d, {}).get("OPIS")) for d in domains])
    console.print(t)

    for d in domains:
        subs = sorted({k for m in models.values() for k, s in m["subcategories"].items() if s["domain"] == d})
        t = Table(title=f"{d}: OPIS by subcategory")
        t.add_column("Model")
        for s in subs:
            t.add_column(s, justify="right")
        for name, m in models.items():
            t.add_row(name, *[_fmt(m["subcategories"].get(s, {}).get("OPIS")) for s in subs])
        console.print(t)

    for key, title in (("density", "Multi-object load (cases binned by reference-inventory size)"),
                       ("temporal", "Temporal diagnostic (each interval in seconds scored on its own)")):
        t = Table(title=title)
        t.add_column("Model")
        t.add_column("bin")
        for c in ("P", "I", "S", "C_S (%)", "Fail-I (%)", "OPIS", "cases"):
            t.add_column(c, justify="right")
        for name, m in models.items():
            for b, v in m[key].items():
                t.add_row(name, b, _fmt(v["P"]), _fmt(v["I"]), _fmt(v["S"]), _fmt(v["C_S"]), _fmt(v["fail_I"]),
                          _fmt(v["OPIS"]), str(v["n_cases"]))
        console.print(t)

    t = Table(title="Coverage audit (percentages hierarchically averaged; No-S counts rollouts)")
    t.add_column("Model")
    for c in ("C_P", "C_I", "Static", "Dynamic", "Unknown", "No-S"):
        t.add_column(c, justify="right")
    for name, m in models.items():
        c = m["coverage"]
        t.add_row(name, _fmt(c["C_P"]), _fmt(c["C_I"]), _fmt(c["static"]), _fmt(c["dynamic"]), _fmt(c["unknown"]),
                  str(c["no_s"]))
    console.print(t)

    flagged = [c for c in result["cases"] if c["flags"]]
    if flagged:
        console.print(f"{len(flagged)} of {len(result['cases'])} rollouts carry flags "
                      "(undefined P or I, or no structure frames); see --json for the list.")


def score_cmd(
    run_dirs: List[Path] = typer.Argument(..., help="Run folders (measurements.parquet, measurements/<model>.parquet, parts/) or Parquet files."),
    as_json: bool = typer.Option(False, "--json", help="Print the JSON object of SPEC section 3."),
    variant: str = typer.Option(ScoreConfig.variant, "--variant", help=f"Aggregation variant: {'|'.join(ALL_VARIANTS)} "
                                f"({OFFICIAL}: the OPIS authors' evaluator's aggregation)."),
    bootstrap: Optional[int] = typer.Option(None, "--bootstrap", help="Bootstrap replicates for the OPIS CI (0 skips it; "
                                            f"default {ScoreConfig.bootstrap}, and the authors' {OFFICIAL_BOOTSTRAP} with {OFFICIAL})."),
    seed: int = typer.Option(ScoreConfig.seed, "--seed", help="Seed of the bootstrap."),
    tau_i: float = typer.Option(ScoreConfig.tau_I, "--tau-i", help="Identity acceptance threshold tau_I."),
    tau_s: float = typer.Option(ScoreConfig.tau_S, "--tau-s", help="Structure acceptance threshold tau_S."),
    w_p: float = typer.Option(ScoreConfig.weights[0], "--w-p", help="Weight of Presence."),
    w_i: float = typer.Option(ScoreConfig.weights[1], "--w-i", help="Weight of Identity."),
    w_s: float = typer.Option(ScoreConfig.weights[2], "--w-s", help="Weight of Structure."),
    ci_level: float = typer.Option(ScoreConfig.ci_level, "--ci-level", help="Confidence level of the percentile interval."),
    out: Optional[Path] = typer.Option(None, "--out", help="Also write the JSON object to this file."),
) -> None:
    """Score OPIS measurement archives: P, I, S, C_S, OPIS with bootstrap CI, variants and diagnostics."""
    if bootstrap is None:
        bootstrap = OFFICIAL_BOOTSTRAP if variant == OFFICIAL else ScoreConfig.bootstrap
    try:
        config = ScoreConfig(tau_I=tau_i, tau_S=tau_s, weights=(w_p, w_i, w_s), variant=variant,
                             bootstrap=bootstrap, seed=seed, ci_level=ci_level)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    try:
        result = score_runs(run_dirs, config)
    except ArchiveError as exc:
        typer.echo(f"error: bad measurement archive: {exc}", err=True)
        raise typer.Exit(2)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    text = json.dumps(result, allow_nan=False)
    if out is not None:
        atomic_write_text(out, text + "\n")
    if as_json:
        sys.stdout.write(text + "\n")
    else:
        render_tables(result)


def register(app: typer.Typer) -> None:
    """Add `score` to the `opis` command group."""
    app.command("score", cls=FlagsCommand)(score_cmd)
