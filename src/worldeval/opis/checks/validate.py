"""`opis validate`: a metamorphic self-check of the evaluator on a dataset's own images.

For every case, `synth` renders a faithful rollout (a camera rotation and zoom
of I0, which any correct evaluator must accept) and rollouts in which one static
target object was removed, recoloured, squeezed, duplicated, moved or resized,
one with an object pasted from another photo, and one that shows a different scene. The evaluator runs on all of them exactly as on a
real model (`run_eval`, same archive), and this module checks that its OWN
measurements of the target moved the way each edit implies, compared with the
faithful rollout of the same case. Whether the target is in view in a frame is
taken from the synthetic ground truth (the known homography), never from the
evaluator, so an evaluator cannot pass by declaring the target unassessable.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from worldeval.errors import CaseError
from worldeval.opis.archive import read_archive
from worldeval.opis.case import Geometry, iter_case_dirs, load_case
from worldeval.opis.checks.synth import INTERVENTIONS, SYNTH_VERSION, SynthConfig, synthesize_case
from worldeval.opis.run import run_eval
from worldeval.opis.scoring import ScoreConfig, score_runs
from worldeval.runs import atomic_write_json

CHECKS = INTERVENTIONS
# The faithful rollout, four edits of the target (removed, recoloured, squeezed, duplicated) and
# another scene: every photo of coco_multiobj must pass these under the pan camera
# (tests/test_validate_e2e.py). moved, resized, pasted and the tilt and zoom paths are measured on
# the held-out photos instead (benchmarks/faithful_report.py), so no tuning is done on them.
CORE_CHECKS = ("faithful", "removed", "recoloured", "squeezed", "duplicated", "other_scene")


@dataclass
class Thresholds:
    """What each intervention must do to the evaluator's measurements for its check to pass."""

    faithful_opis: float = 60.0  # faithful OPIS at least this
    faithful_matched: float = 0.80  # target matched in at least this share of in-view frames
    removed_unmatched: float = 1.0  # target unmatched in this share of in-view frames (all of them)
    removed_p_drop: float = 25.0  # P lower than faithful by at least this
    recoloured_appearance_drop: float = 0.10  # target mean appearance lower by at least this
    squeezed_structure_drop: float = 0.10  # target mean structure lower by at least this
    duplicated_extra_frames: float = 0.5  # more than this share of frames (copy in view) hold an extra row
    duplicated_p_drop: float = 25.0
    other_scene_opis_drop: float = 25.0
    moved_structure_drop: float = 0.10  # a moved static object: mean structure lower by at least this
    resized_structure_drop: float = 0.10
    pasted_extra_frames: float = 0.5  # more than this share of frames (pasted object in view) hold an extra row
    required_pass_rate: float = 0.90  # share of cases that must pass each check


@dataclass
class ValidateConfig:
    synth: SynthConfig = field(default_factory=SynthConfig)
    thresholds: Thresholds = field(default_factory=Thresholds)
    backend: str = "classical"
    device: str = "cpu"
    workers: int = 1
    executor: str = "local"
    force: bool = False
    checks: tuple[str, ...] = CHECKS  # which interventions are rendered and checked
    # Give every case without geometry a flat depth (see with_plane_depth): the synthetic camera only
    # turns and zooms, so any depth is exact, and static Structure is then eq. 4 instead of static_flat.
    plane_depth: bool = False

    def synth_hash(self) -> str:
        key = {"version": SYNTH_VERSION, "synth": asdict(self.synth), "checks": list(self.checks)}
        if self.plane_depth:  # other cases, so other measurements: a change must not resume old ones
            key["plane_depth"] = True
        return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


# ---------------------------------------------------------------- synthesis step


def with_plane_depth(dataset: Path, out: Path, log: Callable[[str], None] = print) -> Path:
    """A copy of the dataset where each case without `geometry.npz` gets a flat one (depth 1 everywhere,
    valid everywhere, K the case's own intrinsics, the K the synthetic camera renders with), declared
    `exact_plane`.

    The rollouts of `opis validate` turn and zoom about the optical centre: every pixel moves by one
    homography whatever its depth, so a flat depth is exact geometry for them. With it the camera knows
    its scene is planar (perception/camera.py) and static Structure is eq. 4, with no per-object
    similarity correction: a moved or resized object shows. Cases that have geometry keep it.
    Real rollouts are another matter: a real camera translates, and a flat depth would be false there.
    """
    import shutil

    out.mkdir(parents=True, exist_ok=True)
    for d in iter_case_dirs(dataset):
        try:
            case = load_case(d)
        except CaseError:
            continue  # synthesize_dataset reports it, from the original folder
        dst = out / d.name
        if dst.exists():
            shutil.rmtree(dst)
        shutil.copytree(d, dst)
        if case.geometry is None:
            H, W = case.shape
            Geometry(np.ones((H, W), np.float32), case.intrinsics(), np.ones((H, W), bool), exact_plane=True).save(dst / "geometry.npz")
    log(f"plane depth: cases copied to {out}")
    return out


def forget_case(runs_root: Path, case_id: str) -> None:
    """Drop every measurement of `case_id` from validate's run folders.

    New clips under old names: `opis eval` would keep the measurements of the old clips (its resume
    looks at status records, not at the video), so the case's status, part and per-frame record go,
    and so do the consolidated per-model files that hold its old rows (rebuilt by the next eval).
    """
    for pattern in (f"*/status/*/{case_id}.json", f"*/parts/*/{case_id}.parquet", f"*/frames/*/{case_id}.json"):
        for p in runs_root.glob(pattern):
            p.unlink()
    for p in runs_root.glob("*/measurements/*.parquet"):
        p.unlink()


def synthesize_dataset(
    dataset: Path, out: Path, cfg: ValidateConfig, log: Callable[[str], None] = print
) -> tuple[dict[str, dict], dict[str, dict]]:
    """Render the rollouts of every case (resuming: a case whose record matches the config is kept).

    Returns (records by case id, load errors by case folder name).
    """
    cases, errors = [], {}
    for d in iter_case_dirs(dataset):
        try:
            cases.append(load_case(d))
        except CaseError as exc:
            errors[d.name] = {"file": exc.file, "field": exc.field, "message": exc.reason}
            log(f"case {d.name}: skipped ({exc})")
    records: dict[str, dict] = {}
    h = cfg.synth_hash()
    for k, case in enumerate(cases):
        rec_path = out / "synth" / f"{case.id}.json"
        if rec_path.exists() and not cfg.force:
            try:
                rec = json.loads(rec_path.read_text())
                if rec.get("synth_hash") == h and all(Path(v).exists() for v in rec["videos"].values()):
                    records[case.id] = rec
                    continue
            except (json.JSONDecodeError, KeyError):
                pass  # torn or foreign record: render again
        # The "other scene" is the next case's photo (cyclic), so it is a real scene, never a blank.
        other = cases[(k + 1) % len(cases)] if len(cases) > 1 else None
        t0 = time.perf_counter()
        forget_case(out / "runs", case.id)
        rec = synthesize_case(case, out / "rollouts", other=other, cfg=cfg.synth, interventions=cfg.checks, index=k)
        rec.pop("_images", None)
        rec["synth_hash"] = h
        rec["synth_seconds"] = round(time.perf_counter() - t0, 2)
        atomic_write_json(rec_path, rec)
        records[case.id] = rec
        tgt = rec.get("target") or {}
        log(f"synth {case.id} ({rec.get('camera_path') or 'configured camera'}): target {tgt.get('instance_id')} ({tgt.get('category')}), "
            f"{len(rec['videos'])} rollouts, {rec['synth_seconds']:.1f}s"
            + (f", skipped {sorted(rec['skipped'])}" if rec["skipped"] else ""))
    return records, errors


# ---------------------------------------------------------------- measurements


def _mean(values) -> float | None:
    v = [float(x) for x in values if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return float(np.mean(v)) if v else None


def _in_view(gt: dict, key: str, frames: list[int]) -> list[int]:
    share, thr = gt.get(f"{key}_in_view_share") or [], gt["in_view_share_threshold"]
    return [f for f in frames if f < len(share) and share[f] is not None and share[f] >= thr]


def target_measurements(rows: pd.DataFrame, rec: dict, target_id: str | None, intervention: str | None = None) -> dict:
    """The evaluator's measurements of the target (and extras) in one rollout, next to the ground truth.

    For `moved` and `resized` the target is in view where the edit put it; for `pasted` the extras
    are counted where the pasted object is in view."""
    gt = rec["ground_truth"]
    frames = sorted(int(f) for f in rows["frame"].unique())
    out: dict[str, Any] = {"sampled_frames": len(frames)}
    extras = rows[rows["extra"].astype(bool)]
    per_frame_extra = extras.groupby("frame").size().to_dict() if len(extras) else {}
    out["extra_rows"] = int(len(extras))
    out["frames_with_extra"] = int(sum(1 for f in frames if per_frame_extra.get(f, 0) > 0))
    for key, label in (("duplicate", "copy"), ("pasted", "pasted")):
        if key == "pasted" and intervention != "pasted":
            continue
        fr = _in_view(gt, key, frames)
        out[f"{key}_in_view_frames"] = len(fr)
        out[f"extra_share_where_{label}_in_view"] = sum(1 for f in fr if per_frame_extra.get(f, 0) > 0) / len(fr) if fr else None
    if target_id is None:
        return out
    t = rows[rows["instance_id"] == target_id].set_index("frame")
    in_view = _in_view(gt, intervention if intervention in ("moved", "resized") else "target", frames)
    matched = [f for f in in_view if f in t.index and bool(t.at[f, "matched"])]
    out["target_in_view_frames"] = len(in_view)
    out["target_matched_in_view"] = len(matched)
    out["target_matched_share"] = len(matched) / len(in_view) if in_view else None
    mt = t[t["matched"].astype(bool)]
    out["target_appearance"] = _mean(mt["appearance"].tolist())
    out["target_structure"] = _mean(t["structure"].tolist())
    out["target_visibility"] = {str(k): int(v) for k, v in t["visibility"].astype(object).fillna("null").value_counts().items()}
    out["target_ambiguous_frames"] = int(t["ambiguous"].astype(bool).sum())
    return out


def _num(x) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def judge(name: str, m: dict, base: dict | None, sc: dict, base_sc: dict | None, th: Thresholds) -> tuple[bool, str]:
    """Did the evaluator's measurements move the way intervention `name` implies? (pass, reason)"""
    def drop(a, b):
        return None if a is None or b is None else a - b

    if name == "faithful":
        opis, ms = _num(sc.get("OPIS")), m.get("target_matched_share")
        if opis is None:
            return False, "OPIS undefined"
        if ms is None:
            return False, "target never in view"
        ok = opis >= th.faithful_opis and ms >= th.faithful_matched
        return ok, f"OPIS {opis:.1f} (>= {th.faithful_opis:g}), target matched {ms:.0%} of in-view frames (>= {th.faithful_matched:.0%})"
    if base is None or base_sc is None:
        return False, "faithful rollout not evaluated"
    if name == "removed":
        n = m.get("target_in_view_frames") or 0
        if n == 0:
            return False, "target never in view"
        unmatched = 1 - m["target_matched_in_view"] / n
        d = drop(_num(base_sc.get("P")), _num(sc.get("P")))
        ok = unmatched >= th.removed_unmatched and d is not None and d >= th.removed_p_drop
        return ok, f"unmatched in {unmatched:.0%} of in-view frames, P drop {_fmt(d)} (>= {th.removed_p_drop:g})"
    if name == "recoloured":
        d = drop(base.get("target_appearance"), m.get("target_appearance"))
        if m.get("target_appearance") is None:
            return False, "recoloured target never matched: no appearance measured"
        return d is not None and d >= th.recoloured_appearance_drop, f"appearance drop {_fmt(d, 3)} (>= {th.recoloured_appearance_drop:g})"
    if name in ("squeezed", "moved", "resized"):
        need = {"squeezed": th.squeezed_structure_drop, "moved": th.moved_structure_drop, "resized": th.resized_structure_drop}[name]
        d = drop(base.get("target_structure"), m.get("target_structure"))
        if m.get("target_structure") is None:
            return False, f"no structure measured on the {name} target"
        why = f"structure drop {_fmt(d, 3)} (>= {need:g})"
        if name != "squeezed":
            why += f", matched in {_fmt_pct(m.get('target_matched_share'))} of in-view frames"
        return d is not None and d >= need, why
    if name == "pasted":
        es = m.get("extra_share_where_pasted_in_view")
        ok = es is not None and es > th.pasted_extra_frames
        return ok, f"extra rows in {_fmt_pct(es)} of frames with the pasted object in view (> {th.pasted_extra_frames:.0%})"
    if name == "duplicated":
        es = m.get("extra_share_where_copy_in_view")
        d = drop(_num(base_sc.get("P")), _num(sc.get("P")))
        ok = es is not None and es > th.duplicated_extra_frames and d is not None and d >= th.duplicated_p_drop
        return ok, f"extra rows in {_fmt_pct(es)} of frames with the copy in view (> {th.duplicated_extra_frames:.0%}), P drop {_fmt(d)} (>= {th.duplicated_p_drop:g})"
    if name == "other_scene":
        d = drop(_num(base_sc.get("OPIS")), _num(sc.get("OPIS")))
        return d is not None and d >= th.other_scene_opis_drop, f"OPIS drop {_fmt(d)} (>= {th.other_scene_opis_drop:g})"
    raise ValueError(name)


def _fmt(x, nd: int = 1) -> str:
    return "n/a" if x is None else f"{x:.{nd}f}"


def _fmt_pct(x) -> str:
    return "n/a" if x is None else f"{x:.0%}"


# ---------------------------------------------------------------- the whole check


def evaluate_rollouts(dataset: Path, out: Path, records: dict[str, dict], cfg: ValidateConfig, log=print) -> dict[str, Path]:
    """Run the evaluator on every intervention's rollout folder as if each were a model.

    Each intervention gets its own run folder `out/runs/<intervention>` (a plain `opis eval` run),
    so a run's resume guard never sees two models. Returns {intervention: run folder}.
    """
    run_dirs = {}
    for name in cfg.checks:
        folder = out / "rollouts" / name
        if not folder.is_dir():
            continue
        run_dir = out / "runs" / name
        t0 = time.perf_counter()
        # force: these run folders are validate's own scratch; an evaluator whose settings changed since the
        # last validate must redo the items it made (run_eval redoes exactly those), not refuse to resume.
        summary = run_eval(
            dataset, folder, name, run_dir, backend=cfg.backend, device=cfg.device, workers=cfg.workers,
            executor=cfg.executor, force=True,
        )
        run_dirs[name] = run_dir
        log(f"eval {name}: {time.perf_counter() - t0:.1f}s {_short(summary)}")
    return run_dirs


def _short(summary: Any) -> str:
    if not isinstance(summary, dict):
        return ""
    keep = {k: (len(v) if isinstance(v, list) else v) for k, v in summary.items() if k in ("done", "skipped", "failed")}
    return json.dumps(keep, default=str)[:200]


def _status(run_dir: Path, model: str, case_id: str) -> dict | None:
    p = run_dir / "status" / model / f"{case_id}.json"
    try:
        return json.loads(p.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def assess(run_dirs: dict[str, Path] | Path, records: dict[str, dict], load_errors: dict, cfg: ValidateConfig) -> dict:
    """Per case and intervention: measurements, case-level P/I/S/OPIS, pass/fail with the reason; pass rates.

    `run_dirs` maps each intervention to its run folder (or is one folder holding all of them).
    """
    th = cfg.thresholds
    checks = cfg.checks
    if isinstance(run_dirs, (str, Path)):
        run_dirs = {name: Path(run_dirs) for name in checks}
    paths = sorted({str(p) for p in run_dirs.values() if Path(p).exists()})
    try:
        scores = score_runs(paths, ScoreConfig(bootstrap=0))
        by_case = {(c["model"], c["case_id"]): c for c in scores["cases"]}
        df = read_archive(paths)
    except Exception as exc:  # nothing evaluated at all: report it, every check fails
        by_case, df = {}, None
        scores = {"error": str(exc)}
    results: dict[str, dict] = {}
    for case_id, rec in records.items():
        tid = (rec.get("target") or {}).get("instance_id")
        per: dict[str, dict] = {}
        for name in checks:
            entry: dict[str, Any] = {"intervention": name}
            if name in rec["skipped"] or name not in rec["videos"]:
                entry.update(passed=False, skipped=True, reason=rec["skipped"].get(name, "not synthesised"))
                per[name] = entry
                continue
            sc = by_case.get((name, case_id))
            rows = None if df is None else df[(df["model"] == name) & (df["case_id"] == case_id)]
            if sc is None or rows is None or rows.empty:
                st = (_status(Path(run_dirs[name]), name, case_id) if name in run_dirs else None) or {}
                err = st.get("error") or {"message": "no measurements in the run folder"}
                entry.update(passed=False, error=err, reason=f"evaluation failed: {err.get('message')}")
                per[name] = entry
                continue
            entry["scores"] = {k: _num(sc.get(k)) for k in ("P", "I", "S", "C_S", "OPIS")}
            entry["measurements"] = target_measurements(rows, rec, tid, name)
            per[name] = entry
        base = per.get("faithful", {})
        for name, entry in per.items():
            if "measurements" not in entry:
                continue
            ok, why = judge(name, entry["measurements"], base.get("measurements"), entry["scores"], base.get("scores"), th)
            entry["passed"], entry["reason"] = bool(ok), why
        results[case_id] = {"target": rec.get("target"), "camera_path": rec.get("camera_path"), "checks": per}
    n = len(records) + len(load_errors)
    rates = {}
    for name in checks:
        passed = sum(1 for r in results.values() if r["checks"][name].get("passed"))
        skipped = sum(1 for r in results.values() if r["checks"][name].get("skipped"))
        rates[name] = {
            "passed": passed,
            "cases": n,
            "skipped": skipped,
            "rate": passed / n if n else None,
            "required": th.required_pass_rate,
            "ok": bool(n and passed / n >= th.required_pass_rate),
        }
    return {
        "cases": results,
        "load_errors": load_errors,
        "pass_rates": rates,
        "all_ok": all(r["ok"] for r in rates.values()),
        "scores_error": scores.get("error") if isinstance(scores, dict) else None,
    }


def run_validate(
    dataset: str | Path, out: str | Path, cfg: ValidateConfig | None = None, log: Callable[[str], None] = print
) -> dict:
    """Synthesise, evaluate, assess; writes `out/validate.json` and returns the same object."""
    cfg = cfg or ValidateConfig()
    dataset, out = Path(dataset), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    source = dataset
    if cfg.plane_depth:
        dataset = with_plane_depth(dataset, out / "cases_plane_depth", log)
    records, errors = synthesize_dataset(dataset, out, cfg, log)
    t1 = time.perf_counter()
    run_dirs = evaluate_rollouts(dataset, out, records, cfg, log)
    t2 = time.perf_counter()
    result = assess(run_dirs, records, errors, cfg)
    result["config"] = {
        "dataset": str(source),
        "backend": cfg.backend,
        "device": cfg.device,
        "synth": asdict(cfg.synth),
        "checks": list(cfg.checks),
        "plane_depth": cfg.plane_depth,
        "thresholds": asdict(cfg.thresholds),
    }
    result["run_dirs"] = {k: str(v) for k, v in run_dirs.items()}
    result["timings"] = {"synthesis_s": round(t1 - t0, 2), "evaluation_s": round(t2 - t1, 2), "total_s": round(time.perf_counter() - t0, 2)}
    atomic_write_json(out / "validate.json", result)
    return result


def render_table(result: dict):
    """A rich table: one row per case, one column per check, then the pass rates."""
    from rich.table import Table

    table = Table(title="opis validate: did the evaluator's own measurements move as each edit implies?")
    table.add_column("case")
    table.add_column("target")
    checks = list(result["pass_rates"])
    for name in checks:
        table.add_column(name)
    for case_id, r in result["cases"].items():
        tgt = r.get("target") or {}
        cells = []
        for name in checks:
            e = r["checks"][name]
            mark = "[green]pass[/]" if e.get("passed") else ("[yellow]skip[/]" if e.get("skipped") else "[red]FAIL[/]")
            s = e.get("scores") or {}
            psi = f"P{_fmt(s.get('P'), 0)} I{_fmt(s.get('I'), 0)} S{_fmt(s.get('S'), 0)} O{_fmt(s.get('OPIS'), 0)}" if s else ""
            cells.append(f"{mark} {psi}\n{e.get('reason', '')}")
        table.add_row(f"{case_id}\n{r.get('camera_path') or ''}", f"{tgt.get('instance_id', '-')}\n{tgt.get('category', '')}", *cells)
    rates = result["pass_rates"]
    table.add_row(
        "[bold]pass rate[/]", f"need >= {next(iter(rates.values()))['required']:.0%}",
        *[("[green]" if rates[n]["ok"] else "[red]") + f"{rates[n]['passed']}/{rates[n]['cases']}[/]" for n in checks],
    )
    return table
