"""The HTML report: numbers match the scoring modules, drawings sit where the records say, gaps degrade gracefully."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from typer.testing import CliRunner

from worldeval.opis.archive import COLUMNS
from worldeval.report import ReportError, build_report, render_report
from worldeval.report.opis import frame_series

from tests.helpers.paths import SHARED_DATA
from tests.helpers.report_html import html_images, html_section
from tests.helpers.report_runs import (
    BOX_A,
    BOX_B,
    BOX_EXTRA,
    LEAKY_SERIES,
    WC_FINAL,
    leaky_rows,
    make_opis_run,
    make_worldcast_run,
)


def _timelines(html: str) -> list[str]:
    """Decoded SVG text of every per-rollout P/I/S timeline."""
    uris = re.findall(r'<img class="timeline" alt="[^"]*" src="data:image/svg\+xml;base64,([^"]+)"', html)
    return [base64.b64decode(u).decode("utf-8") for u in uris]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    return root, make_opis_run(root), make_worldcast_run(root)


@pytest.fixture(scope="module")
def html(runs) -> str:
    root, opis_run, wc_run = runs
    path = build_report([opis_run, wc_run], root / "report.html", bootstrap=50, seed=3)
    return path.read_text(encoding="utf-8")


def test_frame_series_follows_the_frame_rules():
    rows = pd.DataFrame(leaky_rows("case_a"), columns=list(COLUMNS))
    ser = frame_series(rows)
    assert ser["frame"] == LEAKY_SERIES["frame"]
    for k in ("P", "I", "S"):
        assert ser[k] == pytest.approx(LEAKY_SERIES[k]), k
    assert ser["time_s"] == pytest.approx([f / 16 for f in LEAKY_SERIES["frame"]])
    # a stricter identity threshold zeroes frame 16 (min a = 0.6) as well
    assert frame_series(rows, tau_i=0.65)["I"] == pytest.approx([0.0, 80.0, 0.0, 0.0])


def test_case_scores_agree_with_scoring_module(runs):
    from worldeval.opis.scoring import ScoreConfig, score_runs

    _, opis_run, _ = runs
    res = score_runs([opis_run], ScoreConfig(bootstrap=0))
    case = next(c for c in res["cases"] if (c["model"], c["case_id"]) == ("leaky", "case_a"))
    # case P, I are the means of the defined frames; S = C_S * mean of defined frames
    assert case["P"] == pytest.approx(np.mean([100, 0, 100, 100]))
    assert case["I"] == pytest.approx(np.mean([70, 80, 0, 50]))
    assert case["S"] == pytest.approx(0.75 * np.mean([80, 50, 0]))


def test_tables_carry_the_scoring_numbers(runs, html):
    from worldeval.opis.scoring import ScoreConfig, score_runs

    _, opis_run, _ = runs
    strict = score_runs([opis_run], ScoreConfig(bootstrap=50, seed=3))
    board = html[html.index('id="opis-leaderboard"'):html.index("</table>", html.index('id="opis-leaderboard"'))]
    order = re.findall(r'data-model="([^"]+)"', board)
    assert order == ["steady", "leaky"]
    for m in order:
        s = strict["models"][m]
        row = board[board.index(f'data-model="{m}"'):]
        row = row[:row.index("</tr>")]
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        for cell, key in zip(cells[2:6], ("P", "I", "S", "C_S")):
            assert cell == f"{s[key]:.2f}"
        lo, hi = s["OPIS_ci"]
        assert f"{s['OPIS']:.2f} <span class=\"ci\">[{lo:.2f}, {hi:.2f}]</span>" in cells[6]
    assert strict["models"]["steady"]["OPIS"] == pytest.approx(88.0)

    variants = html[html.index('id="opis-variant-table"'):]
    variants = variants[:variants.index("</table>")]
    for var in ("strict", "no_gate", "no_coverage", "minimum", "uniform"):
        v = score_runs([opis_run], ScoreConfig(variant=var, bootstrap=0))["models"]["leaky"]["OPIS"]
        assert f"<td>{v:.2f}</td>" in variants, var
    # hand check of one variant: uniform weights on leaky's hierarchical components
    lk = strict["models"]["leaky"]
    assert f"<td>{(lk['P'] + lk['I'] + lk['S']) / 3:.2f}</td>" in variants

    for table in ("opis-domain-table", "opis-subcategory-table", "opis-coverage-table", "opis-density-table",
                  "opis-temporal-table", "opis-case-table"):
        assert f'id="{table}"' in html
    dom = html[html.index('id="opis-domain-table"'):]
    assert f"{strict['models']['leaky']['domains']['real_world']['OPIS']:.2f}" in dom[:dom.index("</table>")]


def test_report_is_self_contained(html):
    assert "<script" not in html.lower()
    assert not re.search(r'(src|href)="(https?:)?//', html)
    assert "@import" not in html and "url(" not in html
    srcs = re.findall(r'<img[^>]*src="([^"]*)"', html)
    assert srcs and all(s.startswith("data:image/") for s in srcs)
    assert "sk-should-not-appear" not in html  # the manifest's api_key is redacted


def test_frames_are_outlined_where_the_record_says(html):
    leaky = dict(html_images(html_section(html, "rollout-leaky-case_a"), "frame"))
    steady = dict(html_images(html_section(html, "rollout-steady-case_a"), "frame"))
    assert len(leaky) == 4 and len(steady) == 4
    f24 = next(img for alt, img in leaky.items() if alt.startswith("frame 24"))
    s24 = next(img for alt, img in steady.items() if alt.startswith("frame 24"))

    def edge(img, box):  # middle of the left edge of a box (2 px outline)
        x, y, w, h = box
        return img[y + h // 2, x].astype(int)

    def is_color(px, rgb, tol=60):
        return np.abs(px - np.array(rgb)).max() <= tol

    assert is_color(edge(f24, BOX_A), (40, 180, 60)), edge(f24, BOX_A)  # matched: green
    assert is_color(edge(f24, BOX_B), (220, 30, 30)), edge(f24, BOX_B)  # missing: red
    assert is_color(edge(f24, BOX_EXTRA), (255, 140, 0)), edge(f24, BOX_EXTRA)  # extra: orange
    assert is_color(edge(s24, BOX_B), (40, 180, 60))  # the same object, kept by steady
    assert not is_color(edge(s24, BOX_EXTRA), (255, 140, 0))  # background: no extra there
    assert "1 matched · 1 missing · 1 extra" in next(a for a in leaky if a.startswith("frame 24"))
    refs = html_images(html, "ref")
    assert len(refs) == 2 and refs[0][1].shape[:2] == (96, 128)


def test_per_case_timelines_and_worldcast(html):
    assert len(_timelines(html)) == 4
    import xml.etree.ElementTree as ET

    svg = _timelines(html_section(html, "rollout-leaky-case_a"))[0]
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    # P_t defined in all 4 frames (circles), I_t in 4 (squares beyond the frame box), S_t in 3 (triangles):
    # frame 32 has no structure value, so S is a gap there, not a 0
    assert len(root.findall(f"{ns}circle")) == 4
    assert len(root.findall(f"{ns}path")) == 3
    s_lines = [pl for pl in root.findall(f"{ns}polyline") if pl.get("stroke") == "#31a354"]
    assert [len(pl.get("points").split()) for pl in s_lines] == [2]  # 16-24 joined; 40 stands alone
    board = html[html.index('id="worldcast-leaderboard"'):]
    board = board[:board.index("</table>")]
    # 83.00 by hand (see tests/helpers/report_runs.py); one case per category: the stratified CI cannot move
    assert f'<td>{WC_FINAL:.2f} <span class="ci">[{WC_FINAL:.1f}, {WC_FINAL:.1f}]</span></td>' in board
    sec = html[html.index('id="wc-rollout-painter-logic_01"'):]
    sec = sec[:sec.index("</table>")]
    # the failed VC call was redone; the latest (ok) record is shown, and evidence is escaped text
    assert "3 / 3" in sec and "failed" not in sec
    assert "VC evidence for logic_01 &lt;b&gt;not markup&lt;/b&gt;" in sec
    assert len(html_images(html, "wc-step")) == 4 and len(html_images(html, "wc-input")) == 2


def test_run_without_frames_records_still_renders(tmp_path):
    run = make_opis_run(tmp_path, with_frames=False)
    (tmp_path / "rollouts" / "leaky" / "case_b.mp4").unlink()
    html = render_report([run], bootstrap=0)
    assert re.findall(r'class="leaderboard-row[^"]*" data-model="([^"]+)"', html) == ["steady", "leaky"]
    assert "[—]" in html  # no CI without bootstrap
    assert not html_images(html, "frame")
    assert len(_timelines(html)) == 4  # P/I/S over time comes from the archive alone
    assert "no frames record" in html
    assert 'id="worldcast"' not in html


def test_missing_video_failed_rollout_and_unreadable_record(tmp_path):
    run = make_opis_run(tmp_path)
    (tmp_path / "rollouts" / "steady" / "case_b.mp4").unlink()
    (run / "frames" / "leaky" / "case_b.json").write_text("{not json")
    status = {"model": "leaky", "case_id": "case_c", "status": "failed",
              "error": {"file": "rollouts/leaky/case_c.mp4", "field": "video", "message": "stream ended at frame 3"},
              "config_hash": "x", "timings": {}}
    (run / "status" / "leaky" / "case_c.json").write_text(json.dumps(status))
    html = render_report([run], bootstrap=0)
    steady_b = html_section(html, "rollout-steady-case_b")
    assert "not found; frames not shown" in steady_b and not html_images(steady_b, "frame")
    assert "unreadable frames record" in html_section(html, "rollout-leaky-case_b")
    failed = html_section(html, "rollout-leaky-case_c")
    assert "failed: stream ended at frame 3" in failed and "rollouts/leaky/case_c.mp4: video" in failed
    assert len(html_images(html_section(html, "rollout-leaky-case_a"), "frame")) == 4


def test_scoring_failure_is_shown_not_raised(tmp_path):
    run = make_opis_run(tmp_path, with_frames=False)

    def broken(paths, variant, bootstrap, seed):
        raise ValueError(f"{paths[0]}/measurements/x.parquet: column 'frame': row 3 is negative")

    html = render_report([run], opis_score_fn=broken)
    assert "scoring (strict) failed: ValueError" in html and "row 3 is negative" in html
    assert "no scored models" in html


def test_max_cases_limits_drawn_cases(tmp_path):
    run = make_opis_run(tmp_path)
    html = render_report([run], bootstrap=0, max_cases=1, frames_per_case=2)
    assert 'id="case-case_a"' in html and 'id="case-case_b"' not in html
    assert "1 more case(s)" in html
    assert len(html_images(html, "frame")) == 2 * 2  # two models x two frames of case_a
    assert '<a href="#rollout-steady-case_b">' not in html  # listed, but not linked


def test_cli_writes_report_and_rejects_missing_folder(tmp_path):
    from worldeval.cli import app

    run = make_opis_run(tmp_path, with_frames=False)
    out = tmp_path / "out" / "r.html"
    res = CliRunner().invoke(app, ["report", str(run), "--out", str(out), "--bootstrap", "0"])
    assert res.exit_code == 0, res.output
    assert out.is_file() and "report written" in res.output
    assert 'data-model="steady"' in out.read_text()
    res = CliRunner().invoke(app, ["report", str(tmp_path / "nope"), "--out", str(out)])
    assert res.exit_code == 2 and "run folder does not exist" in res.output
    with pytest.raises(ReportError):
        build_report([], tmp_path / "x.html")


def test_folder_without_results(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match="holds no OPIS measurement archive"):
        render_report([tmp_path / "empty"])


def test_worldcast_only_run_with_a_failed_judgment(tmp_path):
    from worldeval.runs import append_jsonl

    run = make_worldcast_run(tmp_path)
    append_jsonl(run / "judgments.jsonl", {
        "model": "painter", "case_id": "phys_01", "category": "physical_simulation", "level": "L3",
        "outcome_weight": 0.0, "metric": "CP", "step": None, "status": "failed", "score": None, "evidence": None,
        "error": "answer had no 'score' after 3 attempts"})
    html = render_report([run])
    assert 'id="opis"' not in html and 'id="worldcast-leaderboard"' in html
    sec = html[html.index('id="wc-rollout-painter-phys_01"'):]
    sec = sec[:sec.index("</table>")]
    cp = sec[sec.index("<td class=\"l\">CP</td>"):]
    cp = cp[:cp.index("</tr>")]
    assert '<span class="fail">failed</span>' in cp and "answer had no &#39;score&#39; after 3 attempts" in cp
    board = html[html.index('id="worldcast-leaderboard"'):]
    board = board[:board.index("</table>")]
    # phys_01 now lacks CP, so Final averages logic_01 alone; one case counts as failed
    assert "<td>72.67</td>" in board
    assert re.search(r"<td>2</td><td>1</td></tr>", board)


@pytest.fixture
def shared_data() -> Path:
    root = SHARED_DATA
    if not root.is_dir():
        pytest.skip(f"shared test data not found at {root}")
    return root


@pytest.mark.slow
def test_real_hd_video_is_downscaled_and_boxes_follow(tmp_path, shared_data):
    """A real 1296x720 handheld clip: frames are shrunk to --thumb-side and outlines scale with them."""
    from worldeval.media import decode_frames, read_image, sample_frame_indices
    from worldeval.opis.archive import write_case_part
    from worldeval.opis.case import mask_bbox, write_case
    from worldeval.runs import atomic_write_json

    video = shared_data / "cotracker_apple" / "apple.mp4"
    mask = read_image(shared_data / "cotracker_apple" / "apple_mask.png")[..., 0] > 127
    first = decode_frames(video, [0])
    spec = {"id": "apple", "domain": "real_world", "subcategory": "natural", "image": "input.png",
            "instances": [{"id": "apple", "category": "red apple", "kinematics": "rigid", "track": "static"}]}
    write_case(tmp_path / "ds" / "apple", spec, first.frames[0], {"apple": mask})
    box = [int(v) for v in mask_bbox(mask)]
    samples = sample_frame_indices(50, 10.0)
    assert samples == [10, 18, 26, 34, 42]
    run = tmp_path / "run"
    rows = [{"model": "m", "case_id": "apple", "domain": "real_world", "subcategory": "natural", "n_reference": 1,
             "frame": f, "time_s": f / 10.0, "instance_id": "apple", "track": "static",
             "visibility": "expected_visible", "matched": f != 42, "ambiguous": False, "extra": False,
             "appearance": 0.7 if f != 42 else None, "structure": None, "structure_source": None} for f in samples]
    write_case_part(run, "m", "apple", pd.DataFrame(rows, columns=list(COLUMNS)))
    frames = [{"frame": f, "time_s": f / 10.0, "objects": [
        {"instance_id": "apple", "category": "red apple", "status": "matched" if f != 42 else "missing",
         "box": box, "appearance": None, "structure": None}]} for f in samples]
    atomic_write_json(run / "frames" / "m" / "apple.json", {
        "model": "m", "case_id": "apple", "video": str(video), "case_dir": str(tmp_path / "ds" / "apple"),
        "fps": 10.0, "num_frames": 50, "frames": frames})
    html = render_report([run], bootstrap=0, thumb_side=320, frames_per_case=5)
    strip = html_images(html, "frame")
    assert [a.split(" ·")[0] for a, _ in strip] == [f"frame {f}" for f in samples]
    s = 320 / 1296
    for alt, img in strip:
        assert img.shape[:2] == (round(720 * s), 320)
        x, y, w, h = box
        px = img[round((y + h / 2) * s), round(x * s)].astype(int)
        want = (220, 30, 30) if alt.startswith("frame 42") else (40, 180, 60)
        assert np.abs(px - np.array(want)).max() <= 60, (alt, px)
    assert "P 80.00" in html  # P: 4 of 5 frames have the apple matched
    # perception decoded at half size (EvalConfig.max_side): boxes in those pixels land at the same place
    half = {"model": "m", "case_id": "apple", "video": str(video), "case_dir": str(tmp_path / "ds" / "apple"),
            "fps": 10.0, "num_frames": 50, "width": 648, "height": 360,
            "frames": [{**f, "objects": [{**o, "box": [v / 2 for v in box]} for o in f["objects"]]} for f in frames]}
    atomic_write_json(run / "frames" / "m" / "apple.json", half)
    again = html_images(render_report([run], bootstrap=0, thumb_side=320, frames_per_case=5), "frame")
    for (alt, img), (_, img2) in zip(strip, again):
        x, y, w, h = box
        yy, xx = round((y + h / 2) * s), round(x * s)
        assert np.abs(img2[yy, xx].astype(int) - img[yy, xx].astype(int)).max() <= 40, alt
    assert len(html) < 600_000  # JPEG thumbnails keep the file small


@pytest.mark.slow
def test_report_reads_a_real_opis_eval_run(tmp_path):
    """End to end with the evaluator: whatever `run_eval` writes, the report draws."""
    from tests.helpers.report_runs import case_image, make_dataset
    from worldeval.media import write_video
    from worldeval.opis.run import run_eval

    ds = make_dataset(tmp_path)
    for cid in ("case_a", "case_b"):
        write_video(tmp_path / "ro" / f"{cid}.mp4", [case_image()] * 48, 16)
    summary = run_eval(ds, tmp_path / "ro", "still", tmp_path / "run", workers=0)
    assert summary["failed"] == []
    html = render_report([tmp_path / "run"], bootstrap=0)
    assert re.findall(r'class="leaderboard-row[^"]*" data-model="([^"]+)"', html) == ["still"]
    assert len(html_images(html, "frame")) == 2 * 4 and len(html_images(html, "ref")) == 2
    assert len(_timelines(html)) == 2
    record = json.loads((tmp_path / "run" / "frames" / "still" / "case_a.json").read_text())
    first = record["frames"][0]
    alt = next(a for a, _ in html_images(html_section(html, "rollout-still-case_a"), "frame"))
    assert alt.startswith(f"frame {first['frame']} · {first['time_s']:.2f} s")
    statuses = [o["status"] for o in first["objects"]]
    assert f"{statuses.count('matched')} matched · {statuses.count('missing')} missing" in alt


def test_worldcast_report_shows_generation_and_keyframe_traces(tmp_path):
    """Outputs made by `worldcast generate` (agentic, and a video), judged, then reported per case."""
    import shutil

    from tests.helpers.fake_generator import FakeGenerator, generate, judge, tiny_mp4
    from worldeval.worldcast.samples import sample_dataset

    ds = shutil.copytree(sample_dataset(), tmp_path / "dataset")
    srv = FakeGenerator(tiny_mp4(tmp_path / "v.mp4"))
    try:
        def plan_and_inspect(info):
            if "shot list" in info["text"]:
                return {"steps": ["cube on the floor <i>x</i>", "cube inside the box"], "notes": ""}
            first = "state 1 of 2" in info["text"] and not any(r.get("score") == 1 for r in seen)
            ans = {"score": 1 if first else 2, "problems": "cube floats" if first else "", "revised_prompt": "lower it"}
            seen.append(ans)
            return ans
        seen: list = []
        srv.answer = plan_and_inspect
        outs = tmp_path / "outs"
        generate(srv, ds, outs, "--interface", "interleaved", "--agentic", "--budget", "2K", "--case", "adapt_cube_box")
        run = tmp_path / "run"
        judge(ds, outs, run, ["adapt_cube_box"])

        vouts = tmp_path / "vouts"
        generate(srv, ds, vouts, "--interface", "video", "--case", "logic_hanoi2")

        def video_answer(info):
            if "You locate moments" in info["text"]:
                return {"states": [{"step": k, "seen": k != 3, "start": a, "end": b}
                                   for k, (a, b) in enumerate([(0.0, 0.9), (1.0, 1.9), (2.0, 3.9)], start=1)]}
            if "Closer look" in info["text"]:
                k = int(re.search(r"requested state (\d+) of", info["text"]).group(1))
                return {"step": k, "timestamp_seconds": [0.5, 1.5, 3.0][k - 1], "achieved": k != 3,
                        "evidence": f"dense evidence {k}"}
            return {"score": 1, "evidence": "judged"}
        vrun = tmp_path / "vrun"
        srv.answer = video_answer
        res = CliRunner().invoke(app_cli(), [
            "worldcast", "judge", "--dataset", str(ds), "--outputs", str(vouts), "--model", "vid-x", "--out", str(vrun),
            "--base-url", srv.base_url, "--judge-model", "judge-x", "--no-cache", "--keyframes", "agentic",
            "--keyframe-samples", "8", "--concurrency", "1", "--max-attempts", "1", "--case", "logic_hanoi2", "-q"])
        assert res.exit_code == 0, res.output
    finally:
        srv.close()
    html = render_report([run, vrun])
    sec = html[html.index('id="wc-rollout-gen-x-adapt_cube_box"'):]
    sec = sec[:sec.index('<div class="model-block"') if '<div class="model-block"' in sec else sec.index("</section>")]
    assert len(html_images(sec, "wc-step")) == 2  # the generated sequence
    assert "seen" in sec  # the judge's evidence
    gen = sec[sec.index('class="box wc-generation"'):]
    assert "agentic interleaved · 3 generation call(s) of a budget of 4 · 3 inspection(s)" in gen
    assert "<li>cube on the floor &lt;i&gt;x&lt;/i&gt;</li>" in gen and "(gen-x)" in gen  # plan, escaped
    rows = re.findall(r"<tr><td>(\d)</td><td>(\d)</td><td><img[^>]*></td><td>(\d) / 2</td>"
                      r"<td class=\"evidence\">([^<]*)</td></tr>", gen)
    assert rows == [("1", "1", "1", "cube floats"), ("1", "2", "2", ""), ("2", "1", "2", "")]
    drafts = html_images(gen, "wc-draft")  # each inspected draft, as generated (the fake colours call n)
    assert [a for a, _ in drafts] == ["state 1 attempt 1", "state 1 attempt 2", "state 2 attempt 1"]
    from tests.helpers.fake_generator import tiny_png

    firsts = {n: np.asarray(Image.open(io.BytesIO(tiny_png(n))).convert("RGB"))[0, 0] for n in (1, 2, 3)}
    for (_, img), n in zip(drafts, (1, 2, 3)):
        assert np.abs(img[0, 0].astype(int) - firsts[n]).max() <= 12
    assert "kept: state 1 attempt 2 (score 2, of 2); state 2 attempt 1 (score 2, of 1)" in gen
    vsec = html[html.index('id="wc-rollout-vid-x-logic_hanoi2"'):]
    kf = vsec[vsec.index('class="box wc-keyframes"'):vsec.index("</details>")]
    assert "agentic video adapter · 4 VLM request(s) of 4" in kf
    assert "<td>1</td><td>0.5</td><td>5</td><td>yes</td><td class=\"l\">dense pick</td>" in kf
    assert "<td>3</td><td>3.0</td><td>30</td><td>no</td>" in kf and "dense evidence 3" in kf
    assert len(html_images(vsec[:vsec.index("</table>")], "wc-step")) == 3


def app_cli():
    from worldeval.cli import app

    return app


def _disc(center: tuple[int, int], radius: int, shape=(96, 128)) -> np.ndarray:
    yy, xx = np.mgrid[:shape[0], :shape[1]]
    return (xx - center[0]) ** 2 + (yy - center[1]) ** 2 <= radius ** 2


def test_mask_outline_follows_the_mask_not_its_box():
    from worldeval.report.images import REFERENCE_COLOR
    from worldeval.thumbnails import draw_boxes, draw_mask_outlines

    img = np.full((96, 128, 3), 200, np.uint8)
    disc = _disc((60, 48), 20)
    out = draw_mask_outlines(img, [(disc, REFERENCE_COLOR, None)], thickness=1)
    assert tuple(out[48, 40]) == REFERENCE_COLOR  # leftmost pixel of the disc
    assert tuple(out[28, 40]) == (200, 200, 200)  # its box's corner: far outside the disc
    assert tuple(draw_boxes(img, [([40, 28, 41, 41], REFERENCE_COLOR, None)], thickness=1)[28, 40]) != (200, 200, 200)
    assert tuple(out[48, 60]) == (200, 200, 200)  # inside is left as it was
    half = draw_mask_outlines(img[::2, ::2], [(disc, REFERENCE_COLOR, "a")], scale=0.5, thickness=1)
    assert tuple(half[24, 20]) == REFERENCE_COLOR  # traced at full size, drawn at the thumbnail's


def test_reference_view_outlines_masks(tmp_path):
    from tests.helpers.report_runs import case_image, make_model_runs
    from worldeval.opis.case import write_case

    (run,) = make_model_runs(tmp_path, ("steady",))
    # obj_a becomes a disc inside its old block: its box corners are then far from the mask
    disc = _disc((25, 32), 12)
    spec = json.loads((tmp_path / "dataset" / "case_a" / "case.json").read_text())
    spec = {k: spec[k] for k in ("id", "domain", "subcategory", "image", "instruction")} | {
        "instances": [{k: i[k] for k in ("id", "category", "kinematics", "track")} for i in spec["instances"]]}
    box_b = np.zeros_like(disc)
    x, y, w, h = BOX_B
    box_b[y:y + h, x:x + w] = True
    write_case(tmp_path / "dataset" / "case_a", spec, case_image(), {"obj_a": disc, "obj_b": box_b})
    html = render_report([run], bootstrap=0, max_cases=1)
    (alt, ref), = html_images(html, "ref")
    blue = np.array((40, 120, 230))

    def near(px):
        return np.abs(px.astype(int) - blue).max()

    assert near(ref[20, 13]) > 150, ref[20, 13]  # the top-left corner of the disc's box: no outline
    assert near(ref[32, 13]) <= 70, ref[32, 13]  # leftmost point of the disc's outline
    assert near(ref[y + h // 2, x]) <= 70  # a rectangular mask is outlined along its edge
