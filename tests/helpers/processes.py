"""A command that leaves a sleeping grandchild behind, and the checks that it was ended with its parent."""

from __future__ import annotations

import os
import time
from pathlib import Path

# A shell that starts a sleeping grandchild, records its pid, and waits for it.
SPAWN = 'sleep 30 & echo $! > "$0"; wait'


def gone(pid: int, within_s: float = 3.0) -> bool:
    """Whether process `pid` ended (a zombie not yet reaped by its new parent counts as ended)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def wait_for_pid(path: Path) -> int:
    deadline = time.monotonic() + 3.0
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline, "the grandchild never started"
        time.sleep(0.02)
    return int(path.read_text())


def kill_if_alive(pid: int) -> None:
    try:
        os.kill(pid, 9)  # only if the test fails: leave no sleeper behind
    except ProcessLookupError:
        pass
