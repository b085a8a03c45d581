"""The packaged WorldCast samples and what runs on them.

`data/` holds four small synthetic cases and two outputs of each (`correct`, `shuffled`),
rendered by `make.py`; `demo.py` is `worldcast demo`, which judges them with the scripted
answers of `demo_judge.json`. This room sits just below the command line: the demo
judges and scores, and nothing below it needs the samples.
"""

from __future__ import annotations

from pathlib import Path

SAMPLE_KINDS = ("correct", "shuffled")


def samples_root() -> Path:
    return Path(__file__).resolve().parent / "data"


def sample_dataset() -> Path:
    return samples_root() / "dataset"


def sample_outputs(kind: str = "correct") -> Path:
    if kind not in SAMPLE_KINDS:
        raise ValueError(f"sample outputs are 'correct' or 'shuffled', not {kind!r}")
    return samples_root() / "outputs" / kind
