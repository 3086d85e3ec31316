"""Analytic predictions made before anything is allocated: peak memory and time of a point.

The budget guard uses them to skip points that cannot fit; `predicted_mem_bytes` is also a
column beside the measured `peak_mem_bytes`, so the model itself is checked on every row.

Memory is "beyond the inputs", like the measurement: everything one timed call allocates,
its output (and, for fwd_bwd, the gradients) included; Q, K, V or X, the layer's weights and
the upstream gradient exist before the call and are not counted. Counts follow each back
end's code (selfattn/backends/*.py): which (q_len x seq_len) tensors are alive at once.
"""

from __future__ import annotations

from typing import Any

import torch

from selfattn.measure.flops import point_flops
from selfattn.point import Point

ELEMENT_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2}
FP32 = 4
FP64 = 8

# Fraction of the measured matmul peak each back end is assumed to reach, for the time guard
# only: it stops points that would take far too long, it does not predict results. Optimistic
# on purpose (a skipped point that would have fit is a lost measurement; a point that runs 2x
# longer than predicted is only slow): fused SDPA is mostly matmul, naive and the chunked loop
# add memory-bound softmax passes. A prediction that is still far off is caught by the second
# guard in run.py, on the measured warm-up call. Compare `predicted_time_ms` with `time_ms` in
# any results.csv to see how far off these are on a given device.
EFFICIENCY = {"naive": 0.6, "sdpa": 0.9, "chunked": 0.6}
DEFAULT_EFFICIENCY = 0.5
# Without a measured peak (Budget.measure_device_peak=False): nominal TFLOP/s by element size,
# deliberately low for a CPU (fp16/bf16 matmuls are slow on CPUs without AMX).
NOMINAL_CPU_TFLOPS = {8: 0.02, 4: 0.05, 2: 0.002}
NOMINAL_CUDA_TFLOPS = 50.0
# Non-timed calls of a point: warm-up, the memory measurement and the timer's own estimate.
UNTIMED_CALLS = 3
# Per-thread scratch of torch's CPU flash kernel: a q_split x kv_split fp32 block and row stats.
CPU_FLASH_Q_SPLIT = 256
CPU_FLASH_KV_SPLIT = 512


def element_bytes(precision: str) -> int:
    if precision not in ELEMENT_BYTES:
        raise ValueError(f"precision: expected one of {', '.join(ELEMENT_BYTES)}, got {precision!r}")
    return ELEMENT_BYTES[precision]


def input_bytes(point: Point) -> int:
    """Bytes of what exists before a call: Q, K, V (or X and the layer weights), upstream grad."""
    s = element_bytes(point.precision)
    b, h, d = point.batch, point.heads, point.head_dim
    q_len, seq_len = point.q_len_resolved, point.seq_len
    if point.scope == "layer":
        total = (b * seq_len * point.d_model + 4 * point.d_model * point.d_model) * s
        upstream = b * seq_len * point.d_model * s
    else:
        total = b * h * (q_len + 2 * seq_len) * d * s
        upstream = b * h * q_len * d * s
    return total + (upstream if point.mode == "fwd_bwd" else 0)


def _naive_bytes(point: Point, options: dict[str, Any], scores: int, out: int, grads: int) -> int:
    """(q_len x seq_len) per head: two live at once forward (scores and their scaled copy, then
    scores and weights), three in backward (saved weights, their gradient, the scores' gradient)."""
    s = element_bytes(point.precision)
    mask = point.q_len_resolved * point.seq_len * (1 + s) if point.causal else 0  # bool keep + additive mask
    upcast = bool(options.get("upcast_softmax", False)) and point.precision not in ("fp32", "tf32")
    if point.mode == "fwd":
        if upcast:  # scores (s) + fp32 copy (4) + fp32 softmax (4), then softmax (4) + weights (s)
            per = max(s + 2 * FP32, 2 * s + FP32)
        else:
            per = 2 * s
        return scores * per + mask + out
    per = 3 * s + (2 * FP32 if upcast else 0)
    return scores * per + mask + out + grads


def _sdpa_bytes(point: Point, options: dict[str, Any], device: str, scores: int, out: int, grads: int) -> int:
    """Fused kernels keep O(n) per head; the math kernel materializes like naive."""
    s = element_bytes(point.precision)
    b, h, d = point.batch, point.heads, point.head_dim
    q_len, seq_len = point.q_len_resolved, point.seq_len
    kernel = options.get("kernel", "auto")
    math_kernel = kernel == "math" or (device == "cuda" and kernel == "auto" and point.precision == "fp64")
    # A non-square causal mask goes to SDPA as torch's lower-right CausalBias: fused CUDA kernels
    # take it natively; elsewhere torch materializes it (bool, then an additive mask in the dtype).
    native_mask = device == "cuda" and not math_kernel
    mask = q_len * seq_len * (1 + s) if point.causal and q_len != seq_len and not native_mask else 0
    if math_kernel:  # scaled q, k copies + scores + weights (fwd); + their gradients (bwd)
        per = 2 * s if point.mode == "fwd" else 4 * s
        return scores * per + mask + 2 * out + (grads if point.mode == "fwd_bwd" else 0)
    lse = b * h * q_len * FP32
    if device == "cuda":
        scratch = 0  # flash/efficient keep their tiles in shared memory
    else:
        scratch = torch.get_num_threads() * (CPU_FLASH_Q_SPLIT * (CPU_FLASH_KV_SPLIT + d + 2)) * FP32
    if point.mode == "fwd":
        return out + lse + scratch + mask
    # backward: (B, L, H, D) transposed copies of q, k, v, out, grad_out and fp32 accumulators
    copies = b * h * (2 * q_len + 3 * seq_len) * d * s
    return out + lse + grads + copies + 2 * scratch + mask


def _chunked_bytes(point: Point, options: dict[str, Any], out: int, grads: int) -> int:
    """O(n d) copies plus a few q_chunk x kv_chunk blocks per (batch, head); never O(n^2)."""
    s = element_bytes(point.precision)
    low = s < FP32  # fp16/bf16 compute in fp32 copies and cast the results back
    c = FP32 if low else s
    bh, d = point.batch * point.heads, point.head_dim
    q_len, seq_len = point.q_len_resolved, point.seq_len
    q_chunk = min(int(options.get("q_chunk") or 256), q_len)
    kv_chunk = min(int(options.get("kv_chunk") or 512), seq_len)
    block = bh * q_chunk * kv_chunk * c  # one block of scores for every (batch, head)
    q_c, kv_c, rows_c = bh * q_len * d * c, bh * seq_len * d * c, bh * q_len * c
    # forward: the scaled q (and its fp32 cast), fp32 k/v casts, output, log-sum-exp,
    # two score blocks alive across an iteration, the block's accumulator, the output cast back
    fwd = q_c * (2 if low else 1) + (2 * kv_c if low else 0) + q_c + rows_c + 2 * block + bh * q_chunk * d * c
    fwd += out if low else 0
    if point.mode == "fwd":
        return fwd
    # backward: saved output + lse, scaled q, fp32 casts of k, v and dO, delta; then either the
    # dq/dk/dv accumulators (kept per block) with three blocks (P, dP/dS, one in flight), or, at
    # the end, those accumulators and their concatenation; the gradients cast back
    saved = q_c + rows_c + (out if low else 0)
    acc = q_c + 2 * kv_c
    bwd = saved + q_c + ((2 * kv_c + q_c) if low else 0) + rows_c + max(acc + 3 * block, 2 * acc)
    bwd += grads if low else 0
    return max(fwd, bwd)


def _layer_bytes(point: Point) -> int:
    """Projections around the core: q, k, v heads, the merged heads and the output projection
    (forward); fwd_bwd keeps them for backward and adds their gradients and the weights' grads."""
    s = element_bytes(point.precision)
    act = point.batch * point.seq_len * point.d_model * s
    if point.mode == "fwd":
        return 6 * act
    return 12 * act + 4 * point.d_model * point.d_model * s


def predict_mem_bytes(point: Point, options: dict[str, Any] | None = None) -> int:
    """Predicted peak bytes of one call of `point` beyond its inputs (see the module docstring).

    `options` are the back end's resolved options (chunk sizes, kernel); by default the back
    end's defaults for the point's device and dtype.
    """
    from selfattn.measure.device import resolve_device

    device = resolve_device(point.device)
    if options is None:
        options = _default_options(point, device)
    s = element_bytes(point.precision)
    b, h, d = point.batch, point.heads, point.head_dim
    q_len, seq_len = point.q_len_resolved, point.seq_len
    scores = b * h * q_len * seq_len  # elements of one (q_len x seq_len) tensor over all heads
    out = b * h * q_len * d * s
    grads = b * h * (q_len + 2 * seq_len) * d * s  # dq, dk, dv
    if point.backend == "sdpa":
        core = _sdpa_bytes(point, options, device, scores, out, grads)
    elif point.backend == "chunked":
        core = _chunked_bytes(point, options, out, grads)
    else:  # naive, and the conservative guess for any back end without a model here
        core = _naive_bytes(point, options, scores, out, grads)
    if point.scope == "layer":
        core += _layer_bytes(point)
    return int(core)


def _default_options(point: Point, device: str) -> dict[str, Any]:
    try:
        from selfattn.backends import resolve_options
        from selfattn.precision import DTYPES

        return resolve_options(point.backend, dict(point.backend_options), device, DTYPES[point.precision])
    except Exception:  # unknown back end or bad options: measure_point reports them; predict generically
        return dict(point.backend_options)


def accuracy_bytes(point: Point, rows: int) -> int:
    """Peak of the accuracy and stability pass: float64 and own-precision scores of the sampled rows,
    with their gradients, plus float64 copies of the inputs."""
    s = element_bytes(point.precision)
    sampled = point.batch * point.heads * min(rows, point.q_len_resolved) * point.seq_len
    copies = input_bytes(point) * (FP64 // s)
    return sampled * (3 * FP64 + 3 * s) + copies


def nominal_peak_tflops(device: str, precision: str) -> float:
    if device == "cuda":
        return NOMINAL_CUDA_TFLOPS
    return NOMINAL_CPU_TFLOPS[element_bytes(precision)]


def predict_call_s(point: Point, peak_tflops: float) -> float:
    """Predicted seconds of one call: FLOPs over the peak times the back end's efficiency."""
    efficiency = EFFICIENCY.get(point.backend, DEFAULT_EFFICIENCY)
    return point_flops(point) / (max(peak_tflops, 1e-6) * 1e12 * efficiency)


def predict_point_s(point: Point, peak_tflops: float, timing_s: float, min_samples: int, rows: int) -> float:
    """Predicted seconds of the whole point: untimed calls, timed calls, accuracy pass."""
    call_s = predict_call_s(point, peak_tflops)
    timed_s = max(timing_s, min_samples * call_s)
    # The accuracy and stability pass: about two calls restricted to the `rows` sampled rows
    # (float64 reference, own-precision stability with its backward).
    return UNTIMED_CALLS * call_s + timed_s + 2 * call_s * min(1.0, rows / point.q_len_resolved)


