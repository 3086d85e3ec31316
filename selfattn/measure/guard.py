"""The first guard: will the point fit, judged on predictions before anything of it is allocated.

Memory first, on what needs no tensor of the point's size (the inputs, the fresh inputs' copies of them
(selfattn/measure/fresh.py), the masks' key intervals and the call's closed-form peak); then memory and time together, the accuracy pass and a compiled back end's
permutation check at the point's size included. A prediction that says "too slow" rests on the measured
GEMM peak, so that peak is measured again before the point is skipped on it. The prediction's columns
(predicted_mem_bytes, predicted_time_ms, flops, mask_density, kv_cache_bytes, the peak and its source)
are the row's whether or not the point fits. A compiled back end's first compilation faces
budget.max_compile_s apart (selfattn/measure/budget.py says why): `over_budget` is the rule.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from selfattn import compile as compile_cache
from selfattn.backends.resolved import Resolved
from selfattn.measure import boundary, fresh
from selfattn.measure.budget import Budget
from selfattn.measure.device import device_peak_tflops, peak_source
from selfattn.measure.flops import mask_density, point_flops
from selfattn.measure.memory import free_bytes
from selfattn.measure.permutation import POINT_SHAPE_CALLS, point_shape_bytes
from selfattn.measure.predict import (
    accuracy_bytes,
    before_counting,
    input_bytes,
    nominal_peak_tflops,
    predict_call_s,
    predict_mem_bytes,
    predict_point_s,
)
from selfattn.point import Point
from selfattn.results import Row


@dataclass(frozen=True)
class Prediction:
    """What the guard predicted of a point: its bytes, its seconds (compilation apart) and the peak behind them."""

    need_bytes: int
    point_s: float
    compile_s: float
    peak_tflops: float


def guard_point(point: Point, budget: Budget, device: str, dtype: torch.dtype, resolved: Resolved, row: Row,
                metrics: frozenset[str]) -> torch.Tensor | None:
    """The sampled query rows when the point fits; None when it does not (the row then says skipped_budget
    and why). Nothing that grows with the point is made before the answer: the sampled rows are a permutation
    of q_len, drawn after."""
    free = free_bytes(device)
    n_sampled = boundary.point_row_count(point, budget.accuracy_rows, resolved)
    row.predicted_mem_bytes = predict_mem_bytes(point, resolved)  # memory models are closed forms
    row.kv_cache_bytes = point.kv_bytes
    # memory only: the time limit is judged on the full prediction below, which the masks' tensors fit beside; the
    # fresh inputs' copies (fresh.py) are alive through the whole point
    held = before_counting(point) + fresh.held_bytes(point) + row.predicted_mem_bytes
    if (reason := over_budget(point, budget, held, free, 0.0)) is not None:
        row.status, row.error = "skipped_budget", reason
        return None
    row.flops, row.mask_density = point_flops(point), mask_density(point)
    predicted = _predict(point, budget, device, dtype, resolved, n_sampled, metrics, row.predicted_mem_bytes)
    reason = over_budget(point, budget, predicted.need_bytes, free, predicted.point_s, predicted.compile_s)
    memory_fits = over_budget(point, budget, predicted.need_bytes, free, 0.0, predicted.compile_s) is None
    if reason is not None and memory_fits and budget.measure_device_peak:
        # Skipping on time rests on the measured peak: make sure it was not measured in a bad moment.
        predicted = _predict(point, budget, device, dtype, resolved, n_sampled, metrics, row.predicted_mem_bytes,
                             device_peak_tflops(device, dtype, remeasure=True))
        reason = over_budget(point, budget, predicted.need_bytes, free, predicted.point_s, predicted.compile_s)
    row.device_peak_tflops = predicted.peak_tflops if budget.measure_device_peak else None
    row.device_peak_tflops_source = peak_source(device, dtype) if budget.measure_device_peak else "nominal"
    row.predicted_time_ms = predict_call_s(point, predicted.peak_tflops, resolved) * 1e3
    if reason is not None:
        row.status, row.error = "skipped_budget", reason
        return None
    # the first, last and block-edge query rows always, random ones beside (selfattn/measure/boundary.py)
    return boundary.point_rows(point, budget.accuracy_rows, resolved)


def _predict(point: Point, budget: Budget, device: str, dtype: torch.dtype, resolved: Resolved, n_sampled: int,
             metrics: frozenset[str], call_bytes: int, peak: float | None = None) -> Prediction:
    """The point's predicted bytes and seconds, at `peak` TFLOP/s (None: the device's measured or nominal one).

    The accuracy pass and, for a compiled back end, the permutation check at the point's size come one after
    the other, each beside the inputs and a call's peak; that check's calls count in the time too."""
    if peak is None:
        peak = device_peak_tflops(device, dtype) if budget.measure_device_peak else nominal_peak_tflops(device, point.precision)
    after_bytes = accuracy_bytes(point, n_sampled) if metrics & {"accuracy", "stability"} else 0
    if resolved.compiles:
        after_bytes = max(after_bytes, point_shape_bytes(point))
    perm_s = POINT_SHAPE_CALLS * predict_call_s(point, peak, resolved) if resolved.compiles else 0.0
    compile_s = compile_cache.predict_compile_s(point.backend, device, compile_key(point)) if resolved.compiles else 0.0
    return Prediction(input_bytes(point) + fresh.held_bytes(point) + call_bytes + after_bytes,
                      predict_point_s(point, peak, budget.timing_s, n_sampled, resolved) + perm_s, compile_s, peak)


def compile_key(point: Point) -> tuple:
    """What decides whether a point reuses compiled code: every axis but the seed and the inputs' std."""
    return tuple((name, repr(value)) for name, value in sorted(point.columns().items())
                 if name not in ("seed", "input_std"))


def over_budget(
    point: Point, budget: Budget, need_bytes: int, free_bytes: int | None, point_s: float, compile_s: float = 0.0
) -> str | None:
    """Why `point` must be skipped (one line), or None when it fits.

    need_bytes: predicted bytes of inputs + the call's peak + the accuracy pass;
    free_bytes: what the device has free now (None: unknown, memory is not guarded);
    point_s: predicted seconds of the whole point, its compilation left out;
    compile_s: predicted seconds of its first call's compilation (0: nothing to compile).
    """
    if free_bytes is not None and need_bytes > budget.mem_fraction * free_bytes:
        return (
            f"predicted memory {need_bytes / 2**30:.2f} GiB exceeds {budget.mem_fraction:g} of the "
            f"{free_bytes / 2**30:.2f} GiB free on {point.device}"
        )
    if compile_s > budget.max_compile_s:
        return f"predicted compile time {compile_s:.1f} s exceeds budget.max_compile_s={budget.max_compile_s:g} s"
    if point_s > budget.max_point_s:
        return f"predicted time {point_s:.1f} s exceeds max_point_s={budget.max_point_s:g} s"
    return None
