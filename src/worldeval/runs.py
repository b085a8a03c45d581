"""Run folders: atomic writes, manifests and per-item status records.

Everything a run writes goes through `atomic_write_*` (temporary file, fsync,
rename) so that a crash leaves either the old file or the new one, never half.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from worldeval import __version__

SECRET_KEYS = {"api_key", "apikey", "openai_api_key", "authorization", "token", "secret"}


def _umask() -> int:
    # Linux shows the umask without changing it; elsewhere os.umask can only be read by setting it,
    # so it is set straight back (process-wide, so under a lock).
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


_UMASK_LOCK = threading.Lock()


def atomic_write_via(path: str | Path, write: Callable[[str], None], fsync: bool = True) -> Path:
    """Let `write(tmp_path)` produce the file, fsync it, then rename it into place.

    mkstemp makes the file 0600; a report, manifest or keyframe is meant to be read like any file the
    user writes, so it gets the mode a plain open() would give (0666 minus the umask).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        if fsync:
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def atomic_write_bytes(path: str | Path, data: bytes, fsync: bool = True) -> Path:
    """`fsync=False` for files a rerun recreates anyway (derived images): still atomic, not forced to disk."""
    def write(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            fh.write(data)

    return atomic_write_via(path, write, fsync)


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any, fsync: bool = True) -> Path:
    text = json.dumps(redact(obj), indent=2, sort_keys=True, default=str) + "\n"
    return atomic_write_bytes(path, text.encode("utf-8"), fsync)


def append_jsonl(path: str | Path, obj: Any, fsync: bool = True) -> None:
    """Append one JSON line and fsync it; a torn last line is skipped by `read_jsonl`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(redact(obj), sort_keys=True, default=str) + "\n"
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line)
        fh.flush()
        if fsync:
            os.fsync(fh.fileno())


class JsonlAppender:
    """Appends lines to one JSONL file through one open handle, each line flushed to the OS at once
    (so a crash of the process loses nothing) but fsynced at most every `sync_every_s` seconds and on
    close: what a power cut can lose is the last fraction of a second, which a resume redoes."""

    def __init__(self, path: str | Path, sync_every_s: float = 1.0):
        self.path = Path(path)
        self._fh = None  # opened on the first line: a run that records nothing leaves no file
        self._every = sync_every_s
        self._last = time.monotonic()
        self._lock = threading.Lock()

    def append(self, obj: Any) -> None:
        line = json.dumps(redact(obj), sort_keys=True, default=str) + "\n"
        with self._lock:
            if self._fh is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fh = open(self.path, "a", encoding="utf-8")
            self._fh.write(line)
            self._fh.flush()
            now = time.monotonic()
            if now - self._last >= self._every:
                os.fsync(self._fh.fileno())
                self._last = now

    def close(self) -> None:
        with self._lock:
            if self._fh is not None and not self._fh.closed:
                self._fh.flush()
                os.fsync(self._fh.fileno())
                self._fh.close()


def read_jsonl(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                # A crash mid-append leaves one torn line at the end; it is redone on resume.
                continue
    return rows


def redact(obj: Any) -> Any:
    """Drop secret-looking keys recursively before anything is written."""
    if isinstance(obj, dict):
        return {k: ("<redacted>" if str(k).lower() in SECRET_KEYS else redact(v)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact(v) for v in obj]
    return obj


def read_manifest(root: Path, notes: list[str]) -> dict:
    """A run folder's manifest.json, redacted; {} with a note in `notes` when it is missing or unreadable."""
    p = root / "manifest.json"
    if not p.exists():
        notes.append(f"{p}: no manifest")
        return {}
    try:
        return redact(json.loads(p.read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError) as exc:
        notes.append(f"{p}: unreadable manifest ({exc})")
        return {}


def git_revision() -> str | None:
    try:
        here = Path(__file__).resolve().parent
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5, check=False
        )
        return out.stdout.strip() or None
    except Exception:
        return None


def fingerprint_paths(paths: list[Path], root: Path | None = None) -> str:
    """Content hash of files (sorted by relative path): identifies a dataset version."""
    h = hashlib.sha256()
    for p in sorted(Path(x) for x in paths):
        rel = str(p.relative_to(root)) if root else str(p)
        h.update(rel.encode())
        h.update(b"\0")
        with open(p, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()


def fingerprint_dir(root: str | Path) -> str:
    root = Path(root)
    files = [p for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")]
    return fingerprint_paths(files, root)


def base_manifest(command: str, config: dict, backends: dict | None = None) -> dict:
    return {
        "command": command,
        "package": "worldeval",
        "version": __version__,
        "git_revision": git_revision(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "config": redact(config),
        "backends": backends or {},
        "created_unix": time.time(),
    }


def accumulate_timings(previous: dict | None, wall_s: float, stages_s: dict, **last: Any) -> dict:
    """A run folder's timings over every invocation that worked on it, this one (`wall_s`, `stages_s`) added.

    `previous` is the manifest's `timings` an earlier invocation wrote (None for a new folder; one
    without `invocations` is a single invocation's). A resume that finds everything done adds zero
    seconds to the stages instead of replacing the earlier totals with zeros. `last` holds this
    invocation alone, with any extra fields given (model, items evaluated).
    """
    prev = previous or {}
    stages = {k: float(v) for k, v in (prev.get("stages_s") or {}).items()}
    for k, v in stages_s.items():
        stages[k] = stages.get(k, 0.0) + float(v)
    before = int(prev.get("invocations", 1 if prev else 0))
    return {
        "wall_s": round(float(prev.get("wall_s") or 0.0) + wall_s, 3),
        "stages_s": {k: round(v, 3) for k, v in stages.items()},
        "invocations": before + 1,
        "last": {"wall_s": round(wall_s, 3), "stages_s": {k: round(float(v), 3) for k, v in stages_s.items()}, **last},
    }


# --------------------------------------------------------------------------- resuming a run folder


class ResumeError(Exception):
    """A run folder holds work made with another config or dataset; resuming would mix the two."""


def config_hash(config: dict) -> str:
    """Stable hash of a run's config (canonical JSON, secrets dropped): equal configs, equal hashes."""
    text = json.dumps(redact(config), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def check_resume(
    run_dir: str | Path,
    *,
    config_hash: str,
    dataset_fingerprint: str | None,
    force: bool = False,
    manifest_name: str = "manifest.json",
) -> dict | None:
    """Refuse to resume a run folder made with a different config or dataset, unless `force`.

    Returns the manifest already in the folder (None for a new run). The
    manifest must carry top-level `config_hash` and `dataset_fingerprint`;
    a manifest without them (older or foreign) counts as a mismatch.
    With `force`, the caller goes on and must redo every item whose status
    record holds another config hash (see `is_done`).
    """
    run_dir = Path(run_dir)
    path = run_dir / manifest_name
    if not path.exists():
        return None
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        if force:
            return None
        raise ResumeError(f"{path}: cannot read the existing manifest ({exc}); rerun with --force to start over") from exc
    problems = []
    if old.get("config_hash") != config_hash:
        problems.append(f"config hash {old.get('config_hash')!r} in the folder, {config_hash!r} now")
    if dataset_fingerprint is not None and old.get("dataset_fingerprint") != dataset_fingerprint:
        problems.append(
            f"dataset fingerprint {str(old.get('dataset_fingerprint'))[:16]!r} in the folder, "
            f"{dataset_fingerprint[:16]!r} now"
        )
    if problems and not force:
        raise ResumeError(
            f"{path}: this run folder was made with a different "
            + ("config and dataset" if len(problems) == 2 else "config" if "config" in problems[0] else "dataset")
            + " ("
            + "; ".join(problems)
            + "). Use another --out folder, or --force to resume anyway (items made with the old config are redone)."
        )
    return old


def status_path(run_dir: str | Path, model: str, item_id: str) -> Path:
    return Path(run_dir) / "status" / model / f"{item_id}.json"


def write_status(
    run_dir: str | Path,
    model: str,
    item_id: str,
    status: str,
    *,
    error: dict | None = None,
    config_hash: str | None = None,
    timings: dict | None = None,
    **extra: Any,
) -> Path:
    """Write the per-item status record last, after the item's outputs, so `done` implies they exist."""
    if status not in ("done", "failed"):
        raise ValueError(f"status must be 'done' or 'failed', got {status!r}")
    record = {
        "model": model,
        "case_id": item_id,
        "status": status,
        "error": error,
        "config_hash": config_hash,
        "timings": timings or {},
        **extra,
    }
    return atomic_write_json(status_path(run_dir, model, item_id), record)


def read_status(run_dir: str | Path, model: str, item_id: str) -> dict | None:
    path = status_path(run_dir, model, item_id)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def is_done(run_dir: str | Path, model: str, item_id: str, config_hash: str | None = None) -> bool:
    """True when the item finished with this config; failed, missing or stale items are redone."""
    rec = read_status(run_dir, model, item_id)
    if not rec or rec.get("status") != "done":
        return False
    return config_hash is None or rec.get("config_hash") == config_hash
