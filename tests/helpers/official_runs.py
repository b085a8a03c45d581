"""Runs of the OPIS authors' evaluator, written by hand in their on-disk layout.

`write_official_run` lays out `<root>/<safe(model)>/<safe(scene_id)>/<run_id>/` with the four files
`opis import-run` reads: eval_v3/per_frame_metrics_v3.jsonl (one row per window x reference, every key
their evaluator writes, in its order), eval_v3/summary_v3.json (metrics, metadata, the same rows as
`frames`), observation/video_observation.json (windows with timestamps) and run_manifest.json
(scene_id, ffprobe-like video_metadata). `v3_row` builds one jsonl row for a given state with the
values their evaluator would put beside it, so a test only spells out what it is about.
"""

from __future__ import annotations

import json
from pathlib import Path

from worldeval.opis.official.runs import CONTRACT, safe

# presence and identity their evaluator writes for each state (matched states take the given identity)
MATCHED_STATES = ("scored", "identity_only", "dynamic_identity")
TRACK_KEYS = {"static": "static_geometry", "dynamic": "dynamic_identity", "excluded": "excluded", None: "unlabeled"}


def v3_row(reference_id: str, state: str, *, track: str | None = "static", identity: float | None = None,
           geometry: float | None = None, structure: float | None = None, backend: str = "vlm",
           visibility_state: str = "expected_visible", ambiguous: bool = False, presence: float | None = None,
           unmatched: int = 0, fp_evaluable: bool = True, reason: str | None = None) -> dict:
    """One row of per_frame_metrics_v3.jsonl (frame_index and window keys are set by `write_official_run`).

    track: static / dynamic / excluded / None (unlabeled), the dataset's track; `presence` overrides
    the state's (their evaluator_failure with a match has presence 1)."""
    if presence is None:
        presence = 1.0 if state in MATCHED_STATES else 0.0 if state == "generation_failure" else None
    if state == "generation_failure":
        identity = 0.0
    matched = presence == 1.0
    diag = {"visibility_evidence": "direct_observation", "match_score": 0.7 if matched else None,
            "match_margin": 0.02 if ambiguous else 0.3, "ambiguous_match": ambiguous,
            "evaluation_track": TRACK_KEYS[track], "geometry_candidate": track == "static",
            "structure_candidate": track == "dynamic", "structure_eligible": False,
            "geometry_eligible": state == "scored", "presence_eligible": presence is not None,
            "visibility_state": visibility_state, "visibility_confidence": 0.9,
            "reason": reason or ("projective_consistency_measured" if state == "scored" else "direct_observation"),
            "ambiguity_group": None, "observed_track_id": None}
    if track == "dynamic" and matched:
        diag["structure_eligible"] = structure is not None
        diag["structure_evidence"] = {"score": structure, "backend": backend, "reason": "scored"}
    if state == "generation_failure":
        diag["reason"] = "expected_visible_missing"
    # Their evaluator writes a count of 0 off FP-evaluable windows; a test may give one anyway to check the gate.
    diag.update({"unmatched_observed_count": unmatched, "unmatched_observed_candidate_count": unmatched,
                 "false_positive_evaluable": fp_evaluable})
    return {"frame_index": None, "reference_id": reference_id, "observed_id": "f_obj" if matched else None,
            "state": state, "identity": identity, "presence": presence,
            "visible_surface_geometry": geometry if state == "scored" else None, "scale_consistency": None,
            "local_topology": None, "correspondence_coverage": 0.8 if state == "scored" else None,
            "inlier_ratio": 0.9 if state == "scored" else None, "reprojection_error_px": 1.5 if state == "scored" else None,
            "diagnostics": diag, "input_structure": structure, "structure_coverage": 1.0 if structure is not None else None}


def write_official_run(root: Path, model: str, scene_id: str, rows_by_window: dict[int, list[dict]], *,
                       run_id: str = "run-0123456789ab", timestamps: dict[int, float | None] | None = None,
                       observation: bool = True, video_metadata: dict | None = None, metrics: dict | None = None,
                       structure_enabled: bool = True, contract: str = CONTRACT) -> Path:
    """One run folder of their evaluator; returns it. `timestamps` (frame -> seconds or None) default to
    frame / 16; `observation=False` leaves out video_observation.json (times then come from the fps)."""
    run = Path(root) / safe(model) / safe(scene_id) / run_id
    (run / "eval_v3").mkdir(parents=True, exist_ok=True)
    rows = []
    for ordinal, (frame, window) in enumerate(rows_by_window.items()):
        for r in window:
            row = {**r, "frame_index": frame, "diagnostics": dict(r["diagnostics"])}
            row["diagnostics"].update({"window_id": f"frame_{frame:06d}", "window_ordinal": ordinal})
            rows.append(row)
    (run / "eval_v3" / "per_frame_metrics_v3.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    metrics = {"presence_score": 0.5, "identity_score": 0.6, "v3_reference_projective_score": 0.7,
               "v3_structural_quality_score": 0.55, "headline_score": 56.0, **(metrics or {})}
    summary = {"protocol_version": "3.0", "scene_id": scene_id, "video_id": f"{model}:{run_id}", "metrics": metrics,
               "frames": rows, "metadata": {"metric_contract_version": contract, "structure_enabled": structure_enabled}}
    (run / "eval_v3" / "summary_v3.json").write_text(json.dumps(summary, indent=2))
    if observation:
        stamps = timestamps if timestamps is not None else {f: f / 16 for f in rows_by_window}
        windows = [{"window_id": f"frame_{f:06d}", "frame_index": f, "timestamp": stamps.get(f), "frame_size": [640, 480],
                    "objects": [], "metadata": {"num_observed_objects": 0}} for f in rows_by_window]
        (run / "observation").mkdir(exist_ok=True)
        (run / "observation" / "video_observation.json").write_text(json.dumps(
            {"schema_version": 2, "video_id": f"{model}:{run_id}", "windows": windows,
             "metadata": {"sampled_frame_indices": list(rows_by_window)}}))
    manifest = {"schema_version": "1.0", "run_id": run_id, "scene_id": scene_id, "status": "completed",
                "video_metadata": video_metadata if video_metadata is not None else {"fps": 16.0},
                "result_summary": summary}
    (run / "run_manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return run
