"""`worldeval worldcast generate`: a model's outputs for a dataset, in the layout `worldcast judge` reads."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional
from urllib.parse import urlsplit

import typer

from worldeval.cli.common import fail
from worldeval.endpoints import api_key_from, base_url_from
from worldeval.errors import CaseError
from worldeval.generator import GenConfig, GenEndpoint
from worldeval.judge import JudgeClient, JudgeConfig
from worldeval.runs import ResumeError
from worldeval.worldcast.generation.generate import EndpointUnusable, GenerateOptions, run_generate


def _host(base_url: Optional[str]) -> str:
    """The endpoint as a user should see it: scheme, host and port only (never a key or a path's secret)."""
    if not base_url:
        return "api.openai.com (the openai SDK default: neither --base-url nor OPENAI_BASE_URL is set)"
    p = urlsplit(base_url)
    return f"{p.scheme}://{p.hostname}{':' + str(p.port) if p.port else ''}" if p.hostname else base_url


def _llm_client(model: str, base_url, api_key, timeout: float, max_attempts: int, backoff: float, concurrency: int):
    # Planning and inspection answers steer one generation run; caching them would replay a stale plan.
    cfg = JudgeConfig(model=model, base_url=base_url, api_key=api_key, timeout_s=timeout, max_attempts=max_attempts,
                      backoff_base_s=backoff, concurrency=concurrency)
    return JudgeClient(cfg, None)


def generate_cmd(
    dataset: Path = typer.Option(..., "--dataset", help="WorldCast dataset folder (holds cases.jsonl)."),
    interface: str = typer.Option(..., "--interface", metavar="[interleaved|grid|video]", help="interleaved, grid or video."),
    out: Path = typer.Option(..., "--out", help="Outputs folder (one sub-folder per case); rerunning resumes."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="OpenAI-compatible endpoint (or OPENAI_BASE_URL)."),
    gen_model: Optional[str] = typer.Option(None, "--gen-model", help="Image or video generation model."),
    api_key: Optional[str] = typer.Option(None, "--api-key", help="API key (or OPENAI_API_KEY); never written anywhere."),
    enhancer: Optional[str] = typer.Option(None, "--enhancer", help="LLM that first rewrites the request into a per-state plan."),
    llm_base_url: Optional[str] = typer.Option(None, "--llm-base-url", help="Endpoint of the enhancer/inspector (default --base-url)."),
    plan_iterate: bool = typer.Option(False, "--plan-iterate", help="Plan the states, then generate each from the previous one."),
    agentic: bool = typer.Option(False, "--agentic", help="Plan & Iterate with a VLM inspecting each state and regenerating within --budget."),
    budget: Optional[str] = typer.Option(None, "--budget", help="Image calls per case for --agentic: a number or e.g. 2K (2 x steps)."),
    inspector: Optional[str] = typer.Option(None, "--inspector", help="VLM inspecting states (default: --enhancer, else --gen-model)."),
    command: Optional[str] = typer.Option(None, "--command", help="Run a local model instead: a shell command with {case_dir} {out_dir} {prompt_file} {request_file} {case_id} {steps} {interface}."),
    command_timeout: float = typer.Option(3600.0, "--command-timeout", help="Seconds per case for --command."),
    size: Optional[str] = typer.Option(None, "--size", help="Image size sent to the images API (default: the server's)."),
    quality: Optional[str] = typer.Option(None, "--quality", help="Image quality sent to the images API."),
    video_seconds: Optional[str] = typer.Option(None, "--video-seconds", help="Clip length sent to the Videos API."),
    video_size: Optional[str] = typer.Option(None, "--video-size", help="Resolution sent to the Videos API."),
    timeout: float = typer.Option(600.0, "--timeout", help="Seconds per request."),
    max_attempts: int = typer.Option(3, "--max-attempts", min=1, help="Attempts per call (each counts against --budget)."),
    backoff: float = typer.Option(2.0, "--backoff", help="First retry delay in seconds (doubles, with jitter)."),
    poll: float = typer.Option(5.0, "--poll", help="Seconds between Videos API status checks."),
    concurrency: int = typer.Option(1, "--concurrency", min=1, help="Cases generated in parallel."),
    case: List[str] = typer.Option([], "--case", help="Generate only these case ids (repeatable)."),
    force: bool = typer.Option(False, "--force", help="Resume a folder made with another config (its cases are redone)."),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
) -> None:
    """Generate one model's outputs for a dataset in the layout `worldcast judge` reads."""
    base_url, api_key = base_url_from(base_url), api_key_from(api_key)
    endpoint = None
    if gen_model:
        endpoint = GenEndpoint(GenConfig(
            model=gen_model, base_url=base_url, api_key=api_key, timeout_s=timeout, max_attempts=max_attempts,
            backoff_base_s=backoff, size=size, quality=quality, video_seconds=video_seconds,
            video_size=video_size, poll_interval_s=poll))
    llm = lambda m: _llm_client(m, llm_base_url or base_url, api_key, timeout, max_attempts, backoff, concurrency)
    planner = enhancer or (gen_model if (plan_iterate or agentic) else None)
    checker = inspector or enhancer or gen_model
    opts = GenerateOptions(
        interface=interface, endpoint=endpoint, enhancer=llm(planner) if planner else None,
        inspector=llm(checker) if agentic and checker else None, plan_iterate=plan_iterate, agentic=agentic,
        budget=budget, command=command, command_timeout_s=command_timeout, concurrency=concurrency,
    )
    if endpoint is not None and not quiet:
        typer.echo(f"generation endpoint: {_host(base_url)}, model {gen_model!r}", err=True)
    try:
        res = run_generate(dataset, out, opts, case_ids=list(case) or None, force=force,
                           progress=None if quiet else (lambda s: typer.echo(s, err=True)))
    except EndpointUnusable as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(3)
    except (CaseError, ResumeError, ValueError) as exc:
        fail(str(exc))
    typer.echo(f"generated {len(res.done)}, kept {len(res.kept)}, failed {len(res.failed)} "
               f"({res.image_calls} generation calls) -> {out}")
    for cid, err in sorted(res.failed.items()):
        typer.echo(f"  {cid}: {err}", err=True)
    if res.failed:
        typer.echo(f"{len(res.failed)} case(s) failed; rerun the same command to retry only those.", err=True)
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add `generate` to the `worldcast` command group."""
    app.command("generate")(generate_cmd)
