"""`worldeval worldcast judge` and `worldcast keyframe-agreement`: a multimodal LLM judges outputs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import List, Optional

import typer

from worldeval.cli.common import fail
from worldeval.endpoints import api_key_from, base_url_from
from worldeval.errors import CaseError
from worldeval.judge import (CircuitOpen, JudgeCache, JudgeClient, JudgeConfig, JudgeScriptError, JudgeUnavailable,
                             ScriptTransport, load_judge_script, parse_judge_options, parse_temperature)
from worldeval.worldcast.analysis.keyframe_agreement import judge_config_of, keyframe_agreement
from worldeval.worldcast.inputs.cases import load_cases
from worldeval.worldcast.inputs.keyframes import AgenticSelector, ChangePointSelector
from worldeval.worldcast.judging.progress import RichJudgeProgress, endpoint_notice, failure_summary
from worldeval.worldcast.judging.run import check_inputs, run_judge


def _default_cache(run_dir: Path) -> Path:
    # Inside the run folder by default, so a run writes nothing elsewhere; point
    # WORLDEVAL_CACHE_DIR (or --cache) at a shared folder to reuse paid answers across runs.
    root = os.environ.get("WORLDEVAL_CACHE_DIR")
    return (Path(root) if root else Path(run_dir)) / "judge_cache.sqlite"


def _make_client(out: Path, cache: Optional[Path], no_cache: bool, **settings):
    """The judge client of one run; `settings` are JudgeConfig fields given on the command line."""
    try:
        cfg = JudgeConfig.resolve(**settings)
    except ValueError as exc:
        fail(str(exc))
    jc = None if no_cache else JudgeCache(cache or _default_cache(out))
    return JudgeClient(cfg, jc)


def _judge_settings(temperature: Optional[str], judge_option: List[str]) -> dict:
    out: dict = {}
    try:
        if temperature is not None:
            out["temperature"] = parse_temperature(temperature)
        if judge_option:
            out["options"] = parse_judge_options(judge_option)
    except ValueError as exc:
        fail(str(exc))
    return out


def _check_judge_inputs(dataset: Path, outputs: Path, case_ids: list[str]) -> None:
    try:
        cases = load_cases(dataset)
        check_inputs([c for c in cases if not case_ids or c.id in case_ids] or cases, outputs)
    except (CaseError, ValueError) as exc:
        fail(str(exc))


def _judge_client(out: Path, cache, no_cache: bool, transport: str, script: Optional[Path], **settings):
    """The run's judge client; `--judge-transport mock` answers from the script file, offline."""
    if transport not in ("openai", "mock"):
        fail(f"--judge-transport must be openai or mock, not {transport!r}")
    if transport == "openai":
        if script is not None:
            fail("--judge-script needs --judge-transport mock")
        return _make_client(out, cache, no_cache, **settings)

    if script is None:
        fail("--judge-transport mock needs --judge-script FILE (scripted answers; see docs/judge.md)")
    try:
        scripted = load_judge_script(script)
        settings["model"] = settings.get("model") or os.environ.get("WORLDEVAL_JUDGE_MODEL") or "scripted"
        cfg = JudgeConfig(**{k: v for k, v in settings.items() if v is not None and k not in ("base_url", "api_key")})
    except (JudgeScriptError, ValueError, TypeError) as exc:
        fail(str(exc))
    return JudgeClient(cfg, None if no_cache else JudgeCache(cache or _default_cache(out)),
                       transport=ScriptTransport(scripted))


def _selector(client, keyframes: str, samples: int, dense: int, budget):
    if keyframes == "agentic":
        return AgenticSelector(client, n_samples=samples, dense_samples=dense, max_requests=budget)
    return ChangePointSelector()


def _judge_and_report(client, job: dict, quiet: bool) -> None:
    """Run the judge with a progress bar; exit 0 all ok, 1 some items failed, 2 bad input, 3 judge unusable."""
    from rich.console import Console

    console = Console(stderr=True)
    model, out = job["model"], job["out_dir"]
    if not quiet:
        console.print(endpoint_notice(client.config, client.transport.name), markup=False, highlight=False)
    try:
        with RichJudgeProgress(console, f"judging {model}", disable=quiet) as bar:
            res = run_judge(client=client, events=bar, progress=None if quiet else _plan_lines(bar), **job)
    except CircuitOpen as exc:
        typer.echo(f"error: {exc}. What finished is kept in {out}; fix the judge (answer format, model, key) "
                   f"and rerun the same command to resume", err=True)
        raise typer.Exit(3)
    except JudgeUnavailable as exc:
        typer.echo(f"error: {exc}; nothing more was asked (rerun when the endpoint works)", err=True)
        raise typer.Exit(3)
    except (CaseError, ValueError) as exc:
        fail(str(exc))
    finally:
        if client.cache is not None:
            client.cache.close()
    t = client.totals
    typer.echo(
        f"{model}: asked {res.asked}, kept {res.kept}, ok {res.ok}, failed {res.failed} "
        f"({t['requests']} requests, {t['cache_hits']} cache hits, {t['total_tokens']} tokens) -> {out}"
    )
    if res.failed:
        typer.echo(failure_summary(model, res), err=True)
        typer.echo(f"{res.failed} item(s) failed; rerun the same command to retry only those.", err=True)
        raise typer.Exit(1)


def _plan_lines(bar):
    # Per-item lines come from the bar (failures only); keep run_judge's planning and adapter messages.
    def say(text: str) -> None:
        if ": ok " in text or ": failed:" in text or ": cannot adapt output: " in text:
            return  # the bar prints each failed item with its reason
        bar.say(text)
    return say


def keyframe_agreement_cmd(
    human: Path = typer.Option(..., "--human", help="Human keyframe choices: DIR/<annotator>/<case_id>.json (see docs/worldcast.md)."),
    run: Path = typer.Option(..., "--run", help="A `worldcast judge` run folder over video outputs."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="Judge endpoint (default: the run's, or OPENAI_BASE_URL)."),
    api_key: Optional[str] = typer.Option(None, "--api-key", help="API key (or OPENAI_API_KEY); never written anywhere."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write the run's answer cache."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of text."),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
) -> None:
    """Score human- and adapter-selected keyframes with the run's judge; Pearson r and per-case differences."""
    try:
        cfg, _ = judge_config_of(run, base_url_from(base_url), api_key_from(api_key))
    except (OSError, ValueError) as exc:
        fail(str(exc))
    client = JudgeClient(cfg, None if no_cache else JudgeCache(_default_cache(run)))
    try:
        res = keyframe_agreement(run, human, client, progress=None if quiet else (lambda s: typer.echo(s, err=True)))
    except (CaseError, ValueError, OSError) as exc:
        fail(str(exc))
    finally:
        if client.cache is not None:
            client.cache.close()
    if as_json:
        typer.echo(json.dumps(res, indent=2, sort_keys=True))
        return
    r = res["pearson_r"]
    typer.echo(f"Pearson r = {r:.4f} (p = {res['p_value']:.3g}) over {res['n_cases']} case(s)" if r is not None
               else f"Pearson r: - ({res['note']})")
    for row in res["cases"]:
        each = ", ".join(f"{a} {v:.1f}" for a, v in sorted(row["human_finals"].items()))
        typer.echo(f"  {row['case_id']}: adapter {row['adapter_final']:.1f}, human {row['human_final']:.1f} "
                   f"({each}), difference {row['difference']:+.1f}")
    for what, why in sorted(res["skipped"].items()):
        typer.echo(f"  skipped {what}: {why}", err=True)


def judge_cmd(
    dataset: Path = typer.Option(..., "--dataset", help="WorldCast dataset folder (holds cases.jsonl)."),
    outputs: Path = typer.Option(..., "--outputs", help="Folder with one sub-folder of outputs per case id."),
    model: str = typer.Option(..., "--model", help="Name of the evaluated generator (recorded with every judgment)."),
    out: Path = typer.Option(..., "--out", help="Run folder; rerunning on it resumes."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="OpenAI-compatible endpoint (or OPENAI_BASE_URL)."),
    judge_model: Optional[str] = typer.Option(None, "--judge-model", help="Judge model (or WORLDEVAL_JUDGE_MODEL)."),
    api_key: Optional[str] = typer.Option(None, "--api-key", help="API key (or OPENAI_API_KEY); never written anywhere."),
    concurrency: int = typer.Option(4, "--concurrency", min=1, help="Parallel judge requests."),
    timeout: float = typer.Option(180.0, "--timeout", help="Seconds per request before it counts as a timeout."),
    max_attempts: int = typer.Option(5, "--max-attempts", min=1, help="Attempts per item (retries on 429/5xx/timeouts/unparseable)."),
    backoff: float = typer.Option(1.0, "--backoff", help="First retry delay in seconds (doubles, with jitter)."),
    backoff_max: float = typer.Option(60.0, "--backoff-max", min=0, help="Longest wait between attempts, Retry-After included."),
    seed: int = typer.Option(0, "--seed", help="Sampling seed sent to servers that take one."),
    reasoning_effort: Optional[str] = typer.Option(None, "--reasoning-effort", metavar="[low|medium|high]", help="low, medium or high, for reasoning models (the paper: medium)."),
    temperature: Optional[str] = typer.Option(None, "--temperature", help="Sampling temperature (default 0; dropped for the run if the model refuses it; 'default' never sends one)."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", min=1, help="Answer length limit (sent as max_completion_tokens if the endpoint asks for it)."),
    judge_option: List[str] = typer.Option([], "--judge-option", help="Extra request body field KEY=VALUE (VALUE as JSON when it parses; repeatable)."),
    json_mode: bool = typer.Option(True, "--json-mode/--no-json-mode", help="Ask for a JSON response format."),
    structured: bool = typer.Option(True, "--structured/--no-structured", help="Ask for the answer's JSON schema (structured output) before plain JSON mode."),
    preflight: bool = typer.Option(True, "--preflight/--no-preflight", help="One small request first; a dead endpoint, a refused key or an unknown model stops the run at once."),
    image_max_side: int = typer.Option(1024, "--image-max-side", help="Downscale larger images before sending (0: never)."),
    cache: Optional[Path] = typer.Option(None, "--cache", help="SQLite answer cache (default RUN_DIR/judge_cache.sqlite, or $WORLDEVAL_CACHE_DIR)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write the answer cache."),
    step_accuracy: bool = typer.Option(False, "--step-accuracy", help="Also judge each step on its own (designated-step accuracy)."),
    step_scope: str = typer.Option("paper", "--step-scope", metavar="[paper|all]", help="Cases given step checks: paper (four-step cases without an endpoint reference image) or all."),
    keyframes: str = typer.Option("changepoint", "--keyframes", metavar="[changepoint|agentic]", help="Video keyframe selector: changepoint (no model) or agentic (asks the judge endpoint)."),
    keyframe_samples: int = typer.Option(16, "--keyframe-samples", min=2, help="Frames of the agentic selector's coarse pass."),
    keyframe_dense: int = typer.Option(8, "--keyframe-dense", min=2, help="Frames of each dense pass of the agentic selector."),
    keyframe_budget: Optional[int] = typer.Option(None, "--keyframe-budget", min=1, help="VLM requests per video for the agentic selector (default 1 + steps)."),
    case: List[str] = typer.Option([], "--case", help="Judge only these case ids (repeatable)."),
    judge_transport: str = typer.Option("openai", "--judge-transport", metavar="[openai|mock]", help="openai: an OpenAI-compatible endpoint; mock: scripted answers from --judge-script, offline."),
    judge_script: Optional[Path] = typer.Option(None, "--judge-script", help="JSON file of scripted answers for --judge-transport mock (see docs/judge.md)."),
    circuit_breaker: int = typer.Option(5, "--circuit-breaker", min=0, help="Stop (exit 3) when the first N judged items all fail the same way (0: never)."),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
) -> None:
    """Judge one model's outputs with a multimodal LLM and write judgments.jsonl + manifest.json."""
    if step_scope not in ("paper", "all"):
        fail(f"--step-scope must be paper or all, not {step_scope!r}")
    if keyframes not in ("changepoint", "agentic"):
        fail(f"--keyframes must be changepoint or agentic, not {keyframes!r}")
    if judge_transport != "mock" and not (judge_model or os.environ.get("WORLDEVAL_JUDGE_MODEL")):
        fail("no judge model: pass --judge-model or set WORLDEVAL_JUDGE_MODEL")
    _check_judge_inputs(dataset, outputs, list(case))  # before the cache file or the run folder exists
    client = _judge_client(
        out, cache, no_cache, judge_transport, judge_script, base_url=base_url, model=judge_model,
        api_key=api_key, concurrency=concurrency, timeout_s=timeout, max_attempts=max_attempts, seed=seed,
        json_mode=json_mode, backoff_base_s=backoff, backoff_max_s=backoff_max,
        image_max_side=image_max_side or None, reasoning_effort=reasoning_effort, max_tokens=max_tokens,
        structured=structured, preflight=preflight, **_judge_settings(temperature, judge_option))
    selector = _selector(client, keyframes, keyframe_samples, keyframe_dense, keyframe_budget)
    extra = {"cache": None if no_cache else str(cache or _default_cache(out)),
             "keyframes": {"selector": keyframes, "samples": keyframe_samples, "dense": keyframe_dense,
                           "budget": keyframe_budget}}
    _judge_and_report(client, dict(dataset=dataset, outputs=outputs, model=model, out_dir=out,
                                   step_accuracy=step_accuracy, step_scope=step_scope, keyframe_selector=selector,
                                   case_ids=list(case) or None, extra_config=extra, breaker=circuit_breaker),
                      quiet)


def register(app: typer.Typer) -> None:
    """Add `keyframe-agreement` and `judge` to the `worldcast` command group."""
    app.command("keyframe-agreement")(keyframe_agreement_cmd)
    app.command("judge")(judge_cmd)
