"""Throughput of `opis eval` (classical backend): 1 vs N workers, local process pool vs a local Ray cluster.

    .venv/bin/python benchmarks/scale.py                 # 8 cases, workers 1 and 2, local and Ray
    .venv/bin/python benchmarks/scale.py --cases 16 --workers 1 2 4 --no-ray

Every configuration evaluates the same synthetic dataset (tests/helpers/faults_data.py:
textured scenes with 2-3 objects, H.264 rollouts) into a fresh run folder, end to end
through `run_eval`: worker start-up, decoding, perception, writing parts, consolidation.
Throughput is sampled frames per second of wall time. The Ray cluster's own start-up is
timed apart (a user pays it once per cluster, not per run). The fastest of --repeat runs
counts (shared machines are noisy). "ray cold" starts new actors, like the local pool
starts new processes; "ray warm" reruns on the actors of the previous call (models
loaded), which is what a long-lived driver (notebook, service) sees.
All configurations must produce the same archive; the script checks it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.helpers.faults_data import make_dataset  # noqa: E402

MODEL = "toy"
SLEEP_S = 0.2


def _sleep_item(x: int) -> int:
    time.sleep(SLEEP_S)
    return x


def _archive(run_dir: Path):
    from worldeval.opis.archive import COLUMNS, read_archive

    df = read_archive(run_dir)
    return df.sort_values(["case_id", "frame", "extra", "instance_id", "appearance"], na_position="last").reset_index(drop=True)[list(COLUMNS)]


def _run(dataset: Path, rollouts: Path, out: Path, workers: int, executor: str) -> tuple[float, int, dict]:
    from worldeval.opis.run import run_eval

    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    summary = run_eval(dataset, rollouts / MODEL, MODEL, out, backend="classical", device="cpu",
                       workers=workers, executor=executor)
    wall = time.perf_counter() - t0
    df = _archive(out)
    frames = int(df[["case_id", "frame"]].drop_duplicates().shape[0])
    return wall, frames, summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=8)
    ap.add_argument("--size", type=int, default=160, help="image side in pixels")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--fps", type=int, default=24)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=2,
                    help="runs per configuration; the fastest counts (shared machines are noisy)")
    ap.add_argument("--threads", type=int, default=1,
                    help="math-library threads per worker, the same for local and Ray (0: executor defaults)")
    ap.add_argument("--overhead-items", type=int, default=20,
                    help="also time this many 0.2 s sleep items (no CPU): the executors' own cost (0: skip)")
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--keep", type=Path, default=None, help="keep data and runs in this folder")
    args = ap.parse_args(argv)

    if args.threads:
        # Ray actors default to one thread each; give local workers the same, or the comparison
        # measures thread counts rather than executors.
        os.environ["WORLDEVAL_THREADS_PER_WORKER"] = str(args.threads)
    root = args.keep or Path(tempfile.mkdtemp(prefix="worldeval-scale-"))
    dataset, rollouts = make_dataset(root, args.cases, size=args.size, seconds=args.seconds, fps=args.fps, model=MODEL)
    print(f"data: {args.cases} cases, {args.size}px, {args.seconds:g}s at {args.fps} fps; cpus={os.cpu_count()}, "
          f"load average {os.getloadavg()[0]:.1f}")

    rows: list[tuple[str, int, float, int]] = []
    reference = None

    def measure(label: str, workers: int, executor: str, runs: int) -> list[float]:
        nonlocal reference
        walls = []
        for _ in range(runs):
            out = root / "runs" / f"{label}-{workers}"
            wall, frames, _ = _run(dataset, rollouts, out, workers, executor)
            walls.append(wall)
            df = _archive(out)
            if reference is None:
                reference = (df, frames)
            elif not df.equals(reference[0]):
                raise SystemExit(f"{label} with {workers} workers produced a different archive")
        return walls

    def add(label: str, workers: int, walls: list[float]) -> None:
        frames = reference[1]
        wall = min(walls)
        rows.append((label, workers, wall, frames))
        print(f"  {label:<10} workers={workers}: {wall:7.2f} s (runs: {', '.join(f'{w:.1f}' for w in walls)}), "
              f"{frames} sampled frames, {frames / wall:6.2f} frames/s", flush=True)

    overhead: list[tuple[str, int, float]] = []

    def sleeps(label: str, executor: str) -> None:
        from worldeval.executor import run_items

        n = args.overhead_items
        for w in args.workers:
            t0 = time.perf_counter()
            run_items(_sleep_item, range(n), workers=w, executor=executor)
            overhead.append((label, w, time.perf_counter() - t0 - n * SLEEP_S / w))

    ray_start = None
    if not args.no_ray:
        import ray

        t0 = time.perf_counter()
        ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, logging_level="WARNING",
                 _node_ip_address="127.0.0.1",
                 runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}})
        ray_start = time.perf_counter() - t0
        print(f"  ray cluster start-up: {ray_start:.2f} s (not counted below)")
    try:
        for w in args.workers:
            # Local and Ray runs alternate, so a change in the machine's load hits both alike.
            local_walls, ray_walls = [], []
            if not args.no_ray:
                from worldeval.executor import shutdown_workers

                shutdown_workers()  # cold: new actors, models loaded again, as the local pool does
            for _ in range(max(1, args.repeat)):
                local_walls += measure("local", w, "local", 1)
                if not args.no_ray:
                    ray_walls += measure("ray", w, "ray", 1)
            add("local", w, local_walls)
            if ray_walls:
                add("ray cold", w, ray_walls[:1])
                if len(ray_walls) > 1:
                    add("ray warm", w, ray_walls[1:])
        if args.overhead_items:
            sleeps("local", "local")
            if not args.no_ray:
                sleeps("ray warm", "ray")
    finally:
        if not args.no_ray:
            ray.shutdown()

    base = {lbl: wall for lbl, w, wall, _ in rows if w == min(args.workers) and lbl == "local"}["local"]
    local = {w: wall for lbl, w, wall, _ in rows if lbl == "local"}
    print()
    print(f"{'executor':<10} {'workers':>7} {'wall s':>8} {'frames/s':>9} {'speed-up':>9} {'vs local':>9}")
    for lbl, w, wall, frames in rows:
        over = f"{(wall / local[w] - 1) * 100:+8.0f}%" if lbl != "local" and w in local else f"{'-':>9}"
        print(f"{lbl:<10} {w:>7} {wall:8.2f} {frames / wall:9.2f} {base / wall:8.2f}x {over}")
    if ray_start is not None:
        print(f"ray cluster start-up {ray_start:.2f} s; 'vs local' is the Ray run's extra wall time on the same work")
    if overhead:
        print()
        print(f"executor cost on {args.overhead_items} sleep items of {SLEEP_S} s (wall minus ideal; no CPU needed):")
        for lbl, w, extra in overhead:
            print(f"  {lbl:<9} workers={w}: {extra:+6.2f} s ({extra / args.overhead_items * 1000:+.0f} ms per item)")
    print(f"load average at the end {os.getloadavg()[0]:.1f} (other processes share these cores)")
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
