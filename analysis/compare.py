"""Devices compared: each device's speed relative to a baseline device on the same points (the report's study).

Run as a command, `python -m analysis.compare A B` (`main`) is the A/B comparison: two sweeps or one sweep's two
back ends, each measured once (analysis/ab.py: a rank test of the rows' own samples), or the interleaved rounds of
`python -m runners.ab` (analysis/rounds.py: the rounds' variation), point by point.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from analysis.cost import variant_labels
from analysis.repro import repro_command
from analysis.slices import self_attention
from selfattn.point import FIELD_NAMES

# A point measured on two devices matches on every sweep axis (the device itself aside).
MATCH_KEY = tuple(name for name in FIELD_NAMES if name != "device")


def pick_baseline(rows: pd.DataFrame, wanted: str | None) -> tuple[str, str | None]:
    """The baseline device label, and a one-line note when `wanted` matched nothing.

    `wanted` matches a device label or name exactly or as a case-insensitive substring;
    by default the device with the most ok rows is the baseline.
    """
    ok = rows[rows["status"] == "ok"]
    counts = ok.groupby("device_label").size().sort_index()
    default = str(counts.sort_values(ascending=False, kind="stable").index[0])
    if not wanted:
        return default, None
    for column in ("device_label", "device_name"):
        exact = ok[ok[column] == wanted]["device_label"].unique()
        if len(exact):
            return str(exact[0]), None
    loose = ok[ok["device_label"].str.contains(wanted, case=False, regex=False)
               | ok["device_name"].str.contains(wanted, case=False, regex=False)]["device_label"].unique()
    if len(loose):
        return str(sorted(loose)[0]), None
    return default, (f"baseline_device: {wanted!r} matches none of {', '.join(counts.index)}; "
                     f"using {default!r} (most rows)")


def device_speedups(rows: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """One row per (device, point) measured on both it and the baseline: speedup = t_baseline / t_device."""
    ok = self_attention(rows)
    ok = ok[(ok["status"] == "ok") & (ok["time_ms"] > 0)]
    ok = ok.assign(label=variant_labels(ok))
    key = list(MATCH_KEY)
    # The kernel column says which SDPA kernel `auto` picked on each device ("auto:flash"): two GPUs'
    # "sdpa" may compare different kernels, and the table says so.
    # each point's command to measure it again (analysis/repro.py), for the points the report's table names
    ok = ok.assign(repro=[repro_command(row) for row in ok.to_dict("records")])
    med = ok.groupby(key + ["device_label", "label"], dropna=False).agg(
        time_ms=("time_ms", "median"), kernel=("kernel", lambda s: "/".join(sorted(set(map(str, s))))),
        repro=("repro", "first")).reset_index()
    base = med[med["device_label"] == baseline].drop(columns=["device_label", "label"])
    base = base.rename(columns={"time_ms": "baseline_time_ms", "kernel": "baseline_kernel", "repro": "baseline_repro"})
    others = med[med["device_label"] != baseline]
    merged = others.merge(base, on=key, how="inner")
    merged["speedup"] = merged["baseline_time_ms"] / merged["time_ms"]
    return merged


def speedup_table(speedups: pd.DataFrame) -> pd.DataFrame:
    """Per device and back end: matched points, geometric-mean, min and max speed-up, and at the largest n."""
    out = []
    for (device, label), group in speedups.groupby(["device_label", "label"], sort=True):
        largest = group[group["seq_len"] == group["seq_len"].max()]
        kernels = "/".join(sorted(set("/".join(group["kernel"]).split("/"))))
        baseline_kernels = "/".join(sorted(set("/".join(group["baseline_kernel"]).split("/"))))
        out.append({"device": device, "backend": label, "kernel": kernels, "baseline_kernel": baseline_kernels,
                    "points": len(group),
                    "geomean_speedup": float(np.exp(np.log(group["speedup"]).mean())),
                    "min_speedup": float(group["speedup"].min()), "max_speedup": float(group["speedup"].max()),
                    "largest_n": int(group["seq_len"].max()),
                    "speedup_at_largest_n": float(np.exp(np.log(largest["speedup"]).mean())),
                    "repro_at_largest_n": str(largest["repro"].iloc[0]) if "repro" in largest else "",
                    "baseline_repro_at_largest_n": str(largest["baseline_repro"].iloc[0]) if "baseline_repro" in largest else ""})
    return pd.DataFrame(out, columns=["device", "backend", "kernel", "baseline_kernel", "points", "geomean_speedup",
                                      "min_speedup", "max_speedup", "largest_n", "speedup_at_largest_n",
                                      "repro_at_largest_n", "baseline_repro_at_largest_n"])


def main(argv: Sequence[str] | None = None) -> int:
    from analysis import ab, rounds  # here: the report imports this module for its device study alone

    parser = argparse.ArgumentParser(
        prog="python -m analysis.compare",
        description="Compare two sweeps (A B: two commits, machines or torch versions), one sweep's two back ends "
                    "(A --backends X Y), or the rounds of `python -m runners.ab` (one folder), point by point: ratio "
                    "B/A of median times with a 95%% interval, a verdict (faster/slower/same, not significant, noisy, "
                    "too few samples) and the accuracy.",
        epilog=f"Rule for rows measured once per side: slower when p < {ab.ALPHA} and B/A >= R, faster when p < {ab.ALPHA} "
               f"and B/A <= 1/R (R = {ab.MIN_RATIO} on CUDA, {ab.CPU_MIN_RATIO} on a CPU), same within that ratio, else not "
               "significant; a pair with a noisy row is `noisy`, never decided. Rounds: "
               f"{rounds.RULE}. docs/usage.md#comparing")
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="A and B (sweep folders or results.csv files), one with --backends, or one folder of "
                             "`python -m runners.ab`")
    parser.add_argument("--backends", nargs=2, metavar=("A", "B"), help="compare these two back ends of one sweep")
    parser.add_argument("--out", default="comparison", metavar="DIR", help="where comparison.csv and comparison.png go")
    parser.add_argument("--fail-on", default="", metavar="WHAT",
                        help=f"exit 1 when any point is this (comma separated: {', '.join(ab.FAIL_ON)})")
    args = parser.parse_args(argv)
    try:
        fail_on = ab.fail_on_words(args.fail_on)
    except ValueError as exc:
        parser.error(str(exc))
    by_rounds = len(args.paths) == 1 and not args.backends and rounds.is_rounds_folder(args.paths[0])
    want = 1 if args.backends or by_rounds else 2
    if len(args.paths) != want:
        parser.error(f"PATH: expected {want} path{'s' if want > 1 else ''}{' with --backends' if args.backends else ''}, "
                     f"got {len(args.paths)}" + ("" if args.backends else
                                                 f" (or one folder of `python -m runners.ab`, holding {rounds.MANIFEST})"))
    try:
        if by_rounds:
            cmp = rounds.compare_rounds(args.paths[0])
        else:
            cmp = ab.compare_backends(args.paths[0], *args.backends) if args.backends else ab.compare_sweeps(*args.paths)
    except ValueError as exc:
        print(f"compare: {exc}", file=sys.stderr)
        return 2
    return ab.finish(cmp, Path(args.out), fail_on)


if __name__ == "__main__":
    sys.exit(main())
