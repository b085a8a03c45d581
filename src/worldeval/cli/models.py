"""`worldeval models fetch|check`: the checkpoints of the `hf` backend, fetched once and checked offline."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional

import typer

from worldeval.opis.checkpoints.store import DEFAULT_CHECKPOINTS, FALLBACK_CHECKPOINTS, FetchError, check, default_models_dir, fetch
from worldeval.media import read_image


def _image(path: Optional[Path]):
    import numpy as np

    if path is None:
        # a textured synthetic frame: checks loading and shapes; give --image for a real photo
        rng = np.random.default_rng(0)
        img = (rng.random((480, 854, 3)) * 60 + 90).astype(np.uint8)
        img[120:360, 200:420] = (200, 40, 40)
        return img, "synthetic 854x480"
    try:
        return read_image(path), str(path)
    except (OSError, ValueError) as exc:
        raise typer.BadParameter(f"{path}: cannot read the image: {exc}", param_hint="--image") from exc


def fetch_cmd(
    backend: str = typer.Option("hf", "--backend", help="Backend whose checkpoints to fetch (hf)."),
    models_dir: Optional[Path] = typer.Option(None, "--dir", help="Models folder (default: WORLDEVAL_MODELS_DIR or ~/.cache/worldeval/models)."),
    only: List[str] = typer.Option([], "--only", help=f"Fetch only this option's checkpoint (repeatable): {', '.join({**DEFAULT_CHECKPOINTS, **FALLBACK_CHECKPOINTS})}."),
    fallbacks: bool = typer.Option(False, "--fallbacks", help="Also fetch SAM 2.1 and DINOv2 (no licence to accept)."),
    token: Optional[str] = typer.Option(None, "--token", help="Hub token (default: HF_TOKEN or `hf auth login`); never written anywhere."),
) -> None:
    """Download the default checkpoints (SAM 3 and DINOv3 are gated: accept their licences on the hub first)."""
    if backend != "hf":
        raise typer.BadParameter(f"only the hf backend has checkpoints to fetch, not {backend!r}", param_hint="--backend")
    root = models_dir or default_models_dir()
    try:
        done = fetch(root, options=list(only) or None, fallbacks=fallbacks, token=token, echo=typer.echo)
    except FetchError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"{len(done)} checkpoint(s) in {root}; next: worldeval models check --dir {root}")


def check_cmd(
    models_dir: Optional[Path] = typer.Option(None, "--dir", help="Models folder (default: WORLDEVAL_MODELS_DIR or ~/.cache/worldeval/models)."),
    image: Optional[Path] = typer.Option(None, "--image", help="A real photo to run each model on (default: a synthetic frame)."),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="float32 (default), bfloat16 or float16."),
    expect: List[str] = typer.Option([], "--expect", help="Options that must be present (default: the fetched defaults)."),
) -> None:
    """Load each checkpoint offline and run it once: one line per piece, OK (time, memory) or FAIL (reason, path)."""
    os.environ["HF_HUB_OFFLINE"] = "1"  # a check that downloads would check nothing
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one line per piece, not interleaved loading bars
    root = models_dir or default_models_dir()
    img, label = _image(image)
    typer.echo(f"checking {root} on {label}, device {device}")
    results = check(root, img, device=device, dtype=dtype, expected=list(expect) or None)
    for r in results:
        typer.echo(r.line())
    failed = [r for r in results if not r.ok]
    if failed:
        typer.echo(f"{len(failed)} of {len(results)} failed", err=True)
        raise typer.Exit(1)
    typer.echo(f"all {len(results)} OK")


def register(app: typer.Typer) -> None:
    """Add the `models` group to the top-level command: `models fetch`, `models check`."""
    models_app = typer.Typer(help="Checkpoints of the hf backend: fetch them, check they load and run.", no_args_is_help=True)
    models_app.command("fetch")(fetch_cmd)
    models_app.command("check")(check_cmd)
    app.add_typer(models_app, name="models")
