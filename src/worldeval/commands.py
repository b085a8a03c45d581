"""Run a user's command (a local model, a converter) with a time limit that ends everything it started.

The command runs in a session of its own, so it leads a new process group. On
timeout the whole group is killed: a shell, or a wrapper script, that started
the real work in a child or in the background would otherwise leave that work
running, still writing into a folder the harness has already given up on.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence


class CommandTimeout(Exception):
    """The command ran past its time limit; its process group was killed."""

    def __init__(self, timeout_s: float):
        super().__init__(f"ran past {timeout_s:g} s and was stopped")
        self.timeout_s = timeout_s


@dataclass
class CommandResult:
    returncode: int
    stdout: str | None = None  # None when the output went to a log file
    stderr: str | None = None


def run_command(command: str | Sequence[str], *, timeout_s: float | None = None, shell: bool = False,
                cwd: str | Path | None = None, env: Mapping[str, str] | None = None,
                log: Path | None = None) -> CommandResult:
    """Run `command` to the end, or kill its process group after `timeout_s` and raise `CommandTimeout`.

    `shell=True` runs a command string through /bin/sh; otherwise `command` is an argv list, run as is.
    With `log`, stdout and stderr both go to that file; without, they are captured as text.
    A missing program raises FileNotFoundError, as `subprocess` does.
    """
    sink = open(log, "wb") if log is not None else None
    try:
        out = subprocess.PIPE if sink is None else sink
        err = subprocess.PIPE if sink is None else subprocess.STDOUT
        with subprocess.Popen(command, shell=shell, cwd=cwd, env=None if env is None else dict(env), stdout=out,
                              stderr=err, text=sink is None, start_new_session=True) as proc:
            try:
                stdout, stderr = proc.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                raise CommandTimeout(timeout_s) from None
            except BaseException:
                # In its own session the command no longer hears the terminal's Ctrl-C; end it with the harness.
                _kill_group(proc)
                raise
            return CommandResult(proc.returncode, stdout, stderr)
    finally:
        if sink is not None:
            sink.close()


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # the group ended between the timeout and the kill
    proc.wait()
