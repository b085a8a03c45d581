"""The WorldCast part of the report: leaderboard and per-case step sequences.

Scores come from `worldeval.worldcast.scoring.scores.score_runs`; the per-case view
reads `judgments.jsonl` directly to show each metric's score and the judge's
evidence next to the judged step images, with the generation trace
(`generation.json` from `worldcast generate`: plan, calls, inspections,
choices) and the video adapter's keyframe choices when they exist.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from worldeval.media import read_image
from worldeval.report import images, plots
from worldeval.report.loaders import num as _num, WorldCastRun, resolve_path
from worldeval.report.opis import slug
from worldeval.thumbnails import downscale, jpeg_data_uri

from worldeval.worldcast.judging.metrics import CASE_METRICS as METRICS, METRICS as _SPECS
from worldeval.worldcast.inputs.cases import CATEGORY_SHORT, load_cases
from worldeval.worldcast.scoring import scores as scoring

METRIC_MAX = {k: _SPECS[k].top for k in METRICS}
IMAGE_EXTS = (".png", ".jpg", ".jpeg", ".webp")

WcScoreFn = Callable[[list[Path]], dict]


def default_score_fn(paths: list[Path], bootstrap: int, seed: int) -> dict:
    return scoring.score_runs([str(p) for p in paths], bootstrap=bootstrap, seed=seed)


def scripted_judges(runs: list[WorldCastRun]) -> dict[str, dict]:
    """model -> the script that answered for it, for models judged by a scripted (mock) transport."""
    out: dict[str, dict] = {}
    for run in runs:
        man = run.manifest or {}
        for model, prov in (man.get("models") or {}).items():
            tr = prov.get("transport") if isinstance(prov, dict) else None
            if isinstance(tr, dict) and tr.get("name") == "mock":
                out[str(model)] = {"label": tr.get("label") or "scripted answers", "script": tr.get("script")}
        tr = ((man.get("backends") or {}).get("judge") or {}).get("transport") or {}
        cfg_model = (man.get("config") or {}).get("model")
        if tr.get("name") == "mock" and cfg_model and str(cfg_model) not in out:
            out[str(cfg_model)] = {"label": tr.get("label") or "scripted answers", "script": tr.get("script")}
    return out


def _failed(rec: dict) -> bool:
    st = rec.get("status")
    if isinstance(st, str) and st.lower() in ("failed", "failure", "error"):
        return True
    if rec.get("ok") is False:
        return True
    return bool(rec.get("error")) and rec.get("score") is None


def collect_cases(run: WorldCastRun) -> dict[tuple[str, str], dict]:
    """Group the run's judgment records into one entry per (model, case).

    Records are one line per judge item (model, case, metric[, step]); the
    latest line of an item wins, as a rerun replaces a failed call.
    """
    latest: dict[tuple, dict] = {}
    for rec in run.judgments:
        if isinstance(rec, dict) and {"model", "case_id", "metric"} <= rec.keys():
            latest[(rec["model"], rec["case_id"], rec["metric"], rec.get("step"))] = rec
    cases: dict[tuple[str, str], dict] = {}
    for (model, case_id, metric, step), rec in latest.items():
        e = cases.setdefault((str(model), str(case_id)), {
            "model": str(model), "case_id": str(case_id), "category": rec.get("category"), "level": rec.get("level"),
            "metrics": {}, "step_checks": {}, "interface": rec.get("interface"), "warnings": [],
        })
        e["category"] = e["category"] or rec.get("category")
        e["level"] = e["level"] or rec.get("level")
        e["interface"] = e["interface"] or rec.get("interface")
        for w in rec.get("warnings") or []:
            if w not in e["warnings"]:
                e["warnings"].append(str(w))
        item = {"score": rec.get("score") if not _failed(rec) else None, "evidence": rec.get("evidence"),
                "failed": _failed(rec), "error": rec.get("error")}
        name = str(metric).upper()
        if name == "STEP" and step is not None:
            e["step_checks"][int(step)] = item
        elif name in METRICS:
            e["metrics"][name] = item
    return cases


def _dataset_cases(run: WorldCastRun, notes: list[str]) -> dict:
    """The run's WorldCast cases by id (instruction and input images), when its dataset is reachable."""
    man = run.manifest or {}
    cfg = man.get("config") if isinstance(man.get("config"), dict) else {}
    ds = resolve_path(cfg.get("dataset") or man.get("dataset"), [run.root, run.root.parent, Path.cwd()])
    if ds is None:
        return {}
    try:
        return {c.id: c for c in load_cases(ds)}
    except (ValueError, OSError) as exc:
        notes.append(f"WorldCast dataset not readable: {exc}")
        return {}


def _step_files(folder: Path) -> list[Path]:
    def k(p: Path) -> int:
        digits = "".join(ch for ch in p.stem.rsplit("_", 1)[-1] if ch.isdigit())
        return int(digits) if digits else 0

    return sorted((p for p in folder.glob("step_*.*") if p.suffix.lower() in IMAGE_EXTS), key=k)


def _output_dir(run: WorldCastRun, model: str, case_id: str) -> Path | None:
    """`<outputs>/<case_id>` of the model, when the run's manifest names its outputs folder."""
    man = run.manifest or {}
    cfg = man.get("config") if isinstance(man.get("config"), dict) else {}
    prov = (man.get("models") or {}).get(model) if isinstance(man.get("models"), dict) else None
    if isinstance(prov, dict) and prov.get("outputs"):
        where = prov["outputs"]
    elif cfg.get("model") in (None, model):
        where = cfg.get("outputs") or man.get("outputs")  # a folder judged before per-model provenance
    else:
        return None
    outputs = resolve_path(where, [run.root, run.root.parent, Path.cwd()])
    return outputs / case_id if outputs is not None and (outputs / case_id).is_dir() else None


def _steps_from_outputs(run: WorldCastRun, model: str, case_id: str) -> list[Path]:
    """The judged states of one output: the adapter's saved states (grid cells, video keyframes)
    first, else the model's `step_k` images in the outputs folder the manifest names."""
    saved = run.root / "states" / model / case_id
    if saved.is_dir() and _step_files(saved):
        return _step_files(saved)
    out = _output_dir(run, model, case_id)
    return _step_files(out) if out is not None else []


def _read_json(path: Path, notes: list[str]):
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        notes.append(f"{path}: unreadable ({exc})")
        return None


def generation_trace(case_dir: Path | None, notes: list[str], thumb_side: int = 96) -> dict | None:
    """What `worldcast generate` recorded for one output (`generation.json`), in the report's terms.

    Each inspection carries a thumbnail of the draft it inspected, so regenerations can be compared."""
    tr = _read_json(case_dir / "generation.json", notes) if case_dir is not None else None
    if not isinstance(tr, dict):
        return None
    calls = [c for c in tr.get("calls") or [] if isinstance(c, dict)]
    plan = tr.get("plan") if isinstance(tr.get("plan"), dict) else {}
    return {
        "mode": tr.get("mode"), "interface": tr.get("interface"), "budget": tr.get("budget"),
        "calls": len(calls), "failed_calls": sum(c.get("status") == "failed" for c in calls),
        "call_errors": [f"{c.get('purpose')}: {c.get('error')}" for c in calls if c.get("status") == "failed"],
        "plan": [str(x) for x in plan.get("steps") or []], "plan_model": plan.get("model"),
        "inspections": [{"step": i.get("step"), "attempt": i.get("attempt"), "score": i.get("score"),
                         "ok": i.get("ok"), "problems": i.get("problems") or i.get("error") or "",
                         "uri": _draft_thumb(case_dir, i.get("draft"), thumb_side, notes)}
                        for i in tr.get("inspections") or [] if isinstance(i, dict)],
        "choices": [c for c in tr.get("choices") or [] if isinstance(c, dict)],
        "notes": [str(n) for n in tr.get("notes") or []],
    }


def _draft_thumb(case_dir: Path, rel, side: int, notes: list[str]) -> str | None:
    if not isinstance(rel, str) or Path(rel).is_absolute() or ".." in Path(rel).parts:
        return None
    path = case_dir / rel
    return _thumb(path, side, notes) if path.is_file() else None


def keyframe_trace(states_dir: Path, notes: list[str]) -> dict | None:
    """How the video adapter chose the keyframes (`selection.json`, `keyframe_trace.json` beside them)."""
    sel = _read_json(states_dir / "selection.json", notes)
    if not isinstance(sel, dict):
        return None
    tr = _read_json(states_dir / "keyframe_trace.json", notes) or {}
    how = {c.get("step"): c for c in tr.get("choices") or [] if isinstance(c, dict)}
    steps = [{"step": s.get("step"), "t": s.get("timestamp_seconds"), "frame": s.get("frame_index"),
              "achieved": s.get("achieved"), "evidence": s.get("evidence"), "from": how.get(s.get("step"), {}).get("from")}
             for s in sel.get("steps") or [] if isinstance(s, dict)]
    rounds = [r for r in tr.get("rounds") or [] if isinstance(r, dict)]
    return {"selector": sel.get("selector"), "steps": steps, "requests": tr.get("requests"),
            "budget": tr.get("budget_requests"), "failed_rounds": sum(r.get("ok") is False for r in rounds)}


def _thumb(path: Path | None, side: int, notes: list[str]) -> str | None:
    if path is None:
        return None
    try:
        img, _ = downscale(read_image(path), side)
    except ValueError as exc:
        notes.append(str(exc))
        return None
    return jpeg_data_uri(img)


def _model_block(run: WorldCastRun, e: dict, cid: str, thumb_side: int, overall: dict | None,
                 scripted: dict | None) -> dict:
    """One model's part of a case page: its judged states, each metric's score and evidence, traces."""
    mnotes: list[str] = list(e["warnings"])
    steps = []
    for k, p in enumerate(_steps_from_outputs(run, e["model"], cid), 1):
        uri = _thumb(p, thumb_side, mnotes)
        if uri is None:
            continue
        check = e["step_checks"].get(k)
        caption = f"step {k}"
        if check is not None:
            caption += " · step check: " + ("failed" if check["failed"] else f"{check['score']}/1")
        steps.append({"uri": uri, "caption": caption})
    metrics = []
    for mk in METRICS:
        if mk in e["metrics"]:
            d = e["metrics"][mk]
            metrics.append({"name": mk, "score": d["score"], "max": METRIC_MAX[mk], "evidence": d["evidence"],
                            "failed": d["failed"], "error": d["error"]})
    return {"model": e["model"], "anchor": slug("wc-rollout", e["model"], cid), "steps": steps,
            "metrics": metrics, "notes": mnotes, "interface": e["interface"], "overall": overall,
            "scripted": scripted, "generation": generation_trace(_output_dir(run, e["model"], cid), mnotes),
            "keyframes": keyframe_trace(run.root / "states" / e["model"] / cid, mnotes)}


def _ci(v) -> list[float] | None:
    if isinstance(v, (list, tuple)) and len(v) == 2 and all(_num(x) is not None for x in v):
        return [float(v[0]), float(v[1])]
    return None


def _ranks(rows: list[dict]) -> None:
    """Competition ranks over the rows with a Final (ties share a rank); the others get None."""
    finals = [round(r["final"], 9) for r in rows if r["final"] is not None]
    for r in rows:
        r["rank"] = None if r["final"] is None else 1 + sum(1 for x in finals if x > round(r["final"], 9))


def leaderboard_rows(scores: dict, scripted: dict) -> tuple[list[dict], list[dict]]:
    """(ranked rows best first, ties by name; rows of models without a score): the second are never ranked."""
    rows = []
    for name, m in (scores.get("models") or {}).items():
        rows.append({"model": name, "final": _num(m.get("final")), "TC": _num(m.get("TC")), "CP": _num(m.get("CP")),
                     "VC": _num(m.get("VC")), "L3": _num(m.get("L3")), "L4": _num(m.get("L4")),
                     "ci": {k: _ci(m.get(f"{k}_ci")) for k in ("final", "TC", "CP", "VC")},
                     "categories": m.get("categories") or {}, "n_cases": m.get("n_cases"),
                     "n_failed": m.get("n_failed"), "anchor": slug("wc-model", name),
                     "scripted": scripted.get(name)})
    _ranks(rows)
    ranked = sorted((r for r in rows if r["rank"] is not None), key=lambda r: (r["rank"], r["model"]))
    return ranked, sorted((r for r in rows if r["rank"] is None), key=lambda r: r["model"])


CHART_KEYS = ("final", "TC", "CP", "VC")
CHART_LABELS = {"final": "Final"}
CHART_NAME_MAX = 24  # characters of a model name under the chart; the table beside it has the full name


def short_name(name: str, limit: int = CHART_NAME_MAX) -> str:
    """A long model name with its middle elided: both the organisation and the variant stay readable."""
    if len(name) <= limit:
        return name
    head = (limit - 1) // 2
    return name[:head] + "…" + name[len(name) - (limit - 1 - head):]


def score_figure(models: list[str], table: dict[str, dict], keys=CHART_KEYS):
    """Grouped bars (0-100) per model, the legend to the right of the plot area so no bar is hidden
    behind it; tight_layout keeps that legend inside the saved figure."""
    import matplotlib.pyplot as plt  # the Agg backend is chosen by importing `plots`
    import numpy as np

    fig, ax = plt.subplots(figsize=(min(12.0, max(4.5, 1.6 + 1.0 * len(models))), 3.0))
    width = 0.8 / max(1, len(keys))
    x = np.arange(len(models))
    for k, key in enumerate(keys):
        vals = [_num(table.get(m, {}).get(key)) for m in models]
        ax.bar(x + (k - (len(keys) - 1) / 2) * width, [0.0 if v is None else v for v in vals], width,
               label=CHART_LABELS.get(key, key))
    ax.set_xticks(x, labels=[short_name(m) for m in models], rotation=20, ha="right")
    ax.set_ylim(0, 100)
    ax.set_title("WorldCast scores")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False)
    fig.tight_layout()
    return fig


def build_worldcast(runs: list[WorldCastRun], *, score_fn: WcScoreFn | None, max_cases: int, thumb_side: int,
                    bootstrap: int, seed: int) -> dict:
    """The WorldCast part's template data; the options' defaults are `render_report`'s."""
    errors: list[str] = []
    notes = [n for r in runs for n in r.notes]
    try:
        paths = [r.root for r in runs]
        scores = score_fn(paths) if score_fn else default_score_fn(paths, bootstrap, seed)
    except Exception as exc:
        errors.append(f"WorldCast scoring failed: {type(exc).__name__}: {exc}")
        scores = {"models": {}}
    scripted = scripted_judges(runs)
    rows, unscored = leaderboard_rows(scores, scripted)
    categories = sorted({c for r in rows + unscored for c in r["categories"]})
    for r in rows + unscored:
        r["cat_values"] = [_num(r["categories"].get(c)) for c in categories]
    fig = None
    if rows:
        try:
            fig = images.figure_data_uri(score_figure([r["model"] for r in rows], {r["model"]: r for r in rows}),
                                         plots.DPI)
        except Exception as exc:
            errors.append(f"plotting failed: {exc}")
    board = {r["model"]: r for r in rows + unscored}
    order = {r["model"]: k for k, r in enumerate(rows + unscored)}
    all_cases: dict[tuple[str, str], tuple[WorldCastRun, dict]] = {}
    datasets: dict[str, object] = {}
    for run in runs:
        for cid, case in _dataset_cases(run, notes).items():
            datasets.setdefault(cid, case)
        for key, e in collect_cases(run).items():
            all_cases[key] = (run, e)
    case_ids = sorted({c for _, c in all_cases})
    shown = set(case_ids[:max_cases] if max_cases >= 0 else case_ids)
    sections = []
    for cid in case_ids:
        if cid not in shown:
            continue
        entries = sorted((v for (m, c), v in all_cases.items() if c == cid),
                         key=lambda v: (order.get(v[1]["model"], 1e9), v[1]["model"]))
        case = datasets.get(cid)  # None: the run's dataset could not be read
        sec = {"case_id": cid, "anchor": slug("wc-case", cid), "category": None, "level": None,
               "instruction": case.instruction if case is not None else None, "inputs": [], "models": []}
        inotes: list[str] = []
        for img in case.images if case is not None else []:
            uri = _thumb(Path(img.path), thumb_side, inotes)
            if uri:
                sec["inputs"].append({"uri": uri, "caption": img.role})
        for run, e in entries:
            for k in ("category", "level"):
                sec[k] = sec[k] or e[k]
            sec["models"].append(_model_block(run, e, cid, thumb_side, board.get(e["model"]), scripted.get(e["model"])))
        sec["notes"] = inotes
        sections.append(sec)
    b = scores.get("bootstrap") if isinstance(scores.get("bootstrap"), dict) else {}
    return {
        "present": bool(runs), "leaderboard": rows, "unscored": unscored, "categories": categories, "fig": fig,
        "category_labels": {c: CATEGORY_SHORT.get(c, c) for c in categories},
        "sections": sections, "scripted": scripted, "bootstrap": b.get("replicates") or 0,
        "omitted_cases": len(case_ids) - len(shown), "errors": errors, "notes": notes,
        "runs": [{"root": str(r.root), "manifest": r.manifest} for r in runs],
    }
