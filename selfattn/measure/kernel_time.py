"""On CUDA, the kernel's own time beside the call's: the call captured once in a CUDA graph, its replays timed.

A row's call time (`call_time_ms`, CUDA events around each Python call) includes the host's launch path: Python,
the back end's argument handling, each kernel's launch. A kernel that finishes before the host has queued the
next one is then timed at the host's speed: the project's Triton kernel at n=1024 on an H200 took 0.078-0.083 ms a
call and 0.015-0.017 ms replayed in a CUDA graph. `kernel_time_ms` is the graph's: the call's kernels, in order,
with the gaps between them on the device, and no host in between.

Why graph replay rather than the profiler's kernel intervals: it needs nothing beyond torch (no CUPTI, no trace to
parse), it times what the call runs as one piece (a call of several kernels keeps its on-device gaps, which a sum
of kernel intervals leaves out), and tritonbench's `do_bench_cudagraph` does the same. It cannot time a call that
is not capturable (a host sync, a `.item()`, host-side control flow that reads values): such a row says why in
its `kernel_time_note` and keeps its call time.

Each sample: the step between calls (fresh inputs, selfattn/measure/fresh.py, written in place so the graph reads
them), the L2 flush, then CUDA events right around one replay. The flush is queued before the start event, so its
time is outside the interval and needs no subtracting (tritonbench replays many flush+call pairs in one graph and
subtracts a graph of flushes instead); it also keeps the device busy for ~0.1 ms while the host queues the replay,
so the replay's own launch is hidden. A kernel that returns a cached tensor captures no kernels: its replay is
nearly empty and the physical floor (selfattn/measure/floor.py) judges the time.

`timing.mode` (the config's `timing` section, selfattn/measure/timing_options.py): `call` (default) keeps the call's
time in `time_ms`, `kernel` puts the kernel's there; both columns are in every CUDA row either way, and `timing_mode`
says which one time_ms is. `timing.l2=warm` leaves the flush out of the replays as it does of the timed calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from selfattn.measure import timing as timing_module

WARMUP_CALLS = 3  # torch's CUDA-graph recipe: a few calls on a side stream before capture
# The replays take this share of the point's timing window (at least MIN_SAMPLES replays): a kernel's time varies
# less than a call's (no host in it), and the timer's calls no longer pay do_bench's estimate calls (fresh inputs
# time every CUDA call with events), which scripts/gpu_check_helper.py's POINT_TIMING_FACTOR still counts.
KERNEL_TIMING_SHARE = 0.1


@dataclass(frozen=True)
class KernelTime:
    timing: timing_module.Timing | None  # None: not measured (see note)
    note: str = ""


def capture(call: Callable[[], Any]) -> "torch.cuda.CUDAGraph":
    """`call` captured in a CUDA graph (warmed up on a side stream first, as torch's docs ask)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(WARMUP_CALLS):
            call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    return graph


def kernel_time(call: Callable[[], Any], timing_s: float, call_s_estimate: float,
                between: Callable[[], Any] | None = None, flush_l2: bool = True) -> KernelTime:
    """The replays' per-call times, as many samples as the call's timer would take (at most MAX_EVENT_CALLS)."""
    try:
        graph = capture(call)
    except Exception as err:  # not capturable (or no room for the graph's pool): the call's time stands alone
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        return KernelTime(None, "kernel time not measured: the call cannot be captured in a CUDA graph "
                                f"({type(err).__name__}: {' '.join(str(err).split())[:160]})")
    try:
        samples = timing_module._event_times_ms(graph.replay, _replays(call_s_estimate, KERNEL_TIMING_SHARE * timing_s),
                                                between, flush_l2)
    finally:
        del graph  # its memory pool goes back before the next point
    return KernelTime(timing_module.summarize(samples, "cuda_graph"))


def _replays(call_s: float, timing_s: float) -> int:
    return min(timing_module.MAX_EVENT_CALLS, max(timing_module.MIN_SAMPLES, int(timing_s / max(call_s, 1e-9))))


def record(row: Any, call: Callable[[], Any], call_timing: timing_module.Timing, timing_s: float, mode: str,
           between: Callable[[], Any] | None = None, l2: str = "cold") -> timing_module.Timing:
    """Fill the row's call and kernel columns, its timing mode and L2 state; the Timing its time_ms must hold
    (`mode`). `l2`: "cold" flushes the L2 before every replay (timing.L2_FLUSH_BYTES, more than any L2), as the
    call's timer did; "warm" does not."""
    row.call_time_ms = call_timing.median_ms
    row.l2 = l2
    measured = kernel_time(call, timing_s, call_timing.median_ms * 1e-3, between, flush_l2=l2 == "cold")
    if measured.timing is not None:
        row.kernel_time_ms = measured.timing.median_ms
        row.kernel_time_ms_p20, row.kernel_time_ms_p80 = measured.timing.p20_ms, measured.timing.p80_ms
        row.launch_overhead_ms = max(0.0, call_timing.median_ms - measured.timing.median_ms)
    row.kernel_time_note = measured.note
    if mode == "kernel" and measured.timing is not None:
        row.timing_mode = "kernel"
        return measured.timing
    row.timing_mode = "call"
    if mode == "kernel":  # asked for, not measurable: the row says it holds the call's time
        row.kernel_time_note = f"{measured.note}; time_ms holds the call's time"
    return call_timing
