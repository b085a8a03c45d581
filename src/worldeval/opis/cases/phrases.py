"""Cleaning the noun-phrase vocabulary of a case before segmentation (OPIS section 3.3).

A concept query for "floor" or "the handle of" finds regions no evaluator can
track as an object, and two queries for "sofa" and "couch" find the same
instances twice. Cleaning is deterministic and every decision is recorded:

- normalise: lower case, underscores and runs of spaces folded, a leading
  article dropped, the head noun (last word) made singular;
- drop background and stuff (sky, floor, wall, grass, ...: regions without a
  closed boundary), part-of phrases ("handle of ...", "... edge") and
  incomplete phrases (ending in a preposition, article or conjunction, or
  holding no noun-like word);
- merge near-synonyms onto one spelling (sofa -> couch, ...);
- merge a subsumed phrase into the more general one with the same head noun
  ("coffee mug" -> "mug"): one query for the general concept finds every
  instance the specific one would, and instances stay separate either way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Regions without object boundaries (COCO-stuff style) and scene-level words.
STUFF = frozenset("""
sky cloud ground floor flooring wall ceiling road street pavement sidewalk path grass lawn field dirt sand soil
mud water sea ocean lake river pond wave snow ice fog mist smoke background foreground scene scenery view
horizon landscape terrain hill mountain forest woods foliage vegetation tree_line light shadow reflection
sunlight darkness surface texture pattern carpet rug_area wallpaper tile tiles brick concrete asphalt gravel
stone_wall fence_line room space area corner interior exterior air weather night daylight
""".split())
# Words that make a phrase name a part or a region of something rather than an object.
PART_WORDS = frozenset("part piece side edge corner top bottom surface handle leg arm base back front half section "
                       "portion end tip rim strip area".split())
DANGLING = frozenset("of a an the and or with on in at to for from by near behind under over".split())
ARTICLES = ("a ", "an ", "the ", "some ", "two ", "three ", "several ", "many ")
SYNONYMS = {
    "sofa": "couch", "settee": "couch", "cellphone": "cell phone", "mobile phone": "cell phone",
    "smartphone": "cell phone", "phone": "cell phone", "tv": "television", "tv set": "television",
    "automobile": "car", "bike": "bicycle", "puppy": "dog", "kitten": "cat",
    "potted plant": "plant", "houseplant": "plant", "dining table": "table", "notebook computer": "laptop",
    "monitor": "screen", "trash can": "bin", "garbage can": "bin", "wastebasket": "bin",
}
from worldeval.opis.labels import singular  # noqa: E402,F401  (one home; re-exported)


def normalize(phrase: str) -> str:
    text = re.sub(r"[_\s]+", " ", str(phrase).strip().lower())
    text = re.sub(r"[^a-z0-9 '\-]", "", text).strip()
    for art in ARTICLES:
        if text.startswith(art):
            text = text[len(art):]
            break
    words = text.split()
    if words:
        words[-1] = singular(words[-1])
    return " ".join(words)


def drop_reason(phrase: str) -> str | None:
    """Why a normalised phrase is not a trackable object concept (None: keep it)."""
    words = phrase.split()
    if not words:
        return "empty phrase"
    if words[-1] in DANGLING or words[0] in ("of", "and", "or", "with"):
        return "incomplete phrase"
    if not any(re.search(r"[a-z]{2,}", w) for w in words):
        return "no noun in the phrase"
    joined = "_".join(words)
    if phrase in STUFF or joined in STUFF or (words[-1] in STUFF and len(words) <= 2 and words[-1] != "light"):
        return "background or stuff region"
    if "of" in words[1:] and words[0] in PART_WORDS:
        return "part of another object"
    if len(words) >= 2 and words[-1] in PART_WORDS:
        return "part of another object"
    return None


@dataclass
class PhraseDecision:
    phrase: str  # as proposed
    action: str  # kept | dropped | merged
    concept: str | None  # the concept it ends as (None when dropped)
    reason: str = ""

    def record(self) -> dict:
        return {"phrase": self.phrase, "action": self.action, "concept": self.concept, "reason": self.reason}


def _subsumer(phrase: str, concepts: list[str]) -> str | None:
    """A more general concept with the same head noun whose words are all in `phrase`."""
    words = phrase.split()
    best = None
    for c in concepts:
        cw = c.split()
        if c != phrase and cw[-1] == words[-1] and len(cw) < len(words) and set(cw) <= set(words):
            if best is None or len(cw) < len(best.split()):
                best = c
    return best


def clean_phrases(phrases: list[str]) -> tuple[list[str], list[PhraseDecision]]:
    """The cleaned concept list (first-seen order) and one decision per proposed phrase."""
    decisions: list[PhraseDecision] = []
    staged: list[tuple[str, str, str]] = []  # (original, concept, reason)
    for raw in phrases:
        p = normalize(raw)
        why = drop_reason(p)
        if why:
            decisions.append(PhraseDecision(str(raw), "dropped", None, why))
            continue
        syn = SYNONYMS.get(p)
        staged.append((str(raw), syn or p, f"synonym of {syn!r}" if syn else ""))
    pool = list(dict.fromkeys(c for _, c, _ in staged))
    mapping = {c: (_subsumer(c, pool) or c) for c in pool}
    for _ in range(len(pool)):  # follow chains ("red coffee mug" -> "coffee mug" -> "mug")
        mapping = {c: mapping.get(t, t) for c, t in mapping.items()}
    concepts: list[str] = []
    for raw, c, reason in staged:
        final = mapping[c]
        if final != c:
            reason = (reason + "; " if reason else "") + f"subsumed by {final!r}"
        merged = final != normalize(raw) or final in concepts
        if final in concepts and not reason:
            reason = "same concept as an earlier phrase"
        decisions.append(PhraseDecision(raw, "merged" if merged else "kept", final, reason))
        if final not in concepts:
            concepts.append(final)
    return concepts, decisions


def concept_map(decisions: list[PhraseDecision]) -> dict[str, str | None]:
    """Proposed phrase -> its concept (None when dropped)."""
    return {d.phrase: d.concept for d in decisions}
