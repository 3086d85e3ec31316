"""Timing one call with the field's timers: median and p20/p80 of per-call times.

CPU: `torch.utils.benchmark.Timer` with all of torch's threads (its default is one thread).
CUDA: `triton.testing.do_bench`, which times with CUDA events and flushes the L2 cache between
calls; without triton, a tiny equivalent below. Warm-up never counts: the caller runs the
function once before, and both timers warm up again on their own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.utils.benchmark as torch_benchmark

# Fewer timed samples than this make p20/p80 meaningless; slow calls are repeated this often
# even when that exceeds the time budget (the budget guard has already bounded the call time).
MIN_SAMPLES = 3
# The L2 flush buffer for the triton-less CUDA timer: bigger than any current GPU's L2 (H100: 50 MB).
L2_FLUSH_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class Timing:
    """Per-call times in milliseconds, over `samples` timed samples."""

    median_ms: float
    p20_ms: float
    p80_ms: float
    samples: int
    min_ms: float | None = None  # the fastest sample (a peak's best case); None when not known


def summarize(per_call_ms: list[float] | np.ndarray) -> Timing:
    """Median and 20th/80th percentiles of per-call times (one value per sample)."""
    times = np.asarray(per_call_ms, dtype=np.float64)
    if times.size == 0:
        raise ValueError("per_call_ms: expected at least one time, got none")
    p20, median, p80 = np.quantile(times, [0.2, 0.5, 0.8])
    return Timing(float(median), float(p20), float(p80), int(times.size), float(times.min()))


def time_cpu(fn: Callable[[], object], timing_s: float, call_s_estimate: float) -> Timing:
    """Time `fn` on the CPU for about `timing_s` seconds, and at least MIN_SAMPLES calls.

    `Timer.blocked_autorange` groups fast calls into blocks and times each block; its
    `Measurement.times` are already per call (block time / calls per block), so the quantiles
    below are of per-call times. A call slower than the budget allows for blocks runs in blocks
    of one, and the run time is stretched to MIN_SAMPLES calls so p20/p80 exist; a short budget
    that still ends with fewer blocks is topped up with blocks of the same size.
    """
    timer = torch_benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    # (MIN_SAMPLES - 0.5) calls of run time yield MIN_SAMPLES blocks when the estimate is right.
    min_run_time = max(timing_s, (MIN_SAMPLES - 0.5) * call_s_estimate)
    measurement = timer.blocked_autorange(min_run_time=min_run_time)
    per_call_s = list(measurement.times)
    # A short budget can end after one or two big blocks; top up with blocks of the same size
    # (timeit's own warm-up of max(number // 100, 2) calls is not counted either).
    while len(per_call_s) < MIN_SAMPLES:
        per_call_s.extend(timer.timeit(measurement.number_per_run).times)
    return summarize([t * 1e3 for t in per_call_s])


def time_cuda(fn: Callable[[], object], timing_s: float, call_s_estimate: float) -> Timing:
    """Time `fn` on the current CUDA device with CUDA events and an L2 flush between calls.

    The caller has warmed `fn` up, so do_bench's own warm-up is kept to a token; its rep time
    is stretched to MIN_SAMPLES calls for calls slower than the budget.
    """
    rep_ms = max(1.0, timing_s * 1e3, MIN_SAMPLES * call_s_estimate * 1e3)
    try:
        from triton.testing import do_bench
    except ImportError:  # triton ships with CUDA torch on Linux; elsewhere use the fallback
        return _time_cuda_events(fn, rep_ms / 1e3, call_s_estimate)
    try:
        # return_mode="all" (triton >= 3.0) returns every per-call time, so the sample count is known;
        # older releases reject it (an assert or an unknown keyword) and report quantiles only.
        times_ms = do_bench(fn, warmup=1.0, rep=rep_ms, return_mode="all")
        return summarize(list(times_ms))
    except (TypeError, AssertionError):
        median, p20, p80 = do_bench(fn, warmup=1.0, rep=rep_ms, quantiles=[0.5, 0.2, 0.8])
        return Timing(float(median), float(p20), float(p80), 0)


def _time_cuda_events(fn: Callable[[], object], timing_s: float, call_s_estimate: float) -> Timing:
    """do_bench's method in a few lines: flush L2, then time each call with a pair of events."""
    flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    calls = max(MIN_SAMPLES, min(10_000, int(timing_s / max(call_s_estimate, 1e-6))))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
    for begin, end in zip(starts, ends):
        flush.zero_()  # evicts the inputs from L2 so every call reads them from HBM
        begin.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return summarize([begin.elapsed_time(end) for begin, end in zip(starts, ends)])


def time_call(fn: Callable[[], object], device: str, timing_s: float, call_s_estimate: float) -> Timing:
    """Time `fn` on `device` ("cpu" or "cuda") for about `timing_s` seconds."""
    if device == "cuda":
        return time_cuda(fn, timing_s, call_s_estimate)
    return time_cpu(fn, timing_s, call_s_estimate)


def wall_call(fn: Callable[[], object], device: str) -> tuple[object, float]:
    """Run `fn` once (a warm-up) and return its result and its wall time in seconds."""
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    result = fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return result, time.perf_counter() - start
