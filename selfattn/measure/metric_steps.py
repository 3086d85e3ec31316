"""The metrics: one registered function per metric, its columns declared where it is defined.

    @measures("stability", columns={"logit_std": float, ...}, after="grad_err_bound",
              applies=lambda m: m.workload.stability_inputs is not None)
    def stability(m: Measured) -> dict[str, Any]: ...

A metric is one function (tritonbench's `register_metric` is the model). `measures` declares:
- its columns and their types (float, int, bool or str): results.csv's columns are derived from these
  (selfattn/results.py), `run_stage` refuses a column the declaration lacks, and all stay empty when it
  does not run;
- `after`: the column its columns follow in results.csv (a mapping places single columns elsewhere); a new
  metric's go last;
- `chosen`: named in the `metrics` config key (False: measured wherever it applies: rope_shift, fp8);
- `applies`: when it measures anything; `stage`: where in measure_point it runs:
  - BEFORE_TIMER: on the timed calls' threads, just before the timer (memory: its call's time also plans the timer);
  - AFTER_TIMER: with the timer's median (traffic: bytes over time);
  - WARMUP_OUTPUT: on the warm-up's output, before it is dropped (accuracy: against the verdict's reference);
  - AFTER_VERDICT: after the verdict, single-threaded on a CPU (stability, permutation, path length, rope, fp8);
  - EVERY_THREAD: after the verdict on every thread (a compiled back end's permutation check at the point's
    shape, which reuses the point's compiled code).
A second function for a declared metric (`measures(name)` without columns) measures it at another stage.

The registry is read without torch (selfattn/metrics.py: the runner's config checks, the analysis, the row
schema), so this module imports torch and the measurements only inside the functions that measure.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from selfattn.fp8_formats import fp8_format
from selfattn.measure.timing_options import TimingOptions  # torch-free: a Measured's default
from selfattn.scopes import SCOPES

if TYPE_CHECKING:
    import torch

    from selfattn.backends.resolved import Resolved
    from selfattn.measure.budget import Budget
    from selfattn.measure.workload import Result, Workload
    from selfattn.point import Point

BEFORE_TIMER, AFTER_TIMER, WARMUP_OUTPUT, AFTER_VERDICT, EVERY_THREAD = (
    "before_timer", "after_timer", "warmup_output", "after_verdict", "every_thread")
STAGES = (BEFORE_TIMER, AFTER_TIMER, WARMUP_OUTPUT, AFTER_VERDICT, EVERY_THREAD)
COLUMN_TYPES = (float, int, bool, str)


@dataclass
class Measured:
    """What measure_point's steps made, as the metrics read it."""

    point: Point
    device: str
    dtype: torch.dtype
    budget: Budget
    resolved: Resolved
    workload: Workload
    sampled_queries: torch.Tensor
    plan_call_s: float  # the timer's estimate of one call (the memory call lowers it when faster)
    median_ms: float = 0.0  # the timer's median, once timed
    checked: Result | None = None  # the warm-up's sampled output (dropped after WARMUP_OUTPUT)
    reference: Result | None = None  # the verdict's float64 reference of the same rows, when it made one
    notes: list[str] = field(default_factory=list)  # for the row's `note`
    fresh: Any = None  # the inputs' refresher of a judged scope (selfattn/measure/fresh.py), None elsewhere
    timed_tampered: str = ""  # how the back end wrote into its inputs during the timed calls (fresh.py's finish)
    impossible: str = ""  # why the time is below the device's physical floor (floor.py), "" when it is not
    timing: TimingOptions = field(default_factory=TimingOptions)  # the `timing` section: mode and L2 state


Measure = Callable[[Measured], dict[str, Any]]


@dataclass(frozen=True)
class Metric:
    """A metric's declaration: the row columns it fills and their types (all empty when it does not run)."""

    name: str
    columns: Mapping[str, type]
    chosen: bool = True  # named in `metrics` (False: measured whenever it applies)
    after: Mapping[str, str] = field(default_factory=dict)  # column -> the column it follows in results.csv


@dataclass(frozen=True)
class Registered:
    metric: str  # the declaration it fills
    stage: str
    applies: Callable[[Measured], bool]
    measure: Measure


DECLARED: dict[str, Metric] = {}  # name -> declaration, in the order declared (the `metrics` cell's order)
REGISTERED: list[Registered] = []


def measures(metric: str, *, columns: Mapping[str, type] | None = None, after: str | Mapping[str, str] | None = None,
             chosen: bool = True, stage: str = AFTER_VERDICT,
             applies: Callable[[Measured], bool] = lambda m: True) -> Callable[[Measure], Measure]:
    """Register the decorated function as `metric`'s measurement at `stage`, where `applies`; with `columns`,
    declare the metric (its columns, their place `after` and whether `metrics` chooses it)."""
    if stage not in STAGES:
        raise ValueError(f"stage: expected one of {', '.join(STAGES)}, got {stage!r}")
    if columns is not None:
        _declare(Metric(metric, dict(columns), chosen, _places(columns, after)))
    elif metric not in DECLARED:
        raise ValueError(f"metric: {metric!r} is not declared (give its columns where its first function is registered)")

    def register(fn: Measure) -> Measure:
        REGISTERED.append(Registered(metric, stage, applies, fn))
        return fn

    return register


def _places(columns: Mapping[str, type], after: str | Mapping[str, str] | None) -> dict[str, str]:
    """`after` as column -> the column it follows: a name places the first column, the rest follow it."""
    if after is None:
        return {}
    if isinstance(after, str):
        return {next(iter(columns)): after}
    if unknown := set(after) - set(columns):
        raise ValueError(f"after: {sorted(unknown)} are not columns of the metric")
    return dict(after)


def _declare(metric: Metric) -> None:
    if not metric.name.isidentifier():
        raise ValueError(f"metric: a name is an identifier (a `metrics` list item), got {metric.name!r}")
    if metric.name in DECLARED:
        raise ValueError(f"metric: {metric.name!r} is declared twice")
    if not metric.columns:
        raise ValueError(f"metric {metric.name}: columns: declare at least one")
    for column, kind in metric.columns.items():
        if kind not in COLUMN_TYPES:
            raise ValueError(f"metric {metric.name}: column {column!r}: expected a type of "
                             f"{', '.join(t.__name__ for t in COLUMN_TYPES)}, got {kind!r}")
        if owner := next((m.name for m in DECLARED.values() if column in m.columns), None):
            raise ValueError(f"metric {metric.name}: column {column!r} is metric {owner}'s already")
    DECLARED[metric.name] = metric


def run_stage(stage: str, m: Measured, chosen: Iterable[str]) -> dict[str, Any]:
    """The columns of every registered measurement of `stage` whose metric is chosen (or never chosen) and applies."""
    chosen = frozenset(chosen)
    columns: dict[str, Any] = {}
    for entry in REGISTERED:
        declared = DECLARED[entry.metric]
        if entry.stage != stage or (declared.chosen and entry.metric not in chosen) or not entry.applies(m):
            continue
        values = entry.measure(m)
        if undeclared := set(values) - set(declared.columns):
            raise ValueError(f"metric {entry.metric}: columns {sorted(undeclared)} are not declared")
        columns.update(values)
    return columns


@measures("memory", columns={"peak_mem_bytes": int, "peak_alloc_bytes": int}, after="block_mask_s",
          stage=BEFORE_TIMER)
def memory(m: Measured) -> dict[str, Any]:
    """The memory call's peak (RSS growth on a CPU, the allocator's peak on CUDA); on a CPU, one profiled call
    for the allocator's exact peak."""
    from selfattn.measure.memory import alloc_peak_bytes, measure_peak

    peak, call_s = measure_peak(m.fresh.then(m.workload.call) if m.fresh else m.workload.call, m.device)
    m.plan_call_s = min(m.plan_call_s, call_s)
    return {"peak_mem_bytes": peak,
            "peak_alloc_bytes": peak if m.device == "cuda" else alloc_peak_bytes(m.workload.call)}


@measures("accuracy", columns={"accuracy_rows": int, "max_abs_err": float, "rel_rms_err": float,
                               "nonfinite_frac": float, "grad_max_abs_err": float, "grad_rel_rms_err": float},
          after="note", stage=WARMUP_OUTPUT, applies=lambda m: m.checked is not None)
def accuracy(m: Measured) -> dict[str, Any]:
    """The warm-up's sampled rows (and gradients) against the float64 reference of the same rows (the
    verdict's, when it computed one)."""
    from selfattn.measure.accuracy import compare

    assert m.checked is not None  # applies
    reference = m.workload.reference() if m.reference is None else m.reference
    errors = compare(m.checked.out_rows, reference.out_rows)
    columns: dict[str, Any] = {"accuracy_rows": len(m.sampled_queries), "max_abs_err": errors.max_abs_err,
                               "rel_rms_err": errors.rel_rms_err, "nonfinite_frac": errors.nonfinite_frac}
    if m.checked.grads is not None and reference.grads is not None:
        grad_errors = compare(m.checked.grads, reference.grads)
        columns.update(grad_max_abs_err=grad_errors.max_abs_err, grad_rel_rms_err=grad_errors.rel_rms_err)
    return columns


@measures("stability", columns={"logit_std": float, "softmax_entropy": float, "max_weight": float,
                                "saturated_frac": float, "grad_norm_q": float, "grad_norm_k": float,
                                "grad_norm_logits": float, "grad_nonfinite_frac": float},
          after="grad_err_bound", applies=lambda m: m.workload.stability_inputs is not None)  # generate, lstm, gru: none
def stability(m: Measured) -> dict[str, Any]:
    """Logit std, entropy, largest weight and gradient norms of the sampled rows, in the point's precision."""
    from selfattn.measure.stability import stability as stability_of

    assert m.workload.stability_inputs is not None  # applies
    q_rows, k, v, rows_cpu = m.workload.stability_inputs()
    found = stability_of(q_rows, k, v, rows_cpu, q_len=m.point.q_len_resolved, masks=m.workload.masks,
                         scale=m.point.scale_value, upstream_BHrD=m.workload.upstream_rows)
    return found.to_dict()


@measures("permutation", columns={"perm_max_abs_diff": float}, after="grad_nonfinite_frac",
          applies=lambda m: not m.resolved.compiles and SCOPES[m.point.scope].attention and m.point.score == "dot")
def permutation(m: Measured) -> dict[str, Any]:
    """Permutation equivariance on a short sequence (<= PERM_TOKENS tokens)."""
    import torch

    from selfattn.measure.permutation import permutation_max_abs_diff

    return {"perm_max_abs_diff": permutation_max_abs_diff(m.point, m.dtype, torch.device(m.device), m.resolved)}


@measures("permutation", stage=EVERY_THREAD, applies=lambda m: m.resolved.compiles)
def compiled_permutation(m: Measured) -> dict[str, Any]:
    """A compiled back end's check at the point's own size and shape: it reuses the point's compiled code.

    Where it compiles all the same (chunked, whose compiled block variants follow the mask: a window-masked
    block checked without the window is a whole block), the row's note says so and how long."""
    import torch

    from selfattn import compile as compile_cache
    from selfattn.measure.permutation import permutation_max_abs_diff

    graphs_before, started = compile_cache.graphs_compiled(), time.perf_counter()
    diff = permutation_max_abs_diff(m.point, m.dtype, torch.device(m.device), m.resolved, at_point_shape=True)
    if compiled_now := compile_cache.graphs_compiled() - graphs_before:
        m.notes.append(f"the permutation check compiled {compiled_now} more graph(s) "
                       f"({time.perf_counter() - started:.1f} s, outside compile_s)")
    return {"perm_max_abs_diff": diff}


@measures("traffic", columns={"bytes_moved": int, "gbps": float, "device_peak_gbps": float,
                              "device_peak_gbps_source": str},
          after={"bytes_moved": "device_peak_tflops", "device_peak_gbps_source": "device_peak_tflops_source"},
          stage=AFTER_TIMER)
def traffic(m: Measured) -> dict[str, Any]:
    """The bytes a call moves, the bandwidth its median implies, beside the device's measured copy bandwidth
    (measured again when the call beats it: a probe taken under load stays in the cache otherwise)."""
    from selfattn.measure.device import device_peak_gbps, peak_source
    from selfattn.measure.traffic import bytes_moved

    moved = bytes_moved(m.point)
    peak, source = (device_peak_gbps(m.device), peak_source(m.device)) if m.budget.measure_device_peak else (None, "nominal")
    gbps = moved / (m.median_ms * 1e-3) / 1e9 if m.median_ms > 0 else None
    if gbps and peak and gbps > peak:
        peak, source = device_peak_gbps(m.device, remeasure=True), peak_source(m.device)
    return {"bytes_moved": moved, "gbps": gbps, "device_peak_gbps": peak, "device_peak_gbps_source": source}


@measures("path_length", columns={"grad_by_distance": str, "grad_far_near_ratio": float},
          after="perm_max_abs_diff", applies=lambda m: SCOPES[m.point.scope].path_length)
def path_length(m: Measured) -> dict[str, Any]:
    """How the output's gradient decays with the distance to an input (float64, at the point's n and d_model)."""
    import torch

    from selfattn.measure.path_length import far_near_ratio, input_sensitivity, sensitivity_json

    sensitivity = input_sensitivity(m.point, torch.device(m.device), m.resolved)
    return {"grad_by_distance": sensitivity_json(sensitivity), "grad_far_near_ratio": far_near_ratio(sensitivity)}


@measures("rope_shift", columns={"rope_shift_max_abs_diff": float}, after="loss_curve", chosen=False,
          applies=lambda m: m.point.pos_enc == "rope")
def rope_shift(m: Measured) -> dict[str, Any]:
    """A logit depends on m - n only: q at m+s, k at n+s against q at m, k at n."""
    from selfattn.positions import rope_shift_max_abs_diff

    return {"rope_shift_max_abs_diff": rope_shift_max_abs_diff(m.point.head_dim, m.point.seq_len, dtype=m.dtype,
                                                               device=m.device, seed=m.point.seed)}


@measures("fp8", columns={"fp8_saturated_frac": float, "fp8_nonfinite_frac": float, "p_mass_err": float,
                          "raw_logit_saturated_frac": float, "raw_logit_nonfinite_frac": float},
          after="rope_shift_max_abs_diff", chosen=False,
          applies=lambda m: bool(fp8_format(m.point.precision)) and m.workload.stability_inputs is not None)
def fp8(m: Measured) -> dict[str, Any]:
    """Saturated and non-finite quantized values, P's lost mass and a raw cast's logits, on the sampled rows,
    by the point's resolved FP8 options."""
    from selfattn import fp8 as fp8_module

    assert m.workload.stability_inputs is not None  # applies
    q_rows, k, v, _ = m.workload.stability_inputs()
    return fp8_module.diagnostics(q_rows, k, v, scale=m.point.scale_value, options=m.resolved.options)
