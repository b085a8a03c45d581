"""An OPIS run folder: evaluate every case of a dataset against a folder of rollouts (SPEC section 3).

`run_eval` writes a resumable run folder (parts, per-frame records, status
records, manifest); `run_item` is what a worker does for one (model, case):
load the case, build (or reuse) the backend, call `evaluate_rollout`, and turn
every failure into a structured error naming the file and field. One item's
failure is recorded and the run goes on. Measurement itself is
`opis/evaluate.py` and `opis/perception/`.
"""

from __future__ import annotations

import json
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from worldeval import runs
from worldeval.errors import InputError
from worldeval.executor import ItemError, run_items, worker_cache, worker_resources
from worldeval.judge.client import JudgeClient, JudgeConfig
from worldeval.opis.archive import consolidate, write_case_part
from worldeval.opis.backends.registry import needs_gpu, resolve
from worldeval.opis.case import iter_case_dirs, load_case
from worldeval.opis.evaluate import STAGES, EvalConfig, evaluate_rollout, load_backend
from worldeval.opis.perception.frame import checks
from worldeval.opis.perception.structure import ClaimJudgeError

VIDEO_SUFFIXES = (".mp4", ".mov", ".mkv", ".webm", ".avi", ".m4v", ".gif")


@dataclass
class EvalItem:
    case_dir: str
    video: str
    model: str
    backend: str = "classical"  # as given: registered name, entry point or module:builder
    backend_options: dict = field(default_factory=dict)
    device: str = "cpu"
    config: dict = field(default_factory=dict)
    judge: dict | None = None  # JudgeConfig fields; the key travels only in memory
    backend_path: str | None = None  # folder a module:builder backend is imported from (workers are new processes)

    @property
    def case_id(self) -> str:
        return Path(self.case_dir).name


@dataclass
class ItemResult:
    model: str
    case_id: str
    rows: pd.DataFrame | None = None
    frames: dict | None = None
    timings: dict = field(default_factory=dict)
    error: dict | None = None  # {"file", "field", "message"}
    backend_versions: dict = field(default_factory=dict)
    checks: dict = field(default_factory=dict)  # which evidence checks the backend let run (see perception/frame.py)
    warnings: list = field(default_factory=list)  # {"code", "message"}: measured anyway (evaluate.rollout_warnings)

    @property
    def ok(self) -> bool:
        return self.error is None


# ----------------------------------------------------------------------------- one item (worker side)


def _error(file, fieldname, message, kind=None) -> dict:
    rec = {"file": None if file is None else str(file), "field": fieldname, "message": str(message)}
    if kind:
        rec["type"] = kind
    return rec


def find_rollout(rollouts: str | Path, case_id: str) -> Path:
    """`<rollouts>/<case_id>.<any video suffix>`; the .mp4 path when none exists (reported missing later)."""
    root = Path(rollouts)
    for suf in VIDEO_SUFFIXES:
        p = root / f"{case_id}{suf}"
        if p.exists():
            return p
    return root / f"{case_id}.mp4"


def _judge_client(judge: dict | None):
    if not judge:
        return None
    return JudgeClient(JudgeConfig(**judge))


def _measure(item: EvalItem, res: ItemResult, case, video: Path) -> None:
    config = EvalConfig(**item.config)
    opts = dict(item.backend_options)
    backend = worker_cache(("opis-backend", item.backend, item.backend_path, item.device, json.dumps(opts, sort_keys=True, default=str)),
                      lambda: load_backend(item.backend, item.device, module_path=item.backend_path, **opts))
    res.backend_versions = {"name": backend.name, **backend.versions}
    judge = None
    if item.judge:
        judge = worker_cache(("opis-judge", json.dumps(item.judge, sort_keys=True, default=str)), lambda: _judge_client(item.judge))
    res.checks = checks(backend, judge)
    out = evaluate_rollout(case, video, item.model, backend, config, judge=judge)
    res.rows, res.frames, res.timings, res.warnings = out.rows, out.frames, out.timings, out.warnings


def run_item(item: EvalItem) -> ItemResult:
    """Evaluate one (model, case) in a worker; every failure becomes a structured error, never an exception."""
    res = ItemResult(model=item.model, case_id=item.case_id)
    video = Path(item.video)
    try:
        case = load_case(item.case_dir)
        res.case_id = case.id
        if not video.exists():
            res.error = _error(video, "rollout", f"no rollout video for case {case.id} (expected {video.name})", "MissingRollout")
            return res
        _measure(item, res, case, video)
    except InputError as exc:  # the case or the video at fault (CaseError, MediaError)
        res.error = _error(exc.file, exc.field, exc.reason, type(exc).__name__)
    except ClaimJudgeError as exc:  # the judge, not the input: it names the rollout being judged
        res.error = _error(video, exc.field, exc.reason, "JudgeError")
    except Exception as exc:  # an evaluator bug on one item must not stop the run
        res.error = _error(video, "evaluation", f"{type(exc).__name__}: {exc}", type(exc).__name__)
        res.error["traceback"] = traceback.format_exc(limit=8)
    return res


# ----------------------------------------------------------------------------- a whole run


def default_resources(backend: str, device: str = "cpu") -> dict:
    """Ray resources one worker of `backend` asks for: a whole GPU when the registry says it needs one on `device`."""
    return worker_resources(gpu=needs_gpu(backend, device))


def _judge_fields(judge) -> tuple[dict | None, dict | None]:
    """(full judge fields for the workers, public fields for the manifest: no key, only whether one is set)."""
    if judge is None:
        return None, None
    if isinstance(judge, dict):
        full = dict(judge)
    else:
        full = asdict(judge)
    public = {k: v for k, v in full.items() if k != "api_key"}
    public["api_key_set"] = bool(full.get("api_key"))
    return full, public


@dataclass
class _Run:
    """The driver's side of one run: folder, hashed config, manifest and what came back so far."""

    run_dir: Path
    model: str
    backend: str
    chash: str
    manifest: dict
    totals: dict = field(default_factory=lambda: {k: 0.0 for k in STAGES})
    errors: list = field(default_factory=list)
    done: list = field(default_factory=list)
    versions: dict = field(default_factory=dict)
    checks: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)  # {"model", "case_id", "code", "message"} per done case
    prior: dict = field(default_factory=dict)  # the manifest earlier invocations left in the folder

    def on_result(self, item: EvalItem, result) -> None:
        if not isinstance(result, ItemResult):  # the executor reports a crashed or raising worker as an exception
            rec = ItemError.from_exception(result).to_record()
            err = _error(rec["file"] or item.video, rec["field"] or "worker", rec["message"], rec["type"])
            result = ItemResult(model=item.model, case_id=item.case_id, error=err)
        cid = item.case_id
        if result.ok:
            self._keep(cid, result)
        else:
            # a failed item leaves no stale measurements behind
            for p in (self.run_dir / "parts" / self.model / f"{cid}.parquet", self.run_dir / "frames" / self.model / f"{cid}.json"):
                p.unlink(missing_ok=True)
            runs.write_status(self.run_dir, self.model, cid, "failed", error=result.error, config_hash=self.chash,
                              timings=result.timings)
            self.errors.append({"case_id": cid, **{k: v for k, v in result.error.items() if k != "traceback"}})
        for k, v in result.timings.items():
            self.totals[k] = self.totals.get(k, 0.0) + float(v)

    def _keep(self, cid: str, result: ItemResult) -> None:
        t0 = time.perf_counter()
        write_case_part(self.run_dir, self.model, cid, result.rows)
        runs.atomic_write_json(self.run_dir / "frames" / self.model / f"{cid}.json", result.frames)
        result.timings["writing"] = result.timings.get("writing", 0.0) + time.perf_counter() - t0
        runs.write_status(self.run_dir, self.model, cid, "done", config_hash=self.chash, timings=result.timings,
                          frames=len(result.frames["frames"]), warnings=result.warnings)
        self.done.append(cid)
        self.warnings += [{"model": self.model, "case_id": cid, **w} for w in result.warnings]
        if result.backend_versions:
            self.versions[self.backend] = result.backend_versions
        if result.checks:
            self.checks = dict(result.checks)


def _folder_eval(run_dir: Path, run_config: dict, config: EvalConfig) -> dict:
    """The eval settings as the folder's manifest holds them, where they are `config`'s; else `config`'s dump.

    The config hash is over JSON, so the same settings in another layout (flat, as manifests before
    issue 32 hold them) hash differently. Where the folder's eval dict validates to `config` and,
    put in place of this run's, gives the folder's hash back (all else equal), the run keeps that
    dict and with it the folder's hash: a resume needs no --force and finished items stay done.
    """
    try:
        old = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
        theirs = old["config"]["eval"]
        same = EvalConfig.model_validate(theirs) == config
    except (OSError, ValueError, KeyError, TypeError):  # no folder yet, or one check_resume will judge
        return run_config["eval"]
    if same and runs.config_hash({**run_config, "eval": theirs}) == old.get("config_hash"):
        return theirs
    return run_config["eval"]


def _start(dataset: Path, rollouts: Path, run_dir: Path, model: str, backend, device, workers, executor, force,
           judge_public, config: EvalConfig, backend_options: dict) -> tuple[_Run, str]:
    """Check resume and write the run's first manifest; returns the run and the dataset fingerprint."""
    # the model is not part of the hashed config: several models share one run folder
    run_config = {
        "backend": backend.given,
        "backend_options": backend_options,
        "eval": config.model_dump(),
        "judge": {k: v for k, v in (judge_public or {}).items() if k in ("model", "base_url")} or None,
    }
    run_config["eval"] = _folder_eval(run_dir, run_config, config)
    chash = runs.config_hash(run_config)
    fingerprint = runs.fingerprint_dir(dataset)
    old = runs.check_resume(run_dir, config_hash=chash, dataset_fingerprint=fingerprint, force=force) or {}
    manifest = runs.base_manifest(
        "opis eval",
        {**run_config, "model": model, "dataset": str(dataset.resolve()), "rollouts": str(rollouts.resolve()), "device": device,
         "workers": workers, "executor": executor, "judge": judge_public},
        old.get("backends", {}),
    )
    manifest.update(config_hash=chash, dataset_fingerprint=fingerprint, dataset=str(dataset.resolve()),
                    rollouts=str(rollouts.resolve()), models=sorted(set(old.get("models", [])) | {model}),
                    backend=backend.manifest(), checks=old.get("checks", {}))  # fmt: skip
    # what earlier invocations counted stays until this one adds to it: an interrupted resume loses nothing
    manifest.update({k: old[k] for k in ("summary", "summaries", "timings", "warnings") if k in old})
    runs.atomic_write_json(run_dir / "manifest.json", manifest)
    run = _Run(run_dir, model, backend.given, chash, manifest, versions=dict(manifest.get("backends") or {}),
               checks=dict(manifest["checks"]), prior=old)
    return run, fingerprint


# Codes that describe the dataset rather than one rollout: many cases share them (the OPIS authors'
# cases all have no camera task), so the manifest and the command say them once per run.
SHARED_CODES = ("no_camera_task",)


def group_warnings(warnings: list[dict]) -> list[dict]:
    """Per-case warnings with every code of SHARED_CODES that several cases share folded into one entry.

    The folded entry has `case_id` None and the case ids under `cases`.
    """
    out, shared = [], {}
    for w in warnings:
        if w["code"] in SHARED_CODES:
            shared.setdefault((w.get("model"), w["code"]), []).append(w)
        else:
            out.append(w)
    for (model, code), ws in shared.items():
        if len(ws) == 1:
            out.extend(ws)
            continue
        ids = [w["case_id"] for w in ws]
        named = ", ".join(ids[:3]) + (", ..." if len(ids) > 3 else "")
        first = ws[0]["message"]
        message = (first.replace("the case has", f"{len(ids)} cases ({named}) have", 1) if first.startswith("the case has")
                   else f"{len(ids)} cases ({named}): {first}")
        out.append({"model": model, "case_id": None, "cases": ids, "code": code, "message": message})
    return out


def _kept_warnings(run: _Run, skipped: list[str]) -> list[dict]:
    """The warnings of the cases an earlier invocation finished (from their status records)."""
    out = []
    for cid in skipped:
        rec = runs.read_status(run.run_dir, run.model, cid) or {}
        out += [{"model": run.model, "case_id": cid, **w} for w in rec.get("warnings") or []]
    return out


def _finish(run: _Run, skipped: list[str], n_cases: int, wall_s: float) -> dict:
    """The run's final manifest: totals over this and earlier invocations, written to the folder."""
    manifest, prior = run.manifest, run.prior
    manifest["backends"], manifest["checks"] = run.versions, run.checks
    manifest["timings"] = runs.accumulate_timings(prior.get("timings"), wall_s, run.totals, model=run.model,
                                                  evaluated=len(run.done))
    # done counts every case of this model finished in the folder, this invocation's and the kept ones
    manifest["summary"] = {"cases": n_cases, "done": len(run.done) + len(skipped), "failed": len(run.errors),
                           "skipped": len(skipped), "evaluated": len(run.done)}
    manifest["summaries"] = {**(prior.get("summaries") or {}), run.model: manifest["summary"]}
    mine = group_warnings(_kept_warnings(run, skipped) + run.warnings)
    manifest["warnings"] = [w for w in prior.get("warnings") or [] if w.get("model") != run.model] + mine
    runs.atomic_write_json(run.run_dir / "manifest.json", manifest)
    return manifest


def run_eval(
    dataset: str | Path,
    rollouts: str | Path,
    model: str,
    out: str | Path,
    backend: str = "classical",
    device: str = "cpu",
    workers: int = 1,
    executor: str = "local",
    address: str | None = None,
    force: bool = False,
    judge=None,
    config: EvalConfig | dict | None = None,
    backend_options: dict | None = None,
    progress: Any = None,
) -> dict:
    """Evaluate every case of `dataset` against `<rollouts>/<case_id>.mp4`; returns a summary dict."""
    t_start = time.time()
    dataset, rollouts, run_dir = Path(dataset), Path(rollouts), Path(out)
    config = EvalConfig(**config) if isinstance(config, dict) else (config or EvalConfig())
    backend_options = dict(backend_options or {})
    spec = resolve(backend)
    judge_dict, judge_public = _judge_fields(judge)
    case_dirs = iter_case_dirs(dataset)
    run, _ = _start(dataset, rollouts, run_dir, model, spec, device, workers, executor, force, judge_public, config,
                    backend_options)
    items, skipped = [], []
    for cd in case_dirs:
        if runs.is_done(run_dir, model, cd.name, run.chash):
            skipped.append(cd.name)
            continue
        items.append(EvalItem(
            case_dir=str(cd), video=str(find_rollout(rollouts, cd.name)), model=model, backend=spec.given,
            backend_options=backend_options, device=device, config=config.model_dump(), judge=judge_dict, backend_path=spec.path,
        ))  # fmt: skip
    if items and workers == 0 and executor == "local":
        for it in items:
            run.on_result(it, run_item(it))
    elif items:
        run_items(run_item, items, workers=workers, executor=executor, address=address, on_result=run.on_result,
                  progress=progress, resources=default_resources(spec.given, device))
    consolidate(run_dir)
    manifest = _finish(run, skipped, len(case_dirs), time.time() - t_start)
    return {"run_dir": str(run_dir), "model": model, "cases": len(case_dirs), "done": run.done, "skipped": skipped,
            "failed": run.errors, "timings": manifest["timings"],
            "warnings": [w for w in manifest["warnings"] if w.get("model") == model]}  # fmt: skip
