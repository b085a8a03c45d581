"""`opis source`: AI-generated initial images behind a VLM review gate (OPIS Appendix F.2).

For image k of a subcategory the reusable template fills in a setting and a
composition variant (cycled by k) and the variation index k itself, which
asks for a different place and layout each time. The request is one image
(n=1) through an OpenAI-compatible images endpoint (`worldeval.generator`'s
client, retries included); the answer is converted to RGB, centre-cropped to
16:9 and resized to 1280x720, and stored as JPEG.

A VLM (through the judge client) then reviews the stored image and returns
one JSON object: the final lower-case noun phrases of concrete foreground
objects, the phrases it removed from or added to the template's candidate
list, one entry per visible foreground instance, a quality score 1-5 and
quality flags. The gate keeps an image only when the review reports at least
`min_instances` instances, quality at least `min_quality`, at least
`min_phrases` usable phrases (after `opis build`'s phrase cleaning) and at
most `max_flags` flags (defaults 10, 4, 5, 0).

Layout: `DIR/accepted/<id>/` and `DIR/rejected/<id>/` each hold `image.jpg`
(absent when nothing was generated) and `provenance.json`;
`DIR/source_log.jsonl` has one line per image and run. Resuming: an accepted
or gated-out image is final; a failed review is asked again on the stored
image (an image once generated is never generated again); a failed or
refused generation is requested again.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from worldeval.errors import InputError
from worldeval.generator import CallLedger, GenEndpoint, GenError, first_image
from worldeval.judge import JudgeImage
from worldeval.judge.parse import AnswerError
from worldeval.opis.cases.phrases import clean_phrases
from worldeval.runs import append_jsonl, atomic_write_bytes, atomic_write_json

from worldeval.opis.cases.source_templates import (
    PROMPT_VERSION, REVIEW_VERSION, SUBCATEGORIES, review_prompt, scene_prompt,
)

OUT_SIZE = (1280, 720)
FINAL = ("accepted", "rejected")


class SourceError(InputError):
    """Bad `opis source` input (subcategory, options); names the option and the field."""


@dataclass
class Gate:
    min_instances: int = 10
    min_quality: int = 4
    min_phrases: int = 5
    max_flags: int = 0

    def decide(self, review: dict) -> tuple[bool, list[str], list[str]]:
        """(passed, reasons it failed, usable phrases) for a parsed review."""
        usable, _ = clean_phrases(review["phrases"])
        reasons = []
        if len(review["instances"]) < self.min_instances:
            reasons.append(f"instances: {len(review['instances'])} < {self.min_instances}")
        if review["quality"] < self.min_quality:
            reasons.append(f"quality: {review['quality']} < {self.min_quality}")
        if len(usable) < self.min_phrases:
            reasons.append(f"usable phrases: {len(usable)} < {self.min_phrases}")
        if len(review["flags"]) > self.max_flags:
            reasons.append(f"flags: {review['flags']} (at most {self.max_flags} allowed)")
        return not reasons, reasons, usable


def check_review(obj: dict) -> dict:
    """The review contract; anything else is an AnswerError (retried, then a failed review)."""
    for key in ("phrases", "removed", "added", "instances", "flags"):
        if not isinstance(obj.get(key), list):
            raise AnswerError(f"'{key}' must be a list")
    for key in ("phrases", "removed", "added", "flags"):
        if not all(isinstance(v, str) for v in obj[key]):
            raise AnswerError(f"'{key}' must hold strings")
    for k, inst in enumerate(obj["instances"]):
        if not isinstance(inst, dict) or not isinstance(inst.get("phrase"), str):
            raise AnswerError(f"instances[{k}] must be an object with a string 'phrase'")
    q = obj.get("quality")
    if not isinstance(q, int) or isinstance(q, bool) or not 1 <= q <= 5:
        raise AnswerError("'quality' must be an integer from 1 to 5")
    obj["phrases"] = [p.strip().lower() for p in obj["phrases"] if p.strip()]
    return obj


def normalise_image(data: bytes) -> tuple[bytes, list[int], str]:
    """(1280x720 RGB JPEG bytes, original [W, H], original mode): centre crop to 16:9, then resize."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        size, mode = [im.width, im.height], im.mode
        rgb = im.convert("RGB")
    W, H = rgb.size
    tw, th = OUT_SIZE
    if W * th > H * tw:  # wider than 16:9
        cw = round(H * tw / th)
        rgb = rgb.crop(((W - cw) // 2, 0, (W - cw) // 2 + cw, H))
    else:
        ch = round(W * th / tw)
        rgb = rgb.crop((0, (H - ch) // 2, W, (H - ch) // 2 + ch))
    rgb = rgb.resize(OUT_SIZE, Image.LANCZOS)
    buf = io.BytesIO()
    rgb.save(buf, format="JPEG", quality=95)
    return buf.getvalue(), size, mode


class SourceEndpoint(GenEndpoint):
    """Text-to-image with n=1, keeping the answer's metadata for provenance."""

    def generate(self, prompt: str, ledger: CallLedger, purpose: str) -> tuple[bytes, dict]:
        client = self._openai()
        meta: dict[str, Any] = {}

        def call():
            resp = client.images.generate(model=self.config.model, prompt=prompt, n=1, **self._options())
            item = first_image(resp)
            meta.clear()
            meta.update({k: getattr(resp, k, None) for k in ("created", "output_format", "quality", "size",
                                                              "background")})
            meta["revised_prompt"] = getattr(item, "revised_prompt", None)
            usage = getattr(resp, "usage", None)
            meta["usage"] = usage.model_dump() if hasattr(usage, "model_dump") else usage
            return self._image_from(item, "images/generations")
        data = self._submit(ledger, "images.generate", purpose, call)
        return data, {k: v for k, v in meta.items() if v is not None}


@dataclass
class SourceConfig:
    subcategory: str
    count: int
    start: int = 0
    gate: Gate = field(default_factory=Gate)


def image_id(subcategory: str, index: int) -> str:
    return f"{subcategory}_{index:04d}"


def _existing(out: Path, iid: str) -> tuple[Path | None, dict | None]:
    """The folder holding this image's provenance (accepted first) and the provenance itself."""
    for where in ("accepted", "rejected"):
        p = out / where / iid / "provenance.json"
        if p.exists():
            return p.parent, json.loads(p.read_text(encoding="utf-8"))
    return None, None


def _place(out: Path, iid: str, where: str, prov: dict, current: Path | None) -> Path:
    """Move the image folder to `where` (accepted/rejected) and write its provenance there."""
    target = out / where / iid
    if current is not None and current != target:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(target, ignore_errors=True)
        shutil.move(str(current), str(target))
    atomic_write_json(target / "provenance.json", prov)
    return target


def _generate(out: Path, iid: str, prov: dict, endpoint: SourceEndpoint) -> Path:
    """Generate, normalise and store the image (in rejected/ until a review passes); GenError on failure."""
    ledger = CallLedger()
    try:
        data, meta = endpoint.generate(prov["prompt"], ledger, iid)
    finally:
        prov["generation"]["calls"] = ledger.calls
    jpeg, size, mode = normalise_image(data)
    prov["generation"].update(response=meta, original_size=size, original_mode=mode, output_size=list(OUT_SIZE),
                              output_format="jpeg", sha256=hashlib.sha256(jpeg).hexdigest(), error=None)
    folder = out / "rejected" / iid
    atomic_write_bytes(folder / "image.jpg", jpeg)
    return folder


def _review(folder: Path, prov: dict, client: Any, gate: Gate) -> tuple[str, list[str]]:
    image = JudgeImage((folder / "image.jpg").read_bytes(), "image/jpeg", "candidate")
    answer = client.ask_json([review_prompt(prov["candidates"]), image], validator=check_review,
                             prefer_key="quality", cache_extra={"contract": REVIEW_VERSION})
    prov["review"] = {"model": client.config.model, "prompt_version": REVIEW_VERSION, "raw": answer.raw,
                      "parsed": answer.parsed, "attempts": answer.attempts, "request_hash": answer.request_hash,
                      "error": answer.error}
    if not answer.ok:
        return "review_failed", [f"review failed: {answer.error}"]
    passed, reasons, usable = gate.decide(answer.parsed)
    prov["gate"] = {**asdict(gate), "passed": passed, "reasons": reasons, "usable_phrases": usable,
                    "instance_count": len(answer.parsed["instances"]), "quality": answer.parsed["quality"],
                    "flags": answer.parsed["flags"]}
    return ("accepted" if passed else "rejected"), reasons


def _is_refusal(message: str) -> bool:
    """A request the endpoint declined (content policy): HTTP 400 or a safety/moderation message."""
    low = message.lower()
    return "http 400" in low or any(w in low for w in ("moderation", "safety", "content policy", "refus"))


def source_one(out: Path, cfg: SourceConfig, index: int, endpoint: SourceEndpoint, client: Any) -> dict:
    """Generate (unless already generated), review (unless already decided) and gate image `index`."""
    iid = image_id(cfg.subcategory, index)
    folder, prov = _existing(out, iid)
    if prov is not None and prov.get("decision") in FINAL:
        return {"id": iid, "variation_index": index, "decision": "skipped", "reasons": [prov["decision"]]}
    if prov is None or folder is None or not (folder / "image.jpg").exists():
        prov = {"image_id": iid, "subcategory": cfg.subcategory, **scene_prompt(cfg.subcategory, index),
                "generation": {**endpoint.config.public(), "n": 1}}
        try:
            folder = _generate(out, iid, prov, endpoint)
        except GenError as exc:
            reason = (f"refused: {exc}" if _is_refusal(str(exc)) else str(exc))
            prov["generation"]["error"] = reason
            prov.update(decision="generation_failed", reasons=[reason])
            _place(out, iid, "rejected", prov, folder)
            return {"id": iid, "variation_index": index, "decision": "generation_failed", "reasons": [reason]}
    decision, reasons = _review(folder, prov, client, cfg.gate)
    prov.update(decision=decision, reasons=reasons)
    _place(out, iid, "accepted" if decision == "accepted" else "rejected", prov, folder)
    return {"id": iid, "variation_index": index, "decision": decision, "reasons": reasons}


def run_source(out: str | Path, cfg: SourceConfig, endpoint: SourceEndpoint, client: Any) -> dict:
    if cfg.subcategory not in SUBCATEGORIES:
        raise SourceError("--subcategory", "subcategory",
                          f"{cfg.subcategory!r} has no template; known: {', '.join(sorted(SUBCATEGORIES))}")
    if cfg.count < 1 or cfg.start < 0:
        raise SourceError("--count", "count", "must be at least 1 (and --start at least 0)")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, list] = {"accepted": [], "rejected": [], "review_failed": [], "generation_failed": [],
                                "skipped": []}
    for index in range(cfg.start, cfg.start + cfg.count):
        rec = source_one(out, cfg, index, endpoint, client)
        summary[rec["decision"]].append(rec["id"])
        if rec["decision"] != "skipped":
            append_jsonl(out / "source_log.jsonl", rec)
    return summary
