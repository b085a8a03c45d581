"""No module of src/worldeval imports a private (single-underscore) name of another module.

A leading underscore says a name may change without notice; a second module that imports it
turns every such change into a silent break, so a name another module needs is made public.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers.imports import imported_modules

SRC = Path(__file__).resolve().parents[1] / "src" / "worldeval"

# (importing file relative to SRC, imported name) allowed to stay private; empty: a module that
# needs another's name imports a public one.
KNOWN: set[tuple[str, str]] = set()


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(root: Path = SRC) -> list[tuple[str, int, str, str]]:
    """(file relative to root, line, module as written, name) of every `from X import _name`, at any depth."""
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom):
                module = "." * node.level + (node.module or "")
                out += [(path.relative_to(root).as_posix(), node.lineno, module, a.name)
                        for a in node.names if _private(a.name)]
    return out


def test_the_checker_finds_private_names_only(tmp_path):
    (tmp_path / "m.py").write_text(
        "from worldeval import __version__\n"
        "from worldeval.opis import scoring as _scoring\n"
        "from worldeval.opis.checks.synth import dilate\n"
        "from .validate import _hidden\n"
        "def f():\n"
        "    from worldeval.cli.opis.eval import _opts, parse_options\n"
    )
    assert private_imports(tmp_path) == [("m.py", 4, ".validate", "_hidden"),
                                         ("m.py", 6, "worldeval.cli.opis.eval", "_opts")]


def test_no_module_imports_a_private_name():
    found = private_imports()
    new = [f for f in found if (f[0], f[3]) not in KNOWN]
    assert not new, f"private names imported from another module (make them public): {new}"
    stale = KNOWN - {(f[0], f[3]) for f in found}
    assert not stale, f"allow-list entries that no longer occur (remove them): {stale}"


# opis's rooms, each allowed to import only the rooms after it: checking the evaluator, making
# cases, then the evaluation core (case, evaluate, run, archive, scoring, perception, backends,
# producers). The command line is worldeval/cli/, above every benchmark (tests/test_layering.py).
ROOMS = ("checks", "cases", "core")


def _room(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] != ["worldeval", "opis"]:
        return None
    return parts[2] if len(parts) > 2 and parts[2] in ROOMS[:2] else "core"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_opis_rooms_import_one_way():
    upward = []
    for path in sorted((SRC / "opis").rglob("*.py")):
        here = _room(_module_name(path))
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                there = _room(node.module)
                if there is not None and ROOMS.index(there) < ROOMS.index(here):
                    upward.append(f"{path.relative_to(SRC)}:{node.lineno} ({here}) imports {node.module} ({there})")
    assert not upward, "imports against the direction checks -> cases -> core:\n" + "\n".join(upward)


def test_opis_top_level_holds_at_most_eight_modules():
    top = sorted(p.name for p in (SRC / "opis").glob("*.py"))
    assert len(top) <= 8, top


# WorldCast's rooms, each allowed to import only the rooms after it: the package's top (its
# __init__; the command line is worldeval/cli/worldcast/), the packaged samples with the demo that judges and scores them, the checks of the judge (analysis),
# scoring, judging, generation, and what every other room reads (inputs: cases, output adapters).
WORLDCAST_ROOMS = ("top", "samples", "analysis", "scoring", "judging", "generation", "inputs")


def _worldcast_room(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] != ["worldeval", "worldcast"]:
        return None
    return parts[2] if len(parts) > 2 and parts[2] in WORLDCAST_ROOMS[1:] else "top"


def worldcast_upward_imports(root: Path = SRC.parent) -> list[str]:
    """Every import of a WorldCast module against the room order, as `file:line (room) imports X (room)`."""
    upward = []
    for path in sorted((root / "worldeval" / "worldcast").rglob("*.py")):
        here = _worldcast_room(".".join(path.relative_to(root).with_suffix("").parts))
        for line, target in imported_modules(path, root):
            there = _worldcast_room(target)
            if there is not None and WORLDCAST_ROOMS.index(there) < WORLDCAST_ROOMS.index(here):
                upward.append(f"{path.relative_to(root).as_posix()}:{line} ({here}) imports {target} ({there})")
    return upward


def test_the_worldcast_checker_finds_upward_imports(tmp_path):
    pkg = tmp_path / "worldeval" / "worldcast"
    for room in ("inputs", "judging", "scoring"):
        (pkg / room).mkdir(parents=True)
        (pkg / room / "__init__.py").write_text("")
    (pkg / "inputs" / "cases.py").write_text(
        "from worldeval.worldcast.judging.records import JUDGMENTS\n"  # upward
        "from worldeval.runs import read_jsonl\n"
        "def f():\n"
        "    from ..scoring import scores\n"  # upward, relative, inside a function
    )
    (pkg / "scoring" / "scores.py").write_text(
        "from worldeval.worldcast.inputs.cases import load_cases\n"
        "from worldeval.worldcast import judging\n"
        "import worldeval.worldcast\n"  # upward: the package's top is the top room
    )
    assert worldcast_upward_imports(tmp_path) == [
        "worldeval/worldcast/inputs/cases.py:1 (inputs) imports worldeval.worldcast.judging.records.JUDGMENTS (judging)",
        "worldeval/worldcast/inputs/cases.py:4 (inputs) imports worldeval.worldcast.scoring.scores (scoring)",
        "worldeval/worldcast/scoring/scores.py:3 (scoring) imports worldeval.worldcast (top)",
    ]


def test_worldcast_rooms_import_one_way():
    upward = worldcast_upward_imports()
    assert not upward, "imports against the direction " + " -> ".join(WORLDCAST_ROOMS) + ":\n" + "\n".join(upward)


def test_worldcast_modules_live_in_rooms():
    top = sorted(p.name for p in (SRC / "worldcast").glob("*.py"))
    assert top == ["__init__.py"], top
    rooms = sorted(p.name for p in (SRC / "worldcast").iterdir() if (p / "__init__.py").is_file())
    assert rooms == sorted(WORLDCAST_ROOMS[1:]), f"a room missing from WORLDCAST_ROOMS (or gone): {rooms}"
