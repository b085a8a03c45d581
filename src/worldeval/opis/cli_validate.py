"""`worldeval opis validate` and `worldeval opis build-coco`."""

from __future__ import annotations

import json
from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to `app`."""

    @app.command("validate")
    def validate_cmd(
        dataset: Path = typer.Option(..., "--dataset", help="OPIS dataset folder (cases per SPEC section 2)."),
        out: Path = typer.Option(Path("validate_out"), "--out", help="Output folder: rollouts, run folder, validate.json."),
        backend: str = typer.Option("classical", "--backend", help="Perception backend: classical | hf."),
        device: str = typer.Option("cpu", "--device", help="cpu | cuda"),
        workers: int = typer.Option(1, "--workers", help="Evaluation worker processes."),
        executor: str = typer.Option("local", "--executor", help="local | ray"),
        seconds: float = typer.Option(5.0, "--seconds", help="Length of each synthetic rollout."),
        fps: float = typer.Option(24.0, "--fps", help="Frame rate of the synthetic rollouts."),
        yaw: float = typer.Option(12.0, "--yaw", help="Peak camera turn to the right, degrees."),
        pitch: float = typer.Option(3.0, "--pitch", help="Peak camera turn upwards, degrees."),
        target_policy: str = typer.Option("sized", "--target-policy", help="How the edited object is picked: sized | largest | colourful."),
        force: bool = typer.Option(False, "--force", help="Render the rollouts again and re-evaluate them all (use after changing the evaluator: its resume only tracks settings)."),
        as_json: bool = typer.Option(False, "--json", help="Print the result JSON instead of the table."),
        strict: bool = typer.Option(False, "--strict", help="Exit with status 1 when a pass rate is below the requirement."),
    ) -> None:
        """Metamorphic self-check of the evaluator on the dataset's own images."""
        from rich.console import Console

        from worldeval.opis.case import CaseError
        from worldeval.opis.synth import PanTrajectory, SynthConfig
        from worldeval.opis.validate import ValidateConfig, render_table, run_validate

        if target_policy not in ("sized", "largest", "colourful"):
            raise typer.BadParameter("choose sized, largest or colourful", param_hint="--target-policy")
        if seconds <= 1.0 or fps <= 0:
            raise typer.BadParameter("rollouts must be longer than 1 s (the first second is never sampled)", param_hint="--seconds")
        cfg = ValidateConfig(
            synth=SynthConfig(
                trajectory=PanTrajectory(yaw_deg=yaw, pitch_deg=pitch, duration_s=seconds, fps=fps),
                target_policy=target_policy,
            ),
            backend=backend,
            device=device,
            workers=workers,
            executor=executor,
            force=force,
        )
        err = Console(stderr=True)
        try:
            result = run_validate(dataset, out, cfg, log=lambda m: err.print(m, markup=False, highlight=False))
        except CaseError as exc:
            err.print(f"error: {exc}", markup=False)
            raise typer.Exit(2)
        if as_json:
            typer.echo(json.dumps(result, indent=2, default=str))
        else:
            Console(width=220).print(render_table(result))
            typer.echo(f"details: {out / 'validate.json'}")
        if strict and not result["all_ok"]:
            raise typer.Exit(1)

    @app.command("build-coco")
    def build_coco_cmd(
        src: Path = typer.Option(..., "--src", help="The coco_multiobj folder (images/, instance_masks/, instances.json)."),
        out: Path = typer.Option(..., "--out", help="Where to write the OPIS dataset."),
    ) -> None:
        """Build one OPIS case per COCO photo of the coco_multiobj sample."""
        from worldeval.opis.case import CaseError
        from worldeval.opis.coco import build_coco_dataset

        try:
            dirs = build_coco_dataset(src, out)
        except CaseError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2)
        typer.echo(f"wrote {len(dirs)} cases to {out}")
