"""Which perception backends exist and how each is built: the one place that maps names to builders.

A backend is named on the command line (`--backend NAME`) in one of three ways:

* a registered name: `classical` or `hf` (the table below);
* an installed entry point in the group `worldeval.backends` (a package's
  `[project.entry-points."worldeval.backends"]` table, `name = "module:builder"`);
* `module:builder`: a module importable from `sys.path` or the current
  directory (a backend kept in a file of one's own, `my_backend.py` -> `my_backend:build`).

A builder is called as `builder(device=..., **options)` and returns a
`worldeval.opis.backends.base.Backend`. The CLI, the executor (GPU resources),
annotate and the run manifest all resolve backends here.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from worldeval.opis.backends.base import Backend

ENTRY_POINT_GROUP = "worldeval.backends"


@dataclass(frozen=True)
class BackendSpec:
    """A resolved backend: what was given, where its builder lives, and whether it wants a GPU."""

    given: str  # as named on the command line
    builder: str  # "module:function"
    kind: str  # "registered" | "entry point" | "module"
    needs_gpu: bool  # on a CUDA device a worker asks for a whole GPU
    path: str | None = None  # folder put on sys.path to import the module (workers do the same)

    def manifest(self) -> dict:
        return {"given": self.given, "builder": self.builder, "kind": self.kind, "needs_gpu": self.needs_gpu}


class BackendNotFound(ValueError):
    """A backend name that is neither registered, nor an entry point, nor an importable module:builder."""


# name -> (builder, needs a GPU on a CUDA device, one line for --help and docs)
REGISTERED: dict[str, tuple[str, bool, str]] = {
    "classical": ("worldeval.opis.backends.classical:build_backend", False, "CPU only: SIFT + template search, EfficientNet-Lite0 + Lab"),
    "hf": ("worldeval.opis.backends.hf:build_hf_backend", True, "transformers models: SAM 3/2, DINOv3/2, ViTPose, depth, LightGlue/LoFTR"),
}  # fmt: skip


def names() -> list[str]:
    """Registered names and installed entry points."""
    return sorted(set(REGISTERED) | set(_entry_points()))


def _entry_points() -> dict[str, str]:
    from importlib.metadata import entry_points

    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def resolve(given: str, path: str | None = None) -> BackendSpec:
    """The BackendSpec of a registered name, an entry point or `module:builder` (importable, else BackendNotFound)."""
    given = str(given).strip()
    if given in REGISTERED:
        builder, gpu, _ = REGISTERED[given]
        return BackendSpec(given, builder, "registered", gpu)
    eps = _entry_points()
    if given in eps:
        return BackendSpec(given, eps[given], "entry point", True)
    module, sep, attr = given.partition(":")
    if not sep or not module or not attr:
        raise BackendNotFound(
            f"unknown backend {given!r}: give a registered name ({', '.join(names())}), an entry point of "
            f"group {ENTRY_POINT_GROUP!r}, or module:builder"
        )
    found = path or _module_folder(module)
    spec = BackendSpec(given, given, "module", True, found)
    builder_of(spec)  # fail here, with the name, rather than in every worker
    return spec


def _module_folder(module: str) -> str | None:
    """The folder a worker must put on sys.path to import `module` (the current directory when only found there)."""
    top = module.split(".")[0]
    found = importlib.util.find_spec(top)
    if found is None:
        cwd = Path.cwd()
        if (cwd / f"{top}.py").exists() or (cwd / top / "__init__.py").exists():
            return str(cwd.resolve())
        return None
    if not found.origin or not Path(found.origin).exists():
        return None  # a namespace package or a built-in: importable as is
    origin = Path(found.origin)
    return str((origin.parent.parent if origin.name == "__init__.py" else origin.parent).resolve())


def builder_of(spec: BackendSpec) -> Callable[..., Backend]:
    module, _, attr = spec.builder.partition(":")
    if spec.path and spec.path not in sys.path:
        sys.path.insert(0, spec.path)
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        raise BackendNotFound(f"backend {spec.given!r}: cannot import module {module!r}: {exc}") from exc
    fn = mod
    for part in attr.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise BackendNotFound(f"backend {spec.given!r}: module {module!r} has no {attr!r}")
    if not callable(fn):
        raise BackendNotFound(f"backend {spec.given!r}: {spec.builder} is not callable")
    return fn


def build(given: str | BackendSpec, device: str = "cpu", module_path: str | None = None, **options: Any) -> Backend:
    """Build the backend `given` names on `device` with `options` (`module_path`: folder of a module:builder)."""
    spec = given if isinstance(given, BackendSpec) else resolve(given, module_path)
    backend = builder_of(spec)(device=device, **options)
    if not isinstance(backend, Backend):
        raise TypeError(f"backend {spec.given!r}: {spec.builder} returned {type(backend).__name__}, not a Backend")
    return backend


def needs_gpu(given: str, device: str = "cpu") -> bool:
    """Whether a worker running backend `given` on `device` should hold a whole GPU."""
    if not str(device).startswith("cuda"):
        return False
    try:
        return resolve(given).needs_gpu
    except BackendNotFound:
        return True
