"""`worldeval worldcast prompts`, `keyframes` and `samples`: what goes into a WorldCast run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Optional

import typer

from worldeval.cli.common import fail
from worldeval.errors import CaseError
from worldeval.media import MediaError
from worldeval.runs import atomic_write_text
from worldeval.worldcast.generation.requests import INTERFACES, generation_request
from worldeval.worldcast.inputs.cases import load_cases
from worldeval.worldcast.inputs.keyframes import ChangePointSelector, KeyframeError, write_keyframes
from worldeval.worldcast.samples import sample_dataset, sample_outputs, samples_root


def prompts_cmd(
    interface: str = typer.Option(..., "--interface", metavar="[grid|interleaved|video]", help="grid, interleaved or video."),
    dataset: Optional[Path] = typer.Option(None, "--dataset", help="Dataset folder (default: the packaged samples)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write JSONL here instead of stdout."),
) -> None:
    """Write each case's generation request for one output interface (hints are never included)."""
    if interface not in INTERFACES:
        fail(f"--interface must be one of {', '.join(INTERFACES)}")
    try:
        cases = load_cases(dataset or sample_dataset())
    except CaseError as exc:
        fail(str(exc))
    lines = [json.dumps(generation_request(c, interface).to_json(), ensure_ascii=False) for c in cases]
    text = "\n".join(lines) + "\n"
    if out:
        atomic_write_text(out, text)
        typer.echo(f"{len(lines)} requests -> {out}", err=True)
    else:
        typer.echo(text, nl=False)


def keyframes_cmd(
    video: Path = typer.Argument(..., help="A generated video."),
    steps: int = typer.Option(..., "--steps", min=1, help="Number of keyframes (requested states)."),
    out: Path = typer.Option(..., "--out", help="Folder for step_k.jpg and selection.json."),
) -> None:
    """Pick K keyframes from a video with the model-free change-point selector."""
    try:
        sel = ChangePointSelector().select(video, steps)
        write_keyframes(sel, out)
    except (KeyframeError, MediaError) as exc:
        fail(str(exc))
    for s in sel.steps:
        typer.echo(f"step {s['step']}: t={s['timestamp_seconds']:.3f}s frame {s['frame_index']}")


def samples_cmd(
    out: Optional[Path] = typer.Option(None, "--out", help="Copy the packaged sample dataset and outputs here."),
) -> None:
    """Show (or copy) the packaged WorldCast sample cases and their correct/shuffled outputs."""
    if out:
        shutil.copytree(samples_root(), out, dirs_exist_ok=True)
        typer.echo(f"copied samples to {out}")
    else:
        typer.echo(f"dataset: {sample_dataset()}")
        for kind in ("correct", "shuffled"):
            typer.echo(f"outputs ({kind}): {sample_outputs(kind)}")


def register(app: typer.Typer) -> None:
    """Add `prompts`, `keyframes` and `samples` to the `worldcast` command group."""
    app.command("prompts")(prompts_cmd)
    app.command("keyframes")(keyframes_cmd)
    app.command("samples")(samples_cmd)
