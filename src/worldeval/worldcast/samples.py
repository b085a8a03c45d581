"""Paths of the packaged WorldCast sample cases (rendered by `make_samples.py`)."""

from __future__ import annotations

from pathlib import Path


def samples_root() -> Path:
    return Path(__file__).resolve().parent / "assets" / "samples"


def sample_dataset() -> Path:
    return samples_root() / "dataset"


def sample_outputs(kind: str = "correct") -> Path:
    if kind not in ("correct", "shuffled"):
        raise ValueError(f"sample outputs are 'correct' or 'shuffled', not {kind!r}")
    return samples_root() / "outputs" / kind
