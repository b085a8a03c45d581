"""Find and read what a run folder holds, tolerating missing pieces.

A report must still render when parts of a run are absent (no frames records,
a failed rollout, a run that never consolidated), so every reader here returns
what it found plus human-readable notes about what it could not use, instead
of raising. An OPIS run folder's readers are OPIS's own (`opis/archive.py`,
which the manual audit shares); WorldCast's are here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from worldeval.opis.archive import found_archive_files, load_opis_run
from worldeval.runs import read_jsonl, read_manifest


@dataclass
class WorldCastRun:
    root: Path
    manifest: dict
    judgments: list[dict]
    notes: list[str] = field(default_factory=list)


def load_worldcast_run(root: Path) -> WorldCastRun:
    notes: list[str] = []
    manifest = read_manifest(root, notes)
    return WorldCastRun(root, manifest, read_jsonl(root / "judgments.jsonl"), notes)


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
    files = found_archive_files(root)
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
