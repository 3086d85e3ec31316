"""What every benchmark script shares: the environment header, paired timing, the target table.

The scripts measure ratios, not absolute times: the machines they run on are shared and noisy,
so the compared calls run interleaved in one process (a burst of load hits both sides of a
ratio alike) and the load average is printed beside the figures.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `python benchmarks/x.py` puts benchmarks/, not the repo, on the path
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.utils.benchmark as torch_benchmark  # noqa: E402


def git_commit() -> str:
    """Short HEAD commit, with "-dirty" when tracked files differ from it (the rows' git_sha, shortened)."""
    from selfattn.measure.device import git_sha

    sha = git_sha()
    if not sha:
        return "unknown"
    return sha.removesuffix("-dirty")[:7] + ("-dirty" if sha.endswith("-dirty") else "")


def load_text() -> str:
    """The 1/5/15-minute load averages beside the core count, e.g. "load 2.1/2.5/3.0 on 2 cores"."""
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f}/{five:.2f}/{fifteen:.2f} on {os.cpu_count()} cores"


def print_header(title: str) -> None:
    """Date, commit, torch and the machine's load: what a reader needs to trust the figures."""
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"== {title}")
    print(f"   {now} | commit {git_commit()} | torch {torch.__version__} | {torch.get_num_threads()} threads | {load_text()}")
    print(f"   command: python {' '.join([os.path.relpath(sys.argv[0], REPO), *sys.argv[1:]])}", flush=True)


@dataclass(frozen=True)
class Check:
    """One figure beside its target: PASS when `measured` is at most (or at least) `limit`."""

    target: str  # the target's number (docs/performance.md), e.g. "1" or "2"
    what: str
    measured: float | None  # None: could not be measured (the note says why)
    limit: float
    unit: str = "x"
    at_most: bool = True  # False: the figure must be at least `limit`
    note: str = ""

    @property
    def passed(self) -> bool | None:
        if self.measured is None or not np.isfinite(self.measured):
            return None
        return self.measured <= self.limit if self.at_most else self.measured >= self.limit


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "":
        return f"{value:.3f}"
    return f"{value:.3g} {unit}"


def print_checks(checks: list[Check]) -> int:
    """The target table; returns the number of misses (unmeasured counts as a miss)."""
    width = max(len(c.what) for c in checks)
    print(f"\n{'target':<7}{'figure':<{width + 2}}{'measured':>12}  {'target':>11}  result")
    misses = 0
    for c in checks:
        bound = ("<= " if c.at_most else ">= ") + _fmt(c.limit, c.unit)
        verdict = {True: "PASS", False: "MISS", None: "MISS (not measured)"}[c.passed]
        misses += c.passed is not True
        line = f"{c.target:<7}{c.what:<{width + 2}}{_fmt(c.measured, c.unit):>12}  {bound:>11}  {verdict}"
        print(line + (f"  ({c.note})" if c.note else ""))
    print(f"({load_text()} at the end)", flush=True)
    return misses


def time_once_s(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def time_interleaved(
    fns: dict[str, Callable[[], object]], repeats: int, min_run_time: float = 0.5, warmup: bool = True
) -> dict[str, list[float]]:
    """Per-call milliseconds of each fn, one value per repeat, the fns taking turns every repeat.

    A call faster than `min_run_time` is timed with `torch.utils.benchmark.Timer.blocked_autorange`
    (the median of its blocks, with all of torch's threads). A slower call is timed once per repeat
    with a wall clock: blocked_autorange would run it once untimed and once timed, doubling the
    cost of the largest sizes for no better figure.
    """
    warm_s = {name: time_once_s(fn) if warmup else float("inf") for name, fn in fns.items()}
    times_ms: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            if warm_s[name] < min_run_time:
                timer = torch_benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
                times_ms[name].append(timer.blocked_autorange(min_run_time=min_run_time).median * 1e3)
            else:
                times_ms[name].append(time_once_s(fn) * 1e3)
    return times_ms


def paired_ratio(numerator_ms: list[float], denominator_ms: list[float]) -> float:
    """Median over repeats of the ratio taken within each repeat (both sides saw the same load)."""
    return float(np.median(np.asarray(numerator_ms) / np.asarray(denominator_ms)))


def fmt_ms(values_ms: list[float]) -> str:
    return "/".join(f"{v:.0f}" if v >= 10 else f"{v:.2f}" for v in values_ms)


def add_common_args(parser: argparse.ArgumentParser, *, shape: bool = True, strict: bool = True) -> None:
    """The options every target script shares: the targets' shape (H8 D64) and --strict."""
    if shape:
        parser.add_argument("--heads", type=int, default=8)
        parser.add_argument("--head-dim", type=int, default=64)
    if strict:
        parser.add_argument("--strict", action="store_true", help="exit with status 1 when a target is missed")
