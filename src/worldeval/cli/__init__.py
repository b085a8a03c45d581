"""The `worldeval` command.

One module per command group (`opis/<group>.py`, `worldcast/<group>.py`, `demo.py`, `report.py`,
`models.py`), each a set of module-level command functions and one `register(app)` that adds them
to the group it is given. Each package's `MODULES` (and this one's, for the top-level commands)
names its modules and their commands in the order `--help` lists them, so adding a command means
one line there. `main` imports only the module of the command it runs (`register_modules`); the
module attribute `app` is the whole command tree, built on first use.
"""

from __future__ import annotations

import sys

import typer

from worldeval import __version__
from worldeval.cli import opis, worldcast
from worldeval.cli.common import register_modules

# The top-level commands' modules, after the `opis` and `worldcast` groups in `--help`.
MODULES: dict[str, tuple[str, ...]] = {"demo": ("demo",), "report": ("report",), "models": ("models",)}


def _version(value: bool) -> None:
    if value:
        typer.echo(__version__)
        raise typer.Exit()


def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    pass


def build_app(argv: list[str] | None = None) -> typer.Typer:
    """The command tree for the command line `argv` (its commands only), or all of it (None)."""
    head = argv[0] if argv else None
    command = argv[1] if argv and len(argv) > 1 else None
    app = typer.Typer(
        name="worldeval",
        help="Evaluate generative world models on OPIS and WorldCast.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    app.callback()(_root)
    opis_app = typer.Typer(help="OPIS: multi-object memory of video world models.", no_args_is_help=True)
    worldcast_app = typer.Typer(help="WorldCast: multi-step world-state prediction.", no_args_is_help=True)
    app.add_typer(opis_app, name="opis")
    app.add_typer(worldcast_app, name="worldcast")
    if head == "opis":
        opis.register(opis_app, command)
    elif head == "worldcast":
        worldcast.register(worldcast_app, command)
    elif any(head in names for names in MODULES.values()):
        register_modules(app, __name__, MODULES, head)
    else:
        opis.register(opis_app)
        worldcast.register(worldcast_app)
        register_modules(app, __name__, MODULES)
    return app


def __getattr__(name: str):
    # `from worldeval.cli import app` (tests, embedding) gets every command, built once.
    if name == "app":
        globals()["app"] = build_app()
        return globals()["app"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    build_app(sys.argv[1:])()
