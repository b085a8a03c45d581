"""`worldeval opis compare RUN_A RUN_B`: per object-frame agreement and per-case score differences of two runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from worldeval.opis.archive import ArchiveError
from worldeval.opis.checks.compare import compare_runs_detailed, write_outputs
# The thresholds' defaults are scoring's own, so the comparison judges pass/fail the way scoring does.
from worldeval.opis.scoring import ScoreConfig

__all__ = ["compare_cmd", "register", "render_tables"]


def _pct(block: dict) -> str:
    """'90.7 (98/108)', or '-' where nothing was compared."""
    if not block["n"]:
        return "-"
    return f"{block['agreement']:.1f} ({block['agreeing']}/{block['n']})"


def _num(x, signed: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x:+.2f}" if signed else f"{x:.2f}"


def _overall_table(result: dict):
    from rich.table import Table

    o = result["overall"]
    (a, b), (ma, mb) = (result["a"], result["b"]), result["models"]
    t = Table(title=f"opis compare: A = {a} ({ma}) vs B = {b} ({mb}); {o['cases_shared']} shared cases")
    for col in ("Check", "Agreement % (agreeing/N)", "Disagreements", "Mean |A-B|"):
        t.add_column(col, justify="left" if col == "Check" else "right")
    rows = (("Object-frame state (4 labels)", o["state"]), ("Frames with an extra", o["extras"]),
            (f"Identity pass/fail (tau_I={result['tau_I']:g})", o["identity"]),
            (f"Structure pass/fail (tau_S={result['tau_S']:g})", o["structure"]))
    for name, block in rows:
        t.add_row(name, _pct(block), str(block["n"] - block["agreeing"]), _num(block.get("mean_abs_diff"), False))
    return t


def _confusion_table(result: dict):
    from rich.table import Table

    conf = result["overall"]["state"]["confusion"]
    t = Table(title="Object-frame states: A (rows) x B (columns)")
    t.add_column("A \\ B")
    for s in conf:
        t.add_column(s, justify="right")
    for s, row in conf.items():
        t.add_row(s, *[str(v) for v in row.values()])
    return t


def _track_table(result: dict):
    from rich.table import Table

    t = Table(title="By track: agreement % (agreeing/N)")
    for col in ("track", "state", "identity", "structure", "only A / only B"):
        t.add_column(col, justify="left" if col == "track" else "right")
    for name, v in result["by_track"].items():
        if v["joined"] or v["only_in_a"] or v["only_in_b"]:
            t.add_row(name, _pct(v["state"]), _pct(v["identity"]), _pct(v["structure"]),
                      f"{v['only_in_a']} / {v['only_in_b']}")
    return t


def _case_table(result: dict):
    from rich.table import Table

    t = Table(title=f"Per case: agreement % (agreeing/N) and scores B - A (variant: {result['variant']})")
    for col in ("case", "state", "extras", "identity", "structure", "only A / only B",
                "dP", "dI", "dS", "OPIS A", "OPIS B", "dOPIS"):
        t.add_column(col, justify="left" if col == "case" else "right")
    for c in result["cases"]:
        sc = c["scores"]
        d = sc["diff"]
        t.add_row(c["case_id"], _pct(c["state"]), _pct(c["extras"]), _pct(c["identity"]), _pct(c["structure"]),
                  f"{c['only_in_a']} / {c['only_in_b']}", _num(d["P"], True), _num(d["I"], True), _num(d["S"], True),
                  _num((sc["a"] or {}).get("OPIS")), _num((sc["b"] or {}).get("OPIS")), _num(d["OPIS"], True))
    m = result["overall"]["scores"]
    t.add_row("model", "", "", "", "", f"{result['only_in_a']} / {result['only_in_b']}",
              _num(m["diff"]["P"], True), _num(m["diff"]["I"], True), _num(m["diff"]["S"], True),
              _num(m["a"]["OPIS"]), _num(m["b"]["OPIS"]), _num(m["diff"]["OPIS"], True), end_section=True)
    return t


def render_tables(result: dict, console=None) -> None:
    """Overall agreement, the state confusion, agreement by track and the per-case table."""
    from rich.console import Console

    console = console or Console(width=200)
    for table in (_overall_table(result), _confusion_table(result), _track_table(result), _case_table(result)):
        console.print(table)
    o = result["overall"]
    console.print(f"rows only in A: {result['only_in_a']}, only in B: {result['only_in_b']}; "
                  f"cases only in A: {o['cases_only_in_a']}, only in B: {o['cases_only_in_b']}; "
                  f"excluded object-frames (not in the agreement): {o['excluded_rows']}", markup=False, highlight=False)
    if o["cases_only_in_a"] or o["cases_only_in_b"]:
        sa, sb = o["scores"]["a"], o["scores"]["b"]
        console.print(f"note: the model rows score each run's own cases ({sa['n_cases']} in A, {sb['n_cases']} in B), "
                      "so their difference also reflects the cases only one run holds", markup=False, highlight=False)


def compare_cmd(
    run_a: Path = typer.Argument(..., help="Run A: a run folder (or Parquet file) of OPIS measurements."),
    run_b: Path = typer.Argument(..., help="Run B: a run folder (or Parquet file) of the same videos."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of the tables."),
    out: Optional[Path] = typer.Option(None, "--out", help="Also write OUT/compare.json and OUT/decisions.csv."),
    variant: str = typer.Option(ScoreConfig.variant, "--variant", help="Scoring variant of the per-case scores."),
    model_a: Optional[str] = typer.Option(None, "--model-a", help="Model of run A (default: its only one, or B's name)."),
    model_b: Optional[str] = typer.Option(None, "--model-b", help="Model of run B (default: its only one, or A's name)."),
    tau_i: float = typer.Option(ScoreConfig.tau_I, "--tau-i", help="Identity pass threshold tau_I."),
    tau_s: float = typer.Option(ScoreConfig.tau_S, "--tau-s", help="Structure pass threshold tau_S."),
) -> None:
    """Compare two OPIS runs of the same videos: object-frame agreement and per-case score differences."""
    try:
        result, joined = compare_runs_detailed(run_a, run_b, model_a=model_a, model_b=model_b, variant=variant,
                                               tau_I=tau_i, tau_S=tau_s)
    except ArchiveError as exc:
        typer.echo(f"error: bad measurement archive: {exc}", err=True)
        raise typer.Exit(2)
    except ValueError as exc:  # CompareError, or a variant/threshold ScoreConfig refuses
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    if out is not None:
        write_outputs(out, result, joined)
    if as_json:
        sys.stdout.write(json.dumps(result, allow_nan=False) + "\n")
    else:
        render_tables(result)
        if out is not None:
            typer.echo(f"decisions: {out / 'decisions.csv'}   details: {out / 'compare.json'}")


def register(app: typer.Typer) -> None:
    """Add `compare` to the `opis` command group."""
    app.command("compare")(compare_cmd)
