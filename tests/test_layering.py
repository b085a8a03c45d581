"""worldeval's layers import one way, and imports of worldeval modules sit at the top of their modules.

Layers, lowest first: the core (every module outside the four packages below: media, runs, stats,
judge, executor, geometry, endpoints, generator, errors, retry, commands, thumbnails), then the two
benchmarks side by side (opis, worldcast: neither imports the other; what both need lives in the
core), then the report, then the command line (`worldeval.cli` and its subpackages). A module may
import its own layer and the ones below it.

A function-local import of a worldeval module hides a dependency from the top of the file and
from this check, and usually papers over an import circle; it is allowed only where a module
loads something heavy and optional on demand: the command line and the backends (`opis/backends/`).
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers.imports import imported_modules

SRC = Path(__file__).resolve().parents[1] / "src"

LAYERS = {"core": 0, "opis": 1, "worldcast": 1, "report": 2, "cli": 3}
BENCHMARKS = ("opis", "worldcast")
LAZY_OK = ("worldeval/opis/backends/",)  # besides the command line: may import worldeval modules inside functions


def layer(module: str) -> str | None:
    """The layer of a dotted worldeval module (or of a name in one); None outside worldeval."""
    parts = module.split(".")
    if parts[0] != "worldeval":
        return None
    top = parts[1] if len(parts) > 1 else ""
    if top in ("cli", "report") or top in BENCHMARKS:
        return top
    return "core"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def upward_imports(root: Path = SRC) -> list[str]:
    """Every import against the layers, as `file:line (layer) imports X (layer)`."""
    found = []
    for path in sorted((root / "worldeval").rglob("*.py")):
        here = layer(module_name(path, root))
        for line, target in imported_modules(path, root):
            there = layer(target)
            if there is None or there == here:
                continue
            if LAYERS[there] > LAYERS[here] or (here in BENCHMARKS and there in BENCHMARKS):
                found.append(f"{path.relative_to(root).as_posix()}:{line} ({here}) imports {target} ({there})")
    return found


def local_imports(root: Path = SRC) -> list[str]:
    """Every import of a worldeval module inside a function outside the command line and the backends,
    as `file:line imports X`."""
    found = []
    for path in sorted((root / "worldeval").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if layer(module_name(path, root)) == "cli" or rel.startswith(LAZY_OK):
            continue
        found += [f"{rel}:{line} imports {target}" for line, target in imported_modules(path, root, local_only=True)
                  if layer(target) is not None]
    return found


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def test_the_layer_of_a_module():
    assert [layer(m) for m in ("worldeval", "worldeval.media", "worldeval.judge.client", "worldeval.__version__",
                               "worldeval.opis.perception.frame", "worldeval.worldcast.scoring.scores",
                               "worldeval.report.opis", "worldeval.cli", "worldeval.cli.opis.eval", "worldeval.cli.demo",
                               "worldeval.clinic", "numpy", "tests.helpers")] == [
        "core", "core", "core", "core", "opis", "worldcast", "report", "cli", "cli", "cli", "core", None, None]


def test_the_checker_finds_imports_against_the_layers(tmp_path):
    root = _tree(tmp_path, {
        "worldeval/__init__.py": "__version__ = '0'\n",
        "worldeval/media.py": "from worldeval import __version__\nfrom worldeval.opis.case import load_case\n",
        "worldeval/opis/__init__.py": "",
        "worldeval/opis/case.py": "import numpy\nfrom worldeval.media import read_image\nimport worldeval.worldcast.inputs\n",
        "worldeval/worldcast/__init__.py": "",
        "worldeval/worldcast/inputs.py": "def f():\n    from ..report import build\n",
        "worldeval/report/__init__.py": "",
        "worldeval/report/build.py": "from worldeval.opis import case\nfrom worldeval.worldcast import inputs\nfrom worldeval.cli import app\n",
        "worldeval/cli/__init__.py": "from worldeval.report.build import build\napp = None\n",
    })
    assert upward_imports(root) == [
        "worldeval/media.py:2 (core) imports worldeval.opis.case.load_case (opis)",
        "worldeval/opis/case.py:3 (opis) imports worldeval.worldcast.inputs (worldcast)",
        "worldeval/report/build.py:3 (report) imports worldeval.cli.app (cli)",
        "worldeval/worldcast/inputs.py:2 (worldcast) imports worldeval.report.build (report)",
    ]


def test_the_checker_finds_imports_inside_functions(tmp_path):
    root = _tree(tmp_path, {
        "worldeval/__init__.py": "",
        "worldeval/media.py": "import numpy\n\ndef f():\n    import cv2\n    from worldeval import errors\n",
        "worldeval/opis/__init__.py": "",
        "worldeval/opis/run.py": ("from worldeval.media import read_image\n\nclass Run:\n    def go(self):\n"
                                  "        def inner():\n            from .case import load_case\n        return inner\n"),
        "worldeval/opis/backends/hf.py": "def build():\n    from worldeval.opis.backends.hf_embed import Dino\n",
        "worldeval/cli/demo.py": "def main():\n    from worldeval.opis.run import Run\n",
    })
    assert local_imports(root) == [
        "worldeval/media.py:5 imports worldeval.errors",
        "worldeval/opis/run.py:6 imports worldeval.opis.case.load_case",
    ]


def test_layers_import_one_way():
    found = upward_imports()
    assert not found, ("imports against the layers core <- {opis, worldcast} <- report <- cli (opis and worldcast "
                       "never import each other):\n" + "\n".join(found))


def test_worldeval_modules_are_imported_at_the_top():
    found = local_imports()
    assert not found, ("imports of worldeval modules inside functions (move them to the top of the module; an "
                       "import circle is broken by moving what both sides need to the lower module):\n" + "\n".join(found))
