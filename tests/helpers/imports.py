"""Reading a source tree's imports without running it (the layering and room tests)."""

from __future__ import annotations

import ast
from pathlib import Path


def imported_modules(path: Path, root: Path, local_only: bool = False) -> list[tuple[int, str]]:
    """(line, dotted target) of every import in `path` (with `local_only`, only those inside a function),
    at any depth; `from a import b` is `a.b`, since b may be a module, and a relative import is
    resolved against the file's package (`root` holds `worldeval/`)."""
    package = list(path.relative_to(root).with_suffix("").parts)[:-1]
    tree = ast.parse(path.read_text(), filename=str(path))
    scopes = [tree]
    if local_only:
        scopes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    seen, out = set(), []
    for scope in scopes:
        for node in ast.walk(scope):
            if id(node) in seen:  # a nested function's import is found from its outer function too
                continue
            seen.add(id(node))
            if isinstance(node, ast.Import):
                out += [(node.lineno, a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package[:len(package) - node.level + 1] if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                out += [(node.lineno, f"{module}.{a.name}") for a in node.names]
    return sorted(out)
