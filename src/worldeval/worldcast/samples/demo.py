"""`worldeval worldcast demo`: samples -> judge -> score -> report, offline, in seconds, with no key.

The packaged sample outputs (`correct`, `shuffled`) and a `broken` copy made here
(every case broken the way real outputs break, so it has no score) are judged into one run
folder through the `mock` transport, by the scripted answers in
`demo_judge.json`. Those answers were written per sample output from how
each output was made; the manifest and the report say they are scripted, so
they are never mistaken for a model's judgement. Then the run is scored with
bootstrap CIs and `report.html` is written by the report builder the command line hands in (the
report package sits above WorldCast). Rerunning resumes like `judge`.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Callable

from worldeval.judge import JudgeCache, JudgeClient, JudgeConfig, ScriptTransport, load_judge_script
from worldeval.runs import atomic_write_bytes, atomic_write_json
from worldeval.stats import BOOTSTRAP_REPLICATES
from worldeval.worldcast.judging.run import run_judge
from worldeval.worldcast.samples import sample_dataset, sample_outputs
from worldeval.worldcast.scoring.scores import score_runs

DEMO_MODELS = ("correct", "shuffled", "broken")
DEMO_SCRIPT = Path(__file__).resolve().parent / "demo_judge.json"


def make_broken_outputs(dest: Path) -> Path:
    """The correct outputs with one fault per case that users meet: a gap in the step numbering, a grid cut
    short on disk, a case never generated, two output kinds in one folder. No case can be judged."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(sample_outputs("correct"), dest)
    (dest / "phys_ball_drop" / "step_2.png").unlink()
    grid = dest / "adapt_cube_box" / "grid.png"
    atomic_write_bytes(grid, grid.read_bytes()[:200])
    shutil.rmtree(dest / "logic_hanoi2")
    shutil.copy(sample_outputs("correct") / "phys_ball_drop" / "step_1.png", dest / "goal_tiles" / "step_1.png")
    return dest


def demo_client(run: Path) -> JudgeClient:
    # No waiting between attempts: the script answers at once, and its one unparseable reply should
    # cost the demo no time.
    cfg = JudgeConfig(model="scripted-demo-judge", max_attempts=2, backoff_base_s=0.0, backoff_max_s=0.0,
                      concurrency=4, preflight=True)
    return JudgeClient(cfg, JudgeCache(run / "judge_cache.sqlite"), transport=ScriptTransport(load_judge_script(DEMO_SCRIPT)))


def run_demo(out: Path, build_report: Callable[..., Path], bootstrap: int = BOOTSTRAP_REPLICATES, seed: int = 0,
             events_for=None, say=None) -> dict:
    """Judge, score and report the samples into `out`; returns the summary. `build_report` is
    `worldeval.report.build_report`; `events_for(model)` gives the progress events of one model's run
    (None: silent)."""
    t0 = time.monotonic()
    out = Path(out)
    run = out / "run"
    outputs = {"correct": sample_outputs("correct"), "shuffled": sample_outputs("shuffled"),
               "broken": make_broken_outputs(out / "outputs" / "broken")}
    judged = {}
    for model in DEMO_MODELS:
        client = demo_client(run)
        try:
            events = events_for(model) if events_for else None
            res = run_judge(sample_dataset(), outputs[model], model, run, client, events=events,
                            progress=say, breaker=0,  # the broken outputs fail on purpose; nothing to stop
                            extra_config={"demo": True, "outputs_kind": model})
        finally:
            client.cache.close()
        judged[model] = {"ok": res.ok, "failed": res.failed, "kept": res.kept,
                         "reasons": res.reason_lines(None)}  # all: a few, and they must add up to `failed`
    scores = score_runs([run], bootstrap=bootstrap, seed=seed)
    atomic_write_json(out / "scores.json", scores)
    report = build_report([run], out / "report.html", title="worldeval WorldCast demo (scripted judge)",
                          bootstrap=bootstrap, seed=seed)
    summary = {"out": str(out), "run": str(run), "report": str(report), "scores": str(out / "scores.json"),
               "judged": judged, "script": str(DEMO_SCRIPT), "seconds": round(time.monotonic() - t0, 2)}
    atomic_write_json(out / "demo_summary.json", summary)
    return summary
