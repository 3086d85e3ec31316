"""What isolation costs: a plugin point in the worker (isolate=plugins) against the same point in the sweep's
process (isolate=false), paired, in one run.

    python benchmarks/isolation_cost.py                 # 15 pairs at the smoke size and at seq_len=1024
    python benchmarks/isolation_cost.py --pairs 3       # does it run

Each pair measures one point twice through `runners.job.measure` (what a sweep's job calls), in an
alternating order, and takes the difference of the two wall times seen by the sweep's process: the round
trip of the point (its request as JSON, rebuilt through the field checks there; its row and the prediction
back as checked JSON), the look at the worker's
process tree, the state kept and put back, the worker's own prediction of the point
(the limit derives from it), and whatever the second process costs the first (two torch thread pools on
the same cores). The worker's start (Python, torch, the harness) is paid once per sweep process, or again
after a crash; it is timed apart. The share outside measure_point (the sweep's wall time minus the
worker's own measure_point time, per point) is printed too: it does not swing with the point's own noise. The plugin is examples/selfattn-fp32acc's (by path), the metrics every
metric, the budget the smoke experiment's. The machine is shared: the load average is printed beside them.
Printed first: what a sweep pays once per plugin to learn its options without importing it (a child process,
selfattn/backends/description.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PLUGIN_DIR = REPO / "examples" / "selfattn-fp32acc"
for folder in (str(REPO), str(PLUGIN_DIR)):
    if folder not in sys.path:
        sys.path.insert(0, folder)
os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), str(PLUGIN_DIR), os.environ.get("PYTHONPATH", "")])

from runners import isolate, job  # noqa: E402
from runners.config import parse_job  # noqa: E402
from selfattn.backends import description  # noqa: E402

BUDGET = {"timing_s": 0.01, "accuracy_rows": 4, "measure_device_peak": False}  # experiment=smoke's
SIZES = {"smoke": dict(seq_len=64, heads=1, head_dim=8), "n1024": dict(seq_len=1024, heads=8, head_dim=64)}


def parsed(mode: bool | str, size: dict, seed: int):
    cfg = {"backend": "selfattn_fp32acc:fp32acc", "precision": "fp32", "device": "cpu", "seed": seed,
           "budget": BUDGET, "isolate": mode, **size}
    job_ = parse_job(cfg)
    assert not job_.problem, job_.problem
    return job_


def wall_s(mode: bool | str, size: dict, seed: int) -> float:
    started = time.perf_counter()
    row = job.measure(parsed(mode, size, seed))
    took = time.perf_counter() - started
    assert row.status == "ok", (row.status, row.error)
    return took


def round_trip_s(size: dict, seed: int) -> float:
    """The sweep's wall time of an isolated point minus measure_point's own inside the worker: the pipe's
    round trips, the JSON and its checks and the worker's prediction, free of the point's own noise."""
    job_ = parsed("plugins", size, seed)
    started = time.perf_counter()
    outcome = isolate.run_isolated(job_.point, job_.budget, job_.runner["metrics"])
    took = time.perf_counter() - started
    assert outcome.row is not None and outcome.row.status == "ok", outcome
    return took - outcome.row.point_wall_s


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--pairs", type=int, default=15)
    opts = args.parse_args(argv)
    one, five, fifteen = os.getloadavg()
    print(f"isolation cost: {opts.pairs} pairs per size; load {one:.1f}/{five:.1f}/{fifteen:.1f} on "
          f"{os.cpu_count()} cores")
    started = time.perf_counter()
    told = description.describe("selfattn_fp32acc:fp32acc", 120.0)
    assert told.options is not None, told
    print(f"the plugin's options described by a child process: {time.perf_counter() - started:.2f} s "
          "(once per plugin per sweep process)")
    started = time.perf_counter()
    wall_s("plugins", SIZES["smoke"], 0)  # starts the worker, imports the plugin in both processes
    print(f"worker start + first point: {time.perf_counter() - started:.2f} s (once per sweep process)")
    wall_s(False, SIZES["smoke"], 0)
    for name, size in SIZES.items():
        inside, outside = [], []
        for i in range(opts.pairs):
            order = ("plugins", False) if i % 2 == 0 else (False, "plugins")
            for mode in order:
                (inside if mode == "plugins" else outside).append(wall_s(mode, size, i + 1))
        diffs = [a - b for a, b in zip(inside, outside)]
        print(f"{name:6s} in-process {statistics.median(outside) * 1e3:7.1f} ms/point, isolated "
              f"{statistics.median(inside) * 1e3:7.1f} ms/point: isolation costs "
              f"{statistics.median(diffs) * 1e3:+.1f} ms/point (median of {len(diffs)} paired differences; "
              f"p20 {sorted(diffs)[len(diffs) // 5] * 1e3:+.1f}, p80 {sorted(diffs)[(4 * len(diffs)) // 5] * 1e3:+.1f})")
        trips = sorted(round_trip_s(size, 100 + i) for i in range(opts.pairs))
        print(f"{name:6s} of which outside measure_point (pipes, checked JSON, the worker's prediction, its process tree): "
              f"median {statistics.median(trips) * 1e3:.1f} ms, max {trips[-1] * 1e3:.1f} ms")
    isolate.stop_worker()
    return 0


if __name__ == "__main__":
    sys.exit(main())
