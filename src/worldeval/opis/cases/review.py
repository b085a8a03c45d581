"""Human review of built cases: one HTML page per case, and applying the reviewer's decisions.

`opis build --review` writes `<dataset>/review/<case>.html` (the image with
every mask outlined and numbered, one crop per instance with its phrase,
kinematics and track, the phrase-cleaning decisions and the task) and keeps
`<dataset>/review/decisions.json`, a template with one `accept` per case.

`opis build --out DATASET --apply-review FILE` reads
`{"<case id>": {"decision": "accept" | "reject" | "edit", ...}}`; an edit may
carry `drop` (instance ids), `category`, `kinematics`, `track` (id -> value)
and `instruction`. A rejected case leaves `dataset.json` and moves to
`<dataset>/.build/rejected/`; an edited case is rewritten and loaded again
(so an edit cannot leave a broken case). Every decision goes to the build log.
"""

from __future__ import annotations

import html
import json
import shutil
from pathlib import Path

import numpy as np

from worldeval.errors import CaseError
from worldeval.opis.cases.buildlog import LOG_NAME, BuildError, write_dataset_json
from worldeval.opis.case import load_case, read_json
from worldeval.opis.labels import KINEMATICS, TRACKS
from worldeval.runs import append_jsonl, atomic_write_json, atomic_write_text
from worldeval.thumbnails import downscale, jpeg_data_uri

DECISIONS = ("accept", "reject", "edit")
PALETTE = [(230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48), (145, 30, 180),
           (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 212)]


def _overlay(image: np.ndarray, masks: list[np.ndarray]) -> np.ndarray:
    import cv2

    out = image.copy()
    for k, m in enumerate(masks):
        color = PALETTE[k % len(PALETTE)]
        out[m] = (0.55 * out[m] + 0.45 * np.array(color)).astype(np.uint8)
        contours, _ = cv2.findContours(m.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
        cv2.drawContours(out, contours, -1, color, 2)
        ys, xs = np.nonzero(m)
        cv2.putText(out, str(k + 1), (int(xs.mean()), int(ys.mean())), cv2.FONT_HERSHEY_SIMPLEX, 0.6, (255, 255, 255), 2)
    return out


def _crop(image: np.ndarray, mask: np.ndarray, bbox: list[float]) -> np.ndarray:
    x, y, w, h = (int(round(v)) for v in bbox)
    crop = image[y:y + h, x:x + w].copy()
    crop[~mask[y:y + h, x:x + w]] //= 3  # dim what the mask leaves out
    return downscale(crop, 160)[0]


def write_review_page(out: Path, case_id: str, decisions: list[dict]) -> Path:
    case = load_case(out / case_id, with_geometry=False)
    esc = html.escape
    ids = [i.id for i in case.instances]
    big = downscale(_overlay(case.image, [case.masks[i] for i in ids]), 960)[0]
    rows = "".join(
        f"<figure><img src='{jpeg_data_uri(_crop(case.image, case.masks[i.id], i.bbox))}'>"
        f"<figcaption>{k + 1}. {esc(i.id)}: <b>{esc(i.category)}</b><br>{esc(i.kinematics)}, {esc(i.track)}"
        "</figcaption></figure>" for k, i in enumerate(case.instances))
    phrases = "".join(f"<tr><td>{esc(str(d['phrase']))}</td><td>{esc(d['action'])}</td>"
                      f"<td>{esc(str(d.get('concept') or ''))}</td><td>{esc(d.get('reason', ''))}</td></tr>"
                      for d in decisions)
    cam = case.spec.camera()
    page = (
        f"<!doctype html><meta charset='utf-8'><title>review {esc(case_id)}</title>"
        "<style>body{font-family:sans-serif;margin:1em}figure{display:inline-block;margin:4px;width:170px}"
        "td,th{border:1px solid #ccc;padding:2px 6px}table{border-collapse:collapse}</style>"
        f"<h1>{esc(case_id)}</h1><p>{len(ids)} instances; {esc(case.spec.domain)} / {esc(case.spec.subcategory)}</p>"
        f"<img src='{jpeg_data_uri(big)}'><h2>Instances</h2>{rows}"
        f"<h2>Phrases</h2><table><tr><th>proposed</th><th>action</th><th>concept</th><th>why</th></tr>{phrases}</table>"
        f"<h2>Task</h2><p><b>Camera:</b> {esc(cam.description)} ({len(cam.keyframes)} keyframes over "
        f"{cam.duration_s:g} s)</p><p><b>Prompt:</b> {esc(case.spec.instruction)}</p>"
        "<p>Decide in review/decisions.json: accept, reject, or edit (drop, category, kinematics, track, instruction).</p>"
    )
    path = atomic_write_text(out / "review" / f"{case_id}.html", page)
    template = out / "review" / "decisions.json"
    current = json.loads(template.read_text(encoding="utf-8")) if template.exists() else {}
    current.setdefault(case_id, {"decision": "accept"})
    atomic_write_json(template, current)
    return path


def _check_decision(path: Path, case_id: str, d: dict) -> dict:
    if not isinstance(d, dict) or d.get("decision") not in DECISIONS:
        raise BuildError(path, f"{case_id}.decision", f"must be one of {DECISIONS}")
    for key, allowed in (("kinematics", KINEMATICS), ("track", TRACKS)):
        for iid, label in (d.get(key) or {}).items():
            if label not in allowed:
                raise BuildError(path, f"{case_id}.{key}.{iid}", f"{label!r} is not one of {allowed}")
    return d


def _edit_case(out: Path, case_id: str, d: dict, path: Path) -> dict:
    cj = out / case_id / "case.json"
    raw = read_json(cj)
    known = {i["id"] for i in raw["instances"]}
    named = set(d.get("drop") or []) | set(d.get("category") or {}) | set(d.get("kinematics") or {}) \
        | set(d.get("track") or {})
    if named - known:
        raise BuildError(path, f"{case_id}", f"unknown instance id(s) {sorted(named - known)}; the case has {sorted(known)}")
    raw["instances"] = [i for i in raw["instances"] if i["id"] not in set(d.get("drop") or [])]
    if not raw["instances"]:
        raise BuildError(path, f"{case_id}.drop", "an edit cannot drop every instance (reject the case instead)")
    for inst in raw["instances"]:
        for key in ("category", "kinematics", "track"):
            if inst["id"] in (d.get(key) or {}):
                inst[key] = str(d[key][inst["id"]])
    if d.get("instruction"):
        raw["instruction"] = str(d["instruction"])
    ids = [i["id"] for i in raw["instances"]]
    emb = raw.get("reference_embeddings")
    if emb and emb.get("order") != ids:  # embeddings of dropped instances go with them
        vecs = np.load(out / case_id / emb["file"])
        np.save(out / case_id / emb["file"], vecs[[emb["order"].index(i) for i in ids]])
        emb["order"] = ids
    raw.setdefault("annotation", {})["review"] = {"decision": "edit", "edits": d, "file": path.name}
    atomic_write_json(cj, raw)
    try:
        load_case(out / case_id)
    except CaseError as exc:
        raise BuildError(path, case_id, f"the edit leaves an invalid case: {exc}") from exc
    return {"instances": len(ids)}


def apply_review_file(out: str | Path, path: str | Path) -> dict:
    """Apply every decision in `path` to the dataset `out`; returns {case id: what happened}."""
    out, path = Path(out), Path(path)
    decisions = read_json(path)
    if not isinstance(decisions, dict):
        raise BuildError(path, "decisions", "must be a JSON object {case id: decision}")
    result: dict[str, dict] = {}
    for case_id, d in sorted(decisions.items()):
        d = _check_decision(path, case_id, d)
        if not (out / case_id / "case.json").exists():
            raise BuildError(path, case_id, f"no such case in {out}")
        info: dict = {"decision": d["decision"]}
        if d["decision"] == "reject":
            target = out / ".build" / "rejected" / case_id
            shutil.rmtree(target, ignore_errors=True)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(out / case_id), str(target))
            append_jsonl(out / LOG_NAME, {"image": case_id, "step": "done", "status": "rejected",
                                          "reason": f"human review ({path.name}): {d.get('reason', 'rejected')}"})
        else:
            if d["decision"] == "edit":
                info.update(_edit_case(out, case_id, d, path))
            append_jsonl(out / LOG_NAME, {"image": case_id, "step": "review", "decision": d["decision"],
                                          "edits": {k: v for k, v in d.items() if k != "decision"}, "file": path.name})
        result[case_id] = info
    write_dataset_json(out)
    return result
