"""The shared command runner: a timeout ends the command and everything it started, under each caller."""

from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path

import pytest

from worldeval import commands
from worldeval.commands import CommandTimeout, run_command

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


def _pid(path: Path) -> int:
    deadline = time.monotonic() + 3.0
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline, "the grandchild never started"
        time.sleep(0.02)
    return int(path.read_text())


def _kill(pid: int) -> None:
    try:
        os.kill(pid, 9)  # only if the test fails: leave no sleeper behind
    except ProcessLookupError:
        pass


@pytest.mark.parametrize("log", [False, True])
def test_timeout_kills_the_grandchild(tmp_path, log):
    pidfile = tmp_path / "pid"
    with pytest.raises(CommandTimeout, match="ran past 0.5 s"):
        run_command(["sh", "-c", SPAWN, str(pidfile)], timeout_s=0.5, log=tmp_path / "log" if log else None)
    pid = _pid(pidfile)
    try:
        assert gone(pid), f"grandchild {pid} outlived the timeout"
    finally:
        _kill(pid)


def test_output_exit_status_and_missing_program(tmp_path):
    res = run_command([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"])
    assert (res.returncode, res.stdout, res.stderr) == (3, "out\n", "err\n")
    log = tmp_path / "run.log"
    res = run_command("echo one; echo two >&2", shell=True, log=log, cwd=tmp_path)
    assert res.returncode == 0 and res.stdout is None and log.read_text() == "one\ntwo\n"
    with pytest.raises(FileNotFoundError):
        run_command(["/nonexistent/program"])


def test_both_callers_use_the_shared_runner(tmp_path):
    """`worldcast generate --command` and the `command` producer both go through `commands.run_command`."""
    from worldeval.opis.producers import command as producer
    from worldeval.worldcast.generation import generate

    assert generate.run_command is commands.run_command and generate.CommandTimeout is CommandTimeout
    assert producer.run_command is commands.run_command and producer.CommandTimeout is CommandTimeout
    pidfile = tmp_path / "pid"
    with pytest.raises(generate.GenError, match="ran past 0.3 s and was stopped"):
        generate._run_logged(shlex.join(["sh", "-c", SPAWN, str(pidfile)]), tmp_path / "gen.log", 0.3)
    pid = _pid(pidfile)
    try:
        assert gone(pid)
    finally:
        _kill(pid)
