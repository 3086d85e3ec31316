"""Target 6: the README's `python -m runners.sweep`, timed from start to figures, at most 5 minutes.

    python benchmarks/default_sweep.py            # the exact default command
    python benchmarks/default_sweep.py --quick    # a 2-point multirun with its report: does it run

Runs the README's command exactly, with no arguments (so experiment=quick, wandb offline, the
report and its figures included), as a subprocess in a new temporary folder with the repository
on PYTHONPATH (as `pip install -e .` would have it), so the sweep folder it creates
(sweeps/quick/<time>/) lands there and not in the checkout. Prints the wall time beside the
target and where the time went: the jobs' measured calls (sum of measure_s), the rest of the
jobs' wall time (sum of job_wall_s - measure_s), and everything else (Python and Hydra start-up,
the report).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from _common import add_common_args, REPO, Check, print_checks, print_header

LIMIT_S = 300.0
QUICK_ARGS = ["-m", "backend=sdpa", "seq_len=64,128", "budget.timing_s=0.02", "name=quick_smoke"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser, shape=False)
    parser.add_argument("--cwd", type=Path, help="folder to run in (default: a new temp folder)")
    parser.add_argument("--quick", action="store_true", help="a 2-point sweep instead of the default (a smoke run)")
    return parser.parse_args(argv)


def sum_column(results: pd.DataFrame, column: str) -> float:
    """The column's sum over rows that have it (an older CSV may lack the column: 0)."""
    return float(pd.to_numeric(results[column], errors="coerce").sum()) if column in results else 0.0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print_header("target 6: the default `python -m runners.sweep`, figures included")
    cwd = args.cwd or Path(tempfile.mkdtemp(prefix="selfattn-default-sweep-"))
    command = [sys.executable, "-m", "runners.sweep", *(QUICK_ARGS if args.quick else [])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    print(f"   running `python {' '.join(command[1:])}` in {cwd}", flush=True)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    wall_s = time.perf_counter() - start
    print(f"   exit status {done.returncode} after {wall_s:.1f} s")
    if done.returncode != 0:
        print("\n".join(done.stderr.strip().splitlines()[-5:]))
    csvs = sorted(cwd.glob("sweeps/*/*/results.csv"))
    figures = sorted(cwd.glob("sweeps/*/*/report/**/*.png"))
    rows, measure_s, job_s = 0, 0.0, 0.0
    if csvs:
        results = pd.read_csv(csvs[-1])
        rows = len(results)
        measure_s, job_s = sum_column(results, "measure_s"), sum_column(results, "job_wall_s")
        print(f"   {csvs[-1].parent}: {rows} rows, {len(figures)} figures")
    print(f"\n{'where the time went':<40} {'seconds':>8}")
    print(f"{'measured calls (sum of measure_s)':<40} {measure_s:>8.1f}")
    print(f"{'rest of the jobs (job_wall_s - measure_s)':<40} {job_s - measure_s:>8.1f}")
    print(f"{'start-up, report and the rest':<40} {wall_s - job_s:>8.1f}")
    ok = done.returncode == 0 and rows > 0 and bool(figures)
    checks = [Check("6", "default sweep wall time, figures included", wall_s if ok else None, LIMIT_S, unit="s",
                    note="" if ok else "the sweep failed or wrote no figures")]
    misses = print_checks(checks)
    return 1 if misses and args.strict else 0


if __name__ == "__main__":
    raise SystemExit(main())
