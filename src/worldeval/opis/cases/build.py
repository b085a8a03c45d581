"""`opis build`: the OPIS construction pipeline (paper section 3.3) from a folder of images to a dataset.

Per image, each step recorded in `<dataset>/build_log.jsonl`:
1. read (an unreadable image is a named failure; the run goes on);
2. VLM screening: enough distinguishable objects? with proposed noun phrases
   and boxes (restricted to the source's own vocabulary when one is given);
3. phrase cleaning (`build_phrases`): background, stuff and incomplete phrases
   dropped, near-synonyms and subsumed phrases merged;
4. segmentation (`build_segment`): SAM 3 concept queries over rounds (hf), or
   the classical fallback, GrabCut from the VLM's boxes;
5. labels: kinematics and track as the VLM proposed them, overridable per concept;
6. task specification: camera trajectory and prompt drafted by the VLM from the inventory;
7. the case (`annotate.assemble_case`): IoU de-duplication across phrases and
   rounds, exclusive masks, ids, reference embeddings, geometry (the backend's
   depth model when asked for and configured, else flat -- recorded), case.json.

Resumable: an image whose last record is `accepted` (its case.json present) or
`rejected` (a screening decision) is not redone; a `failed` one is. VLM answers
are cached in `<dataset>/.build/vlm_cache.sqlite`, so redoing a later step does
not ask the VLM again for an answer it already gave.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from worldeval.geometry import mask_bbox
from worldeval.judge.client import JudgeClient
from worldeval.media import read_image
from worldeval.opis.backends.base import Backend
from worldeval.opis.backends.registry import BackendNotFound, resolve
from worldeval.opis.cases.buildlog import LOG_NAME, BuildError, image_states, write_dataset_json
from worldeval.opis.cases.annotate import AnnotateError, AnnotateSpec, ObjectPrompt, assemble_case, estimated_geometry, \
    remove_duplicates, resize_max_side
from worldeval.opis.cases.phrases import clean_phrases, concept_map, normalize
from worldeval.opis.cases.review import write_review_page
from worldeval.opis.cases.segment import concept_rounds, grabcut_from_boxes
from worldeval.opis.cases.vlm import BOX_FORMATS, BuildStepError, propose_task, screen_image, vlm_clean
from worldeval.opis.case import DEFAULT_FPS, Geometry
from worldeval.opis.evaluate import load_backend
from worldeval.opis.labels import KINEMATICS, TRACKS
from worldeval.runs import append_jsonl, read_jsonl

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp")
@dataclass
class BuildConfig:
    backend: str = "classical"  # classical: GrabCut from VLM boxes; hf (or any registered backend): concept rounds
    backend_options: dict = field(default_factory=dict)
    device: str = "cpu"
    vocabulary: list[str] | None = None
    min_objects: int = 3
    max_objects: int = 40
    box_format: str = "xywh"  # how the VLM writes boxes (build_vlm.BOX_FORMATS)
    rounds: int = 3
    dedup_iou: float = 0.8
    kinematics: dict[str, str] = field(default_factory=dict)  # concept -> label (overrides the VLM)
    track: dict[str, str] = field(default_factory=dict)
    depth: str | None = None  # "model": the backend's depth estimator; None: flat scaffold
    domain: str = "real_world"
    subcategory: str = "unspecified"
    duration_s: float = 10.0
    fps: float = DEFAULT_FPS
    max_side: int | None = 1280
    grabcut_iters: int = 5
    seed: int = 0
    review: bool = False
    vlm_clean: bool = False  # a VLM pass over the rule-cleaned phrases (the paper's VLM-assisted cleaning)

    def check(self) -> "BuildConfig":
        if self.backend != "classical":
            try:
                resolve(self.backend)
            except BackendNotFound as exc:
                raise BuildError("--backend", "backend", str(exc)) from exc
        for name, table, allowed in (("--kinematics", self.kinematics, KINEMATICS), ("--track", self.track, TRACKS)):
            for concept, label in table.items():
                if label not in allowed:
                    raise BuildError(name, concept, f"{label!r} is not one of {allowed}")
        self.kinematics = {normalize(k): v for k, v in self.kinematics.items()}
        self.track = {normalize(k): v for k, v in self.track.items()}

        if self.box_format not in BOX_FORMATS:
            raise BuildError("--box-format", "box_format", f"{self.box_format!r}: choose from {sorted(BOX_FORMATS)}")
        if not 0 < self.dedup_iou <= 1:
            raise BuildError("--dedup-iou", "dedup_iou", "must be in (0, 1]")
        return self

    def public(self) -> dict:
        return asdict(self)


@dataclass
class SourceImage:
    id: str
    path: Path
    provenance: dict | None = None  # `opis source` provenance.json beside the image


def case_id_for(name: str) -> str:
    cid = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "case"
    return cid


def _provenance(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise BuildError(path, "provenance", f"cannot read: {exc}") from exc
    if not isinstance(data, dict):
        raise BuildError(path, "provenance", "must be a JSON object")
    return data


def discover_images(inputs: str | Path) -> list[SourceImage]:
    """A list file (one path per line, relative to the file), a folder of images, or a folder of
    `<id>/image.*` folders as `opis source` writes them (their provenance.json is read too)."""
    root = Path(inputs)
    if root.is_file():
        paths = [(root.parent / line.strip()) for line in root.read_text(encoding="utf-8").splitlines()
                 if line.strip() and not line.lstrip().startswith("#")]
        found = [SourceImage(case_id_for(p.stem), p) for p in paths]
    elif root.is_dir():
        found = [SourceImage(case_id_for(p.stem), p) for p in sorted(root.iterdir())
                 if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES]
        for sub in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
            imgs = sorted(q for q in sub.iterdir() if q.stem == "image" and q.suffix.lower() in IMAGE_SUFFIXES)
            if imgs:
                prov = sub / "provenance.json"
                found.append(SourceImage(case_id_for(sub.name), imgs[0], _provenance(prov) if prov.exists() else None))
    else:
        raise BuildError(root, "IMAGES", "not found: give a folder of images or a list file")
    seen: Counter = Counter()
    for s in found:
        seen[s.id] += 1
        if seen[s.id] > 1:
            s.id = f"{s.id}_{seen[s.id]}"
    return found


# ---------------------------------------------------------------- one image


class _Log:
    def __init__(self, out: Path, image_id: str):
        self.path, self.image_id = out / LOG_NAME, image_id

    def __call__(self, step: str, **fields: Any) -> None:
        append_jsonl(self.path, {"image": self.image_id, "step": step, **fields})


def _vocabulary(src: SourceImage, cfg: BuildConfig) -> list[str] | None:
    """The source's own noun phrases: --vocabulary first, else the phrases `opis source`'s review kept."""
    if cfg.vocabulary:
        return list(cfg.vocabulary)
    review = (src.provenance or {}).get("review") or {}
    phrases = (review.get("parsed") or {}).get("phrases")
    return [str(p) for p in phrases] if isinstance(phrases, list) and phrases else None


def _labels(concept: str, proposals: list, cfg: BuildConfig) -> tuple[str, str, str]:
    """(kinematics, track, where they came from) for one instance of `concept`."""
    kin = Counter(p.kinematics for p in proposals).most_common(1)[0][0] if proposals else "rigid"
    moves = [p.moves for p in proposals if p.moves is not None]
    track = None if not moves else ("dynamic" if Counter(moves).most_common(1)[0][0] else "static")
    source = "vlm" if proposals else "default"
    if concept in cfg.kinematics:
        kin, source = cfg.kinematics[concept], "override"
    if concept in cfg.track:
        track, source = cfg.track[concept], "override"
    track = track or ("static" if kin == "rigid" else "dynamic")
    return kin, track, source


def _proposed(objects: list, vocab: list[str] | None, concept_queries: bool) -> list[str]:
    """The phrases to clean: the VLM's, within the source vocabulary when there is one; concept
    queries (which need no box) also ask for vocabulary phrases the VLM did not name."""
    proposed = list(dict.fromkeys(o.phrase for o in objects))
    if not vocab:
        return proposed
    allowed = {normalize(v) for v in vocab}
    named = {normalize(p) for p in proposed}
    return [p for p in proposed if normalize(p) in allowed] + \
        ([v for v in vocab if normalize(v) not in named] if concept_queries else [])


def _by_concept(objects: list, mapping: dict) -> dict[str, list]:
    by: dict[str, list] = {}
    for o in objects:
        if mapping.get(o.phrase):
            by.setdefault(mapping[o.phrase], []).append(o)
    return by


def _label_record(concepts: list[str], objects: list, mapping: dict, cfg: BuildConfig) -> list[dict]:
    """Per concept: the majority kinematics and track, and whether they came from the VLM, an override or the default."""
    by = _by_concept(objects, mapping)
    out = []
    for c in concepts:
        kin, track, source = _labels(c, by.get(c, []), cfg)
        out.append({"concept": c, "kinematics": kin, "track": track, "source": source})
    return out


def _prompts(objects: list, mapping: dict[str, str | None], cfg: BuildConfig) -> list[ObjectPrompt]:
    prompts = []
    for o in objects:
        concept = mapping.get(o.phrase)
        if concept is None:
            continue
        kin, track, _ = _labels(concept, [o], cfg)
        prompts.append(ObjectPrompt(phrase=concept, box=o.box, kinematics=kin, track=track))
    return prompts


def _segment(image: np.ndarray, prompts: list[ObjectPrompt], concepts: list[str], objects: list,
             mapping: dict, cfg: BuildConfig, backend: Any, log: _Log) -> tuple[list, list]:
    if backend is None:
        cands, failures = grabcut_from_boxes(image, prompts, cfg.grabcut_iters, cfg.seed)
        log("segment", method="grabcut from VLM boxes (classical fallback: no concept segmentation)",
            prompts=len(prompts), masks=len(cands), failures=failures)
        return cands, failures
    found, rounds = concept_rounds(backend.segmenter, image, concepts, cfg.rounds, cfg.dedup_iou)
    by_concept = _by_concept(objects, mapping)
    cands = []
    for concept, mask, score, r in found:
        kin, track, _ = _labels(concept, by_concept.get(concept, []), cfg)
        cands.append((ObjectPrompt(phrase=concept, box=mask_bbox(mask), kinematics=kin, track=track), mask,
                      f"{backend.segmenter.name}:round{r}"))
    log("segment", method=f"concept segmentation ({backend.segmenter.name}), up to {cfg.rounds} rounds",
        concepts=concepts, rounds=rounds, masks=len(cands))
    return cands, []


def _task(client: JudgeClient, image: np.ndarray, cands: list, cfg: BuildConfig, log: _Log) -> dict:
    kept, _ = remove_duplicates([m for _, m, _ in cands], cfg.dedup_iou)
    inventory = [{"id": f"obj_{n + 1:03d}", "category": cands[i][0].phrase, "bbox": mask_bbox(cands[i][1])}
                 for n, i in enumerate(kept)]
    task = propose_task(client, image, inventory, cfg.duration_s)
    log("task", **task)
    return task


def _geometry(image: np.ndarray, cfg: BuildConfig, backend: Backend | None) -> tuple[Geometry, str] | None:
    """Depth from the backend's already loaded depth model (None: assemble_case's own chain, else flat)."""
    est = backend.depth if backend is not None and cfg.depth == "model" else None
    if est is None:
        return None
    geometry, source = estimated_geometry(est, image)
    return None if geometry is None else (geometry, source)


def _read(src: SourceImage, cfg: BuildConfig) -> tuple[np.ndarray, float]:
    try:
        image = read_image(src.path)
    except ValueError as exc:
        raise BuildStepError(src.path, "image", f"unreadable image: {exc}") from exc
    return resize_max_side(np.ascontiguousarray(image[..., :3]), cfg.max_side)


def build_one(src: SourceImage, out: Path, cfg: BuildConfig, client: JudgeClient, backend: Backend | None = None,
              embedder: Any = None) -> str:
    """Build one case; returns its status (accepted | rejected). Failures raise BuildStepError/AnnotateError."""
    log = _Log(out, src.id)
    image, scale = _read(src, cfg)
    H, W = image.shape[:2]
    log("read", source=str(src.path), size=[W, H], scale=round(scale, 6))
    vocab = _vocabulary(src, cfg)
    shot = screen_image(client, image, cfg.min_objects, vocab, cfg.max_objects, cfg.box_format)
    log("screen", suitable=shot.suitable, reason=shot.reason, objects=[asdict(o) for o in shot.objects],
        vocabulary=vocab, request_hash=shot.request_hash)
    if not shot.suitable:
        return _reject(log, f"screening: {shot.reason or 'not enough distinguishable objects'}")
    concepts, decisions = clean_phrases(_proposed(shot.objects, vocab, backend is not None))
    mapping = concept_map(decisions)
    records = [d.record() for d in decisions]
    if cfg.vlm_clean and concepts:
        concepts, target, extra = vlm_clean(client, image, concepts)
        mapping = {p: (target.get(c) if c is not None else None) for p, c in mapping.items()}
        records += extra
    log("phrases", concepts=concepts, decisions=records)
    log("labels", concepts=_label_record(concepts, shot.objects, mapping, cfg))
    prompts = _prompts(shot.objects, mapping, cfg)
    n_objects = len(prompts) if backend is None else len(concepts)
    if backend is None and n_objects < cfg.min_objects:
        return _reject(log, f"{n_objects} objects left after phrase cleaning (need {cfg.min_objects})")
    cands, failures = _segment(image, prompts, concepts, shot.objects, mapping, cfg, backend, log)
    if not cands:
        raise BuildStepError("segment", "masks", "no phrase or box produced a usable mask")
    task = _task(client, image, cands, cfg, log)
    geometry = _geometry(image, cfg, backend)
    sub = (src.provenance or {}).get("subcategory") or cfg.subcategory
    spec = AnnotateSpec(objects=[], case_id=src.id, domain=cfg.domain, subcategory=sub,
                        instruction=task["instruction"], camera=task["camera"], camera_amount=task["amount"],
                        duration_s=cfg.duration_s, fps=cfg.fps, segmenter="grabcut" if backend is None else cfg.backend,
                        dedup_iou=cfg.dedup_iou, seed=cfg.seed, depth=cfg.depth if geometry is None else None)
    annotation = {"tool": "worldeval opis build", "phrases_from": f"vlm:{client.config.model}"
                  + (" (source vocabulary)" if vocab else ""), "scale": round(scale, 6),
                  "concepts": concepts, "source_image": src.path.name}
    case_json = assemble_case(image, spec, cands, out / src.id, annotation, failures, device=cfg.device,
                              geometry=geometry, embedder=embedder, backend_options=cfg.backend_options)
    written = json.loads(case_json.read_text(encoding="utf-8"))
    ann = written["annotation"]
    log("case", instances=[{k: i[k] for k in ("id", "category", "kinematics", "track", "bbox")}
                           for i in written["instances"]],
        dropped_duplicates=ann["dropped_duplicates"], failed_prompts=ann["failed_prompts"], geometry=ann["geometry"])
    if cfg.review:
        write_review_page(out, src.id, decisions=records)
    log("done", status="accepted", reason="")
    return "accepted"


def _reject(log: _Log, reason: str) -> str:
    log("done", status="rejected", reason=reason)
    return "rejected"


def make_backend(cfg: BuildConfig) -> Backend | None:
    """The backend whose segmenter answers the concept queries (hf: SAM 3, from --backend-option model
    folders; or any backend the registry resolves); None for classical, which has no concept segmenter."""
    if cfg.backend == "classical":
        return None

    try:
        return load_backend(cfg.backend, device=cfg.device, **cfg.backend_options)
    except Exception as exc:
        raise BuildError("--backend-option", cfg.backend, f"cannot load the {cfg.backend} backend: {exc}") from exc


def make_embedder(cfg: BuildConfig, backend: Backend | None) -> Any:
    """The evaluator's embedder, loaded once per run (the hf backend's DINO, else the classical one)."""
    if backend is not None:
        return backend.embedder
    try:
        return load_backend("classical", device=cfg.device).embedder
    except Exception:
        return None  # the case is written without reference embeddings; the evaluator computes its own


def _finished(out: Path, state: dict | None, src: SourceImage) -> bool:
    status = (state or {}).get("status")
    return status == "rejected" or (status == "accepted" and (out / src.id / "case.json").exists())


def _review_missing(out: Path, src: SourceImage) -> None:
    """`--review` on an already built case: write its page from the logged phrase decisions."""
    if (out / src.id / "case.json").exists() and not (out / "review" / f"{src.id}.html").exists():
        phrases = [r for r in read_jsonl(out / LOG_NAME) if r.get("image") == src.id and r.get("step") == "phrases"]
        write_review_page(out, src.id, decisions=phrases[-1]["decisions"] if phrases else [])


def build_dataset(inputs: str | Path, out: str | Path, cfg: BuildConfig, client: JudgeClient,
                  progress: Callable[[str], None] | None = None, workers: int = 1) -> dict:
    """Run the pipeline over every image not already finished; returns a summary (in input order).

    With `workers` > 1 images are built in threads sharing the VLM client (its concurrency
    limit applies) and the backend; GrabCut is seeded per prompt, so results do not depend on it.
    """
    import threading
    from concurrent.futures import ThreadPoolExecutor

    cfg.check()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    sources = discover_images(inputs)
    backend = make_backend(cfg)
    append_jsonl(out / LOG_NAME, {"step": "run", "images": len(sources), "config": cfg.public(), "workers": workers,
                                  "vlm": client.config.public()})
    states = image_states(out)
    todo = [src for src in sources if not _finished(out, states.get(src.id), src)]
    todo_ids = {src.id for src in todo}
    summary: dict[str, list] = {"accepted": [], "rejected": [], "failed": [],
                                "skipped": [src.id for src in sources if src.id not in todo_ids]}
    if cfg.review:
        for src in sources:
            if src.id not in todo_ids and states.get(src.id, {}).get("status") == "accepted":
                _review_missing(out, src)
    embedder = make_embedder(cfg, backend) if todo else None
    lock = threading.Lock()

    def one(src: SourceImage) -> tuple[str, Any]:
        if progress:
            progress(src.id)
        try:
            status = build_one(src, out, cfg, client, backend, embedder)
        except (BuildStepError, AnnotateError, BuildError) as exc:
            file, field, reason = exc.file, exc.field, exc.reason
        except Exception as exc:  # a model or library failure on one image must not end a thousand-image run
            file, field, reason = str(src.path), "internal", f"{type(exc).__name__}: {exc}"
        else:
            with lock:
                write_dataset_json(out)
            return status, src.id
        _Log(out, src.id)("done", status="failed", file=file, field=field, reason=reason)
        return "failed", {"image": src.id, "file": file, "field": field, "reason": reason}

    if workers > 1 and len(todo) > 1:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(one, todo))
    else:
        results = [one(src) for src in todo]
    for status, item in results:
        summary[status].append(item)
    write_dataset_json(out)
    return summary
