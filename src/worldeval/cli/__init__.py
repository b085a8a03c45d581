"""The `worldeval` command.

One module per command group (`opis/<group>.py`, `worldcast/<group>.py`, `demo.py`, `report.py`,
`models.py`), each a set of module-level command functions and one `register(app)` that adds them
to the group it is given; a package's `register` calls its modules' in the order `--help` lists
them. Adding a command never means editing a shared file beyond one line.
"""

from __future__ import annotations

import typer

from worldeval import __version__
from worldeval.cli import demo, models, opis, report, worldcast

app = typer.Typer(
    name="worldeval",
    help="Evaluate generative world models on OPIS and WorldCast.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
opis_app = typer.Typer(help="OPIS: multi-object memory of video world models.", no_args_is_help=True)
worldcast_app = typer.Typer(help="WorldCast: multi-step world-state prediction.", no_args_is_help=True)
app.add_typer(opis_app, name="opis")
app.add_typer(worldcast_app, name="worldcast")


def _version(value: bool) -> None:
    if value:
        typer.echo(__version__)
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    pass


opis.register(opis_app)
worldcast.register(worldcast_app)
demo.register(app)
report.register(app)
models.register(app)


def main() -> None:
    app()

