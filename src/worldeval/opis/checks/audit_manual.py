"""Manual audit (OPIS Appendix G): people label object-frame decisions; agreement with the evaluator.

`sample_audit` draws decisions of one OPIS run folder per dimension, stratified by (model, case,
decision) so that rare decisions are seen too, and writes `AUDIT/audit.html` (one self-contained
labelling page), `AUDIT/items.json` (what the page shows) and `AUDIT/key.json` (the evaluator's
decisions, which the page never holds). `agree` compares a labels export with the key and gives
the Table 13 rows; `repeatability` compares two runs' structural-claim judgments.

Labels per dimension (the rubric, in our words, is on the page):
association: a candidate number, `null` or `ambiguous`; visibility: the five archive labels;
identity and structure: `preserved`, `changed` or `unassessable`.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from worldeval.media import decode_frames
from worldeval.opis.archive import load_opis_run, read_archives, read_frames_record
from worldeval.opis.case import load_case
from worldeval.opis.checks.audit import DIMENSIONS, JUDGMENTS, NULL, agreement, eval_association, judgment
from worldeval.opis.labels import VISIBILITY, Status, StructureSource, Visibility
from worldeval.opis.scoring import TAU_I, TAU_S
from worldeval.runs import atomic_write_json, atomic_write_text
from worldeval.thumbnails import downscale, draw_boxes, jpeg_data_uri

CLAIM_LABELS = ("supported", "contradicted", "unknown")
# The labelling page's buttons per dimension, [label, keyboard key] (association's candidate numbers,
# 1-9, come before its fixed labels); the page's rubric describes each label.
PAGE_LABELS = {
    "association": [[NULL, "n"], [Status.AMBIGUOUS, "a"]],
    "visibility": [[Visibility.EXPECTED, "v"], [Visibility.OCCLUDED, "o"], [Visibility.OUT_OF_VIEW, "f"],
                   [Visibility.TOO_SMALL, "s"], [Visibility.UNKNOWN, "u"]],
    "identity": [[lab, lab[0]] for lab in JUDGMENTS],
    "structure": [[lab, lab[0]] for lab in JUDGMENTS],
}


class AuditError(ValueError):
    def __init__(self, file, field: str, message: str):
        super().__init__(f"{file}: {field}: {message}")
        self.file, self.field, self.message = file, field, message


@dataclass
class Decision:
    dimension: str
    model: str
    case_id: str
    instance_id: str
    frame: int
    decision: str  # the evaluator's label (for association: matched / null / ambiguous before numbering)
    record: Path  # the frames record


# ----------------------------------------------------------------------------- drawing decisions


def _label(x: float | None, tau: float) -> str | None:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    return judgment(x, tau)


def decisions_of(run_dir: Path, tau_I: float = TAU_I, tau_S: float = TAU_S) -> list[Decision]:
    """Every object-frame decision of the run, per dimension (identity/structure only where measured)."""
    run = load_opis_run(run_dir)
    rows = read_archives(run.archive_files, run.notes)
    if rows.empty:
        raise AuditError(run_dir, "measurements", "no OPIS measurements in this run folder")
    rows = rows[~rows["extra"].astype(bool)]
    out: list[Decision] = []
    for r in rows.itertuples(index=False):
        rec = run.frames.get((r.model, r.case_id))
        if rec is None:
            continue  # no per-frame record: nothing to show a person
        base = dict(model=str(r.model), case_id=str(r.case_id), instance_id=str(r.instance_id), frame=int(r.frame), record=rec)
        assoc = eval_association(r.matched, r.ambiguous)
        out.append(Decision("association", decision=assoc, **base))
        out.append(Decision("visibility", decision=str(r.visibility), **base))
        for dim, val, tau in (("identity", r.appearance, tau_I), ("structure", r.structure, tau_S)):
            lab = _label(val, tau) if r.matched else None
            if lab is not None:
                out.append(Decision(dim, decision=lab, **base))
    return out


def stratified(decisions: list[Decision], per_dimension: int, seed: int) -> list[Decision]:
    """Up to `per_dimension` per dimension: strata (model, case, decision) visited in turn, each shuffled."""
    rng = np.random.default_rng(seed)
    chosen = []
    for dim in DIMENSIONS:
        strata: dict[tuple, list[Decision]] = {}
        for d in decisions:
            if d.dimension == dim:
                strata.setdefault((d.model, d.case_id, d.decision), []).append(d)
        queues = []
        for key in sorted(strata):
            items = sorted(strata[key], key=lambda d: (d.frame, d.instance_id))
            queues.append([items[i] for i in rng.permutation(len(items))])
        picked: list[Decision] = []
        while len(picked) < per_dimension and any(queues):
            for q in queues:
                if q and len(picked) < per_dimension:
                    picked.append(q.pop(0))
        chosen += picked
    return chosen


# ----------------------------------------------------------------------------- the page's items


class _Media:
    """Decoded frames and loaded cases, each read once."""

    def __init__(self, max_side: int):
        self.max_side = max_side
        self.records: dict[Path, dict] = {}
        self.cases: dict[str, Any] = {}
        self.frames: dict[tuple[str, int], np.ndarray] = {}
        self.images: dict[str, str] = {}  # one data URI per distinct picture, shared by the items showing it

    def record(self, path: Path) -> dict:
        if path not in self.records:
            notes: list[str] = []
            rec = read_frames_record(path, notes)
            if rec is None:
                raise AuditError(path, "frames", "; ".join(notes))
            self.records[path] = rec
        return self.records[path]

    def case(self, case_dir: str):
        if case_dir not in self.cases:
            self.cases[case_dir] = load_case(case_dir, with_geometry=False)
        return self.cases[case_dir]

    def prefetch(self, wanted: dict[str, set[int]]) -> None:
        for video, idx in wanted.items():
            got = decode_frames(video, indices=sorted(idx))
            for i, f in zip(got.indices, got.frames):
                self.frames[(video, int(i))] = f


def _outline(image: np.ndarray, mask: np.ndarray) -> np.ndarray:
    import cv2

    out = np.ascontiguousarray(image.copy())
    contours, _ = cv2.findContours(mask.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    t = max(2, round(max(image.shape[:2]) / 300))
    cv2.drawContours(out, contours, -1, (255, 255, 255), t + 2, lineType=cv2.LINE_AA)
    cv2.drawContours(out, contours, -1, (40, 120, 230), t, lineType=cv2.LINE_AA)
    return out


def _frame_objects(rec: dict, frame: int) -> list[dict]:
    for f in rec["frames"]:
        if int(f["frame"]) == frame:
            return f["objects"]
    return []


def _candidates(objects: list[dict], item_key: str) -> list[dict]:
    """Observations of the frame (matched and extra), in an order that reveals nothing."""
    cands = [o for o in objects if o.get("status") in (Status.MATCHED, Status.EXTRA) and o.get("box")]
    order = sorted(range(len(cands)), key=lambda k: hashlib.sha256(f"{item_key}:{k}".encode()).hexdigest())
    return [cands[k] for k in order]


def build_item(d: Decision, k: int, media: _Media) -> tuple[dict, dict]:
    """(what the page shows, the evaluator's hidden decision) for one sampled decision."""
    rec = media.record(d.record)
    case = media.case(rec["case_dir"])
    inst = next(i for i in case.instances if i.id == d.instance_id)
    i0_key = f"i0:{rec['case_dir']}:{d.instance_id}"
    if i0_key not in media.images:
        media.images[i0_key] = jpeg_data_uri(downscale(_outline(case.image, case.masks[d.instance_id]), media.max_side)[0])
    frame = media.frames[(rec["video"], d.frame)]
    item_id = f"{d.dimension}-{k + 1:04d}"
    objects = _frame_objects(rec, d.frame)
    cands = _candidates(objects, item_id)
    label = d.decision
    if d.dimension == "association":
        boxes = [(o["box"], (255, 140, 0), str(n + 1)) for n, o in enumerate(cands)]
        if d.decision == Status.MATCHED:
            mine = next(o for o in objects if o.get("instance_id") == d.instance_id)
            label = str(next(n + 1 for n, o in enumerate(cands) if o is mine))
    elif d.dimension == "visibility":
        boxes = []
    else:  # identity and structure judge the observation the evaluator matched
        mine = next(o for o in objects if o.get("instance_id") == d.instance_id)
        boxes = [(mine["box"], (40, 180, 60), None)]
    small, s1 = downscale(frame, media.max_side)
    frame_key = f"f:{rec['video']}:{d.frame}:{json.dumps(boxes)}"
    if frame_key not in media.images:
        media.images[frame_key] = jpeg_data_uri(draw_boxes(small, boxes, scale=s1))
    item = {"id": item_id, "dimension": d.dimension, "model": d.model, "case_id": d.case_id,
            "instance_id": d.instance_id, "category": inst.category, "track": inst.track, "kinematics": inst.kinematics,
            "frame": d.frame, "time_s": round(d.frame / float(rec["fps"]), 3), "n_candidates": len(cands),
            "i0": i0_key, "image": frame_key}
    key = {"id": item_id, "dimension": d.dimension, "model": d.model, "case_id": d.case_id,
           "instance_id": d.instance_id, "frame": d.frame, "evaluator": label}
    return item, key


def sample_audit(run_dir: str | Path, out: str | Path, per_dimension: int = 150, seed: int = 0,
                 tau_I: float = TAU_I, tau_S: float = TAU_S, max_side: int = 640) -> dict:
    """Write AUDIT/audit.html, items.json and key.json; returns {"items", "per_dimension": {dim: n}}."""
    run_dir, out = Path(run_dir), Path(out)
    chosen = stratified(decisions_of(run_dir, tau_I, tau_S), per_dimension, seed)
    media = _Media(max_side)
    wanted: dict[str, set[int]] = {}
    for d in chosen:
        wanted.setdefault(media.record(d.record)["video"], set()).add(d.frame)
    media.prefetch(wanted)
    counters = {dim: 0 for dim in DIMENSIONS}
    items, keys = [], []
    for d in chosen:
        it, ky = build_item(d, counters[d.dimension], media)
        counters[d.dimension] += 1
        items.append(it)
        keys.append(ky)
    audit_id = hashlib.sha256(json.dumps(keys, sort_keys=True).encode()).hexdigest()[:12]
    meta = {"audit_id": audit_id, "run_dir": str(run_dir.resolve()), "seed": seed, "per_dimension": per_dimension,
            "tau_I": tau_I, "tau_S": tau_S}
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "key.json", {**meta, "items": keys})
    atomic_write_json(out / "items.json", {**meta, "items": [{k: v for k, v in i.items() if k not in ("i0", "image")} for i in items]})
    atomic_write_text(out / "audit.html", render_page(items, media.images, audit_id))
    return {"audit_id": audit_id, "items": len(items), "per_dimension": counters, "page": str(out / "audit.html")}


def render_page(items: list[dict], images: dict[str, str], audit_id: str) -> str:
    from importlib.resources import files

    template = files("worldeval.opis").joinpath("templates/audit.html").read_text(encoding="utf-8")
    data = json.dumps({"audit_id": audit_id, "items": items, "images": images}).replace("</", "<\\/")
    return template.replace("/*AUDIT_LABELS*/null", json.dumps(PAGE_LABELS)).replace("/*AUDIT_DATA*/null", data)


# ----------------------------------------------------------------------------- agreement


def _read(path: Path, what: str) -> dict:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise AuditError(path, what, f"cannot read: {exc}") from exc
    if not isinstance(data, dict):
        raise AuditError(path, what, "must be a JSON object")
    return data


def _allowed(dimension: str, n_candidates: int) -> set[str]:
    if dimension == "association":
        return {str(k) for k in range(1, n_candidates + 1)} | {lab for lab, _ in PAGE_LABELS["association"]}
    return set(VISIBILITY) if dimension == "visibility" else set(JUDGMENTS)


def agree(audit_dir: str | Path, labels_path: str | Path) -> dict:
    """Per dimension: N labelled, agreeing, agreement %, and disagreements as 'evaluator -> person' counts."""
    audit_dir = Path(audit_dir)
    key = _read(audit_dir / "key.json", "key.json")
    items = {i["id"]: i for i in _read(audit_dir / "items.json", "items.json")["items"]}
    labels = _read(Path(labels_path), "labels")
    if labels.get("audit_id") not in (None, key["audit_id"]):
        raise AuditError(labels_path, "audit_id", f"{labels.get('audit_id')!r} is another audit's export (this one is {key['audit_id']!r})")
    given = labels.get("labels")
    if not isinstance(given, dict):
        raise AuditError(labels_path, "labels", "must map item ids to labels")
    checks, disagreements, unlabelled = {}, {}, {}
    for dim in DIMENSIONS:
        n = ok = 0
        dis: dict[str, int] = {}
        for k in (k for k in key["items"] if k["dimension"] == dim):
            lab = given.get(k["id"])
            if lab is None:
                unlabelled[dim] = unlabelled.get(dim, 0) + 1
                continue
            if str(lab) not in _allowed(dim, items[k["id"]]["n_candidates"]):
                raise AuditError(labels_path, f"labels.{k['id']}", f"{lab!r} is not a {dim} label")
            n += 1
            if str(lab) == str(k["evaluator"]):
                ok += 1
            else:
                pair = f"{k['evaluator']} -> {lab}"
                dis[pair] = dis.get(pair, 0) + 1
        checks[dim] = agreement(n, ok)
        disagreements[dim] = dict(sorted(dis.items(), key=lambda kv: (-kv[1], kv[0])))
    return {"audit_id": key["audit_id"], "checks": checks, "disagreements": disagreements, "unlabelled": unlabelled}


# ----------------------------------------------------------------------------- claim repeatability


def claim_judgments(run_dir: Path, tau_S: float = TAU_S) -> tuple[dict[tuple, str], str]:
    """{(model, case, frame, instance, claim): label} and the unit used.

    Per-claim verdicts where the per-frame records hold them (objects' `claims`: [{"text",
    "verdict"}]); otherwise one judgment per object-frame of an instance judged by claims: the
    claims structure value read as supported (>= tau_S) / contradicted, and `unknown` where the
    object was matched but the judge gave no confident verdict.
    """
    run = load_opis_run(Path(run_dir))
    per_claim: dict[tuple, str] = {}
    for (model, case_id), path in run.frames.items():
        rec = read_frames_record(path, run.notes) or {"frames": []}
        for f in rec["frames"]:
            for o in f["objects"]:
                for c in o.get("claims") or []:
                    v = str(c.get("verdict", "unknown"))
                    per_claim[(model, case_id, int(f["frame"]), o.get("instance_id"), str(c.get("text")))] = v if v in CLAIM_LABELS else "unknown"
    if per_claim:
        return per_claim, "claim"
    rows = read_archives(run.archive_files, run.notes)
    rows = rows[~rows["extra"].astype(bool)] if not rows.empty else rows
    judged = {(r.model, r.case_id, r.instance_id) for r in rows.itertuples() if r.structure_source == StructureSource.CLAIMS}
    out = {}
    for r in rows.itertuples():
        if (r.model, r.case_id, r.instance_id) not in judged or not r.matched:
            continue
        s = None if r.structure_source != StructureSource.CLAIMS or pd.isna(r.structure) else float(r.structure)
        out[(r.model, r.case_id, int(r.frame), r.instance_id, "*")] = "unknown" if s is None else ("supported" if s >= tau_S else "contradicted")
    return out, "object-frame"


def repeatability(run_a: str | Path, run_b: str | Path, tau_S: float = TAU_S) -> dict:
    a, unit_a = claim_judgments(Path(run_a), tau_S)
    b, unit_b = claim_judgments(Path(run_b), tau_S)
    if unit_a != unit_b:
        raise AuditError(run_b, "claims", f"{run_a} records {unit_a} judgments, {run_b} {unit_b} judgments: not comparable")
    common = sorted(set(a) & set(b), key=str)
    dis: dict[str, int] = {}
    for k in common:
        if a[k] != b[k]:
            pair = f"{a[k]} -> {b[k]}"
            dis[pair] = dis.get(pair, 0) + 1
    ok = len(common) - sum(dis.values())
    return {**agreement(len(common), ok), "unit": unit_a, "only_in_a": len(set(a) - set(b)), "only_in_b": len(set(b) - set(a)),
            "disagreements": dict(sorted(dis.items(), key=lambda kv: (-kv[1], kv[0])))}
