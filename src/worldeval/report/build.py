"""Build the single-file HTML report for one or more run folders.

The file is self-contained: styles inline, images and plots as data URIs, no
scripts and no fonts or anything else fetched from the network, so it can be
mailed, archived or opened offline.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Callable

import jinja2

from worldeval import __version__
from worldeval.opis.archive import is_opis_run, load_opis_run
from worldeval.report.loaders import is_worldcast_run, load_worldcast_run, missing_results
from worldeval.report.opis import VARIANTS, build_opis
from worldeval.report.worldcast import build_worldcast
from worldeval.runs import atomic_write_text, redact
from worldeval.stats import BOOTSTRAP_REPLICATES


class ReportError(ValueError):
    """The report cannot be built at all (a run folder that does not exist, or none that holds results)."""


def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("worldeval.report", "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"], default_for_string=True, default=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render_report(
    run_dirs: list[str | Path],
    *,
    title: str = "worldeval report",
    bootstrap: int = BOOTSTRAP_REPLICATES,
    seed: int = 0,
    variants: tuple[str, ...] = VARIANTS,
    max_cases: int = 20,
    frames_per_case: int = 4,
    thumb_side: int = 224,
    opis_score_fn: Callable | None = None,
    worldcast_score_fn: Callable | None = None,
    now: _dt.datetime | None = None,
) -> str:
    """The report's HTML text. See `build_report` for the arguments."""
    roots = [Path(p) for p in run_dirs]
    skipped = unreadable_run_dirs(roots)
    if len(skipped) == len(roots):
        raise ReportError("nothing to report: " + "; ".join(f"{r}: {why}" for r, why in skipped.items()))
    # An unreadable folder is left out rather than loaded: handed to scoring with the others, it
    # would fail the score of every model.
    readable = [r for r in roots if str(r) not in skipped]
    opis_runs = [load_opis_run(r) for r in readable if is_opis_run(r)]
    wc_runs = [load_worldcast_run(r) for r in readable if is_worldcast_run(r)]

    if opis_runs:
        opis = build_opis(opis_runs, score_fn=opis_score_fn, bootstrap=bootstrap, seed=seed, variants=variants,
                          max_cases=max_cases, frames_per_case=frames_per_case, thumb_side=thumb_side)
    else:
        opis = {"present": False, "runs": [], "notes": [], "config": {}}
    if wc_runs:
        wc = build_worldcast(wc_runs, score_fn=worldcast_score_fn, max_cases=max_cases, thumb_side=thumb_side,
                             bootstrap=bootstrap, seed=seed)
    else:
        wc = {"present": False, "runs": [], "notes": []}
    opis["notes"] = list(opis["notes"]) + [f"{r}: {why}; left out of the report" for r, why in skipped.items()]

    stamp = (now or _dt.datetime.now(_dt.timezone.utc)).strftime("%Y-%m-%d %H:%M UTC")
    html = _env().get_template("report.html.j2").render(
        title=title, version=__version__, generated=stamp, run_dirs=[str(r) for r in roots],
        opis=redact(opis), wc=redact(wc),
    )
    return html


def unreadable_run_dirs(run_dirs: list[str | Path]) -> dict[str, str]:
    """Folder -> what it lacks, for each given folder with no readable OPIS archive or WorldCast judgments.

    Raises ReportError when no folder is given or one does not exist: a mistyped path is an
    error, not a folder to skip.
    """
    roots = [Path(p) for p in run_dirs]
    if not roots:
        raise ReportError("no run folders given")
    for r in roots:
        if not r.is_dir():
            raise ReportError(f"{r}: run folder does not exist")
    return {str(r): why for r in roots if (why := missing_results(r)) is not None}


def build_report(run_dirs: list[str | Path], out_path: str | Path, **options) -> Path:
    """Write the self-contained HTML report of `run_dirs` to `out_path` and return the path.

    Options: `title`, `bootstrap` (replicates for the OPIS and WorldCast CIs; 0 = none), `seed`,
    `variants`, `max_cases` (cases drawn with images; -1 = all), `frames_per_case`,
    `thumb_side` (longest side of embedded images, pixels), and for tests
    `opis_score_fn(paths, variant, bootstrap, seed)` / `worldcast_score_fn(paths)`.
    """
    out = Path(out_path)
    html = render_report(run_dirs, **options)
    atomic_write_text(out, html)
    return out
