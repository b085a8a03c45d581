"""The OPIS part of the report: score tables, diagnostic plots and per-case views.

All numbers in the tables come from `worldeval.opis.scoring.score_runs` (one
call per aggregation variant), so the report never disagrees with
`worldeval opis score`. The per-frame P_t, I_t, S_t series drawn for each
rollout, which the score JSON does not carry, come from scoring's frame rules
(`frame_evidence`, `frame_scores`) applied to that rollout's archive rows.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from worldeval.errors import CaseError
from worldeval.media import MediaError, decode_frames
from worldeval.opis.archive import OpisRun, archive_keys, read_archive, read_archives, read_frames_record
from worldeval.opis.case import is_case_dir, iter_case_dirs, load_case
from worldeval.opis.scoring import (
    ALL_VARIANTS, TAU_I, TAU_S, ScoreConfig, frame_evidence, frame_scores, score_runs, variant_rules,
)
from worldeval.report import images, plots
from worldeval.report.loaders import num as _num, resolve_path
from worldeval.thumbnails import downscale, draw_boxes, draw_mask_outlines, jpeg_data_uri

# The paper's Table 5 variants and the OPIS authors' official-v3, as scoring declares them (one home).
VARIANTS = ALL_VARIANTS
DENSITY_BINS = ("<=20", "21-40", ">40")
INTERVALS = ("1-4", "4-7", "7-10")

ScoreFn = Callable[[list[Path], str, int, int], dict]


def slug(*parts: str) -> str:
    return "-".join(re.sub(r"[^A-Za-z0-9_.-]+", "_", str(p)) for p in parts)


def default_score_fn(paths: list[Path], variant: str, bootstrap: int, seed: int) -> dict:
    """Score the run folders with scoring's own config (its declared fields, nothing probed)."""
    return score_runs([str(p) for p in paths], ScoreConfig(variant=variant, bootstrap=bootstrap, seed=seed))


# ---------------------------------------------------------------- per-frame series


def frame_series(rows: pd.DataFrame, tau_i: float = TAU_I, tau_s: float = TAU_S) -> dict[str, list]:
    """Per sampled frame of one rollout: time and P_t, I_t, S_t on 0-100 (None where undefined).

    The values are scoring's own (`frame_evidence` and `frame_scores` under the strict rules), so a
    timeline never disagrees with the scores next to it.
    """
    out: dict[str, list] = {"frame": [], "time_s": [], "P": [], "I": [], "S": []}
    if rows.empty:
        return out
    # All rows are one rollout's: the columns that tell cases apart and the track (coverage only)
    # do not enter P_t, I_t, S_t, so constants stand in for them.
    one = rows.assign(model="", case_id="", domain="", subcategory="", n_reference=0, track=None)
    keys = archive_keys(one)
    config = ScoreConfig(tau_I=tau_i, tau_S=tau_s, validate=False)
    ev = frame_evidence(one, config, keys)
    fs = frame_scores(ev, variant_rules("strict", config))
    frame = np.empty(keys.n_frames, dtype=np.int64)
    frame[keys.frame] = one["frame"].to_numpy()
    out["frame"] = [int(f) for f in frame]
    out["time_s"] = [float(t) for t in ev.time_s]
    for name, value, defined in (("P", "P_t", "in_FP"), ("I", "I_t", "in_FI"), ("S", "S_t", "in_FS")):
        out[name] = [100.0 * float(v) if ok else None for v, ok in zip(fs[value], fs[defined])]
    return out


# ---------------------------------------------------------------- tables


def _leaderboard(strict: dict) -> list[dict]:
    rows = []
    for name, m in (strict.get("models") or {}).items():
        ci = m.get("OPIS_ci") or [None, None]
        rows.append({
            "model": name, "anchor": slug("model", name),
            "P": _num(m.get("P")), "I": _num(m.get("I")), "S": _num(m.get("S")),
            "C_S": _num(m.get("C_S")), "OPIS": _num(m.get("OPIS")),
            "ci_lo": _num(ci[0]) if len(ci) > 0 else None, "ci_hi": _num(ci[1]) if len(ci) > 1 else None,
        })
    rows.sort(key=lambda r: (-(r["OPIS"] if r["OPIS"] is not None else -1e9), r["model"]))
    for k, r in enumerate(rows, 1):
        r["rank"] = k
    return rows


def _group_table(strict: dict, models: list[str], key: str) -> dict:
    """Models x groups (domains or subcategories): OPIS cells plus the P/I/S behind them."""
    groups: list[str] = sorted({g for m in models for g in ((strict["models"][m].get(key)) or {})})
    rows = []
    for m in models:
        d = strict["models"][m].get(key) or {}
        cells = []
        for g in groups:
            c = d.get(g) or {}
            cells.append({"OPIS": _num(c.get("OPIS")), "P": _num(c.get("P")), "I": _num(c.get("I")),
                          "S": _num(c.get("S"))})
        rows.append({"model": m, "cells": cells})
    return {"columns": groups, "rows": rows}


def _diag_rows(strict: dict, models: list[str], key: str, bins: tuple[str, ...]) -> tuple[list[dict], dict]:
    """Rows (model, bin, P, I, S, C_S, Fail-I) and the per-model dict the plots take."""
    rows, per_model = [], {}
    for m in models:
        d = strict["models"][m].get(key) or {}
        per_model[m] = {}
        for b in [x for x in bins if x in d] + [x for x in d if x not in bins]:
            c = d.get(b)
            if not isinstance(c, dict):
                continue
            # the keys scoring declares for a diagnostic bin (`scoring._DIAG`, plus its OPIS)
            vals = {"P": _num(c.get("P")), "I": _num(c.get("I")), "S": _num(c.get("S")), "C_S": _num(c.get("C_S")),
                    "Fail-I": _num(c.get("fail_I")), "OPIS": _num(c.get("OPIS"))}
            per_model[m][b] = vals
            rows.append({"model": m, "bin": b, **vals})
    return rows, per_model


def _bins(per_model: dict[str, dict]) -> list[str]:
    """Bin names in the order scoring reported them (configurable edges rename the bins)."""
    out: list[str] = []
    for d in per_model.values():
        out.extend(b for b in d if b not in out)
    return out


def _coverage_rows(strict: dict, models: list[str]) -> list[dict]:
    rows = []
    for m in models:
        c = strict["models"][m].get("coverage") or {}
        rows.append({
            "model": m, "C_P": _num(c.get("C_P")), "C_I": _num(c.get("C_I")), "static": _num(c.get("static")),
            "dynamic": _num(c.get("dynamic")), "unknown": _num(c.get("unknown")), "no_s": c.get("no_s"),
        })
    return rows


# ---------------------------------------------------------------- per-case views


def _pick_frames(n: int, k: int) -> list[int]:
    if n <= 0 or k <= 0:
        return []
    return sorted(set(int(round(x)) for x in np.linspace(0, n - 1, min(k, n))))


def _reference_view(case_dir: Path | None, thumb_side: int, notes: list[str]) -> dict | None:
    if case_dir is None:
        return None

    try:
        case = load_case(case_dir, with_geometry=False)
    except (CaseError, OSError, ValueError) as exc:
        notes.append(f"reference image unavailable: {exc}")
        return None
    img, scale = downscale(case.image, thumb_side)
    insts = case.instances
    # Masks, not boxes: the mask is what perception matches against, and a box hides how much of
    # it is background (thin, diagonal or hollow objects).
    labels = {i.id: i.id if len(insts) <= 12 else None for i in insts}
    outlines = [(case.masks[i.id], images.REFERENCE_COLOR, labels[i.id]) for i in insts if i.id in case.masks]
    boxes = [(i.bbox, images.REFERENCE_COLOR, labels[i.id]) for i in insts if i.id not in case.masks]
    # 2 px: JPEG's halved colour resolution washes a 1 px outline into the object's own colour.
    drawn = draw_boxes(draw_mask_outlines(img, outlines, scale, thickness=2), boxes, scale)
    return {
        "uri": jpeg_data_uri(drawn),
        "caption": f"I0 with {len(insts)} reference instances",
        "instruction": case.spec.instruction,
    }


def _frame_strip(record: dict, video: Path | None, k: int, thumb_side: int, notes: list[str]) -> list[dict]:
    recs = [f for f in record.get("frames", []) if isinstance(f, dict) and "frame" in f]
    chosen = [recs[i] for i in _pick_frames(len(recs), k)]
    if not chosen:
        return []
    if video is None:
        notes.append(f"rollout video {record.get('video')!r} not found; frames not shown")
        return []
    try:
        sampled = decode_frames(video, [int(f["frame"]) for f in chosen], max_side=thumb_side)
    except (MediaError, ValueError) as exc:
        notes.append(f"rollout video unusable: {exc}")
        return []
    # Boxes are in the pixels of the frames perception saw: the record's width when it was
    # decoded downscaled (EvalConfig.max_side), else the video's own width.
    box_width = _num(record.get("width")) or float(sampled.info.width or 0)
    scale = sampled.frames[0].shape[1] / box_width if box_width else 1.0
    strip = []
    for f, arr in zip(chosen, sampled.frames):
        boxes, counts = [], dict.fromkeys(images.STATUS_COLORS, 0)
        other: dict[str, int] = {}  # occluded, out_of_view, too_small, unknown, ambiguous: not drawn
        for obj in f.get("objects") or []:
            st = obj.get("status")
            if st in images.STATUS_COLORS:
                counts[st] += 1
                if obj.get("box") is not None:
                    boxes.append((obj.get("box"), images.STATUS_COLORS[st], None))
            else:
                other[str(st)] = other.get(str(st), 0) + 1
        t = _num(f.get("time_s"))
        caption = (f"frame {int(f['frame'])}" + (f" · {t:.2f} s" if t is not None else "")
                   + "".join(f" · {n} {st}" for st, n in counts.items())
                   + "".join(f" · {n} {st.replace('_', ' ')}" for st, n in sorted(other.items())))
        strip.append({"uri": jpeg_data_uri(draw_boxes(arr, boxes, scale)), "caption": caption})
    return strip


@functools.lru_cache(maxsize=8)
def _case_dirs_by_id(dataset: Path) -> dict[str, Path]:
    """Every case folder of a dataset by id, found once per report (the authors' layout needs a walk)."""
    try:
        return {d.name: d for d in iter_case_dirs(dataset)}
    except CaseError:
        return {}


def _case_in(dataset: Path, case_id: str) -> Path | None:
    """The case folder of `case_id` in a dataset of ours (`<case_id>/`) or the authors' (`final/<sub>/<case_id>/`)."""
    if is_case_dir(dataset / case_id):
        return dataset / case_id
    return _case_dirs_by_id(dataset).get(case_id)


def _locate(run: OpisRun, record: dict | None, model: str, case_id: str) -> tuple[Path | None, Path | None]:
    """Case folder and rollout video of one (model, case), from the frames record or the manifest."""
    bases = [run.root, run.root.parent, Path.cwd()]
    man = run.manifest or {}
    cfg = man.get("config") if isinstance(man.get("config"), dict) else {}
    case_dir = video = None
    if record:
        case_dir = resolve_path(record.get("case_dir"), bases)
        video = resolve_path(record.get("video"), bases)
    if case_dir is None:
        ds = resolve_path(man.get("dataset") or cfg.get("dataset"), bases)
        case_dir = _case_in(ds, case_id) if ds is not None else None
    if video is None:
        ro = man.get("rollouts") or cfg.get("rollouts")
        if isinstance(ro, dict):
            ro = ro.get(model)
        rdir = resolve_path(ro, bases)
        if rdir is not None and rdir.is_dir():
            hits = sorted(rdir.glob(f"{case_id}.*"))
            video = hits[0] if hits else None
    return case_dir, video


def _read_runs_archive(runs: list[OpisRun], notes: list[str]) -> list[pd.DataFrame]:
    """Archive rows of each run (empty where it has none), read the way scoring reads them.

    Kept per run so each (model, case) can be traced back to the folder that measured it.
    """
    out = []
    for r in runs:
        if not r.archive_files:
            notes.append(f"{r.root}: no measurement archive")
            out.append(read_archives([], notes))
            continue
        try:
            df = read_archive([r.root], validate=False)
        except Exception as exc:  # fall back to the plain files so a damaged part hides only itself
            notes.append(f"{r.root}: archive not readable as a whole ({exc}); reading files one by one")
            df = read_archives(r.archive_files, notes)
        for col in ("model", "case_id", "domain", "subcategory", "visibility", "track", "structure_source",
                    "instance_id"):
            # categoricals with different categories per run would not concatenate cleanly
            if col in df and isinstance(df[col].dtype, pd.CategoricalDtype):
                df[col] = df[col].astype(object)
        out.append(df)
    return out


def build_opis(runs: list[OpisRun], *, score_fn: ScoreFn | None, bootstrap: int, seed: int, variants: tuple[str, ...],
               max_cases: int, frames_per_case: int, thumb_side: int) -> dict:
    """The OPIS part's template data; the options' defaults are `render_report`'s."""
    notes = [n for r in runs for n in r.notes]
    errors: list[str] = []
    scores = _score_variants([r.root for r in runs], score_fn or default_score_fn, variants, bootstrap, seed, errors)
    strict = scores.get("strict") or {"models": {}, "cases": []}
    strict.setdefault("models", {})
    leaderboard = _leaderboard(strict)
    models = [r["model"] for r in leaderboard]
    config = strict.get("config") or {}
    var_rows, deltas = _variant_rows(scores, strict, models, variants)
    domains = _group_table(strict, models, "domains")
    density_rows, density_pm = _diag_rows(strict, models, "density", DENSITY_BINS)
    temporal_rows, temporal_pm = _diag_rows(strict, models, "temporal", INTERVALS)
    figs = _figures(models, domains, deltas, density_pm, temporal_pm, errors)

    taus = (_num(config.get("tau_I")) or TAU_I, _num(config.get("tau_S")) or TAU_S)  # `ScoreConfig.to_dict`
    views = _CaseViews.collect(runs, strict, models, notes, taus, frames_per_case, thumb_side)
    all_cases = sorted({c for _, c in views.pairs})
    shown = all_cases[:max_cases] if max_cases >= 0 else all_cases
    return {
        "present": bool(runs),
        "leaderboard": leaderboard,
        "variants": {"columns": list(variants), "rows": var_rows},
        "domains": domains,
        "subcategories": _group_table(strict, models, "subcategories"),
        "coverage": _coverage_rows(strict, models),
        "density": density_rows,
        "temporal": temporal_rows,
        "figs": figs,
        "case_rows": views.case_rows(shown),
        "sections": [views.section(case_id) for case_id in shown],
        "omitted_cases": len(all_cases) - len(shown),
        "config": config,
        "bootstrap": bootstrap,
        "errors": errors,
        "notes": notes,
        "runs": [{"root": str(r.root), "manifest": r.manifest,
                  "failed": sum(1 for s in r.status.values() if s.get("status") == "failed"),
                  "done": sum(1 for s in r.status.values() if s.get("status") == "done")} for r in runs],
    }


def _score_variants(paths: list[Path], score_fn: ScoreFn, variants: tuple[str, ...], bootstrap: int, seed: int,
                    errors: list[str]) -> dict[str, dict]:
    scores: dict[str, dict] = {}
    for var in variants:
        try:
            # Only the strict score carries CIs; the variants are point estimates (OPIS Table 5).
            scores[var] = score_fn(paths, var, bootstrap if var == "strict" else 0, seed)
        except Exception as exc:  # scoring reports bad archives with its own clear errors
            errors.append(f"scoring ({var}) failed: {type(exc).__name__}: {exc}")
    return scores


def _variant_rows(scores: dict[str, dict], strict: dict, models: list[str],
                  variants: tuple[str, ...]) -> tuple[list[dict], dict[str, dict]]:
    """OPIS of every model under every variant, and each variant's difference to strict."""
    var_rows, deltas = [], {v: {} for v in variants if v != "strict"}
    for m in models:
        vals = []
        base = _num(strict["models"][m].get("OPIS"))
        for v in variants:
            x = _num(((scores.get(v) or {}).get("models") or {}).get(m, {}).get("OPIS"))
            vals.append(x)
            if v != "strict":
                deltas[v][m] = None if x is None or base is None else x - base
        var_rows.append({"model": m, "values": vals})
    return var_rows, deltas


def _figures(models: list[str], domains: dict, deltas: dict, density_pm: dict, temporal_pm: dict,
             errors: list[str]) -> dict[str, str | None]:
    figs: dict[str, str | None] = {"heatmap": None, "variants": None, "density": None, "temporal": None}
    if not models:
        return figs
    try:
        figs["heatmap"] = plots.domain_heatmap(
            models, domains["columns"],
            {r["model"]: dict(zip(domains["columns"], (c["OPIS"] for c in r["cells"]))) for r in domains["rows"]})
        if deltas:
            figs["variants"] = plots.variant_deltas(models, list(deltas), deltas)
        if any(density_pm.values()):
            figs["density"] = plots.density_panels(_bins(density_pm), density_pm)
        if any(temporal_pm.values()):
            figs["temporal"] = plots.temporal_panels(_bins(temporal_pm), temporal_pm)
    except Exception as exc:  # a plot must never take the tables down with it
        errors.append(f"plotting failed: {type(exc).__name__}: {exc}")
    return figs


@dataclasses.dataclass
class _CaseViews:
    """What the per-case table and sections are drawn from: which run holds each (model, case), its rows, its scores."""

    pairs: dict[tuple[str, str], OpisRun]
    case_scores: dict[tuple[Any, Any], dict]
    grouped: dict[tuple[str, str], pd.DataFrame]
    order: dict[str, int]  # leaderboard position of each model
    taus: tuple[float, float]  # (tau_I, tau_S) the strict score used
    frames_per_case: int
    thumb_side: int

    @classmethod
    def collect(cls, runs: list[OpisRun], strict: dict, models: list[str], notes: list[str],
                taus: tuple[float, float], frames_per_case: int, thumb_side: int) -> "_CaseViews":
        case_scores = {(c.get("model"), c.get("case_id")): c for c in strict.get("cases") or []}
        per_run = _read_runs_archive(runs, notes)
        pairs: dict[tuple[str, str], OpisRun] = {}
        # The run that measured a (model, case) owns it: its frames record and rollout are the ones
        # behind the scores. Frames and status records only claim pairs no archive holds (failed rollouts).
        for r, df in zip(runs, per_run):
            if not df.empty:
                for m, c in df[["model", "case_id"]].drop_duplicates().itertuples(index=False):
                    pairs.setdefault((str(m), str(c)), r)
        for r in runs:
            for key in list(r.frames) + list(r.status):
                pairs.setdefault(key, r)
        for key in case_scores:
            if key not in pairs and runs:
                pairs[key] = next((r for (m, _), r in pairs.items() if m == key[0]), runs[0])
        nonempty = [df for df in per_run if not df.empty]
        archive = pd.concat(nonempty, ignore_index=True) if nonempty else pd.DataFrame()
        grouped = {k: g for k, g in archive.groupby(["model", "case_id"])} if not archive.empty else {}
        return cls(pairs, case_scores, grouped, {m: k for k, m in enumerate(models)}, taus, frames_per_case, thumb_side)

    def case_rows(self, shown: list[str]) -> list[dict]:
        rows = []
        by_case = sorted(self.case_scores.items(), key=lambda kv: (str(kv[0][1]), self.order.get(kv[0][0], 1e9)))
        for (m, c), cs in by_case:
            rows.append({
                "model": m, "case_id": c, "domain": cs.get("domain"), "subcategory": cs.get("subcategory"),
                "P": _num(cs.get("P")), "I": _num(cs.get("I")), "S": _num(cs.get("S")), "C_S": _num(cs.get("C_S")),
                "OPIS": _num(cs.get("OPIS")), "flags": ", ".join(map(str, cs.get("flags") or [])),
                "anchor": slug("rollout", m, c) if c in shown else None,
            })
        return rows

    def section(self, case_id: str) -> dict:
        case_models = sorted((m for (m, c) in self.pairs if c == case_id), key=lambda m: (self.order.get(m, 1e9), m))
        sec = {"case_id": case_id, "anchor": slug("case", case_id), "reference": None, "models": [], "notes": [],
               "domain": None, "subcategory": None}
        for m in case_models:
            sec["models"].append(self._rollout(sec, m, case_id))
        return sec

    def _rollout(self, sec: dict, m: str, case_id: str) -> dict:
        """One model's block of a case section; fills the section's reference, domain and subcategory when unset."""
        run = self.pairs[(m, case_id)]
        mnotes: list[str] = []
        record = None
        if (m, case_id) in run.frames:
            record = read_frames_record(run.frames[(m, case_id)], mnotes)
        else:
            mnotes.append("no frames record")
        case_dir, video = _locate(run, record, m, case_id)
        if sec["reference"] is None:
            sec["reference"] = _reference_view(case_dir, self.thumb_side, sec["notes"])
        strip = _frame_strip(record, video, self.frames_per_case, self.thumb_side, mnotes) if record else []
        rows = self.grouped.get((m, case_id))
        timeline = None
        if rows is not None and not rows.empty:
            sec["domain"] = sec["domain"] or str(rows["domain"].iloc[0])
            sec["subcategory"] = sec["subcategory"] or str(rows["subcategory"].iloc[0])
            timeline = self._timeline(rows, f"{m} · {case_id}", mnotes)
        else:
            mnotes.append("no archive rows")
        st = run.status.get((m, case_id)) or {}
        err = st.get("error") if st.get("status") == "failed" else None
        cs = self.case_scores.get((m, case_id)) or {}
        sec["domain"] = sec["domain"] or cs.get("domain")
        sec["subcategory"] = sec["subcategory"] or cs.get("subcategory")
        return {
            "model": m, "anchor": slug("rollout", m, case_id), "strip": strip, "timeline": timeline,
            "scores": {k: _num(cs.get(k)) for k in ("P", "I", "S", "C_S", "OPIS")} if cs else None,
            "flags": ", ".join(map(str, cs.get("flags") or [])),
            "error": err, "notes": mnotes,
        }

    def _timeline(self, rows: pd.DataFrame, title: str, mnotes: list[str]) -> str | None:
        ser = frame_series(rows, *self.taus)
        if not ser["frame"]:
            return None
        try:
            return plots.case_timeline(ser["time_s"], {k: ser[k] for k in ("P", "I", "S")}, title)
        except Exception as exc:
            mnotes.append(f"timeline plot failed: {exc}")
            return None
