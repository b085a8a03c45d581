"""The report over several run folders: each model's views come from its own folder; unreadable folders are refused."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from worldeval.report import ReportError, render_report

from tests.helpers.report_html import html_images, html_section
from tests.helpers.report_runs import BOX_B, BOX_EXTRA, make_model_runs, make_worldcast_run

MODELS = ("steady", "leaky", "still")


@pytest.fixture(scope="module")
def model_runs(tmp_path_factory) -> list[Path]:
    return make_model_runs(tmp_path_factory.mktemp("runs"), MODELS)


def test_every_model_shows_the_frames_of_its_own_run_folder(model_runs):
    # the folder order must not matter either: the first folder used to claim every (model, case)
    for order in (model_runs, model_runs[::-1]):
        html = render_report(order, bootstrap=0)
        assert "no frames record" not in html
        assert "not found; frames not shown" not in html
        for m in MODELS:
            for c in ("case_a", "case_b"):
                sec = html_section(html, f"rollout-{m}-{c}")
                assert len(html_images(sec, "frame")) == 4, (m, c)
                assert "no archive rows" not in sec
        # leaky's strip is drawn from leaky's own record: frame 24 has obj_b missing and an extra
        f24 = dict(html_images(html_section(html, "rollout-leaky-case_a"), "frame"))
        alt, img = next((a, i) for a, i in f24.items() if a.startswith("frame 24"))
        assert "1 matched · 1 missing · 1 extra" in alt
        x, y, w, h = BOX_B
        assert np.abs(img[y + h // 2, x].astype(int) - (220, 30, 30)).max() <= 60
        steady = next(a for a, _ in html_images(html_section(html, "rollout-steady-case_a"), "frame")
                      if a.startswith("frame 24"))
        assert "2 matched · 0 missing · 0 extra" in steady
        x, y, w, h = BOX_EXTRA
        assert np.abs(img[y + h // 2, x].astype(int) - (255, 140, 0)).max() <= 60


def _cli(*args: str):
    from worldeval.cli import app

    return CliRunner().invoke(app, ["report", *args])


def test_cli_refuses_folders_with_nothing_to_report(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    out = tmp_path / "r.html"
    res = _cli(str(empty), "--out", str(out))
    assert res.exit_code == 2, res.output
    assert f"{empty}: holds no OPIS measurement archive" in res.output and "judgments.jsonl" in res.output
    assert "report written" not in res.output and not out.exists()

    broken = tmp_path / "broken"
    (broken / "measurements").mkdir(parents=True)
    (broken / "measurements" / "m.parquet").write_text("junk")
    failed = tmp_path / "failed"
    (failed / "status" / "m").mkdir(parents=True)
    (failed / "status" / "m" / "c.json").write_text('{"model": "m", "case_id": "c", "status": "failed"}')
    res = _cli(str(broken), str(failed), "--out", str(out))
    assert res.exit_code == 2, res.output
    assert f"{broken}: measurement archive unreadable (m.parquet:" in res.output
    assert f"{failed}: holds no OPIS measurement archive" in res.output and "1 failed rollout(s)" in res.output
    assert not out.exists()

    wc = tmp_path / "wc"
    wc.mkdir()
    (wc / "judgments.jsonl").write_text("")
    res = _cli(str(wc), "--out", str(out))
    assert res.exit_code == 2 and f"{wc}: judgments.jsonl holds no readable judgment" in res.output
    with pytest.raises(ReportError, match="nothing to report"):
        render_report([empty])


def test_cli_names_unreadable_folders_but_reports_the_rest(tmp_path, model_runs):
    empty = tmp_path / "empty"
    empty.mkdir()
    broken = tmp_path / "broken"
    (broken / "parts" / "m").mkdir(parents=True)
    (broken / "parts" / "m" / "c.parquet").write_bytes(b"PAR1 not really")
    out = tmp_path / "r.html"
    res = _cli(str(model_runs[1]), str(empty), str(broken), "--out", str(out), "--bootstrap", "0")
    assert res.exit_code == 0, res.output
    assert "report written" in res.output
    assert f"warning: {empty}: holds no OPIS measurement archive" in res.output
    assert f"warning: {broken}: measurement archive unreadable" in res.output
    html = out.read_text(encoding="utf-8")
    # the unreadable folders are left out of scoring, so the readable one is scored as if alone
    assert re.findall(r'class="leaderboard-row[^"]*" data-model="([^"]+)"', html) == ["leaky"]
    assert "scoring (strict) failed" not in html
    assert f"{empty}: holds no OPIS measurement archive" in html
    res = _cli(str(model_runs[0]), str(empty), "--out", str(out), "--bootstrap", "0", "--quiet")
    assert res.exit_code == 0 and "warning:" in res.output and "report written" not in res.output


def test_worldcast_folder_alone_is_readable(tmp_path):
    run = make_worldcast_run(tmp_path)
    res = _cli(str(run), "--out", str(tmp_path / "r.html"), "--bootstrap", "0")
    assert res.exit_code == 0, res.output
    assert "warning" not in res.output
