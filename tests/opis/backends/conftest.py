"""The tiny random transformers models shared by the hf backend test modules (built offline, once per module)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from worldeval.opis.checkpoints.tiny import build_tiny_models

    old = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        yield build_tiny_models(tmp_path_factory.mktemp("hf_tiny"))
    finally:
        if old is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = old
