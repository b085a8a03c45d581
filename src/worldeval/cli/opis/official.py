"""The OPIS authors' formats on the command line: `opis import-official` (their dataset -> our
layout) and `opis import-run` (their evaluator's runs -> a worldeval measurement archive)."""

from __future__ import annotations

from pathlib import Path

import typer

from worldeval.errors import CaseError, InputError
from worldeval.opis.official.layout import import_official
from worldeval.opis.official.runs import import_runs, rescore

__all__ = ["register", "import_run_cmd", "import_official_cmd"]


def import_official_cmd(
    src: Path = typer.Argument(..., help="Their dataset as downloaded: the root, final/, a subcategory or one case folder."),
    out: Path = typer.Option(..., "--out", help="Dataset folder to write in our layout (case folders, dataset.json, import.json)."),
) -> None:
    """Write the authors' cases in our layout, printing per case what was kept, converted and dropped.

    Exit status: 0 all imported, 1 some case failed (named by file and field; the others are written),
    2 SRC holds no case.
    """
    try:
        summary = import_official(src, out)
    except CaseError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    for c in summary["imported"]:
        typer.echo(f"{c['case_id']} ({c['subcategory']}, {c['domain']}, {c['instances']} instances): "
                   f"kept {', '.join(c['kept'])}; converted {'; '.join(c['converted'])}"
                   + (f"; dropped {'; '.join(c['dropped'])}" if c["dropped"] else "")
                   + (f"; warnings {'; '.join(c['warnings'])}" if c["warnings"] else ""))
    for f in summary["failed"]:
        typer.echo(f"failed: {f['file']}: {f['field']}: {f['message']}", err=True)
    typer.echo(f"{len(summary['imported'])} cases written to {out}, {len(summary['failed'])} failed "
               f"(see {Path(out) / 'import.json'})")
    if summary["failed"]:
        raise typer.Exit(1)


def import_run_cmd(
    root: Path = typer.Argument(..., help="Their output root: <ROOT>/<model>/<scene_id>/run-*/ (eval_v3/, observation/, run_manifest.json)."),
    dataset: Path = typer.Option(..., "--dataset", help="The dataset their runs were evaluated on (their layout or ours): gives case ids, domains, subcategories and reference inventories."),
    out: Path = typer.Option(..., "--out", help="Run folder to write: parts/, measurements/, manifest.json, official_summaries.json."),
) -> None:
    """Import runs of the authors' evaluator so `opis score`, `report` and `compare` read them.

    Exit status: 0 all imported, 1 some scene failed (the others are imported), 2 ROOT or DATASET unusable.
    """
    try:
        manifest = import_runs(root, dataset, out)
    except InputError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    for e in manifest["imported"]:
        typer.echo(f"imported {e['model']}/{e['case_id']} from {e['scene_dir']}/{e['run']}: "
                   f"{e['n_frames']} frames, {e['n_rows']} rows")
    for w in manifest["warnings"]:
        typer.echo(f"warning: {w}", err=True)
    for f in manifest["failed"]:
        typer.echo(f"failed: {f['file']}: {f['field']}: {f['message']}", err=True)
    if manifest["imported"]:
        check = rescore(out)
        if check["max_abs_diff"] is not None:
            typer.echo(f"official-v3 re-scored from the archive: largest |ours - their headline| = "
                       f"{check['max_abs_diff']:.6f} over {sum(c['theirs'] is not None for c in check['cases'])} cases "
                       f"(per case: {out / 'official_rescore.json'})")
    models = len({e["model"] for e in manifest["imported"]})
    typer.echo(f"{len(manifest['imported'])} cases of {models} models imported into {out}, "
               f"{len(manifest['failed'])} failed, {len(manifest['warnings'])} warnings (see {out / 'manifest.json'})")
    if manifest["failed"]:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add `import-official` and `import-run` to the `opis` command group."""
    app.command("import-official")(import_official_cmd)
    app.command("import-run")(import_run_cmd)
