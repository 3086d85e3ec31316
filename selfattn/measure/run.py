"""measure_point: one point in, one Row out, whatever happens.

The pipeline, one step a function below, in this order:

1. resolve: the point validated, its back end resolved once (selfattn/backends/resolved.py), what every
   later step reads;
2. refuse: what the back end declares it cannot do here is an `unsupported` row (capability.why_not);
3. guard: predictions alone, before anything is allocated (selfattn/measure/guard.py): a point that would
   not fit the budget is `skipped_budget`;
4. build: the scope's workload (selfattn/measure/workload.py) and the back end's one-time set-up (flex's
   block mask, timed apart);
5. warm up: the first call (its output feeds the verdict and the accuracy metric; for a compiled back end it
   compiles, timed apart as compile_s, and a second call gives the compiled call's time), then a second guard
   on that measured call;
6. time: the thread choice (measure/threads.py), the timer (measure/timing.py) and what it saw of the machine;
7. judge: the verdict (selfattn/measure/checks.py: inputs unchanged, the warm-up's output and gradients within
   the tolerance of selfattn/measure/verdict.py, the last timed call's output, one untimed call on a second
   input); `incorrect` when one misses, the row's time and errors kept;
8. each chosen metric (selfattn/metrics.py declares them, selfattn/measure/metric_steps.py measures them), at
   the stage it registered for.

Failures become the row's status through selfattn.measure.failures (oom, unsupported, invalid, error; memory
released either way). `metrics` chooses the metrics; the time is always measured, and a metric left out costs
nothing and leaves its columns empty. The verdict is not a metric: it runs whatever `metrics` says.
"""

from __future__ import annotations

import functools
import json
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Iterable, Iterator, Mapping

import torch

from selfattn import compile as compile_cache
from selfattn.backends.resolved import Resolved, resolve_point
from selfattn.errors import Unsupported
from selfattn.measure import checks, failures, hints, noise
from selfattn.measure import floor as physical_floor
from selfattn.measure import fresh as fresh_inputs
from selfattn.measure import gpu_state, kernel_time, spec_peaks
from selfattn.measure.budget import Budget
from selfattn.measure.device import device_peak_tflops, environment, peak_source, resolve_device
from selfattn.measure.guard import compile_key, guard_point
from selfattn.measure.memory import release_memory
from selfattn.measure.metric_steps import (AFTER_TIMER, AFTER_VERDICT, BEFORE_TIMER, EVERY_THREAD, WARMUP_OUTPUT,
                                           Measured, run_stage)
from selfattn.measure.permutation import POINT_SHAPE_CALLS
from selfattn.measure.predict import after_warmup_s
from selfattn.measure.threads import ThreadChoice, choose_threads, on_threads, one_thread
from selfattn.measure.timing import Timing, idle_reason, kept_samples, time_call, wall_call
from selfattn.measure.timing_options import TimingOptions
from selfattn.measure import workload as workloads
from selfattn.measure.workload import Result, Workload
from selfattn.metrics import ALL as ALL_METRICS, metrics_label
from selfattn.point import Point
from selfattn.precision import precision_context
from selfattn.results import Row
from selfattn.scopes import SCOPES


def measure_point(point: Point, budget: Budget | None = None, metrics: Iterable[str] = ALL_METRICS,
                  timing: TimingOptions | None = None) -> Row:
    """Measure one point and return its row; never raises for a failure of the point itself.

    `metrics`: what it measures beyond its time (names of selfattn.metrics.METRICS; default all); `timing`: the
    config's `timing` section (what a CUDA row's time_ms holds, a cold or warm L2; default TimingOptions())."""
    started = time.perf_counter()
    budget = Budget() if budget is None else budget
    timing = TimingOptions() if timing is None else timing
    device = resolve_device(point.device) if point.device in ("auto", "cpu", "cuda") else str(point.device)
    row = Row()
    try:
        row_values = point.with_device(device).columns()
    except Exception:  # a point so broken its columns cannot be formatted: keep what is safe
        row_values = {"backend": str(point.backend), "device": device}
    row_values.update(_environment_columns(device))
    _set(row, row_values)
    failures.take_traceback()  # an earlier point's traceback must not be written for this one
    try:
        _measure(point, budget, device, row, frozenset(metrics), timing)
    except Exception as err:  # the row says what (failures.describe), the sweep goes on
        failure = failures.describe(err)
        row.status, row.error = failure.status, failure.error
    finally:
        if row.status != "ok":
            release_memory(device)  # so the next point measures as in a fresh process
    row.point_wall_s = time.perf_counter() - started  # measure_s + inputs, accuracy, stability, guard
    return row


def _measure(point: Point, budget: Budget, device: str, row: Row, metrics: frozenset[str],
             timing: TimingOptions) -> None:
    """Resolve, refuse, guard, build, warm up, time, judge, then each chosen metric: the module's steps, in order."""
    timing.l2_on(device)  # a cold L2 asked of a CPU: an invalid row, before anything runs
    point, resolved = _resolve(point, device, row)
    if resolved.why_not:  # refuse, before anything is allocated: capability.why_not, the one answer
        raise Unsupported(resolved.why_not)
    with precision_context(point.precision, device):
        dtype = resolved.storage_dtype  # fp8: every tensor is made in float32, quantized inside the call
        if SCOPES[point.scope].trains:  # a training run, not a timed call: selfattn/train/loop.py
            return _train(point, budget, device, dtype, resolved, row)
        sampled_queries = guard_point(point, budget, device, dtype, resolved, row, metrics)
        if sampled_queries is None:  # skipped_budget: the row says why
            return
        with _recurrence_on_one_thread(point, device, row):
            workload, guard, fresh = _build(point, device, dtype, sampled_queries, resolved, row)
            warm = _warm_up(point, device, workload, guard, resolved, row)
            if (reason := _too_slow(point, budget, device, workload, warm, resolved.compiles, row)) is not None:
                row.status, row.error = "skipped_budget", reason
                return
            measured = Measured(point, device, dtype, budget, resolved, workload, sampled_queries, warm.call_s,
                                checked=warm.checked, fresh=fresh, timing=timing)
            timed = _time(measured, warm, metrics, row)
            reason = _judge(measured, warm, timed, guard, row, metrics)
            _metrics(measured, metrics, row)
    # an incorrect row keeps its time and errors for inspection; only an ok row is a result
    row.status, row.error = ("incorrect" if reason else "ok"), _incorrect(point, reason)
    row.metrics = metrics_label(metrics)


def _train(point: Point, budget: Budget, device: str, dtype: torch.dtype, resolved: Resolved, row: Row) -> None:
    """scope=train: the point's training run fills its row (selfattn/train/loop.py)."""
    from selfattn.measure.stability import SATURATED_WEIGHT
    from selfattn.train.loop import train_point

    train_point(point, device, dtype, row, max_point_s=budget.max_point_s, saturated_weight=SATURATED_WEIGHT,
                resolved=resolved)


def _resolve(point: Point, device: str, row: Row) -> tuple[Point, Resolved]:
    """The point validated on `device` and its back end resolved once: every step after reads this object,
    never the registry again."""
    point.validate()
    if not isinstance(point.backend_options, Mapping):
        raise ValueError(f"backend_options: expected a mapping of option names to values, got {point.backend_options!r}")
    point = point.with_device(device)
    resolved = resolve_point(point, device)
    row.kernel = resolved.label
    if SCOPES[point.scope].attention:  # what the back end said of itself, and what the harness supplied
        row.mem_model = "declared" if resolved.backend.mem_model_declared else "assumed"
        row.backend_defaulted = ",".join(resolved.backend.defaulted)
    return point, resolved


def _build(point: Point, device: str, dtype: torch.dtype, sampled_queries: torch.Tensor, resolved: Resolved,
           row: Row) -> tuple[Workload, checks.InputGuard | None, fresh_inputs.FreshInputs | None]:
    """The scope's workload, the copies its inputs are checked against (judged scopes: core, layer, generate),
    and the back end's one-time set-up (flex: block_mask_s, built before the first call)."""
    with _single_threaded_on_cpu(device):
        workload = workloads.build(point, dtype, torch.device(device), sampled_queries, resolved=resolved)
    guard = checks.InputGuard(workload.inputs or {}) if workload.plain is not None else None
    # new input values before each timed call, outside its time (selfattn/measure/fresh.py)
    fresh = fresh_inputs.for_workload(workload) if workload.plain is not None else None
    _set(row, workload.prepare())
    return workload, guard, fresh


@dataclass
class WarmUp:
    """The warm-up's output and what it says of one call's time."""

    checked: Result | None  # its output's sampled rows (and gradients) for the verdict and accuracy; then dropped
    warmup_s: float  # the seconds spent on warm-up calls, compilation left out (it faces its own limit)
    call_s: float  # one call's seconds: the second guard's and the timer's estimate
    tampered: str  # "" or how the back end wrote into its inputs
    others_frac: float | None = None  # other processes' CPU share during the first call (threads.py: QUIET_OTHERS)


def _warm_up(point: Point, device: str, workload: Workload, guard: checks.InputGuard | None, resolved: Resolved,
             row: Row) -> WarmUp:
    """The first call, never timed: it compiles a compiled back end (compile_s), whose compiled call is then
    timed alone; the kernel torch picked (sdpa auto) joins the row's label."""
    if resolved.compiles and compile_cache.make_room():
        row.note = "dropped this process's compiled code first (too many graphs for dynamo's limits)"
    graphs_before = compile_cache.graphs_compiled() if resolved.compiles else 0
    (checked, warmup_s), others = noise.watched(lambda: wall_call(workload.check_call, device), time.perf_counter)
    tampered = guard.changed("the warm-up call") if guard else ""
    call_s = warmup_s
    if resolved.compiles:  # the first call compiled (or found code compiled for an earlier point): apart from time_ms
        row.compile_s, row.recompiled = warmup_s, compile_cache.graphs_compiled() > graphs_before
        compile_cache.record_compile_s(point.backend, device, compile_key(point), warmup_s, row.recompiled)
        _, call_s = wall_call(workload.call, device)  # the compiled call alone
        warmup_s = call_s  # compilation is spent (and was guarded up front): the rest must fit max_point_s
    ran = workload.kernel_ran()  # sdpa auto: which kernel torch picks for these inputs ("auto:flash")
    if ran and ran != row.kernel.split("-")[0]:
        row.kernel = f"{row.kernel}:{ran}"
    assert isinstance(checked, Result)  # check_call's
    return WarmUp(checked, warmup_s, call_s, tampered, others)


def _too_slow(point: Point, budget: Budget, device: str, workload: Workload, warm: WarmUp, compiling: bool,
              row: Row) -> str | None:
    """The second guard, on a measured call this time: the prediction can be far off (a slow dtype on this
    CPU, a busy machine), and the memory call and every call of the timer (its own estimate and warm-up, at
    least MIN_SAMPLES timed calls) still lie ahead. Why the point must stop, or None."""
    def remaining_s() -> float:
        return _remaining_s(point, budget, device, warm, compiling)

    if warm.warmup_s + remaining_s() > budget.max_point_s and 2 * warm.warmup_s < budget.max_point_s:
        # A first call can carry one-time costs (lazy imports, library init): look again once.
        _, again_s = wall_call(workload.call, device)
        warm.call_s = min(warm.call_s, again_s)
        warm.warmup_s += again_s
    if warm.warmup_s + remaining_s() <= budget.max_point_s:
        return None
    return (f"{'compiled' if compiling else 'warm-up'} call took {warm.warmup_s:.1f} s (predicted "
            f"{(row.predicted_time_ms or 0) / 1e3:.2g} s), so the point would take "
            f"~{warm.warmup_s + remaining_s():.0f} s > max_point_s={budget.max_point_s:g} s")


def _remaining_s(point: Point, budget: Budget, device: str, warm: WarmUp, compiling: bool) -> float:
    """Seconds of calls still ahead after the warm-up: the memory call and the timer's, and the permutation
    check's calls of this size when compiled."""
    perm_calls = POINT_SHAPE_CALLS if compiling else 0
    return after_warmup_s(device, warm.call_s, budget.timing_s, point.precision) + perm_calls * warm.call_s


def _time(m: Measured, warm: WarmUp, metrics: frozenset[str], row: Row) -> Any:
    """The timed calls: every thread, or one where a busy machine made every thread's barriers collapse
    (measure/threads.py); the memory metric's call just before the timer, on the same threads. Returns the
    timed call, which keeps its last output for the verdict."""
    started = time.perf_counter()
    fresh, call = m.fresh, m.workload.call
    fresh_call = fresh.then(call) if fresh else call  # every call the harness makes sees new values too
    budget_s = m.budget.max_point_s - warm.warmup_s - _remaining_s(m.point, m.budget, m.device, warm,
                                                                     m.resolved.compiles)
    choice = (choose_threads(fresh_call, m.device, warm.call_s, budget_s, warm.others_frac) if not m.resolved.compiles
              else ThreadChoice(torch.get_num_threads(), 0.0, 0.0))
    row.num_threads = choice.threads  # the count the timed calls run on (measure/threads.py)
    row.note = "; ".join(filter(None, [row.note, choice.unchecked, choice.note() if choice.collapsed else ""]))
    if choice.collapsed:
        m.plan_call_s = choice.one_thread_s
    with on_threads(choice):
        _set(row, run_stage(BEFORE_TIMER, m, metrics))
        # keeps the timed calls' outputs the verdict judges: with fresh inputs, the last one on its own inputs
        timed = _timed_call(m)
        l2 = m.timing.l2_on(m.device)  # cold: the L2 flushed before every timed call (CUDA; timing_options.py)
        row.l2, row.timing_mode = l2, m.timing.mode_on(m.device)
        with gpu_state.sampled(m.device) as gpu:  # CUDA: clocks, power, throttling over the timed window
            timing = time_call(timed.call, m.device, m.budget.timing_s, m.plan_call_s,
                               between=timed.between if fresh else None, flush_l2=l2 == "cold")
    if fresh:  # the last call's rows kept, inputs written into found, the base values back (fresh.py)
        m.timed_tampered = timed.finish()
    if m.device == "cuda":  # the kernel's own time beside the call's; time_ms holds timing.mode's
        timing = kernel_time.record(row, call, timing, m.budget.timing_s, m.timing.mode,
                                    between=fresh.refresh if fresh else None, l2=l2)
        if fresh:
            fresh.restore()
    # Seconds inside calls of the point (warm-up and compilation, the threads' check, memory call, the timer's
    # run); everything else in a job's wall time (inputs, accuracy, stability, bookkeeping) is harness overhead.
    row.measure_s = (row.compile_s or 0.0) + warm.warmup_s + (time.perf_counter() - started)
    m.median_ms = timing.median_ms
    _timing_columns(m.point, timing, m.device, row, m.budget)
    if gpu is not None:
        gpu.fill(row)
    _set(row, run_stage(AFTER_TIMER, m, metrics))
    if m.budget.measure_device_peak:
        _heal_low_probes(m.device, m.dtype, row)
    # a time below what the device can do (FLOPs / peak, bytes / bandwidth): selfattn/measure/floor.py
    m.impossible = physical_floor.judge(m.point, m.device, m.dtype, row.time_ms, row, m.budget.measure_device_peak)
    spec_peaks.fill(row)  # CUDA: % of the spec sheet's peak and bandwidth (spec_peaks.py)
    _precision_notes(m.point, m.workload, warm.checked, row)
    return timed


def _timed_call(m: Measured) -> Any:
    """The timer's call: with fresh inputs (judged scopes), one that keeps the last call's sampled rows for its
    own inputs' reference (fresh.py); else one that keeps the last output (checks.LastOutput)."""
    if m.fresh is None:
        return checks.LastOutput(m.workload.call)
    assert m.workload.timed_rows is not None  # every judged scope names its timed rows (workload.py)
    return fresh_inputs.FreshCalls(m.workload.call, m.fresh, m.workload.timed_rows)


def _judge(m: Measured, warm: WarmUp, timed: Any, guard: checks.InputGuard | None, row: Row,
           metrics: frozenset[str]) -> str:
    """The verdict: why the point is incorrect, "" when it is not (one thread on a CPU). The metrics of the
    warm-up's output run once its reference is made, and the output is dropped before the calls the verdict
    still makes: the last timed call's output, then (without fresh inputs) one untimed call on a second input."""
    with _single_threaded_on_cpu(m.device):
        tampered = warm.tampered or m.timed_tampered or (guard.changed("the timed calls") if guard else "")
        verdict = checks.judge_result(m.point, m.workload, warm.checked, m.dtype) if guard is not None else None
        last = None if m.fresh else timed.take()
        _verdict_columns(m, verdict, row)
        _set(row, run_stage(WARMUP_OUTPUT, m, metrics))
        missed = _missed(m, warm, verdict)
        m.checked = m.reference = warm.checked = None  # dropped: the calls below need the room
        reason = tampered or m.impossible or missed
        if verdict is None or reason:
            return reason
        reason = timed.judge(m.point, m.workload, m.dtype) if m.fresh else checks.judge_last(m.workload, last, verdict)
        del last
        if reason or m.fresh:  # fresh inputs were a second (and a thousandth) input
            return reason
        return checks.judge_second(m.point, _builder(m.resolved), m.dtype, m.device, m.sampled_queries)


def _verdict_columns(m: Measured, verdict: Any, row: Row) -> None:
    """The tolerances the warm-up's output and gradients were judged by, and its float64 reference kept for the
    metrics of that output."""
    if verdict is None:
        return
    row.err_bound = verdict.out.bound
    row.grad_err_bound = verdict.grads.bound if verdict.grads is not None else None
    m.reference = verdict.reference


def _missed(m: Measured, warm: WarmUp, verdict: Any) -> str:
    """Why the warm-up's output missed its tolerance ("" when it did not), with the pattern its errors follow
    when they follow a known one (selfattn/measure/hints.py)."""
    if verdict is None or not verdict.reason:
        return ""
    hinted = hints.hint(m.point, m.workload, warm.checked, verdict.out.bound) if not verdict.out.ok else ""
    return verdict.reason + hinted


def _metrics(m: Measured, metrics: frozenset[str], row: Row) -> None:
    """The chosen metrics that run after the verdict: on one thread on a CPU, then those at the point's own size
    and shape on every thread; their notes join the row's."""
    with _single_threaded_on_cpu(m.device):
        _set(row, run_stage(AFTER_VERDICT, m, metrics))
    _set(row, run_stage(EVERY_THREAD, m, metrics))
    row.note = "; ".join(filter(None, [row.note, *m.notes]))


def _builder(resolved: Resolved) -> Callable[..., Workload]:
    """build with the point's resolved back end: the second input's workload."""
    return functools.partial(workloads.build, resolved=resolved)


def _set(row: Row, columns: Mapping[str, Any]) -> None:
    for name, value in columns.items():
        setattr(row, name, value)


def _environment_columns(device: str) -> dict[str, Any]:
    """The environment of `device`; for a device this process cannot use, the host's columns only."""
    if device == "cpu" or (device == "cuda" and torch.cuda.is_available()):
        return environment(device)
    host = environment("cpu")
    host.update(device=device, device_name="", device_capability="", device_mem_bytes=None)
    return host


def _incorrect(point: Point, reason: str) -> str:
    """The one-line `error` of an incorrect row: the back end, then what missed (verdict.py words it)."""
    if not reason:
        return ""
    return f"backend {point.columns()['backend']} {reason}" if reason.startswith("modified") else reason


# scope=lstm/gru on a CPU runs its timed calls on one thread as well (the row's num_threads says 1): its n
# serial steps are each a small (batch x d_model) product that intra-op threads cannot share without a
# barrier per step, each waiting for a scheduler slice on a shared machine, so on a CPU one thread is the
# recurrence's best, as every thread is attention's: the achieved
# FLOP/s of the two compare what each gets out of the machine (the chapter's "hard to parallelise").


@contextmanager
def _recurrence_on_one_thread(point: Point, device: str, row: Row) -> Iterator[None]:
    """scope=lstm/gru: every call on one thread on a CPU (see above), said in the row's num_threads."""
    if not SCOPES[point.scope].one_thread_on_cpu:
        yield
        return
    with _single_threaded_on_cpu(device):
        row.num_threads = torch.get_num_threads()
        yield


def _single_threaded_on_cpu(device: str) -> ContextManager[None]:
    """Run the harness's own small ops (inputs, reference, accuracy, stability) on one thread.

    They are ~100 ops on sampled rows each; with OpenMP every op ends in a barrier across the
    cores, and on a shared machine each barrier waits for a scheduler slice: on one thread they cost
    a point a fraction of that (benchmarks/harness_overhead.py measures it). The timed calls keep every thread
    (unless they collapsed: measure/threads.py).
    """
    return one_thread() if device == "cpu" else nullcontext()


def _timing_columns(point: Point, timing: Timing, device: str, row: Row, budget: Budget) -> None:
    """The timer's median and percentiles, what derives from them (TFLOP/s, tokens/s), its samples and what it
    saw of the machine (selfattn/measure/noise.py: spread, others' CPU, flag)."""
    row.time_ms, row.time_ms_p20, row.time_ms_p80, row.time_samples = (
        timing.median_ms, timing.p20_ms, timing.p80_ms, timing.samples)
    row.timer = timing.timer
    row.time_samples_ms = json.dumps([float(f"{t:.4g}") for t in kept_samples(timing.samples_ms)], separators=(",", ":"))
    judged = noise.judge(noise.spread(timing.p20_ms, timing.median_ms, timing.p80_ms), timing.other_cpu_frac, device,
                         budget.noise_spread, budget.noise_cpu)
    row.time_spread, row.other_cpu_frac, row.noisy, row.noise = (
        judged.time_spread, judged.other_cpu_frac, judged.noisy, judged.reason)
    row.own_cpu_frac = timing.own_cpu_frac  # a CPU call that waits rather than computes is flagged (timing.py)
    if idle := idle_reason(timing.own_cpu_frac, device):
        row.noisy, row.noise = True, "; ".join(filter(None, [row.noise, idle]))
    timed = timing.median_ms > 0
    row.tflops = row.flops / (timing.median_ms * 1e-3) / 1e12 if row.flops is not None and timed else None
    if SCOPES[point.scope].autoregressive and timed:  # one call is the whole loop of new_tokens steps
        row.tokens_per_s = point.new_tokens / (timing.median_ms * 1e-3)


def _heal_low_probes(device: str, dtype: torch.dtype, row: Row) -> None:
    """A call faster than the GEMM peak it is judged against: measure the peak again (the better value wins;
    the traffic metric does the same for the copy bandwidth).

    The probes are cached per machine (selfattn/measure/probes.py), so one measured while other
    processes loaded the machine would otherwise stay for every later sweep: a GEMM peak 30x too low
    made an RNN's FLOP/s read 600% of it. A point's own call beating the peak is the evidence of that.
    """
    if row.tflops and row.device_peak_tflops and row.tflops > row.device_peak_tflops:
        row.device_peak_tflops = device_peak_tflops(device, dtype, remeasure=True)
        row.device_peak_tflops_source = peak_source(device, dtype)


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
