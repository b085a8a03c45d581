"""Running the WorldCast judge over one model's outputs, with resume.

One judgment item is (model, case, metric[, step]). Every item ends as one
line in `judgments.jsonl`: `status` "ok" with the parsed score, or "failed"
with the error (an unparseable answer after all retries, an endpoint error,
or an output that could not be adapted). Rerunning on the same folder keeps
the ok items and asks only the missing or failed ones again; the latest line
for an item wins.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from worldeval.judge.client import JudgeClient, JudgeImage
from worldeval.judge.parse import score_validator
from worldeval.runs import append_jsonl, atomic_write_json, base_manifest, fingerprint_dir, read_jsonl
from worldeval.worldcast.adapters import StepSequence, adapt_output
from worldeval.worldcast.cases import WorldCastCase, load_cases
from worldeval.worldcast.prompts import METRIC_LEVELS, METRIC_NAMES, PROMPT_VERSIONS, build_judge_content

JUDGMENTS = "judgments.jsonl"


def item_key(rec: dict) -> tuple:
    return (rec["model"], rec["case_id"], rec["metric"], rec.get("step"))


def latest_records(records: list[dict]) -> dict[tuple, dict]:
    out: dict[tuple, dict] = {}
    for r in records:
        if {"model", "case_id", "metric"} <= r.keys():
            out[item_key(r)] = r
    return out


def case_metrics(case: WorldCastCase, step_accuracy: bool, n_states: int | None = None) -> list[tuple[str, int | None]]:
    """The items a case needs: PA, OC only when outcome_weight > 0, CP, VC, and per-step checks on request."""
    items: list[tuple[str, int | None]] = [("PA", None)]
    if case.outcome_weight > 0:
        items.append(("OC", None))
    items += [("CP", None), ("VC", None)]
    if step_accuracy:
        items += [("STEP", k) for k in range(1, (n_states or case.steps) + 1)]
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


def _step_validator(step: int):
    def extra(obj: dict) -> None:
        # A judge that scores another step than the one shown is answering the wrong question.
        si = obj.get("step_index", step)
        try:
            si = int(si)
        except (TypeError, ValueError):
            si = None
        if si != step:
            from worldeval.judge.parse import AnswerError

            raise AnswerError(f"step_index {obj.get('step_index')!r} does not match the designated step {step}")

    return extra


def run_judge(
    dataset: str | Path,
    outputs: str | Path,
    model: str,
    out_dir: str | Path,
    client: JudgeClient,
    *,
    step_accuracy: bool = False,
    keyframe_selector=None,
    case_ids: list[str] | None = None,
    progress: Callable[[str], None] | None = None,
    extra_config: dict | None = None,
) -> JudgeRunResult:
    t0 = time.monotonic()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    jpath = out_dir / JUDGMENTS
    cases = load_cases(dataset)
    if case_ids:
        wanted = set(case_ids)
        unknown = wanted - {c.id for c in cases}
        if unknown:
            raise ValueError(f"unknown case id(s): {sorted(unknown)}")
        cases = [c for c in cases if c.id in wanted]
    latest = latest_records(read_jsonl(jpath))
    other_judges = {r["judge_model"] for r in latest.values() if r.get("model") == model and r.get("status") == "ok"} - {client.config.model}
    if other_judges:
        raise ValueError(
            f"{jpath}: model {model!r} was judged here by {sorted(other_judges)}; use a new run folder to judge it "
            f"with {client.config.model!r} (scores from different judges must not be mixed)"
        )
    result = JudgeRunResult(out_dir)
    lock = threading.Lock()
    say = progress or (lambda s: None)

    def record(rec: dict) -> None:
        with lock:
            append_jsonl(jpath, rec)
            if rec["status"] == "ok":
                result.ok += 1
            else:
                result.failed += 1

    def base(case: WorldCastCase, metric: str, step: int | None, interface: str | None) -> dict:
        return {
            "model": model, "case_id": case.id, "category": case.category, "level": case.level,
            "outcome_weight": case.outcome_weight, "metric": metric, "metric_name": METRIC_NAMES[metric],
            "step": step, "judge_model": client.config.model, "prompt_hash": PROMPT_VERSIONS[metric],
            "interface": interface,
        }

    tasks = []
    for case in cases:
        pending_base = case_metrics(case, step_accuracy)
        if all(latest.get((model, case.id, m, s), {}).get("status") == "ok" for m, s in pending_base):
            result.kept += len(pending_base)
            continue
        states_dir = out_dir / "states" / model / case.id
        try:
            seq = adapt_output(case, outputs, states_dir, keyframe_selector)
        except (ValueError, OSError) as exc:
            msg = f"output: {exc}"
            result.adapter_failures.append(f"{case.id}: {exc}")
            say(f"{case.id}: cannot adapt output: {exc}")
            for m, s in pending_base:
                if latest.get((model, case.id, m, s), {}).get("status") == "ok":
                    continue
                rec = base(case, m, s, None)
                rec.update({"status": "failed", "score": None, "evidence": None, "raw": None, "error": msg,
                            "attempts": 0, "latency_s": 0.0, "usage": {}, "cached": False, "request_hash": None})
                record(rec)
            continue
        for m, s in case_metrics(case, step_accuracy, len(seq.images)):
            prev = latest.get((model, case.id, m, s))
            if prev is not None and prev.get("status") == "ok":
                result.kept += 1
                continue
            tasks.append((case, seq, m, s))

    loader = lambda p: JudgeImage.from_path(p, client.config.image_max_side)

    def ask(case: WorldCastCase, seq: StepSequence, metric: str, step: int | None) -> dict:
        content = build_judge_content(metric, case, seq.images, seq.plans, step, image_loader=loader)
        extra = _step_validator(step) if metric == "STEP" else None
        answer = client.ask_json(
            content, validator=score_validator(METRIC_LEVELS[metric], extra),
            cache_extra={"metric": metric, "prompt_version": PROMPT_VERSIONS[metric], "hints": case.hints, "step": step},
        )
        rec = base(case, metric, step, seq.interface)
        rec.update({
            "status": "ok" if answer.ok else "failed",
            "score": answer.parsed["score"] if answer.ok else None,
            "evidence": answer.parsed.get("evidence") if answer.ok else None,
            "raw": answer.raw,
            "error": answer.error,
            "attempt_errors": answer.errors,
            "attempts": answer.attempts,
            "latency_s": round(answer.latency_s, 4),
            "usage": answer.usage,
            "cached": answer.cached,
            "request_hash": answer.request_hash,
            "n_states": len(seq.images),
            "warnings": seq.warnings,
        })
        return rec

    result.asked = len(tasks)
    say(f"{len(tasks)} judge items to ask, {result.kept} kept from earlier runs")
    workers = max(1, int(client.config.concurrency))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futs = {pool.submit(ask, *t): t for t in tasks}
        for fut in as_completed(futs):
            case, seq, m, s = futs[fut]
            try:
                rec = fut.result()
            except Exception as exc:  # a bug or unreadable image must not kill the other items
                rec = base(case, m, s, seq.interface)
                rec.update({"status": "failed", "score": None, "evidence": None, "raw": None,
                            "error": f"{type(exc).__name__}: {exc}", "attempts": 0, "latency_s": 0.0,
                            "usage": {}, "cached": False, "request_hash": None})
            record(rec)
            say(f"{case.id} {m}{'' if s is None else s}: {rec['status']} {rec.get('score')}")
    result.elapsed_s = time.monotonic() - t0
    _write_manifest(out_dir, dataset, outputs, model, client, result, step_accuracy, keyframe_selector, extra_config)
    return result


def _write_manifest(out_dir, dataset, outputs, model, client, result, step_accuracy, selector, extra_config) -> None:
    import openai

    mpath = out_dir / "manifest.json"
    prev = {}
    if mpath.is_file():
        import json

        try:
            prev = json.loads(mpath.read_text())
        except Exception:
            prev = {}
    config = {
        "dataset": str(Path(dataset).resolve()),
        "outputs": str(Path(outputs).resolve()),
        "model": model,
        "judge": client.config.public(),
        "step_accuracy": step_accuracy,
        "keyframe_selector": getattr(selector, "name", "changepoint"),
        **(extra_config or {}),
    }
    man = base_manifest(
        "worldeval worldcast judge", config,
        {"judge": {"model": client.config.model, "base_url": client.config.base_url, "openai_sdk": openai.__version__}},
    )
    man["prompt_versions"] = dict(PROMPT_VERSIONS)
    man["dataset_fingerprint"] = fingerprint_dir(dataset)
    runs = prev.get("runs", []) if isinstance(prev.get("runs"), list) else []
    runs.append({
        "model": model, "asked": result.asked, "kept": result.kept, "ok": result.ok, "failed": result.failed,
        "adapter_failures": result.adapter_failures, "elapsed_s": round(result.elapsed_s, 3),
        "usage": dict(client.totals), "finished_unix": time.time(),
    })
    man["runs"] = runs
    man["timings"] = {"last_run_s": round(result.elapsed_s, 3)}
    atomic_write_json(mpath, man)
