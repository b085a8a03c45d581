"""A persistent answer cache for judge calls (SQLite).

Only answers that parsed and validated are stored: a failure must be asked
again next time, never replayed. The key is a hash of everything that decides
the answer (judge model, prompt text, image bytes, hints, sampling settings),
so a changed prompt or image can never hit a stale entry. Nothing secret goes
in: the key is derived from the request body, which never holds the API key.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any


class JudgeCache:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30)
        with self._lock:
            # WAL lets several evaluation processes share one cache file.
            self._conn.execute("PRAGMA journal_mode=WAL")
            # In WAL mode NORMAL is safe against a crash of the process (a power cut may drop the last
            # answers, which are then asked again); FULL would fsync on every stored answer.
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS answers ("
                " key TEXT PRIMARY KEY, judge_model TEXT NOT NULL, raw TEXT NOT NULL,"
                " parsed TEXT NOT NULL, usage TEXT NOT NULL, created REAL NOT NULL)"
            )
            self._conn.commit()

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT judge_model, raw, parsed, usage FROM answers WHERE key = ?", (key,)
            ).fetchone()
        if row is None:
            return None
        return {"judge_model": row[0], "raw": row[1], "parsed": json.loads(row[2]), "usage": json.loads(row[3])}

    def put(self, key: str, judge_model: str, raw: str, parsed: dict, usage: dict) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO answers (key, judge_model, raw, parsed, usage, created) VALUES (?,?,?,?,?,?)",
                (key, judge_model, raw, json.dumps(parsed, sort_keys=True), json.dumps(usage, sort_keys=True), time.time()),
            )
            self._conn.commit()

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM answers").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()
