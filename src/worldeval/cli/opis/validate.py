"""`worldeval opis validate` and `worldeval opis build-coco`."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from worldeval.errors import CaseError
from worldeval.opis.cases.coco import build_coco_dataset
# The options' defaults are the self-check's own configs, so the command cannot drift from the Python API.
from worldeval.opis.checks.synth import CAMERA_PATHS, REMOVAL_FILLS, PanTrajectory, SynthConfig, camera_path
from worldeval.opis.checks import validate as self_check
from worldeval.opis.checks.validate import ValidateConfig, render_table
from worldeval.opis.checks.validate_real import render_clip_table, run_validate_clips


def validate_cmd(
    dataset: Path = typer.Option(None, "--dataset", help="OPIS dataset folder (cases per SPEC section 2)."),
    clips: list[Path] = typer.Option([], "--clip", help="A real clip folder (frames/*.jpg + per-frame masks/*.png, DAVIS layout); repeatable. Checked with interventions inside its ground-truth masks."),
    out: Path = typer.Option(Path("validate_out"), "--out", help="Output folder: rollouts, run folder, validate.json."),
    backend: str = typer.Option(ValidateConfig.backend, "--backend", help="Perception backend: classical | hf."),
    device: str = typer.Option(ValidateConfig.device, "--device", help="cpu | cuda"),
    workers: int = typer.Option(ValidateConfig.workers, "--workers", help="Evaluation worker processes."),
    executor: str = typer.Option(ValidateConfig.executor, "--executor", help="local | ray"),
    seconds: float = typer.Option(PanTrajectory.duration_s, "--seconds", help="Length of each synthetic rollout."),
    fps: float = typer.Option(PanTrajectory.fps, "--fps", help="Frame rate of the synthetic rollouts."),
    camera: str = typer.Option("cycle", "--camera", help="Camera path of the synthetic rollouts: pan | tilt | zoom | cycle (cases take pan, tilt, zoom in turn) | custom (--yaw/--pitch)."),
    yaw: float = typer.Option(PanTrajectory.yaw_deg, "--yaw", help="With --camera custom: peak camera turn to the right, degrees."),
    pitch: float = typer.Option(PanTrajectory.pitch_deg, "--pitch", help="With --camera custom: peak camera turn upwards, degrees."),
    target_policy: str = typer.Option(SynthConfig.target_policy, "--target-policy", help="How the edited object is picked: sized | largest | colourful."),
    removal_fill: str = typer.Option(SynthConfig.removal_fill, "--removal-fill", help="How `removed` paints the target away: telea | ns | blur | copy (texture from beside it, as a generative model paints background)."),
    plane_depth: bool = typer.Option(False, "--plane-depth", help="Give each case without geometry a flat depth (exact for the synthetic camera, which only turns and zooms), so static Structure is eq. 4 and a moved or resized object can show."),
    force: bool = typer.Option(False, "--force", help="Render the rollouts again and re-evaluate them all (use after changing the evaluator: its resume only tracks settings)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result JSON instead of the table."),
    strict: bool = typer.Option(False, "--strict", help="Exit with status 1 when a pass rate is below the requirement."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress lines (errors are still printed)."),
) -> None:
    """Metamorphic self-check of the evaluator on the dataset's own images."""
    from rich.console import Console

    if dataset is None and not clips:
        raise typer.BadParameter("give --dataset and/or --clip", param_hint="--dataset")
    check_synth_options(camera, target_policy, removal_fill, seconds, fps)
    traj = PanTrajectory(yaw_deg=yaw, pitch_deg=pitch, duration_s=seconds, fps=fps)
    if camera in CAMERA_PATHS:
        traj = camera_path(camera, traj)
    cfg = ValidateConfig(
        synth=SynthConfig(
            trajectory=traj,
            target_policy=target_policy,
            removal_fill=removal_fill,
            camera_cycle=tuple(CAMERA_PATHS) if camera == "cycle" else (),
        ),
        backend=backend,
        device=device,
        workers=workers,
        executor=executor,
        force=force,
        plane_depth=plane_depth,
    )
    err = Console(stderr=True)
    log = (lambda m: None) if quiet else (lambda m: err.print(m, markup=False, highlight=False))  # noqa: E731
    result, clip_result = None, None
    try:
        if dataset is not None:
            result = self_check.run_validate(dataset, out, cfg, log=log)  # looked up here: tests replace it
        if clips:
            clip_result = run_validate_clips(clips, out / "clips", backend=backend, workers=workers, force=force, log=log)
    except CaseError as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(2)
    if as_json:
        typer.echo(json.dumps(result if clip_result is None else {"photos": result, "clips": clip_result}, indent=2, default=str))
    else:
        if result is not None:
            Console(width=220).print(render_table(result))
            typer.echo(f"details: {out / 'validate.json'}")
        if clip_result is not None:
            Console(width=220).print(render_clip_table(clip_result))
            typer.echo(f"details: {out / 'clips' / 'validate_clips.json'}")
    ok = all(r is None or all(v["ok"] for v in r["pass_rates"].values()) for r in (result, clip_result))
    if strict and not ok:
        raise typer.Exit(1)


def build_coco_cmd(
    src: Path = typer.Option(..., "--src", help="The coco_multiobj folder (images/, instance_masks/, instances.json)."),
    out: Path = typer.Option(..., "--out", help="Where to write the OPIS dataset."),
) -> None:
    """Build one OPIS case per COCO photo of the coco_multiobj sample."""
    try:
        dirs = build_coco_dataset(src, out)
    except CaseError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    typer.echo(f"wrote {len(dirs)} cases to {out}")


def check_synth_options(camera: str, target_policy: str, removal_fill: str, seconds: float, fps: float) -> None:
    """The synthetic rollouts' options, each refused by name when it is not one the synthesis knows."""
    if camera not in (*CAMERA_PATHS, "cycle", "custom"):
        raise typer.BadParameter(f"choose {', '.join(CAMERA_PATHS)}, cycle or custom", param_hint="--camera")
    if target_policy not in ("sized", "largest", "colourful"):
        raise typer.BadParameter("choose sized, largest or colourful", param_hint="--target-policy")
    if removal_fill not in REMOVAL_FILLS:
        raise typer.BadParameter(f"choose {', '.join(REMOVAL_FILLS)}", param_hint="--removal-fill")
    if seconds <= 1.0 or fps <= 0:
        raise typer.BadParameter("rollouts must be longer than 1 s (the first second is never sampled)", param_hint="--seconds")


def register(app: typer.Typer) -> None:
    """Add `validate` and `build-coco` to the `opis` command group."""
    app.command("validate")(validate_cmd)
    app.command("build-coco")(build_coco_cmd)
