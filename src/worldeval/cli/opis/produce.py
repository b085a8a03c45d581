"""`worldeval opis produce`: write one rollout video per case with a producer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from worldeval.errors import CaseError
from worldeval.opis.case import iter_case_dirs
from worldeval.opis.producers import get_producer, produce_dataset

PRODUCER_NAMES = ("oracle", "static", "forgetful-drift", "forgetful-recolor", "forgetful-drop", "swapped",
                  "command", "diffusers")


def produce_cmd(
    dataset: Path = typer.Option(..., "--dataset", help="OPIS dataset folder (SPEC section 2)."),
    producer: str = typer.Option(..., "--producer", help=f"One of: {', '.join(PRODUCER_NAMES)}."),
    out: Path = typer.Option(..., "--out", help="Rollout folder; receives <case_id>.mp4 and produce.json."),
    cmd: Optional[str] = typer.Option(
        None, "--cmd",
        help="For --producer command: a template such as "
             "'python gen.py --image {image} --prompt {instruction} --out {out}'. Split with shlex, run without a shell.",
    ),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="command: seconds allowed per case."),
    model: Optional[str] = typer.Option(None, "--model", help="diffusers: pipeline folder or cached hub id."),
    device: str = typer.Option("cuda", "--device", help="diffusers: torch device."),
    steps: Optional[int] = typer.Option(None, "--steps", help="diffusers: number of inference steps."),
    max_frames: Optional[int] = typer.Option(None, "--max-frames", help="diffusers: cap on generated frames."),
    rate: Optional[float] = typer.Option(None, "--rate", help="forgetful-*: forgetting speed (strength per second)."),
    onset: Optional[float] = typer.Option(None, "--onset", help="forgetful-*: seconds before the first object changes."),
    fraction: Optional[float] = typer.Option(None, "--fraction", help="forgetful-*: share of objects affected."),
    fps: Optional[float] = typer.Option(None, "--fps", help="Override the camera task's frame rate."),
    duration: Optional[float] = typer.Option(None, "--duration", help="Override the camera task's duration (s)."),
    seed: int = typer.Option(0, "--seed", help="Seed of every random choice."),
    case: Optional[List[str]] = typer.Option(None, "--case", help="Only these case ids (repeatable)."),
    force: bool = typer.Option(False, "--force", help="Redo cases whose video already exists."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Write `<case_id>.mp4` for every case of DATASET with a producer (failures are recorded, not fatal)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    err = Console(stderr=True)
    if producer not in PRODUCER_NAMES:
        err.print(f"[red]--producer: unknown producer {producer!r}; choose from {', '.join(PRODUCER_NAMES)}[/red]")
        raise typer.Exit(2)
    options: dict = {}
    if producer == "command":
        if not cmd:
            err.print("[red]--cmd: the command producer needs a command template[/red]")
            raise typer.Exit(2)
        options = {"template": cmd, "timeout_s": timeout}
    elif producer == "diffusers":
        options = {"model": model, "device": device, "num_inference_steps": steps, "max_frames": max_frames}
    elif producer.startswith("forgetful-"):
        options = {"rate": rate, "onset_s": onset, "fraction": fraction}
    try:
        prod = get_producer(producer, **options)
        n = len(iter_case_dirs(dataset))
    except (ValueError, CaseError) as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(2)

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, disable=quiet or as_json, transient=True) as progress:
        task = progress.add_task(f"producing {producer}", total=len(case) if case else n)
        summary = produce_dataset(dataset, prod, out, fps=fps, duration_s=duration, seed=seed, force=force,
                                  cases=case, on_case=lambda cid, rec: progress.advance(task))
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
    elif not quiet:
        Console().print(f"{producer}: {summary['done']} written, {summary['skipped']} kept, "
                        f"{summary['failed']} failed -> {out}")
        for e in summary["errors"]:
            err.print(f"[yellow]  {e['file']}: {e['field']}: {e['message']}[/yellow]")
    if summary["failed"] and not summary["done"] and not summary["skipped"]:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add `produce` to the `opis` command group."""
    app.command("produce")(produce_cmd)
