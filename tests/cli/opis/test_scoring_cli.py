"""`worldeval opis score` through typer's CliRunner."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from worldeval.cli import app
from worldeval.opis import scoring
from worldeval.cli.opis import score as cli_score
from worldeval.opis.archive import frame_from_records, write_archive, write_case_part

runner = CliRunner()


def _case(model, case_id, sub, a, passed=True):
    recs = [
        dict(frame=24, instance_id="a", track="static", visibility="expected_visible", matched=True, appearance=a,
             structure=0.8, structure_source="static"),
        dict(frame=32, instance_id="a", track="static", visibility="expected_visible", matched=passed,
             appearance=a if passed else None),
    ]
    return frame_from_records(recs, model=model, case_id=case_id, domain="dom", subcategory=sub, n_reference=1, fps=24.0)


@pytest.fixture
def run(tmp_path):
    import pandas as pd

    df = pd.concat([_case("alpha", f"c{k}", f"s{k % 2}", 0.5 + 0.1 * k, k % 3 != 0) for k in range(4)], ignore_index=True)
    write_archive(df, tmp_path / "run1" / "measurements.parquet")
    write_case_part(tmp_path / "run2", "beta", "c0", _case("beta", "c0", "s0", 0.9))
    return tmp_path


def test_json_output_has_the_spec_shape(run):
    res = runner.invoke(app, ["opis", "score", str(run / "run1"), str(run / "run2"), "--json", "--bootstrap", "100"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert set(out) >= {"config", "variant", "models", "cases"}
    assert out["variant"] == "strict" and out["config"]["bootstrap"] == 100
    assert set(out["models"]) == {"alpha", "beta"}
    a = out["models"]["alpha"]
    for key in ("P", "I", "S", "C_S", "OPIS", "OPIS_ci", "domains", "subcategories", "coverage", "density", "temporal"):
        assert key in a
    assert set(a["coverage"]) == {"C_P", "C_I", "static", "dynamic", "unknown", "no_s"}
    assert list(a["density"]) == ["<=20", "21-40", ">40"] and list(a["temporal"]) == ["1-4", "4-7", "7-10"]
    assert set(a["domains"]["dom"]) >= {"P", "I", "S", "OPIS"}
    assert a["OPIS"] == pytest.approx(0.2 * a["P"] + 0.4 * a["I"] + 0.4 * a["S"])
    assert len(out["cases"]) == 5
    assert set(out["cases"][0]) == {"model", "case_id", "domain", "subcategory", "P", "I", "S", "C_S", "OPIS", "flags"}
    # Same numbers as the Python API.
    api = cli_score.score_runs([run / "run1", run / "run2"], scoring.ScoreConfig(bootstrap=100))
    assert api["models"] == out["models"]


def test_options_reach_the_config(run):
    res = runner.invoke(app, ["opis", "score", str(run / "run1"), "--json", "--bootstrap", "0", "--variant", "uniform",
                              "--tau-i", "0.6", "--w-p", "0.5", "--w-i", "0.25", "--w-s", "0.25", "--seed", "3"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["variant"] == "uniform" and out["config"]["tau_I"] == 0.6 and out["config"]["seed"] == 3
    assert out["models"]["alpha"]["OPIS_ci"] is None


def test_tables_without_json(run):
    res = runner.invoke(app, ["opis", "score", str(run / "run1"), "--bootstrap", "50"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    for title in ("OPIS [95% CI]", "Aggregation variants", "OPIS by domain", "Multi-object load", "Temporal",
                  "Coverage audit", "no_coverage", "alpha"):
        assert title in res.output


def test_bad_archive_exits_2_with_a_clear_message(run, tmp_path):
    bad = tmp_path / "bad"
    df = _case("m", "c", "s", 0.5)
    df.loc[0, "appearance"] = 1.5
    write_archive(df, bad / "measurements.parquet", validate=False)
    res = runner.invoke(app, ["opis", "score", str(bad), "--json"])
    assert res.exit_code == 2
    assert "appearance" in res.output and "row 0" in res.output and "measurements.parquet" in res.output
    res = runner.invoke(app, ["opis", "score", str(tmp_path / "missing")])
    assert res.exit_code == 2 and "no such file" in res.output


def test_bad_option_exits_2(run):
    res = runner.invoke(app, ["opis", "score", str(run / "run1"), "--variant", "median"])
    assert res.exit_code == 2 and "unknown variant" in res.output
    res = runner.invoke(app, ["opis", "score", str(run / "run1"), "--w-p", "0.9"])
    assert res.exit_code == 2 and "weights" in res.output


def test_out_file_and_variant_list_in_step(run, tmp_path):
    out = tmp_path / "score.json"
    res = runner.invoke(app, ["opis", "score", str(run / "run1"), "--bootstrap", "0", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["models"]["alpha"]["n_cases"] == 4
    assert cli_score.ALL_VARIANTS == scoring.ALL_VARIANTS
