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
import time
from pathlib import Path
from typing import Any

from worldeval import __version__

SECRET_KEYS = {"api_key", "apikey", "openai_api_key", "authorization", "token", "secret"}


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(redact(obj), indent=2, sort_keys=True, default=str) + "\n")


def append_jsonl(path: str | Path, obj: Any) -> None:
    """Append one JSON line and fsync it; a torn last line is skipped by `read_jsonl`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(redact(obj), sort_keys=True, default=str) + "\n"
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())


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
