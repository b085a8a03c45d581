"""The build log of `opis build` and what is read back from it: which images are done, and the
dataset.json of the accepted ones. Its own module so that the review step (`review.py`), which
writes decisions into the same log, and the build (`build.py`), which writes review pages, do not
import each other."""

from __future__ import annotations

from pathlib import Path

from worldeval.errors import InputError
from worldeval.runs import atomic_write_json, read_jsonl

LOG_NAME = "build_log.jsonl"


class BuildError(InputError):
    """Bad `opis build` input (options, list files, review files); names the file and field."""


def image_states(out: Path) -> dict[str, dict]:
    """The last `done` record per image in the build log."""
    states: dict[str, dict] = {}
    for rec in read_jsonl(out / LOG_NAME):
        if rec.get("step") == "done" and "image" in rec:
            states[rec["image"]] = rec
    return states


def write_dataset_json(out: Path) -> None:
    accepted = sorted(i for i, r in image_states(out).items()
                      if r.get("status") == "accepted" and (out / i / "case.json").exists())
    atomic_write_json(out / "dataset.json", {"name": out.name, "version": 1, "cases": accepted})
