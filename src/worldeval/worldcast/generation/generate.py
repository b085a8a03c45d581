"""`worldeval worldcast generate`: produce one model's outputs in the SPEC section 4 layout.

Per case the harness builds the hint-free generation request
(`requests.generation_request`), optionally has an LLM plan the K states
(`plan.py`), asks the generator (`worldeval.generator`), checks that the
result reads as an output (`inputs/adapters.py`), and only then moves it
into `<out>/<case_id>/`:

| interface / mode | endpoint calls | files |
|---|---|---|
| grid | images API (edit with the references, else generate), 1 call | grid.png, grid.json |
| interleaved | Responses API with the image_generation tool, 1 call | step_k.png, plan.json |
| interleaved + plan-iterate | plan, then images API per state, conditioned on the previous state | step_k.png, plan.json |
| interleaved + agentic | plan-iterate plus a VLM inspection per state and regenerations, <= budget calls | + drafts/ |
| video | Videos API (create, poll, download) | video.mp4 |
| --command | any local program | whatever it writes, checked |

Every case also gets `generation.json` (the trace: request, plan, calls,
inspections, choices). Bookkeeping lives in `<out>/_generation/` (a name no
case id can take): `manifest.json`, per-case status records, `log.jsonl`,
the traces of failed cases. A rerun keeps finished cases and redoes failed or
missing ones; a case folder exists only for a case that finished.
"""

from __future__ import annotations

import re
import shlex
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from worldeval.commands import CommandTimeout, run_command
from worldeval.generator import BudgetExhausted, CallLedger, GenEndpoint, GenError
from worldeval.media import MediaError, probe_video, read_image
from worldeval.runs import (
    append_jsonl, atomic_write_bytes, atomic_write_json, atomic_write_text, base_manifest, check_resume, config_hash,
    fingerprint_dir, is_done, write_status,
)
from worldeval.worldcast.generation.plan import inspect_step, make_plan, step_prompt, with_plan
from worldeval.worldcast.generation.requests import INTERFACES, generation_request
from worldeval.worldcast.inputs.adapters import OutputError, read_plan, step_images
from worldeval.worldcast.inputs.cases import WorldCastCase, load_cases
from worldeval.worldcast.inputs.grid import layout_for

BOOKKEEPING = "_generation"
STATUS_MODEL = "generator"  # one outputs folder holds one generator's outputs


@dataclass
class GenerateOptions:
    interface: str
    endpoint: GenEndpoint | None = None
    enhancer: object | None = None  # JudgeClient writing the per-step plan
    inspector: object | None = None  # JudgeClient checking each state (agentic)
    plan_iterate: bool = False
    agentic: bool = False
    budget: str | None = None  # "2K" (K = the case's step count) or a number
    command: str | None = None
    command_timeout_s: float = 3600.0
    concurrency: int = 1

    @property
    def mode(self) -> str:
        if self.command:
            return "command"
        return "agentic" if self.agentic else "plan-iterate" if self.plan_iterate else "direct"

    def check(self) -> None:
        if self.interface not in INTERFACES:
            raise ValueError(f"--interface must be one of {', '.join(INTERFACES)}, not {self.interface!r}")
        if self.agentic and self.plan_iterate:
            raise ValueError("--agentic already plans and iterates; give --agentic or --plan-iterate, not both")
        if self.mode in ("agentic", "plan-iterate") and self.interface != "interleaved":
            raise ValueError(f"--{self.mode} makes one image per state; it needs --interface interleaved")
        if self.command and (self.agentic or self.plan_iterate):
            raise ValueError("--command runs your own program; it cannot be combined with --agentic or --plan-iterate")
        if self.command:
            check_command(self.command)
        if self.mode in ("agentic", "plan-iterate") and self.enhancer is None:
            raise ValueError(f"--{self.mode} needs a planning model")
        if self.agentic and (self.inspector is None or not self.budget):
            raise ValueError("--agentic needs an inspector model and --budget")
        if self.mode != "command" and self.endpoint is None:
            raise ValueError("no generation endpoint configured (--base-url/--gen-model) and no --command")
        if self.budget:
            if not self.agentic:
                raise ValueError("--budget limits the --agentic loop; the other modes make a fixed number of calls")
            parse_budget(self.budget, 1)

    def public(self) -> dict:
        return {
            "interface": self.interface, "mode": self.mode, "budget": self.budget, "command": self.command,
            "generator": self.endpoint.config.public() if self.endpoint else None,
            "enhancer": _model_of(self.enhancer), "inspector": _model_of(self.inspector),
        }

    def identity(self) -> dict:
        """What decides the outputs (hashed for resume); timeouts, retries and concurrency do not."""
        gen = self.endpoint.config if self.endpoint else None
        return {
            "interface": self.interface, "mode": self.mode, "budget": self.budget, "command": self.command,
            "generator": None if gen is None else {k: getattr(gen, k) for k in (
                "model", "base_url", "size", "quality", "video_seconds", "video_size")},
            "enhancer": _model_of(self.enhancer), "inspector": _model_of(self.inspector),
        }


COMMAND_FIELDS = ("case_dir", "out_dir", "request_file", "prompt_file", "case_id", "steps", "interface")


def check_command(command: str) -> None:
    """Every `{...}` of a --command must be a known placeholder (write `{{` and `}}` for literal braces)."""
    import string

    try:
        names = {f for _, f, _, _ in string.Formatter().parse(command) if f is not None}
    except ValueError as exc:
        raise ValueError(f"--command {command!r}: {exc} (write {{{{ and }}}} for literal braces)") from None
    unknown = sorted(names - set(COMMAND_FIELDS))
    if unknown:
        raise ValueError(f"--command has unknown placeholder(s) {unknown}; known: {', '.join(COMMAND_FIELDS)} "
                         "(write {{ and }} for literal braces)")


def _run_logged(cmd: str, log: Path, timeout_s: float) -> int:
    """Run a --command through the shell, its output in `log`; past `timeout_s` its whole process tree ends."""
    try:
        return run_command(cmd, shell=True, log=log, timeout_s=timeout_s).returncode
    except CommandTimeout:
        raise GenError(f"--command ran past {timeout_s:g} s and was stopped (log: {log})") from None


def _model_of(client) -> dict | None:
    return None if client is None else {"model": client.config.model, "base_url": client.config.base_url}


def parse_budget(text: str | int, steps: int) -> int:
    """`2K` -> 2 x steps, `8` -> 8 (the paper's agentic harness uses 2K image calls per case)."""
    m = re.fullmatch(r"\s*(\d+)\s*([kK])?\s*", str(text))
    if not m or int(m.group(1)) < 1:
        raise ValueError(f"--budget must be a number of calls or a multiple of the step count like 2K, not {text!r}")
    return int(m.group(1)) * (steps if m.group(2) else 1)


@dataclass
class GenerateResult:
    out: Path
    done: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    image_calls: int = 0
    elapsed_s: float = 0.0


class CaseJob:
    """One case's generation into a staging folder, with its trace."""

    def __init__(self, case: WorldCastCase, opts: GenerateOptions, stage: Path, book: Path):
        self.case, self.opts, self.stage, self.book = case, opts, stage, book
        self.request = generation_request(case, opts.interface)
        budget = parse_budget(opts.budget, case.steps) if opts.budget and opts.agentic else None
        if budget is not None and budget < case.steps:
            raise ValueError(f"--budget {opts.budget} gives {budget} calls, fewer than the {case.steps} states of {case.id}")
        self.ledger = CallLedger(budget)
        self.refs = [im.path for im in case.images]
        self.trace: dict = {
            "case_id": case.id, "interface": opts.interface, "mode": opts.mode, "request": self.request.to_json(),
            "plan": None, "steps": [], "inspections": [], "calls": self.ledger.calls, "budget": budget, "notes": [],
        }

    def run(self) -> None:
        if self.opts.enhancer is not None:
            plan = make_plan(self.opts.enhancer, self.case)
            self.trace["plan"] = plan
        {"command": self._command, "direct": self._direct, "plan-iterate": self._iterate,
         "agentic": self._iterate}[self.opts.mode]()
        check_output(self.stage, self.case, self.opts.interface)

    def _plan_steps(self) -> list[str] | None:
        return self.trace["plan"]["steps"] if self.trace["plan"] else None

    def _direct(self) -> None:
        ep, plan = self.opts.endpoint, self._plan_steps()
        prompt = with_plan(self.request.prompt, plan)
        self.trace["prompt_sent"] = prompt
        if self.opts.interface == "grid":
            png = ep.image(prompt, self.refs, self.ledger, "grid")
            atomic_write_bytes(self.stage / "grid.png", png)
            atomic_write_json(self.stage / "grid.json", {"layout": self.request.layout})
            if plan:
                atomic_write_json(self.stage / "plan.json", {"steps": plan, "source": "enhancer"})
        elif self.opts.interface == "interleaved":
            steps = ep.interleaved(prompt, self.refs, self.ledger, "interleaved sequence")
            if len(steps) != self.case.steps:  # kept as produced: a missing or extra state is for the judge to see
                self.trace["notes"].append(f"the generator returned {len(steps)} image(s) for {self.case.steps} states")
            for k, s in enumerate(steps, start=1):
                atomic_write_bytes(self.stage / f"step_{k}.png", s["image"])
            texts = [s["text"] for s in steps]
            if plan and not any(texts) and len(plan) == len(steps):
                texts, source = plan, "enhancer"
            else:
                source = "generator"
            atomic_write_json(self.stage / "plan.json", {"steps": texts, "source": source, "enhancer_plan": plan})
            self.trace["steps"] = [{"step": k, "text": t} for k, t in enumerate(texts, start=1)]
        else:
            if len(self.refs) > 1:
                self.trace["notes"].append(f"the Videos API takes one input reference; sent {self.case.images[0].rel}, "
                                           f"not the other {len(self.refs) - 1}")
            data = ep.video(prompt, self.refs[0] if self.refs else None, self.ledger, "video")
            atomic_write_bytes(self.stage / "video.mp4", data)
            if plan:
                atomic_write_json(self.stage / "plan.json", {"steps": plan, "source": "enhancer"})

    def _iterate(self) -> None:
        """Plan & Iterate (and the agentic loop on top): state k is conditioned on the chosen state k-1."""
        plan = self._plan_steps()
        previous: Path | None = None
        for k in range(1, len(plan) + 1):
            # Later states keep one call each, so regenerating an early state can never starve them.
            self.ledger.reserved = len(plan) - k
            chosen = self._agentic_state(k, plan, previous) if self.opts.agentic else self._one_state(k, plan, previous)
            shutil.copyfile(chosen, self.stage / f"step_{k}.png")
            previous = self.stage / f"step_{k}.png"
        atomic_write_json(self.stage / "plan.json", {"steps": plan, "source": "planner"})

    def _inputs(self, previous: Path | None) -> list[Path]:
        return [previous, *self.refs] if previous is not None else list(self.refs)

    def _one_state(self, k: int, plan: list[str], previous: Path | None, revision: str | None = None,
                   attempt: int = 1) -> Path:
        prompt = step_prompt(self.case, plan, k, revision)
        png = self.opts.endpoint.image(prompt, self._inputs(previous), self.ledger, f"state {k} attempt {attempt}")
        path = self.stage / "drafts" / f"step_{k}_try_{attempt}.png"
        atomic_write_bytes(path, png)
        self.trace["steps"].append({"step": k, "attempt": attempt, "prompt": prompt, "draft": f"drafts/{path.name}"})
        return path

    def _agentic_state(self, k: int, plan: list[str], previous: Path | None) -> Path:
        candidates: list[tuple[int, int, Path]] = []  # (inspector score, attempt, draft)
        revision, attempt = None, 0
        while True:
            attempt += 1
            try:
                draft = self._one_state(k, plan, previous, revision, attempt)
            except BudgetExhausted:
                break
            except GenError as exc:
                self.trace["notes"].append(f"state {k} attempt {attempt}: {exc}")
                continue  # the failed call was charged, so this loop ends when the budget does
            verdict = inspect_step(self.opts.inspector, self.case, plan, k, previous, draft)
            verdict.update(step=k, attempt=attempt, draft=f"drafts/{draft.name}")
            self.trace["inspections"].append(verdict)
            # An uninspectable draft is kept as is: spending budget on a guess would not be an inspection.
            score = verdict["score"] if verdict["ok"] else -1
            candidates.append((score, attempt, draft))
            if score == 2 or not verdict["ok"]:
                break
            revision = verdict.get("revised_prompt") or verdict.get("problems") or None
        if not candidates:
            raise GenError(f"state {k}: no image within the budget of {self.ledger.budget} call(s)")
        score, att, best = max(candidates, key=lambda c: (c[0], c[1]))
        self.trace.setdefault("choices", []).append({"step": k, "attempt": att, "inspector_score": score,
                                                     "candidates": len(candidates)})
        return best

    def _command(self) -> None:
        req_dir = self.book / "requests" / self.case.id
        request = {**self.request.to_json(), "images": [str(p) for p in self.refs],
                   "plan": self._plan_steps(), "prompt": with_plan(self.request.prompt, self._plan_steps())}
        atomic_write_json(req_dir / "request.json", request)
        atomic_write_text(req_dir / "prompt.txt", request["prompt"])
        values = {"case_dir": req_dir, "out_dir": self.stage, "request_file": req_dir / "request.json",
                  "prompt_file": req_dir / "prompt.txt", "case_id": self.case.id, "steps": self.case.steps,
                  "interface": self.opts.interface}
        cmd = self.opts.command.format_map({k: shlex.quote(str(v)) for k, v in values.items()})
        log = self.book / "logs" / f"{self.case.id}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        rc = _run_logged(cmd, log, self.opts.command_timeout_s)
        self.trace["command"] = {"argv": cmd, "returncode": rc, "log": str(log), "elapsed_s": round(time.monotonic() - t0, 3)}
        if rc != 0:
            raise GenError(f"--command exited with status {rc} (log: {log})")


class EndpointUnusable(RuntimeError):
    """The generation endpoint cannot be used at all (nothing listens, timeout, key refused): exit 3."""


_EXPECTED = {"interleaved": "step_1.png ... step_K.png", "grid": "grid.png", "video": "video.mp4"}


def _expect_files(case_dir: Path, case: WorldCastCase, interface: str) -> None:
    """A program that wrote the wrong file names hears what the interface expects, not a staging path."""
    wanted = {"grid": case_dir / "grid.png", "video": case_dir / "video.mp4"}.get(interface)
    has = (wanted.is_file() if wanted is not None
           else any(p.name.lower().startswith("step_") for p in case_dir.iterdir()))
    if has:
        return
    got = sorted(p.name for p in case_dir.iterdir() if p.is_file() and p.name not in ("request.json", "prompt.txt"))
    shown = _summarise_names(got)
    raise GenError(f"{case.id}: --interface {interface} expects {_EXPECTED[interface]}, got {shown or 'no files'}")


def _summarise_names(names: list[str]) -> str:
    steps = [n for n in names if n.lower().startswith("step_")]
    rest = [n for n in names if n not in steps]
    parts = ([f"step_*{Path(steps[0]).suffix}"] if len(steps) > 1 else steps) + rest
    return ", ".join(parts[:6]) + (", ..." if len(parts) > 6 else "")


def check_output(case_dir: Path, case: WorldCastCase, interface: str) -> None:
    """The staged output must read as the interface's layout (the same readers `worldcast judge` uses)."""
    _expect_files(case_dir, case, interface)
    try:
        if interface == "interleaved":
            steps = step_images(case_dir)
            if not steps:
                raise OutputError(case_dir, "no step_k images were produced")
            for p in steps:
                read_image(p)
            if (case_dir / "plan.json").is_file():
                read_plan(case_dir / "plan.json", len(steps))
        elif interface == "grid":
            read_image(case_dir / "grid.png")
            layout_for(case_dir, case.steps)
        else:
            info = probe_video(case_dir / "video.mp4")
            if info.num_frames < case.steps:
                raise OutputError(case_dir / "video.mp4", f"{info.num_frames} frames, fewer than {case.steps} states")
    except (MediaError, FileNotFoundError) as exc:
        raise OutputError(case_dir, f"generated output unreadable: {exc}") from None


def run_generate(dataset: str | Path, out: str | Path, opts: GenerateOptions, *, case_ids: list[str] | None = None,
                 force: bool = False, progress: Callable[[str], None] | None = None) -> GenerateResult:
    opts.check()
    t0 = time.monotonic()
    out, book = Path(out), Path(out) / BOOKKEEPING
    cases = load_cases(dataset)
    if case_ids:
        unknown = set(case_ids) - {c.id for c in cases}
        if unknown:
            raise ValueError(f"unknown case id(s): {sorted(unknown)}")
        cases = [c for c in cases if c.id in set(case_ids)]
    config = opts.public()
    chash, fp = config_hash(opts.identity()), fingerprint_dir(dataset)
    check_resume(book, config_hash=chash, dataset_fingerprint=fp, force=force)
    if opts.endpoint is not None and opts.mode != "command":
        try:
            opts.endpoint.preflight()
        except GenError as exc:
            raise EndpointUnusable(f"generation endpoint: {exc}") from None
    man = base_manifest("worldeval worldcast generate", {**config, "dataset": str(Path(dataset).resolve())})
    man.update(config_hash=chash, dataset_fingerprint=fp)
    atomic_write_json(book / "manifest.json", man)
    result, lock, say = GenerateResult(out), threading.Lock(), progress or (lambda s: None)
    todo = []
    for case in cases:
        if is_done(book, STATUS_MODEL, case.id, chash) and (out / case.id).is_dir():
            result.kept.append(case.id)
        else:
            todo.append(case)
    say(f"{len(todo)} case(s) to generate, {len(result.kept)} kept from earlier runs")

    def one(case: WorldCastCase) -> None:
        status, error, job = _generate_case(case, opts, out, book, chash)
        with lock:
            result.image_calls += job.ledger.used if job else 0
            if status == "done":
                result.done.append(case.id)
            else:
                result.failed[case.id] = error
        say(f"{case.id}: {status}{'' if status == 'done' else ': ' + error}")

    with ThreadPoolExecutor(max_workers=max(1, opts.concurrency)) as pool:
        list(pool.map(one, todo))
    result.elapsed_s = time.monotonic() - t0
    return result


def _generate_case(case, opts, out: Path, book: Path, chash: str) -> tuple[str, str | None, CaseJob | None]:
    stage = book / "staging" / case.id
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    t0, job, error = time.monotonic(), None, None
    try:
        job = CaseJob(case, opts, stage, book)
        job.run()
    except Exception as exc:  # endpoint, answer, layout or a bug: recorded, and the other cases go on
        error = f"{type(exc).__name__}: {exc}"
    elapsed = round(time.monotonic() - t0, 3)
    trace = dict(job.trace) if job else {"case_id": case.id}
    trace.update(status="failed" if error else "done", error=error, elapsed_s=elapsed,
                 image_calls=job.ledger.used if job else 0)
    final = out / case.id
    # A stale or partial folder must not pass for this config's output: only a finished case has one.
    shutil.rmtree(final, ignore_errors=True)
    if error is None:
        atomic_write_json(stage / "generation.json", trace)
        stage.rename(final)
        (book / "failed" / f"{case.id}.json").unlink(missing_ok=True)
    else:
        atomic_write_json(book / "failed" / f"{case.id}.json", trace)
        shutil.rmtree(stage, ignore_errors=True)
    write_status(book, STATUS_MODEL, case.id, "failed" if error else "done",
                 error={"message": error} if error else None, config_hash=chash, timings={"elapsed_s": elapsed},
                 image_calls=trace["image_calls"])
    append_jsonl(book / "log.jsonl", {"case_id": case.id, "status": trace["status"], "error": error,
                                      "image_calls": trace["image_calls"], "elapsed_s": elapsed,
                                      "finished_unix": time.time()})
    return trace["status"], error, job
