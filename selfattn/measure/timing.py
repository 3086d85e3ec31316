"""Timing one call with the field's timers: median and p20/p80 of per-call times.

Four timers; every row says which one measured it (`Timing.timer`, the row's `timer` column):

- `cpu_fresh` (CPU, a judged point's timed calls): each call timed alone with `time.perf_counter` (the garbage
  collector off, as timeit does), after a `between` step that is not timed: selfattn/measure/fresh.py writes new
  input values there, so no two timed calls see the same values. A block of calls timed together cannot leave a
  step between its calls out of its time, so fresh inputs mean a sample per call. The window `timing_s` counts
  the steps between calls (a point costs what it did); the CUDA timers take the same `between` (cuda_events).

- `cpu_blocks` (CPU): blocks of calls timed with `time.perf_counter` (the stdlib's `timeit`, the
  garbage collector off, torch's thread count as set), a block sized from the caller's estimate of
  one call (`time_cpu`). Rows before this timer say `torch_timer`: `torch.utils.benchmark.Timer`'s
  `blocked_autorange`, which times the same blocks but estimates their size itself first.
- `do_bench` (CUDA): `triton.testing.do_bench`, CUDA events around each call and an L2 flush
  between calls. Before timing it runs the function once, then 5 times to estimate its time,
  then warms up for `WARMUP_MS`: 7 untimed calls for a slow function. So it times only calls
  that `timing_s` covers many times over (`DO_BENCH_MIN_CALLS`); there its own calls are cheap.
- `cuda_events` (CUDA): do_bench's method in a few lines (the same L2 flush, events around each
  call, the same warm-up rule), without its estimate: the caller already knows the call's time.
  It times slow calls (1 warm-up + MIN_SAMPLES timed calls instead of 7 + ~3), and every CUDA
  call of a process where triton is missing or its first do_bench failed: triton can import
  yet fail to build its driver on first use (no C compiler or no Python.h on a cluster node),
  and that must not turn every CUDA point into an error. The switch happens once, with a warning.

`plan` says how many calls a timer will make for a given call time, so the budget guard
(selfattn.measure.predict) counts what really runs. Warm-up never counts: the caller runs the
function once before (and measures its memory on a second call); each timer warms up again on
its own as described.
"""

from __future__ import annotations

import time
import timeit
import warnings
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np
import torch

from selfattn.measure import noise

TIMERS = ("cpu_fresh", "cpu_blocks", "do_bench", "cuda_events")
# Fewer timed samples than this make p20/p80 meaningless; slow calls are repeated this often
# even when that exceeds timing_s (the budget guard has already counted them).
MIN_SAMPLES = 3
# Both CUDA timers warm up for this long (at least one call) before timing: do_bench's `warmup`.
WARMUP_MS = 1.0
# do_bench runs fn once, then 5 more times to estimate its time, before its warm-up.
DO_BENCH_ESTIMATE_CALLS = 1 + 5
# do_bench only when timing_s covers this many calls: its 6 estimate calls then cost under 60%
# of timing_s, and its own estimate would have to be 3x off to leave fewer than MIN_SAMPLES samples.
DO_BENCH_MIN_CALLS = 10
# The cuda_events timer's L2 flush buffer: do_bench's size, bigger than any current GPU's L2 (H200: 60 MB).
L2_FLUSH_BYTES = 256 * 1024 * 1024
MAX_EVENT_CALLS = 10_000  # events are cheap, but a 10 us call with timing_s=1 would want 100k pairs
# A CPU block lasts about this long: timeit's own cost per block (a few microseconds) is then under
# 1% of it, and a 0.05 s window still holds tens of samples. A slower call is a block of one.
CPU_BLOCK_S = 1e-3
# A row keeps at most this many samples (`time_samples_ms`): enough for a rank test at p < 0.002 and a
# bootstrap interval (analysis/ab.py), about 1.4 KB of CSV a row.
MAX_KEPT_SAMPLES = 200

# do_bench in this process: why it cannot run (then cuda_events replaces it), whether it has
# worked once (later failures are the point's own), and whether the switch was announced.
_do_bench_broken: str = ""
_do_bench_worked = False
_warned = False


@dataclass(frozen=True)
class Timing:
    """Per-call times in milliseconds, over `samples` timed samples, measured by `timer`."""

    median_ms: float
    p20_ms: float
    p80_ms: float
    samples: int
    min_ms: float | None = None  # the fastest sample (a peak's best case); None when not known
    timer: str = ""  # one of TIMERS
    samples_ms: tuple[float, ...] = ()  # every sample's per-call time, in the order measured
    other_cpu_frac: float | None = None  # others' share of the CPU during the timer's run (measure/noise.py)
    own_cpu_frac: float | None = None  # this process's CPU seconds per wall second of the timer's run (all threads)


@dataclass(frozen=True)
class Plan:
    """The calls a timer makes for one point: its own untimed ones (estimate, warm-up) and timed ones."""

    timer: str
    untimed_calls: int
    timed_calls: int

    def seconds(self, call_s: float) -> float:
        return (self.untimed_calls + self.timed_calls) * call_s


def quantile(sorted_values: np.ndarray, q: float) -> float:
    """np.quantile's default (method="linear") of an ascending float64 array, step for step (numpy
    2.x's _quantile and _lerp), so the same value to the bit: np.quantile itself calls np.unique,
    whose first call imports numpy.ma (17 ms of a fresh process, in every SLURM array task)."""
    n = sorted_values.size
    virtual = (n - 1) * q
    if virtual >= n - 1:
        below = above = n - 1
    else:
        below, above = int(np.floor(virtual)), int(np.floor(virtual)) + 1
    gamma = virtual - (np.floor(virtual) if virtual < n - 1 else -1.0)  # numpy's index -1 at the top
    a, b = float(sorted_values[below]), float(sorted_values[above])
    diff = b - a
    return b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma


def summarize(per_call_ms: list[float] | np.ndarray, timer: str = "") -> Timing:
    """Median and 20th/80th percentiles of per-call times (one value per sample)."""
    measured = np.asarray(per_call_ms, dtype=np.float64)
    times = np.sort(measured)
    if times.size == 0:
        raise ValueError("per_call_ms: expected at least one time, got none")
    p20, median, p80 = (quantile(times, q) for q in (0.2, 0.5, 0.8))
    return Timing(float(median), float(p20), float(p80), int(times.size), float(times[0]), timer,
                  tuple(float(t) for t in measured))


def _warmup_calls(call_s: float) -> int:
    """do_bench's rule: max(1, int(warmup_ms / estimate_ms))."""
    return max(1, int(WARMUP_MS / max(call_s * 1e3, 1e-6)))


def _timed_calls(call_s: float, timing_s: float) -> int:
    return max(MIN_SAMPLES, int(timing_s / max(call_s, 1e-9)))


def cuda_timer(call_s: float, timing_s: float) -> str:
    """The CUDA timer that times a call of `call_s` seconds: do_bench for fast calls while it works."""
    if timing_s < DO_BENCH_MIN_CALLS * call_s or _load_do_bench() is None:
        return "cuda_events"
    return "do_bench"


def plan(device: str, call_s: float, timing_s: float, *, fresh: bool = False) -> Plan:
    """How many calls timing a `call_s`-second call for `timing_s` seconds makes on `device` (`fresh`: with a step
    between calls, time_call's `between`; its seconds share the window, so this counts at most that many calls)."""
    if fresh:
        if device != "cuda":
            return Plan("cpu_fresh", 0, _timed_calls(call_s, timing_s))
        return Plan("cuda_events", _warmup_calls(call_s), min(MAX_EVENT_CALLS, _timed_calls(call_s, timing_s)))
    if device != "cuda":
        # one calibration block first when blocks hold several calls, then blocks until timing_s is covered
        number = _cpu_block_calls(call_s)
        return Plan("cpu_blocks", number if number > 1 else 0, max(MIN_SAMPLES * number, _timed_calls(call_s, timing_s)))
    timer = cuda_timer(call_s, timing_s)
    if timer == "do_bench":
        return Plan(timer, DO_BENCH_ESTIMATE_CALLS + _warmup_calls(call_s), _timed_calls(call_s, timing_s))
    return Plan(timer, _warmup_calls(call_s), min(MAX_EVENT_CALLS, _timed_calls(call_s, timing_s)))


def _cpu_block_calls(call_s: float) -> int:
    """Calls per CPU block for a call of `call_s` seconds: a block of about CPU_BLOCK_S, at least one call."""
    return max(1, round(CPU_BLOCK_S / max(call_s, 1e-9)))


def time_cpu(fn: Callable[[], object], timing_s: float, call_s_estimate: float) -> Timing:
    """Time `fn` on the CPU for about `timing_s` seconds, and at least MIN_SAMPLES blocks.

    Each sample is one block of calls timed together, divided by its calls (per-call times, as
    torch.utils.benchmark's `blocked_autorange` reports them). The block's size comes from the
    caller's estimate: `blocked_autorange` found it by running 1, 10, 100, ... calls until one
    block cost 1e4 times the timer's own overhead, then rounded blocks up to that power of ten, so
    a 30 us call spent 33 ms estimating and 0.125 s in all for a 0.05 s window. Here, when a block
    holds several calls, one untimed block first re-estimates the call (the caller's estimate comes
    from a cold first call, which may be many times slower) and sizes the blocks from it.
    """
    number = _cpu_block_calls(call_s_estimate)
    timer = timeit.Timer(stmt="fn()", globals={"fn": fn})  # timeit turns the garbage collector off
    if number > 1:  # calibration: one block at the estimate's size, untimed in the result
        number = _cpu_block_calls(timer.timeit(number) / number)
    per_call_s: list[float] = []
    start = time.perf_counter()
    while len(per_call_s) < MIN_SAMPLES or time.perf_counter() - start < timing_s:
        per_call_s.append(timer.timeit(number) / number)
    return summarize([t * 1e3 for t in per_call_s], "cpu_blocks")


def time_cpu_fresh(fn: Callable[[], object], between: Callable[[], object], timing_s: float) -> Timing:
    """Time `fn` on the CPU, one call per sample, `between()` run untimed before each call, for about `timing_s`
    seconds of the loop (the steps between calls included) and at least MIN_SAMPLES calls."""
    import gc

    clock = time.perf_counter
    per_call_s: list[float] = []
    gc_was_on = gc.isenabled()
    gc.disable()  # as timeit does: a collection inside a call is not the call's time
    try:
        start = clock()
        while len(per_call_s) < MIN_SAMPLES or clock() - start < timing_s:
            between()
            began = clock()
            fn()
            per_call_s.append(clock() - began)
    finally:
        if gc_was_on:
            gc.enable()
    return summarize([t * 1e3 for t in per_call_s], "cpu_fresh")


def time_cuda(fn: Callable[[], object], timing_s: float, call_s_estimate: float) -> Timing:
    """Time `fn` on the current CUDA device: CUDA events and an L2 flush between calls.

    do_bench for calls `timing_s` covers DO_BENCH_MIN_CALLS times, cuda_events otherwise or
    when do_bench cannot run in this process (see the module docstring).
    """
    global _do_bench_broken, _do_bench_worked
    if cuda_timer(call_s_estimate, timing_s) == "cuda_events":
        _announce_fallback()
        return _time_cuda_events(fn, timing_s, call_s_estimate)
    do_bench = _load_do_bench()
    assert do_bench is not None  # cuda_timer chose do_bench
    rep_ms = max(1.0, timing_s * 1e3)
    try:
        # return_mode="all" returns every per-call time, so the sample count is known.
        times_ms = list(do_bench(fn, warmup=WARMUP_MS, rep=rep_ms, return_mode="all"))
    except Exception as err:
        if _do_bench_worked or _is_oom(err):
            raise  # it worked before (or fn itself ran out of memory): the point's failure, not the timer's
        _do_bench_broken = f"triton.testing.do_bench failed on first use ({type(err).__name__}: " \
                           f"{' '.join(str(err).split())[:200]})"
        _announce_fallback()
        return _time_cuda_events(fn, timing_s, call_s_estimate)
    _do_bench_worked = True
    if len(times_ms) < MIN_SAMPLES:
        # do_bench's own estimate was far above the caller's: top up with its method, so p20/p80 exist.
        times_ms += _event_times_ms(fn, MIN_SAMPLES - len(times_ms))
    return summarize(times_ms, "do_bench")


def _announce_fallback() -> None:
    """Warn once per process that cuda_events replaces do_bench, and why."""
    global _warned
    if _do_bench_broken and not _warned:
        _warned = True
        warnings.warn(f"{_do_bench_broken}: timing CUDA with events and an L2 flush (timer=cuda_events) "
                      "for the rest of this process", RuntimeWarning, stacklevel=3)


def _is_oom(err: BaseException) -> bool:
    from selfattn.measure.failures import classify

    return classify(err) == "oom"


def _load_do_bench() -> Callable[..., Any] | None:
    """triton's do_bench, or None when triton is missing or its first do_bench failed here."""
    global _do_bench_broken
    if _do_bench_broken:
        return None
    try:
        from triton.testing import do_bench
    except ImportError:  # triton ships with CUDA torch on Linux; elsewhere the events timer
        _do_bench_broken = "triton is not installed"
        return None
    return do_bench


# The CUDA primitives, as functions so CPU tests can stand in for them.
def _event() -> Any:
    return torch.cuda.Event(enable_timing=True)


def _synchronize() -> None:
    torch.cuda.synchronize()


def _flush_buffer() -> torch.Tensor:
    return torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")


def _event_times_ms(fn: Callable[[], object], calls: int,
                    between: Callable[[], object] | None = None, flush_l2: bool = True) -> list[float]:
    """`calls` per-call times: `between()` (queued before the events: fresh inputs), flush L2 (unless `flush_l2` is
    False: timing.l2=warm), then a pair of events around each call."""
    flush = _flush_buffer() if flush_l2 else None
    starts = [_event() for _ in range(calls)]
    ends = [_event() for _ in range(calls)]
    for begin, end in zip(starts, ends):
        if between is not None:
            between()
        if flush is not None:
            flush.zero_()  # evicts the inputs from L2 so every call reads them from HBM
        begin.record()
        fn()
        end.record()
    _synchronize()
    return [begin.elapsed_time(end) for begin, end in zip(starts, ends)]


def _time_cuda_events(fn: Callable[[], object], timing_s: float, call_s_estimate: float,
                      between: Callable[[], object] | None = None, flush_l2: bool = True) -> Timing:
    """do_bench's method without its estimate: warm up for WARMUP_MS (at least one call), then time."""
    for _ in range(_warmup_calls(call_s_estimate)):
        if between is not None:
            between()
        fn()
    _synchronize()
    calls = min(MAX_EVENT_CALLS, _timed_calls(call_s_estimate, timing_s))
    return summarize(_event_times_ms(fn, calls, between, flush_l2), "cuda_events")


def time_call(fn: Callable[[], object], device: str, timing_s: float, call_s_estimate: float, *,
              between: Callable[[], object] | None = None, flush_l2: bool = True) -> Timing:
    """Time `fn` on `device` ("cpu" or "cuda") for about `timing_s` seconds, and what other processes took
    of the CPU meanwhile (`Timing.other_cpu_frac`, read before and after the timer: selfattn/measure/noise.py).

    `between`: a step run before every timed call and never timed (fresh inputs, selfattn/measure/fresh.py): the
    CPU then times each call alone (`cpu_fresh`), CUDA with its events (`cuda_events`; do_bench has no such step).
    `flush_l2` (CUDA): the L2 flushed before every timed call (timing.l2=cold); False: cuda_events without the flush
    (do_bench always flushes). A CPU's caches are never flushed (selfattn/measure/timing_options.py)."""
    if device == "cuda" and (between is not None or not flush_l2):
        def timer(fn, timing_s, call_s_estimate):  # noqa: ANN001, ANN202 - the same three arguments
            return _time_cuda_events(fn, timing_s, call_s_estimate, between, flush_l2)
    elif between is not None:
        def timer(fn, timing_s, call_s_estimate):  # noqa: ANN001, ANN202
            return time_cpu_fresh(fn, between, timing_s)
    else:
        timer = time_cuda if device == "cuda" else time_cpu
    own_before, wall_before = time.process_time(), time.perf_counter()
    timing, others = noise.watched(lambda: timer(fn, timing_s, call_s_estimate), time.perf_counter)
    wall_s = time.perf_counter() - wall_before
    own = (time.process_time() - own_before) / wall_s if wall_s > 0 else None
    return replace(timing, other_cpu_frac=others, own_cpu_frac=own)


# A CPU point whose process used less than this share of one core over its timed calls spent them waiting (a sleep,
# a lock, a device or process outside this one), not computing: its time is real, but not a computation's. An
# honest call computes on at least one thread; even with others holding 90% of a 2-core machine it keeps ~0.2.
IDLE_CPU_FRAC = 0.1


def idle_reason(own_cpu_frac: float | None, device: str) -> str:
    """Why a CPU row's timed calls look idle (for its `noise`), or ""."""
    if device == "cuda" or own_cpu_frac is None or own_cpu_frac >= IDLE_CPU_FRAC:
        return ""
    return (f"idle: the process used {100 * own_cpu_frac:.0f}% of a core over its timed calls < "
            f"{100 * IDLE_CPU_FRAC:.0f}% (it waited, e.g. slept, rather than computed)")


def kept_samples(samples_ms: tuple[float, ...], limit: int = MAX_KEPT_SAMPLES) -> list[float]:
    """The samples a row keeps (its `time_samples_ms`): all of them in the order measured, or, past `limit`, `limit`
    evenly spaced order statistics (sorted): the same distribution for a bootstrap or a rank test, in a CSV
    cell of a bounded size (a fast CUDA call has thousands of samples)."""
    if len(samples_ms) <= limit:
        return list(samples_ms)
    ordered = np.sort(np.asarray(samples_ms, dtype=np.float64))
    picks = ((np.arange(limit) + 0.5) * ordered.size / limit).astype(int)
    return [float(t) for t in ordered[picks]]


def wall_call(fn: Callable[[], object], device: str) -> tuple[object, float]:
    """Run `fn` once (a warm-up) and return its result and its wall time in seconds."""
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    result = fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return result, time.perf_counter() - start
