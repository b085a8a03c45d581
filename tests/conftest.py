"""Fixtures shared across test folders. Plain helpers live in tests/helpers/."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def local_ray():
    """One private loopback Ray cluster for the whole session (the executor and the OPIS fault suites)."""
    pytest.importorskip("ray")
    from tests.helpers.ray_cluster import start_local_ray, stop_local_ray

    owner = start_local_ray()
    try:
        yield
    finally:
        if owner:
            stop_local_ray()
