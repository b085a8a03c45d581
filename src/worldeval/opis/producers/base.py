"""The rollout producer interface and the loop that runs one over a dataset.

A producer turns one OPIS case into one video `<case_id>.mp4`. Everything
else (which cases, resuming, recording failures, the manifest) lives in
`produce_dataset`, so a new producer is one small class with one method.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from worldeval.errors import CaseError, InputError

import json
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from worldeval.opis.case import DEFAULT_FPS, Case, iter_case_dirs, load_case
from worldeval.runs import atomic_write_json, base_manifest


class ProduceError(InputError):
    """A case the producer could not turn into a rollout (recorded, the run continues)."""



@dataclass
class ProduceContext:
    """What a producer may know besides the case itself."""

    dataset: Path
    case_dirs: list[Path]
    fps: float | None = None  # override of the case's camera_task fps
    duration_s: float | None = None  # override of the case's camera_task duration
    seed: int = 0
    options: dict[str, Any] = field(default_factory=dict)

    def timing(self, case: Case) -> tuple[float, int]:
        """(fps, number of frames) of the rollout for `case`."""
        cam = case.spec.camera()
        fps = float(self.fps or cam.fps or DEFAULT_FPS)
        duration = float(self.duration_s or cam.duration_s or 10.0)
        if fps <= 0 or duration <= 0:
            raise ProduceError(case.root / "case.json", "camera_task", f"fps={fps} and duration_s={duration} must be > 0")
        return fps, max(1, int(round(duration * fps)))


class Producer(ABC):
    """One way of turning a case into a rollout video. Subclasses set `name` and implement `produce`."""

    name: str = "producer"

    def config(self) -> dict[str, Any]:
        """Settings recorded in the manifest (never secrets)."""
        return {}

    def prepare(self, ctx: ProduceContext) -> None:
        """Called once before the first case (load a model, check a tool)."""

    @abstractmethod
    def produce(self, case: Case, out: Path, ctx: ProduceContext) -> dict[str, Any]:
        """Write the rollout of `case` to `out` (an .mp4 path); return extra info for the manifest."""


def produce_dataset(
    dataset: str | Path,
    producer: Producer,
    out: str | Path,
    *,
    fps: float | None = None,
    duration_s: float | None = None,
    seed: int = 0,
    force: bool = False,
    cases: list[str] | None = None,
    on_case: Callable[[str, dict], None] | None = None,
) -> dict[str, Any]:
    """Write `<out>/<case_id>.mp4` for every case of `dataset`.

    Existing videos are kept unless `force` (so an interrupted run resumes);
    a case that fails is recorded in `<out>/produce.json` with the file, field
    and message, and the loop goes on.
    """
    dataset = Path(dataset)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    case_dirs = iter_case_dirs(dataset)
    if cases:
        wanted = set(cases)
        case_dirs = [p for p in case_dirs if p.name in wanted]
    ctx = ProduceContext(dataset=dataset, case_dirs=case_dirs, fps=fps, duration_s=duration_s, seed=seed)
    records: dict[str, dict] = {}
    prepared = [False]  # the producer prepares once, before its first case that loads
    t_all = time.monotonic()
    for case_dir in case_dirs:
        cid = case_dir.name
        target = out / f"{cid}.mp4"
        if target.exists() and not force:
            rec = {"case_id": cid, "status": "skipped", "video": str(target), "error": None}
            records[cid] = rec
            if on_case:
                on_case(cid, rec)
            continue
        t0 = time.monotonic()
        rec = _produce_one(producer, ctx, case_dir, target, prepared)
        rec["seconds"] = round(time.monotonic() - t0, 3)
        records[cid] = rec
        if on_case:
            on_case(cid, rec)
    manifest = base_manifest(
        "opis produce",
        {"dataset": str(dataset), "producer": producer.name, "options": producer.config(), "fps": fps,
         "duration_s": duration_s, "seed": seed},
    )
    previous = _previous_records(out / "produce.json")
    previous.update(records)
    manifest["cases"] = [previous[k] for k in sorted(previous)]
    manifest["seconds"] = round(time.monotonic() - t_all, 3)
    atomic_write_json(out / "produce.json", manifest)
    statuses = [r["status"] for r in records.values()]
    return {
        "producer": producer.name,
        "out": str(out),
        "done": statuses.count("done"),
        "skipped": statuses.count("skipped"),
        "failed": statuses.count("failed"),
        "errors": [r["error"] for r in records.values() if r["status"] == "failed"],
        "seconds": manifest["seconds"],
    }


def _produce_one(producer: Producer, ctx: ProduceContext, case_dir: Path, target: Path, prepared: list[bool]) -> dict:
    cid = case_dir.name
    try:
        case = load_case(case_dir)
        if not prepared[0]:
            producer.prepare(ctx)
            prepared[0] = True
        info = producer.produce(case, target, ctx) or {}
        if not target.exists():
            raise ProduceError(target, "video", f"producer {producer.name!r} wrote no file")
        return {"case_id": cid, "status": "done", "video": str(target), "error": None, "info": info}
    except (CaseError, ProduceError) as exc:
        return {"case_id": cid, "status": "failed", "error": {"file": exc.file, "field": exc.field, "message": exc.reason}}
    except Exception as exc:  # a producer bug must not stop the other cases
        return {
            "case_id": cid,
            "status": "failed",
            "error": {"file": str(case_dir), "field": producer.name, "message": f"{type(exc).__name__}: {exc}"},
            "traceback": traceback.format_exc(limit=5),
        }


def _previous_records(path: Path) -> dict[str, dict]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {r["case_id"]: r for r in data.get("cases", []) if isinstance(r, dict) and "case_id" in r}
    except Exception:
        return {}
