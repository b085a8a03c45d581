"""`worldeval worldcast ...` commands: judge, score, agreement, judges, repeats, prompts, keyframes, samples, generate,
keyframe-agreement."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import List, Optional

import typer

from worldeval.stats import BOOTSTRAP_REPLICATES


def _fail(msg: str) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(2)


def _default_cache(run_dir: Path) -> Path:
    # Inside the run folder by default, so a run writes nothing elsewhere; point
    # WORLDEVAL_CACHE_DIR (or --cache) at a shared folder to reuse paid answers across runs.
    root = os.environ.get("WORLDEVAL_CACHE_DIR")
    return (Path(root) if root else Path(run_dir)) / "judge_cache.sqlite"


def _make_client(out: Path, cache: Optional[Path], no_cache: bool, **settings):
    """The judge client of one run; `settings` are JudgeConfig fields given on the command line."""
    from worldeval.judge import JudgeCache, JudgeClient, JudgeConfig

    try:
        cfg = JudgeConfig.resolve(**settings)
    except ValueError as exc:
        _fail(str(exc))
    jc = None if no_cache else JudgeCache(cache or _default_cache(out))
    return JudgeClient(cfg, jc)


def _judge_settings(temperature: Optional[str], judge_option: List[str]) -> dict:
    from worldeval.judge import parse_judge_options, parse_temperature

    out: dict = {}
    try:
        if temperature is not None:
            out["temperature"] = parse_temperature(temperature)
        if judge_option:
            out["options"] = parse_judge_options(judge_option)
    except ValueError as exc:
        _fail(str(exc))
    return out


def _print_scores(res: dict, step_accuracy: bool) -> None:
    from worldeval.worldcast.scoring.tables import print_scores

    print_scores(res, step_accuracy)


def _check_judge_inputs(dataset: Path, outputs: Path, case_ids: list[str]) -> None:
    from worldeval.errors import CaseError
    from worldeval.worldcast.inputs.cases import load_cases
    from worldeval.worldcast.judging.run import check_inputs

    try:
        cases = load_cases(dataset)
        check_inputs([c for c in cases if not case_ids or c.id in case_ids] or cases, outputs)
    except (CaseError, ValueError) as exc:
        _fail(str(exc))


def _judge_client(out: Path, cache, no_cache: bool, transport: str, script: Optional[Path], **settings):
    """The run's judge client; `--judge-transport mock` answers from the script file, offline."""
    if transport not in ("openai", "mock"):
        _fail(f"--judge-transport must be openai or mock, not {transport!r}")
    if transport == "openai":
        if script is not None:
            _fail("--judge-script needs --judge-transport mock")
        return _make_client(out, cache, no_cache, **settings)
    from worldeval.judge import JudgeCache, JudgeClient, JudgeConfig, JudgeScriptError, ScriptTransport, load_judge_script

    if script is None:
        _fail("--judge-transport mock needs --judge-script FILE (scripted answers; see docs/judge.md)")
    try:
        scripted = load_judge_script(script)
        settings["model"] = settings.get("model") or os.environ.get("WORLDEVAL_JUDGE_MODEL") or "scripted"
        cfg = JudgeConfig(**{k: v for k, v in settings.items() if v is not None and k not in ("base_url", "api_key")})
    except (JudgeScriptError, ValueError, TypeError) as exc:
        _fail(str(exc))
    return JudgeClient(cfg, None if no_cache else JudgeCache(cache or _default_cache(out)),
                       transport=ScriptTransport(scripted))


def _selector(client, keyframes: str, samples: int, dense: int, budget):
    from worldeval.worldcast.inputs.keyframes import AgenticSelector, ChangePointSelector

    if keyframes == "agentic":
        return AgenticSelector(client, n_samples=samples, dense_samples=dense, max_requests=budget)
    return ChangePointSelector()


def _judge_and_report(client, job: dict, quiet: bool) -> None:
    """Run the judge with a progress bar; exit 0 all ok, 1 some items failed, 2 bad input, 3 judge unusable."""
    from rich.console import Console

    from worldeval.errors import CaseError
    from worldeval.judge import CircuitOpen, JudgeUnavailable
    from worldeval.worldcast.judging.progress import RichJudgeProgress, endpoint_notice, failure_summary
    from worldeval.worldcast.judging.run import run_judge

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
        _fail(str(exc))
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


def _demo_cmd(
    out: Path = typer.Option(Path("worldeval-worldcast-demo"), "--out", help="Folder for the run, scores.json and report.html."),
    bootstrap: int = typer.Option(BOOTSTRAP_REPLICATES, "--bootstrap", min=0, help="Case-bootstrap replicates for the CIs (0: none)."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress; only the leaderboard."),
) -> None:
    """WorldCast end to end on the packaged samples, offline: a scripted judge (mock transport), scores, report."""
    from rich.console import Console

    from worldeval.report import build_report
    from worldeval.worldcast.judging.progress import RichJudgeProgress
    from worldeval.worldcast.samples.demo import DEMO_SCRIPT, run_demo
    from worldeval.worldcast.scoring.scores import score_runs

    err = Console(stderr=True)
    if not quiet:
        err.print(f"judge: scripted answers (mock transport, worldcast/samples/{DEMO_SCRIPT.name}); nothing is sent "
                  "anywhere and no model judges these outputs", markup=False, highlight=False)
    with RichJudgeProgress(err, "judging", disable=quiet) as bar:
        def events_for(model: str):
            bar.label = f"judging {model}"
            return bar

        summary = run_demo(out, build_report, bootstrap=bootstrap, seed=seed, events_for=events_for)
    for model, j in summary["judged"].items():
        if j["failed"] and not quiet:
            err.print(f"{model}: {j['failed']} item(s) failed as the demo intends:", markup=False, highlight=False)
            for line in j["reasons"]:
                err.print(f"  {line}", markup=False, highlight=False)
    _print_scores(score_runs([Path(summary["run"])], bootstrap=bootstrap, seed=seed), False)
    typer.echo(f"report: {summary['report']}  (scores: {summary['scores']}; {summary['seconds']:.1f} s)")


def _judge_cmd(
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
        _fail(f"--step-scope must be paper or all, not {step_scope!r}")
    if keyframes not in ("changepoint", "agentic"):
        _fail(f"--keyframes must be changepoint or agentic, not {keyframes!r}")
    if judge_transport != "mock" and not (judge_model or os.environ.get("WORLDEVAL_JUDGE_MODEL")):
        _fail("no judge model: pass --judge-model or set WORLDEVAL_JUDGE_MODEL")
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


def _score_cmd(
    run_dirs: List[Path] = typer.Argument(..., help="Run folders holding judgments.jsonl."),
    as_json: bool = typer.Option(False, "--json", help="Print the SPEC JSON (plus rank and *_ci keys) instead of a table."),
    step_accuracy: bool = typer.Option(False, "--step-accuracy", help="Add the per-step accuracy curve."),
    bootstrap: int = typer.Option(BOOTSTRAP_REPLICATES, "--bootstrap", min=0, help="Case-bootstrap replicates for the 95% CIs (0: none)."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
) -> None:
    """Final, TC, CP, VC with 95% CIs, per category, L3, L4 per model (failures excluded and counted)."""
    from worldeval.worldcast.scoring.scores import score_runs

    try:
        res = score_runs(run_dirs, step_accuracy=step_accuracy, bootstrap=bootstrap, seed=seed)
    except (FileNotFoundError, ValueError) as exc:
        _fail(str(exc))
    if as_json:
        typer.echo(json.dumps(res, indent=2, sort_keys=True))
        return
    _print_scores(res, step_accuracy)


def _agreement_cmd(
    run_dirs: List[Path] = typer.Argument(..., help="Run folders with the judged models."),
    votes: Path = typer.Option(..., "--votes", help="JSONL of human pairwise votes (see docs/worldcast.md)."),
) -> None:
    """Judge-vs-human win rates, Pearson r per dimension and winner agreement (paper section 4.4)."""
    from worldeval.worldcast.analysis.validity import agreement

    try:
        res = agreement(run_dirs, votes)
    except (FileNotFoundError, ValueError) as exc:
        _fail(str(exc))
    typer.echo(json.dumps(res, indent=2, sort_keys=True))


def _judges_cmd(run_dirs: List[Path] = typer.Argument(..., help="Run folders of the same outputs scored by different judge models.")) -> None:
    """Model ranking per judge model and the Kendall tau between judges (judge swap)."""
    from worldeval.worldcast.analysis.validity import judge_swap

    try:
        typer.echo(json.dumps(judge_swap(run_dirs), indent=2, sort_keys=True))
    except (FileNotFoundError, ValueError) as exc:
        _fail(str(exc))


def _repeats_cmd(
    run_dirs: List[Path] = typer.Argument(..., help="One run folder per repeated generation round."),
    ddof: int = typer.Option(1, "--ddof", help="1: sample std (default); 0: population std."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Mean ± std per category across repeated generation runs (one run folder per round)."""
    from worldeval.worldcast.analysis.validity import repeats

    try:
        res = repeats(run_dirs, ddof)
    except (FileNotFoundError, ValueError) as exc:
        _fail(str(exc))
    if as_json:
        typer.echo(json.dumps(res, indent=2, sort_keys=True))
        return
    from worldeval.worldcast.scoring.tables import output_console, print_grid, repeats_grid

    grid = repeats_grid(res, ddof)
    print_grid(output_console(grid), grid)


def _prompts_cmd(
    interface: str = typer.Option(..., "--interface", metavar="[grid|interleaved|video]", help="grid, interleaved or video."),
    dataset: Optional[Path] = typer.Option(None, "--dataset", help="Dataset folder (default: the packaged samples)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write JSONL here instead of stdout."),
) -> None:
    """Write each case's generation request for one output interface (hints are never included)."""
    from worldeval.errors import CaseError
    from worldeval.worldcast.generation.requests import INTERFACES, generation_request
    from worldeval.worldcast.inputs.cases import load_cases
    from worldeval.worldcast.samples import sample_dataset

    if interface not in INTERFACES:
        _fail(f"--interface must be one of {', '.join(INTERFACES)}")
    try:
        cases = load_cases(dataset or sample_dataset())
    except CaseError as exc:
        _fail(str(exc))
    lines = [json.dumps(generation_request(c, interface).to_json(), ensure_ascii=False) for c in cases]
    text = "\n".join(lines) + "\n"
    if out:
        from worldeval.runs import atomic_write_text

        atomic_write_text(out, text)
        typer.echo(f"{len(lines)} requests -> {out}", err=True)
    else:
        typer.echo(text, nl=False)


def _keyframes_cmd(
    video: Path = typer.Argument(..., help="A generated video."),
    steps: int = typer.Option(..., "--steps", min=1, help="Number of keyframes (requested states)."),
    out: Path = typer.Option(..., "--out", help="Folder for step_k.jpg and selection.json."),
) -> None:
    """Pick K keyframes from a video with the model-free change-point selector."""
    from worldeval.media import MediaError
    from worldeval.worldcast.inputs.keyframes import ChangePointSelector, KeyframeError, write_keyframes

    try:
        sel = ChangePointSelector().select(video, steps)
        write_keyframes(sel, out)
    except (KeyframeError, MediaError) as exc:
        _fail(str(exc))
    for s in sel.steps:
        typer.echo(f"step {s['step']}: t={s['timestamp_seconds']:.3f}s frame {s['frame_index']}")


def _samples_cmd(
    out: Optional[Path] = typer.Option(None, "--out", help="Copy the packaged sample dataset and outputs here."),
) -> None:
    """Show (or copy) the packaged WorldCast sample cases and their correct/shuffled outputs."""
    import shutil

    from worldeval.worldcast.samples import sample_dataset, sample_outputs, samples_root

    if out:
        shutil.copytree(samples_root(), out, dirs_exist_ok=True)
        typer.echo(f"copied samples to {out}")
    else:
        typer.echo(f"dataset: {sample_dataset()}")
        for kind in ("correct", "shuffled"):
            typer.echo(f"outputs ({kind}): {sample_outputs(kind)}")


def _host(base_url: Optional[str]) -> str:
    """The endpoint as a user should see it: scheme, host and port only (never a key or a path's secret)."""
    if not base_url:
        return "api.openai.com (the openai SDK default: neither --base-url nor OPENAI_BASE_URL is set)"
    from urllib.parse import urlsplit

    p = urlsplit(base_url)
    return f"{p.scheme}://{p.hostname}{':' + str(p.port) if p.port else ''}" if p.hostname else base_url


def _llm_client(model: str, base_url, api_key, timeout: float, max_attempts: int, backoff: float, concurrency: int):
    from worldeval.judge import JudgeClient, JudgeConfig

    # Planning and inspection answers steer one generation run; caching them would replay a stale plan.
    cfg = JudgeConfig(model=model, base_url=base_url, api_key=api_key, timeout_s=timeout, max_attempts=max_attempts,
                      backoff_base_s=backoff, concurrency=concurrency)
    return JudgeClient(cfg, None)


def _generate_cmd(
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
    from worldeval.endpoints import api_key_from, base_url_from
    from worldeval.errors import CaseError
    from worldeval.generator import GenConfig, GenEndpoint
    from worldeval.runs import ResumeError
    from worldeval.worldcast.generation.generate import EndpointUnusable, GenerateOptions, run_generate

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
        _fail(str(exc))
    typer.echo(f"generated {len(res.done)}, kept {len(res.kept)}, failed {len(res.failed)} "
               f"({res.image_calls} generation calls) -> {out}")
    for cid, err in sorted(res.failed.items()):
        typer.echo(f"  {cid}: {err}", err=True)
    if res.failed:
        typer.echo(f"{len(res.failed)} case(s) failed; rerun the same command to retry only those.", err=True)
        raise typer.Exit(1)


def _keyframe_agreement_cmd(
    human: Path = typer.Option(..., "--human", help="Human keyframe choices: DIR/<annotator>/<case_id>.json (see docs/worldcast.md)."),
    run: Path = typer.Option(..., "--run", help="A `worldcast judge` run folder over video outputs."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="Judge endpoint (default: the run's, or OPENAI_BASE_URL)."),
    api_key: Optional[str] = typer.Option(None, "--api-key", help="API key (or OPENAI_API_KEY); never written anywhere."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write the run's answer cache."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of text."),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
) -> None:
    """Score human- and adapter-selected keyframes with the run's judge; Pearson r and per-case differences."""
    from worldeval.endpoints import api_key_from, base_url_from
    from worldeval.errors import CaseError
    from worldeval.judge import JudgeCache, JudgeClient
    from worldeval.worldcast.analysis.keyframe_agreement import judge_config_of, keyframe_agreement

    try:
        cfg, _ = judge_config_of(run, base_url_from(base_url), api_key_from(api_key))
    except (OSError, ValueError) as exc:
        _fail(str(exc))
    client = JudgeClient(cfg, None if no_cache else JudgeCache(_default_cache(run)))
    try:
        res = keyframe_agreement(run, human, client, progress=None if quiet else (lambda s: typer.echo(s, err=True)))
    except (CaseError, ValueError, OSError) as exc:
        _fail(str(exc))
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


# In the order `worldeval worldcast --help` lists them.
_COMMANDS = (
    ("demo", _demo_cmd),
    ("generate", _generate_cmd),
    ("keyframe-agreement", _keyframe_agreement_cmd),
    ("judge", _judge_cmd),
    ("score", _score_cmd),
    ("agreement", _agreement_cmd),
    ("judges", _judges_cmd),
    ("repeats", _repeats_cmd),
    ("prompts", _prompts_cmd),
    ("keyframes", _keyframes_cmd),
    ("samples", _samples_cmd),
)


def register(app: typer.Typer) -> None:
    for name, command in _COMMANDS:
        app.command(name)(command)
