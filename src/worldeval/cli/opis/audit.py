"""`worldeval opis audit`: the evaluator against ground-truth video (`--gt`) and against people
(`sample`, `agree`).

`opis audit` is a command group whose own callback runs the ground-truth audit when no
subcommand is given, so both `opis audit --gt DIR` and `opis audit sample RUN_DIR` work.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

# The options' defaults are the audit's own config, so the command cannot drift from the Python API.
from worldeval.opis.checks.audit import AuditConfig, render, run_audit, table13
from worldeval.opis.checks.audit_manual import AuditError, agree, repeatability, sample_audit
from worldeval.opis.checks.gtclips import GTError


def _console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, width=200)


def audit_gt_cmd(
    ctx: typer.Context,
    gt: Optional[Path] = typer.Option(None, "--gt", help="Ground-truth clips: <clip>/frames + <clip>/masks, or JPEGImages/ + Annotations/."),
    out: Path = typer.Option(Path("audit_out"), "--out", help="Output folder: cases, rollouts, run folders, decisions.csv, audit.json."),
    backend: str = typer.Option(AuditConfig.backend, "--backend", help="Perception backend: classical | hf."),
    device: str = typer.Option(AuditConfig.device, "--device", help="cpu | cuda"),
    fps: float = typer.Option(AuditConfig.fps, "--fps", help="Frame rate of the clips (an instances.json 'fps' overrides it)."),
    workers: int = typer.Option(AuditConfig.workers, "--workers", help="Evaluation worker processes (0: in this process)."),
    max_side: Optional[int] = typer.Option(None, "--max-side", help="Evaluate frames at most this large."),
    force: bool = typer.Option(False, "--force", help="Write the rollouts and evaluate them again (after changing the evaluator: resume only tracks inputs and settings)."),
    as_json: bool = typer.Option(False, "--json", help="Print the agreement JSON instead of the tables."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress lines (errors are still printed)."),
) -> None:
    """Audit the evaluator on real video with ground-truth masks (run with --gt DIR)."""
    if ctx.invoked_subcommand is not None:
        return
    if gt is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(2)
    if fps <= 0:
        raise typer.BadParameter("must be positive", param_hint="--fps")
    err = _console(stderr=True)
    cfg = AuditConfig(backend=backend, device=device, fps=fps, workers=workers, max_side=max_side, force=force)
    try:
        result = run_audit(gt, out, cfg, log=(lambda m: None) if quiet else (lambda m: err.print(m, markup=False, highlight=False)))
    except GTError as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(2)
    for name, e in result["errors"].items():
        err.print(f"error: clip {name}: {e['file']}: {e['field']}: {e['message']}", markup=False, highlight=False)
    if as_json:
        typer.echo(json.dumps({k: result[k] for k in ("checks", "clips", "confusions")}, indent=2))
    else:
        for t in render(result):
            _console().print(t)
        typer.echo(f"decisions: {out / 'decisions.csv'}   details: {out / 'audit.json'}")


def sample_cmd(
    run_dir: Path = typer.Argument(..., help="An OPIS run folder (opis eval --out)."),
    out: Path = typer.Option(Path("audit"), "--out", help="Where the labelling page, items.json and key.json go."),
    per_dimension: int = typer.Option(150, "--per-dimension", help="Decisions drawn per dimension."),
    seed: int = typer.Option(0, "--seed", help="Seed of the stratified draw."),
) -> None:
    """Draw object-frame decisions and write a self-contained labelling page."""
    if per_dimension < 1:
        raise typer.BadParameter("must be at least 1", param_hint="--per-dimension")
    try:
        res = sample_audit(run_dir, out, per_dimension=per_dimension, seed=seed)
    except AuditError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    counts = ", ".join(f"{k} {v}" for k, v in res["per_dimension"].items())
    typer.echo(f"{res['items']} decisions ({counts}); open {res['page']}")


def agree_cmd(
    audit_dir: Optional[Path] = typer.Argument(None, help="The folder `audit sample` wrote."),
    labels: Optional[Path] = typer.Argument(None, help="The labels JSON exported from the page."),
    repeat: Optional[tuple[Path, Path]] = typer.Option(
        None, "--repeat", help="RUN_A RUN_B: two runs that judged the same structural claims; adds their repeatability."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of the table."),
) -> None:
    """Table 13: agreement of people's labels with the evaluator (and claim repeatability)."""
    if (audit_dir is None or labels is None) and not repeat:
        raise typer.BadParameter("give AUDIT LABELS.json, --repeat RUN_A RUN_B, or both")
    try:
        res = agree(audit_dir, labels) if labels is not None else {"checks": {}, "disagreements": {}}
        if repeat:
            res["repeatability"] = repeatability(*repeat)
    except AuditError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    if as_json:
        typer.echo(json.dumps(res, indent=2))
    else:
        _print_agreement(res)


def _print_agreement(res: dict) -> None:
    checks, dis = {}, {}
    if "repeatability" in res:
        checks["repeatability"] = res["repeatability"]
        dis["repeatability"] = "; ".join(f"{k}: {v}" for k, v in res["repeatability"]["disagreements"].items())
    for k, v in res["checks"].items():
        checks[k] = v
        dis[k] = "; ".join(f"{a}: {b}" for a, b in res["disagreements"][k].items())
    _console().print(table13(checks, "opis audit: evaluator decisions against manual review", {"evaluator -> person": dis}))
    if res.get("unlabelled"):
        typer.echo("unlabelled: " + ", ".join(f"{k} {v}" for k, v in res["unlabelled"].items()))
    if "repeatability" in res:
        r = res["repeatability"]
        typer.echo(f"repeatability unit: {r['unit']} judgments; only in one run: {r['only_in_a']} / {r['only_in_b']}")


def register(app: typer.Typer) -> None:
    """Add the `audit` group to the `opis` command group: `audit --gt DIR`, `audit sample`, `audit agree`."""
    audit_app = typer.Typer(help="Check the evaluator against ground truth (--gt DIR) or people (sample, agree).",
                            invoke_without_command=True, no_args_is_help=False)
    audit_app.callback()(audit_gt_cmd)
    audit_app.command("sample")(sample_cmd)
    audit_app.command("agree")(agree_cmd)
    app.add_typer(audit_app, name="audit")
