"""Generation requests: what a model owner sends to their generator for one case (`worldcast prompts`).

The request states the task and the output interface (one grid image, interleaved step images, or one
video) in words; the judge-only hints are never part of it.
"""

from __future__ import annotations

from dataclasses import dataclass

from worldeval.worldcast.inputs.cases import WorldCastCase
from worldeval.worldcast.inputs.grid import DEFAULT_LAYOUTS

INTERFACES = ("grid", "interleaved", "video")


def default_grid_layout(steps: int) -> str:
    if steps in DEFAULT_LAYOUTS:
        r, c = DEFAULT_LAYOUTS[steps]
    else:
        r = 1 if steps <= 3 else 2
        c = -(-steps // r)
        if r * c != steps:
            r, c = 1, steps
    return f"{r}x{c}"


@dataclass
class GenerationRequest:
    case_id: str
    interface: str
    prompt: str
    images: list[str]
    steps: int
    layout: str | None
    expected_output: str

    def to_json(self) -> dict:
        return self.__dict__.copy()


def generation_request(case: WorldCastCase, interface: str) -> GenerationRequest:
    """The request for one case in one output interface. Judge-only hints are never included."""
    if interface not in INTERFACES:
        raise ValueError(f"unknown interface {interface!r}; expected one of {INTERFACES}")
    k = case.steps
    task = case.instruction.strip()
    layout = None
    if interface == "grid":
        layout = default_grid_layout(k)
        r, c = layout.split("x")
        body = (
            f"Produce the {k} requested states as ONE image: a grid of {r} row(s) by {c} column(s), filled row by row "
            f"in the order of the states, all cells the same size. Put nothing inside the picture that the task does "
            f"not itself call for: no step numbers, captions, explanations, arrows or guide marks."
        )
        expected = "<outputs>/<case_id>/grid.png" + ("" if k in (2, 4, 6) else f' plus grid.json {{"layout": "{layout}"}}')
    elif interface == "interleaved":
        body = (
            f"Produce the {k} requested states one at a time: for each state write one short line saying what happens, "
            f"then generate one image of that state. Make {k} separate images, never several states in one picture, "
            f"and keep the written lines out of the images; no step numbers, captions, arrows or guide marks inside "
            f"the images unless the task itself needs visible text."
        )
        expected = "<outputs>/<case_id>/step_1.png ... step_%d.png plus optional plan.json with the %d text lines" % (k, k)
    else:
        body = (
            f"Make one continuous video that performs the whole process from start to finish. Every one of the {k} "
            f"requested stages must be clearly visible, in the requested order, joined by natural motion. "
            f"No split screens, captions or instructional overlays."
        )
        expected = "<outputs>/<case_id>/video.mp4"
    return GenerationRequest(case.id, interface, f"{task}\n\n{body}", [im.rel for im in case.images], k, layout, expected)
