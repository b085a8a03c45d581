"""What the WorldCast judge harness costs over a bare client loop.

A chat-completions server on 127.0.0.1 answers every request after `--latency` seconds
(default 0.25). worldeval judges N items (`run_judge` over copies of the packaged
samples, `--concurrency` requests in flight) against it; then a bare loop of the same
width sends the same request bodies through the `openai` SDK with nothing else.
Both wall times and their ratio are printed (`--json` for a machine-readable line;
`--profile FILE` writes a cProfile of the worldeval run).

    python benchmarks/judge_overhead.py --items 700 --concurrency 16
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from worldeval.judge.mock import LoopbackServer


class SlowJudge(LoopbackServer):
    """Answers every POST with a valid score after `latency` seconds; counts requests and keeps the bodies."""

    def __init__(self, latency: float):
        self.latency, self.n, self.bodies, self.lock = latency, 0, [], threading.Lock()
        srv = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real servers do

            def log_message(self, *a):
                pass

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                time.sleep(srv.latency)
                with srv.lock:
                    srv.n += 1
                    if len(srv.bodies) < 64:
                        srv.bodies.append(raw)
                body = json.loads(raw)
                content = json.dumps({"score": 1, "evidence": "ok", "step_index": 1})
                srv.send_json(self, 200, {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                                          "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                                       "finish_reason": "stop"}],
                                          "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

        super().__init__(Handler)


def make_dataset(root: Path, n_items: int) -> tuple[Path, Path]:
    """Copies of the packaged samples (15 items per 4 cases) until at least `n_items` items exist."""
    from worldeval.worldcast.samples import sample_dataset, sample_outputs

    src_ds, src_out = sample_dataset(), sample_outputs("correct")
    cases = [json.loads(line) for line in (src_ds / "cases.jsonl").read_text().splitlines() if line.strip()]
    ds, outs = root / "dataset", root / "outputs"
    lines, items, k = [], 0, 0
    while items < n_items:
        for c in cases:
            if items >= n_items:
                break
            cid = f"{c['id']}_{k:04d}"
            shutil.copytree(src_ds / c["id"], ds / cid)
            shutil.copytree(src_out / c["id"], outs / cid)
            # a distinct instruction per copy: identical requests would be answered from the cache
            lines.append(json.dumps({**c, "id": cid, "instruction": f"{c['instruction']} (copy {k})", "images": [{**im, "path": im["path"].replace(c["id"], cid, 1)}
                                                                 for im in c["images"]]}))
            items += 3 + (1 if c.get("outcome_weight", 0) > 0 else 0)
        k += 1
    (ds / "cases.jsonl").write_text("\n".join(lines) + "\n")
    return ds, outs


def run_worldeval(base_url: str, ds: Path, outs: Path, run: Path, concurrency: int, profile: str | None) -> tuple[float, int]:
    from worldeval.judge import JudgeCache, JudgeClient, JudgeConfig
    from worldeval.worldcast.judging.run import run_judge

    cfg = JudgeConfig(model="bench-judge", base_url=base_url, api_key="k", concurrency=concurrency, preflight=True)
    client = JudgeClient(cfg, JudgeCache(run / "judge_cache.sqlite"))
    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    t0 = time.perf_counter()
    import inspect

    # breaker=0 where the harness has one: every item is asked, as the bare loop asks every request
    extra = {"breaker": 0} if "breaker" in inspect.signature(run_judge).parameters else {}
    res = run_judge(ds, outs, "bench", run, client, **extra)
    wall = time.perf_counter() - t0
    if prof is not None:
        prof.disable()
        prof.dump_stats(profile)
    client.cache.close()
    return wall, res.ok


def run_bare(base_url: str, bodies: list[dict], concurrency: int) -> float:
    """The same request bodies through the openai SDK, `concurrency` threads, nothing else."""
    import openai

    sdk = openai.OpenAI(base_url=base_url, api_key="k", max_retries=0)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        list(pool.map(lambda b: sdk.chat.completions.create(**b), bodies))
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=700)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--latency", type=float, default=0.25)
    ap.add_argument("--profile", default=None, help="write a cProfile of the worldeval run here")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        ds, outs = make_dataset(root, args.items)
        srv = SlowJudge(args.latency)
        try:
            ours, ok = run_worldeval(srv.base_url, ds, outs, root / "run", args.concurrency, args.profile)
            n = srv.n - 1  # the preflight request
            # The bare loop sends real item bodies (images included), as many as worldeval sent.
            sample = [json.loads(b) for b in srv.bodies if b"Connection check" not in b]
            bodies = [{k: v for k, v in sample[i % len(sample)].items() if k in ("model", "messages", "temperature",
                                                                                  "seed", "response_format")}
                      for i in range(n)]
            bare = run_bare(srv.base_url, bodies, args.concurrency)
        finally:
            srv.close()
    ideal = n * args.latency / args.concurrency
    out = {"items": n, "ok": ok, "concurrency": args.concurrency, "latency_s": args.latency,
           "worldeval_s": round(ours, 3), "bare_s": round(bare, 3), "ratio": round(ours / bare, 3),
           "ideal_s": round(ideal, 3)}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{n} items, {args.concurrency} in flight, {args.latency * 1000:.0f} ms per answer "
              f"(ideal {ideal:.1f} s)\n  worldeval judge: {ours:.2f} s\n  bare client loop: {bare:.2f} s\n"
              f"  ratio: {ours / bare:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
