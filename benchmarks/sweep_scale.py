"""A job's bookkeeping and the final results.csv build, in sweep folders of 1K to 100K rows.

    python benchmarks/sweep_scale.py                    # 30, 1K, 10K, 100K rows (about 10 min, 2 GB of disk)
    python benchmarks/sweep_scale.py --sizes 1000 5000  # other sizes
    python benchmarks/sweep_scale.py --tiny             # 20 and 300 rows: does it run

For each size, a temporary sweep folder gets that many synthetic row files (<job>/row.json,
full rows of the results schema, as a finished sweep leaves them; written plainly, then the
point index made from them by `rows.ensure_index`, as the sweep callback does when it
starts on such a folder). Then:
  bookkeeping  = one job's resume check of a new point (`row_store.point_status`) plus recording
                 its row (`rows.record_row`: row file, index entry, and results.csv while the
                 folder is below rows.LIVE_MAX_ROWS): each in a fresh Python process (a SLURM
                 array job) and one after another in this process (the basic launcher)
  resume hit   = `row_store.point_status` of a point that is already there
  final build  = `rows.rebuild_csv` of the whole folder in a fresh process (the sweep's end,
                 or `python -m runners.rows DIR` on a killed sweep's folder)
The files are in the page cache (just written): a cold network file system adds its latency.
Targets: bookkeeping <= 50 ms and flat (largest folder / smallest folder without the live CSV
<= 1.5x); the final build of the largest folder well under a minute.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, Check, print_checks, print_header

from runners import row_store, rows
from selfattn.results import Row

# One job in a fresh process: import, then the bookkeeping run_job does, timed from inside.
JOB = """
import json, sys, time
from pathlib import Path
start = time.perf_counter()
from runners import row_store, rows
imported = time.perf_counter()
sweep, num, row, old_id = Path(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
t0 = time.perf_counter()
assert row_store.point_status(sweep, row["point_id"]) is None
rows.record_row(sweep, sweep / str(num), row)
t1 = time.perf_counter()
assert row_store.point_status(sweep, old_id) == "ok"
t2 = time.perf_counter()
print(json.dumps({"import_s": imported - start, "bookkeeping_s": t1 - t0, "hit_s": t2 - t1}))
"""
BUILD = """
import json, sys, time
from pathlib import Path
from runners import rows
start = time.perf_counter()
path, kept = rows.rebuild_csv(Path(sys.argv[1]))
print(json.dumps({"build_s": time.perf_counter() - start, "rows": len(kept), "bytes": path.stat().st_size}))
"""
INDEX = """
import json, sys, time
from pathlib import Path
from runners import rows
start = time.perf_counter()
rows.ensure_index(Path(sys.argv[1]))
print(json.dumps({"index_s": time.perf_counter() - start}))
"""


def synthetic_row(i: int) -> dict:
    """A full row as a real job writes it: every schema column, a point id, a time stamp."""
    n = 128 << (i % 6)
    row = Row(status="ok", backend=("naive", "sdpa", "chunked")[i % 3], kernel="math", backend_options="{}",
              precision="fp32", device="cuda", device_name="NVIDIA H200", mode="fwd", scope="core", batch=1,
              heads=8, q_len=n, seq_len=n, head_dim=64, d_model=512, causal=bool(i % 2), scale="auto",
              scale_value=0.125, input_std=1.0, seed=i // 97, time_ms=0.01 * n, time_ms_p20=0.0099 * n,
              time_ms_p80=0.0101 * n, time_samples=50, peak_mem_bytes=4 * n * n, predicted_mem_bytes=4 * n * n,
              flops=4.0 * n * n * 64, tflops=1.5, accuracy_rows=64, max_abs_err=3e-7, rel_rms_err=1e-7,
              nonfinite_frac=0.0, point_id=f"{i:016x}", sweep_id="scale/bench",
              timestamp=f"2026-12-01T00:{i // 60 % 60:02d}:{i % 60:02d}+00:00").to_dict()
    row.update(jobs_sharing_device=1, point_wall_s=0.5, job_wall_s=0.7)
    return row


def fill(sweep: Path, size: int) -> None:
    """`size` job folders with a row file each, written plainly (a real sweep wrote them over days)."""
    sweep.mkdir(parents=True)
    (sweep / "sweep.json").write_text(json.dumps({"total": size}))
    for i in range(size):
        (sweep / str(i)).mkdir()
        (sweep / str(i) / "row.json").write_text(json.dumps(synthetic_row(i), indent=1))


def python(code: str, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"subprocess failed: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(size: int, jobs: int, root: Path) -> dict:
    sweep = root / f"rows-{size}"
    start = time.perf_counter()
    fill(sweep, size)
    fill_s = time.perf_counter() - start
    index_s = python(INDEX, str(sweep))["index_s"]
    old_id = synthetic_row(size // 2)["point_id"]
    fresh, imports, hits, here = [], [], [], []
    for j in range(jobs):  # new points, jobs numbered after the folder's: a sweep going on
        row = {**synthetic_row(size + j), "point_id": f"new-{j:04d}"}
        out = python(JOB, str(sweep), str(size + j), json.dumps(row), old_id)
        fresh.append(out["bookkeeping_s"] * 1e3)
        imports.append(out["import_s"] * 1e3)
        hits.append(out["hit_s"] * 1e3)
    for j in range(jobs):
        row = {**synthetic_row(size + jobs + j), "point_id": f"here-{j:04d}"}
        t0 = time.perf_counter()
        assert row_store.point_status(sweep, row["point_id"]) is None
        rows.record_row(sweep, sweep / str(size + jobs + j), row)
        here.append((time.perf_counter() - t0) * 1e3)
    built = python(BUILD, str(sweep))
    assert built["rows"] == size + 2 * jobs, built
    shutil.rmtree(sweep)
    return {"size": size, "live": size < rows.LIVE_MAX_ROWS, "fill_s": fill_s, "index_s": index_s,
            "fresh_ms": statistics.median(fresh), "fresh_max_ms": max(fresh), "import_ms": statistics.median(imports),
            "here_ms": statistics.median(here), "hit_ms": statistics.median(hits), "build_s": built["build_s"],
            "csv_mb": built["bytes"] / 2**20}


def print_table(results: list[dict]) -> None:
    print(f"\n{'rows in folder':>14} {'results.csv after each job':>27} {'bookkeeping, fresh process':>27} "
          f"{'in one process':>15} {'resume hit':>11} {'final build':>12} {'first open (index + csv)':>25}")
    for r in results:
        live = f"yes (< {rows.LIVE_MAX_ROWS} rows)" if r["live"] else "no (built at the end)"
        print(f"{r['size']:>14,} {live:>27} {r['fresh_ms']:>11.1f} ms (max {r['fresh_max_ms']:5.1f}) "
              f"{r['here_ms']:>12.1f} ms {r['hit_ms']:>8.2f} ms {r['build_s']:>10.2f} s {r['index_s']:>23.1f} s")
    print(f"(a fresh job also imports runners.rows: {statistics.median(r['import_ms'] for r in results):.0f} ms; "
          f"results.csv of the largest folder: {results[-1]['csv_mb']:.0f} MiB)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[30, 1000, 10_000, 100_000], help="rows in the folder")
    parser.add_argument("--jobs", type=int, default=7, help="jobs timed per size (fresh processes and in this one)")
    parser.add_argument("--dir", type=Path, default=None, help="where the folders go (default: a temp folder)")
    parser.add_argument("--tiny", action="store_true", help="20 and 300 rows, 3 jobs: does it run")
    parser.add_argument("--strict", action="store_true", help="exit with status 1 when a target is missed")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes, jobs = ([20, 300], 3) if args.tiny else (sorted(args.sizes), args.jobs)
    print_header("sweep bookkeeping and results.csv build vs rows in the folder")
    root = Path(tempfile.mkdtemp(prefix="selfattn-scale-", dir=args.dir))
    try:
        results = []
        for size in sizes:
            results.append(measure(size, jobs, root))
            r = results[-1]
            print(f"   {size:,} rows: filled in {r['fill_s']:.1f} s, bookkeeping {r['fresh_ms']:.1f} ms, "
                  f"final build {r['build_s']:.2f} s", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print_table(results)
    scaled = [r for r in results if not r["live"]] or results
    small, large = scaled[0], scaled[-1]
    worst = max(results, key=lambda r: r["fresh_ms"])
    checks = [
        Check("1", f"bookkeeping per job, fresh process, worst size ({worst['size']:,} rows)", worst["fresh_ms"], 50, "ms"),
        Check("1", f"bookkeeping {large['size']:,} rows / {small['size']:,} rows (fresh process)",
              large["fresh_ms"] / small["fresh_ms"], 1.5),
        Check("4", f"final build of results.csv, {results[-1]['size']:,} rows", results[-1]["build_s"], 60, "s"),
    ]
    misses = print_checks(checks)
    return 1 if args.strict and misses else 0


if __name__ == "__main__":
    sys.exit(main())
