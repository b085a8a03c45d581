"""Word n-grams, for checking that our prompts are written in our own words (not copied from a paper)."""

from __future__ import annotations

import re


def ngrams(text: str, n: int = 6) -> set:
    words = re.findall(r"[a-z0-9]+", text.lower())
    return {" ".join(words[i:i + n]) for i in range(len(words) - n + 1)}
