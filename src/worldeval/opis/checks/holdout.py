"""Which parts of the shared real data may be tuned on and which are only reported on.

The evaluator's acceptance figures must come from data it was not tuned on, or
they would show how well it fits its tuning data. This module is the one
machine-readable statement of the split; `benchmarks/
faithful_report.py`, the tests and docs/validation.md all read it from here.
Entries are paths relative to the shared data folder (`../shared/data` next to
the repository); a COCO photo is named by its image id.

Why this split (docs/validation.md says the same for readers):
- coco_multiobj: all six photos were tuned on (the evaluator passes all six
  in `opis validate`), so half of them are reserved: 142 (jar, banana,
  sandwich, table), 387 (laptops, phone), 599 (plant, cat, couch, remotes) are
  reported on and must not drive a heuristic; 009, 283 and 443 are for
  tuning, so both halves hold indoor tabletop and living-room scenes, people or
  animals, and small and large objects.
- davis2016_more: four DAVIS clips, a ground-truth mask in every frame, never
  used for tuning: reporting only.
- davis_bmx_trees, cotracker_apple: already used to tune and test the
  evaluator (tests/test_eval_real.py): tuning.
- multiview_pairs: no annotations; used to look at camera fitting: tuning.
"""

from __future__ import annotations

import os
from pathlib import Path

# next to a source checkout (`../shared/data`); WORLDEVAL_SHARED_DATA points elsewhere
SHARED_DATA = Path(os.environ.get("WORLDEVAL_SHARED_DATA") or Path(__file__).resolve().parents[4].parent / "shared" / "data")

TUNING: dict[str, tuple[str, ...]] = {
    "coco_multiobj": ("000000000009", "000000000283", "000000000443"),
    "davis_bmx_trees": (".",),
    "cotracker_apple": (".",),
    "multiview_pairs": ("lightglue_building", "lightglue_sacre_coeur"),
    # a real multi-object video without masks: speed and dense-scene work look at it
    "sam2_bedroom": (".",),
}

REPORTING: dict[str, tuple[str, ...]] = {
    "coco_multiobj": ("000000000142", "000000000387", "000000000599"),
    "davis2016_more": ("blackswan", "car-roundabout", "dog", "libby"),
}


def part_of(collection: str, item: str = ".") -> str:
    """'tuning' or 'reporting' for an item of a shared collection; ValueError when the split does not list it."""
    for name, table in (("tuning", TUNING), ("reporting", REPORTING)):
        if item in table.get(collection, ()) or "." in table.get(collection, ()):
            return name
    raise ValueError(f"{collection}/{item} is in neither part of the hold-out split (worldeval.opis.checks.holdout)")


def reporting_clips(data: Path | None = None) -> list[Path]:
    """Folders of the real clips (frames/ + masks/) reserved for reporting."""
    root = Path(data or SHARED_DATA)
    return [root / "davis2016_more" / name for name in REPORTING["davis2016_more"]]


def tuning_clips(data: Path | None = None) -> list[Path]:
    root = Path(data or SHARED_DATA)
    return [root / "davis_bmx_trees"]
