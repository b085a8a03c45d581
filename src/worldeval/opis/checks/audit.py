"""`opis audit --gt`: the evaluator's object-frame decisions checked against ground-truth masks.

For every clip of a ground-truth folder (see `gtclips`) the case is built from frame 0, the real
video and its mask-driven interventions are written as rollouts, each variant is evaluated with
the normal `run_eval` (one run folder per variant, like `opis validate`), and every (instance,
sampled frame) decision is compared with what the ground truth says about that frame:

* association: where the object shows (at least `min_show_px` pixels), the evaluator must have
  matched it to an observation whose mask has IoU >= `iou` with the shown ground-truth mask;
  where it does not show (no pixels, or inpainted away) it must be unmatched and not ambiguous;
* visibility (not judged on a removed target, whose expected state is "visible" by design):
  ground truth is `visible`, `partly_hidden` (under `partly_hidden` times the largest area of the
  same object within `window_s` seconds of real footage) or `gone`; the evaluator's five labels
  agree as in `VISIBILITY_AGREES`;
* identity, wherever the evaluator measured `a_it`: `changed` for the recoloured target, else
  `preserved`, against `a_it >= tau_I`;
* structure, wherever measured: `preserved` (no variant changes shape), against `s_it >= tau_S`.
"""

from __future__ import annotations

import csv
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from worldeval.geometry import mask_bbox, mask_iou
from worldeval.opis.archive import part_path
from worldeval.opis.case import DEFAULT_FPS, decode_rle
from worldeval.opis.checks import gtclips as G
from worldeval.opis.checks.validate import forget_case
from worldeval.opis.labels import Status, Visibility
from worldeval.opis.run import run_eval
from worldeval.opis.scoring import TAU_I, TAU_S
from worldeval.runs import atomic_write_json, atomic_write_text, fingerprint_paths

DIMENSIONS = ("association", "visibility", "identity", "structure")
PAPER = {"repeatability": 90.5, "association": 92.7, "visibility": 90.7, "identity": 86.0, "structure": 83.3}
CHECK_NAMES = {
    "repeatability": "Structural-claim repeatability",
    "association": "Association: exact assignment",
    "visibility": "Visibility: five labels",
    "identity": "Identity: preserved / changed",
    "structure": "Structure: preserved / changed",
}
# ground-truth visibility -> evaluator labels that agree with it
VISIBILITY_AGREES = {
    "visible": {Visibility.EXPECTED, Visibility.TOO_SMALL},
    "partly_hidden": {Visibility.EXPECTED, Visibility.OCCLUDED},
    "gone": {Visibility.OCCLUDED, Visibility.OUT_OF_VIEW, Visibility.TOO_SMALL},
}
# An object-frame's association, as the evaluator decides it and a person labels it: matched, ambiguous
# (two or more observations could equally be it) or NULL (no observation is it).
NULL = "null"
# Identity and structure judgments: a measured value at or above its threshold is preserved; a person
# may also find a frame unassessable.
PRESERVED, CHANGED, UNASSESSABLE = "preserved", "changed", "unassessable"
JUDGMENTS = (PRESERVED, CHANGED, UNASSESSABLE)
AUDIT_VERSION = 1


@dataclass
class AuditConfig:
    backend: str = "classical"
    device: str = "cpu"
    fps: float = DEFAULT_FPS
    workers: int = 1
    tau_I: float = TAU_I
    tau_S: float = TAU_S
    iou: float = 0.5
    partly_hidden: float = 0.5
    window_s: float = 1.0
    min_show_px: int = 100
    max_side: int | None = None
    variants: tuple[str, ...] = G.VARIANTS  # which rollouts to write and evaluate
    force: bool = False  # redo rollouts and evaluation (resume only tracks inputs and settings, not evaluator code)

    def gt_key(self) -> dict:
        return {"version": AUDIT_VERSION, "fps": float(self.fps), "variants": list(self.variants)}


# ----------------------------------------------------------------------------- rollouts


def _clip_fingerprint(clip: G.GTClip, donor: G.GTClip | None, cfg: AuditConfig) -> str:
    files = list(clip.frames) + list(clip.masks.values()) + ([clip.meta_path] if clip.meta_path and clip.meta_path.exists() else [])
    if donor is not None:  # the pasted object comes from all of the donor's frames
        files += list(donor.frames) + list(donor.masks.values())
    return fingerprint_paths(files) + json.dumps(cfg.gt_key(), sort_keys=True)


def prepare_clip(clip: G.GTClip, donor: G.GTClip | None, out: Path, cfg: AuditConfig) -> dict:
    """Case and variant rollouts of one clip (kept when its record matches); returns the record."""
    rec_path = out / "gt" / f"{clip.name}.json"
    fp = _clip_fingerprint(clip, donor, cfg)
    if rec_path.exists():
        try:
            rec = json.loads(rec_path.read_text())
            if rec.get("fingerprint") == fp and all(Path(v).exists() for v in rec["videos"].values()):
                return rec
        except (json.JSONDecodeError, KeyError):
            pass  # torn record: write again
    forget_case(out / "runs", clip.name)
    G.build_case(clip, out / "cases" / clip.name)
    rec = {"clip": clip.name, "fingerprint": fp, "videos": {}, "skipped": {},
           "target": clip.instance_id(G.target_value(clip)), "paste": None}
    for variant in cfg.variants:
        why = _skip_reason(clip, donor, variant)
        if why:
            rec["skipped"][variant] = why
            (out / "rollouts" / variant / f"{clip.name}.mp4").unlink(missing_ok=True)  # an older clip's rollout
            continue
        paste = G.plan_paste(clip, donor) if variant == "pasted" else None
        if paste is not None:
            rec["paste"] = {"donor": donor.name, "value": paste.value, "scale": paste.scale, "x": paste.x, "y": paste.y}
        path = out / "rollouts" / variant / f"{clip.name}.mp4"
        G.write_variant(clip, variant, path, clip.fps, paste)
        rec["videos"][variant] = str(path)
    atomic_write_json(rec_path, rec)
    return rec


def _skip_reason(clip: G.GTClip, donor: G.GTClip | None, variant: str) -> str | None:
    if variant == "real":
        return None
    if not clip.fully_masked:
        return f"masks for {len(clip.masks)} of {len(clip)} frames: interventions need a mask in every frame"
    if variant == "pasted" and donor is None:
        return "no other clip to take an object from"
    return None


def paste_of(clip: G.GTClip, rec: dict, by_name: dict[str, G.GTClip]) -> G.Paste | None:
    p = rec.get("paste")
    if not p or p["donor"] not in by_name:
        return None
    return G.Paste(donor=by_name[p["donor"]], value=p["value"], scale=p["scale"], x=p["x"], y=p["y"])


def prepare(gt: Path, out: Path, cfg: AuditConfig, log: Callable[[str], None] = print) -> tuple[list[G.GTClip], dict, dict]:
    """Load the clips, write cases and rollouts; returns (clips, records, errors by clip)."""
    clips, errors = G.load_clips(gt, cfg.fps)
    for name, e in errors.items():
        log(f"clip {name}: skipped ({e['file']}: {e['field']}: {e['message']})")
    ok, records = [], {}
    for k, clip in enumerate(clips):
        # the pasted object comes from the next clip (cyclic), so it is a real object of another scene
        donor = clips[(k + 1) % len(clips)] if len(clips) > 1 else None
        try:
            records[clip.name] = prepare_clip(clip, donor, out, cfg)
            ok.append(clip)
        except G.GTError as exc:
            errors[clip.name] = {"file": str(exc.file), "field": exc.field, "message": exc.reason}
            log(f"clip {clip.name}: skipped ({exc})")
            import shutil

            shutil.rmtree(out / "cases" / clip.name, ignore_errors=True)
    atomic_write_json(out / "cases" / "dataset.json", {"name": "audit", "version": "1", "cases": [c.name for c in ok]})
    return ok, records, errors


def evaluate_variants(out: Path, cfg: AuditConfig, log: Callable[[str], None] = print) -> dict[str, Path]:
    run_dirs = {}
    for variant in cfg.variants:
        folder = out / "rollouts" / variant
        if not folder.is_dir():
            continue
        t0 = time.perf_counter()
        # force: these run folders are the audit's own; an evaluator whose settings changed redoes its items
        s = run_eval(out / "cases", folder, variant, out / "runs" / variant, backend=cfg.backend, device=cfg.device,
                     workers=cfg.workers, force=True, config={"max_side": cfg.max_side})
        failed = [f for f in s["failed"] if f.get("type") != "MissingRollout"]
        for f in failed:
            log(f"eval {variant}/{f['case_id']}: failed ({f.get('file')}: {f.get('field')}: {f.get('message')})")
        log(f"eval {variant}: {len(s['done'])} done, {len(s['skipped'])} kept, {len(failed)} failed, {time.perf_counter() - t0:.1f}s")
        run_dirs[variant] = out / "runs" / variant
    return run_dirs


# ----------------------------------------------------------------------------- comparison


def _fit(mask: np.ndarray, H: int, W: int) -> np.ndarray:
    """A ground-truth mask at the size the evaluator decoded (padding by write_video, or max_side)."""
    if mask.shape == (H, W):
        return mask
    h, w = mask.shape
    if abs(h - H) <= 1 and abs(w - W) <= 1:
        out = np.zeros((H, W), bool)
        out[:min(h, H), :min(w, W)] = mask[:H, :W]
        return out
    import cv2

    return cv2.resize(mask.astype(np.uint8), (W, H), interpolation=cv2.INTER_NEAREST) > 0


def _box_mask(box, H: int, W: int) -> np.ndarray:
    m = np.zeros((H, W), bool)
    x, y, w, h = box
    m[max(0, int(round(y))):int(round(y + h)), max(0, int(round(x))):int(round(x + w))] = True
    return m


def _observed(obj: dict | None, H: int, W: int) -> tuple[np.ndarray | None, str]:
    """The matched observation's mask from the per-frame record (its box where no mask was kept)."""
    if not obj or obj.get("status") != Status.MATCHED:
        return None, ""
    if obj.get("mask"):
        return _fit(decode_rle(obj["mask"]), H, W), "mask"
    if obj.get("box"):
        return _box_mask(obj["box"], H, W), "box"
    return None, ""


class _Areas:
    """Ground-truth areas of each instance in the real footage, for the 'nearby unoccluded size'."""

    def __init__(self, clip: G.GTClip, window_frames: int):
        self.clip, self.window = clip, max(1, window_frames)
        self.area: dict[int, dict[str, int]] = {}

    def at(self, t: int) -> dict[str, int] | None:
        if t not in self.clip.masks:
            return None
        if t not in self.area:
            self.area[t] = {k: int(m.sum()) for k, m in self.clip.instance_masks(t).items()}
        return self.area[t]

    def reference(self, t: int, iid: str) -> int:
        vals = [a[iid] for s in range(t - self.window, t + self.window + 1) if (a := self.at(s)) is not None]
        return max(vals) if vals else 0


def eval_association(matched: bool, ambiguous: bool) -> str:
    return Status.MATCHED if matched else (Status.AMBIGUOUS if ambiguous else NULL)


def judgment(value: float, tau: float) -> str:
    return PRESERVED if value >= tau else CHANGED


def gt_visibility(shown: int, reference: int, share: float) -> str:
    if shown == 0:
        return "gone"
    return "partly_hidden" if shown < share * reference else "visible"


def compare_clip(clip: G.GTClip, rec: dict, run_dirs: dict[str, Path], paste: G.Paste | None, cfg: AuditConfig) -> list[dict]:
    """One decision record per (variant, instance, sampled frame) of the clip."""
    import pandas as pd

    areas = _Areas(clip, round(cfg.window_s * clip.fps))
    out = []
    for variant, run_dir in run_dirs.items():
        part, fr = part_path(run_dir, variant, clip.name), run_dir / "frames" / variant / f"{clip.name}.json"
        if variant not in rec["videos"] or not part.exists() or not fr.exists():
            continue
        rows = pd.read_parquet(part)
        frames = json.loads(fr.read_text())
        H, W = int(frames["height"]), int(frames["width"])
        objs = {(int(f["frame"]), o["instance_id"]): o for f in frames["frames"] for o in f["objects"] if o.get("instance_id")}
        for r in rows[~rows["extra"].astype(bool)].itertuples(index=False):
            t, iid = int(r.frame), str(r.instance_id)
            shown = G.shown_masks(clip, variant, t, paste)
            d = _decision(clip, rec, variant, r, objs.get((t, iid)), shown, areas, H, W, cfg)
            out.append(d)
    return out


def _num(x) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def _decision(clip, rec, variant, r, obj, shown, areas: _Areas, H: int, W: int, cfg: AuditConfig) -> dict:
    t, iid = int(r.frame), str(r.instance_id)
    removed = variant == "removed" and iid == rec["target"]
    a, s = _num(r.appearance), _num(r.structure)
    d = {"clip": clip.name, "variant": variant, "instance_id": iid, "frame": t, "track": r.track,
         "visibility": r.visibility, "matched": bool(r.matched), "ambiguous": bool(r.ambiguous),
         "appearance": a, "structure": s, "gt_area": None, "gt_reference_area": None, "gt_visibility": None,
         "iou": None, "iou_from": "", "obs_on_object": None, "box_iou": None}
    gt_shown = None
    if shown is not None:
        m = _fit(shown[iid], H, W)
        gt_shown = int(shown[iid].sum())
        d["gt_area"], d["gt_reference_area"] = gt_shown, areas.reference(t, iid)
        if not removed:
            d["gt_visibility"] = gt_visibility(gt_shown, d["gt_reference_area"], cfg.partly_hidden)
        om, how = _observed(obj, H, W)
        if om is not None:
            d["iou"], d["iou_from"] = round(mask_iou(om, m), 4), how
            # share of the observation on the object: tells a right object with a poor mask from a wrong object
            d["obs_on_object"] = round(float((om & m).sum()) / max(1.0, float(om.sum())), 4)
            if obj.get("box") and m.any():
                d["box_iou"] = round(mask_iou(_box_mask(obj["box"], H, W), _box_mask(mask_bbox(m), H, W)), 4)
    # association
    if gt_shown is None or 0 < gt_shown < cfg.min_show_px:
        d["gt_association"], d["association_agrees"] = None, None
    elif gt_shown == 0:
        d["gt_association"] = NULL
        d["association_agrees"] = not d["matched"] and not d["ambiguous"]
    else:
        d["gt_association"] = "object"
        d["association_agrees"] = d["matched"] and (d["iou"] or 0.0) >= cfg.iou
    d["eval_association"] = eval_association(d["matched"], d["ambiguous"])
    if d["matched"] and d["gt_association"] == "object" and (d["iou"] or 0.0) < cfg.iou:
        d["eval_association"] = "matched_elsewhere"
    # visibility
    gv = d["gt_visibility"]
    d["visibility_agrees"] = None if gv is None else r.visibility in VISIBILITY_AGREES[gv]
    # identity and structure: only where measured and the object is not known to be absent
    absent = removed or gt_shown == 0
    d["gt_identity"] = None if a is None or absent else (CHANGED if variant == "recoloured" and iid == rec["target"] else PRESERVED)
    d["eval_identity"] = None if a is None else judgment(a, cfg.tau_I)
    d["identity_agrees"] = None if d["gt_identity"] is None else d["gt_identity"] == d["eval_identity"]
    d["gt_structure"] = None if s is None or absent else PRESERVED
    d["eval_structure"] = None if s is None else judgment(s, cfg.tau_S)
    d["structure_agrees"] = None if d["gt_structure"] is None else d["gt_structure"] == d["eval_structure"]
    return d


# ----------------------------------------------------------------------------- summary


def agreement(n: int, agreeing: int) -> dict:
    return {"n": n, "agreeing": agreeing, "agreement": round(100.0 * agreeing / n, 1) if n else None}


def summarise(decisions: list[dict]) -> dict:
    """The `--json` object: pooled checks, per-clip checks, and ground truth x evaluator confusions."""

    def checks(ds):
        res = {}
        for dim in DIMENSIONS:
            v = [d[f"{dim}_agrees"] for d in ds if d[f"{dim}_agrees"] is not None]
            res[dim] = agreement(len(v), int(sum(v)))
        return res

    clips = sorted({d["clip"] for d in decisions})
    conf: dict[str, dict] = {}
    for dim in DIMENSIONS:
        table: dict[str, dict[str, int]] = {}
        for d in decisions:
            if d[f"{dim}_agrees"] is None:
                continue
            ev = d["visibility"] if dim == "visibility" else d[f"eval_{dim}"]
            row = table.setdefault(str(d[f"gt_{dim}"]), {})
            row[str(ev)] = row.get(str(ev), 0) + 1
        conf[dim] = {k: dict(sorted(v.items())) for k, v in sorted(table.items())}
    return {"checks": checks(decisions), "clips": {c: checks([d for d in decisions if d["clip"] == c]) for c in clips},
            "confusions": conf}


CSV_FIELDS = ("clip", "variant", "instance_id", "frame", "track", "gt_area", "gt_reference_area", "gt_association",
              "eval_association", "iou", "iou_from", "obs_on_object", "box_iou", "association_agrees", "gt_visibility", "visibility",
              "visibility_agrees", "appearance", "gt_identity", "eval_identity", "identity_agrees", "structure",
              "gt_structure", "eval_structure", "structure_agrees", "matched", "ambiguous")


def write_csv(path: Path, decisions: list[dict]) -> Path:
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for d in sorted(decisions, key=lambda d: (d["clip"], d["variant"], d["instance_id"], d["frame"])):
        w.writerow({k: ("" if d.get(k) is None else d[k]) for k in CSV_FIELDS})
    return atomic_write_text(path, buf.getvalue())


def run_audit(gt: str | Path, out: str | Path, cfg: AuditConfig | None = None, log: Callable[[str], None] = print) -> dict:
    """The whole automatic audit; writes OUT/audit.json and OUT/decisions.csv and returns the summary
    (plus "errors" by clip and "variants": what was written, skipped and why)."""
    cfg = cfg or AuditConfig()
    gt, out = Path(gt), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.force:
        import shutil

        for sub in ("gt", "runs"):
            shutil.rmtree(out / sub, ignore_errors=True)
    clips, records, errors = prepare(gt, out, cfg, log)
    run_dirs = evaluate_variants(out, cfg, log) if clips else {}
    by_name = {c.name: c for c in clips}
    decisions = []
    for clip in clips:
        rec = records[clip.name]
        decisions += compare_clip(clip, rec, run_dirs, paste_of(clip, rec, by_name), cfg)
    summary = summarise(decisions)
    write_csv(out / "decisions.csv", decisions)
    full = {**summary, "errors": errors, "config": asdict(cfg), "gt": str(gt),
            "variants": {n: {"written": sorted(r["videos"]), "skipped": r["skipped"], "target": r["target"], "paste": r["paste"]}
                         for n, r in records.items()}}
    atomic_write_json(out / "audit.json", full)
    return full


# ----------------------------------------------------------------------------- table


def table13(checks: dict, title: str, extra_columns: dict[str, dict[str, str]] | None = None, paper: bool = True):
    """Rows of Table 13: check, N, agreeing, agreement (%), disagreements (and the paper's figure)."""
    from rich.table import Table

    t = Table(title=title)
    for col in ("Check", "N", "Agreeing", "Agreement (%)", "Disagreements"):
        t.add_column(col, justify="left" if col == "Check" else "right")
    extra_columns = extra_columns or {}
    for col in extra_columns:
        t.add_column(col, justify="left")
    if paper:
        t.add_column("Paper (%)", justify="right")
    for key, c in checks.items():
        pct = "-" if c["agreement"] is None else f"{c['agreement']:.1f}"
        cells = [CHECK_NAMES.get(key, key), str(c["n"]), str(c["agreeing"]), pct, str(c["n"] - c["agreeing"])]
        cells += [extra_columns[col].get(key, "") for col in extra_columns]
        if paper:
            cells.append(f"{PAPER[key]:.1f}" if key in PAPER else "")
        t.add_row(*cells)
    return t


def render(result: dict) -> list:
    """Table 13 for all clips pooled, then one compact table of per-clip agreements."""
    from rich.table import Table

    out = [table13(result["checks"], "opis audit: evaluator decisions against ground-truth masks")]
    per = Table(title="per clip: agreement % (N)")
    per.add_column("clip")
    for dim in DIMENSIONS:
        per.add_column(dim, justify="right")
    for clip, ch in result["clips"].items():
        per.add_row(clip, *[("-" if ch[d]["agreement"] is None else f"{ch[d]['agreement']:.1f}") + f" ({ch[d]['n']})" for d in DIMENSIONS])
    out.append(per)
    return out
