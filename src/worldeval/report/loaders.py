"""Find and read what a run folder holds, tolerating missing pieces.

A report must still render when parts of a run are absent (no frames records,
a failed rollout, a run that never consolidated), so every reader here returns
what it found plus human-readable notes about what it could not use, instead
of raising.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from worldeval.runs import read_jsonl, redact


@dataclass
class OpisRun:
    root: Path
    manifest: dict
    archive_files: list[Path]
    frames: dict[tuple[str, str], Path]  # (model, case_id) -> frames record path
    status: dict[tuple[str, str], dict]  # (model, case_id) -> status record
    notes: list[str] = field(default_factory=list)


@dataclass
class WorldCastRun:
    root: Path
    manifest: dict
    judgments: list[dict]
    notes: list[str] = field(default_factory=list)


def read_manifest(root: Path, notes: list[str]) -> dict:
    p = root / "manifest.json"
    if not p.exists():
        notes.append(f"{p}: no manifest")
        return {}
    try:
        return redact(json.loads(p.read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError) as exc:
        notes.append(f"{p}: unreadable manifest ({exc})")
        return {}


def _archive_files(root: Path) -> list[Path]:
    """Consolidated archives first; per-rollout parts only for models with no consolidated file.

    Parts and consolidated files hold the same rows, so reading both would count
    a rollout twice.
    """
    files: list[Path] = []
    if (root / "measurements.parquet").is_file():
        files.append(root / "measurements.parquet")
    mdir = root / "measurements"
    consolidated_models = set()
    if mdir.is_dir():
        for p in sorted(mdir.glob("*.parquet")):
            files.append(p)
            consolidated_models.add(p.stem)
    pdir = root / "parts"
    if pdir.is_dir() and not (root / "measurements.parquet").is_file():
        for mdl in sorted(x for x in pdir.iterdir() if x.is_dir()):
            if mdl.name not in consolidated_models:
                files.extend(sorted(mdl.glob("*.parquet")))
    return files


def load_opis_run(root: Path) -> OpisRun:
    notes: list[str] = []
    manifest = read_manifest(root, notes)
    frames: dict[tuple[str, str], Path] = {}
    fdir = root / "frames"
    if fdir.is_dir():
        for p in sorted(fdir.glob("*/*.json")):
            frames[(p.parent.name, p.stem)] = p
    status: dict[tuple[str, str], dict] = {}
    sdir = root / "status"
    if sdir.is_dir():
        for p in sorted(sdir.glob("*/*.json")):
            try:
                rec = json.loads(p.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as exc:
                notes.append(f"{p}: unreadable status record ({exc})")
                continue
            status[(str(rec.get("model", p.parent.name)), str(rec.get("case_id", p.stem)))] = rec
    return OpisRun(root, manifest, _archive_files(root), frames, status, notes)


def load_worldcast_run(root: Path) -> WorldCastRun:
    notes: list[str] = []
    manifest = read_manifest(root, notes)
    return WorldCastRun(root, manifest, read_jsonl(root / "judgments.jsonl"), notes)


def is_opis_run(root: Path) -> bool:
    return bool(_archive_files(root)) or (root / "frames").is_dir() or (root / "status").is_dir()


def is_worldcast_run(root: Path) -> bool:
    return (root / "judgments.jsonl").is_file()


ARCHIVE_LAYOUT = "measurements.parquet, measurements/<model>.parquet or parts/<model>/<case_id>.parquet"


def missing_results(root: Path) -> str | None:
    """What keeps `root` out of a report, or None when it holds a readable OPIS archive or WorldCast judgments.

    Only Parquet footers are read, so this is cheap; a folder with at least one readable archive
    file counts as readable (the report notes the other files).
    """
    if not root.is_dir():
        return "run folder does not exist" if not root.exists() else "not a folder"
    files = _archive_files(root)
    bad = []
    for p in files:
        try:
            pq.read_metadata(p)
            return None
        except Exception as exc:  # pyarrow raises several types for broken files
            bad.append(f"{p.name}: {exc}")
    if is_worldcast_run(root):
        if read_jsonl(root / "judgments.jsonl"):
            return None
        return "judgments.jsonl holds no readable judgment" + (f"; measurement archive unreadable ({bad[0]})"
                                                                if bad else "")
    if bad:
        return f"measurement archive unreadable ({'; '.join(bad[:3])})"
    what = f"holds no OPIS measurement archive ({ARCHIVE_LAYOUT}) and no WorldCast judgments.jsonl"
    # A folder of failed rollouts only is a common way to get here; saying so saves a search.
    failed = sum(1 for st in load_opis_run(root).status.values() if st.get("status") == "failed")
    return what + (f"; status/ records {failed} failed rollout(s)" if failed else "")


def read_archives(files: list[Path], notes: list[str]) -> pd.DataFrame:
    """All archive rows of the given Parquet files (unreadable files are noted and skipped)."""
    from worldeval.opis.archive import COLUMNS

    frames = []
    for p in files:
        try:
            frames.append(pd.read_parquet(p))
        except Exception as exc:  # pyarrow raises several types for broken files
            notes.append(f"{p}: unreadable archive ({exc})")
    if not frames:
        return pd.DataFrame(columns=list(COLUMNS))
    return pd.concat(frames, ignore_index=True)


def read_frames_record(path: Path, notes: list[str]) -> dict | None:
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        notes.append(f"{path}: unreadable frames record ({exc})")
        return None
    if not isinstance(rec, dict) or not isinstance(rec.get("frames"), list):
        notes.append(f"{path}: frames record has no 'frames' list")
        return None
    return rec


def resolve_path(value: Any, bases: list[Path]) -> Path | None:
    """An existing file/folder named by `value`, as given or relative to one of `bases`."""
    if not value:
        return None
    p = Path(str(value))
    if p.is_absolute():
        return p if p.exists() else None
    for b in bases:
        q = b / p
        if q.exists():
            return q
    return p if p.exists() else None


def num(v: Any) -> float | None:
    """A finite-or-inf float, or None for missing, non-numeric and NaN values (JSON nulls)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f
