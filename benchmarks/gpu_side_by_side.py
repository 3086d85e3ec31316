"""naive, chunked, triton and sdpa side by side on a GPU: time, TFLOP/s and peak memory, fwd and fwd_bwd,
causal or not, n = 1024..16384; and the two promises the project's own back ends make there.

    python benchmarks/gpu_side_by_side.py                    # measure the grid here (needs CUDA; bf16, B1 H8 d64)
    python benchmarks/gpu_side_by_side.py --csv results.csv  # read rows already measured (a CSV or a sweep folder:
                                                             # scripts/gpu_check.sh's side_by_side stage)

The checks (failing ones make the exit status 1):
- chunked at least half of naive's TFLOP/s at every n >= 4096 both ran, per mode and mask (CHUNKED_SHARE);
- chunked's peak memory grows at most linearly: from one n to the next, peak(n2) / peak(n1) <= n2 / n1 times
  LINEAR_SLACK (its blocks are sized by a memory budget, not by n: selfattn/backends/chunked.py).
Printed beside them, not failing: naive's causal / plain time per n against NAIVE_CAUSAL_TARGET (its mask is made
once per point, so a causal call should cost little more than a plain one).
Rows that are not `ok` (naive's skipped_budget at the largest n) are shown with their status and are not compared.
Measured here, each point is one `selfattn.measure.measure_point` row, as a sweep makes it (the harness's CUDA
timer, peak memory from the allocator, FLOPs counted from the visible pairs, fwd_bwd as 3.5x forward).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

BACKENDS = ("naive", "chunked", "triton", "sdpa")
SIZES = (1024, 2048, 4096, 8192, 16384)
CHUNKED_SHARE = 0.5  # chunked's TFLOP/s at least this share of naive's from CHECK_FROM_N on
CHECK_FROM_N = 4096
LINEAR_SLACK = 1.15  # allowed above linear growth between two sizes (allocator rounding, O(1) buffers)
NAIVE_CAUSAL_TARGET = 1.2  # naive's causal call at most this times its plain one (its mask made once per point)


def side_by_side(rows) -> str:
    """The table: one line per (mode, causal, seq_len), a cell per back end: `time ms · TFLOP/s · peak MiB`."""
    import pandas as pd

    lines = [f"{'mode':8s} {'causal':6s} {'n':>6s}  " + "  ".join(f"{b:>28s}" for b in BACKENDS)]
    for (mode, causal, n), group in rows.groupby(["mode", "causal", "seq_len"], sort=True):
        cells = []
        for name in BACKENDS:
            found = group[group["backend"] == name]
            if found.empty:
                cells.append(f"{'-':>28s}")
                continue
            row = found.iloc[0]
            if row["status"] != "ok":
                cells.append(f"{row['status']:>28s}")
                continue
            peak = row.get("peak_mem_bytes")
            peak_text = f"{peak / 2**20:7.0f} MiB" if pd.notna(peak) else "      ? MiB"
            cells.append(f"{row['time_ms']:8.3f} ms {row['tflops']:6.1f} TF {peak_text}")
        lines.append(f"{mode:8s} {str(bool(causal)).lower():6s} {int(n):6d}  " + "  ".join(cells))
    return "\n".join(lines)


def naive_causal_ratios(rows) -> list[str]:
    """naive's causal / plain time per mode and n, beside NAIVE_CAUSAL_TARGET (printed, not a failure: the mask
    is made outside the call, so the rest is the add and the softmax over -inf entries)."""
    ok = rows[(rows["status"] == "ok") & (rows["backend"] == "naive")]
    lines = []
    for (mode, n), group in ok.groupby(["mode", "seq_len"], sort=True):
        times = dict(zip(group["causal"].astype(bool), group["time_ms"]))
        if True in times and False in times:
            ratio = times[True] / times[False]
            lines.append(f"naive causal / plain {mode} n={int(n)}: {ratio:.2f}x (target <= {NAIVE_CAUSAL_TARGET:g}x: "
                         f"{'PASS' if ratio <= NAIVE_CAUSAL_TARGET else 'MISS'})")
    return lines


def failures(rows) -> list[str]:
    """What breaks the two promises (module docstring), one line each."""
    found: list[str] = []
    ok = rows[rows["status"] == "ok"]
    for (mode, causal), group in ok.groupby(["mode", "causal"], sort=True):
        by_backend = {name: part.set_index("seq_len") for name, part in group.groupby("backend")}
        chunked, naive = by_backend.get("chunked"), by_backend.get("naive")
        where = f"{mode} causal={str(bool(causal)).lower()}"
        if chunked is None:
            continue
        if naive is not None:
            for n in sorted(set(chunked.index) & set(naive.index)):
                if n >= CHECK_FROM_N and chunked.at[n, "tflops"] < CHUNKED_SHARE * naive.at[n, "tflops"]:
                    found.append(f"{where} n={n}: chunked {chunked.at[n, 'tflops']:.1f} TFLOP/s < "
                                 f"{CHUNKED_SHARE:g} x naive's {naive.at[n, 'tflops']:.1f}")
        sizes = sorted(n for n in chunked.index if chunked.at[n, "peak_mem_bytes"] == chunked.at[n, "peak_mem_bytes"])
        for small, large in zip(sizes, sizes[1:]):
            grew = chunked.at[large, "peak_mem_bytes"] / max(1.0, chunked.at[small, "peak_mem_bytes"])
            if grew > LINEAR_SLACK * large / small:
                found.append(f"{where}: chunked's peak memory grew {grew:.2f}x from n={small} to n={large} "
                             f"(linear: {large / small:g}x)")
    return found


def report(rows, sizes=SIZES, checks: bool = True) -> int:
    """Print the table and the checks (unless `checks` is off); 1 when a check fails or no row of these back ends
    at `sizes` is there."""
    rows = rows[rows["backend"].isin(BACKENDS) & rows["seq_len"].isin(sizes)]
    if "scope" in rows:
        rows = rows[rows["scope"] == "core"]
    if rows.empty:
        print(f"side by side: no rows of naive, chunked, triton or sdpa at n = {', '.join(map(str, sizes))}")
        return 1
    print(side_by_side(rows))
    for line in naive_causal_ratios(rows):
        print(line)
    if not checks:
        return 0
    problems = failures(rows)
    for line in problems:
        print(f"FAIL {line}")
    if not problems:
        print(f"side by side: chunked >= {CHUNKED_SHARE:g} x naive's TFLOP/s from n = {CHECK_FROM_N} on, "
              f"and its memory grows at most linearly: ok")
    return 1 if problems else 0


def measure(args: argparse.Namespace):
    """The grid measured here, one harness row per point, as a DataFrame."""
    import dataclasses

    import pandas as pd

    from selfattn.measure import Budget, measure_point
    from selfattn.point import Point

    budget = Budget(timing_s=args.timing_s)
    rows = []
    for mode in ("fwd", "fwd_bwd"):
        for causal in (False, True):
            for n in args.sizes:
                for name in BACKENDS:
                    point = Point(backend=name, device="cuda", precision="bf16", batch=1, heads=args.heads,
                                  head_dim=args.head_dim, seq_len=n, causal=causal, mode=mode)
                    row = measure_point(point, budget)
                    rows.append(dataclasses.asdict(row))
                    print(f"  {name:8s} {mode:8s} causal={causal!s:5s} n={n:6d} {row.status}", file=sys.stderr)
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--csv", type=Path, help="read these rows (a results.csv, or a folder of them) instead of measuring")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="seq_len values to measure")
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--timing-s", type=float, default=0.2, help="seconds of timed calls per point")
    parser.add_argument("--print-only", action="store_true",
                        help="the table without the checks (a CPU's small sizes, where blocks still grow with n)")
    args = parser.parse_args(argv)
    if args.csv is not None:
        import pandas as pd

        # a folder: every results.csv under it (a sweep folder, as scripts/gpu_check.sh passes quadratic_cost's)
        paths = sorted(args.csv.rglob("results.csv")) if args.csv.is_dir() else [args.csv]
        paths = [p for p in paths if p.is_file()]
        if not paths:
            print(f"--csv: no results.csv at {args.csv}")
            return 1
        return report(pd.concat([pd.read_csv(p) for p in paths], ignore_index=True), args.sizes, not args.print_only)
    import torch

    if not torch.cuda.is_available():
        print("gpu_side_by_side: needs a CUDA GPU (a CPU runs triton only in its interpreter); "
              "pass --csv to read rows measured elsewhere")
        return 0
    return report(measure(args), args.sizes, not args.print_only)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    raise SystemExit(main())
