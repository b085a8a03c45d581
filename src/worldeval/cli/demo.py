"""`worldeval demo`: the whole OPIS pipeline on a small offline benchmark, end to end.

1. build the demo dataset from scikit-image's bundled photos (hand-drawn boxes, GrabCut masks);
2. produce rollouts for the built-in reference models;
3. evaluate them with the classical backend (`opis eval`) and score them (`opis score`);
4. print the leaderboard (each component beside its coverage) with bootstrap CIs and write the HTML report.

Every step resumes: a second run reuses the dataset, the videos and the
evaluated items already in `--out`.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import typer

from worldeval import __version__
from worldeval.cli.common import FlagsCommand
from worldeval.cli.opis.score import LEADERBOARD_NOTE, coverage
from worldeval.opis.cases.demo import build_demo_dataset, demo_spec
from worldeval.opis.producers import get_producer, produce_dataset
from worldeval.opis.producers.reference import REFERENCE_MODELS
from worldeval.opis.run import run_eval
# The bootstrap default is scoring's own, as for `opis score`: one number for every command.
from worldeval.opis.scoring import ScoreConfig, score_runs
from worldeval.runs import atomic_write_json


def expected_order_ok(models: dict[str, dict]) -> tuple[bool, str]:
    """oracle above every forgetful-* above swapped (the demo's sanity check)."""
    def opis(name: str) -> float | None:
        m = models.get(name)
        return None if m is None or m.get("OPIS") is None else float(m["OPIS"])

    oracle, swapped = opis("oracle"), opis("swapped")
    forgetful = {k: opis(k) for k in models if k.startswith("forgetful-")}
    if oracle is None or swapped is None or not forgetful or any(v is None for v in forgetful.values()):
        return False, "some reference models have no score"
    bad = [k for k, v in forgetful.items() if not oracle > v > swapped]
    if bad:
        return False, f"expected oracle > {', '.join(sorted(bad))} > swapped"
    return True, "oracle > every forgetful-* > swapped"


def _demo_stamp() -> dict:
    return {"worldeval": __version__, "spec": demo_spec()}


def _dataset_current(dataset: Path) -> bool:
    """The demo dataset in `dataset` was built by this version from the annotations it ships."""
    stamp = dataset / "demo_spec.json"
    if not (dataset / "dataset.json").exists() or not stamp.exists():
        return False
    try:
        return json.loads(stamp.read_text(encoding="utf-8")) == _demo_stamp()
    except Exception:
        return False


def run_demo(out: Path, bootstrap: int = ScoreConfig.bootstrap, seed: int = 0, workers: int = 0, quiet: bool = False,
             models: tuple[str, ...] = REFERENCE_MODELS, console=None) -> dict[str, Any]:
    """Run the demo into `out`; returns the summary printed by `--json`."""
    from rich.console import Console

    console = console or Console(stderr=True)
    t_start = time.monotonic()
    timings: dict[str, float] = {}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    dataset, rollouts, runs = out / "dataset", out / "rollouts", out / "runs"
    n_cases = len(demo_spec()["cases"])

    def progress():
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        return Progress(TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=console, disable=quiet, transient=False)

    t0 = time.monotonic()
    _ensure_dataset(out, n_cases, progress)
    timings["dataset"] = time.monotonic() - t0
    t0 = time.monotonic()
    produce_errors = _render_rollouts(dataset, rollouts, models, seed, n_cases, progress)
    timings["rollouts"] = time.monotonic() - t0
    t0 = time.monotonic()
    eval_summaries = _evaluate(dataset, rollouts, runs, models, workers, n_cases, progress)
    timings["evaluate"] = time.monotonic() - t0

    t0 = time.monotonic()
    run_dirs = [runs / name for name in models]
    result = score_runs(run_dirs, ScoreConfig(bootstrap=bootstrap, seed=seed))
    atomic_write_json(out / "scores.json", result)
    timings["score"] = time.monotonic() - t0
    ok, why = expected_order_ok(result["models"])
    t0 = time.monotonic()
    report_path, report_note = _write_report(run_dirs, out / "report.html", bootstrap, seed)
    timings["report"] = time.monotonic() - t0
    timings["total"] = time.monotonic() - t_start

    summary = {
        "out": str(out),
        "dataset": str(dataset),
        "runs": [str(p) for p in run_dirs],
        "leaderboard": leaderboard(result),
        "ranking_ok": ok,
        "ranking": why,
        "report": str(report_path) if report_path else None,
        "report_note": report_note,
        "produce_errors": produce_errors,
        "eval_failures": {k: _failed_count(v) for k, v in eval_summaries.items()},
        "seconds": {k: round(v, 2) for k, v in timings.items()},
    }
    atomic_write_json(out / "demo_summary.json", summary)
    return summary


def _ensure_dataset(out: Path, n_cases: int, progress) -> None:
    """Build `out`/dataset unless this version already built it from the annotations it ships."""
    dataset = out / "dataset"
    if _dataset_current(dataset):
        return
    # Rollouts and runs of an older demo dataset would be silently reused by resume: start clean.
    for stale in (dataset, out / "rollouts", out / "runs"):
        if stale.exists():
            shutil.rmtree(stale)
    with progress() as bar:
        task = bar.add_task("annotating demo cases", total=n_cases)
        build_demo_dataset(dataset, on_case=lambda cid: bar.advance(task))
    atomic_write_json(dataset / "demo_spec.json", _demo_stamp())


def _render_rollouts(dataset: Path, rollouts: Path, models: tuple[str, ...], seed: int, n_cases: int,
                     progress) -> dict:
    """Every reference model's rollouts under `rollouts`/<model>; returns the producers' errors by model."""
    produce_errors = {}
    with progress() as bar:
        task = bar.add_task("rendering rollouts", total=n_cases * len(models))
        for name in models:
            s = produce_dataset(dataset, get_producer(name), rollouts / name, seed=seed,
                                on_case=lambda cid, rec: bar.advance(task))
            if s["failed"]:
                produce_errors[name] = s["errors"]
    return produce_errors


def _evaluate(dataset: Path, rollouts: Path, runs: Path, models: tuple[str, ...], workers: int,
              n_cases: int, progress) -> dict:
    """`opis eval` (classical backend) of every model's rollouts into `runs`/<model>; returns the run summaries."""
    eval_summaries = {}
    with progress() as bar:
        task = bar.add_task("evaluating (classical)", total=n_cases * len(models))
        for k, name in enumerate(models):
            bar.update(task, description=f"evaluating {name}", completed=k * n_cases)

            def step(done: int, total: int, _base: int = k * n_cases) -> None:
                bar.update(task, completed=_base + done)

            # force: the demo owns these folders; items made under another evaluator config are
            # redone instead of refusing to resume, and items that are still valid are kept.
            eval_summaries[name] = run_eval(dataset, rollouts / name, name, runs / name, backend="classical",
                                            device="cpu", workers=workers, progress=step, force=True)
        bar.update(task, description="evaluating (classical)", completed=n_cases * len(models))
    return eval_summaries


def _failed_count(summary: Any) -> int | None:
    if isinstance(summary, dict):
        for key in ("failed", "n_failed"):
            if isinstance(summary.get(key), int):
                return summary[key]
            if isinstance(summary.get(key), list):
                return len(summary[key])
    return None


def _write_report(run_dirs: list[Path], path: Path, bootstrap: int, seed: int) -> tuple[Path | None, str]:
    try:
        from worldeval.report import build_report  # here: it loads matplotlib, too slow for `--help`
    except ImportError as exc:
        return None, f"report module not available ({exc}); run `worldeval report` on the run folders later"
    try:
        return build_report(run_dirs, path, bootstrap=bootstrap, seed=seed, title="worldeval demo"), "ok"
    except Exception as exc:  # the leaderboard is already computed; a report failure must not hide it
        return None, f"report failed: {type(exc).__name__}: {exc}"


def leaderboard(result: dict) -> list[dict]:
    """One row per model, best OPIS first: each component with its coverage (C_P, C_I, C_S in %)."""
    rows = []
    for name, m in result["models"].items():
        rows.append({"model": name, "P": m.get("P"), "I": m.get("I"), "S": m.get("S"), **coverage(m),
                     "OPIS": m.get("OPIS"), "OPIS_ci": m.get("OPIS_ci")})
    rows.sort(key=lambda r: -1e9 if r["OPIS"] is None else -r["OPIS"])
    return rows


def print_leaderboard(summary: dict, console) -> None:
    from rich.table import Table

    def f(x: Any) -> str:
        return "-" if x is None else f"{x:.1f}"

    t = Table(title="worldeval demo: OPIS leaderboard (classical backend)")
    t.add_column("#", justify="right", no_wrap=True)
    t.add_column("Model", no_wrap=True)
    for c in ("P", "C_P%", "I", "C_I%", "S", "C_S%", "OPIS", "95% CI"):
        t.add_column(c, justify="right", no_wrap=True)
    for k, r in enumerate(summary["leaderboard"], 1):
        ci = r["OPIS_ci"]
        t.add_row(str(k), r["model"], f(r["P"]), f(r.get("C_P")), f(r["I"]), f(r.get("C_I")), f(r["S"]), f(r["C_S"]),
                  f(r["OPIS"]), f"{ci[0]:.1f}-{ci[1]:.1f}" if ci else "-")
    console.print(t)
    console.print(LEADERBOARD_NOTE)
    mark = "[green]ok[/green]" if summary["ranking_ok"] else "[red]UNEXPECTED[/red]"
    console.print(f"ranking check: {mark} ({summary['ranking']})")
    console.print(f"outputs: {summary['out']} (dataset/, rollouts/, runs/, scores.json, demo_summary.json)")
    if summary["report"]:
        console.print(f"report: {summary['report']}")
    else:
        console.print(f"report: not written ({summary['report_note']})")
    s = summary["seconds"]
    console.print(f"time: {s['total']:.0f} s (dataset {s['dataset']:.0f}, rollouts {s['rollouts']:.0f}, "
                  f"eval {s['evaluate']:.0f}, score {s['score']:.0f}, report {s['report']:.0f})")


def demo_cmd(
    out: Path = typer.Option(Path("worldeval-demo"), "--out", help="Folder for the dataset, rollouts, runs and report."),
    bootstrap: int = typer.Option(ScoreConfig.bootstrap, "--bootstrap", help="Bootstrap replicates for the CIs (0 = none)."),
    seed: int = typer.Option(0, "--seed", help="Seed of rollouts and bootstrap."),
    workers: int = typer.Option(
        0, "--workers", help="Evaluation worker processes (0: in this process, sharing one loaded backend)."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bars; only the leaderboard."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON (no tables or progress)."),
) -> None:
    """Run OPIS end to end on a small offline demo benchmark and print the leaderboard."""
    from rich.console import Console

    summary = run_demo(out, bootstrap=bootstrap, seed=seed, workers=workers, quiet=quiet or as_json,
                       console=Console(stderr=True))
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
    else:
        print_leaderboard(summary, Console())
    if not summary["ranking_ok"]:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add `demo` to the top-level command."""
    app.command("demo", cls=FlagsCommand)(demo_cmd)
