"""What a timing saw of the machine, and when a row's time is too noisy to decide anything by.

Two measurements per timed window (docs/usage.md#noisy-rows):

- `other_cpu_frac`: the CPU time other processes took during the window, as a fraction of the
  machine's capacity (window × logical CPUs). Linux only: /proc/stat's busy time of all CPUs (user,
  nice, system, irq, softirq, steal: a neighbouring VM's steal is noise too) minus this process's
  own (utime + stime of /proc/self/stat, every thread). Both count in clock ticks (10 ms), so a
  0.2 s window on 2 CPUs resolves 2.5% of the machine; a window shorter than MIN_WINDOW_S is
  not judged by it. Elsewhere (no /proc) it is None and only the spread judges.
- `time_spread`: (p80 - p20) / median of the samples, the row's own scatter.

A row is `noisy` when its spread passes its device's limit (SPREAD_LIMIT on CUDA, CPU_SPREAD_LIMIT on a
CPU), or, on a CPU point, when others took more than OTHER_CPU_LIMIT of the machine (the config's `budget.noise_spread` and `budget.noise_cpu`): they then shared the cores the timed threads ran on. A CUDA
point is judged by its spread only (a busy host delays launches, which the spread shows).
Read outside the timed calls (before and after the timer), so they cost the timing nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, TypeVar

# (p80 - p20) / median above this: the samples disagree among themselves by more than the smallest change
# a comparison calls (analysis/ab.py's MIN_RATIO, 1.1), so their median may move by that much in a rerun.
SPREAD_LIMIT = 0.10
# A CPU's own scatter is far wider, quiet or not, so on a CPU the spread flags only a wild row and others' CPU
# share is what tells a busy machine: the default sweep on the project's 2-core CPU VM with nothing else running
# had spreads of median 0.08, 95th percentile 0.33, at most 0.70 (a 10% limit flagged 89 of its 219 quiet points),
# while others' share stayed at most 0.05 (and was 0.79-0.95 beside one busy process per core).
CPU_SPREAD_LIMIT = 1.0
# Other processes' share of the machine's CPU time above this: at least one core in four was busy
# with something else while the point's threads (every core) ran.
OTHER_CPU_LIMIT = 0.25
# Below this window the clock-tick counts are too coarse for OTHER_CPU_LIMIT (a tick on 2 CPUs of a
# 0.05 s window is 10% of the machine).
MIN_WINDOW_S = 0.1

_PROC_STAT = "/proc/stat"
_SELF_STAT = "/proc/self/stat"
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user nice system irq softirq steal (guest is inside user already)


@dataclass(frozen=True)
class Sample:
    """CPU clock ticks at one moment: the machine's busy total and this process's own, and the wall clock."""

    busy_ticks: int
    self_ticks: int
    wall_s: float


@dataclass(frozen=True)
class Noise:
    """What one timed window saw: others' CPU share (None: not measurable here) and the samples' spread."""

    other_cpu_frac: float | None
    time_spread: float
    noisy: bool
    reason: str  # "" when quiet; else what passed its limit, e.g. "spread 34% > 10%; others 52% of the CPU > 25%"


def _read_sample(clock: Callable[[], float]) -> Sample | None:
    try:
        with open(_PROC_STAT) as f:
            cpu = f.readline().split()
        with open(_SELF_STAT) as f:
            # the command name may hold spaces: fields after its closing parenthesis; utime, stime are 14, 15
            after = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if not cpu or cpu[0] != "cpu":
        return None
    values = [int(v) for v in cpu[1:]]
    busy = sum(values[i] for i in _BUSY_FIELDS if i < len(values))
    return Sample(busy, int(after[11]) + int(after[12]), clock())


def other_cpu_frac(before: Sample | None, after: Sample | None, cpus: int | None = None) -> float | None:
    """Others' share of the machine's CPU time between two samples; None when unknown or too short."""
    if before is None or after is None:
        return None
    window_s = after.wall_s - before.wall_s
    if window_s < MIN_WINDOW_S:
        return None
    ticks_per_s = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    cpus = cpus or os.cpu_count() or 1
    others = (after.busy_ticks - before.busy_ticks) - (after.self_ticks - before.self_ticks)
    return min(1.0, max(0.0, others / ticks_per_s / (window_s * cpus)))


def spread(p20_ms: float, median_ms: float, p80_ms: float) -> float:
    """(p80 - p20) / median; 0 for a zero median."""
    return (p80_ms - p20_ms) / median_ms if median_ms > 0 else 0.0


def default_spread_limit(device: str) -> float:
    """The spread limit when `budget.noise_spread` is null: SPREAD_LIMIT on CUDA, CPU_SPREAD_LIMIT elsewhere."""
    return SPREAD_LIMIT if device == "cuda" else CPU_SPREAD_LIMIT


def judge(time_spread: float, others: float | None, device: str, spread_limit: float | None = None,
          cpu_limit: float = OTHER_CPU_LIMIT) -> Noise:
    """Whether a row's timing is noisy, by the limits (the module's, or the budget's `noise_*`), and why."""
    spread_limit = default_spread_limit(device) if spread_limit is None else spread_limit
    reasons = []
    if time_spread > spread_limit:
        reasons.append(f"spread {100 * time_spread:.0f}% > {100 * spread_limit:.0f}%")
    if device != "cuda" and others is not None and others > cpu_limit:
        reasons.append(f"others {100 * others:.0f}% of the CPU > {100 * cpu_limit:.0f}%")
    return Noise(others, time_spread, bool(reasons), "; ".join(reasons))


T = TypeVar("T")


def watched(timed: Callable[[], T], clock: Callable[[], float]) -> tuple[T, float | None]:
    """Run `timed` (a whole timer's run) and return its result and others' CPU share during it."""
    before = _read_sample(clock)
    result = timed()
    return result, other_cpu_frac(before, _read_sample(clock))
