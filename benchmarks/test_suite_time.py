"""The test suite's wall time: `python -m pytest -q` of a checkout, in a fresh process, and its slowest tests.

    python benchmarks/test_suite_time.py                                  # this checkout: ~15 min on 2 cores
    python benchmarks/test_suite_time.py --baseline-checkout /tmp/base    # and another one, taking turns
    python benchmarks/test_suite_time.py --pytest-args tests/runners -k sweep   # a part of the suite

Each checkout runs with its own root first on PYTHONPATH (its packages win over an installed copy) and
its own folder as the working directory, exactly as `python -m pytest -q` with `--durations` added (and
pytest's cache plug-in off, so neither run leaves or reads a last-failed list). The wall time is taken
around the whole process: Python start-up, imports and collection included.

With a baseline the runs take turns (baseline, this, this, baseline, ...) so a burst of load hits
both sides alike, and the figure is the median over repeats of the ratio within each repeat. Target 8
(docs/performance.md): this checkout's suite takes at most two thirds of the baseline's wall time
(the baseline is commit 43fa9b9, the suite before its repeated work was cut).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from _common import REPO, Check, paired_ratio, print_checks, print_header

SUMMARY = re.compile(r"^=*\s*(?P<counts>\d+ \w+.*?) in (?P<seconds>[\d.]+)s", re.MULTILINE)
DURATION = re.compile(r"^(?P<seconds>[\d.]+)s (?P<phase>setup|call|teardown)\s+(?P<test>\S.*)$", re.MULTILINE)


@dataclass
class SuiteRun:
    """One `python -m pytest` run: its wall time, its counts line, the per-test durations it printed."""

    checkout: Path
    wall_s: float
    returncode: int
    counts: str  # "2097 passed, 447 skipped, 31 warnings", or "" when pytest printed no summary
    pytest_s: float | None  # what pytest itself says (from its start, after Python's)
    durations: list[tuple[float, str, str]] = field(default_factory=list)  # (seconds, phase, test id)


def parse_output(text: str) -> tuple[str, float | None, list[tuple[float, str, str]]]:
    """pytest's last summary line (counts, seconds) and its `--durations` lines, slowest first."""
    summaries = list(SUMMARY.finditer(text))
    counts, seconds = ("", None)
    if summaries:
        counts, seconds = summaries[-1].group("counts"), float(summaries[-1].group("seconds"))
    durations = [(float(m.group("seconds")), m.group("phase"), m.group("test").strip())
                 for m in DURATION.finditer(text)]
    return counts, seconds, sorted(durations, key=lambda d: -d[0])


def per_test(durations: list[tuple[float, str, str]]) -> list[tuple[float, str]]:
    """Setup, call and teardown of one test added up (a module fixture's cost lands on its first test)."""
    totals: dict[str, float] = {}
    for seconds, _, test in durations:
        totals[test] = totals.get(test, 0.0) + seconds
    return sorted(((s, t) for t, s in totals.items()), key=lambda st: -st[0])


def per_file(durations: list[tuple[float, str, str]]) -> list[tuple[float, str]]:
    totals: dict[str, float] = {}
    for seconds, _, test in durations:
        name = test.split("::")[0]
        totals[name] = totals.get(name, 0.0) + seconds
    return sorted(((s, f) for f, s in totals.items()), key=lambda sf: -sf[0])


def run_suite(checkout: Path, pytest_args: list[str], log: Path | None, timeout_s: float) -> SuiteRun:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(checkout), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=0", *pytest_args]
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=checkout, env=env, capture_output=True, text=True, timeout=timeout_s)
    wall_s = time.perf_counter() - start
    text = done.stdout + done.stderr
    if log is not None:
        log.write_text(text)
    counts, pytest_s, durations = parse_output(text)
    return SuiteRun(checkout, wall_s, done.returncode, counts, pytest_s, durations)


def describe(run: SuiteRun, slowest: int) -> None:
    print(f"\n{run.checkout}: wall {run.wall_s:.1f} s (pytest says {run.pytest_s} s), exit {run.returncode}: "
          f"{run.counts or 'no summary line (see the log)'}")
    print(f"  the {slowest} slowest tests (setup + call + teardown):")
    for seconds, test in per_test(run.durations)[:slowest]:
        print(f"  {seconds:8.2f} s  {test}")
    print("  by file (the 10 slowest):")
    for seconds, name in per_file(run.durations)[:10]:
        print(f"  {seconds:8.2f} s  {name}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", type=Path, default=REPO, help="the checkout to time (default: this one)")
    parser.add_argument("--baseline-checkout", type=Path, help="another checkout timed in the same run, taking turns")
    parser.add_argument("--baseline-s", type=float, help="or a baseline wall time taken before (seconds)")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each checkout (default 1: ~15 min each)")
    parser.add_argument("--ratio", type=float, default=2 / 3, help="target: this / baseline at most (default 2/3)")
    parser.add_argument("--slowest", type=int, default=20, help="how many of the slowest tests to print")
    parser.add_argument("--pytest-args", nargs=argparse.REMAINDER, default=[],
                        help="passed to pytest after -q (paths, -k, -m); everything after this flag")
    parser.add_argument("--log-dir", type=Path, help="keep each run's whole pytest output here")
    parser.add_argument("--timeout-s", type=float, default=7200)
    parser.add_argument("--strict", action="store_true", help="exit with status 1 when the target is missed")
    args = parser.parse_args(argv)

    print_header("the test suite's wall time (python -m pytest -q)")
    checkouts = {"this": args.checkout.resolve()}
    if args.baseline_checkout:
        checkouts["baseline"] = args.baseline_checkout.resolve()
    if args.log_dir:
        args.log_dir.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[SuiteRun]] = {name: [] for name in checkouts}
    for repeat in range(args.repeats):
        order = list(checkouts)[::-1] if repeat % 2 == 0 else list(checkouts)  # baseline first, then turns
        for name in order:
            log = args.log_dir / f"{name}-{repeat}.log" if args.log_dir else None
            run = run_suite(checkouts[name], args.pytest_args, log, args.timeout_s)
            runs[name].append(run)
            print(f"  repeat {repeat + 1}/{args.repeats} {name}: {run.wall_s:.1f} s, {run.counts}", flush=True)

    for name in checkouts:
        describe(runs[name][-1], args.slowest)

    this_s = [r.wall_s for r in runs["this"]]
    checks = []
    failed = [r for rs in runs.values() for r in rs if r.returncode not in (0, 5)]  # 5: nothing collected
    note = f"{len(failed)} run(s) with failing tests" if failed else ""
    if "baseline" in runs:
        base_s = [r.wall_s for r in runs["baseline"]]
        ratio = paired_ratio(this_s, base_s)
        walls = f"this {'/'.join(f'{s:.0f}' for s in this_s)} s, baseline {'/'.join(f'{s:.0f}' for s in base_s)} s"
        print(f"\nwall: {walls}; paired ratio {ratio:.3f}")
        checks.append(Check("8", "test suite wall / baseline's (paired)", ratio, args.ratio, "x", note=note))
    elif args.baseline_s:
        ratio = statistics.median(this_s) / args.baseline_s
        checks.append(Check("8", f"test suite wall / {args.baseline_s:.0f} s", ratio, args.ratio, "x", note=note))
    else:
        checks.append(Check("8", "test suite wall (no baseline: not judged)", statistics.median(this_s), float("inf"),
                            "s", note=note or "give --baseline-checkout or --baseline-s"))
    misses = print_checks(checks)
    return 1 if args.strict and (misses or failed) else 0


if __name__ == "__main__":
    raise SystemExit(main())
