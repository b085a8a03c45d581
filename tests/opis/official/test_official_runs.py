"""`worldeval opis import-run`: runs of the OPIS authors' evaluator -> the measurement archive.

The dataset is two shared COCO photos written in the authors' layout; the runs are written by hand in
their evaluator's layout (tests/helpers/official_runs.py), one row per window x reference covering
every state their evaluator produces. The expected archive rows and scores are worked out by hand.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.helpers.official import coco_official_case
from tests.helpers.official_runs import v3_row, write_official_run
from worldeval.cli import app
from worldeval.errors import InputError
from worldeval.opis.archive import read_archive
from worldeval.opis.case import load_case
from worldeval.opis.official.runs import CONTRACT, read_run

MODEL = "wan2.2/i2v-a14b"
MODEL_DIR = "wan2.2_i2v-a14b"  # their safe() of MODEL
A, B = "000000000142", "000000000009"  # case ids (folder names)
B_SCENE = "kitchen table #9"  # case B's scene_id; its scene folder is safe() of it
R1, R2, R3, R4 = "ref_0001", "ref_0002", "ref_0003", "ref_0004"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """Case A: bottle static, dining table dynamic, banana excluded, sandwich unlabeled. Case B: 8 static objects."""
    root = tmp_path_factory.mktemp("official_dataset")
    coco_official_case(root, "home_indoor", A, tracks={1: "static", 2: "dynamic", 3: "excluded", 4: None})
    b = coco_official_case(root, "industrial_lab", B)
    scene = json.loads((b / "reference_scene.json").read_text())
    scene["scene_id"] = B_SCENE
    (b / "reference_scene.json").write_text(json.dumps(scene))
    return root


def case_a_windows() -> dict[int, list[dict]]:
    """Five windows of case A, every state of theirs at least once."""
    return {
        16: [v3_row(R1, "scored", identity=0.9, geometry=0.8),
             v3_row(R2, "dynamic_identity", track="dynamic", identity=0.7, structure=0.6, backend="pose"),
             v3_row(R3, "identity_only", track="excluded", identity=0.5),
             v3_row(R4, "identity_only", track=None, identity=0.4)],
        # not FP-evaluable (R3 has no evidence): the unmatched count given here must be ignored
        24: [v3_row(R1, "generation_failure", fp_evaluable=False, unmatched=1),
             v3_row(R2, "dynamic_identity", track="dynamic", identity=0.8, structure=0.9, backend="vlm",
                    fp_evaluable=False, unmatched=1),
             v3_row(R3, "not_observable", track="excluded", visibility_state="occluded", fp_evaluable=False, unmatched=1),
             v3_row(R4, "identity_only", track=None, identity=0.6, fp_evaluable=False, unmatched=1)],
        32: [v3_row(R1, "scored", identity=0.85, geometry=0.7, ambiguous=True, fp_evaluable=False),
             v3_row(R2, "not_observable", track="dynamic", visibility_state="outside_view", fp_evaluable=False),
             v3_row(R3, "identity_only", track="excluded", identity=0.5, fp_evaluable=False),
             v3_row(R4, "evaluator_failure", track=None, visibility_state="evaluator_failure", fp_evaluable=False)],
        # FP-evaluable with unmatched observations: max(2, 1, 1, 1) = 2 extras
        40: [v3_row(R1, "evaluator_failure", presence=1.0, identity=0.75, unmatched=2,
                    reason="insufficient_instance_correspondences"),
             v3_row(R2, "dynamic_identity", track="dynamic", identity=0.65, structure=None, unmatched=1),
             v3_row(R3, "identity_only", track="excluded", identity=0.5, unmatched=1),
             v3_row(R4, "identity_only", track=None, identity=0.55, unmatched=1)],
        48: [v3_row(R1, "not_observable", visibility_state="too_small", fp_evaluable=False),
             v3_row(R2, "dynamic_identity", track="dynamic", identity=0.7, structure=0.5, backend="pose", fp_evaluable=False),
             v3_row(R3, "not_observable", track="excluded", visibility_state="outside_view", fp_evaluable=False),
             v3_row(R4, "identity_only", track=None, identity=0.3, fp_evaluable=False)],
    }


# frame 48 has no observed timestamp: 48 / 16 fps (the video stream's avg_frame_rate; the audio's 0/0 is skipped)
A_TIMES = {16: 1.02, 24: 1.52, 32: 2.02, 40: 2.52, 48: None}
A_VIDEO = {"streams": [{"codec_type": "audio", "avg_frame_rate": "0/0"}, {"codec_type": "video", "avg_frame_rate": "16/1"}]}
A_METRICS = {"headline_score": 41.5, "presence_score": 0.5, "identity_score": 0.61, "v3_structural_quality_score": 0.58}

# (frame, time_s, instance_id, track, visibility, matched, ambiguous, extra, appearance, structure, structure_source)
EXPECTED_A = [
    (16, 1.02, R1, "static", "expected_visible", True, False, False, 0.9, 0.8, "static"),
    (16, 1.02, R2, "dynamic", "expected_visible", True, False, False, 0.7, 0.6, "pose"),
    (16, 1.02, R3, "excluded", "expected_visible", True, False, False, 0.5, None, None),
    (16, 1.02, R4, "unlabeled", "expected_visible", True, False, False, 0.4, None, None),
    (24, 1.52, R1, "static", "expected_visible", False, False, False, None, None, None),
    (24, 1.52, R2, "dynamic", "expected_visible", True, False, False, 0.8, 0.9, "claims"),
    (24, 1.52, R3, "excluded", "occluded", False, False, False, None, None, None),
    (24, 1.52, R4, "unlabeled", "expected_visible", True, False, False, 0.6, None, None),
    (32, 2.02, R1, "static", "unknown", False, True, False, 0.85, 0.7, "static"),
    (32, 2.02, R2, "dynamic", "out_of_view", False, False, False, None, None, None),
    (32, 2.02, R3, "excluded", "expected_visible", True, False, False, 0.5, None, None),
    (32, 2.02, R4, "unlabeled", "unknown", False, False, False, None, None, None),
    (40, 2.52, R1, "static", "expected_visible", True, False, False, 0.75, None, None),
    (40, 2.52, R2, "dynamic", "expected_visible", True, False, False, 0.65, None, None),
    (40, 2.52, R3, "excluded", "expected_visible", True, False, False, 0.5, None, None),
    (40, 2.52, R4, "unlabeled", "expected_visible", True, False, False, 0.55, None, None),
    (40, 2.52, None, None, None, False, False, True, None, None, None),
    (40, 2.52, None, None, None, False, False, True, None, None, None),
    (48, 3.0, R1, "static", "too_small", False, False, False, None, None, None),
    (48, 3.0, R2, "dynamic", "expected_visible", True, False, False, 0.7, 0.5, "pose"),
    (48, 3.0, R3, "excluded", "out_of_view", False, False, False, None, None, None),
    (48, 3.0, R4, "unlabeled", "expected_visible", True, False, False, 0.3, None, None),
]
COLUMNS = ("frame", "time_s", "instance_id", "track", "visibility", "matched", "ambiguous", "extra", "appearance",
           "structure", "structure_source")


def b_windows(state: str = "scored") -> dict[int, list[dict]]:
    rows = lambda: [v3_row(f"ref_{k:04d}", state, identity=0.8, geometry=0.9) for k in range(1, 9)]  # noqa: E731
    return {30: rows(), 38: rows()}


def write_runs(root: Path) -> None:
    """Case A under its id; case B under safe(scene_id) with two runs, the newer one named first."""
    write_official_run(root, MODEL, A, case_a_windows(), timestamps=A_TIMES, video_metadata=A_VIDEO, metrics=A_METRICS)
    old = write_official_run(root, MODEL, B_SCENE, b_windows("generation_failure"), run_id="run-bbbbbbbbbbbb",
                             observation=False, video_metadata={"fps": "30000/1001"})
    write_official_run(root, MODEL, B_SCENE, b_windows(), run_id="run-aaaaaaaaaaaa", observation=False,
                       video_metadata={"fps": "30000/1001"}, metrics={"headline_score": 88.0})
    summary = old / "eval_v3" / "summary_v3.json"
    os.utime(summary, (summary.stat().st_atime - 3600, summary.stat().st_mtime - 3600))


def import_run(root: Path, dataset: Path, out: Path):
    return CliRunner().invoke(app, ["opis", "import-run", str(root), "--dataset", str(dataset), "--out", str(out)])


def rows_of(out: Path, case_id: str) -> list[tuple]:
    df = read_archive(out)
    df = df[df["case_id"] == case_id]
    got = []
    for r in df.itertuples(index=False):
        row = []
        for c in COLUMNS:
            v = getattr(r, c)
            row.append(None if v is None or (isinstance(v, float) and v != v) else v)
        got.append(tuple(row))
    return sorted(got, key=lambda t: (t[0], t[2] is None, t[2] or ""))


def assert_rows(got: list[tuple], expected: list[tuple]) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        for c, gv, ev in zip(COLUMNS, g, e):
            assert gv == (pytest.approx(ev) if isinstance(ev, float) else ev), (c, g, e)


def test_import_maps_every_state_row_by_row(tmp_path, dataset):
    root, out = tmp_path / "eval_result", tmp_path / "run"
    write_runs(root)
    res = import_run(root, dataset, out)
    assert res.exit_code == 0, res.output
    assert f"imported {MODEL_DIR}/{A} from {MODEL_DIR}/{A}/run-0123456789ab: 5 frames, 22 rows" in res.stdout

    assert_rows(rows_of(out, A), EXPECTED_A)
    t30, t38 = 30 * 1001 / 30000, 38 * 1001 / 30000  # no observation: frame / (30000/1001 fps)
    assert_rows(rows_of(out, B), [(f, t, f"ref_{k:04d}", "static", "expected_visible", True, False, False, 0.8, 0.9,
                                   "static") for f, t in ((30, t30), (38, t38)) for k in range(1, 9)])
    df = read_archive(out)
    assert set(df["model"]) == {MODEL_DIR}
    assert df.groupby("case_id", observed=True)["n_reference"].first().to_dict() == {A: 4, B: 8}
    assert df.groupby("case_id", observed=True)["domain"].first().astype(str).to_dict() == {A: "real_world", B: "embodied"}
    assert (out / "measurements" / f"{MODEL_DIR}.parquet").is_file()

    man = json.loads((out / "manifest.json").read_text())
    assert man["kind"] == "opis-import-run" and man["failed"] == []
    assert man["source_root"] == str(root.resolve()) and man["dataset"] == str(dataset.resolve())
    entries = {e["case_id"]: e for e in man["imported"]}
    assert entries[A] | {"n_frames": 5, "n_rows": 22} == {
        "model": MODEL_DIR, "case_id": A, "scene_dir": f"{MODEL_DIR}/{A}", "run": "run-0123456789ab",
        "contract": CONTRACT, "structure_enabled": True, "headline_score": 41.5, "presence_score": 0.5,
        "identity_score": 0.61, "structural_quality_score": 0.58, "n_frames": 5, "n_rows": 22}
    assert entries[B]["scene_dir"] == f"{MODEL_DIR}/kitchen_table_9" and entries[B]["run"] == "run-aaaaaaaaaaaa"
    assert entries[B]["headline_score"] == 88.0
    assert len(man["warnings"]) == 1
    assert "took run-aaaaaaaaaaaa" in man["warnings"][0] and "ignored run-bbbbbbbbbbbb" in man["warnings"][0]

    summaries = json.loads((out / "official_summaries.json").read_text())
    assert summaries[MODEL_DIR][A] == {**A_METRICS, "v3_reference_projective_score": 0.7}
    assert summaries[MODEL_DIR][B]["headline_score"] == 88.0


def test_score_reads_the_import_and_p_matches_the_paper_rule(tmp_path, dataset):
    root, out = tmp_path / "eval_result", tmp_path / "run"
    write_runs(root)
    assert import_run(root, dataset, out).exit_code == 0
    res = CliRunner().invoke(app, ["opis", "score", str(out), "--json", "--bootstrap", "0"])
    assert res.exit_code == 0, res.output
    cases = {c["case_id"]: c for c in json.loads(res.stdout)["cases"]}
    # Case A by hand. P: frames 16 (all expected matched) 1, 24 (R1 missing) 0, 32 (nothing expected: R1
    # ambiguous, R2 out of view, R4 unknown, R3 excluded) skipped, 40 (2 extras) 0, 48 (R2, R4 matched) 1.
    assert cases[A]["P"] == pytest.approx(100 * 2 / 4)
    # I: frame means .9/.7/.4 -> 2/3, .8/.6 -> .7, .75/.65/.55 -> .65, 48 has .3 < tau_I -> 0 (32 has no match).
    assert cases[A]["I"] == pytest.approx(100 * (2 / 3 + 0.7 + 0.65 + 0) / 4)
    # S: frames 16 (.8, .6) .7, 24 .9, 32 .7 (the ambiguous row keeps its geometry), 48 .5; 40 has none: C_S 4/5.
    assert cases[A]["C_S"] == pytest.approx(80.0)
    assert cases[A]["S"] == pytest.approx(100 * 0.8 * (0.7 + 0.9 + 0.7 + 0.5) / 4)
    assert cases[B]["P"] == pytest.approx(100.0) and cases[B]["I"] == pytest.approx(80.0)


def test_failed_scenes_are_reported_and_the_rest_imported(tmp_path, dataset):
    root, out = tmp_path / "eval_result", tmp_path / "run"
    write_runs(root)
    assert import_run(root, dataset, out).exit_code == 0  # B imported once: a rerun must drop its part
    write_official_run(root, MODEL, "no_such_scene", b_windows())
    jsonl = root / MODEL_DIR / "kitchen_table_9" / "run-aaaaaaaaaaaa" / "eval_v3" / "per_frame_metrics_v3.jsonl"
    lines = jsonl.read_text().splitlines()
    lines[2] = '{"frame_index": 30, "reference_id": '
    jsonl.write_text("\n".join(lines) + "\n")

    res = import_run(root, dataset, out)
    assert res.exit_code == 1, res.output
    man = json.loads((out / "manifest.json").read_text())
    failed = {Path(f["file"]).name: f for f in man["failed"]}
    assert failed["no_such_scene"]["field"] == "scene_id"
    assert failed["no_such_scene"]["file"] == str(root / MODEL_DIR / "no_such_scene")
    assert failed["per_frame_metrics_v3.jsonl"]["file"] == str(jsonl)
    assert failed["per_frame_metrics_v3.jsonl"]["field"] == "line 3"
    assert "invalid JSON" in failed["per_frame_metrics_v3.jsonl"]["message"]
    assert [e["case_id"] for e in man["imported"]] == [A]
    assert f"failed: {jsonl}: line 3:" in res.stderr
    df = read_archive(out)
    assert set(df["case_id"]) == {A}
    assert not (out / "parts" / MODEL_DIR / f"{B}.parquet").exists()


@pytest.fixture(scope="module")
def case_a(dataset):
    return load_case(dataset / "final" / "home_indoor" / A, with_geometry=False)


def _break(windows: dict, frame: int, k: int, **changes) -> dict:
    windows[frame][k] = {**windows[frame][k], **changes}
    return windows


@pytest.mark.parametrize("edit, field", [
    (lambda w: _break(w, 16, 0, visible_surface_geometry=1.5), "line 1: visible_surface_geometry"),
    (lambda w: _break(w, 16, 1, input_structure=float("nan")), "line 2: input_structure"),
    (lambda w: _break(w, 16, 3, presence=0.5), "line 4: presence"),
    (lambda w: _break(w, 16, 3, reference_id="ref_0099"), "line 4: reference_id"),
    (lambda w: {**w, 24: w[24][:3]}, "line 5: reference_id"),  # frame 24 lacks R4
])
def test_read_run_names_file_line_and_field(tmp_path, case_a, edit, field):
    run = write_official_run(tmp_path, MODEL, A, edit(case_a_windows()), timestamps=A_TIMES, video_metadata=A_VIDEO)
    with pytest.raises(InputError) as err:
        read_run(run, case_a)
    assert err.value.file == str(run / "eval_v3" / "per_frame_metrics_v3.jsonl")
    assert err.value.field == field


def test_read_run_rejects_a_null_frame_index(tmp_path, case_a):
    run = write_official_run(tmp_path, MODEL, A, case_a_windows(), timestamps=A_TIMES, video_metadata=A_VIDEO)
    jsonl = run / "eval_v3" / "per_frame_metrics_v3.jsonl"
    lines = jsonl.read_text().splitlines()
    lines[5] = json.dumps({**json.loads(lines[5]), "frame_index": None})
    jsonl.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as err:
        read_run(run, case_a)
    assert (err.value.file, err.value.field) == (str(jsonl), "line 6: frame_index")


def test_read_run_needs_a_time_for_every_window(tmp_path, case_a):
    run = write_official_run(tmp_path, MODEL, A, case_a_windows(), timestamps=A_TIMES, video_metadata={"codec": "h264"})
    with pytest.raises(InputError) as err:
        read_run(run, case_a)
    assert err.value.file == str(run / "run_manifest.json") and err.value.field == "video_metadata"


def test_empty_root_or_missing_dataset_exits_2(tmp_path, dataset):
    (tmp_path / "empty").mkdir()
    res = import_run(tmp_path / "empty", dataset, tmp_path / "run")
    assert res.exit_code == 2
    assert str(tmp_path / "empty") in res.stderr and "holds no run" in res.stderr
    write_runs(tmp_path / "eval_result")
    res = import_run(tmp_path / "eval_result", tmp_path / "no_dataset", tmp_path / "run")
    assert res.exit_code == 2 and str(tmp_path / "no_dataset") in res.stderr


def test_official_v3_rescore_of_the_imported_run_is_the_hand_computed_one(tmp_path, dataset):
    """Case A under the authors' rules, by hand from case_a_windows():
    Presence per frame: 16 all present -> 1; 24 R1 missing -> 0; 32 R1's ambiguous match and R3 present,
    R4 undecided -> 1; 40 all present but two counted extras -> 0; 48 R2, R4 present -> 1: P = 3/5.
    Identity per instance over present rows: R1 (.9, .85, .75), R2 (.7, .8, .65, .7), R3 (.5 x3),
    R4 (.4, .6, .55, .3). Structure candidates R1 static (.8, .7) -> 2.5/4, R2 dynamic (.6, .9, .5) -> 3/5."""
    P = 3 / 5
    I = (2.5 / 3 + 2.85 / 4 + 0.5 + 1.85 / 4) / 4
    S = (2.5 / 4 + 3 / 5) / 2
    H = 100 * P**0.2 * I**0.4 * S**0.4
    root, out = tmp_path / "eval_result", tmp_path / "run"
    write_official_run(root, MODEL, A, case_a_windows(), timestamps=A_TIMES, video_metadata=A_VIDEO,
                       metrics={"headline_score": H, "presence_score": P, "identity_score": I,
                                "v3_structural_quality_score": S})
    res = import_run(root, dataset, out)
    assert res.exit_code == 0, res.output  # case B has no run here: nothing to import, no error
    assert "largest |ours - their headline| = 0.000000 over 1 cases" in res.stdout
    res = CliRunner().invoke(app, ["opis", "score", str(out), "--json", "--variant", "official-v3", "--bootstrap", "0"])
    case = json.loads(res.stdout)["cases"][0]
    assert (case["P"], case["I"], case["S"]) == (pytest.approx(100 * P), pytest.approx(100 * I), pytest.approx(100 * S))
    assert case["OPIS"] == pytest.approx(H, abs=1e-6)
    check = json.loads((out / "official_rescore.json").read_text())
    assert check["max_abs_diff"] < 1e-6 and check["cases"][0]["theirs"] == pytest.approx(H)
