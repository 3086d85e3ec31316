"""The launch diagnostic's table: each row's call time beside its kernel time, clocks, power and % of peak.

    python scripts/launch_diagnostic.py RESULTS_CSV [--backend sdpa,triton] [--seq-len 1024,4096] [--precision bf16]

Reads a sweep's rows (scripts/gpu_check.sh: quadratic_cost's, merged into its results.csv), keeps those the options
name, and prints, per row:
the call's time (CUDA events around each Python call), the kernel's (its CUDA graph replayed:
selfattn/measure/kernel_time.py), their difference (the host's launch path), the share of the call the kernel is
(near 100%: kernel-bound; small: launch-bound), the SM clock and power over the timed window with any throttle
reason (NVML), and the achieved TFLOP/s as % of the spec sheet's dense peak (MFU) and of the peak measured today.
"""

from __future__ import annotations

import sys

import pandas as pd

COLUMNS = ["backend", "kernel", "precision", "seq_len", "call_time_ms", "kernel_time_ms", "launch_overhead_ms",
           "kernel_share_pct", "gpu_sm_clock_mhz", "gpu_power_w", "gpu_throttle", "tflops", "mfu_pct",
           "measured_peak_pct", "spec_gpu"]


def table(rows: pd.DataFrame) -> pd.DataFrame:
    rows = rows[rows["status"] == "ok"].copy()
    for column in COLUMNS:
        if column not in rows:
            rows[column] = float("nan") if column not in ("gpu_throttle", "spec_gpu", "kernel") else ""
    rows["kernel_share_pct"] = 100.0 * rows["kernel_time_ms"] / rows["call_time_ms"]
    rows["measured_peak_pct"] = 100.0 * rows["tflops"] / rows["device_peak_tflops"]
    return rows[COLUMNS].sort_values(["backend", "seq_len"]).reset_index(drop=True)


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", help="a results.csv")
    parser.add_argument("--backend", help="back ends to keep, comma-separated")
    parser.add_argument("--seq-len", help="sizes to keep, comma-separated")
    parser.add_argument("--precision", help="precisions to keep, comma-separated")
    args = parser.parse_args(argv)
    rows = pd.read_csv(args.results, keep_default_na=False, na_values=[""])
    if args.backend:
        rows = rows[rows["backend"].isin(args.backend.split(","))]
    if args.seq_len:
        rows = rows[rows["seq_len"].isin([int(n) for n in args.seq_len.split(",")])]
    if args.precision:
        rows = rows[rows["precision"].isin(args.precision.split(","))]
    if "kernel_time_ms" not in rows or rows.empty:
        print(f"{args.results}: no rows with a kernel_time_ms column here (not CUDA rows of this version)", file=sys.stderr)
        return 1
    with pd.option_context("display.width", 200, "display.max_columns", None, "display.float_format", "{:.4g}".format):
        print(table(rows).to_string(index=False))
    notes = rows.loc[rows["kernel_time_note"].fillna("") != "", ["backend", "seq_len", "kernel_time_note"]] \
        if "kernel_time_note" in rows else []
    for _, note in (notes.iterrows() if len(notes) else []):
        print(f"note: {note['backend']} n={note['seq_len']}: {note['kernel_time_note']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
