"""Where the tests find the repository, the shared real data beside it, and their own frozen files."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
SRC = REPO / "src" / "worldeval"
# Real clips and photos live outside the repository (never copied into it): ../shared/data.
SHARED = REPO.parent / "shared"
SHARED_DATA = SHARED / "data"
PAPER = SHARED / "seeds" / "worldcast-paper.txt"
ARTIFACTS = REPO / "test-artifacts"
