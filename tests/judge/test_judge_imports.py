"""Imports inside `worldeval.judge` run one way: no module reaches itself through the others.

Every import counts, also one inside a function or under TYPE_CHECKING: a cycle hidden
that way still ties the modules together and breaks as soon as someone hoists the import.
"""

from __future__ import annotations

import ast
from pathlib import Path
from tests.helpers.paths import SRC

JUDGE = SRC / "judge"


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """{module: the modules of `package` it imports}; the package's __init__ is named `package` itself."""
    names = {p.stem for p in root.glob("*.py") if p.stem != "__init__"}
    graph: dict[str, set[str]] = {}
    for path in sorted(root.glob("*.py")):
        me = package if path.stem == "__init__" else f"{package}.{path.stem}"
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: resolve against the package
                    base = f"{package}.{base}".rstrip(".") if node.level == 1 else base
                # `from pkg import sub` names a submodule; `from pkg import name` runs the package's __init__
                targets = [f"{base}.{a.name}" if base == package and a.name in names else base for a in node.names]
            else:
                continue
            edges.update(t for t in targets if t == package or t.startswith(package + "."))
        edges.discard(me)
        graph[me] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return path[path.index(n):] + [n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_the_checker_finds_a_hidden_cycle(tmp_path):
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "a.py").write_text("from pkg.b import X\n")
    (tmp_path / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.c import Y\n")
    (tmp_path / "c.py").write_text("def f():\n    from pkg import a\n")
    (tmp_path / "d.py").write_text("from pkg import something\n")  # a name of __init__: an edge to the package
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.d"] == {"pkg"} and graph["pkg.c"] == {"pkg.a"}
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]


def test_no_import_cycle_in_judge():
    graph = import_graph(JUDGE, "worldeval.judge")
    assert "worldeval.judge.client" in graph and graph["worldeval.judge"]  # the walk saw the package
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph))}"


def test_transports_do_not_import_the_client():
    graph = import_graph(JUDGE, "worldeval.judge")
    for mod in ("transport", "openai_compat", "mock", "image", "breaker"):
        assert "worldeval.judge.client" not in graph[f"worldeval.judge.{mod}"], mod


def test_the_documented_import_paths_still_work():
    import worldeval.judge as judge
    from worldeval.judge.client import JudgeImage, JudgeUnavailable
    from worldeval.judge.image import JudgeImage as image_JudgeImage
    from worldeval.judge.transport import JudgeUnavailable as transport_JudgeUnavailable

    assert JudgeImage is image_JudgeImage is judge.JudgeImage
    assert JudgeUnavailable is transport_JudgeUnavailable is judge.JudgeUnavailable
    assert issubclass(judge.CircuitOpen, JudgeUnavailable)
