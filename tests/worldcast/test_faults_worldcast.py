"""WorldCast faults: a judge that answers 429 for a while, and a grid image of the wrong size.

Each gives a recorded, named failure for its items, the run finishes, a rerun
redoes exactly the failed items, the final scores equal those of a clean run,
and nothing outside the run folder is written.
"""

from __future__ import annotations

import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from worldeval.cli import app
from worldeval.judge.mock import LoopbackServer
from worldeval.worldcast.samples import sample_dataset, sample_outputs

KEY = "sk-faults-SECRET-91c2"


class RateLimitedJudge(LoopbackServer):
    """Loopback chat-completions server: 429 (with Retry-After 0) for the first `busy` requests, then answers.

    Every answer is a valid score, made from the request text only, so a clean
    run and a run that saw 429s must end with the same scores.
    """

    def __init__(self, busy: int):
        self.busy = busy
        self.n = 0
        self.statuses: list[int] = []
        self.lock = threading.Lock()
        srv = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                with srv.lock:
                    srv.n += 1
                    limited = srv.n <= srv.busy
                    srv.statuses.append(429 if limited else 200)
                if limited:
                    return srv.send_json(self, 429, {"error": {"message": "rate limited (test)"}}, {"retry-after": "0"})
                text = json.dumps(body["messages"])
                # deterministic, valid for every metric (PA 0-2, OC 0-1, CP/VC 0-3)
                score = 1 if "OUTCOME" in text else (len(text) % 3)
                content = json.dumps({"score": score, "evidence": "test judge"})
                srv.send_json(self, 200, {
                    "id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                })

        super().__init__(Handler)


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


def _judge(base_url: str, dataset: Path, outputs: Path, out: Path):
    res = CliRunner().invoke(app, [
        "worldcast", "judge", "--dataset", str(dataset), "--outputs", str(outputs), "--model", "m",
        "--out", str(out), "--base-url", base_url, "--judge-model", "judge-t", "--api-key", KEY,
        "--concurrency", "1", "--max-attempts", "2", "--backoff", "0.01", "--timeout", "5", "--no-cache", "-q",
    ])
    # every run here has failed items (the bad grid at least): exit 1, never 0
    assert res.exit_code == 1, res.output + repr(res.exception)
    assert "item(s) failed; most common:" in res.output
    return res


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "judgments.jsonl").read_text().splitlines() if line.strip()]


def _score(*runs: Path) -> dict:
    res = CliRunner().invoke(app, ["worldcast", "score", *map(str, runs), "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


@pytest.mark.slow
def test_rate_limited_judge_and_bad_grid(tmp_path, monkeypatch):
    inputs = tmp_path / "inputs"
    dataset = shutil.copytree(sample_dataset(), inputs / "dataset")
    outputs = shutil.copytree(sample_outputs("correct"), inputs / "outputs")
    # adapt_cube_box asks for 2 steps (a 1x2 grid); a tall strip cannot hold two side-by-side cells
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 255, (400, 60, 3), dtype=np.uint8)).save(outputs / "adapt_cube_box" / "grid.png")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # a stray ~/.cache write would land here and be caught
    monkeypatch.delenv("WORLDEVAL_CACHE_DIR", raising=False)

    clean_run = tmp_path / "clean"
    clean = RateLimitedJudge(busy=0)
    try:
        _judge(clean.base_url, dataset, outputs, clean_run)
    finally:
        clean.close()

    before = _snapshot(tmp_path)
    run = tmp_path / "run"
    # 3 requests get 429: the preflight request (judging goes ahead: the endpoint is there), then the first item
    # uses both attempts on 429 and fails; the next item succeeds
    srv = RateLimitedJudge(busy=3)
    try:
        _judge(srv.base_url, dataset, outputs, run)
        first = _records(run)
        failed = [r for r in first if r["status"] != "ok"]
        grid_failed = [r for r in failed if r["case_id"] == "adapt_cube_box"]
        rate_failed = [r for r in failed if r["case_id"] != "adapt_cube_box"]
        # the bad grid: every metric of that case is recorded failed, naming the file and the cause
        assert grid_failed and all("grid.png" in r["error"] and "cannot hold a 1x2 grid" in r["error"] for r in grid_failed)
        # the rate limit: exactly one item ran out of attempts, recorded as failed with the 429 named
        assert len(rate_failed) == 1, [(r["case_id"], r["metric"], r["error"]) for r in rate_failed]
        assert "429" in json.dumps(rate_failed[0]) and rate_failed[0]["score"] is None
        assert srv.statuses[:3] == [429, 429, 429]
        n_ok_first = sum(r["status"] == "ok" for r in first)

        # resume: only the failed items are asked again (after the preflight request); the rate-limited one now succeeds
        asked_before = srv.n
        _judge(srv.base_url, dataset, outputs, run)
        assert srv.n - asked_before == 2
    finally:
        srv.close()

    latest = {}
    for r in _records(run):
        latest[(r["case_id"], r["metric"], r.get("step"))] = r
    ok = [r for r in latest.values() if r["status"] == "ok"]
    assert len(ok) == n_ok_first + 1
    assert all(r["case_id"] == "adapt_cube_box" for r in latest.values() if r["status"] != "ok")

    a, b = _score(clean_run)["models"]["m"], _score(run)["models"]["m"]
    assert a == b and b["n_failed"] >= 1

    # nothing outside the run folder was written (inputs, home and the clean run are untouched)
    after = _snapshot(tmp_path)
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    assert changed and all(k.startswith("run/") for k in changed), sorted(k for k in changed if not k.startswith("run/"))
    assert not any(home.rglob("*"))
    for p in (run / "judgments.jsonl", run / "manifest.json"):
        assert KEY not in p.read_text()
