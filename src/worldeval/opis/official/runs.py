"""Runs of the OPIS authors' evaluator, read into worldeval's measurement archive (SPEC section 3).

`worldeval opis import-run ROOT --dataset DATASET --out RUN_DIR` calls `import_runs`. Their runner
writes one folder per (model, scene) and run::

    ROOT/<model>/<scene_id>/<run_id>/            run_id is "run-" + 12 hex of the generation fingerprint
        run_manifest.json                        scene_id, video_metadata (ffprobe: the frame rate)
        observation/video_observation.json       windows[]: frame_index, timestamp (s, from the first frame)
        eval_v3/per_frame_metrics_v3.jsonl       one JSON object per (window, reference object)
        eval_v3/summary_v3.json                  metrics (their P, I, S, headline) and metadata

Model and scene folder names went through their `safe()`: each run of characters outside
[A-Za-z0-9._-] became "_", and "_" at either end was stripped. A scene folder is matched to the dataset
case whose id, safe(id), scene_id or safe(scene_id) equals the folder name or the run manifest's
scene_id.

One jsonl row becomes one archive row (frame = frame_index; track from the row's diagnostics:
geometry_candidate -> static, structure_candidate -> dynamic, evaluation_track excluded -> excluded,
else unlabeled):

- presence 1 (matched): matched, expected_visible, appearance = identity; an ambiguous_match is kept as
  ambiguous, unmatched, visibility unknown (the archive's rule for a match one cannot trust);
- presence 0 (generation_failure): expected_visible, unmatched, no appearance (their 0.0 is a stand-in);
- presence null: unmatched; visibility from visibility_state (outside_view -> out_of_view, occluded,
  too_small; evaluator failures and the rest -> unknown);
- structure: static rows take visible_surface_geometry of a "scored" row, dynamic rows input_structure
  (source pose when the structure evidence came from the pose backend, else claims);
- a window whose rows are all false_positive_evaluable gains max(unmatched_observed_count) extra rows.
"""

from __future__ import annotations

import json
import math
import re
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from worldeval.errors import CaseError, InputError
from worldeval.opis.archive import (
    PARTS_DIR, PER_MODEL_DIR, ArchiveError, consolidate, frame_from_records, part_path, write_case_part,
)  # fmt: skip
from worldeval.opis.case import Case, iter_case_dirs, load_case
from worldeval.opis.labels import StructureSource, Track, Visibility
from worldeval.opis.scoring import OFFICIAL, ScoreConfig, score_runs
from worldeval.runs import atomic_write_json

KIND = "opis-import-run"
CONTRACT = "3.11-strict-frame-presence-provisional"
PER_FRAME = "eval_v3/per_frame_metrics_v3.jsonl"
SUMMARY = "eval_v3/summary_v3.json"
OBSERVATION = "observation/video_observation.json"
RUN_MANIFEST = "run_manifest.json"
# Their summary metrics kept for comparison; the projective score is their third component without structure.
SUMMARY_METRICS = ("headline_score", "presence_score", "identity_score", "v3_structural_quality_score",
                   "v3_reference_projective_score")  # fmt: skip
VISIBILITY_OF = {"outside_view": Visibility.OUT_OF_VIEW, "occluded": Visibility.OCCLUDED, "too_small": Visibility.TOO_SMALL}
# Where a frame rate may sit in ffprobe's output or a hand-written video_metadata, most specific first.
FPS_KEYS = ("fps", "avg_fps", "avg_frame_rate", "frame_rate", "r_frame_rate")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe(text: Any) -> str:
    """Their folder-name label of a model or scene id."""
    return _UNSAFE.sub("_", str(text)).strip("_")


def _read_json(path: Path, field: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(path, field, "file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, field, f"cannot read: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise InputError(path, field, f"invalid JSON: {exc}") from exc


def _object(data: Any, path: Path, field: str) -> dict:
    if not isinstance(data, dict):
        raise InputError(path, field, f"must be a JSON object, got {type(data).__name__}")
    return data


# ----------------------------------------------------------------------------- finding runs


def _is_run(folder: Path) -> bool:
    return folder.is_dir() and not folder.name.startswith(".") and (
        folder.name.startswith("run-") or (folder / "eval_v3").is_dir())


def find_scene_dirs(root: Path) -> list[Path]:
    """`ROOT/<model>/<scene>` folders holding at least one run; InputError when there is none."""
    root = Path(root)
    if not root.is_dir():
        raise InputError(root, "ROOT", "not a readable folder")
    try:
        scenes = sorted(s for m in root.iterdir() if m.is_dir() and not m.name.startswith(".")
                        for s in m.iterdir() if s.is_dir() and any(_is_run(r) for r in s.iterdir()))
    except OSError as exc:
        raise InputError(root, "ROOT", f"cannot read: {exc}") from exc
    if not scenes:
        raise InputError(root, "ROOT", "holds no run of their evaluator (expected <model>/<scene_id>/run-*/eval_v3/)")
    return scenes


def pick_run(scene_dir: Path) -> tuple[Path, list[str]]:
    """The run whose summary_v3.json is newest (a rerun supersedes older ones), and a warning naming the rest."""
    runs = [r for r in sorted(scene_dir.iterdir()) if _is_run(r)]
    done = [r for r in runs if (r / SUMMARY).is_file()]
    if not done:
        raise InputError(scene_dir, SUMMARY, f"none of its {len(runs)} run folders holds {SUMMARY} (unfinished runs?)")
    best = max(done, key=lambda r: ((r / SUMMARY).stat().st_mtime_ns, r.name))
    rest = [r.name for r in runs if r != best]
    warnings = [f"{scene_dir}: {len(runs)} runs; took {best.name} (newest {SUMMARY}), ignored {', '.join(rest)}"] if rest else []
    return best, warnings


# ----------------------------------------------------------------------------- finding the case


class CaseIndex:
    """The dataset's cases, loaded only when a scene needs them (matching by folder name is cheap,
    matching by scene_id loads cases one by one)."""

    def __init__(self, dataset: Path):
        self.dirs = iter_case_dirs(dataset)
        self._cases: dict[Path, Case | CaseError] = {}
        self.warnings: list[str] = []

    def _load(self, folder: Path) -> Case | CaseError:
        if folder not in self._cases:
            try:
                self._cases[folder] = load_case(folder, with_geometry=False)
            except CaseError as exc:
                self._cases[folder] = exc
        return self._cases[folder]

    def find(self, names: list[str], scene_dir: Path) -> Case:
        """The one case some name (scene folder, manifest scene_id) points to; InputError otherwise."""
        wanted = set(names)
        hits = [d for d in self.dirs if wanted & {d.name, safe(d.name)}]
        if not hits:
            hits = [d for d in self.dirs if not isinstance(self._load(d), CaseError) and wanted & _scene_keys(self._load(d))]
        if len(hits) > 1:
            raise InputError(scene_dir, "scene_id", f"matches several dataset cases: {', '.join(d.name for d in hits)}")
        if not hits:
            broken = [d.name for d in self.dirs if isinstance(self._load(d), CaseError)]
            note = f" ({len(broken)} cases could not be read: {', '.join(broken[:5])})" if broken else ""
            raise InputError(scene_dir, "scene_id", f"no dataset case has id or scene_id {' / '.join(sorted(wanted))}{note}")
        case = self._load(hits[0])
        if isinstance(case, CaseError):
            raise case
        return case


def _scene_keys(case: Case) -> set[str]:
    sid = (case.spec.source or {}).get("scene_id")
    keys = {case.id, safe(case.id)}
    return keys | {str(sid), safe(sid)} if sid not in (None, "") else keys


# ----------------------------------------------------------------------------- reading one run


class _Line:
    """One parsed jsonl row and where it came from, so every error names file, line and field."""

    def __init__(self, path: Path, n: int, row: dict):
        self.path, self.n, self.row = path, n, row
        diag = row.get("diagnostics")
        if diag is not None and not isinstance(diag, dict):
            raise self.error("diagnostics", f"must be an object, got {type(diag).__name__}")
        self.diag = diag or {}

    def error(self, field: str, message: str) -> InputError:
        return InputError(self.path, f"line {self.n}: {field}", message)


def _read_lines(path: Path) -> list[_Line]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(path, PER_FRAME, "file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, PER_FRAME, f"cannot read: {exc}") from exc
    lines = []
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise InputError(path, f"line {n}", f"invalid JSON: {exc}") from exc
        if not isinstance(row, dict):
            raise InputError(path, f"line {n}", f"must be a JSON object, got {type(row).__name__}")
        lines.append(_Line(path, n, row))
    if not lines:
        raise InputError(path, PER_FRAME, "holds no row (the evaluator wrote no window)")
    return lines


def _windows(lines: list[_Line], case: Case) -> dict[int, dict[str, _Line]]:
    """frame_index -> reference id -> its row; every reference of the case in every window, nothing else."""
    ids = [inst.id for inst in case.instances]
    known = set(ids)
    windows: dict[int, dict[str, _Line]] = {}
    for ln in lines:
        frame = ln.row.get("frame_index")
        if frame is None or isinstance(frame, bool) or not isinstance(frame, int) or frame < 0:
            raise ln.error("frame_index", f"must be a frame number >= 0, got {frame!r}")
        ref = ln.row.get("reference_id")
        ref = str(ref) if isinstance(ref, (str, int)) and not isinstance(ref, bool) else None
        if ref not in known:
            raise ln.error("reference_id", f"{ln.row.get('reference_id')!r} is no reference of case {case.id}")
        window = windows.setdefault(frame, {})
        if ref in window:
            raise ln.error("reference_id", f"{ref} has a second row in frame {frame} (first on line {window[ref].n})")
        window[ref] = ln
    for frame, window in windows.items():
        missing = [i for i in ids if i not in window]
        if missing:
            first = min(window.values(), key=lambda x: x.n)
            raise first.error("reference_id", f"frame {frame} has no row for {', '.join(missing)} "
                              f"(every reference of case {case.id} needs a row in every window)")
    return windows


def _timestamps(run_dir: Path) -> dict[int, float | None]:
    """frame_index -> timestamp of the observed windows (empty when the observation is not there)."""
    path = run_dir / OBSERVATION
    if not path.is_file():
        return {}
    windows = _object(_read_json(path, "windows"), path, "windows").get("windows")
    if not isinstance(windows, list):
        raise InputError(path, "windows", "must be a list")
    out: dict[int, float | None] = {}
    for k, w in enumerate(windows):
        if not isinstance(w, dict) or not isinstance(w.get("frame_index"), int):
            continue
        t = w.get("timestamp")
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0):
            raise InputError(path, f"windows[{k}].timestamp", f"must be seconds >= 0 or null, got {t!r}")
        out[w["frame_index"]] = None if t is None else float(t)
    return out


def _rate(value: Any) -> float | None:
    """A positive frame rate from a number or a rational string such as "30000/1001"; None otherwise."""
    try:
        fps = float(Fraction(str(value).strip())) if not isinstance(value, bool) else None
    except (ValueError, ZeroDivisionError):
        return None
    return fps if fps is not None and math.isfinite(fps) and fps > 0 else None


def _find_fps(meta: Any) -> float | None:
    """Breadth-first, so a top-level `fps` wins over a stream's `r_frame_rate`; unusable values ("0/0") are skipped."""
    level = [meta]
    while level:
        dicts = [d for d in level if isinstance(d, dict)]
        for key in FPS_KEYS:
            for d in dicts:
                fps = _rate(d[key]) if key in d else None
                if fps is not None:
                    return fps
        level = [v for d in level for v in (d.values() if isinstance(d, dict) else d if isinstance(d, list) else ())]
    return None


def _fps(run_dir: Path) -> float:
    path = run_dir / RUN_MANIFEST
    if not path.is_file():
        raise InputError(path, "video_metadata", f"file not found, and {OBSERVATION} gives no timestamp for every window")
    meta = _object(_read_json(path, "video_metadata"), path, RUN_MANIFEST).get("video_metadata")
    fps = _find_fps(meta)
    if fps is None:
        raise InputError(path, "video_metadata", f"no frame rate ({'/'.join(FPS_KEYS)}), and {OBSERVATION} "
                         "gives no timestamp for every window")
    return fps


def _time_of(run_dir: Path, stamps: dict[int, float | None]) -> Callable[[int], float]:
    """frame -> seconds: the observed timestamp, else frame / fps (the manifest read only when needed)."""
    fps: list[float] = []

    def time_of(frame: int) -> float:
        if stamps.get(frame) is not None:
            return stamps[frame]
        if not fps:
            fps.append(_fps(run_dir))
        return frame / fps[0]

    return time_of


def _unit(ln: _Line, field: str) -> float | None:
    v = ln.row.get(field)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0.0 <= v <= 1.0:
        raise ln.error(field, f"must be a number in [0, 1] or null, got {v!r}")
    return float(v)


def _track(diag: dict) -> str:
    if diag.get("geometry_candidate") is True:
        return Track.STATIC
    if diag.get("structure_candidate") is True:
        return Track.DYNAMIC
    return Track.EXCLUDED if diag.get("evaluation_track") == "excluded" else Track.UNLABELED


def _presence(ln: _Line) -> dict:
    """matched / ambiguous / visibility / appearance of one row, from presence and the diagnostics."""
    p = ln.row.get("presence")
    if p is None:
        vis = VISIBILITY_OF.get(ln.diag.get("visibility_state"), Visibility.UNKNOWN)
        return {"visibility": vis, "matched": False, "ambiguous": False, "appearance": None}
    if isinstance(p, bool) or p not in (0, 1):
        raise ln.error("presence", f"must be 1, 0 or null, got {p!r}")
    if p == 0:
        return {"visibility": Visibility.EXPECTED, "matched": False, "ambiguous": False, "appearance": None}
    appearance = _unit(ln, "identity")
    if ln.diag.get("ambiguous_match") is True:
        return {"visibility": Visibility.UNKNOWN, "matched": False, "ambiguous": True, "appearance": appearance}
    return {"visibility": Visibility.EXPECTED, "matched": True, "ambiguous": False, "appearance": appearance}


def _structure(ln: _Line, track: str) -> tuple[float | None, str | None]:
    if track == Track.STATIC:
        scored = ln.row.get("state") == "scored" and ln.diag.get("geometry_eligible") is not False
        value = _unit(ln, "visible_surface_geometry") if scored else None
        return value, None if value is None else StructureSource.STATIC
    if track == Track.DYNAMIC:
        value = _unit(ln, "input_structure")
        evidence = ln.diag.get("structure_evidence")
        pose = isinstance(evidence, dict) and evidence.get("backend") == "pose"
        return value, None if value is None else (StructureSource.POSE if pose else StructureSource.CLAIMS)
    return None, None


def _n_extras(window: dict[str, _Line]) -> int:
    """Their unmatched observations count as extras only when the whole window could judge false positives."""
    if not all(ln.diag.get("false_positive_evaluable") is True for ln in window.values()):
        return 0
    counts = []
    for ln in window.values():
        c = ln.diag.get("unmatched_observed_count")
        if isinstance(c, bool) or not isinstance(c, int) or c < 0:
            raise ln.error("diagnostics.unmatched_observed_count", f"must be a count >= 0, got {c!r}")
        counts.append(c)
    return max(counts)


def _check_observed_windows(stamps: dict, windows: dict, jsonl: Path) -> None:
    """A window the observation holds but the jsonl lacks means a truncated file, not an empty window."""
    lost = sorted(f for f in stamps if f not in windows)
    if lost:
        raise InputError(jsonl, "frame_index", f"no row for the observed window(s) at frame {', '.join(map(str, lost[:10]))} "
                         f"of {OBSERVATION}")


def read_run(run_dir: str | Path, case: Case, model: str | None = None) -> pd.DataFrame:
    """The archive rows of one run of their evaluator on `case` (model: the folder two levels up)."""
    run_dir = Path(run_dir)
    jsonl = run_dir / PER_FRAME
    windows = _windows(_read_lines(jsonl), case)
    stamps = _timestamps(run_dir)
    _check_observed_windows(stamps, windows, jsonl)
    time_of = _time_of(run_dir, stamps)
    records = []
    for frame, window in windows.items():
        t = time_of(frame)
        for inst in case.instances:
            ln = window[inst.id]
            track = _track(ln.diag)
            value, source = _structure(ln, track)
            records.append({"frame": frame, "time_s": t, "instance_id": inst.id, "track": track, **_presence(ln),
                            "structure": value, "structure_source": source})
        records += [{"frame": frame, "time_s": t, "extra": True}] * _n_extras(window)
    return frame_from_records(records, model=model or run_dir.parent.parent.name, case_id=case.id,
                              domain=case.spec.domain, subcategory=case.spec.subcategory,
                              n_reference=len(case.instances))


# ----------------------------------------------------------------------------- importing a folder of runs


def _summary(run_dir: Path) -> tuple[dict, dict]:
    """(their metrics we keep, their metadata) of one run."""
    path = run_dir / SUMMARY
    data = _object(_read_json(path, SUMMARY), path, SUMMARY)
    metrics = data.get("metrics") if isinstance(data.get("metrics"), dict) else {}
    meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    return {k: metrics.get(k) for k in SUMMARY_METRICS}, meta


def _manifest_scene_id(run_dir: Path) -> str | None:
    path = run_dir / RUN_MANIFEST
    if not path.is_file():
        return None
    sid = _object(_read_json(path, "scene_id"), path, RUN_MANIFEST).get("scene_id")
    return None if sid in (None, "") else str(sid)


def _track_warnings(case: Case, df: pd.DataFrame, where: str) -> list[str]:
    """Tracks their rows imply that differ from the dataset's (e.g. a static object not geometry-eligible)."""
    ref = df[~df["extra"]].drop_duplicates("instance_id").set_index("instance_id")["track"]
    odd = [f"{i.id} {i.archive_track}->{ref[i.id]}" for i in case.instances if ref.get(i.id) != i.archive_track]
    return [f"{where}: tracks from their rows differ from the dataset's: {', '.join(odd)}"] if odd else []


def _import_scene(scene_dir: Path, root: Path, index: CaseIndex, out: Path, done: dict, warnings: list[str]) -> tuple[dict, dict]:
    """Read one scene folder's newest run and write its part; returns (manifest entry, their metrics)."""
    model = scene_dir.parent.name
    run_dir, notes = pick_run(scene_dir)
    warnings += notes
    sid = _manifest_scene_id(run_dir)
    case = index.find([scene_dir.name] + ([sid] if sid else []), scene_dir)
    if (model, case.id) in done:
        raise InputError(scene_dir, "scene_id",
                         f"case {case.id} of model {model} was already imported from {done[model, case.id]}")
    metrics, meta = _summary(run_dir)
    df = read_run(run_dir, case, model)
    try:
        write_case_part(out, model, case.id, df)
    except ArchiveError as exc:
        raise InputError(run_dir / PER_FRAME, exc.column or "rows", str(exc)) from exc
    done[model, case.id] = scene_dir
    rel = scene_dir.relative_to(root).as_posix()
    contract = meta.get("metric_contract_version")
    if contract != CONTRACT:
        warnings.append(f"{run_dir / SUMMARY}: metric contract {contract!r}, read as {CONTRACT!r}")
    warnings += _track_warnings(case, df, f"{model}/{case.id}")
    entry = {"model": model, "case_id": case.id, "scene_dir": rel, "run": run_dir.name, "contract": contract,
             "structure_enabled": meta.get("structure_enabled"), "n_frames": int(df["frame"].nunique()),
             "n_rows": len(df), "headline_score": metrics["headline_score"],
             "presence_score": metrics["presence_score"], "identity_score": metrics["identity_score"],
             "structural_quality_score": metrics["v3_structural_quality_score"]}
    return entry, metrics


def _drop_stale(out: Path, imported: list[dict]) -> None:
    """A rerun into the same folder must not keep scoring a case that failed this time from the last import."""
    try:
        prev = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if not isinstance(prev, dict) or prev.get("kind") != KIND or not isinstance(prev.get("imported"), list):
        return
    now = {(e["model"], e["case_id"]) for e in imported}
    for e in prev["imported"]:
        key = (e.get("model"), e.get("case_id")) if isinstance(e, dict) else (None, None)
        if key in now or not all(isinstance(v, str) for v in key):
            continue
        try:
            part_path(out, *key).unlink(missing_ok=True)
        except ArchiveError:
            continue
        if not any((out / PARTS_DIR / key[0]).glob("*.parquet")):
            (out / PER_MODEL_DIR / f"{key[0]}.parquet").unlink(missing_ok=True)


def import_runs(root: str | Path, dataset: str | Path, out: str | Path) -> dict:
    """Import every scene folder under `root` into the run folder `out`; returns the manifest written there.

    A ROOT without runs or an unreadable dataset raises InputError; a scene that cannot be imported is
    recorded under "failed" (file, field, message) and the others go on.
    """
    root, out = Path(root), Path(out)
    scenes = find_scene_dirs(root)
    index = CaseIndex(Path(dataset))
    manifest: dict = {"kind": KIND, "source_root": str(root.resolve()), "dataset": str(Path(dataset).resolve()),
                      "imported": [], "failed": [], "warnings": []}
    summaries: dict[str, dict[str, dict]] = {}
    done: dict = {}
    for scene_dir in scenes:
        try:
            entry, metrics = _import_scene(scene_dir, root, index, out, done, manifest["warnings"])
        except InputError as exc:
            manifest["failed"].append({"file": exc.file, "field": exc.field, "message": exc.reason})
            continue
        except OSError as exc:
            manifest["failed"].append({"file": str(scene_dir), "field": "", "message": f"cannot read: {exc}"})
            continue
        manifest["imported"].append(entry)
        summaries.setdefault(entry["model"], {})[entry["case_id"]] = metrics
    _drop_stale(out, manifest["imported"])
    consolidate(out)
    atomic_write_json(out / "manifest.json", manifest)
    atomic_write_json(out / "official_summaries.json", summaries)
    return manifest


def rescore(out: str | Path) -> dict:
    """Their aggregation recomputed from the imported archive, case by case beside the headline their
    evaluator wrote (`official_summaries.json`): the check that the import lost nothing their score reads.
    Writes `official_rescore.json`; `max_abs_diff` is over the cases with a headline of theirs."""
    out = Path(out)
    theirs = json.loads((out / "official_summaries.json").read_text(encoding="utf-8"))
    result = score_runs(out, ScoreConfig(variant=OFFICIAL, bootstrap=0))
    cases, diffs = [], []
    for c in result["cases"]:
        h = (theirs.get(c["model"], {}).get(c["case_id"]) or {}).get("headline_score")
        d = None if h is None else c["OPIS"] - float(h)
        diffs += [] if d is None else [abs(d)]
        cases.append({"model": c["model"], "case_id": c["case_id"], "ours": c["OPIS"], "theirs": h, "diff": d,
                      "P": c["P"], "I": c["I"], "S": c["S"]})
    report = {"contract": result["contract"], "cases": cases, "max_abs_diff": max(diffs) if diffs else None,
              "models": {m: v["OPIS"] for m, v in result["models"].items()}}
    atomic_write_json(out / "official_rescore.json", report)
    return report
