"""Analytic predictions made before anything is allocated: peak memory and time of a point.

The budget guard uses them to skip points that cannot fit; `predicted_mem_bytes` is also a
column beside the measured `peak_mem_bytes`, so the model itself is checked on every row.

Memory is "beyond the inputs", like the measurement: everything one timed call allocates,
its output (and, for fwd_bwd, the gradients) included; Q, K, V or X, the layer's weights and
the upstream gradient exist before the call and are not counted. Each back end's module owns
its memory model (`predict_mem_bytes`, which follows its code: which (q_len x seq_len) tensors
are alive at once) and its `EFFICIENCY`; each scope's module (selfattn/scopes/) what it adds around the back end
(the layer's projections, a generation's cache) or runs instead of one (a recurrence); this module asks the point's
scope and back end, and adds the inputs, the harness's own passes and the time.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from selfattn.measure.flops import point_flops
from selfattn.fp8_formats import fp8_format
from selfattn.point import ELEMENT_BYTES, FP32_BYTES, FP64_BYTES, Point
from selfattn.scopes import declared

# The time guard divides FLOPs by the measured matmul peak times the back end's EFFICIENCY (in
# its module). Optimistic on purpose: a skipped point that would have fit is a lost measurement;
# a point that runs 2x longer than predicted is only slow. A prediction that is still far off is
# caught by the second guard in run.py, on the measured warm-up call. Compare `predicted_time_ms`
# with `time_ms` in any results.csv to see how far off these are on a given device.
# A scope with no back end declares its own (Scope.efficiency: a recurrence's serial steps).
# Without a measured peak (Budget.measure_device_peak=False): nominal TFLOP/s by element size,
# deliberately low for a CPU (fp16/bf16 matmuls are slow on CPUs without AMX).
NOMINAL_CPU_TFLOPS = {8: 0.02, 4: 0.05, 2: 0.002, 1: 0.05}  # fp8 (1 byte) computes on fp32 values on a CPU
NOMINAL_CUDA_TFLOPS = 50.0
# The point's own calls besides the timer's: the warm-up (its output is checked for accuracy)
# and the memory measurement. A CPU point measures memory twice (peak RSS, then the allocator's
# peak under the profiler); a tf32 point adds one call with TF32 off (precision.tf32_ignored).
# The timer's own untimed and timed calls come from timing.plan.
POINT_CALLS = 2


def stored_bytes(point: Point) -> int:
    """Bytes per element of the tensors a point holds: an FP8 precision's are float32 (quantized inside the
    call, selfattn/fp8.py), so the harness's own memory is counted at 4 bytes, the kernel's traffic at 1."""
    return FP32_BYTES if fp8_format(point.precision) else point.element_bytes


def point_calls(device: str, precision: str) -> int:
    """Calls of one point outside the timer (see POINT_CALLS)."""
    return POINT_CALLS + (device != "cuda") + (precision == "tf32")


def input_bytes(point: Point) -> int:
    """Bytes of what exists before a call: Q, K, V (or X and the layer weights), upstream grad (its scope's)."""
    return declared(point).input_bytes(point)


def x_input_bytes(point: Point, weights: int) -> int:
    """A layer over X with `weights` elements: X, the weights and, with fwd_bwd, the upstream gradient."""
    s = stored_bytes(point)
    x = point.batch * point.seq_len * point.d_model * s
    return x + weights * s + (x if point.mode == "fwd_bwd" else 0)


def predict_mem_bytes(point: Point, resolved: Any) -> int:
    """Predicted peak bytes of one call of `point` beyond its inputs (see the module docstring): its scope's model,
    which asks `resolved`'s back end (selfattn.backends.resolved.Resolved, as measure_point resolved it: its options,
    chunk sizes and kernel) where one runs."""
    from selfattn.measure.device import resolve_device

    return int(declared(point).call_bytes(point, resolved, resolve_device(point.device)))


def rope_bytes(point: Point) -> int:
    """pos_enc=rope: the rotated copies of q and k the back end is given (and, fwd_bwd, their gradients)."""
    if point.pos_enc != "rope":
        return 0
    rotated = point.out_bytes + point.kv_bytes // 2
    return rotated * (2 if point.mode == "fwd_bwd" else 1)


def accuracy_bytes(point: Point, rows: int) -> int:
    """Peak of the harness's own work outside the timed calls, which the guard adds to the inputs
    and the call: the largest of drawing the inputs (`input_draw_bytes`), the accuracy and
    stability pass (its scope's `reference_bytes`) and the path-length pass: they never overlap."""
    return max(declared(point).reference_bytes(point, rows), input_draw_bytes(point, rows), path_length_bytes(point))


def attention_pass_bytes(point: Point, rows: int, keys: int, stability: bool) -> int:
    """The accuracy pass of an attention scope over `keys` keys: float64 and own-precision scores of the sampled
    rows, with their gradients, float64 copies of the inputs, and the larger of the reference's full-size work and
    (with `stability`) the stability pass's (`_full_size_pass_bytes`)."""
    sampled = point.batch * point.heads * min(rows, point.q_len_resolved) * keys
    copies = input_bytes(point) * (FP64_BYTES // stored_bytes(point))
    return sampled * (3 * FP64_BYTES + 3 * stored_bytes(point)) + copies + _full_size_pass_bytes(point, keys, stability)


def path_length_bytes(point: Point) -> int:
    """The path-length pass (selfattn/measure/path_length.py), float64 at its draws' batch: X and its
    gradient, and what its scope's pass adds (a recurrence's fwd_bwd activations, the layer's last query's
    (heads x n) weights and their gradient). 0 for the scopes it does not run on."""
    scope = declared(point)
    if not scope.path_length:
        return 0
    x = scope.path_draws * point.seq_len * point.d_model * FP64_BYTES
    return 2 * x + scope.path_bytes(point, scope.path_draws)


# The stability pass's statistics of dK (selfattn/measure/stability.py), per element of K: dK in
# the point's precision, its float64 copy, the isfinite mask, the boolean index's int64 positions
# (4 dimensions) and the gathered values. Measured on a CPU (B1 H8 N4096 D64 fp32): 54 B per element.
GRAD_K_STATS_BYTES = FP64_BYTES + 1 + 4 * 8 + FP64_BYTES


def _full_size_pass_bytes(point: Point, keys: int, with_stability: bool = True) -> int:
    """What the accuracy and stability pass allocates at the size of K and V, the larger of:
    the float64 reference's K and V repeated to every query head (`repeat_interleave` copies even
    without GQA: 2 x 8 bytes x B*H*N*D, doubled by their gradients for fwd_bwd), or the stability
    pass's dK statistics (GRAD_K_STATS_BYTES per K element), plus with GQA its own K and V repeated
    to every head in the point's precision and the repeated K's gradient. The reference's are freed
    before the stability pass runs. Measured on a CPU: B1 H8 N4096 D64, kv_heads 8 and 1, fwd and
    fwd_bwd, fp32 and bf16, the model is 0-35% above the profiler's peak of each pass."""
    s = stored_bytes(point)
    expanded = point.batch * point.heads * keys * point.head_dim  # elements of one of K, V at every head
    reference = 2 * expanded * FP64_BYTES * (2 if point.mode == "fwd_bwd" else 1)
    if not with_stability:  # a generation has no stability pass
        return reference
    k_elements = point.batch * point.kv_heads_resolved * keys * point.head_dim
    stability = k_elements * (s + GRAD_K_STATS_BYTES)
    if point.kv_heads_resolved != point.heads:
        stability += 3 * expanded * s
    return max(reference, stability)


# Drawing the inputs (selfattn/inputs.py): a CPU point draws in float64 on one host thread (the
# harness runs its own ops single-threaded), a GPU point on the device in float32. Optimistic rates
# (the guard's habit: it skips a point only when even the fast case is over budget): an idle core's
# float64 draw, and a device draw writing 4 bytes per value at a few TB/s. The layer's weights are drawn on the host.
HOST_DRAW_VALUES_PER_S = 4e7
DEVICE_DRAW_VALUES_PER_S = 2e10


def input_draw_s(point: Point, rows: int = 0) -> float:
    """Predicted seconds to draw the point's inputs (and the layer's weights) from its seed."""
    from selfattn.inputs import draws_on_host
    from selfattn.measure.device import resolve_device

    scope = declared(point)
    values, weights = sum(scope.drawn(point, rows)), scope.host_weights(point)
    if draws_on_host(resolve_device(point.device)):
        return (values + weights) / HOST_DRAW_VALUES_PER_S
    return values / DEVICE_DRAW_VALUES_PER_S + weights / HOST_DRAW_VALUES_PER_S


def input_draw_bytes(point: Point, rows: int = 0) -> int:
    """Bytes beside the inputs while they are drawn: the largest tensor in the draw's dtype (float64
    on the host, float32 on a device) before it is cast, unless it already is the point's dtype."""
    from selfattn.inputs import DEVICE_DRAW_DTYPE, HOST_DRAW_DTYPE, draws_on_host
    from selfattn.measure.device import resolve_device

    drawn = HOST_DRAW_DTYPE if draws_on_host(resolve_device(point.device)) else DEVICE_DRAW_DTYPE
    draw_bytes = drawn.itemsize
    return 0 if draw_bytes == stored_bytes(point) else max(declared(point).drawn(point, rows)) * draw_bytes


def mask_bytes(point: Point) -> int:
    """At least what a point's mask geometry allocates (selfattn/masks.py): each query row's key interval (two
    int64 per row; per sequence with padding or documents) and the documents' ids (an int64 per key and
    sequence). FLOPs and mask density are counted from these tensors, before the full guard can run."""
    if point.mask != "none":  # a mask function's kept boolean mask (or tiles), beside its intervals
        from selfattn.mods.memory import dense_mask_bytes

        return dense_mask_bytes(point) + 2 * 8 * point.batch * point.q_len_resolved
    if point.window is None and not point.masks_per_sequence:
        return 0  # causal or none: closed forms, nothing allocated
    sequences = point.batch if point.masks_per_sequence else 1
    ids = point.batch * point.seq_len * 8 if point.documents is not None else 0
    return 2 * 8 * sequences * point.q_len_resolved + ids


def before_counting(point: Point) -> int:
    """Bytes beyond its call's own peak that the point needs at the least, from closed forms alone: its inputs and
    its mask geometry, alive together while it runs. The guard's first pass, before anything that grows with the
    point is made (guard.py, with the call's predicted peak added); the full guard then adds the accuracy pass and
    judges the time."""
    return input_bytes(point) + mask_bytes(point)


def nominal_peak_tflops(device: str, precision: str) -> float:
    if device == "cuda":
        return NOMINAL_CUDA_TFLOPS
    return NOMINAL_CPU_TFLOPS[ELEMENT_BYTES[precision]]


def predict_call_s(point: Point, peak_tflops: float, resolved: Any) -> float:
    """Predicted seconds of one call: FLOPs over the peak times the back end's efficiency (a scope with no back end:
    its own), or, where a back end declares its speed on the point's device type (contract.Speed), that speed's
    fixed seconds + FLOPs / rate. `resolved` as for predict_mem_bytes."""
    scope, peak = declared(point), max(peak_tflops, 1e-6) * 1e12
    if not scope.attention:
        return point_flops(point) / (peak * scope.efficiency)
    speed = resolved.backend.speed_on(str(point.device).split(":")[0])
    if speed is not None:
        return float(speed.call_s(point_flops(point)))
    return point_flops(point) / (peak * resolved.backend.efficiency)


def after_warmup_s(device: str, call_s: float, timing_s: float, precision: str = "fp32") -> float:
    """Seconds of calls a point still makes after its warm-up call: the memory call (a CPU's
    allocator profile, tf32's check), then every call the timer makes (do_bench's estimate and
    warm-up included; timing.plan)."""
    from selfattn.measure.timing import plan

    return (point_calls(device, precision) - 1) * call_s + plan(device, call_s, timing_s).seconds(call_s)


def predict_point_s(point: Point, peak_tflops: float, timing_s: float, rows: int, resolved: Any) -> float:
    """Predicted seconds of the whole point: drawing its inputs, its warm-up and memory calls, the
    timer's calls, the accuracy pass. `resolved` as for predict_mem_bytes."""
    from selfattn.measure.device import resolve_device

    call_s = predict_call_s(point, peak_tflops, resolved)
    # The accuracy and stability pass: about two calls restricted to the `rows` sampled rows
    # (float64 reference, own-precision stability with its backward).
    accuracy_s = 2 * call_s * min(1.0, rows / point.q_len_resolved)
    after_s = after_warmup_s(resolve_device(point.device), call_s, timing_s, point.precision)
    return input_draw_s(point, rows) + call_s + after_s + accuracy_s
