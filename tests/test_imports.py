"""No module of src/worldeval imports a private (single-underscore) name of another module.

A leading underscore says a name may change without notice; a second module that imports it
turns every such change into a silent break, so a name another module needs is made public.
"""

from __future__ import annotations

import ast
from pathlib import Path

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
        "    from worldeval.opis.cli.eval import _opts, parse_options\n"
    )
    assert private_imports(tmp_path) == [("m.py", 4, ".validate", "_hidden"),
                                         ("m.py", 6, "worldeval.opis.cli.eval", "_opts")]


def test_no_module_imports_a_private_name():
    found = private_imports()
    new = [f for f in found if (f[0], f[3]) not in KNOWN]
    assert not new, f"private names imported from another module (make them public): {new}"
    stale = KNOWN - {(f[0], f[3]) for f in found}
    assert not stale, f"allow-list entries that no longer occur (remove them): {stale}"


# opis's rooms, each allowed to import only the rooms after it: the command line, checking the
# evaluator, making cases, then the evaluation core (case, evaluate, run, archive, scoring, claims,
# perception, backends, producers).
ROOMS = ("cli", "checks", "cases", "core")


def _room(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] != ["worldeval", "opis"]:
        return None
    return parts[2] if len(parts) > 2 and parts[2] in ROOMS[:3] else "core"


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
    assert not upward, "imports against the direction cli -> checks -> cases -> core:\n" + "\n".join(upward)


def test_opis_top_level_holds_at_most_eight_modules():
    top = sorted(p.name for p in (SRC / "opis").glob("*.py"))
    assert len(top) <= 8, top
