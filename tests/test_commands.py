"""The shared command runner: a timeout ends the command and everything it started, under each caller."""

from __future__ import annotations

import shlex
import sys

import pytest

from worldeval import commands
from worldeval.commands import CommandTimeout, run_command

from tests.helpers.processes import SPAWN, gone, kill_if_alive, wait_for_pid


@pytest.mark.parametrize("log", [False, True])
def test_timeout_kills_the_grandchild(tmp_path, log):
    pidfile = tmp_path / "pid"
    with pytest.raises(CommandTimeout, match="ran past 0.5 s"):
        run_command(["sh", "-c", SPAWN, str(pidfile)], timeout_s=0.5, log=tmp_path / "log" if log else None)
    pid = wait_for_pid(pidfile)
    try:
        assert gone(pid), f"grandchild {pid} outlived the timeout"
    finally:
        kill_if_alive(pid)


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
    pid = wait_for_pid(pidfile)
    try:
        assert gone(pid)
    finally:
        kill_if_alive(pid)
