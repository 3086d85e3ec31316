"""The physical floor: no call of a point can be faster than the device can do its work.

    floor_ms = max(flops / matmul peak, bytes_moved / bandwidth)

with the point's FLOPs (selfattn/measure/flops.py's convention) and least bytes (selfattn/measure/traffic.py), over
the device's peaks measured on the spot (selfattn/measure/device.py: a large GEMM, a large copy). A row whose
median time is below floor_ms / FLOOR_SLACK did not do the work it is credited with: a cached or precomputed answer,
a kernel that skips what it must compute. It is `incorrect`, and the reason names both numbers. The row keeps
`floor_ms` (and which term set it, `floor_of`) either way: time_ms / floor_ms is how far a kernel is from the device.

FLOOR_SLACK = 4: an honest kernel reaches at most about the GEMM's own rate (FlashAttention-3 reaches 75% of an
H100's spec sheet, the GEMM probe ~80%), and a peak measured while other processes load the machine can be low;
a lookup is 100-10000x below the floor (the cheats of tests/plugins_for_tests/cheats.py). Before a row is called
impossible its peaks are measured again (device.py keeps the better value, and its probe is the best of several short
trials), so a peak measured in a bad moment does not make an honest kernel `incorrect`; on CUDA the FLOP term's peak is
never below the spec sheet's dense peak for the dtype (selfattn/measure/spec_peaks.py: no kernel beats it, so a probe
collapsed by other jobs on the GPU cannot raise the floor past what the device can do); on a CPU the GEMM is measured on one thread too and the better of the two
kept: on a busy machine every thread's barriers can collapse in the GEMM probe itself (2 GFLOP/s on every thread
against 0.3 TFLOP/s on one, seen here) while the point's timed calls ran on one thread (selfattn/measure/threads.py).

Which peaks:
- FLOPs: the largest measured GEMM peak among the dtypes a kernel may honestly compute the point in: its own, and
  on a CPU float32 as well (a bf16/fp16 kernel may upcast, and a CPU's fp32 GEMM can beat its bf16 one); FP8
  points, whose tensors are stored in float32 and quantized inside the call, against twice the measured bf16 peak
  (FP8 tensor cores run at twice bf16's rate on Hopper, Ada and Blackwell).
- bytes: judged where the timed calls read their inputs from memory, not from a cache the timer left warm: on CUDA
  with timing.l2=cold (every timed call follows an L2 flush); elsewhere (a CPU, CUDA with timing.l2=warm) only
  where the point's bytes exceed CPU_CACHE_FACTOR x the last-level cache (the CPU's, the GPU's L2: the fresh inputs
  were just written, so smaller ones sit in a cache).
- Not judged without measured peaks (budget.measure_device_peak=false: nominal numbers are not the device's), for
  scope=train (a training run, not a timed call) and lstm/gru (torch's own modules).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

FLOOR_SLACK = 4.0
CPU_CACHE_FACTOR = 2.0  # a warm-cache point's bytes floor is judged only above this many last-level caches
FP8_OVER_BF16 = 2.0  # FP8 tensor-core rate over bf16's (Hopper, Ada, Blackwell spec sheets)


@dataclass(frozen=True)
class Floor:
    floor_ms: float  # max of the two terms
    flops_ms: float  # flops / peak
    bytes_ms: float | None  # bytes / bandwidth (None: not judged here)
    peak_tflops: float
    peak_gbps: float | None

    @property
    def of(self) -> str:
        """Which term sets the floor: "flops" or "bytes"."""
        return "bytes" if self.bytes_ms is not None and self.bytes_ms > self.flops_ms else "flops"

    def reason(self, time_ms: float) -> str:
        """Why `time_ms` is impossible, or "" when it is not below the floor / FLOOR_SLACK."""
        if not time_ms < self.floor_ms / FLOOR_SLACK:
            return ""
        terms = [f"FLOPs / the measured {self.peak_tflops:.3g} TFLOP/s matmul peak = {self.flops_ms:.3g} ms"]
        if self.bytes_ms is not None:
            terms.append(f"bytes / the measured {self.peak_gbps:.3g} GB/s = {self.bytes_ms:.3g} ms")
        return (f"time {time_ms:.3g} ms is below the physical floor {self.floor_ms:.3g} ms / slack {FLOOR_SLACK:g} "
                f"({'; '.join(terms)}): the call did not do the point's work")


@functools.lru_cache(maxsize=1)
def last_level_cache_bytes() -> int | None:
    """The CPU's largest cache in bytes (Linux sysfs), or None where it cannot be read."""
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        unit = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        try:
            sizes.append(int(text.rstrip("KMG")) * unit)
        except ValueError:
            continue
    return max(sizes) if sizes else None


def _flop_dtypes(device: str, precision: str, dtype: torch.dtype) -> list[tuple[torch.dtype, float]]:
    """(dtype, multiple) pairs whose measured peak x multiple a kernel of this point may reach."""
    from selfattn.fp8_formats import fp8_format

    if fp8_format(precision):
        return [(torch.bfloat16, FP8_OVER_BF16), (dtype, 1.0)]
    pairs = [(dtype, 1.0)]
    if device == "cpu" and dtype in (torch.bfloat16, torch.float16):
        pairs.append((torch.float32, 1.0))
    return pairs


def judged(point: Any) -> bool:
    from selfattn.scopes import declared

    scope = declared(point)  # an attention call, timed (a training run's loop and a recurrence are not judged)
    return scope.attention and not scope.trains


_ONE_THREAD_PEAKS: dict[tuple[str, torch.dtype], float] = {}  # this process's one-thread GEMM peaks (CPU)


def _one_thread_peak(device: str, dtype: torch.dtype) -> float:
    """The GEMM peak measured on one thread (once per process and dtype): a lower bound of the CPU's peak that a
    collapse of every thread's barriers cannot drag down."""
    from selfattn.measure.device import _measure_peak
    from selfattn.measure.threads import one_thread

    if (device, dtype) not in _ONE_THREAD_PEAKS:
        with one_thread():
            _ONE_THREAD_PEAKS[(device, dtype)] = _measure_peak(device, dtype)
    return _ONE_THREAD_PEAKS[(device, dtype)]


def _gpu_l2_bytes() -> int | None:
    return getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", None) or None


# torch dtype -> the spec sheet's column (spec_peaks.SPEC_DTYPE's values); float32 is "tf32" where TF32 is on
_SPEC_COLUMNS = {torch.float64: "fp64", torch.float16: "fp16", torch.bfloat16: "bf16"}


def _gpu_name() -> str:
    """This process's GPU's name ("" without one: no sheet)."""
    return torch.cuda.get_device_name(torch.cuda.current_device()) if torch.cuda.is_available() else ""


def spec_tflops(device: str, dtype: torch.dtype) -> float:
    """The spec sheet's dense TFLOP/s of this GPU in `dtype` (0.0 on a CPU, for a GPU or dtype not on a sheet)."""
    from selfattn.measure.spec_peaks import spec_for

    if device != "cuda":
        return 0.0
    sheet = spec_for(_gpu_name())
    tf32 = bool(torch.backends.cuda.matmul.allow_tf32)
    column = _SPEC_COLUMNS.get(dtype) or ({True: "tf32", False: "fp32"}[tf32] if dtype == torch.float32 else "")
    return float(sheet.tflops.get(column, 0.0)) if sheet is not None else 0.0


def point_floor(point: Any, device: str, dtype: torch.dtype, *, remeasure: bool = False, l2: str = "") -> Floor:
    """The point's floor on `device` from the measured peaks (measured again first when `remeasure`, and on a CPU
    on one thread as well). `l2`: the timed calls' cache state ("cold", "warm"; "": cold on CUDA, warm on a CPU)."""
    from selfattn.measure.device import device_peak_gbps, device_peak_tflops
    from selfattn.measure.flops import point_flops
    from selfattn.measure.traffic import bytes_moved

    flops = point_flops(point)

    def peak(d: torch.dtype) -> float:
        measured = device_peak_tflops(device, d, remeasure=remeasure)
        if remeasure and device == "cpu" and torch.get_num_threads() > 1:
            measured = max(measured, _one_thread_peak(device, d))
        return max(measured, spec_tflops(device, d))

    peak_tflops = max(peak(d) * multiple for d, multiple in _flop_dtypes(device, point.precision, dtype))
    flops_ms = flops / (peak_tflops * 1e12) * 1e3
    moved = bytes_moved(point)
    cold = (l2 or ("cold" if device == "cuda" else "warm")) == "cold"
    cache = None if cold else last_level_cache_bytes() if device == "cpu" else _gpu_l2_bytes()
    bytes_judged = cold or (cache is not None and moved > CPU_CACHE_FACTOR * cache)
    peak_gbps = device_peak_gbps(device, remeasure=remeasure) if bytes_judged else None
    bytes_ms = moved / (peak_gbps * 1e9) * 1e3 if peak_gbps else None
    return Floor(max(flops_ms, bytes_ms or 0.0), flops_ms, bytes_ms, peak_tflops, peak_gbps)


def judge(point: Any, device: str, dtype: torch.dtype, time_ms: float | None, row: Any,
          measured_peaks: bool) -> str:
    """Fill the row's floor_ms and floor_of; the reason its time is impossible (after measuring the peaks again),
    or "". Nothing where the peaks are nominal or the scope is not a timed call. The row's `l2` says whether the
    timed calls found a cold cache (point_floor)."""
    if not measured_peaks or not judged(point) or not time_ms:
        return ""
    l2 = getattr(row, "l2", "") or ""
    floor = point_floor(point, device, dtype, l2=l2)
    if floor.reason(time_ms):  # before calling it impossible: were the peaks measured in a bad moment?
        floor = point_floor(point, device, dtype, remeasure=True, l2=l2)
    row.floor_ms, row.floor_of = floor.floor_ms, floor.of
    return floor.reason(time_ms)
