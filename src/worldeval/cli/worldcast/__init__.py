"""The `worldcast` commands: one module per command group, each with `register(app)`."""

from __future__ import annotations

import typer

from worldeval.cli.worldcast import demo, generate, inputs, judge, scores


def register(app: typer.Typer) -> None:
    """Add every `worldcast` command to `app`, in the order `worldeval worldcast --help` lists them."""
    for group in (demo, generate, judge, scores, inputs):
        group.register(app)
