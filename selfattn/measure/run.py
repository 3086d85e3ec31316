"""measure_point: one point in, one Row out, whatever happens.

Order matters: validate -> resolve dtype and options -> predict and guard (nothing allocated
yet) -> build inputs -> the back end's one-time set-up (flex's block mask, timed apart) ->
warm-up (its output feeds the accuracy check; for a compiled back end it compiles, timed apart
as compile_s, and a second call gives the guard the compiled call's time) -> memory call -> timed
calls -> the verdict (selfattn/measure/checks.py: inputs unchanged, the warm-up's output and gradients
within the tolerance of selfattn/measure/verdict.py, the last timed call's output, one untimed call on a
second input; `incorrect` when one misses, the row's time and errors kept) -> accuracy and stability on
the sampled queries -> the permutation check (a compiled back
end's at the point's own shape, so it runs the code compiled for the point). Failures become the row's status through
selfattn.measure.failures (oom, unsupported, invalid, error; memory released either way).

`metrics` (selfattn/metrics.py) chooses which of the memory call, the accuracy and stability passes,
the permutation check and the traffic columns run; the time is always measured, and a metric left
out costs nothing and leaves its columns empty. The verdict is not a metric: it runs whatever `metrics` says.
"""

from __future__ import annotations

import functools
import time
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Mapping

import torch

from selfattn.errors import Unsupported
from selfattn import compile as compile_cache
from selfattn.measure import checks, failures
from selfattn.measure import fresh as fresh_inputs
from selfattn.measure.accuracy import compare
from selfattn.measure import boundary
from selfattn.measure import floor as physical_floor
from selfattn.measure import gpu_state, kernel_time, spec_peaks
from selfattn.measure.budget import Budget, over_budget
from selfattn.measure.device import device_peak_gbps, device_peak_tflops, environment, peak_source, resolve_device
from selfattn.measure.flops import mask_density, point_flops
from selfattn.measure.traffic import bytes_moved
from selfattn.measure.memory import alloc_peak_bytes, free_bytes, measure_peak, release_memory
from selfattn.measure.path_length import PATH_SCOPES, far_near_ratio, input_sensitivity, sensitivity_json
from selfattn.measure.permutation import POINT_SHAPE_CALLS, permutation_max_abs_diff, point_shape_bytes
from selfattn.measure.predict import (
    accuracy_bytes,
    after_warmup_s,
    before_counting,
    input_bytes,
    nominal_peak_tflops,
    predict_call_s,
    predict_mem_bytes,
    predict_point_s,
)
from selfattn.measure.stability import SATURATED_WEIGHT, stability
from selfattn.positions import rope_shift_max_abs_diff
from selfattn.measure.threads import ThreadChoice, choose_threads, on_threads, one_thread
from selfattn.measure import noise
from selfattn.measure.timing import Timing, idle_reason, kept_samples, time_call, wall_call
from selfattn.metrics import ALL as ALL_METRICS, metrics_label
from selfattn.fp8_formats import fp8_format
from selfattn.point import RNN_GATES, Point
from selfattn.results import Row

def measure_point(point: Point, budget: Budget | None = None, metrics: Iterable[str] = ALL_METRICS) -> Row:
    """Measure one point and return its row; never raises for a failure of the point itself.

    `metrics`: what it measures beyond its time (names of selfattn.metrics.METRICS; default all)."""
    started = time.perf_counter()
    budget = Budget() if budget is None else budget
    device = resolve_device(point.device) if point.device in ("auto", "cpu", "cuda") else str(point.device)
    row = Row()
    try:
        row_values = point.with_device(device).columns()
    except Exception:  # a point so broken its columns cannot be formatted: keep what is safe
        row_values = {"backend": str(point.backend), "device": device}
    row_values.update(_environment_columns(device))
    for name, value in row_values.items():
        setattr(row, name, value)
    failures.take_traceback()  # an earlier point's traceback must not be written for this one
    wanted = frozenset(metrics)
    try:
        _measure(point, budget, device, row, wanted)
    except Exception as err:  # the row says what (failures.describe), the sweep goes on
        failure = failures.describe(err)
        row.status, row.error = failure.status, failure.error
    finally:
        if row.status != "ok":
            release_memory(device)  # so the next point measures as in a fresh process
    row.point_wall_s = time.perf_counter() - started  # measure_s + inputs, accuracy, stability, guard
    return row


def _environment_columns(device: str) -> dict[str, Any]:
    """The environment of `device`; for a device this process cannot use, the host's columns only."""
    if device == "cpu" or (device == "cuda" and torch.cuda.is_available()):
        return environment(device)
    host = environment("cpu")
    host.update(device=device, device_name="", device_capability="", device_mem_bytes=None)
    return host


def _measure(point: Point, budget: Budget, device: str, row: Row, metrics: frozenset[str]) -> None:
    from selfattn.backends.resolved import resolve_point
    from selfattn.measure.workload import build
    from selfattn.precision import precision_context

    point.validate()
    if not isinstance(point.backend_options, Mapping):
        raise ValueError(f"backend_options: expected a mapping of option names to values, got {point.backend_options!r}")
    point = point.with_device(device)
    # The back end, resolved once: every step below reads this object, never the registry again.
    resolved = resolve_point(point, device)
    row.kernel = resolved.label
    if point.scope not in RNN_GATES:  # what the back end said of itself, and what the harness supplied
        row.mem_model = "declared" if resolved.backend.mem_model_declared else "assumed"
        row.backend_defaulted = ",".join(resolved.backend.defaulted)
    if resolved.why_not:  # before anything is allocated: capability.why_not, the one answer
        raise Unsupported(resolved.why_not)
    with precision_context(point.precision, device):
        dtype = resolved.storage_dtype  # fp8: every tensor is made in float32, quantized inside the call
        if point.scope == "train":  # a training run, not a timed call: selfattn/train/loop.py
            from selfattn.train.loop import train_point

            return train_point(point, device, dtype, row, max_point_s=budget.max_point_s,
                               saturated_weight=SATURATED_WEIGHT, backend=resolved.backend)
        compiling = resolved.compiles
        # Nothing that grows with the point is made before the guard: a mask's FLOPs and density are counted
        # from its key intervals (tensors of q_len rows), and the sampled rows are a permutation of q_len, so
        # what needs neither (the inputs, the intervals themselves) is guarded first, and rows are drawn after.
        free = free_bytes(device)
        n_sampled = boundary.point_row_count(point, budget.accuracy_rows, resolved)
        row.predicted_mem_bytes = predict_mem_bytes(point, resolved)  # memory models are closed forms
        row.kv_cache_bytes = point.kv_bytes
        # memory only: the time limit is judged on the full prediction below, which the masks' tensors fit beside
        least_bytes = before_counting(point)
        if (reason := over_budget(point, budget, least_bytes + row.predicted_mem_bytes, free, 0.0)) is not None:
            row.status, row.error = "skipped_budget", reason
            return
        row.flops = point_flops(point)
        if "traffic" in metrics:
            row.bytes_moved = bytes_moved(point)
        row.mask_density = mask_density(point)
        peak = device_peak_tflops(device, dtype) if budget.measure_device_peak else nominal_peak_tflops(device, point.precision)
        # the accuracy pass and, for a compiled back end, the permutation check at the point's size come one
        # after the other, each beside the inputs and a call's peak
        after_bytes = accuracy_bytes(point, n_sampled) if metrics & {"accuracy", "stability"} else 0
        need = input_bytes(point) + row.predicted_mem_bytes + (
            max(after_bytes, point_shape_bytes(point)) if compiling else after_bytes)
        # A first compilation (0 when an earlier point compiled this shape) faces its own limit,
        # budget.max_compile_s, not max_point_s: see selfattn/measure/budget.py for why.
        compile_s = compile_cache.predict_compile_s(point.backend, device, _compile_key(point)) if compiling else 0.0
        point_s = _predict_s(point, peak, budget, n_sampled, resolved)
        reason = over_budget(point, budget, need, free, point_s, compile_s)
        only_time = over_budget(point, budget, need, free, 0.0, compile_s) is None  # memory and compile fit
        if reason is not None and only_time and budget.measure_device_peak:
            # Skipping on time rests on the measured peak: make sure it was not measured in a bad moment.
            peak = device_peak_tflops(device, dtype, remeasure=True)
            point_s = _predict_s(point, peak, budget, n_sampled, resolved)
            reason = over_budget(point, budget, need, free, point_s, compile_s)
        row.device_peak_tflops = peak if budget.measure_device_peak else None
        row.device_peak_tflops_source = peak_source(device, dtype) if budget.measure_device_peak else "nominal"
        if "traffic" in metrics:
            row.device_peak_gbps = device_peak_gbps(device) if budget.measure_device_peak else None
            row.device_peak_gbps_source = peak_source(device) if budget.measure_device_peak else "nominal"
        row.predicted_time_ms = predict_call_s(point, peak, resolved) * 1e3
        if reason is not None:
            row.status, row.error = "skipped_budget", reason
            return
        # the first, last and block-edge query rows always, random ones beside (selfattn/measure/boundary.py)
        sampled_queries = boundary.point_rows(point, budget.accuracy_rows, resolved)
        if point.scope in RNN_GATES:  # a recurrence on a CPU: its timed calls on one thread too (see below)
            with _single_threaded_on_cpu(device):
                row.num_threads = torch.get_num_threads()
                _run(point, budget, device, dtype, sampled_queries, row, build, resolved, metrics)
            return
        _run(point, budget, device, dtype, sampled_queries, row, build, resolved, metrics)


def _predict_s(point: Point, peak: float, budget: Budget, rows: int, resolved: Any) -> float:
    """The point's predicted seconds, its compilation left out; a compiled back end's permutation
    check runs at the point's size (measure/permutation.py), so its calls count too."""
    perm_s = POINT_SHAPE_CALLS * predict_call_s(point, peak, resolved) if resolved.compiles else 0.0
    return predict_point_s(point, peak, budget.timing_s, rows, resolved) + perm_s


def _compile_key(point: Point) -> tuple:
    """What decides whether a point reuses compiled code: every axis but the seed and the inputs' std."""
    return tuple((name, repr(value)) for name, value in sorted(point.columns().items())
                 if name not in ("seed", "input_std"))


# scope=lstm/gru on a CPU runs its timed calls on one thread as well (the row's num_threads says 1): its n
# serial steps are each a small (batch x d_model) product that intra-op threads cannot share without a
# barrier per step, each waiting for a scheduler slice on a shared machine, so on a CPU one thread is the
# recurrence's best, as every thread is attention's: the achieved
# FLOP/s of the two compare what each gets out of the machine (the chapter's "hard to parallelise").


@contextmanager
def _single_threaded_on_cpu(device: str) -> Iterator[None]:
    """Run the harness's own small ops (inputs, reference, accuracy, stability) on one thread.

    They are ~100 ops on sampled rows each; with OpenMP every op ends in a barrier across the
    cores, and on a shared machine each barrier waits for a scheduler slice: on one thread they cost
    a point a fraction of that (benchmarks/harness_overhead.py measures it). The timed calls keep every thread (unless they collapsed: measure/threads.py).
    """
    if device != "cpu":
        yield
        return
    with one_thread():
        yield


def _run(point: Point, budget: Budget, device: str, dtype: torch.dtype, sampled_queries: torch.Tensor, row: Row,
         build, resolved: Any, metrics: frozenset[str] = frozenset(ALL_METRICS)) -> None:
    compiling = resolved.compiles
    build = functools.partial(build, resolved=resolved)
    with _single_threaded_on_cpu(device):
        workload = build(point, dtype, torch.device(device), sampled_queries)
    judged = workload.plain is not None  # core, layer, generate (selfattn/measure/checks.py says why)
    guard = checks.InputGuard(workload.inputs or {}) if judged else None
    fresh = fresh_inputs.for_workload(workload) if judged else None  # new values before each timed call (fresh.py)
    for column, seconds in workload.prepare().items():  # flex: block_mask_s, built before the first call
        setattr(row, column, seconds)
    if compiling and compile_cache.make_room():
        row.note = "dropped this process's compiled code first (too many graphs for dynamo's limits)"
    graphs_before = compile_cache.graphs_compiled() if compiling else 0
    checked, warmup_s = wall_call(workload.check_call, device)  # warm-up (and compilation); never timed
    tampered = guard.changed("the warm-up call") if guard else ""
    call_s = warmup_s  # one call's time, for the guard and the timer's plan
    if compiling:  # the first call compiled (or found code compiled for an earlier point): apart from time_ms
        row.compile_s, row.recompiled = warmup_s, compile_cache.graphs_compiled() > graphs_before
        compile_cache.record_compile_s(point.backend, device, _compile_key(point), warmup_s, row.recompiled)
        _, call_s = wall_call(workload.call, device)  # the compiled call alone
        warmup_s = call_s  # compilation is spent (and was guarded up front): the rest must fit max_point_s
    ran = workload.kernel_ran()  # sdpa auto: which kernel torch picks for these inputs ("auto:flash")
    if ran and ran != row.kernel.split("-")[0]:
        row.kernel = f"{row.kernel}:{ran}"
    # Second guard, on a measured call this time: the prediction can be far off (a slow dtype on
    # this CPU, a busy machine), and the memory call and every call of the timer (its own
    # estimate and warm-up, at least MIN_SAMPLES timed calls) still lie ahead.
    perm_calls = POINT_SHAPE_CALLS if compiling else 0  # the permutation check's calls of this size
    remaining_s = after_warmup_s(device, call_s, budget.timing_s, point.precision) + perm_calls * call_s
    if warmup_s + remaining_s > budget.max_point_s and 2 * warmup_s < budget.max_point_s:
        # A first call can carry one-time costs (lazy imports, library init): look again once.
        _, again_s = wall_call(workload.call, device)
        call_s = min(call_s, again_s)
        remaining_s = after_warmup_s(device, call_s, budget.timing_s, point.precision) + perm_calls * call_s
        warmup_s += again_s
    if warmup_s + remaining_s > budget.max_point_s:
        row.status = "skipped_budget"
        row.error = (
            f"{'compiled' if compiling else 'warm-up'} call took {warmup_s:.1f} s (predicted "
            f"{(row.predicted_time_ms or 0) / 1e3:.2g} s), so the point would take "
            f"~{warmup_s + remaining_s:.0f} s > max_point_s={budget.max_point_s:g} s"
        )
        return
    started = time.perf_counter()
    # Every thread, or one where a busy machine made every thread's barriers collapse (measure/threads.py)
    choice = (choose_threads(fresh.then(workload.call) if fresh else workload.call, device, call_s,
                             budget.max_point_s - warmup_s - remaining_s) if not compiling
              else ThreadChoice(torch.get_num_threads(), 0.0, 0.0))
    row.num_threads = choice.threads  # the count the timed calls run on (measure/threads.py)
    if choice.unchecked:
        row.note = "; ".join(filter(None, [row.note, choice.unchecked]))
    if choice.collapsed:
        row.note = "; ".join(filter(None, [row.note, choice.note()]))
        call_s = choice.one_thread_s
    memory_call_s = 0.0
    plan_call_s = call_s  # the timer's estimate of one call: the warm-up's, or the memory call's when faster
    with on_threads(choice):
        if "memory" in metrics:
            row.peak_mem_bytes, memory_call_s = measure_peak(fresh.then(workload.call) if fresh else workload.call, device)
            # CUDA's number above already is the allocator's peak; a CPU needs one profiled call for it.
            row.peak_alloc_bytes = row.peak_mem_bytes if device == "cuda" else alloc_peak_bytes(workload.call)
            plan_call_s = min(call_s, memory_call_s)
        timed = (fresh_inputs.FreshCalls(workload.call, fresh, workload.timed_rows) if fresh
                 else checks.LastOutput(workload.call))  # keeps the timed calls' outputs the verdict judges
        with gpu_state.sampled(device) as gpu:  # CUDA: clocks, power, throttling over the timed window (gpu_state.py)
            timing = time_call(timed.call, device, budget.timing_s, plan_call_s, between=timed.between if fresh else None)
    if fresh:  # the last call's rows kept, inputs written into found, the base values back (fresh.py)
        tampered = tampered or timed.finish()
    if device == "cuda":  # the kernel's own time beside the call's; time_ms holds budget.timing_mode's (kernel_time.py)
        timing = kernel_time.record(row, workload.call, timing, budget.timing_s, budget.timing_mode,
                                    between=fresh.refresh if fresh else None)
        if fresh:
            fresh.restore()
    # Seconds inside calls of the point (warm-up and compilation, the threads' check, memory call, the timer's
    # run); everything else in a job's wall time (inputs, accuracy, stability, bookkeeping) is harness overhead.
    row.measure_s = (row.compile_s or 0.0) + warmup_s + (time.perf_counter() - started)
    row.time_ms, row.time_ms_p20, row.time_ms_p80, row.time_samples = (
        timing.median_ms, timing.p20_ms, timing.p80_ms, timing.samples
    )
    row.timer = timing.timer
    _noise_columns(timing, device, row, budget)
    if gpu is not None:
        gpu.fill(row)
    row.tflops = row.flops / (timing.median_ms * 1e-3) / 1e12 if timing.median_ms > 0 else None
    if row.bytes_moved is not None and timing.median_ms > 0:
        row.gbps = row.bytes_moved / (timing.median_ms * 1e-3) / 1e9
    if budget.measure_device_peak:
        _heal_low_probes(device, dtype, row)
    # a time below what the device can do (FLOPs / peak, bytes / bandwidth): selfattn/measure/floor.py
    impossible = physical_floor.judge(point, device, dtype, row.time_ms, row, budget.measure_device_peak)
    spec_peaks.fill(row)  # CUDA: % of the spec sheet's peak and bandwidth (spec_peaks.py)
    if point.scope == "generate" and timing.median_ms > 0:  # one call is the whole loop of new_tokens steps
        row.tokens_per_s = point.new_tokens / (timing.median_ms * 1e-3)
    _precision_notes(point, workload, checked, row)

    with _single_threaded_on_cpu(device):
        if guard and not tampered:
            tampered = guard.changed("the timed calls")
        verdict = checks.judge_result(point, workload, checked, dtype) if judged else None
        last = None if fresh else timed.take()
        if verdict is not None:
            row.err_bound = verdict.out.bound
            row.grad_err_bound = verdict.grads.bound if verdict.grads is not None else None
        if "accuracy" in metrics:
            _accuracy(workload, checked, sampled_queries, row, verdict.reference if verdict else None)
        del checked
        reason = tampered or impossible or (verdict.reason if verdict else "")
        if verdict is not None and not reason:
            reason = timed.judge(point, workload, dtype) if fresh else checks.judge_last(workload, last, verdict)
        del last
        if verdict is not None and not reason and not fresh:  # fresh inputs were a second (and a thousandth) input
            reason = checks.judge_second(point, build, dtype, device, sampled_queries)
        del verdict
        if "stability" in metrics:
            _stability(point, workload, row)
        if not compiling and point.scope not in RNN_GATES and point.score == "dot" and "permutation" in metrics:  # <= PERM_TOKENS tokens
            row.perm_max_abs_diff = permutation_max_abs_diff(point, dtype, torch.device(device), backend=resolved.backend)
        if point.scope in PATH_SCOPES and "path_length" in metrics:  # float64, at the point's n and d_model (measure/path_length.py)
            sensitivity = input_sensitivity(point, torch.device(device), resolved.backend)
            row.grad_by_distance, row.grad_far_near_ratio = sensitivity_json(sensitivity), far_near_ratio(sensitivity)
        if point.pos_enc == "rope":  # a logit depends on m - n only: q at m+s, k at n+s against q at m, k at n
            row.rope_shift_max_abs_diff = rope_shift_max_abs_diff(point.head_dim, point.seq_len, dtype=dtype,
                                                                  device=device, seed=point.seed)
        if fp8_format(point.precision) and workload.stability_inputs is not None:
            _fp8_columns(point, workload, row, resolved.options)
    if compiling and "permutation" in metrics:  # at the point's own size and shape (every thread): the code compiled above
        _compiled_permutation_check(point, dtype, device, row, resolved.backend)
    # an incorrect row keeps its time and errors for inspection; only an ok row is a result
    row.status, row.error, row.metrics = ("incorrect" if reason else "ok"), _incorrect(point, reason), metrics_label(metrics)


def _incorrect(point: Point, reason: str) -> str:
    """The one-line `error` of an incorrect row: the back end, then what missed (verdict.py words it)."""
    if not reason:
        return ""
    return f"backend {point.columns()['backend']} {reason}" if reason.startswith("modified") else reason


def _noise_columns(timing: Timing, device: str, row: Row, budget: Budget) -> None:
    """The timing's samples and what it saw of the machine (selfattn/measure/noise.py): spread, others' CPU, flag."""
    import json

    row.time_samples_ms = json.dumps([float(f"{t:.4g}") for t in kept_samples(timing.samples_ms)], separators=(",", ":"))
    judged = noise.judge(noise.spread(timing.p20_ms, timing.median_ms, timing.p80_ms), timing.other_cpu_frac, device,
                         budget.noise_spread, budget.noise_cpu)
    row.time_spread, row.other_cpu_frac, row.noisy, row.noise = (
        judged.time_spread, judged.other_cpu_frac, judged.noisy, judged.reason)
    row.own_cpu_frac = timing.own_cpu_frac  # a CPU call that waits rather than computes is flagged (timing.py)
    if idle := idle_reason(timing.own_cpu_frac, device):
        row.noisy, row.noise = True, "; ".join(filter(None, [row.noise, idle]))


def _fp8_columns(point: Point, workload: Any, row: Row, options: Mapping[str, Any]) -> None:
    """The FP8 columns (saturated, non-finite, P's lost mass, raw-cast logits) of the sampled rows, by the
    point's resolved FP8 options."""
    from selfattn import fp8

    q_rows, k, v, _ = workload.stability_inputs()
    for name, value in fp8.diagnostics(q_rows, k, v, scale=point.scale_value, options=options).items():
        setattr(row, name, value)


def _compiled_permutation_check(point: Point, dtype: torch.dtype, device: str, row: Row, backend: Any) -> None:
    """perm_max_abs_diff of a compiled back end, at the point's shape: it reuses the point's code.

    Where it compiles all the same (chunked, whose compiled block variants follow the mask: a
    window-masked block checked without the window is a whole block), the row says so and how long.
    """
    graphs_before, started = compile_cache.graphs_compiled(), time.perf_counter()
    row.perm_max_abs_diff = permutation_max_abs_diff(point, dtype, torch.device(device), at_point_shape=True,
                                                     backend=backend)
    compiled_now = compile_cache.graphs_compiled() - graphs_before
    if compiled_now:
        notes = [row.note] if row.note else []
        notes.append(f"the permutation check compiled {compiled_now} more graph(s) "
                     f"({time.perf_counter() - started:.1f} s, outside compile_s)")
        row.note = "; ".join(notes)


def _heal_low_probes(device: str, dtype: torch.dtype, row: Row) -> None:
    """A call faster than the peak it is judged against: measure the peak again (the better value wins).

    The probes are cached per machine (selfattn/measure/probes.py), so one measured while other
    processes loaded the machine would otherwise stay for every later sweep: a GEMM peak 30x too low
    made an RNN's FLOP/s read 600% of it. A point's own call beating the peak is the evidence of that.
    """
    if row.tflops and row.device_peak_tflops and row.tflops > row.device_peak_tflops:
        row.device_peak_tflops = device_peak_tflops(device, dtype, remeasure=True)
        row.device_peak_tflops_source = peak_source(device, dtype)
    if row.gbps and row.device_peak_gbps and row.gbps > row.device_peak_gbps:
        row.device_peak_gbps = device_peak_gbps(device, remeasure=True)
        row.device_peak_gbps_source = peak_source(device)


def _precision_notes(point: Point, workload: Any, checked: Any, row: Row) -> None:
    """`computed_as` (a tf32 row whose kernels ignore TF32 is an fp32 result) and the row's `note`."""
    from selfattn.precision import tf32_ignored

    notes = [row.note] if row.note else []
    row.computed_as = point.precision
    if point.precision == "tf32" and tf32_ignored(checked.out_rows, lambda: workload.check_call().out_rows):
        row.computed_as = "fp32"
        notes.append("tf32 ignored: the output is bit-identical with TF32 off, so this is the fp32 computation")
    peak = row.device_peak_tflops
    if peak and row.tflops and row.tflops > peak:
        notes.append(
            f"{row.tflops:.3g} TFLOP/s is above the measured {point.precision} GEMM peak ({peak:.3g}): the kernel "
            "does not compute like that GEMM (e.g. fp32 on tensor cores) or the peak was measured under load; "
            "not a fraction of that peak"
        )
    row.note = "; ".join(notes)


def _accuracy(workload: Any, checked: Any, sampled_queries: torch.Tensor, row: Row, reference: Any = None) -> None:
    """The warm-up's sampled rows (and gradients) against the float64 reference of the same rows
    (the verdict's, when it computed one)."""
    reference = workload.reference() if reference is None else reference
    errors = compare(checked.out_rows, reference.out_rows)
    row.accuracy_rows = len(sampled_queries)
    row.max_abs_err, row.rel_rms_err, row.nonfinite_frac = errors.max_abs_err, errors.rel_rms_err, errors.nonfinite_frac
    if checked.grads is not None and reference.grads is not None:
        grad_errors = compare(checked.grads, reference.grads)
        row.grad_max_abs_err, row.grad_rel_rms_err = grad_errors.max_abs_err, grad_errors.rel_rms_err
    del checked, reference


def _stability(point: Point, workload: Any, row: Row) -> None:
    """Logit std, entropy, largest weight and gradient norms of the sampled rows, in the point's precision."""
    if workload.stability_inputs is None:  # scope=generate: a loop, not one core call to look inside
        return

    q_rows, k, v, rows_cpu = workload.stability_inputs()
    metrics = stability(
        q_rows, k, v, rows_cpu, q_len=point.q_len_resolved, masks=workload.masks,
        scale=point.scale_value, upstream_BHrD=workload.upstream_rows,
    )
    for name, value in metrics.to_dict().items():
        setattr(row, name, value)
