"""`worldeval opis eval`: evaluate a model's rollouts against an OPIS dataset."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import List, Optional

import typer
from pydantic import ValidationError

from worldeval.cli.common import FlagsCommand, parse_options
from worldeval.errors import CaseError
from worldeval.judge.client import JudgeConfig
from worldeval.opis.backends.registry import BackendNotFound, resolve
from worldeval.opis.perception.config import EvalConfig
from worldeval.opis.run import run_eval
from worldeval.runs import ResumeError


def _config(**fields) -> EvalConfig:
    try:
        return EvalConfig(**fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise typer.BadParameter(f"{'.'.join(map(str, err['loc'])) or 'config'}: {err['msg']}") from exc


# More cases than this with one warning code are printed as one line (all are in manifest.json).
WARNINGS_SHOWN = 3


def print_warnings(summary: dict) -> None:
    """The run's warnings on stderr: one line per case, or one per code when many cases share it."""
    by_code: dict[str, list[dict]] = {}
    for w in summary.get("warnings") or []:
        by_code.setdefault(w["code"], []).append(w)
    for code, ws in by_code.items():
        if len(ws) > WARNINGS_SHOWN:
            ids = [c for w in ws for c in (w.get("cases") or [w["case_id"]])]
            typer.echo(f"warning: {code} in {len(ids)} cases ({', '.join(ids[:WARNINGS_SHOWN])}, ...); "
                       f"{ws[0]['case_id']}: {ws[0]['message']} (every case: {summary['run_dir']}/manifest.json)", err=True)
            continue
        for w in ws:
            where = f"{w['case_id']}: " if w.get("case_id") is not None else ""  # a folded entry names its cases
            typer.echo(f"warning: {code}: {where}{w['message']}", err=True)


def eval_cmd(
    dataset: Path = typer.Option(..., "--dataset", help="OPIS dataset folder (case folders, optional dataset.json)."),
    rollouts: Path = typer.Option(..., "--rollouts", help="Folder of <case_id>.mp4 rollouts of one model."),
    model: str = typer.Option(..., "--model", help="Model name recorded in the archive."),
    out: Path = typer.Option(..., "--out", help="Run folder (created; rerunning resumes)."),
    backend: str = typer.Option("classical", "--backend", help="Perception backend: classical, hf, an installed worldeval.backends entry point, or module:builder (a file of your own)."),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda (hf backend)."),
    workers: int = typer.Option(1, "--workers", help="Worker processes (0: in-process)."),
    executor: str = typer.Option("local", "--executor", help="local (process pool) or ray."),
    address: Optional[str] = typer.Option(None, "--address", help="Ray cluster address (with --executor ray)."),
    backend_option: List[str] = typer.Option([], "--backend-option", help="Backend option KEY=VALUE (repeatable), e.g. sam3=/models/sam3."),
    max_side: Optional[int] = typer.Option(None, "--max-side", help="Decode frames at most this large."),
    propagation_stride: int = typer.Option(EvalConfig().propagation.stride, "--propagation-stride", help="Propagate I0's masks every k-th video frame (the protocol's 4; 8 is faster, docs/validation.md)."),
    max_frames: Optional[int] = typer.Option(None, "--max-frames", help="Keep only the first N sampled frames (the OPIS authors' evaluator: 64)."),
    first_frame: str = typer.Option(EvalConfig.model_fields["first_frame"].default, "--first-frame", help="First sample: round (SPEC: round(1 s x fps)) or at_or_after (the authors': the first frame at or after 1 s)."),
    no_propagation: bool = typer.Option(False, "--no-propagation", help="Turn the propagation stage off (the search alone)."),
    propagation_compensate: bool = typer.Option(False, "--propagation-compensate", help="Also search remembered frames where the background moved (camera pans faster than the window; off by default, docs/validation.md 'Fast motion')."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Frames per segmenter/embedder batch (hf: the backend option batch_size)."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="Judge endpoint for structural claims (OpenAI-compatible)."),
    judge_model: Optional[str] = typer.Option(None, "--judge-model", help="Judge model for structural claims."),
    api_key: Optional[str] = typer.Option(None, "--api-key", help="Judge API key (never written anywhere)."),
    force: bool = typer.Option(False, "--force", help="Resume a run folder made with another config or dataset."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Evaluate rollouts: per sampled frame, Presence/Identity/Structure measurements into RUN_DIR."""
    try:
        resolve(backend)
    except BackendNotFound as exc:
        raise typer.BadParameter(str(exc), param_hint="--backend") from exc
    if executor not in ("local", "ray"):
        raise typer.BadParameter(f"unknown executor {executor!r}; choose local or ray", param_hint="--executor")
    judge = None
    if judge_model or base_url or os.environ.get("WORLDEVAL_JUDGE_MODEL"):
        try:
            judge = JudgeConfig.resolve(base_url=base_url, model=judge_model, api_key=api_key)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--judge-model") from exc
    try:
        summary = run_eval(
            dataset, rollouts, model, out, backend=backend, device=device, workers=workers, executor=executor,
            address=address, force=force, judge=judge, config=_config(max_side=max_side, propagation={"enabled": not no_propagation, "stride": propagation_stride,
                                                                                                 "compensate": propagation_compensate},
                                                      max_frames=max_frames, first_frame=first_frame),
            backend_options={**parse_options(backend_option), **({"batch_size": batch_size} if batch_size else {})}, progress=None if quiet else True,
        )
    except (ResumeError, CaseError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    if as_json:
        typer.echo(json.dumps(summary, indent=2, default=str))
    else:
        typer.echo(
            f"{model}: {len(summary['done'])} evaluated, {len(summary['skipped'])} already done, "
            f"{len(summary['failed'])} failed -> {summary['run_dir']}"
        )
        for e in summary["failed"]:
            typer.echo(f"  failed {e['case_id']}: {e.get('file')}: {e.get('field')}: {e.get('message')}", err=True)
        print_warnings(summary)  # with --json they are in the printed object, as the failures are
    if summary["failed"]:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add `eval` to the `opis` command group."""
    app.command("eval", cls=FlagsCommand)(eval_cmd)
