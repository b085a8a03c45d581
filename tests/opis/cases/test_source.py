"""`opis source` against an in-process fake OpenAI-compatible images endpoint and a scripted review VLM.

The fake endpoint is `FakeGenerator` (tests/helpers/fake_generator.py, a
loopback server), answering here with 1536x1024 RGBA scenes whose colour
encodes the call number, or with a safety refusal. The review VLM is the
judge's mock transport, scripted per image (recognised by that colour).
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from worldeval.judge import JudgeClient, JudgeConfig, MockTransport
from worldeval.cli.opis import build as build_cli
from worldeval.opis.cases.build import discover_images
from worldeval.opis.cases.source import Gate, SourceConfig, SourceEndpoint, run_source
from worldeval.runs import read_jsonl
from worldeval.generator import GenConfig

from tests.helpers.fake_generator import FakeGenerator

KEY = "sk-source-SECRET-7d2a"
PHRASES = ["mug", "kettle", "bowl", "chair", "plant", "lamp"]


def colour(n: int) -> tuple[int, int, int]:
    return (20 + 35 * n, 200 - 20 * n, 60 + 15 * n)


def scene_png(n: int) -> bytes:
    """1536x1024 RGBA: an 80-row red band at top and bottom (cropped away by the 16:9 centre crop)."""
    img = np.zeros((1024, 1536, 4), np.uint8)
    img[..., :3] = colour(n)
    img[..., 3] = 255
    img[:80, :, :3] = (255, 0, 0)
    img[-80:, :, :3] = (255, 0, 0)
    buf = io.BytesIO()
    Image.fromarray(img, "RGBA").save(buf, format="PNG")
    return buf.getvalue()


class FakeImages(FakeGenerator):
    def __init__(self):
        super().__init__(b"")
        self.refuse: set[int] = set()  # call numbers answered with a safety refusal

    def _image(self, h, rec, path):
        with self.lock:
            self.n_images += 1
            n = self.n_images
        rec["image_n"] = n
        if n in self.refuse:
            return self._send(h, 400, {"error": {"message": "Your request was rejected by the safety system.",
                                                 "code": "moderation_blocked"}})
        self._send(h, 200, {"created": 1700000000 + n, "size": "1536x1024", "quality": "high", "output_format": "png",
                            "data": [{"b64_json": base64.b64encode(scene_png(n)).decode(),
                                      "revised_prompt": f"revised prompt {n}"}],
                            "usage": {"input_tokens": 50, "output_tokens": 4000, "total_tokens": 4050}})

    def images(self) -> int:
        return len(self.requests_to("POST /images/generations"))


def review(n_instances=12, quality=5, phrases=PHRASES, flags=()) -> dict:
    return {"phrases": list(phrases), "removed": ["toaster"], "added": ["lamp"],
            "instances": [{"phrase": phrases[k % len(phrases)], "box": [10 * k, 10, 40, 40]} for k in range(n_instances)],
            "quality": quality, "flags": list(flags)}


class Reviewer:
    """Answers by the generation call that made the image (read from its colour)."""

    def __init__(self, by_call: dict[int, object]):
        self.by_call = by_call

    def __call__(self, request):
        arr = np.asarray(Image.open(io.BytesIO(request.images[0].data)).convert("RGB"), dtype=float)
        c = arr[300:400, 600:700].reshape(-1, 3).mean(axis=0)
        n = min(self.by_call, key=lambda k: np.abs(np.array(colour(k)) - c).sum())
        return self.by_call[n]


@pytest.fixture
def fake():
    srv = FakeImages()
    yield srv
    srv.close()


def run(fake, out: Path, by_call: dict, count: int, gate: Gate | None = None, start: int = 0):
    endpoint = SourceEndpoint(GenConfig(model="img-gen-x", base_url=fake.base_url, api_key=KEY, size="1536x1024",
                                        quality="high", max_attempts=2, backoff_base_s=0.0, backoff_max_s=0.0))
    transport = MockTransport(Reviewer(by_call))
    client = JudgeClient(JudgeConfig(model="review-vlm", api_key=KEY, max_attempts=2, backoff_base_s=0.0,
                                     backoff_max_s=0.0), transport=transport)
    cfg = SourceConfig(subcategory="home_indoor", count=count, start=start, gate=gate or Gate())
    return run_source(out, cfg, endpoint, client), transport


def _prov(out: Path, where: str, iid: str) -> dict:
    return json.loads((out / where / iid / "provenance.json").read_text())


# ---------------------------------------------------------------- the gate, one rule at a time


def test_gate_instances(fake, tmp_path):
    s, _ = run(fake, tmp_path, {1: review(n_instances=10), 2: review(n_instances=9)}, 2)
    assert s["accepted"] == ["home_indoor_0000"] and s["rejected"] == ["home_indoor_0001"]
    assert _prov(tmp_path, "rejected", "home_indoor_0001")["reasons"] == ["instances: 9 < 10"]


def test_gate_quality(fake, tmp_path):
    s, _ = run(fake, tmp_path, {1: review(quality=4), 2: review(quality=3)}, 2)
    assert s["accepted"] == ["home_indoor_0000"] and s["rejected"] == ["home_indoor_0001"]
    assert _prov(tmp_path, "rejected", "home_indoor_0001")["reasons"] == ["quality: 3 < 4"]


def test_gate_usable_phrases(fake, tmp_path):
    # five phrases, but "sky" is background and "mugs" is "mug" again: three usable
    few = ["mug", "Mugs", "sky", "kettle", "bowl"]
    s, _ = run(fake, tmp_path, {1: review(phrases=PHRASES[:5]), 2: review(phrases=few)}, 2)
    assert s["accepted"] == ["home_indoor_0000"] and s["rejected"] == ["home_indoor_0001"]
    p = _prov(tmp_path, "rejected", "home_indoor_0001")
    assert p["reasons"] == ["usable phrases: 3 < 5"] and p["gate"]["usable_phrases"] == ["mug", "kettle", "bowl"]


def test_gate_flags(fake, tmp_path):
    s, _ = run(fake, tmp_path, {1: review(), 2: review(flags=["readable_text"])}, 2)
    assert s["accepted"] == ["home_indoor_0000"] and s["rejected"] == ["home_indoor_0001"]
    assert _prov(tmp_path, "rejected", "home_indoor_0001")["reasons"] == \
        ["flags: ['readable_text'] (at most 0 allowed)"]


def test_gate_thresholds_are_settable(fake, tmp_path):
    gate = Gate(min_instances=5, min_quality=2, min_phrases=2, max_flags=1)
    s, _ = run(fake, tmp_path, {1: review(n_instances=5, quality=2, phrases=["mug", "cup"], flags=["heavy_blur"])},
               1, gate)
    assert s["accepted"] == ["home_indoor_0000"]
    assert _prov(tmp_path, "accepted", "home_indoor_0000")["gate"]["min_instances"] == 5


# ---------------------------------------------------------------- provenance, normalisation, resume


def test_provenance_normalised_image_and_straight_into_build(fake, tmp_path):
    s, transport = run(fake, tmp_path, {1: review()}, 1, start=7)
    assert s["accepted"] == ["home_indoor_0007"]
    folder = tmp_path / "accepted" / "home_indoor_0007"
    with Image.open(folder / "image.jpg") as im:
        assert im.format == "JPEG" and im.mode == "RGB" and im.size == (1280, 720)
        arr = np.asarray(im, dtype=int)
    assert np.abs(arr[0] - colour(1)).max() < 12  # the red bands fell outside the 16:9 crop
    p = _prov(tmp_path, "accepted", "home_indoor_0007")
    assert p["variation_index"] == 7 and "Variation 7" in p["prompt"] and p["prompt_version"] == "opis-source-scene-v1"
    assert p["setting"] == "a child's bedroom"  # settings cycle: 7 mod 5 = 2 (the third)
    assert p["composition"].startswith("objects at three depths")  # variant 7 div 5 = 1 (the second)
    g = p["generation"]
    assert g["model"] == "img-gen-x" and g["n"] == 1 and g["size"] == "1536x1024" and g["quality"] == "high"
    assert g["original_size"] == [1536, 1024] and g["original_mode"] == "RGBA" and g["output_size"] == [1280, 720]
    assert g["response"]["revised_prompt"] == "revised prompt 1" and g["response"]["created"] == 1700000001
    assert g["calls"][0]["status"] == "ok" and g["api_key_set"] is True
    r = p["review"]
    assert r["model"] == "review-vlm" and r["parsed"]["removed"] == ["toaster"] and r["parsed"]["added"] == ["lamp"]
    assert p["gate"]["instance_count"] == 12 and p["gate"]["quality"] == 5 and p["decision"] == "accepted"
    body = fake.requests_to("POST /images/generations")[0]["body"]
    assert body["n"] == 1 and body["size"] == "1536x1024" and body["quality"] == "high"
    assert "at least 12" in body["prompt"] and "16:9" in body["prompt"]
    assert read_jsonl(tmp_path / "source_log.jsonl") == [
        {"id": "home_indoor_0007", "variation_index": 7, "decision": "accepted", "reasons": []}]
    # accepted images go straight into `opis build`, with the review's phrases as their vocabulary
    (src,) = discover_images(tmp_path / "accepted")
    assert src.id == "home_indoor_0007" and src.provenance["review"]["parsed"]["phrases"] == PHRASES


def test_rerun_redoes_only_failed_steps(fake, tmp_path):
    fake.refuse = {1}  # image 0: the endpoint refuses
    by_call = {2: "Looks like a nice kitchen to me, 4 out of 5.", 3: review()}  # image 1: review not in the contract
    s1, t1 = run(fake, tmp_path, by_call, 3)
    assert s1["generation_failed"] == ["home_indoor_0000"] and s1["review_failed"] == ["home_indoor_0001"]
    assert s1["accepted"] == ["home_indoor_0002"]
    p0 = _prov(tmp_path, "rejected", "home_indoor_0000")
    assert p0["reasons"][0].startswith("refused: ") and "safety system" in p0["reasons"][0]
    assert not (tmp_path / "rejected" / "home_indoor_0000" / "image.jpg").exists()
    p1 = _prov(tmp_path, "rejected", "home_indoor_0001")
    assert p1["decision"] == "review_failed" and p1["review"]["parsed"] is None  # never an accept
    first = (tmp_path / "rejected" / "home_indoor_0001" / "image.jpg").read_bytes()
    assert fake.images() == 3
    # rerun: image 0 is generated again (call 4), image 1 is only reviewed again, image 2 is left alone
    by_call.update({2: review(), 4: review()})
    s2, t2 = run(fake, tmp_path, by_call, 3)
    assert fake.images() == 4
    assert sorted(s2["accepted"]) == ["home_indoor_0000", "home_indoor_0001"] and s2["skipped"] == ["home_indoor_0002"]
    assert t2.count() == 2
    assert (tmp_path / "accepted" / "home_indoor_0001" / "image.jpg").read_bytes() == first
    assert not (tmp_path / "rejected" / "home_indoor_0001").exists()
    assert [r["decision"] for r in read_jsonl(tmp_path / "source_log.jsonl")] == \
        ["generation_failed", "review_failed", "accepted", "accepted", "accepted"]


def test_cli_key_in_no_file_and_unknown_subcategory(fake, tmp_path, monkeypatch):
    transport = MockTransport(Reviewer({1: review(n_instances=6), 2: review()}))
    monkeypatch.setattr(build_cli, "vlm_transport", lambda: transport)
    from worldeval.cli import app

    out = tmp_path / "src"
    res = CliRunner().invoke(app, ["opis", "source", "--subcategory", "home_indoor", "--count", "2", "--base-url",
                                   fake.base_url, "--gen-model", "img-gen-x", "--review-model", "review-vlm",
                                   "--api-key", KEY, "--out", str(out), "--min-instances", "8", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["accepted"] == ["home_indoor_0001"]
    assert fake.requests_to("POST /images/generations")[0]["auth"] == f"Bearer {KEY}"  # the key was used...
    for f in out.rglob("*"):
        if f.is_file():
            assert KEY.encode() not in f.read_bytes(), f  # ...and written nowhere
    bad = CliRunner().invoke(app, ["opis", "source", "--subcategory", "moon_base", "--count", "1", "--base-url",
                                   fake.base_url, "--gen-model", "g", "--review-model", "r", "--out", str(out)])
    assert bad.exit_code == 2 and "moon_base" in bad.output and "home_indoor" in bad.output
