"""The row schema of results.csv: one dataclass, one tidy row per sweep point.

Core columns are a contract (docs/architecture.md): more may be added, none renamed or removed.
Bump SCHEMA_VERSION when a column's meaning changes; readers refuse rows of a newer schema.
Units are in the names: milliseconds, bytes, FLOPs, seconds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
import json
from typing import Any, Mapping, Sequence

# 2: a row may leave out metrics (the `metrics` column says which ran, selfattn/metrics.py): an empty
# accuracy, stability, memory, permutation or traffic column can mean "not asked for". A row of schema
# 1 measured all of them.
SCHEMA_VERSION = 2
STATUSES = ("ok", "oom", "skipped_budget", "unsupported", "invalid", "error", "incorrect", "timeout", "crashed")
# What each status means and what to do about it: docs/usage.md#statuses. Only `ok` rows are results.
# A judged kernel's verdicts: `incorrect` (outside the point's tolerance, its inputs modified, a cached or
# unstable answer), `timeout` (past the point's time limit) and `crashed` (its process ended: an exit, an
# abort, a signal). These, and `error`, are failures a script should see (a non-zero exit); `oom`,
# `skipped_budget`, `unsupported` and `invalid` are refusals the sweep expects (the chapter measures where
# a back end runs out of memory; a grid crosses axes some back ends do not take).
FAILURE_STATUSES = ("error", "incorrect", "timeout", "crashed")


@dataclass
class Row:
    # outcome
    status: str = "error"  # one of STATUSES
    error: str = ""  # one line; empty when ok
    # what the point measured beyond its time (selfattn/metrics.py): "memory,accuracy,...", "none" for time
    # only; a metric not listed left its columns empty. Empty in a failed row (nothing measured).
    metrics: str = ""
    # the point (sweep axes)
    backend: str = ""  # the back end's name (a path plugin's: its function's, see backend_path)
    backend_source: str = ""  # builtin | entry_point | path (selfattn/backends/discovery.py)
    backend_path: str = ""  # a path plugin's module:function as typed; empty otherwise
    # a plugin's memory prediction (the guard's): declared by it, or assumed (naive's model, the
    # materializing one, plus converted copies of q, k, v and out); built-ins: declared
    mem_model: str = ""
    backend_defaulted: str = ""  # the facts a plugin left to the harness: "mem_model,efficiency,kernel_label"
    kernel: str = ""  # the back end's variant: sdpa kernel, chunk sizes, upcast softmax, ...
    backend_options: str = ""  # JSON of the back end's options as given
    precision: str = ""
    device: str = ""  # cpu | cuda
    device_name: str = ""
    mode: str = ""
    scope: str = ""
    batch: int | None = None
    heads: int | None = None
    kv_heads: int | None = None  # K/V heads (grouped-query attention; = heads for plain multi-head)
    q_len: int | None = None
    seq_len: int | None = None
    head_dim: int | None = None
    d_model: int | None = None
    causal: bool | None = None
    window: int | None = None  # sliding window (keys), empty = none; a pair [left, right] is its text "[63, 0]"
    pad_frac: float | None = None  # mean fraction of keys that are right padding
    documents: int | None = None  # packed documents per sequence, empty = one
    new_tokens: int | None = None  # scope=generate: tokens generated after a prompt of seq_len tokens
    kv_cache: bool | None = None  # scope=generate: with a KV-cache, or recomputing the prefix every step
    steps: int | None = None  # scope=train: optimizer steps
    lr: float | None = None  # scope=train: learning rate
    mask_density: float | None = None  # fraction of the q_len x seq_len (query, key) pairs the masks let through
    scale: str = ""  # "auto" | "none" | number, as configured
    scale_value: float | None = None  # the factor actually applied to the logits
    score: str = ""  # dot | additive (empty in older files: dot)
    pos_enc: str = ""  # none | sinusoidal | learned | rope (empty in older files: none)
    input_std: float | None = None
    input_outliers: float | None = None  # probability of an extra N(0, outlier_std^2) term per entry of Q, K, V
    outlier_std: float | None = None
    softcap: float | None = None  # logit soft-cap c (s -> c tanh(s / c)), empty = none
    alibi: bool | None = None  # ALiBi's per-head distance bias (empty in older files: false)
    sink: float | None = None  # a sink logit in every softmax's denominator, empty = none
    mask: str = ""  # a mask function (selfattn/mods/): a built-in's name or a plugin's as typed; empty in older files: none
    mask_options: str = ""  # JSON of its parameters
    score_mod: str = ""  # a score function, likewise
    score_mod_options: str = ""  # JSON of its parameters
    seed: int | None = None
    # time (median and 20th/80th percentiles over time_samples timed calls)
    time_ms: float | None = None
    time_ms_p20: float | None = None
    time_ms_p80: float | None = None
    time_samples: int | None = None
    timer: str = ""  # what timed the calls: cpu_fresh (CPU, a call per sample, fresh inputs between; cpu_blocks or
    # torch_timer in older rows and for scopes without fresh inputs), do_bench or cuda_events (CUDA)
    # the samples themselves: a JSON list of per-call ms, in the order measured (past timing.MAX_KEPT_SAMPLES,
    # that many evenly spaced order statistics), for analysis/ab.py's bootstrap and rank test
    time_samples_ms: str = ""
    # CUDA (selfattn/measure/kernel_time.py): which time time_ms holds ("call": CUDA events around each Python call;
    # "kernel": the call's CUDA graph replayed, no host in between; `timing.mode`; a CPU row: "call"), both medians,
    # the kernel's percentiles, call - kernel (the host's launch path), and why the kernel time is missing where it is
    timing_mode: str = ""
    call_time_ms: float | None = None
    kernel_time_ms: float | None = None
    kernel_time_ms_p20: float | None = None
    kernel_time_ms_p80: float | None = None
    launch_overhead_ms: float | None = None
    kernel_time_note: str = ""
    l2: str = ""  # "cold" (CUDA: the L2 flushed before every timed call and replay) or "warm" (no flush); `timing.l2`
    # noise (selfattn/measure/noise.py): (p80 - p20) / median, others' share of the CPU during the timed
    # calls (empty where /proc is missing), and whether either passed its limit (the reason in `noise`)
    time_spread: float | None = None
    other_cpu_frac: float | None = None
    noisy: bool | None = None
    noise: str = ""
    # this process's CPU seconds per wall second over the timed calls (all threads; selfattn/measure/timing.py): a
    # CPU row below timing.IDLE_CPU_FRAC waited rather than computed (a sleep), and is noisy with the reason
    own_cpu_frac: float | None = None
    # CUDA, through NVML over the timed window (selfattn/measure/gpu_state.py): median SM and memory clocks, the
    # largest power and temperature, every throttle reason seen, whether one slowed the clocks (then noisy), and
    # why none was sampled (nvidia-ml-py missing)
    gpu_sm_clock_mhz: float | None = None
    gpu_mem_clock_mhz: float | None = None
    gpu_power_w: float | None = None
    gpu_temp_c: float | None = None
    gpu_throttle: str = ""
    throttled: bool | None = None
    gpu_state: str = ""
    # compiled back ends (flex, compile=true): the first call, compilation included, timed once and
    # apart from time_ms; whether it compiled new code (false: reused what an earlier point of this
    # process compiled, so compile_s is one call); flex: building its block mask, also apart
    compile_s: float | None = None
    recompiled: bool | None = None
    block_mask_s: float | None = None
    # memory beyond the inputs
    peak_mem_bytes: int | None = None  # the process's view: peak RSS growth on a CPU
    peak_alloc_bytes: int | None = None  # peak bytes through torch's allocator, kernel buffers included (exact)
    predicted_mem_bytes: int | None = None
    predicted_time_ms: float | None = None
    # work
    flops: float | None = None
    tflops: float | None = None
    device_peak_tflops: float | None = None
    # memory traffic: the least bytes a call reads and writes (selfattn/measure/traffic.py), the
    # bandwidth that implies, and the device's measured copy bandwidth; flops / bytes_moved is the
    # row's arithmetic intensity (its place on the roofline)
    bytes_moved: int | None = None
    gbps: float | None = None
    device_peak_gbps: float | None = None
    # where the two peaks came from: "measured" (by this process), "cache <file> (measured <UTC date>)"
    # (the probe cache of selfattn/measure/probes.py), "nominal" (budget.measure_device_peak=false)
    device_peak_tflops_source: str = ""
    device_peak_gbps_source: str = ""
    # the physical floor (selfattn/measure/floor.py): max(flops / matmul peak, bytes_moved / bandwidth) in ms from the
    # measured peaks, and which term set it ("flops" | "bytes"); a time below floor_ms / floor.FLOOR_SLACK is incorrect
    floor_ms: float | None = None
    floor_of: str = ""
    # CUDA: % of the spec sheet's dense peak for the row's dtype and of its memory bandwidth (mfu_pct, bw_pct), with
    # the sheet's model and numbers (selfattn/measure/spec_peaks.py); spec_gpu "unknown: <name>" for a GPU not there
    spec_gpu: str = ""
    spec_tflops: float | None = None
    spec_gbps: float | None = None
    mfu_pct: float | None = None
    bw_pct: float | None = None
    tokens_per_s: float | None = None  # scope=generate: new_tokens / time of the whole loop
    kv_cache_bytes: int | None = None  # K and V of seq_len tokens: 2 x batch x kv_heads x seq_len x head_dim x element size
    # the precision the kernel really computed in: `precision`, except "fp32" for a tf32 row whose
    # kernel ignores the TF32 flag (its output is bit-identical to fp32's, so it is not a tf32 result)
    computed_as: str = ""
    note: str = ""  # one line on what is unusual about an ok row (tf32 ignored, TFLOP/s above the peak)
    # accuracy against the float64 reference, on sampled query rows
    accuracy_rows: int | None = None
    max_abs_err: float | None = None
    rel_rms_err: float | None = None
    nonfinite_frac: float | None = None
    grad_max_abs_err: float | None = None
    grad_rel_rms_err: float | None = None
    # the correctness verdict's bounds (selfattn/measure/verdict.py): the largest max_abs_err (grad_max_abs_err)
    # the row may have, K x the plain same-dtype reference's error + atol; empty where the scope is not judged
    err_bound: float | None = None
    grad_err_bound: float | None = None
    # numerical stability, same rows, the point's own precision
    logit_std: float | None = None
    softmax_entropy: float | None = None
    max_weight: float | None = None
    saturated_frac: float | None = None
    grad_norm_q: float | None = None
    grad_norm_k: float | None = None
    grad_norm_logits: float | None = None  # median over sampled rows of ||dloss/dlogits_row|| (softmax input)
    grad_nonfinite_frac: float | None = None
    # max |attn(PQ, PK, PV) - P attn(Q, K, V)| over a random token permutation P (0 without a mask)
    perm_max_abs_diff: float | None = None
    # path length (scope=layer, lstm, gru; selfattn/measure/path_length.py): ||d y_{n-1} / d x_{n-1-k}|| in
    # float64 at init, averaged over seeded draws: a JSON list of [k, norm] for k = 0, 1, 2, 4, ..., n-1,
    # and the norm at k = n-1 over the norm at k = 1
    grad_by_distance: str = ""
    grad_far_near_ratio: float | None = None
    # scope=train (selfattn/train/loop.py): the held-out batch's loss at 25/50/75/100% of the steps, its final
    # accuracy, the first step whose last 10 batches average >= 90% accuracy (empty: never), the steps whose loss
    # or gradient was not finite (their update skipped; fp16: GradScaler's overflowed scales count too), those
    # whose loss itself was not (the forward overflowed), and the training batches' curve (`encode_curve`); a
    # train row's logit_std, max_weight and saturated_frac are its query row's at the end, time_ms its median step
    loss_at_25pct: float | None = None
    loss_at_50pct: float | None = None
    loss_at_75pct: float | None = None
    loss_final: float | None = None
    final_accuracy: float | None = None
    steps_to_target_acc: int | None = None
    nonfinite_steps: int | None = None
    nonfinite_loss_steps: int | None = None
    scaler_startup_skips: int | None = None  # fp16: of nonfinite_steps, GradScaler lowering its initial scale (loop.py)
    loss_curve: str = ""
    # pos_enc=rope: max |logit(q at m+s, k at n+s) - logit(q at m, k at n)| (selfattn/positions.py)
    rope_shift_max_abs_diff: float | None = None
    # precision=fp8_* (selfattn/fp8.py), on the sampled rows: quantized Q, K, V at the format's max and non-finite;
    # mean |1 - sum of a row of dequantized P|; a raw cast of the logits, saturated and non-finite
    fp8_saturated_frac: float | None = None
    fp8_nonfinite_frac: float | None = None
    p_mass_err: float | None = None
    raw_logit_saturated_frac: float | None = None
    raw_logit_nonfinite_frac: float | None = None
    # harness cost: seconds spent in warm-up + timed calls, and the whole job's wall time
    measure_s: float | None = None
    job_wall_s: float | None = None
    point_wall_s: float | None = None  # the whole measure_point call: measure_s + inputs, accuracy, stability
    jobs_sharing_device: int | None = None
    # environment: enough to tell two GPUs of the same name apart in a merged table
    device_capability: str = ""
    device_mem_bytes: int | None = None
    driver_version: str = ""
    cuda_version: str = ""
    cpu_model: str = ""
    num_threads: int | None = None
    hostname: str = ""
    torch_version: str = ""
    git_sha: str = ""
    timestamp: str = ""  # ISO 8601, UTC
    schema_version: int = SCHEMA_VERSION
    # bookkeeping for resume: a stable hash of the point (sweep axes + back end options)
    point_id: str = ""
    sweep_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(Row))


def encode_curve(losses: Sequence[float], accuracies: Sequence[float]) -> str:
    """The `loss_curve` cell: JSON [[step, loss, accuracy], ...] for steps 1.. (floats as repr: exact)."""
    return json.dumps([[step, float(loss), float(acc)] for step, (loss, acc) in enumerate(zip(losses, accuracies), 1)],
                      separators=(",", ":"))


def decode_curve(text: Any) -> list[tuple[int, float, float]]:
    """(step, loss, accuracy) triples of a `loss_curve` cell; [] for an empty or missing one."""
    if not isinstance(text, str) or not text.strip():
        return []
    return [(int(step), float(loss), float(acc)) for step, loss, acc in json.loads(text)]


def rank(row: Mapping[str, Any]) -> tuple[bool, str]:
    """The one rule for two rows of the same point: a successful row beats a failed one, then
    the newer wins (ISO 8601 UTC timestamps sort as text). results.csv and merged reports both use it."""
    return (row.get("status") == "ok", str(row.get("timestamp") or ""))
