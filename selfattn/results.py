"""The row schema of results.csv: one tidy row per sweep point, derived from what decides and measures it.

A row's columns are three groups, each declared once:
- the point's: `Point`'s fields (selfattn/point.py), their row types derived from the annotations (a mapping of
  options is its JSON text, `scale` its label);
- the harness's own (the outcome): the fields of `Row` below, typed here;
- every registered metric's (selfattn/measure/metric_steps.py): its declared columns and types.
results.csv's order is a contract (docs/architecture.md): columns may be added, none renamed, removed or moved.
Each group's columns follow one another in declaration order; a column declared `after` another (Row's
`beside(...)`, a metric's `after=`, `_POINT_PLACES` for the point's) sits right after it, so the order as it
grew is declared once, by those few places; a new metric's columns go last. tests/test_results_columns.py pins it.
Bump SCHEMA_VERSION when a column's meaning changes; readers refuse rows of a newer schema.
Units are in the names: milliseconds, bytes, FLOPs, seconds.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import asdict, fields
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Sequence, TypeVar

from selfattn.fields import field_types
from selfattn.metrics import DECLARED as METRIC_DECLARATIONS, Metric
from selfattn.point import Point

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


_T = TypeVar("_T")
# Where a point's column sits when not right after the field Point declares before it (results.csv's order
# grew before Point's field order settled): column -> the column it follows.
_POINT_PLACES: dict[str, str] = {"mode": "device_name", "scope": "mode", "scale": "mask_density",
                                 "seed": "score_mod_options"}
_POINT_AFTER = "metrics"  # the point's columns follow the outcome's first three


def beside(default: Any, after: str) -> Any:
    """A Row field that sits right after column `after` (a point's column) in results.csv."""
    return dataclasses.field(default=default, metadata={"after": after})


# A column: its name, its annotation as text ("int | None", "str") and its dataclasses.field (default, place)
_Column = tuple[str, str, Any]
_Group = tuple[list[_Column], dict[str, str]]  # a group's columns in order, and where some of them sit


def _derived(cls: type[_T]) -> type[_T]:
    """`cls` (the outcome's typed fields) made the dataclass of every column, in results.csv's order."""
    groups = [_outcome(cls), _point_group(), *(_metric_group(metric) for metric in METRIC_DECLARATIONS)]
    columns = [column for group, _ in groups for column in group]
    by_name = {column[0]: column for column in columns}
    if len(by_name) != len(columns):
        names = [column[0] for column in columns]
        raise ValueError(f"results.csv: columns {sorted({n for n in names if names.count(n) > 1})} are declared "
                         "twice (the point's, the outcome's, a metric's)")
    places = {name: after for _, group_places in groups for name, after in group_places.items()}
    order = _ordered([[column[0] for column in group] for group, _ in groups], places)
    methods = {name: value for name, value in vars(cls).items() if callable(value) and not name.startswith("__")}
    return typing.cast("type[_T]", dataclasses.make_dataclass(
        cls.__name__, [by_name[name] for name in order], slots=True,
        namespace={**methods, "__doc__": cls.__doc__, "__module__": cls.__module__}))


def _outcome(cls: type) -> _Group:
    """Row's own fields, typed as written, placed where `beside` says."""
    columns: list[_Column] = []
    places: dict[str, str] = {}
    for name, kind in cls.__annotations__.items():
        given = vars(cls).get(name, dataclasses.MISSING)
        if isinstance(given, dataclasses.Field) and "after" in given.metadata:
            places[name] = given.metadata["after"]
        columns.append((name, str(kind), _default_of(str(kind), given)))
    return columns, places


def _point_group() -> _Group:
    """Point's fields, typed by `_row_kind`, after the outcome's first columns."""
    annotations = field_types(Point)
    kinds = [(f.name, _row_kind(annotations[f.name])) for f in fields(Point)]
    return [(name, kind, _default_of(kind)) for name, kind in kinds], {kinds[0][0]: _POINT_AFTER, **_POINT_PLACES}


def _metric_group(metric: Metric) -> _Group:
    """A registered metric's declared columns (float, int, bool: empty is None; str: empty is "")."""
    kinds = [(column, "str" if kind is str else f"{kind.__name__} | None") for column, kind in metric.columns.items()]
    return [(name, kind, _default_of(kind)) for name, kind in kinds], dict(metric.after)


def _row_kind(annotation: Any) -> str:
    """A point field's column type: text for text, options (their JSON) and free values (scale's label); the
    first of a union's numbers for the rest (a window pair is its text), empty when unset."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    return f"{annotation.__name__} | None" if annotation in (int, float, bool) else "str"


def _default_of(kind: str, given: Any = dataclasses.MISSING) -> Any:  # a dataclasses.Field (typed as its default)
    if isinstance(given, dataclasses.Field):
        return given
    if given is not dataclasses.MISSING:
        return dataclasses.field(default=given)
    if kind == "str":  # an unset column: empty text, or no value
        return dataclasses.field(default="")
    return dataclasses.field(default=None)


def _ordered(groups: list[list[str]], places: Mapping[str, str]) -> list[str]:
    """The columns in order: each group's columns follow one another, skipping those placed elsewhere; a
    placed column (or a group's first, placed) sits right after the column it names, before that column's
    successor in its group; the first group is the spine, an unplaced group goes last."""
    children: dict[str | None, list[str]] = {}
    for group in groups:
        previous: str | None = None
        for name in group:
            parent = places.get(name, previous)
            children.setdefault(parent, [])
            # placed columns come before the group's own successor of the same column
            if name in places:
                successors = [c for c in children[parent] if c not in places]
                children[parent].insert(len(children[parent]) - len(successors), name)
            else:
                children[parent].append(name)
            if name not in places or name == group[0]:
                previous = name
    order: list[str] = []
    stack = list(reversed(children.get(None, [])))
    while stack:
        name = stack.pop()
        order.append(name)
        stack.extend(reversed(children.get(name, [])))
    if unplaced := sorted({name for group in groups for name in group} - set(order)):
        raise ValueError(f"results.csv: columns {unplaced} follow a column no group declares ({places[unplaced[0]]!r})")
    return order


@_derived
class Row:
    """One row of results.csv. The outcome's columns are typed here; the point's and the metrics' are derived
    (the module's docstring), so they are attributes of every Row all the same."""

    status: str = "error"  # one of STATUSES
    error: str = ""  # one line; empty when ok
    # what the point measured beyond its time (selfattn/metrics.py): "memory,accuracy,...", "none" for time
    # only; a metric not listed left its columns empty. Empty in a failed row (nothing measured).
    metrics: str = ""
    # beside the point's columns: what the point implies and what resolving its back end found
    backend_source: str = beside("", after="backend")  # builtin | entry_point | path (selfattn/backends/discovery.py)
    backend_path: str = beside("", after="backend_source")  # a path plugin's module:function as typed; else empty
    # a plugin's memory prediction (the guard's): declared by it, or assumed (naive's model, the
    # materializing one, plus converted copies of q, k, v and out); built-ins: declared
    mem_model: str = beside("", after="backend_path")
    # the facts a plugin left to the harness: "mem_model,efficiency,kernel_label"
    backend_defaulted: str = beside("", after="mem_model")
    kernel: str = beside("", after="backend_defaulted")  # the back end's variant: sdpa kernel, chunk sizes, ...
    device_name: str = beside("", after="device")
    d_model: int | None = beside(None, after="head_dim")
    # fraction of the q_len x seq_len (query, key) pairs the masks let through
    mask_density: float | None = beside(None, after="lr")
    scale_value: float | None = beside(None, after="scale")  # the factor actually applied to the logits
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
    predicted_mem_bytes: int | None = None
    predicted_time_ms: float | None = None
    # work
    flops: float | None = None
    tflops: float | None = None
    device_peak_tflops: float | None = None
    # where the two peaks came from: "measured" (by this process), "cache <file> (measured <UTC date>)"
    # (the probe cache of selfattn/measure/probes.py), "nominal" (budget.measure_device_peak=false)
    device_peak_tflops_source: str = ""
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
    # the correctness verdict's bounds (selfattn/measure/verdict.py): the largest max_abs_err (grad_max_abs_err)
    # the row may have, K x the plain same-dtype reference's error + atol; empty where the scope is not judged
    err_bound: float | None = None
    grad_err_bound: float | None = None
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

    if TYPE_CHECKING:  # what a type checker sees of the derived columns: any name, Any (slots refuse typos at run time)
        __dataclass_fields__: ClassVar[dict[str, Any]]

        def __init__(self, **columns: Any) -> None: ...

        def __getattr__(self, name: str) -> Any: ...

        def __setattr__(self, name: str, value: Any) -> None: ...

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
