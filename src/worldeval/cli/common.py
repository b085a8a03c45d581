"""What several commands share: flags shown without a value, KEY=VALUE options, the usage-error exit."""

from __future__ import annotations

import importlib
from typing import NoReturn

import typer
from typer.core import TyperCommand


class FlagsCommand(TyperCommand):
    """A command whose on/off options show no value in help.

    typer prints `<bool>` beside every flag (`--quiet <bool>`, even `--help <bool>`), which reads
    as if the flag took a value; `--quiet true` then fails with "unexpected extra argument".
    """

    def get_params(self, ctx):
        params = super().get_params(ctx)
        for p in params:
            if getattr(p, "is_bool_flag", False) and p.metavar is None:
                p.metavar = ""  # typer shows the metavar, when one is set, instead of the type
        return params


def parse_options(pairs: list[str]) -> dict:
    """KEY=VALUE command-line pairs (`--backend-option` and alike) as a dict of strings."""
    out = {}
    for p in pairs or []:
        key, sep, value = p.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"--backend-option needs KEY=VALUE, got {p!r}")
        out[key.strip()] = value
    return out


def fail(msg: str) -> NoReturn:
    """`error: MSG` on stderr and exit status 2 (bad input)."""
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(2)


def register_modules(app: typer.Typer, package: str, modules: dict[str, tuple[str, ...]],
                     command: str | None = None) -> None:
    """Register `package`'s command modules on `app`: only the one that owns `command`, or all of them.

    Importing a module means importing what its commands run (pandas, OpenCV, the perception
    stack): about 0.5 s that `worldeval opis score` would pay for commands it never runs. So a
    command line that names a command imports that module alone; `--help` and anything not found
    (typer then says what exists) import all, in `modules`' order.
    """
    owners = [m for m, names in modules.items() if command in names]
    for module in owners or modules:
        importlib.import_module(f"{package}.{module}").register(app)
