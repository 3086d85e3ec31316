"""Did a refactor keep the harness's behaviour? Compare two sweeps' results.csv point by point.

    python benchmarks/compare_rows.py BEFORE_DIR AFTER_DIR      # sweep folders or their results.csv
    python benchmarks/compare_rows.py A B --ignore note --rtol 1e-6

Run the same sweep before and after the change (the default one: `python -m runners.sweep`), then
compare. Points are matched by `point_id`. Printed: the points only one sweep has, the points whose
status differs, then for every column that is not a measurement of time or load, the points whose
value differs (on points that are in both), first-seen order, ten per column. Exit status 1 on any
difference, 0 when every compared value matches, 2 when an input cannot be read.

What is not compared, and why (`--ignore` adds columns, `--compare` puts one back):
- time: every column starting with `time` (time_ms and its percentiles, time_samples, timer,
  timestamp) and every duration in seconds (compile_s, block_mask_s, measure_s, point_wall_s,
  job_wall_s, tokens_per_s); the rates derived from a time (tflops, gbps) and the guard's
  predicted_time_ms, which uses the matmul peak measured that day (device_peak_tflops,
  device_peak_gbps);
- load: what the timing saw of the machine (other_cpu_frac, noisy, noise; time_spread and time_samples_ms
  start with `time`);
- peak_mem_bytes: the process's RSS growth on a CPU, which depends on what the allocator already
  holds; peak_alloc_bytes (bytes through torch's allocator) is exact and is compared;
- note: it may quote a TFLOP/s above the measured peak, a timing fact;
- error of skipped_budget rows: the guard's reason quotes the predicted time (from the measured
  peak); the status itself is compared, so a point the guard skipped in only one run shows there;
- provenance: git_sha, hostname and sweep_id (the sweep folder's name) differ by design;
- a metric's columns (selfattn/metrics.py) on a point where one of the two rows did not measure that
  metric (its `metrics` column; a row without one measured all): an empty cell there is "not asked
  for", not a changed number. These cells are counted and printed per metric; the `metrics` column
  itself is compared, so a point measured with other metrics shows there;
- the peaks' source columns (device_peak_*_source): measured or read from the probe cache.
Everything else must match exactly as written (the same code writes both files), or within
`--rtol` for numbers. Stdlib only: no torch, no pandas.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path
from typing import Sequence

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `python benchmarks/x.py` puts benchmarks/, not the repo, on the path
    sys.path.insert(0, str(REPO))

from selfattn.metrics import metric_of, ran_metrics  # noqa: E402  (pure Python: which columns each metric fills)
from selfattn.point import AXES  # noqa: E402  (pure Python: the sweep axes, which name a point)
from selfattn.results import rank  # noqa: E402  (which of two rows of one point wins)

MEASURED = frozenset({
    "compile_s", "block_mask_s", "measure_s", "point_wall_s", "job_wall_s", "tokens_per_s",
    "tflops", "gbps", "predicted_time_ms", "device_peak_tflops", "device_peak_gbps",
    "peak_mem_bytes", "note", "device_peak_tflops_source", "device_peak_gbps_source",
    "other_cpu_frac", "noisy", "noise",
})
PROVENANCE = frozenset({"git_sha", "hostname", "sweep_id"})
SHOWN = 10  # differing points printed per column


def ignored(column: str) -> bool:
    return column.startswith("time") or column in MEASURED or column in PROVENANCE


def load(path: Path) -> tuple[Path, list[str], dict[str, dict[str, str]]]:
    """(the CSV, its columns, point_id -> row); two rows of one point: the one results.csv would keep."""
    path = path / "results.csv" if path.is_dir() else path
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        columns = list(reader.fieldnames or [])
        if "point_id" not in columns:
            raise ValueError(f"{path}: no point_id column")
        points: dict[str, dict[str, str]] = {}
        for row in reader:
            old = points.get(row["point_id"])
            if old is None or rank(row) > rank(old):
                points[row["point_id"]] = row
    return path, columns, points


def same(a: str, b: str, rtol: float) -> bool:
    if a == b:
        return True
    if rtol <= 0:
        return False
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    return (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=rtol, abs_tol=0.0)


def describe(row: dict[str, str], axes: Sequence[str]) -> str:
    """`<point_id> backend=... seq_len=...` with the axes that vary in the sweeps."""
    return " ".join([row.get("point_id", "?"), *(f"{axis}={row.get(axis, '')}" for axis in axes)])


def metric_off(column: str, a: dict[str, str], b: dict[str, str]) -> str | None:
    """The metric filling `column` when one of the two rows did not measure it, else None."""
    metric = metric_of(column)
    if metric is None:
        return None
    both = ran_metrics(a.get("metrics")) & ran_metrics(b.get("metrics"))
    return None if metric in both else metric


def compare(before: dict[str, dict[str, str]], after: dict[str, dict[str, str]], columns: list[str],
            rtol: float, off: dict[str, int] | None = None) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """[(what, [(point_id, before, after), ...]), ...]: the points only in one, status, then each of `columns`.

    `off` (when given) counts, per metric, the cells left out because one of the rows did not measure it."""
    both = [pid for pid in before if pid in after]
    found: list[tuple[str, list[tuple[str, str, str]]]] = [
        ("only in before", [(pid, "present", "missing") for pid in before if pid not in after]),
        ("only in after", [(pid, "missing", "present") for pid in after if pid not in before]),
        ("status", [(pid, before[pid]["status"], after[pid]["status"]) for pid in both
                    if before[pid]["status"] != after[pid]["status"]]),
    ]
    for column in columns:
        differ = []
        for pid in both:
            a, b = before[pid].get(column), after[pid].get(column)
            if column == "error" and "skipped_budget" in (before[pid]["status"], after[pid]["status"]):
                continue  # the guard's reason quotes a predicted time; the status is compared above
            metric = metric_off(column, before[pid], after[pid])
            if metric is not None:
                if off is not None:
                    off[metric] = off.get(metric, 0) + 1
                continue
            if a is None or b is None or not same(a, b, rtol):
                differ.append((pid, "(no column)" if a is None else a, "(no column)" if b is None else b))
        found.append((column, differ))
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/compare_rows.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path, help="the sweep folder (or results.csv) before the change")
    parser.add_argument("after", type=Path, help="the sweep folder (or results.csv) after it")
    parser.add_argument("--ignore", nargs="*", default=[], metavar="COLUMN", help="columns not to compare as well")
    parser.add_argument("--compare", nargs="*", default=[], metavar="COLUMN",
                        help="measured columns to compare anyway (e.g. peak_mem_bytes)")
    parser.add_argument("--rtol", type=float, default=0.0, help="relative tolerance for numbers (default: exact)")
    args = parser.parse_args(argv)
    try:
        (before_path, before_columns, before), (after_path, after_columns, after) = load(args.before), load(args.after)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    columns = list(dict.fromkeys([*before_columns, *after_columns]))
    skip = set(args.ignore)
    checked = [c for c in columns if c not in ("point_id", "status", *skip) and (c in args.compare or not ignored(c))]
    off: dict[str, int] = {}
    found = compare(before, after, checked, args.rtol, off)
    rows = {**after, **before}
    axes = [a for a in AXES if len({r.get(a) for r in rows.values()}) > 1]  # the axes that tell points apart
    print(f"before: {before_path} ({len(before)} points)\nafter:  {after_path} ({len(after)} points)")
    for side, own, other in (("before", before_columns, after_columns), ("after", after_columns, before_columns)):
        extra = [c for c in own if c not in other and c not in skip]
        if extra:
            print(f"columns only {side}: {', '.join(extra)}")
    differences = sum(len(d) for _, d in found)
    for what, differ in found:
        if not differ:
            continue
        print(f"\n{what}: {len(differ)} point{'s' if len(differ) != 1 else ''}")
        for pid, a, b in differ[:SHOWN]:
            print(f"  {describe(rows[pid], axes)}: {a!r} -> {b!r}" if what not in ("only in before", "only in after")
                  else f"  {describe(rows[pid], axes)}")
        if len(differ) > SHOWN:
            print(f"  ... and {len(differ) - SHOWN} more")
    shared = sum(1 for pid in before if pid in after)
    not_compared = [c for c in columns if c not in ("point_id", "status", *checked)]
    if off:
        print("not compared where one row did not measure the metric (cells): "
              + ", ".join(f"{metric} {count}" for metric, count in sorted(off.items())))
    if differences:
        print(f"\nresult: {differences} difference(s) over {shared} shared points")
    else:
        print(f"\nresult: the {shared} points match on status and {len(checked)} columns")
    print(f"not compared (measurements, provenance, --ignore): {', '.join(not_compared)}")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
