"""`worldeval opis build`, `opis source` and `opis cases-from-videos`: making OPIS cases at scale."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, List, Optional

import typer

from worldeval.cli.common import parse_options
from worldeval.errors import InputError
from worldeval.generator import GenConfig
from worldeval.judge import JudgeCache, JudgeClient, JudgeConfig
# `opis build`'s defaults are the build config's own, so the command cannot drift from the Python API.
from worldeval.opis.cases.build import BuildConfig, BuildError, build_dataset
from worldeval.opis.cases.from_videos import cases_from_videos
from worldeval.opis.cases.source import Gate, SourceConfig, SourceEndpoint, run_source


def vlm_transport() -> Any:
    """The judge transport for these commands; None: the OpenAI-compatible endpoint (tests script a mock here)."""
    return None


def vlm_client(out: Path, base_url: str | None, model: str | None, api_key: str | None, option: str = "--judge-model"):
    """A judge client with its answers cached under `out/.build`, so a rerun does not ask again."""
    try:
        config = JudgeConfig.resolve(base_url=base_url, model=model, api_key=api_key)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from exc
    (out / ".build").mkdir(parents=True, exist_ok=True)
    return JudgeClient(config, JudgeCache(out / ".build" / "vlm_cache.sqlite"), transport=vlm_transport())


def read_vocabulary(path: Path | None) -> list[str] | None:
    """One noun phrase per line, or a JSON list of strings."""
    if path is None:
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BuildError(path, "vocabulary", f"cannot read: {exc}") from exc
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BuildError(path, "vocabulary", f"invalid JSON: {exc}") from exc
        if not all(isinstance(v, str) for v in items):
            raise BuildError(path, "vocabulary", "a JSON vocabulary must be a list of strings")
    else:
        items = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    if not items:
        raise BuildError(path, "vocabulary", "no noun phrases in the file")
    return items


def _echo_summary(summary: dict, as_json: bool, what: str) -> None:
    if as_json:
        typer.echo(json.dumps(summary, indent=2, default=str))
        return
    typer.echo(f"{what}: {len(summary['accepted'])} accepted, {len(summary['rejected'])} rejected, "
               f"{len(summary['failed'])} failed, {len(summary['skipped'])} already done")
    for f in summary["failed"]:
        typer.echo(f"  failed {f.get('image')}: {f.get('file')}: {f.get('field')}: {f.get('reason')}", err=True)


def _config(backend, backend_option, device, vocabulary, min_objects, rounds, dedup_iou, kinematics, track, depth,
            domain, subcategory, duration, max_side, seed, review, box_format=BuildConfig.box_format, clean=False):
    return BuildConfig(backend=backend, backend_options=parse_options(backend_option), device=device,
                       vocabulary=read_vocabulary(vocabulary), min_objects=min_objects, rounds=rounds,
                       dedup_iou=dedup_iou, kinematics=parse_options(kinematics), track=parse_options(track),
                       depth=depth, domain=domain, subcategory=subcategory, duration_s=duration,
                       max_side=max_side or None, seed=seed, review=review, box_format=box_format,
                       vlm_clean=clean).check()


def build_cmd(
    images: Optional[Path] = typer.Argument(None, help="Folder of images (or of <id>/image.jpg folders), or a list file."),
    out: Path = typer.Option(..., "--out", help="Dataset folder to write (one case folder per accepted image)."),
    backend: str = typer.Option(BuildConfig.backend, "--backend", help="classical (GrabCut from VLM boxes), hf (SAM 3 rounds) or any registered backend / module:builder."),
    backend_option: List[str] = typer.Option([], "--backend-option", help="hf backend KEY=VALUE (sam3=DIR, dinov3=DIR, depth=DIR, ...)."),
    vocabulary: Optional[Path] = typer.Option(None, "--vocabulary", help="The source's own noun phrases (a line each, or a JSON list)."),
    review: bool = typer.Option(False, "--review", help="Write review/<case>.html (masks, crops, phrases, task) per case."),
    apply_review: Optional[Path] = typer.Option(None, "--apply-review", help="Apply accept/reject/edit decisions from this JSON file."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="VLM endpoint (OpenAI-compatible)."),
    judge_model: Optional[str] = typer.Option(None, "--judge-model", help="VLM model name."),
    api_key: Optional[str] = typer.Option(None, "--api-key", help="VLM API key (never written anywhere)."),
    min_objects: int = typer.Option(BuildConfig.min_objects, "--min-objects", help="Screening: fewest distinguishable objects an image needs."),
    rounds: int = typer.Option(BuildConfig.rounds, "--rounds", help="Concept-segmentation rounds (hf)."),
    dedup_iou: float = typer.Option(BuildConfig.dedup_iou, "--dedup-iou", help="Mask IoU at which a later instance is a duplicate."),
    kinematics: List[str] = typer.Option([], "--kinematics", help="PHRASE=rigid|articulated|deformable (overrides the VLM)."),
    track: List[str] = typer.Option([], "--track", help="PHRASE=static|dynamic (overrides the VLM)."),
    depth: Optional[str] = typer.Option(None, "--depth", help="'model': the backend's depth model; default: flat scaffold."),
    domain: str = typer.Option(BuildConfig.domain, "--domain"),
    subcategory: str = typer.Option(BuildConfig.subcategory, "--subcategory"),
    duration: float = typer.Option(BuildConfig.duration_s, "--duration", help="Camera task duration in seconds."),
    max_side: int = typer.Option(BuildConfig.max_side, "--max-side", help="Work at most this large (longest side)."),
    device: str = typer.Option(BuildConfig.device, "--device"),
    seed: int = typer.Option(BuildConfig.seed, "--seed"),
    workers: int = typer.Option(1, "--workers", help="Images built at once (threads sharing the VLM client)."),
    box_format: str = typer.Option(BuildConfig.box_format, "--box-format", help="How the VLM writes boxes: xywh, xyxy (pixels), "
                                                                 "xyxy-1000 or yxyx-1000 (0-1000 grid, e.g. Gemini)."),
    clean: bool = typer.Option(False, "--vlm-clean", help="After the rule-based phrase cleaning, a VLM pass (one request)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress lines."),
) -> None:
    """Build OPIS cases from images: VLM screening, phrase cleaning, segmentation, labels, task, geometry."""
    from worldeval.opis.cases.review import apply_review_file  # here: it loads matplotlib, too slow for `--help`

    try:
        if apply_review is not None:
            typer.echo(json.dumps(apply_review_file(out, apply_review), indent=2))
            return
        if images is None:
            raise BuildError("IMAGES", "images", "give a folder of images or a list file (or --apply-review FILE)")
        cfg = _config(backend, backend_option, device, vocabulary, min_objects, rounds, dedup_iou, kinematics, track,
                      depth, domain, subcategory, duration, max_side, seed, review, box_format, clean)
        client = vlm_client(out, base_url, judge_model, api_key)
        progress = None if as_json or quiet else (lambda name: typer.echo(f"building {name}...", err=True))
        summary = build_dataset(images, out, cfg, client, progress=progress, workers=workers)
    except InputError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    _echo_summary(summary, as_json, f"opis build -> {out}")
    if summary["failed"] and not (summary["accepted"] or summary["skipped"] or summary["rejected"]):
        raise typer.Exit(1)


def source_cmd(
    subcategory: str = typer.Option(..., "--subcategory", help="home_indoor, natural_outdoor, public_indoor or urban_outdoor."),
    count: int = typer.Option(..., "--count", help="How many images (variation indices) to request."),
    out: Path = typer.Option(..., "--out", help="Folder for accepted/, rejected/ and source_log.jsonl."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="OpenAI-compatible endpoint (images and review)."),
    gen_model: str = typer.Option(..., "--gen-model", help="Image generation model."),
    review_model: Optional[str] = typer.Option(None, "--review-model", help="Reviewing VLM."),
    api_key: Optional[str] = typer.Option(None, "--api-key", help="API key (never written anywhere)."),
    review_base_url: Optional[str] = typer.Option(None, "--review-base-url", help="Another endpoint for the review."),
    start: int = typer.Option(0, "--start", help="First variation index."),
    size: str = typer.Option("1536x1024", "--size", help="Requested image size."),
    quality: str = typer.Option("high", "--quality", help="Requested image quality."),
    min_instances: int = typer.Option(10, "--min-instances", help="Gate: fewest foreground instances."),
    min_quality: int = typer.Option(4, "--min-quality", help="Gate: lowest quality score (1-5)."),
    min_phrases: int = typer.Option(5, "--min-phrases", help="Gate: fewest usable noun phrases."),
    max_flags: int = typer.Option(0, "--max-flags", help="Gate: most quality flags allowed."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Generate candidate initial images from the scene template and keep those the VLM review gate passes."""
    key = api_key or os.environ.get("OPENAI_API_KEY") or None
    url = base_url or os.environ.get("OPENAI_BASE_URL") or None
    endpoint = SourceEndpoint(GenConfig(model=gen_model, base_url=url, api_key=key, size=size, quality=quality))
    client = vlm_client(out, review_base_url or url, review_model, key, option="--review-model")
    cfg = SourceConfig(subcategory=subcategory, count=count, start=start,
                       gate=Gate(min_instances, min_quality, min_phrases, max_flags))
    try:
        summary = run_source(out, cfg, endpoint, client)
    except InputError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
    else:
        typer.echo(f"opis source -> {out}: " + ", ".join(f"{len(v)} {k}" for k, v in summary.items()))


def cases_from_videos_cmd(
    videos: Path = typer.Argument(..., help="A video, a folder of videos, or a list file: the model outputs to evaluate."),
    out: Path = typer.Option(..., "--out", help="Dataset folder to write (one case per video, from its first frame)."),
    rollouts: Optional[Path] = typer.Option(None, "--rollouts", help="Rollouts folder to fill (default: DATASET_rollouts beside it)."),
    backend: str = typer.Option("classical", "--backend", help="classical (GrabCut from VLM boxes) or hf (SAM 3 rounds)."),
    backend_option: List[str] = typer.Option([], "--backend-option", help="hf backend KEY=VALUE."),
    vocabulary: Optional[Path] = typer.Option(None, "--vocabulary", help="Noun phrases to use (a line each, or a JSON list)."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="VLM endpoint (OpenAI-compatible)."),
    judge_model: Optional[str] = typer.Option(None, "--judge-model", help="VLM model name."),
    api_key: Optional[str] = typer.Option(None, "--api-key", help="VLM API key (never written anywhere)."),
    min_objects: int = typer.Option(1, "--min-objects", help="Screening: fewest objects a first frame needs."),
    box_format: str = typer.Option("xywh", "--box-format", help="How the VLM writes boxes (see opis build)."),
    kinematics: List[str] = typer.Option([], "--kinematics", help="PHRASE=rigid|articulated|deformable."),
    track: List[str] = typer.Option([], "--track", help="PHRASE=static|dynamic."),
    depth: Optional[str] = typer.Option(None, "--depth", help="'model': the backend's depth model; default: flat."),
    domain: str = typer.Option("real_world", "--domain"),
    subcategory: str = typer.Option("user_videos", "--subcategory"),
    device: str = typer.Option("cpu", "--device"),
    seed: int = typer.Option(0, "--seed"),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress lines."),
) -> None:
    """Make an OPIS dataset and rollouts folder from your own videos (frame 0 of each is I0)."""
    try:
        # The case keeps the video's own resolution (max_side 0), so I0 and the rollout frames agree.
        cfg = _config(backend, backend_option, device, vocabulary, min_objects, 3, 0.8, kinematics, track, depth,
                      domain, subcategory, 10.0, 0, seed, False, box_format)
        client = vlm_client(out, base_url, judge_model, api_key)
        progress = None if as_json or quiet else (lambda name: typer.echo(f"building {name}...", err=True))
        summary = cases_from_videos(videos, out, cfg, client, rollouts, progress=progress)
    except InputError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    _echo_summary(summary, as_json, f"opis cases-from-videos -> {out} (rollouts: {summary['rollouts']})")
    if summary["failed"] and not (summary["accepted"] or summary["skipped"]):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add `build`, `source` and `cases-from-videos` to the `opis` command group."""
    app.command("build")(build_cmd)
    app.command("source")(source_cmd)
    app.command("cases-from-videos")(cases_from_videos_cmd)
