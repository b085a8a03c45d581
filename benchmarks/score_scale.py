"""Scoring at paper scale: wall time of `worldeval opis score --bootstrap 2000 --json` vs. a floor.

Builds a seeded random archive shaped like the OPIS paper's evaluation
(8 models x 500 cases in 10 subcategories / 3 domains x 28 sampled frames x
on average 25 reference instances, about 2.8 million rows), then measures in
the same run:

- floor: read the same Parquet file with pandas and take one group-by mean
  over (model, case_id) -- the least any scorer of this archive must do --
  in this process (pandas already imported);
- process floor: the same read and group-by as a process of its own
  (interpreter start and the pandas import included, as the CLI pays them);
- score: the full CLI in a subprocess (interpreter start, read, validation,
  frame/case reductions, 5 variants and the authors' official-v3 aggregation,
  diagnostics, 2000-replicate bootstrap, JSON output).

The three run in turn, repeat by repeat (interleaved), so load from other
processes reaches them alike; ratios are given by medians and by minima.

Usage: python benchmarks/score_scale.py [--out DIR] [--repeat 3] [--bootstrap 2000]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from worldeval.opis.archive import SCHEMA, SINGLE_FILE, _atomic_write_table

DOMAINS = {
    "real_world": ["home_indoor", "natural", "public_indoor", "urban"],
    "embodied": ["industrial", "laboratory", "simulated"],
    "game": ["cartoon", "pixel", "realistic"],
}
VIS = np.array(["expected_visible", "occluded", "out_of_view", "too_small", "unknown"])


def build_archive(path: Path, models: int = 8, cases: int = 500, frames: int = 28, mean_instances: int = 25,
                  seed: int = 0) -> int:
    """Write a random but seeded paper-scale archive; returns the row count."""
    rng = np.random.default_rng(seed)
    subs = [(d, s) for d, ss in DOMAINS.items() for s in ss]
    fps = 24.0
    frame_idx = 24 + 8 * np.arange(frames)
    n_ref = rng.integers(mean_instances - 20, mean_instances + 21, size=cases)  # spans all density bins
    case_sub = np.arange(cases) % len(subs)
    # Rows of one model: every case x frame x reference instance.
    per_case = n_ref * frames
    case_of_row = np.repeat(np.arange(cases), per_case)
    within = np.arange(per_case.sum()) - np.repeat(np.cumsum(per_case) - per_case, per_case)
    frame_of_row = frame_idx[within // np.repeat(n_ref, per_case)]
    inst_of_row = within % np.repeat(n_ref, per_case)
    n = len(case_of_row)
    inst_names = np.array([f"obj_{i:03d}" for i in range(n_ref.max())], dtype=object)
    case_names = np.array([f"case_{i:04d}" for i in range(cases)], dtype=object)
    tables = []
    total = 0
    for m in range(models):
        vis = VIS[rng.choice(5, size=n, p=[0.7, 0.1, 0.08, 0.02, 0.1])]
        expected = vis == "expected_visible"
        matched = expected & (rng.random(n) < 0.97)
        ambiguous = (vis == "unknown") & (rng.random(n) < 0.3)
        app = np.where(matched & (rng.random(n) < 0.98), np.clip(rng.beta(6, 2, n), 0, 1), np.nan)
        track_static = rng.random(n) < 0.6
        strv = np.where(matched & (rng.random(n) < 0.5), np.clip(rng.beta(5, 2, n), 0, 1), np.nan)
        src = np.where(np.isnan(strv), None, np.where(track_static, "static", "pose"))
        df = pd.DataFrame(
            {
                "model": f"model_{m}",
                "case_id": case_names[case_of_row],
                "domain": np.array([subs[k][0] for k in case_sub], dtype=object)[case_of_row],
                "subcategory": np.array([subs[k][1] for k in case_sub], dtype=object)[case_of_row],
                "n_reference": n_ref[case_of_row].astype(np.int32),
                "frame": frame_of_row.astype(np.int32),
                "time_s": frame_of_row / fps,
                "instance_id": inst_names[inst_of_row],
                "track": np.where(track_static, "static", "dynamic"),
                "visibility": vis,
                "matched": matched,
                "ambiguous": ambiguous,
                "extra": False,
                "appearance": app,
                "structure": strv,
                "structure_source": src,
            }
        )
        # About one confirmed extra per 20 frames.
        n_extra = cases * frames // 20
        pick = rng.choice(cases * frames, size=n_extra, replace=False)
        ec, ef = pick // frames, frame_idx[pick % frames]
        extra = pd.DataFrame(
            {
                "model": f"model_{m}",
                "case_id": case_names[ec],
                "domain": np.array([subs[k][0] for k in case_sub], dtype=object)[ec],
                "subcategory": np.array([subs[k][1] for k in case_sub], dtype=object)[ec],
                "n_reference": n_ref[ec].astype(np.int32),
                "frame": ef.astype(np.int32),
                "time_s": ef / fps,
                "instance_id": None,
                "track": None,
                "visibility": None,
                "matched": False,
                "ambiguous": False,
                "extra": True,
                "appearance": np.nan,
                "structure": np.nan,
                "structure_source": None,
            }
        )
        df = pd.concat([df, extra], ignore_index=True)
        tables.append(pa.Table.from_pandas(df, schema=SCHEMA, preserve_index=False))
        total += len(df)
    _atomic_write_table(pa.concat_tables(tables), path)
    return total


def floor_once(path: Path) -> tuple[float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    df = pd.read_parquet(path)
    df.groupby(["model", "case_id"])["appearance"].mean()
    return time.perf_counter() - t0, time.process_time() - c0


FLOOR_PROCESS = ("import sys, pandas as pd; df = pd.read_parquet(sys.argv[1]); "
                 "df.groupby(['model', 'case_id'])['appearance'].mean()")


def floor_process_once(path: Path) -> tuple[float, float]:
    """The floor as a process of its own: what any command-line scorer pays before scoring."""
    t0, c0 = time.perf_counter(), _children_cpu()
    proc = subprocess.run([sys.executable, "-c", FLOOR_PROCESS, str(path)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"process floor failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return time.perf_counter() - t0, _children_cpu() - c0


def _children_cpu() -> float:
    import resource

    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def score_once(run: Path, bootstrap: int) -> tuple[float, float, int]:
    cmd = [sys.executable, "-m", "worldeval.cli", "opis", "score", str(run), "--bootstrap", str(bootstrap), "--json"]
    t0, c0 = time.perf_counter(), _children_cpu()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    dt, cpu = time.perf_counter() - t0, _children_cpu() - c0
    if proc.returncode != 0:
        raise SystemExit(f"score failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return dt, cpu, len(proc.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None, help="run folder to build (default: a temporary folder)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--bootstrap", type=int, default=2000)
    ap.add_argument("--models", type=int, default=8)
    ap.add_argument("--cases", type=int, default=500)
    ap.add_argument("--reuse", action="store_true", help="keep an archive already in --out instead of rebuilding it")
    args = ap.parse_args()
    tmp = None
    run = args.out
    if run is None:
        tmp = tempfile.TemporaryDirectory(prefix="score_scale_")
        run = Path(tmp.name)
    run.mkdir(parents=True, exist_ok=True)
    path = run / SINGLE_FILE
    t0 = time.perf_counter()
    if args.reuse and path.exists():
        import pyarrow.parquet as pq

        rows = pq.ParquetFile(path).metadata.num_rows
    else:
        rows = build_archive(path, models=args.models, cases=args.cases)
    print(f"archive: {rows:,} rows, {path.stat().st_size / 2**20:.1f} MiB, ready in {time.perf_counter() - t0:.1f} s")
    floors, procs, scores, floor_cpu, proc_cpu, score_cpu = [], [], [], [], [], []
    floor_once(path)  # warm the page cache so the first floor is not charged for disk reads
    for _ in range(args.repeat):  # interleaved, so load from other processes hits all alike
        wall, cpu = floor_once(path)
        floors.append(wall)
        floor_cpu.append(cpu)
        wall, cpu = floor_process_once(path)
        procs.append(wall)
        proc_cpu.append(cpu)
        wall, cpu, size = score_once(run, args.bootstrap)
        scores.append(wall)
        score_cpu.append(cpu)
    report(floors, procs, scores, floor_cpu, proc_cpu, score_cpu, args.bootstrap, size)
    if tmp is not None:
        tmp.cleanup()


def report(floors, procs, scores, floor_cpu, proc_cpu, score_cpu, bootstrap: int, size: int) -> None:
    def fmt(xs):
        return f"median {statistics.median(xs):.2f} s, min {min(xs):.2f} s  [{', '.join(f'{x:.2f}' for x in xs)}]"

    floor, proc, score = statistics.median(floors), statistics.median(procs), statistics.median(scores)
    print(f"floor (pd.read_parquet + groupby(model, case_id).mean, in-process): {fmt(floors)}")
    print(f"process floor (the same as a process of its own: interpreter start and pandas import): {fmt(procs)}")
    print(f"worldeval opis score --bootstrap {bootstrap} --json (subprocess, includes interpreter start): {fmt(scores)}  "
          f"(JSON {size / 1024:.0f} KiB)")
    print(f"ratio to the floor: {score / floor:.2f}x by medians, {min(scores) / min(floors):.2f}x by minima (goal <= 1.2x)")
    print(f"ratio to the process floor: {score / proc:.2f}x by medians, {min(scores) / min(procs):.2f}x by minima")
    fc, pc, sc = statistics.median(floor_cpu), statistics.median(proc_cpu), statistics.median(score_cpu)
    print(f"CPU time (user+sys, less sensitive to other load): floor {fc:.2f} s, process floor {pc:.2f} s, score {sc:.2f} s; "
          f"ratios {sc / fc:.2f}x and {sc / pc:.2f}x")


if __name__ == "__main__":
    main()
