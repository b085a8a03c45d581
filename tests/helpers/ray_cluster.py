"""A private loopback Ray cluster for the tests (the `local_ray` fixture in tests/conftest.py starts it once)."""

from __future__ import annotations

import os
import sys

_RAY_TMP: list[str] = []


def start_local_ray() -> bool:
    """Start a private loopback cluster unless this process already has one; True when this call started it.

    Never attaches to another process's cluster (RAY_ADDRESS is dropped, address="local"), keeps its
    session files in a temp dir of its own. Tests pass a stall_timeout so a hang fails instead of
    blocking the session.
    """
    import tempfile

    import ray

    if ray.is_initialized():
        return False
    os.environ.pop("RAY_ADDRESS", None)
    tmp = tempfile.mkdtemp(prefix="wr-", dir="/tmp" if os.path.isdir("/tmp") else None)  # short: socket paths
    _RAY_TMP.append(tmp)
    ray.init(
        address="local",
        num_cpus=4,  # logical CPUs: room for 4 one-CPU workers on a 2-core machine
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        _temp_dir=tmp,
        logging_level="WARNING",
        # the actors must import the test helpers to unpickle functions by reference
        runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}},
    )
    return True


def stop_local_ray() -> None:
    import shutil

    import ray

    ray.shutdown()
    while _RAY_TMP:
        shutil.rmtree(_RAY_TMP.pop(), ignore_errors=True)
