"""Rollout producers: turn every case of an OPIS dataset into `<case_id>.mp4`.

`get_producer(name, **options)` returns one by its stable name:
`oracle`, `static`, `forgetful-drift`, `forgetful-recolor`, `forgetful-drop`,
`swapped` (built-in reference models), `command` (a user command template)
and `diffusers` (open image-to-video pipelines; the diffusers package loads only when one is built).
"""

from __future__ import annotations

from typing import Any

from worldeval.opis.producers.base import ProduceContext, ProduceError, Producer, produce_dataset
from worldeval.opis.producers.command import CommandProducer
from worldeval.opis.producers.diffusers_i2v import DiffusersProducer
from worldeval.opis.producers.reference import REFERENCE_MODELS, ForgetfulProducer, reference_producer

PRODUCERS = REFERENCE_MODELS + ("command", "diffusers")


def get_producer(name: str, **options: Any) -> Producer:
    options = {k: v for k, v in options.items() if v is not None}
    if name == "command":
        return CommandProducer(**options)
    if name == "diffusers":
        return DiffusersProducer(**options)
    if name in REFERENCE_MODELS:
        return reference_producer(name, **options)
    raise ValueError(f"unknown producer {name!r}; choose from {', '.join(PRODUCERS)}")


__all__ = [
    "PRODUCERS", "REFERENCE_MODELS", "ForgetfulProducer", "ProduceContext", "ProduceError", "Producer",
    "get_producer", "produce_dataset",
]
