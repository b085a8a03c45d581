"""`worldcast generate` end to end against an in-process fake OpenAI-compatible generation endpoint
(`FakeGenerator`, tests/helpers/fake_generator.py: every image it returns has a colour that encodes the call
number, so a test can tell which call produced which saved state)."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from worldeval.cli import app
from worldeval.worldcast.inputs.cases import load_cases
from worldeval.worldcast.samples import sample_dataset

from tests.helpers.fake_generator import KEY, FakeGenerator, generate, judge, tiny_mp4

TEXT_ONLY = {"id": "text_only", "category": "physical_simulation", "level": "L3",
             "instruction": "A glass of water is knocked off a table. Show the glass tipping and the glass shattered on the floor.",
             "images": [], "steps": 2, "hints": ["HINT-SENTINEL water spreads on the floor"], "outcome_weight": 0.0}


@pytest.fixture
def fake(tmp_path):
    srv = FakeGenerator(tiny_mp4(tmp_path / "fake_video.mp4"))
    yield srv
    srv.close()


@pytest.fixture
def dataset(tmp_path) -> Path:
    ds = shutil.copytree(sample_dataset(), tmp_path / "dataset")
    with open(ds / "cases.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps(TEXT_ONLY) + "\n")
    return ds


def _hints(ds: Path) -> list[str]:
    return [h for c in load_cases(ds) for h in c.hints]


def assert_no_secret_and_no_hints(fake, ds: Path, *folders: Path) -> None:
    hints = _hints(ds)
    assert hints and fake.log
    for r in fake.log:
        for hnt in hints:
            assert hnt.encode() not in r["raw"], (r["route"], hnt)
        assert r["auth"] == f"Bearer {KEY}"  # the key is sent, to the endpoint only
    for folder in folders:
        for p in folder.rglob("*"):
            if p.is_file():
                assert KEY.encode() not in p.read_bytes(), p


def test_parse_budget():
    from worldeval.worldcast.generation.generate import parse_budget

    assert parse_budget("2K", 4) == 8 and parse_budget("3k", 2) == 6 and parse_budget("5", 4) == 5
    for bad in ("0", "K", "2x", "-1"):
        with pytest.raises(ValueError, match="--budget"):
            parse_budget(bad, 4)


def test_grid_uses_edits_with_references_and_generations_without(fake, dataset, tmp_path):
    out = tmp_path / "outs"
    res = generate(fake, dataset, out, "--interface", "grid")
    assert "generated 5, kept 0, failed 0 (5 generation calls)" in res.stdout
    cases = {c.id: c for c in load_cases(dataset)}
    edits = fake.requests_to("POST /images/edits")
    gens = fake.requests_to("POST /images/generations")
    assert len(edits) == 4 and len(gens) == 1 and "knocked off a table" in gens[0]["body"]["prompt"]
    for r in edits:
        case = next(c for c in cases.values() if c.instruction in r["fields"]["prompt"])
        # every reference image of the case is uploaded, byte for byte, in the case's order
        assert [f["data"] for f in r["files"]] == [im.path.read_bytes() for im in case.images]
        assert r["fields"]["model"] == "gen-x"
    for cid, case in cases.items():
        layout = json.loads((out / cid / "grid.json").read_text())["layout"]
        r, c = map(int, layout.split("x"))
        assert r * c == case.steps
        assert f"grid of {r} row(s) by {c} column(s)" in json.loads((out / cid / "generation.json").read_text())["prompt_sent"]
    assert_no_secret_and_no_hints(fake, dataset, out)
    recs, _ = judge(dataset, out, tmp_path / "run")
    assert recs and all(r["status"] == "ok" and r["interface"] == "grid" for r in recs)
    assert {r["case_id"]: r["n_states"] for r in recs} == {cid: c.steps for cid, c in cases.items()}


def test_interleaved_through_the_responses_api(fake, dataset, tmp_path):
    out = tmp_path / "outs"
    generate(fake, dataset, out, "--interface", "interleaved", "--case", "goal_tiles", "--case", "text_only")
    reqs = fake.requests_to("POST /responses")
    assert len(reqs) == 2
    for r in reqs:
        assert r["body"]["tools"] == [{"type": "image_generation"}]
        content = r["body"]["input"][0]["content"]
        n_refs = 2 if "goal picture" in content[0]["text"] else 0
        assert [p["type"] for p in content] == ["input_text"] + ["input_image"] * n_refs
    files = sorted(p.name for p in (out / "goal_tiles").iterdir())
    assert files == ["generation.json", "plan.json", "step_1.png", "step_2.png", "step_3.png", "step_4.png"]
    plan = json.loads((out / "goal_tiles" / "plan.json").read_text())
    assert plan["steps"] == [f"State {k}: what happens." for k in range(1, 5)] and plan["source"] == "generator"
    assert not (out / "adapt_cube_box").exists()  # not asked for
    recs, mock = judge(dataset, out, tmp_path / "run", ["goal_tiles", "text_only"], step_accuracy=True)
    assert all(r["status"] == "ok" and r["interface"] == "steps" for r in recs)
    step_recs = [r for r in recs if r["metric"] == "STEP" and r["case_id"] == "goal_tiles"]
    assert sorted(r["step"] for r in step_recs) == [1, 2, 3, 4]
    # the judge's designated-step prompt carries the text the generator paired with that step
    step_texts = [r.text for r in mock.requests if "DESIGNATED STEP" in r.text and "goal picture" in r.text]
    assert len(step_texts) == 4
    for t in step_texts:
        k = re.search(r"DESIGNATED STEP: step (\d+) of", t).group(1)
        assert f"State {k}: what happens." in t
    assert_no_secret_and_no_hints(fake, dataset, out, tmp_path / "run")
    # a generator that stops one image short: kept as produced, noted, and the judge is told
    fake.short_by = 1
    generate(fake, dataset, tmp_path / "short", "--interface", "interleaved", "--case", "phys_ball_drop")
    trace = json.loads((tmp_path / "short" / "phys_ball_drop" / "generation.json").read_text())
    assert trace["notes"] == ["the generator returned 3 image(s) for 4 states"]
    recs, _ = judge(dataset, tmp_path / "short", tmp_path / "run_short", ["phys_ball_drop"])
    assert all(r["n_states"] == 3 and "case asks for 4 steps, output has 3" in r["warnings"] for r in recs)


def test_video_through_the_videos_api(fake, dataset, tmp_path):
    out = tmp_path / "outs"
    generate(fake, dataset, out, "--interface", "video", "--case", "adapt_cube_box", "--video-seconds", "4")
    create = fake.requests_to("POST /videos")
    assert len(create) == 1 and create[0]["fields"]["seconds"] == "4" and create[0]["fields"]["model"] == "gen-x"
    assert [f["field"] for f in create[0]["files"]] == ["input_reference"]
    assert len(fake.requests_to("GET /videos/{id}")) == 2  # polled until completed
    assert (out / "adapt_cube_box" / "video.mp4").read_bytes() == fake.video_bytes
    recs, _ = judge(dataset, out, tmp_path / "run", ["adapt_cube_box"])
    assert all(r["status"] == "ok" and r["interface"] == "video" and r["n_states"] == 2 for r in recs)
    assert (tmp_path / "run" / "states" / "gen-x" / "adapt_cube_box" / "step_2.jpg").is_file()


def _plan_answer(info):
    if "shot list" in info["text"]:
        k = int(re.search(r"exactly (\d+) non-empty strings", info["text"]).group(1))
        return {"steps": [f"PLANNED-{k}-{s}" for s in range(1, k + 1)], "notes": "n"}
    return {"score": 2, "problems": "", "revised_prompt": ""}


def test_enhancer_plan_goes_into_the_request_and_plan_json(fake, dataset, tmp_path):
    out = tmp_path / "outs"
    fake.answer = _plan_answer
    generate(fake, dataset, out, "--interface", "grid", "--enhancer", "planner-x", "--case", "logic_hanoi2")
    chats = [r for r in fake.log if r["route"] == "POST /chat/completions"]
    assert len(chats) == 1 and chats[0]["body"]["model"] == "planner-x"
    assert "Move the whole tower" in json.dumps(chats[0]["body"])  # the task and its reference go to the enhancer
    (edit,) = fake.requests_to("POST /images/edits")
    for s in (1, 2, 3):
        assert f"{s}. PLANNED-3-{s}" in edit["fields"]["prompt"]
    plan = json.loads((out / "logic_hanoi2" / "plan.json").read_text())
    assert plan == {"steps": ["PLANNED-3-1", "PLANNED-3-2", "PLANNED-3-3"], "source": "enhancer"}
    trace = json.loads((out / "logic_hanoi2" / "generation.json").read_text())
    assert trace["plan"]["model"] == "planner-x" and trace["mode"] == "direct"
    assert_no_secret_and_no_hints(fake, dataset, out)


def test_plan_iterate_conditions_each_state_on_the_previous(fake, dataset, tmp_path):
    out = tmp_path / "outs"
    fake.answer = _plan_answer
    generate(fake, dataset, out, "--interface", "interleaved", "--plan-iterate", "--case", "phys_ball_drop",
             "--case", "text_only")
    ball = fake.requests_to("POST /images/edits", lambda r: "red ball" in r["fields"]["prompt"])
    assert len(ball) == 4
    ref = (dataset / "phys_ball_drop" / "input_1.png").read_bytes()
    assert [f["data"] for f in ball[0]["files"]] == [ref]
    for k in range(2, 5):
        prev = (out / "phys_ball_drop" / f"step_{k - 1}.png").read_bytes()
        assert [f["data"] for f in ball[k - 1]["files"]] == [prev, ref]
        assert f"state {k} of 4" in ball[k - 1]["fields"]["prompt"] and f"PLANNED-4-{k}" in ball[k - 1]["fields"]["prompt"]
    # without references the first state is a plain generation, the next an edit of it
    assert len(fake.requests_to("POST /images/generations")) == 1
    glass = fake.requests_to("POST /images/edits", lambda r: "knocked off" in r["fields"]["prompt"])
    assert [f["data"] for f in glass[0]["files"]] == [(out / "text_only" / "step_1.png").read_bytes()]
    plan = json.loads((out / "phys_ball_drop" / "plan.json").read_text())
    assert plan["steps"] == [f"PLANNED-4-{k}" for k in range(1, 5)] and plan["source"] == "planner"
    chats = [r for r in fake.log if r["route"] == "POST /chat/completions"]
    assert {r["body"]["model"] for r in chats} == {"gen-x"}  # the unified model plans for itself
    assert_no_secret_and_no_hints(fake, dataset, out)
    recs, _ = judge(dataset, out, tmp_path / "run", ["phys_ball_drop", "text_only"])
    assert all(r["status"] == "ok" for r in recs)


def test_agentic_budget_is_never_exceeded(fake, dataset, tmp_path):
    out = tmp_path / "outs"
    seen: list[tuple[str, int]] = []

    def answer(info):
        if "shot list" in info["text"]:
            return _plan_answer(info)
        k = int(re.search(r"made for state (\d+) of", info["text"]).group(1))
        case = "cube" if "green cube" in info["text"] else "ball"
        seen.append((case, k))
        tries = sum(1 for s in seen if s == (case, k))
        # cube: state 1 is never accepted (scores 1, 0, 0, ...); ball: every state passes at once
        if case == "cube" and k == 1:
            return {"score": 1 if tries == 1 else 0, "problems": f"wrong {tries}", "revised_prompt": f"FIX-{tries}"}
        return {"score": 2, "problems": "", "revised_prompt": ""}

    fake.answer = answer
    generate(fake, dataset, out, "--interface", "interleaved", "--agentic", "--budget", "2K", "--inspector", "vlm-x",
             "--enhancer", "planner-x", "--case", "adapt_cube_box", "--case", "phys_ball_drop")
    cube = fake.requests_to("POST /images/edits", lambda r: "green cube" in r["fields"]["prompt"])
    ball = fake.requests_to("POST /images/edits", lambda r: "red ball" in r["fields"]["prompt"])
    # cube, K=2, budget 4: state 1 may use 4 - 1 = 3 calls (one kept for state 2), state 2 one
    assert len(cube) == 4 and len(ball) == 4
    assert "FIX-1" in cube[1]["fields"]["prompt"] and "FIX-2" in cube[2]["fields"]["prompt"]
    trace = json.loads((out / "adapt_cube_box" / "generation.json").read_text())
    assert trace["budget"] == 4 and trace["image_calls"] == 4
    assert [(i["step"], i["attempt"], i["score"]) for i in trace["inspections"]] == [(1, 1, 1), (1, 2, 0), (1, 3, 0), (2, 1, 2)]
    # the best inspected draft is kept: attempt 1 of state 1 (score 1), not the later 0s
    assert trace["choices"][0] == {"step": 1, "attempt": 1, "inspector_score": 1, "candidates": 3}
    assert (out / "adapt_cube_box" / "step_1.png").read_bytes() == (out / "adapt_cube_box" / "drafts" / "step_1_try_1.png").read_bytes()
    # state 2 was conditioned on the chosen state 1
    assert cube[3]["files"][0]["data"] == (out / "adapt_cube_box" / "step_1.png").read_bytes()
    chats = {r["body"]["model"] for r in fake.log if r["route"] == "POST /chat/completions"}
    assert chats == {"planner-x", "vlm-x"}
    assert_no_secret_and_no_hints(fake, dataset, out)


def test_agentic_failed_calls_count_against_the_budget(fake, dataset, tmp_path):
    out = tmp_path / "outs"
    fake.answer = _plan_answer
    fake.fail_when.append(lambda r: "state 2 of 2" in r.get("prompt", "") and "green cube" in r.get("prompt", ""))
    res = generate(fake, dataset, out, "--interface", "interleaved", "--agentic", "--budget", "3", "--case",
                   "adapt_cube_box", code=1)
    assert "failed 1" in res.stdout
    cube = fake.requests_to("POST /images/edits", lambda r: "green cube" in r["fields"]["prompt"])
    assert len(cube) == 3  # 1 accepted + 2 failing attempts at state 2: the budget, never more
    trace = json.loads((out / "_generation" / "failed" / "adapt_cube_box.json").read_text())
    assert trace["image_calls"] == 3 and [c["status"] for c in trace["calls"]] == ["ok", "failed", "failed"]
    assert "no image within the budget of 3" in trace["error"]
    assert not (out / "adapt_cube_box").exists()


def test_failed_generation_is_recorded_and_only_it_is_retried(fake, dataset, tmp_path):
    out = tmp_path / "outs"
    fake.fail_when.append(lambda r: "green cube" in r.get("prompt", ""))
    res = generate(fake, dataset, out, "--interface", "grid", code=1)
    assert "generated 4, kept 0, failed 1" in res.stdout and "adapt_cube_box" in res.output and "HTTP 500" in res.output
    assert not (out / "adapt_cube_box").exists()
    status = json.loads((out / "_generation" / "status" / "generator" / "adapt_cube_box.json").read_text())
    assert status["status"] == "failed" and "HTTP 500" in status["error"]["message"]
    log = [json.loads(x) for x in (out / "_generation" / "log.jsonl").read_text().splitlines()]
    assert sorted(r["case_id"] for r in log if r["status"] == "failed") == ["adapt_cube_box"]
    n_before = len(fake.log)
    fake.fail_when.clear()
    res = generate(fake, dataset, out, "--interface", "grid")
    assert "generated 1, kept 4, failed 0" in res.stdout
    again = [r for r in fake.log[n_before:] if r["route"] != "GET /models"]  # the preflight request
    assert len(again) == 1 and "green cube" in again[0]["prompt"]
    assert (out / "adapt_cube_box" / "grid.png").is_file()
    assert not (out / "_generation" / "failed" / "adapt_cube_box.json").exists()
    # a different config in the same folder is refused instead of mixing outputs
    res = CliRunner().invoke(app, ["worldcast", "generate", "--dataset", str(dataset), "--out", str(out),
                                   "--base-url", fake.base_url, "--gen-model", "other", "--interface", "grid", "-q"])
    assert res.exit_code == 2 and "different config" in res.output
    assert_no_secret_and_no_hints(fake, dataset, out)


def test_command_runs_a_local_model(dataset, tmp_path):
    script = tmp_path / "local_model.py"
    script.write_text(
        "import json, sys\nfrom PIL import Image\n"
        "req = json.load(open(sys.argv[1]))\n"
        "if req['case_id'] == 'text_only': sys.exit(3)\n"
        "for k in range(1, req['steps'] + 1):\n"
        "    Image.new('RGB', (32, 32), (40 * k, 0, 0)).save(f'{sys.argv[2]}/step_{k}.png')\n"
    )
    out = tmp_path / "outs"
    cmd = f"{shlex_quote(sys.executable)} {shlex_quote(str(script))} {{request_file}} {{out_dir}}"
    res = CliRunner().invoke(app, ["worldcast", "generate", "--dataset", str(dataset), "--out", str(out),
                                   "--interface", "interleaved", "--command", cmd, "-q"])
    assert res.exit_code == 1 and "generated 4, kept 0, failed 1" in res.stdout
    assert "exited with status 3" in res.output
    req = json.loads((out / "_generation" / "requests" / "goal_tiles" / "request.json").read_text())
    assert req["images"] == [str(dataset.resolve() / "goal_tiles" / n) for n in ("input_1.png", "goal.png")]
    assert "hints" not in req and not any(h in json.dumps(req) for h in _hints(dataset))
    assert sorted(p.name for p in (out / "goal_tiles").glob("step_*.png")) == [f"step_{k}.png" for k in range(1, 5)]
    log = (out / "_generation" / "log.jsonl").read_text()
    assert '"case_id": "text_only", "elapsed_s"' in log and "exited with status 3" in log
    # a placeholder typo is refused before anything runs; a program that hangs is stopped, its children too
    res = CliRunner().invoke(app, ["worldcast", "generate", "--dataset", str(dataset), "--out", str(tmp_path / "o2"),
                                   "--interface", "interleaved", "--command", "run {outdir}", "-q"])
    assert res.exit_code == 2 and "unknown placeholder(s) ['outdir']" in res.output
    marker = tmp_path / "still_running"
    hang = f"(sleep 1; touch {shlex_quote(str(marker))}) & sleep 30"
    res = CliRunner().invoke(app, ["worldcast", "generate", "--dataset", str(dataset), "--out", str(tmp_path / "o3"),
                                   "--interface", "interleaved", "--command", hang, "--command-timeout", "0.3",
                                   "--case", "adapt_cube_box", "-q"])
    assert res.exit_code == 1 and "ran past 0.3 s and was stopped" in res.output
    import time

    time.sleep(1.5)
    assert not marker.exists()  # the background child died with the group


def shlex_quote(s: str) -> str:
    import shlex

    return shlex.quote(s)


def test_garbage_plan_and_inspection_answers_are_recorded(fake, dataset, tmp_path):
    """Through the Python API with scripted LLMs (MockTransport): a plan that never parses fails its case before any
    image call; inspections that never parse keep the first draft of each state instead of spending the budget."""
    from worldeval.judge import JudgeClient, JudgeConfig, MockTransport
    from worldeval.worldcast.generation.generate import GenerateOptions, run_generate
    from worldeval.generator import GenConfig, GenEndpoint

    script = MockTransport({
        "You review one image": "Looks fine to me!",
        "Get the green cube": "Here is a plan: first the cube, then the box.",
        "The red ball": {"steps": ["held", "falling", "bounce", "rest"]},
    })
    llm = JudgeClient(JudgeConfig(model="llm-x", max_attempts=2, backoff_base_s=0.0), transport=script)
    endpoint = GenEndpoint(GenConfig(model="gen-x", base_url=fake.base_url, api_key=KEY, backoff_base_s=0.0))
    opts = GenerateOptions("interleaved", endpoint=endpoint, enhancer=llm, inspector=llm, agentic=True, budget="2K")
    out = tmp_path / "outs"
    res = run_generate(dataset, out, opts, case_ids=["adapt_cube_box", "phys_ball_drop"])
    assert res.done == ["phys_ball_drop"] and list(res.failed) == ["adapt_cube_box"]
    assert "PlanError" in res.failed["adapt_cube_box"] and "after 2 attempt(s)" in res.failed["adapt_cube_box"]
    assert not fake.requests_to("POST /images/edits", lambda r: "green cube" in r["fields"]["prompt"])
    assert len(fake.requests_to("POST /images/edits", lambda r: "red ball" in r["fields"]["prompt"])) == 4
    trace = json.loads((out / "phys_ball_drop" / "generation.json").read_text())
    assert [i["ok"] for i in trace["inspections"]] == [False] * 4 and trace["image_calls"] == 4
    assert all("unparseable" in i["error"] for i in trace["inspections"])
    assert [c["inspector_score"] for c in trace["choices"]] == [-1] * 4
    failed = json.loads((out / "_generation" / "failed" / "adapt_cube_box.json").read_text())
    assert failed["image_calls"] == 0 and failed["plan"] is None
    # the LLMs saw the tasks but never a hint
    hints = _hints(dataset)
    assert script.requests and not any(h in r.text for r in script.requests for h in hints)


def test_unreachable_endpoint_or_refused_key_stops_at_once(fake, dataset, tmp_path):
    import socket
    import time

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens on this port now
    out = tmp_path / "outs"
    t0 = time.monotonic()
    res = CliRunner().invoke(app, ["worldcast", "generate", "--dataset", str(dataset), "--out", str(out),
                                   "--interface", "grid", "--base-url", f"http://127.0.0.1:{port}/v1",
                                   "--gen-model", "gen-x", "--api-key", KEY, "-q"])
    assert res.exit_code == 3 and f"http://127.0.0.1:{port}/v1: not reachable" in res.output
    assert time.monotonic() - t0 < 20 and not out.exists()  # nothing generated, nothing recorded
    fake.fail["GET /models"] = [401]
    res = CliRunner().invoke(app, ["worldcast", "generate", "--dataset", str(dataset), "--out", str(out),
                                   "--interface", "grid", "--base-url", fake.base_url, "--gen-model", "gen-x",
                                   "--api-key", KEY, "-q"])
    assert res.exit_code == 3 and "HTTP 401, the API key was refused" in res.output and KEY not in res.output
    assert [r["route"] for r in fake.log] == ["GET /models"]
