"""Running the WorldCast judge over one model's outputs, with resume.

One judgment item is (model, case, metric[, step]). Every item ends as one
line in `judgments.jsonl`: `status` "ok" with the parsed score, or "failed"
with the error (an unparseable answer after all retries, an endpoint error,
or an output that could not be adapted). Rerunning on the same folder keeps
the ok items and asks only the missing or failed ones again; the latest line
for an item wins. The record format lives in `records.py`, the metrics (what
each item asks and shows) in `metrics.py`.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from worldeval.judge.breaker import CircuitBreaker, CircuitOpen, failure_kind
from worldeval.judge.client import JudgeClient, JudgeImage, JudgeUnavailable
from worldeval.runs import JsonlAppender, atomic_write_json, base_manifest, fingerprint_dir
from worldeval.worldcast.inputs.adapters import StepSequence, adapt_output
from worldeval.worldcast.inputs.cases import WorldCastCase, load_cases
from worldeval.worldcast.inputs.errors import PathError
from worldeval.worldcast.inputs.keyframes import ChangePointSelector, KeyframeSelector
from worldeval.worldcast.judging.metrics import METRICS, PROMPT_VERSIONS, build_judge_content
from worldeval.worldcast.judging.records import (
    JUDGMENTS, answer_fields, append_judgment, failure_fields, judgment_base, latest_records, read_judgments,
)


def case_metrics(case: WorldCastCase, step_accuracy: bool, n_states: int | None = None,
                 step_scope: str = "paper") -> list[tuple[str, int | None]]:
    """The items a case needs: every case metric it is asked for (OC only when outcome_weight > 0), then,
    on request, the designated-step checks of each generated state for the cases in `step_scope`."""
    items: list[tuple[str, int | None]] = []
    for key, spec in METRICS.items():
        if spec.per_step and not step_accuracy:
            continue
        if not spec.asked_for(case, step_scope):
            continue
        if spec.per_step:
            items += [(key, k) for k in range(1, (n_states or case.steps) + 1)]
        else:
            items.append((key, None))
    return items


@dataclass
class JudgeRunResult:
    out_dir: Path
    asked: int = 0
    kept: int = 0
    ok: int = 0
    failed: int = 0
    adapter_failures: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    aborted: str | None = None  # why the run stopped early (the judge endpoint was unusable)
    reasons: Counter = field(default_factory=Counter)  # failure reason (paths blanked) -> items
    # reason -> the errors behind it as recorded, so a summary can show a real path, not a placeholder
    errors: dict[str, Counter] = field(default_factory=dict)

    def count(self, error: str | None) -> None:
        """Count one failed item under its reason."""
        reason = reason_of(error)
        self.reasons[reason] += 1
        self.errors.setdefault(reason, Counter())[error_text(error)] += 1

    def top_reasons(self, k: int | None = 3) -> list[tuple[str, int]]:
        return self.reasons.most_common(k)

    def reason_lines(self, k: int | None = 3) -> list[str]:
        """`Nx <error>` for the k most common reasons (None: all), each with one real error of that reason."""
        out = []
        for reason, n in self.top_reasons(k):
            texts = self.errors.get(reason) or Counter({reason: n})
            example = texts.most_common(1)[0][0]
            others = len(texts) - 1
            out.append(f"{n}x {example}" + (f" (and {others} other path(s))" if others else ""))
        return out

    def reason_summary(self, k: int | None = 3) -> str:
        """The reasons on one line; when some are left out it says how many items the list shows, so the
        counts shown never silently fall short of the failures."""
        text = "; ".join(self.reason_lines(k))
        shown = sum(n for _, n in self.top_reasons(k))
        total = sum(self.reasons.values())
        if shown < total:
            rest = len(self.reasons) - len(self.top_reasons(k))
            text += f" (showing {shown} of {total}; {rest} more reason(s) in judgments.jsonl)"
        return text


class JudgeInputError(PathError):
    """The dataset or outputs folder cannot be judged at all (checked before the first request)."""


# A path with its relative head too (`out/broken/case`), or a reason would keep `out` and differ per folder.
_PATHS = re.compile(r"(?:[A-Za-z]:)?[^\s:,()'/]*(?:/[^\s:,()']+)+")


def error_text(error: str | None) -> str:
    """A failure as a user reads it: the error with its attempt prefix dropped, paths kept."""
    return re.sub(r"^attempt \d+: ", "", str(error or "failed"))


def reason_of(error: str | None) -> str:
    """A failure's reason for counting (a key, never shown): file paths blanked so that the same fault in
    many folders counts once, kept short."""
    return _PATHS.sub("<path>", error_text(error))[:160]


def check_inputs(cases: list[WorldCastCase], outputs: str | Path) -> None:
    """The outputs folder exists and holds at least one case of the dataset; else nothing is worth asking."""
    outputs = Path(outputs)
    if not outputs.is_dir():
        what = "is a file, not a folder" if outputs.exists() else "does not exist"
        raise JudgeInputError(f"--outputs {outputs}", what)
    if not any((outputs / c.id).is_dir() for c in cases):
        sample = ", ".join(c.id for c in cases[:3]) + (", ..." if len(cases) > 3 else "")
        found = sorted(p.name for p in outputs.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))[:3]
        raise JudgeInputError(
            f"--outputs {outputs}", f"holds no output folder of any of the dataset's {len(cases)} case(s) "
            f"(expected sub-folders named like {sample}; found {', '.join(found) if found else 'none'})")


class JudgeEvents:
    """What a progress display hears from a run; the default says nothing."""

    def start(self, total: int) -> None:
        pass

    def item(self, rec: dict) -> None:
        pass


def run_judge(
    dataset: str | Path,
    outputs: str | Path,
    model: str,
    out_dir: str | Path,
    client: JudgeClient,
    *,
    step_accuracy: bool = False,
    step_scope: str = "paper",
    keyframe_selector: KeyframeSelector | None = None,
    case_ids: list[str] | None = None,
    progress: Callable[[str], None] | None = None,
    extra_config: dict | None = None,
    breaker: int = 5,
    events: JudgeEvents | None = None,
) -> JudgeRunResult:
    """Judge one model's outputs into `out_dir`. `breaker`: stop (CircuitOpen) when the first that many judged
    items all fail the same way (0: never). `progress` gets text lines, `events` the per-item records."""
    t0 = time.monotonic()
    out_dir = Path(out_dir)
    jpath = out_dir / JUDGMENTS
    cases = _select_cases(load_cases(dataset), case_ids)
    check_inputs(cases, outputs)
    out_dir.mkdir(parents=True, exist_ok=True)
    latest = latest_records(read_judgments(jpath)) if jpath.is_file() else {}
    _refuse_other_judge(jpath, latest, model, client.config.model)
    run = _JudgeRun(client, model, jpath, latest, step_accuracy, step_scope, progress, events or JudgeEvents())
    run.breaker = CircuitBreaker(breaker)
    run.writer = JsonlAppender(jpath)
    try:
        run.ask_all(run.plan(cases, outputs, keyframe_selector))
    except JudgeUnavailable as exc:
        run.result.aborted = str(exc)
        raise
    finally:
        run.writer.close()
        run.result.elapsed_s = time.monotonic() - t0
        _write_manifest(out_dir, dataset, outputs, model, client, run.result, step_accuracy and step_scope,
                        keyframe_selector, extra_config)
    return run.result


class _JudgeRun:
    """One invocation: which items are still open, and appending their records as they finish."""

    def __init__(self, client: JudgeClient, model: str, jpath: Path, latest: dict, step_accuracy: bool,
                 step_scope: str, progress: Callable[[str], None] | None, events: JudgeEvents):
        self.client, self.model, self.jpath, self.latest = client, model, jpath, latest
        self.step_accuracy, self.step_scope = step_accuracy, step_scope
        self.say = progress or (lambda s: None)
        self.events = events
        self.breaker = CircuitBreaker(0)
        self.writer = None
        self.images = _ImageMemo(client.config.image_max_side)
        self.settings = client.config.settings()
        self.result = JudgeRunResult(jpath.parent)
        self._lock = threading.Lock()

    def base(self, case: WorldCastCase, metric: str, step: int | None, interface: str | None) -> dict:
        return judgment_base(self.model, case, metric, step, self.client.config.model, interface, self.settings)

    def done(self, case: WorldCastCase, metric: str, step: int | None) -> bool:
        return self.latest.get((self.model, case.id, metric, step), {}).get("status") == "ok"

    def record(self, rec: dict) -> None:
        with self._lock:
            append_judgment(self.jpath, rec, self.writer)
            if rec["status"] == "ok":
                self.result.ok += 1
            else:
                self.result.failed += 1
                self.result.count(rec.get("error"))

    def plan(self, cases: list[WorldCastCase], outputs, selector):
        """The open items, as a generator: each case's output is adapted only when its items are next, so
        cutting grids and picking keyframes overlaps the requests already in flight instead of preceding
        them all. An output that cannot be adapted fails its items."""
        open_cases, n_open = [], 0
        for case in cases:
            expected = case_metrics(case, self.step_accuracy, None, self.step_scope)
            todo = sum(1 for m, s in expected if not self.done(case, m, s))
            if todo:
                open_cases.append(case)
                n_open += todo
            else:
                self.result.kept += len(expected)
        self.say(f"{n_open} judge items to ask, {self.result.kept} kept from earlier runs")
        self.events.start(n_open)
        return self._tasks(open_cases, outputs, selector)

    def _tasks(self, cases: list[WorldCastCase], outputs, selector):
        result = self.result
        for case in cases:
            try:
                seq = adapt_output(case, outputs, self.jpath.parent / "states" / self.model / case.id, selector)
            except (ValueError, OSError) as exc:
                result.adapter_failures.append(f"{case.id}: {exc}")
                self.say(f"{case.id}: cannot adapt output: {exc}")
                for m, s in case_metrics(case, self.step_accuracy, None, self.step_scope):
                    if not self.done(case, m, s):
                        rec = {**self.base(case, m, s, None), **failure_fields(f"output: {exc}")}
                        self.record(rec)
                        self.events.item(rec)
                continue
            for m, s in case_metrics(case, self.step_accuracy, len(seq.images), self.step_scope):
                if self.done(case, m, s):
                    result.kept += 1
                else:
                    result.asked += 1
                    yield case, seq, m, s

    def ask(self, case: WorldCastCase, seq: StepSequence, metric: str, step: int | None) -> dict:
        rec = {**self.base(case, metric, step, seq.interface),
               **ask_item(self.client, case, seq, metric, step, self.model, self.images)}
        if METRICS[metric].per_step:
            rec["step_scope"] = self.step_scope
        return rec

    def ask_all(self, tasks) -> None:
        """Ask every open item; stop early on a dead endpoint or a tripped breaker, keeping what finished.

        Only `concurrency` items are handed to the pool at a time, so a stop leaves no queue of
        submitted items behind and the breaker's count is exact."""
        width = max(1, int(self.client.config.concurrency))
        todo = iter(tasks)
        stop: JudgeUnavailable | None = None
        with ThreadPoolExecutor(max_workers=width) as pool:
            futs = {}
            for t in todo:
                futs[pool.submit(self.ask, *t)] = t
                if len(futs) >= width:
                    break
            while futs:
                done, _ = wait(futs, return_when=FIRST_COMPLETED)
                for fut in done:
                    stop = self._finish(fut, futs.pop(fut)) or stop
                    nxt = None if stop is not None else next(todo, None)
                    if nxt is not None:
                        futs[pool.submit(self.ask, *nxt)] = nxt
        if stop is not None:
            raise stop

    def _finish(self, fut, task) -> JudgeUnavailable | None:
        """Record one finished item; the reason to stop the run, if any."""
        case, seq, m, s = task
        try:
            rec = fut.result()
        except JudgeUnavailable as exc:
            return exc
        except Exception as exc:  # a bug or unreadable image must not kill the other items
            rec = {**self.base(case, m, s, seq.interface), **failure_fields(f"{type(exc).__name__}: {exc}")}
        self.record(rec)
        self.events.item(rec)
        line = f"{case.id} {m}{'' if s is None else s}: {rec['status']}"
        self.say(f"{line} {rec.get('score')}" if rec["status"] == "ok" else f"{line}: {error_text(rec.get('error'))}")
        tripped = self.breaker.observe(rec["status"] == "ok", failure_kind(rec.get("error"), rec.get("raw")))
        return CircuitOpen(tripped) if tripped else None


class _ImageMemo:
    """Each image of a case is shown in several requests (PA, CP, VC, OC); read, scale and hash it once."""

    def __init__(self, max_side: int | None, limit: int = 256):
        self.max_side, self.limit, self._lock, self._memo = max_side, limit, threading.Lock(), {}

    def __call__(self, path) -> JudgeImage:
        p = Path(path)
        st = p.stat()
        key = (str(p), st.st_mtime_ns, st.st_size)
        with self._lock:
            hit = self._memo.get(key)
        if hit is None:
            hit = JudgeImage.from_path(p, self.max_side)
            with self._lock:
                if len(self._memo) >= self.limit:
                    self._memo.pop(next(iter(self._memo)))
                self._memo[key] = hit
        return hit


def ask_item(client: JudgeClient, case: WorldCastCase, seq: StepSequence, metric: str, step: int | None,
             model: str | None = None, loader=None) -> dict:
    """Ask the judge one item; the result fields of its record."""
    spec = METRICS[metric]
    loader = loader or (lambda p: JudgeImage.from_path(p, client.config.image_max_side))
    content = build_judge_content(spec, case, seq.images, seq.plans, step, image_loader=loader)
    answer = client.ask_json(
        content, validator=spec.validator(step), schema=spec.answer_schema(step),
        cache_extra={"metric": metric, "prompt_version": spec.prompt_hash, "hints": case.hints, "step": step},
        meta={"model": model, "case_id": case.id, "metric": metric, "step": step},
    )
    return {**answer_fields(answer), "n_states": len(seq.images), "warnings": seq.warnings}


def _select_cases(cases: list[WorldCastCase], case_ids: list[str] | None) -> list[WorldCastCase]:
    if not case_ids:
        return cases
    wanted = set(case_ids)
    unknown = wanted - {c.id for c in cases}
    if unknown:
        raise ValueError(f"unknown case id(s): {sorted(unknown)}")
    return [c for c in cases if c.id in wanted]


def _refuse_other_judge(jpath: Path, latest: dict, model: str, judge_model: str) -> None:
    others = {r["judge_model"] for r in latest.values() if r.get("model") == model and r.get("status") == "ok"}
    others -= {judge_model}
    if others:
        raise ValueError(
            f"{jpath}: model {model!r} was judged here by {sorted(others)}; use a new run folder to judge it "
            f"with {judge_model!r} (scores from different judges must not be mixed)"
        )


def _write_manifest(out_dir, dataset, outputs, model, client, result, step_accuracy, selector, extra_config) -> None:
    mpath = out_dir / "manifest.json"
    prev = {}
    if mpath.is_file():
        try:
            prev = json.loads(mpath.read_text())
        except (OSError, ValueError):
            prev = {}
    config = {
        "dataset": str(Path(dataset).resolve()),
        "outputs": str(Path(outputs).resolve()),
        "model": model,
        "judge": {**client.config.public(), "learned": client.options.public(), "preflight": client.preflight_status()},
        "step_accuracy": step_accuracy,
        "keyframe_selector": (selector or ChangePointSelector).name,
        **(extra_config or {}),
    }
    judge = {"model": client.config.model, "base_url": client.config.base_url, "transport": client.transport.describe()}
    man = base_manifest("worldeval worldcast judge", config, {"judge": judge})
    # `config` is the last invocation's; several models share a folder, so each keeps its own inputs here.
    models = prev.get("models") if isinstance(prev.get("models"), dict) else {}
    models[model] = {"outputs": config["outputs"], "dataset": config["dataset"], "judge_model": client.config.model,
                     "transport": judge["transport"], "finished_unix": time.time()}
    man["models"] = models
    man["prompt_versions"] = dict(PROMPT_VERSIONS)
    man["dataset_fingerprint"] = fingerprint_dir(dataset)
    runs = prev.get("runs", []) if isinstance(prev.get("runs"), list) else []
    runs.append({
        "model": model, "asked": result.asked, "kept": result.kept, "ok": result.ok, "failed": result.failed,
        "adapter_failures": result.adapter_failures, "elapsed_s": round(result.elapsed_s, 3), "aborted": result.aborted,
        "usage": dict(client.totals), "finished_unix": time.time(),
    })
    man["runs"] = runs
    man["timings"] = {"last_run_s": round(result.elapsed_s, 3)}
    atomic_write_json(mpath, man)
