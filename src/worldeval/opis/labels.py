"""OPIS's words: the labels its files carry, and what a noun phrase says about its object's motion.

The labels (visibility, track, kinematics, structure source, a frame record's object status) are
written into case files, measurement archives, per-frame records and the audit page, and read back
by scoring, the audits and reports. Each is a `Label`: a str-valued enum whose member *is* its string
(equal, hashed, printed, JSON- and Parquet-written as the value), so code names a label once, here,
and every file stays byte-identical to one written with the bare strings.

The word lists (the pose backend's skeleton routing, annotate's inferred tracks, how an instance
without an evaluation track is followed) turn a phrase into those labels; `singular` is theirs.
"""

from __future__ import annotations

import re
from enum import Enum


class Label(str, Enum):
    """A label that is its own string: `str`, f-strings and `repr` give the value (so messages and
    tuples of labels print as before), and json/pyarrow write it as a plain string."""

    __str__ = str.__str__
    __format__ = str.__format__
    __repr__ = str.__repr__


class Visibility(Label):
    """Whether a reference instance should be seen in a frame (the archive's `visibility`, SPEC section 3)."""

    EXPECTED = "expected_visible"
    OCCLUDED = "occluded"
    OUT_OF_VIEW = "out_of_view"
    TOO_SMALL = "too_small"
    UNKNOWN = "unknown"


class Track(Label):
    """The archive's `track` of a reference instance; a case's `track` is static, dynamic, excluded or null."""

    STATIC = "static"
    DYNAMIC = "dynamic"
    # an instance without an evaluation track (a case's null): Presence and Identity only
    UNLABELED = "unlabeled"
    # carried in the inventory (so finding it is no extra), its rows never enter a score
    EXCLUDED = "excluded"


class Kinematics(Label):
    RIGID = "rigid"
    ARTICULATED = "articulated"
    DEFORMABLE = "deformable"
    # nobody labelled it (the authors' `unknown`); such an instance is followed as dynamic
    UNKNOWN = "unknown"


class StructureSource(Label):
    """Where a row's structure value came from (the archive's `structure_source`)."""

    STATIC = "static"  # projected geometry with a depth reference
    STATIC_FLAT = "static_flat"  # projected geometry on a flat-scene assumption
    POSE = "pose"
    CLAIMS = "claims"


class Status(Label):
    """An object's status in a per-frame record. An unmatched reference instance that is not expected
    visible carries its `Visibility` instead (occluded, out_of_view, too_small, unknown)."""

    MATCHED = "matched"
    MISSING = "missing"  # expected visible and unmatched
    AMBIGUOUS = "ambiguous"
    EXTRA = "extra"


VISIBILITY = tuple(Visibility)
# Evaluation tracks with a Structure route (SPEC section 2).
TRACKS = (Track.STATIC, Track.DYNAMIC)
UNLABELED, EXCLUDED = Track.UNLABELED, Track.EXCLUDED
# Every value of the archive's `track` column on a reference-instance row.
ARCHIVE_TRACKS = tuple(Track)
# A case's `track` values (null aside) and kinematics, as plain strings for its pydantic schema.
CASE_TRACKS = tuple(t.value for t in (Track.STATIC, Track.DYNAMIC, Track.EXCLUDED))
KINEMATICS = (Kinematics.RIGID, Kinematics.ARTICULATED, Kinematics.DEFORMABLE)
CASE_KINEMATICS = tuple(k.value for k in Kinematics)
STRUCTURE_SOURCES = tuple(StructureSource)


# ----------------------------------------------------------------------------- what a phrase says about motion

_IRREGULAR = {"people": "person", "men": "man", "women": "woman", "children": "child", "mice": "mouse",
              "feet": "foot", "teeth": "tooth", "geese": "goose", "knives": "knife", "leaves": "leaf",
              "shelves": "shelf", "loaves": "loaf", "wolves": "wolf", "shoes": "shoe", "canoes": "canoe",
              "buses": "bus", "sheep": "sheep", "fish": "fish"}
_KEEP_S = ("ss", "us", "is", "eyeglasses", "sunglasses", "scissors", "pants", "jeans", "shorts", "headphones",
           "binoculars")


def singular(word: str) -> str:
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    if word.endswith(_KEEP_S) or len(word) <= 3:
        return word
    if word.endswith("ies"):
        return word[:-3] + "y"
    if word.endswith(("ches", "shes", "xes", "sses", "zes", "oes")):
        return word[:-2]
    if word.endswith("s"):
        return word[:-1]
    return word


# COCO's classes of people and animals (the COCO case builder labels them dynamic).
COCO_PEOPLE = {"person"}
COCO_ANIMALS = {"bird", "cat", "dog", "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe"}
# The people and animals a pose model gives a skeleton.
PERSON_WORDS = {
    "person", "people", "man", "men", "woman", "women", "boy", "girl", "child", "children", "kid", "baby",
    "human", "rider", "cyclist", "biker", "player", "pedestrian", "skier", "skateboarder", "surfer", "runner",
    "dancer", "athlete", "worker", "chef", "driver", "walker", "student", "soldier", "lady", "gentleman",
}  # fmt: skip
ANIMAL_WORDS = {
    "dog", "puppy", "cat", "kitten", "horse", "pony", "cow", "calf", "sheep", "lamb", "goat", "pig", "bear",
    "zebra", "giraffe", "elephant", "deer", "moose", "lion", "tiger", "leopard", "cheetah", "wolf", "fox",
    "rabbit", "bunny", "squirrel", "monkey", "gorilla", "chimpanzee", "panda", "camel", "donkey", "buffalo",
    "bison", "antelope", "rhino", "rhinoceros", "hippo", "hippopotamus", "kangaroo", "raccoon", "otter", "animal",
}  # fmt: skip

# Nouns naming something that moves by itself, a person or an animal: the pose backend's lists (the
# people and animals that get a skeleton) and COCO's animal classes, with animals no pose model covers.
LIVING_WORDS = frozenset(PERSON_WORDS | ANIMAL_WORDS | COCO_PEOPLE | COCO_ANIMALS | {
    "bird", "swan", "duck", "goose", "chicken", "hen", "rooster", "parrot", "pigeon", "gull", "seagull", "owl",
    "eagle", "hawk", "penguin", "flamingo", "heron", "crow", "fish", "goldfish", "shark", "dolphin", "whale",
    "seal", "turtle", "tortoise", "frog", "snake", "lizard", "mouse", "rat", "hamster", "insect", "butterfly",
    "bee", "toddler", "teenager", "pet",
})  # fmt: skip
# Head nouns naming a part of a person or an animal: a part moves with its owner.
BODY_PART_WORDS = frozenset(
    "head face hand arm leg foot paw tail wing beak neck ear eye nose mouth snout muzzle hair mane fin claw hoof "
    "feather finger".split())
# Words that may stand beside a part without naming an owner ("red beak", "left hand"); any other word
# names one ("table leg"), and only a person or animal owner makes the part dynamic.
PART_MODIFIERS = frozenset(
    "a an the red orange yellow green blue purple pink brown black white grey gray dark light bright left right "
    "front rear hind upper lower small big large long short little raised open its his her their".split())
# The head noun is the last word before the first of these ("head of the swan", "man with a hat").
CHUNK_ENDS = frozenset("of with on in at near behind under over holding riding wearing carrying and".split())


def phrase_labels(phrase: str) -> tuple[str | None, str, str] | None:
    """(kinematics or None, track, why) where the noun phrase makes them evident; None where it does not.

    A person or an animal ("black swan", "dogs", "man with a hat") is articulated and dynamic; a part of
    one ("red beak", "head of the swan", "dog's tail") is dynamic, its kinematics left alone; anything
    else ("red mug", "table leg") says nothing, so the defaults hold.
    """
    typed = [w for w in re.findall(r"[a-z]+", phrase.lower()) if w != "s"]  # "s": a possessive's
    words = [singular(w) for w in typed]
    cut = next((i for i, w in enumerate(words) if i > 0 and w in CHUNK_ENDS), len(words))
    if not words:
        return None
    head = words[cut - 1]
    if head in LIVING_WORDS:
        return Kinematics.ARTICULATED, Track.DYNAMIC, f'inferred from "{typed[cut - 1]}"'
    if head in BODY_PART_WORDS:
        owners = [w for w in words[:cut - 1] + words[cut:] if w not in PART_MODIFIERS and w not in CHUNK_ENDS]
        if all(w in LIVING_WORDS for w in owners):
            return None, Track.DYNAMIC, f'inferred from "{typed[cut - 1]}", a part of a person or animal'
    return None
