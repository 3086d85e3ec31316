"""The report's time budget (issue 57): `python -m analysis.report` timed as a user runs it, imports included.

    python benchmarks/report_speed.py                          # target 1 on the committed 24-row sweep
    python benchmarks/report_speed.py --rows DIR/results.csv   # target 2 too: a default sweep's report step
    python benchmarks/report_speed.py --rows DIR/results.csv --baseline-checkout /tmp/selfattn-OLD
                                                               # and another checkout's report, taking turns

Each report is a fresh subprocess (`python -m analysis.report ROWS --out TMP`, PNG figures: what a finished
sweep writes), so its wall time includes Python's start and every import; the median of --repeats runs is
judged. Its CPU seconds (user + system) are printed beside: the report draws its figures one after the other in
its own process (seaborn), so on a machine whose cores other work keeps busy the wall time follows the CPU
seconds and the machine's load, which the last line prints.

1. A 24-row sweep's report (benchmarks/data/report_24_rows.csv: real rows of
   `python -m runners.sweep -m backend=naive,sdpa,chunked seq_len=64,128,256,512 causal=true,false`, which
   draws 5 figures): at most 10 s wall on the project's 2-core machine.
2. The default sweep's report step (the rows of `python -m runners.sweep -m experiment=quick`, 219 points, 10
   figures): at most 20 s wall there.
With --baseline-checkout, that checkout's report of the same rows takes turns with this one's (no target: a
paired ratio, since a burst of load hits both sides alike).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, Check, add_common_args, load_text, print_checks, print_header

FIXTURE = REPO / "benchmarks" / "data" / "report_24_rows.csv"
SMALL_TARGET_S = 10.0
DEFAULT_SWEEP_TARGET_S = 20.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser, shape=False)
    parser.add_argument("--repeats", type=int, default=5, help="reports per figure (median judged); default 5")
    parser.add_argument("--rows", type=Path, help="a default sweep's results.csv: judge its report step (target 2)")
    parser.add_argument("--baseline-checkout", type=Path,
                        help="another checkout: time its report of the same rows in this run, taking turns")
    parser.add_argument("--pdf", action="store_true", help="also time the 24-row report with --pdf (no target)")
    return parser.parse_args(argv)


def children_cpu_s() -> float:
    """CPU seconds (user + system) of every waited-for child process so far, their own children included."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def report_s(checkout: Path, rows: Path, *extra: str, cpu: list[float] | None = None) -> float:
    """Wall seconds of one `python -m analysis.report` of `rows` in a fresh process run from `checkout`; its CPU
    seconds (its children's included) are appended to `cpu`."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    with tempfile.TemporaryDirectory(prefix="report-speed-") as out:
        cpu_before, start = children_cpu_s(), time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "analysis.report", str(rows), "--out", out, *extra],
                              cwd=checkout, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if cpu is not None:
            cpu.append(children_cpu_s() - cpu_before)
    if done.returncode != 0:
        sys.exit(f"report of {rows} from {checkout} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return wall


def fmt_s(values: list[float]) -> str:
    return "/".join(f"{v:.1f}" for v in values)


def cpu_text(cpu: list[float]) -> str:
    return f"CPU {fmt_s(cpu)} s (median {statistics.median(cpu):.1f})"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print_header("report speed: python -m analysis.report, a fresh process each, imports included")
    checks = []

    small, small_then, small_cpu, small_then_cpu = [], [], [], []
    for _ in range(args.repeats):  # with a baseline checkout, its report of the same rows takes turns (no target)
        small.append(report_s(REPO, FIXTURE, cpu=small_cpu))
        if args.baseline_checkout:
            small_then.append(report_s(args.baseline_checkout.resolve(), FIXTURE, "--formats", "png",
                                       cpu=small_then_cpu))
    print(f"24-row report (PNG): {fmt_s(small)} s, median {statistics.median(small):.2f} s; {cpu_text(small_cpu)}")
    if small_then:
        print(f"  the same at {args.baseline_checkout} (--formats png): {fmt_s(small_then)} s, median "
              f"{statistics.median(small_then):.2f} s; paired ratio "
              f"{statistics.median(n / t for n, t in zip(small, small_then)):.2f}x; {cpu_text(small_then_cpu)}")
    checks.append(Check("1", "24-row report, wall incl. imports", statistics.median(small), SMALL_TARGET_S, "s",
                        note=load_text()))
    if args.pdf:
        pdf = [report_s(REPO, FIXTURE, "--pdf") for _ in range(args.repeats)]
        print(f"24-row report with --pdf: {fmt_s(pdf)} s, median {statistics.median(pdf):.2f} s (no target)")

    if args.rows:
        rows = args.rows.resolve()
        if args.baseline_checkout:
            base = args.baseline_checkout.resolve()
            pairs, cpu = [], {REPO: [], base: []}
            for i in range(args.repeats):  # the order alternates: neither side always runs second
                first, second = (REPO, base) if i % 2 == 0 else (base, REPO)
                times = {first: report_s(first, rows, "--formats", "png", cpu=cpu[first]),
                         second: report_s(second, rows, "--formats", "png", cpu=cpu[second])}
                pairs.append((times[REPO], times[base]))
            now = [p[0] for p in pairs]
            then = [p[1] for p in pairs]
            ratio = statistics.median(n / t for n, t in pairs)
            print(f"default sweep's report step: {fmt_s(now)} s here, {fmt_s(then)} s at {base} "
                  f"(median {statistics.median(now):.1f} vs {statistics.median(then):.1f} s; paired ratio {ratio:.2f}x)")
            print(f"  {cpu_text(cpu[REPO])} here, {cpu_text(cpu[base])} at {base}")
        else:
            now_cpu: list[float] = []
            now = [report_s(REPO, rows, cpu=now_cpu) for _ in range(args.repeats)]
            print(f"default sweep's report step: {fmt_s(now)} s, median {statistics.median(now):.1f} s "
                  f"({cpu_text(now_cpu)})")
        checks.append(Check("2", "default sweep's report step, wall incl. imports", statistics.median(now),
                            DEFAULT_SWEEP_TARGET_S, "s", note=load_text()))

    print(f"at the end: {load_text()}")
    misses = print_checks(checks)
    return 1 if (misses and args.strict) else 0


if __name__ == "__main__":
    sys.exit(main())
