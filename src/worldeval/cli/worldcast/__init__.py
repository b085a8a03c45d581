"""The `worldcast` commands: one module per command group, each with `register(app)`."""

from __future__ import annotations

import typer

from worldeval.cli.common import register_modules

# Each module and the commands its `register` adds, in the order `worldeval worldcast --help` lists them.
MODULES: dict[str, tuple[str, ...]] = {
    "demo": ("demo",),
    "generate": ("generate",),
    "judge": ("keyframe-agreement", "judge"),
    "scores": ("score", "agreement", "judges", "repeats"),
    "inputs": ("prompts", "keyframes", "samples"),
}


def register(app: typer.Typer, command: str | None = None) -> None:
    """Add the `worldcast` commands to `app`: the module owning `command` only, or every one."""
    register_modules(app, __name__, MODULES, command)
