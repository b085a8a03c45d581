"""The VLM's two jobs in `opis build`: screening an image, and drafting its task specification.

Both go through the project's judge client (`worldeval.judge.JudgeClient`),
so retries, caching and key handling are the judge's. Each answer must be one
JSON object in the contract below; an answer that breaks it is retried by the
client and, when it never fits, becomes a failed step (`BuildStepError`) that
a rerun asks again -- never an accepted image.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from worldeval.errors import InputError
from worldeval.judge import JudgeImage
from worldeval.judge.parse import AnswerError
from worldeval.opis.cases.annotate import CAMERA_PRESETS
from worldeval.opis.labels import KINEMATICS

SCREEN_VERSION = "build-screen-v1"
# How the VLM writes a box; models differ (Gemini: [ymin, xmin, ymax, xmax] on a 0-1000 grid).
BOX_FORMATS = {
    "xywh": "[x, y, w, h] in pixels (left, top, width, height)",
    "xyxy": "[x0, y0, x1, y1] in pixels (left, top, right, bottom)",
    "xyxy-1000": "[x0, y0, x1, y1] on a 0-1000 grid over the image (left, top, right, bottom)",
    "yxyx-1000": "[y0, x0, y1, x1] on a 0-1000 grid over the image (top, left, bottom, right)",
}


def pixel_box(box: list[float], fmt: str, width: int, height: int) -> list[float]:
    """A box in `fmt` as [x, y, w, h] pixels of a width x height image."""
    a, b, c, d = (float(v) for v in box)
    if fmt == "xywh":
        return [a, b, c, d]
    if fmt == "xyxy":
        return [a, b, c - a, d - b]
    sx, sy = width / 1000.0, height / 1000.0
    if fmt == "xyxy-1000":
        return [a * sx, b * sy, (c - a) * sx, (d - b) * sy]
    if fmt == "yxyx-1000":
        return [b * sx, a * sy, (d - b) * sx, (c - a) * sy]
    raise ValueError(f"unknown box format {fmt!r}; choose from {sorted(BOX_FORMATS)}")
TASK_VERSION = "build-task-v1"


class BuildStepError(InputError):
    """A pipeline step that could not be done for one image (named step and reason); the run goes on."""


@dataclass
class ProposedObject:
    phrase: str
    box: list[float] | None  # x, y, w, h in pixels of the image the VLM saw
    kinematics: str = "rigid"
    moves: bool | None = None  # moves by itself (a person, an animal, a vehicle): the dynamic track


@dataclass
class Screening:
    suitable: bool
    reason: str
    objects: list[ProposedObject]
    raw: str | None
    request_hash: str


def screen_prompt(width: int, height: int, min_objects: int, vocabulary: list[str] | None, max_objects: int,
                  box_format: str = "xywh") -> str:
    vocab = ""
    if vocabulary:
        vocab = ("Name objects only with phrases from this list (the source's own labels): "
                 + "; ".join(vocabulary) + ". ")
    return (
        f"SCREENING FOR AN OBJECT-PERMANENCE CASE. The picture is {width} pixels wide and {height} high. "
        f"It is usable when it shows at least {min_objects} separate physical objects whose outlines you can "
        "follow. Give every such object you can see, one entry per instance even when several share a name, "
        f"up to {max_objects}. " + vocab +
        f"For each: a short lower-case noun phrase, its box as {BOX_FORMATS[box_format]}, its kinematic form "
        "(rigid: keeps its shape; articulated: moves by joints, such as a person, an animal, scissors; "
        "deformable: bends or folds, such as cloth, a plant, a cable) and whether it can move by itself. "
        "Skip sky, ground, walls, water and other regions without an outline, parts of an object you already "
        "gave, and printed text. Reply with a single JSON object and nothing else: "
        '{"suitable": true|false, "reason": "...", "objects": [{"phrase": "...", "box": [4 numbers], '
        '"kinematics": "rigid|articulated|deformable", "moves": true|false}]}'
    )


def _check_screen(obj: dict) -> dict:
    if not isinstance(obj.get("suitable"), bool):
        raise AnswerError("'suitable' must be true or false")
    items = obj.get("objects")
    if not isinstance(items, list):
        raise AnswerError("'objects' must be a list")
    for k, it in enumerate(items):
        if not isinstance(it, dict) or not isinstance(it.get("phrase"), str):
            raise AnswerError(f"objects[{k}] needs a string 'phrase'")
        box = it.get("box")
        if box is not None and (not isinstance(box, list) or len(box) != 4
                                or not all(isinstance(v, (int, float)) for v in box)):
            raise AnswerError(f"objects[{k}].box must be 4 numbers")
        if it.get("kinematics", "rigid") not in KINEMATICS:
            raise AnswerError(f"objects[{k}].kinematics must be one of {KINEMATICS}")
        if it.get("moves") is not None and not isinstance(it.get("moves"), bool):
            raise AnswerError(f"objects[{k}].moves must be true or false")
    return obj


def _clip_box(box: list[float] | None, width: int, height: int) -> list[float] | None:
    if box is None:
        return None
    x, y, w, h = (float(v) for v in box)
    x0, y0 = min(max(0.0, x), width), min(max(0.0, y), height)
    x1, y1 = min(max(0.0, x + w), width), min(max(0.0, y + h), height)
    return [x0, y0, x1 - x0, y1 - y0] if x1 - x0 > 2 and y1 - y0 > 2 else None


def screen_image(client: Any, image: np.ndarray, min_objects: int, vocabulary: list[str] | None = None,
                 max_objects: int = 40, box_format: str = "xywh") -> Screening:
    H, W = image.shape[:2]
    prompt = screen_prompt(W, H, min_objects, vocabulary, max_objects, box_format)
    answer = client.ask_json([prompt, JudgeImage.from_array(image, label="candidate")], validator=_check_screen,
                             prefer_key="objects", cache_extra={"contract": SCREEN_VERSION})
    if not answer.ok:
        raise BuildStepError("vlm", "screening", f"no answer in the screening contract: {answer.error}")
    objects = []
    for it in answer.parsed["objects"][:max_objects]:
        box = pixel_box(it["box"], box_format, W, H) if it.get("box") is not None else None
        objects.append(ProposedObject(phrase=it["phrase"], box=_clip_box(box, W, H),
                                      kinematics=it.get("kinematics", "rigid"), moves=it.get("moves")))
    return Screening(answer.parsed["suitable"], str(answer.parsed.get("reason", "")), objects, answer.raw,
                     answer.request_hash)


def task_prompt(inventory: list[dict], duration_s: float) -> str:
    presets = "; ".join(f"{name} ({desc})" for name, (desc, _, _) in CAMERA_PRESETS.items())
    listed = "; ".join(f"{i['id']}: {i['category']} at box {[round(v) for v in i['bbox']]}" for i in inventory)
    return (
        "TASK SPECIFICATION FOR AN OBJECT-PERMANENCE CASE. An image-to-video model will be given this picture "
        f"and asked for a {duration_s:g} second video in which the camera moves so that objects leave the view "
        "or get hidden and later come back, so their persistence can be checked. The annotated objects are: "
        f"{listed}. Pick the camera motion that best tests them from: {presets}. Optionally give its "
        "amplitude (degrees for pans and tilts, scene units for sliding or moving forward). Then write the text "
        "prompt for the video model: the camera motion in plain words, and that every object keeps its place, "
        "look and shape, with nothing appearing or vanishing. Reply with a single JSON object and nothing else: "
        '{"camera": "<preset name>", "amount": number or null, "instruction": "..."}'
    )


def _check_task(obj: dict) -> dict:
    if obj.get("camera") not in CAMERA_PRESETS:
        raise AnswerError(f"'camera' must be one of {sorted(CAMERA_PRESETS)}")
    amount = obj.get("amount")
    if amount is not None and (not isinstance(amount, (int, float)) or isinstance(amount, bool) or amount <= 0):
        raise AnswerError("'amount' must be a positive number or null")
    text = obj.get("instruction")
    if not isinstance(text, str) or len(text.strip()) < 10:
        raise AnswerError("'instruction' must be a sentence")
    return obj


def propose_task(client: Any, image: np.ndarray, inventory: list[dict], duration_s: float) -> dict:
    """{"camera", "amount", "instruction"} drafted by the VLM from the image and its inventory."""
    answer = client.ask_json([task_prompt(inventory, duration_s), JudgeImage.from_array(image, label="I0")],
                             validator=_check_task, prefer_key="camera", cache_extra={"contract": TASK_VERSION})
    if not answer.ok:
        raise BuildStepError("vlm", "task", f"no answer in the task contract: {answer.error}")
    return {"camera": answer.parsed["camera"], "amount": answer.parsed.get("amount"),
            "instruction": answer.parsed["instruction"].strip()}


CLEAN_VERSION = "build-clean-v1"


def clean_prompt(concepts: list[str]) -> str:
    listed = "; ".join(concepts)
    return (
        "PHRASE CLEANING FOR AN OBJECT INVENTORY. These noun phrases were proposed for the objects in this "
        f"picture: {listed}. Mark for dropping every phrase that names background or a region without an "
        "outline (a floor, a countertop, a wall, scenery), a part of another object, or something incomplete or "
        "not visible. Mark for merging every phrase that means the same objects as another phrase in the list, "
        "or a narrower phrase whose objects the other already covers, giving the phrase to keep. Use only "
        "phrases from the list. Reply with a single JSON object and nothing else: "
        '{"drop": [{"phrase": "...", "reason": "..."}], "merge": [{"phrase": "...", "into": "..."}]}'
    )


def _check_clean(concepts: list[str]):
    def check(obj: dict) -> dict:
        for key, field in (("drop", "reason"), ("merge", "into")):
            items = obj.get(key, [])
            if not isinstance(items, list):
                raise AnswerError(f"'{key}' must be a list")
            for k, it in enumerate(items):
                if not isinstance(it, dict) or it.get("phrase") not in concepts:
                    raise AnswerError(f"{key}[{k}].phrase must be one of the listed phrases")
                if key == "merge" and (it.get("into") not in concepts or it["into"] == it["phrase"]):
                    raise AnswerError(f"merge[{k}].into must be another listed phrase")
        return obj
    return check


def vlm_clean(client: Any, image: np.ndarray, concepts: list[str]) -> tuple[list[str], dict[str, str | None], list[dict]]:
    """The VLM's pass over the rule-cleaned concepts: (kept concepts, concept -> final concept or None, decisions)."""
    answer = client.ask_json([clean_prompt(concepts), JudgeImage.from_array(image, label="I0")],
                             validator=_check_clean(concepts), prefer_key="drop",
                             cache_extra={"contract": CLEAN_VERSION})
    if not answer.ok:
        raise BuildStepError("vlm", "cleaning", f"no answer in the cleaning contract: {answer.error}")
    target: dict[str, str | None] = {c: c for c in concepts}
    decisions = []
    for it in answer.parsed.get("drop", []):
        target[it["phrase"]] = None
        decisions.append({"phrase": it["phrase"], "action": "dropped", "concept": None,
                          "reason": f"vlm: {it.get('reason', '')}".strip()})
    for it in answer.parsed.get("merge", []):
        if target.get(it["phrase"]) is not None and target.get(it["into"]) is not None:
            target[it["phrase"]] = it["into"]
            decisions.append({"phrase": it["phrase"], "action": "merged", "concept": it["into"],
                              "reason": "vlm: same objects"})
    for _ in concepts:  # follow merge chains (a -> b -> c)
        target = {c: (target.get(t) if t is not None else None) for c, t in target.items()}
    kept = [c for c in concepts if target[c] == c]
    return kept, target, decisions
