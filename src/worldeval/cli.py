"""The `worldeval` command.

Each command group lives in the module that owns it and registers itself here
through a `register(app)` function, so adding a command never means editing a
shared file beyond one import line.
"""

from __future__ import annotations

import typer

from worldeval import __version__

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


def _register_all() -> None:
    from worldeval.opis.cli import score as cli_score
    from worldeval.opis.cli import eval as cli_eval
    from worldeval.opis.cli import validate as cli_validate
    from worldeval.opis.cli import annotate as cli_annotate
    from worldeval.opis.cli import produce as cli_produce
    from worldeval.opis.cli import build as build_cli
    from worldeval.opis.cli import audit as cli_audit
    from worldeval.opis.cli import official as cli_official
    from worldeval.opis.cli import compare as cli_compare
    from worldeval.worldcast import cli as worldcast_cli
    from worldeval import cli_demo, cli_models, cli_report

    for mod in (cli_score, cli_eval, cli_validate, cli_annotate, cli_produce, build_cli, cli_audit, cli_compare, cli_official):
        mod.register(opis_app)
    worldcast_cli.register(worldcast_app)
    cli_demo.register(app)
    cli_report.register(app)
    cli_models.register(app)


_register_all()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
