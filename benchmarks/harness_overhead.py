"""Target 4: what the harness adds to every point of a real sweep, wandb offline.

    python benchmarks/harness_overhead.py                       # runs experiment=quick into a temp folder
    python benchmarks/harness_overhead.py --results DIR/results.csv   # reads an existing sweep instead
    python benchmarks/harness_overhead.py --quick               # a 4-point sweep: does it run

Runs `python -m runners.sweep experiment=quick hydra.sweep.dir=<temp> wandb.mode=offline
report=false` (the report is written once after the last job and is no point's overhead; target
6 times the whole default command, report included), then reads its results.csv. Per measured
row (status ok):
  overhead       = job_wall_s - measure_s    (the job's wall time minus the calls and warm-up)
  inside measure = point_wall_s - measure_s  (inputs, budget guard, accuracy, stability, ...)
  runner + Hydra = job_wall_s - point_wall_s (config, row file, results.csv, wandb, progress)
Target: median overhead <= 0.5 s per point.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import add_common_args, REPO, Check, print_checks, print_header

import numpy as np
import pandas as pd

QUICK_OVERRIDES = ["-m", "backend=sdpa,chunked", "seq_len=128,256", "budget.timing_s=0.05", "name=overhead_smoke"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser, shape=False)
    parser.add_argument("--results", type=Path, help="analyse this results.csv instead of running a sweep")
    parser.add_argument("--experiment", default="quick", help="the experiment to sweep (default: quick)")
    parser.add_argument("--sweep-dir", type=Path, help="where the sweep writes (default: a new temp folder)")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for the sweep")
    parser.add_argument("--quick", action="store_true", help="a 4-point sweep instead of the experiment (a smoke run)")
    return parser.parse_args(argv)


def run_sweep(args: argparse.Namespace) -> Path:
    sweep_dir = args.sweep_dir or Path(tempfile.mkdtemp(prefix="selfattn-overhead-"))
    study = QUICK_OVERRIDES if args.quick else [f"experiment={args.experiment}"]
    command = [sys.executable, "-m", "runners.sweep", *study, f"hydra.sweep.dir={sweep_dir}",
               "wandb.mode=offline", "report=false", *args.overrides]
    print(f"   sweep: {' '.join(command[1:])}", flush=True)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    print(f"   sweep finished in {time.perf_counter() - start:.1f} s with exit status {done.returncode}", flush=True)
    if done.returncode != 0:
        raise RuntimeError(f"the sweep failed: {done.stderr.strip().splitlines()[-3:]}")
    return sweep_dir / "results.csv"


def overheads(csv_path: Path) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Per-row overhead parts (seconds) of the measured rows, and the count of rows per status."""
    results = pd.read_csv(csv_path)
    statuses = {str(k): int(v) for k, v in results["status"].value_counts(sort=False).items()}
    times = results.reindex(columns=["measure_s", "point_wall_s", "job_wall_s"]).apply(pd.to_numeric, errors="coerce")
    measured = times[(results["status"] == "ok") & times.notna().all(axis=1)]
    measure, point, job = measured["measure_s"], measured["point_wall_s"], measured["job_wall_s"]
    parts = {"overhead": job - measure, "inside measure": point - measure, "runner + Hydra": job - point,
             "measure_s": measure}
    return {name: values.tolist() for name, values in parts.items()}, statuses


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print_header("target 4: harness overhead per point (job wall time minus measured calls)")
    csv_path = args.results if args.results else run_sweep(args)
    parts, statuses = overheads(csv_path)
    print(f"   {csv_path}: rows by status {statuses}")
    if not parts["overhead"]:
        print("no measured row with measure_s, point_wall_s and job_wall_s")
        return 1
    print(f"\n{'seconds per point':<18} {'median':>7} {'p20':>7} {'p80':>7} {'max':>7} {'total':>8}   ({len(parts['overhead'])} rows)")
    for name, values in parts.items():
        v = np.asarray(values)
        p20, median, p80 = np.quantile(v, [0.2, 0.5, 0.8])
        print(f"{name:<18} {median:>7.3f} {p20:>7.3f} {p80:>7.3f} {v.max():>7.3f} {v.sum():>8.1f}")
    median = float(np.median(parts["overhead"]))
    checks = [Check("4", "median job_wall_s - measure_s", median, 0.5, unit="s",
                    note=f"inside measure {np.median(parts['inside measure']):.3f} s + runner/Hydra "
                         f"{np.median(parts['runner + Hydra']):.3f} s (medians)")]
    misses = print_checks(checks)
    return 1 if misses and args.strict else 0


if __name__ == "__main__":
    raise SystemExit(main())
