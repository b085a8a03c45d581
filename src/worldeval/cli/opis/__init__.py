"""The `opis` commands: one module per command group, each with `register(app)`."""

from __future__ import annotations

import typer

from worldeval.cli.opis import annotate, audit, build, compare, eval, official, produce, score, validate


def register(app: typer.Typer) -> None:
    """Add every `opis` command to `app`, in the order `worldeval opis --help` lists them."""
    for group in (score, eval, validate, annotate, produce, build, audit, compare, official):
        group.register(app)
