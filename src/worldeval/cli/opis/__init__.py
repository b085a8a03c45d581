"""The `opis` commands: one module per command group, each with `register(app)`."""

from __future__ import annotations

import typer

from worldeval.cli.common import register_modules

# Each module and the commands its `register` adds, in the order `worldeval opis --help` lists them.
MODULES: dict[str, tuple[str, ...]] = {
    "score": ("score",),
    "eval": ("eval",),
    "validate": ("validate", "build-coco"),
    "annotate": ("annotate",),
    "produce": ("produce",),
    "build": ("build", "source", "cases-from-videos"),
    "audit": ("audit",),
    "compare": ("compare",),
    "official": ("import-official", "import-run"),
}


def register(app: typer.Typer, command: str | None = None) -> None:
    """Add the `opis` commands to `app`: the module owning `command` only, or every one."""
    register_modules(app, __name__, MODULES, command)
