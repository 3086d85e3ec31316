"""Which of the project's files one point's measurement calls into: a call trace by file.

    python benchmarks/point_files.py                      # the default point (naive, core, seq_len=256)
    python benchmarks/point_files.py --seq-len 128 --list # and the files, with their calls

Traces one `measure_point` call (after a first, untraced one, so that imports and the machine's
peak probes are not counted) with `sys.setprofile` and keeps the Python calls whose code lives in
the repository's selfattn/. Prints the files entered, the stays (a stay is a run of consecutive
calls in one file; the trace goes to another file and back for a new one) and the returns (stays
in a file that was left before). Fewer files and stays is a pipeline a reader follows more easily.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from _common import REPO, print_header


def trace_files(point, budget) -> list[str]:
    """The project files of each Python call made while measuring `point`, in call order."""
    from selfattn.measure.run import measure_point

    root = str(REPO / "selfattn")
    calls: list[str] = []

    def profile(frame, event, arg):  # noqa: ARG001 (sys.setprofile's signature)
        if event == "call" and frame.f_code.co_filename.startswith(root):
            calls.append(str(Path(frame.f_code.co_filename).relative_to(REPO)))

    sys.setprofile(profile)
    try:
        row = measure_point(point, budget)
    finally:
        sys.setprofile(None)
    if row.status != "ok":
        raise SystemExit(f"the traced point's row is {row.status}: {row.error}")
    return calls


def stays(calls: list[str]) -> list[str]:
    """The file of each run of consecutive calls in one file."""
    runs: list[str] = []
    for name in calls:
        if not runs or runs[-1] != name:
            runs.append(name)
    return runs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--list", action="store_true", help="print each file with its calls and stays")
    args = parser.parse_args(argv)
    from selfattn.measure.budget import Budget
    from selfattn.point import Point

    print_header("one point's measurement, traced by file")
    point, budget = Point(device="cpu", seq_len=args.seq_len), Budget(timing_s=0.05)
    from selfattn.measure.run import measure_point

    measure_point(point, budget)  # imports, probes and caches: not what a reader follows
    calls = trace_files(point, budget)
    runs = stays(calls)
    returns = len(runs) - len(set(runs))
    lines = sum(len(p.read_text().splitlines()) for p in (REPO / "selfattn").rglob("*.py"))
    print(f"files entered: {len(set(calls))}; stays: {len(runs)}; returns to a file left before: {returns}; "
          f"calls: {len(calls)}")
    print(f"selfattn/ lines (*.py): {lines}")
    if args.list:
        per_file, per_stay = Counter(calls), Counter(runs)
        for name, count in per_file.most_common():
            print(f"  {name}: {count} calls in {per_stay[name]} stays")


if __name__ == "__main__":
    main()
