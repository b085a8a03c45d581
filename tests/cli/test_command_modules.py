"""The command tables that let `main` import one command module: true to what the modules register."""

from __future__ import annotations

import subprocess
import sys

import typer
from typer.main import get_command

from worldeval import cli
from worldeval.cli import opis, worldcast
from worldeval.cli.common import register_modules


def _names(package: str, modules: dict, module: str) -> list[str]:
    app = typer.Typer()
    app.command("placeholder")(lambda: None)  # a lone command would make typer collapse the group
    register_modules(app, package, {module: modules[module]})
    return sorted(n for n in get_command(app).commands if n != "placeholder")


def test_each_table_lists_exactly_the_commands_its_module_registers():
    for package, table in ((opis.__name__, opis.MODULES), (worldcast.__name__, worldcast.MODULES),
                           (cli.__name__, cli.MODULES)):
        for module, names in table.items():
            assert _names(package, table, module) == sorted(names), (package, module)


def test_a_command_line_builds_only_its_command_and_help_builds_all():
    full = get_command(cli.build_app())
    assert sorted(full.commands["opis"].commands) == sorted(n for ns in opis.MODULES.values() for n in ns)
    assert sorted(full.commands) == ["demo", "models", "opis", "report", "worldcast"]
    one = get_command(cli.build_app(["opis", "validate", "x"]))
    assert sorted(one.commands["opis"].commands) == ["build-coco", "validate"]
    # A name no table knows registers everything, so typer can say what exists.
    typo = get_command(cli.build_app(["opis", "scor"]))
    assert len(typo.commands["opis"].commands) == len(full.commands["opis"].commands)


def test_opis_score_does_not_import_the_perception_stack():
    code = ("import sys; from worldeval.cli import build_app; build_app(['opis', 'score']); "
            "print(sorted(m for m in ('cv2', 'torch', 'worldeval.opis.evaluate', 'worldeval.cli.opis.annotate') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_opis_score_runs_without_pandas(tmp_path):
    """The archive is read and scored as numpy arrays (`ArchiveColumns`): importing pandas alone would
    cost the command about 0.3 s."""
    from worldeval.opis.archive import frame_from_records, write_archive

    recs = [dict(frame=24, instance_id="a", track="static", visibility="expected_visible", matched=True, appearance=0.8),
            dict(frame=24, extra=True)]
    write_archive(frame_from_records(recs, model="m", case_id="c", domain="d", subcategory="s", n_reference=1, fps=24.0),
                  tmp_path / "measurements.parquet")
    code = ("import sys; from worldeval.cli import main; sys.argv[1:] = ['opis', 'score', sys.argv[1], '--json']\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "print(sorted(m for m in ('pandas', 'pyarrow.compute', 'pyarrow.dataset') if m in sys.modules), file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True)
    assert '"models"' in proc.stdout
    assert proc.stderr.strip().splitlines()[-1] == "[]"
