"""The evaluator's acceptance figures (`benchmarks/faithful_report.py`), computed from `opis validate` results and archives.

Every figure is a `Figure`: its value, the requirement, and a status that is
`pass`, `FAIL` or `not measured` (a figure whose data is absent is never a
pass). Inputs are what the evaluator wrote (archive rows, per-frame records)
and the synthetic or real ground truth; nothing here looks inside the evaluator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from worldeval.opis.archive import read_archive
from worldeval.opis.checks.validate_real import CLIP_TARGET
from worldeval.opis.scoring import TAU_I

NOT_MEASURED = "not measured"


@dataclass
class Figure:
    name: str
    value: str
    required: str
    status: str  # "pass" | "FAIL" | NOT_MEASURED
    detail: Any = None

    def as_dict(self) -> dict:
        return {"name": self.name, "value": self.value, "required": self.required, "status": self.status, "detail": self.detail}


def _status(ok: bool | None) -> str:
    return NOT_MEASURED if ok is None else ("pass" if ok else "FAIL")


def not_measured(name: str, required: str, why: str) -> Figure:
    return Figure(name, why, required, NOT_MEASURED)


def in_view_frames(rec: dict, frames) -> list[int]:
    gt = rec["ground_truth"]
    share, thr = gt["target_in_view_share"], gt["in_view_share_threshold"]
    return [int(f) for f in frames if f < len(share) and share[f] is not None and share[f] >= thr]


def target_rows(df: pd.DataFrame, model: str, case_id: str, target: str) -> pd.DataFrame:
    r = df[(df["model"] == model) & (df["case_id"] == case_id) & (df["instance_id"] == target)]
    return r.set_index("frame")


def matched_frames(rows: pd.DataFrame, frames: list[int]) -> set[int]:
    return {f for f in frames if f in rows.index and bool(rows.at[f, "matched"])}


def identity_failures(rows: pd.DataFrame, all_rows: pd.DataFrame, tau_i: float = TAU_I) -> tuple[int, int]:
    """(frames where the target is matched with appearance < tau_I, of those the frames whose eq. 3 value is 0).

    Eq. 3 is recomputed here from the frame's rows (I_t = 0 when any valid appearance is below tau_I), so a
    scorer that skipped low-appearance rows would show as a mismatch between the two counts."""
    low = [int(f) for f, r in rows.iterrows() if bool(r["matched"]) and pd.notna(r["appearance"]) and r["appearance"] < tau_i]
    failing = 0
    for f in low:
        a = all_rows[(all_rows["frame"] == f) & all_rows["matched"].astype(bool)]["appearance"].dropna()
        failing += bool(len(a)) and float(a.min()) < tau_i
    return len(low), failing


def photo_recoloured(df: pd.DataFrame, records: dict, kept: float = 0.5, drop: float = 0.10, tau_i: float = TAU_I) -> list[Figure]:
    """Recoloured target still matched where the faithful one was, with lower appearance; its low frames fail eq. 3."""
    per, n_low, n_fail = {}, 0, 0
    for cid, rec in records.items():
        tid = (rec.get("target") or {}).get("instance_id")
        if tid is None or "recoloured" not in rec.get("videos", {}):
            continue
        f_rows, r_rows = target_rows(df, "faithful", cid, tid), target_rows(df, "recoloured", cid, tid)
        if f_rows.empty or r_rows.empty:
            continue
        frames = in_view_frames(rec, sorted(set(f_rows.index)))
        fm, rm = matched_frames(f_rows, frames), matched_frames(r_rows, frames)
        share = len(fm & rm) / len(fm) if fm else None
        a0 = f_rows.loc[sorted(fm), "appearance"].dropna().mean() if fm else np.nan
        a1 = r_rows.loc[sorted(rm), "appearance"].dropna().mean() if rm else np.nan
        d = None if np.isnan(a0) or np.isnan(a1) else float(a0 - a1)
        per[cid] = {"kept_share": share, "appearance_drop": d, "ok": share is not None and share >= kept and d is not None and d >= drop}
        lo, fa = identity_failures(r_rows, df[(df["model"] == "recoloured") & (df["case_id"] == cid)], tau_i)
        n_low, n_fail = n_low + lo, n_fail + fa
    return [
        _per_case_figure("photos: recoloured still matched, appearance lower", per,
                         f"every case: matched in >= {kept:.0%} of faithful-matched frames, appearance drop >= {drop:g}"),
        Figure("photos: recoloured frames with a < tau_I fail eq. 3", f"{n_fail}/{n_low} frames",
               "at least one such frame, and all of them fail", _status(n_low > 0 and n_fail == n_low) if per else NOT_MEASURED),
    ]


def _per_case_figure(name: str, per: dict, required: str) -> Figure:
    if not per:
        return Figure(name, "no case measured", required, NOT_MEASURED)
    ok = sum(1 for v in per.values() if v["ok"])
    return Figure(name, f"{ok}/{len(per)} cases", required, _status(ok == len(per)), per)


def photo_removed(df: pd.DataFrame, records: dict, max_share: float = 0.20) -> Figure:
    per = {}
    for cid, rec in records.items():
        tid = (rec.get("target") or {}).get("instance_id")
        if tid is None or "removed" not in rec.get("videos", {}):
            continue
        rows = target_rows(df, "removed", cid, tid)
        frames = in_view_frames(rec, sorted(set(rows.index)))
        if rows.empty or not frames:
            continue
        s = len(matched_frames(rows, frames)) / len(frames)
        per[cid] = {"matched_share": s, "ok": s <= max_share}
    return _per_case_figure("photos: removed object matched", per, f"every case: matched in <= {max_share:.0%} of in-view frames")


def extras_per_frame(df: pd.DataFrame, model: str, name: str, limit: float = 0.2) -> Figure:
    rows = df[df["model"] == model]
    if rows.empty:
        return Figure(name, "no rows", f"<= {limit:g}", NOT_MEASURED)
    frames = rows.groupby("case_id")["frame"].nunique().sum()
    x = int(rows["extra"].astype(bool).sum())
    v = x / frames
    return Figure(name, f"{v:.3f} ({x} extras / {frames} frames)", f"<= {limit:g} extras per frame", _status(v <= limit))


def photo_pasted(result: dict) -> Figure:
    """Pasted object from another photo: extras in most frames where it is in view (validate's measurements)."""
    per = {}
    for cid, r in result.get("cases", {}).items():
        m = (r["checks"].get("pasted") or {}).get("measurements")
        if m is not None:
            es = m.get("extra_share_where_pasted_in_view")
            per[cid] = {"extra_share": es, "ok": es is not None and es > 0.5}
    return _per_case_figure("photos: pasted object yields extras", per, "every case: extras in > 50% of frames with it in view")


def pass_rate_figures(prefix: str, rates: dict, required: float = 0.90) -> list[Figure]:
    out = []
    for check, r in rates.items():
        if not r.get("cases"):
            out.append(Figure(f"{prefix} validate {check}", "no cases", f">= {required:.0%}", NOT_MEASURED))
            continue
        out.append(Figure(f"{prefix} validate {check}", f"{r['passed']}/{r['cases']} ({r['rate']:.0%})", f">= {required:.0%}",
                          _status(r["rate"] >= required)))
    return out


def clip_figures(result: dict, presence_min: float = 80.0, agreement_min: float = 0.85) -> list[Figure]:
    """Figures of the real-clip checks (`validate_real.assess_clips` output)."""
    clips = result.get("clips", {})
    if not clips:
        return [not_measured("real clips", "", "no clip evaluated")]

    def per(check: str):
        out = {}
        for cid, r in clips.items():
            e = r["checks"].get(check, {})
            if "measurements" in e:
                out[cid] = {"ok": bool(e.get("passed")), "reason": e.get("reason")}
        return out

    agreed = sum(r["checks"]["faithful"].get("measurements", {}).get("association_agreed", 0) for r in clips.values())
    decided = sum(r["checks"]["faithful"].get("measurements", {}).get("association_decisions", 0) for r in clips.values())
    pres = {cid: (r["checks"]["faithful"].get("scores") or {}).get("P") for cid, r in clips.items()}
    p_ok = {cid: {"P": p, "ok": p is not None and p >= presence_min} for cid, p in pres.items()}
    figs = [
        _per_case_figure("real: removed object matched", per("removed"), "every clip: matched in <= 20% of frames where it showed"),
        _per_case_figure("real: recoloured still matched, appearance lower", per("recoloured"),
                         "every clip: matched on the object in >= 50% of the frames where the faithful clip was, appearance drop >= 0.1"),
        Figure("real: association agrees with per-frame GT", f"{agreed}/{decided}" + (f" ({agreed / decided:.1%})" if decided else ""),
               f">= {agreement_min:.0%} (matched with box IoU >= 0.3 where it shows, unmatched where gone)",
               _status(agreed / decided >= agreement_min) if decided else NOT_MEASURED),
        _per_case_figure("real: Presence of the real clip", p_ok, f"every clip: P >= {presence_min:g}"),
        _per_case_figure("real: pasted object yields extras", per("pasted"), "every clip: extras in > 50% of frames with it in view"),
    ]
    figs.append(clip_pasted_frames(clips))
    ex = [r["checks"]["faithful"].get("measurements", {}) for r in clips.values()]
    xr = sum(m.get("extra_rows", 0) for m in ex)
    nf = sum(m.get("sampled_frames", 0) for m in ex)
    figs.append(Figure("real: extras per frame on the real clips", f"{xr / nf:.3f} ({xr}/{nf})" if nf else "no frames",
                       "<= 0.2", _status(xr / nf <= 0.2) if nf else NOT_MEASURED))
    return figs


def clip_pasted_frames(clips: dict, share_min: float = 0.5) -> Figure:
    """Issue 30's pasted-object figure: of all the sampled frames (every clip together) where the pasted
    object is in view, the share with an extra. The issue asks the removed object's figure on every clip
    and this one over the frames it shows; the per-clip reading is `real: pasted object yields extras`."""
    name = "real: pasted object an extra, over the frames it shows"
    ms = [r["checks"].get("pasted", {}).get("measurements", {}) for r in clips.values()]
    shown = sum(m.get("pasted_in_view_frames") or 0 for m in ms)
    hit = sum(m.get("pasted_extra_frames") or 0 for m in ms)
    required = f">= {share_min:.0%} of the frames with it in view, the clips together (issue 30)"
    if not shown:
        return not_measured(name, required, "the pasted object is in view in no sampled frame")
    return Figure(name, f"{hit}/{shown} frames ({hit / shown:.0%})", required, _status(hit / shown >= share_min))


def clip_identity_failures(result: dict, tau_i: float = TAU_I) -> Figure:
    """Real clips: frames where the recoloured object is matched with a < tau_I, and of those the ones eq. 3 fails."""
    name = "real: recoloured frames with a < tau_I fail eq. 3"
    run = (result.get("run_dirs") or {}).get("recoloured")
    if run is None or not result.get("clips"):
        return not_measured(name, "at least one such frame, and all of them fail", "no recoloured clip evaluated")
    df = read_archive(run)
    n_low = n_fail = 0
    for cid in result["clips"]:
        rows = df[(df["case_id"] == cid) & (df["instance_id"] == CLIP_TARGET)].set_index("frame")
        lo, fa = identity_failures(rows, df[df["case_id"] == cid], tau_i)
        n_low, n_fail = n_low + lo, n_fail + fa
    return Figure(name, f"{n_fail}/{n_low} frames", "at least one such frame, and all of them fail", _status(n_low > 0 and n_fail == n_low))


def _at_least(value: float, floor: float) -> bool:
    """value >= floor for a score that is a mean of frame values: nine frames of ten give 89.99999999999999,
    which is 90 (float64 rounding of the hierarchical mean, not a lower score)."""
    return value >= floor - 1e-9 * max(1.0, abs(floor))


def demo_figures(scores: dict, df: pd.DataFrame, tau_i: float = TAU_I, p_min: float = 90.0) -> list[Figure]:
    """The demo's figures: faithful models (oracle, static) P >= 90 on every case and above every forgetful
    model; forgetful-recolor shows identity failures (matched, a < tau_I) and keeps its Presence."""
    faithful, forgetful = ("oracle", "static"), [m for m in scores.get("models", {}) if m.startswith("forgetful")]
    per = {}
    for c in scores.get("cases", []):
        if c["model"] in faithful:
            per[f"{c['model']}/{c['case_id']}"] = {"P": c.get("P"), "ok": c.get("P") is not None and _at_least(c["P"], p_min)}
    opis = {m: v.get("OPIS") for m, v in scores.get("models", {}).items()}
    low = min((opis.get(m) for m in faithful if opis.get(m) is not None), default=None)
    high = max((opis[m] for m in forgetful if opis.get(m) is not None), default=None)
    rank_ok = None if low is None or high is None else low > high
    figs = [
        _per_case_figure("demo: oracle and static Presence per case", per, f"every case: P >= {p_min:g}"),
        Figure("demo: faithful models rank above every forgetful one", f"min faithful OPIS {low}, max forgetful OPIS {high}",
               "min(oracle, static) > max(forgetful-*)", _status(rank_ok), opis),
    ]
    rows = df[(df["model"] == "forgetful-recolor") & df["matched"].astype(bool)]
    if rows.empty:
        figs.append(not_measured("demo: forgetful-recolor identity failures", "> 0 frames", "no rows"))
        return figs
    low_frames = rows[rows["appearance"] < tau_i].groupby(["case_id", "frame"]).size()
    n_frames = rows.groupby(["case_id", "frame"]).ngroups
    figs.append(Figure("demo: forgetful-recolor frames with an identity failure", f"{len(low_frames)}/{n_frames} frames",
                       "> 0 frames fail eq. 3", _status(len(low_frames) > 0)))
    p = (scores["models"].get("forgetful-recolor") or {}).get("P")
    figs.append(Figure("demo: forgetful-recolor keeps its Presence", f"P {p}", f"P >= {p_min:g}",
                       _status(None if p is None else _at_least(p, p_min))))
    return figs
