"""No function in src/worldeval/ is longer than 80 lines (the project's standard).

A function that does not fit on a screen or two mixes several steps; split along those steps,
so each one can be read, named and tested on its own."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "worldeval"
MAX_LINES = 80
KNOWN: set[tuple[str, str]] = set()  # (file, function) allowed over the limit, named so none is added silently


def long_functions(root: Path = SRC, limit: int = MAX_LINES) -> list[tuple[str, str, int]]:
    """(file relative to root, function name, lines) of every function spanning more than `limit` lines."""
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > limit:
                    out.append((path.relative_to(root).as_posix(), node.name, n))
    return out


def test_the_checker_counts_lines_by_hand(tmp_path):
    body = "\n".join(f"    x{k} = {k}" for k in range(81))
    (tmp_path / "m.py").write_text(f"def short():\n    return 1\n\n\ndef long():\n{body}\n")
    assert long_functions(tmp_path) == [("m.py", "long", 82)]


def test_no_long_function_in_src():
    found = {(f, name): n for f, name, n in long_functions()}
    new = {k: n for k, n in found.items() if k not in KNOWN}
    assert not new, f"functions over {MAX_LINES} lines: {new}"
