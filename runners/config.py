"""From a Hydra job's config to a `ParsedJob`: a validated `selfattn.Point` with its budget and id, or why not.

`parse_job` is the one step: it applies the job's grid point and the defaults that follow the scope
(`selfattn.point.SCOPE_DEFAULTS`, for keys the job did not give), refuses unknown keys (naming the
nearest known one), checks every value against the dataclass that owns it (the axes: `Point`;
`budget`: `selfattn.measure.Budget`; `timing`: `selfattn.measure.timing_options.TimingOptions`; `backend.*`: the back end's `Options`; the runner's own
keys: `RunnerConf`, `WandbConf` below), resolves device=auto, and never raises: a bad config
becomes a `ParsedJob` with a `problem`, which a multirun records as an `invalid` row and a
single run prints as one line.
Validation is in code, not in a Hydra schema, so a bad value inside a grid does not stop the
sweep. Nothing here imports Hydra, so tests call it with plain dicts.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Collection, Iterable, Mapping, Sequence

from runners.isolate import parse_isolate
from selfattn.backends import BACKEND_NAMES, describe_name, get_backend
from selfattn.backends.options import builtin_node
from selfattn.fields import check_fields, config_fields, default_of, defaults, field_types, spec, unknown_key
from selfattn.measure.budget import Budget
from selfattn.measure.timing_options import TimingOptions
from selfattn.metrics import ALL as ALL_METRICS, parse_metrics
from selfattn.point import AXES, DEVICES, Point, axis_default, scope_defaults
from selfattn.precision_names import PRECISIONS
from selfattn.results import Row


@dataclass(frozen=True)
class RunnerConf:
    """The runner's own top-level keys (conf/config.yaml mirrors them)."""

    name: str = spec("custom", help="the study's name: the sweep folder and the wandb group use it")
    d_model: int | None = spec(None, ge=1, help="null, or heads x head_dim: then head_dim = d_model / heads")
    retry_failed: bool = spec(False, help="on resume, also re-measure points whose earlier row is not ok")
    prevalidate: bool = spec(False, help="Hydra also composes every job's config before the first job "
                                         "(names and keys are checked anyway)")
    report: bool = spec(True, help="at the end of a multirun, write figures + report.md")
    report_timeout_s: float | None = spec(None, gt=0, help="seconds the multirun's report may take in its own "
                                                          "process before it is stopped (results.csv stays complete); "
                                                          "null = 120 + 0.5 per row")
    verbose: bool = spec(False, help="show the known notes of Hydra and torch that a sweep hides (runners/quiet.py)")
    baseline: str | None = spec(None, help="the back end each cell of the end table and report.md is compared with "
                                           "(its time / the cell's): null = sdpa when it ran; none = no speed-ups; "
                                           "a back end as the table names it")
    grids: Any = spec(None, help="optional union of small grids; null = plain Hydra product")
    grid_point: int | None = spec(None, ge=0, help="index into the union of `grids`")
    metrics: Any = spec(default_factory=lambda: list(ALL_METRICS), parse=parse_metrics,
                        help=f"what a point measures beyond its time: some of {', '.join(ALL_METRICS)} "
                             "([]: time only; selfattn/metrics.py); not part of the point's id: a resumed sweep "
                             "asking for more than a point's row has measures it again")
    isolate: Any = spec("plugins", parse=parse_isolate,
                        help="true | false | plugins: which points run in a worker process with a time limit, so "
                             "an exit, a crash or a hang is a row (crashed, timeout) and the sweep goes on; plugins: "
                             "every back end that is not built in (runners/isolate.py)")
    isolate_limit_s: float | None = spec(None, gt=0, help="an isolated point's time limit in seconds; null: derived "
                                         "from its predicted time and budget.max_point_s (runners/isolate.py)")


@dataclass(frozen=True)
class WandbConf:
    mode: str = spec("offline", choices=("offline", "online", "disabled"),
                     help="offline: no account, no network (`wandb sync` later)")
    project: str = spec("selfattn-bench", help="wandb project")
    entity: str | None = spec(None, help="wandb entity (user or team)")
    run_per_point: bool = spec(False, help="false: one run per sweep process, a step per point; true: a run per point")


# Config sections that are dataclasses of their own; the point's axes and RunnerConf are flat keys.
SECTIONS: dict[str, type] = {"budget": Budget, "timing": TimingOptions, "wandb": WandbConf}
NODES = ("backend", "precision", "mask", "score_mod")  # config groups: {name: ..., options}
FUNCTION_NODES = ("mask", "score_mod")  # groups of selfattn/mods/: {name: ..., parameters}


def known_keys(options_of: Callable[[str], Iterable[str]] | None = None) -> list[str]:
    """Every key a config may hold, as a user types it (for 'did you mean'). `options_of(name)`: a built-in
    back end's option names; by default its `Options`' fields (which imports its module, and so torch)."""
    options_of = options_of or (lambda name: [f.name for f in config_fields(get_backend(name).options_type)])
    options = {f"backend.{key}" for name in BACKEND_NAMES for key in options_of(name)}
    sections = [f"{s}.{f.name}" for s, cls in SECTIONS.items() for f in fields(cls)]
    return [*AXES, *(f.name for f in fields(RunnerConf)), *sections, "backend.name", *sorted(options), "precision.name"]


@dataclass
class ParsedJob:
    """One job's config, parsed once; everything after reads this."""

    values: dict[str, Any]  # the flat config, grid point applied
    point: Point | None = None  # validated, device resolved; None when the config does not validate
    budget: Budget | None = None
    timing: TimingOptions = field(default_factory=TimingOptions)  # the `timing` section: how the calls are timed
    runner: dict[str, Any] = field(default_factory=lambda: defaults(RunnerConf))
    wandb: dict[str, Any] = field(default_factory=lambda: defaults(WandbConf))
    wandb_problem: str = ""  # a bad wandb section: a sweep measures anyway, wandb off
    problem: str = ""  # one line: why the point is invalid ("" when valid)
    point_id: str = ""
    typed_columns: dict[str, Any] = field(default_factory=dict)  # the point's columns as typed: what a failed row shows

    @property
    def columns(self) -> dict[str, Any]:
        """The point's columns of results.csv: the validated point's, else the values as typed."""
        return self.point.columns() if self.point is not None else self.typed_columns


def parse_job(cfg: Mapping[str, Any], given: Collection[str] | None = None) -> ParsedJob:
    """The job's config -> a ParsedJob; never raises for a bad config (see `ParsedJob.problem`).

    `given`: the keys the user gave (typed, or set by the experiment; its grid point's keys count too);
    a scope's defaults (`scope=train`: mode=fwd_bwd, ...) replace the others. None: every key was given.
    """
    try:
        values = flat_config(cfg)
        if given is not None:
            values = with_scope_defaults(values, {*given, *grid_keys(cfg)})
    except ValueError as exc:
        job = ParsedJob(values=dict(cfg), problem=str(exc))
        job.point_id, job.typed_columns = raw_point_id(job.values), typed_columns(job.values)
        return job
    job = ParsedJob(values=values, typed_columns=typed_columns(values))
    try:
        job.wandb = check_fields(WandbConf, values.get("wandb"), prefix="wandb.")
    except ValueError as exc:
        job.wandb, job.wandb_problem = {**defaults(WandbConf), "mode": "disabled"}, str(exc)
    try:
        _check_keys(values)
        job.runner = check_fields(RunnerConf, {k: values[k] for k in values if k in _RUNNER_KEYS})
        job.point = _point(values, job.runner["d_model"])
        job.budget = Budget(**check_fields(Budget, values.get("budget"), prefix="budget."))
        job.timing = TimingOptions(**check_fields(TimingOptions, values.get("timing"), prefix="timing."))
        job.point_id = job.point.point_id(defaults(get_backend(job.point.backend).options_type))
    except ValueError as exc:
        job.point, job.problem = None, str(exc)
        job.point_id = raw_point_id(values)
    return job


_RUNNER_KEYS = frozenset(f.name for f in fields(RunnerConf))


def _check_keys(values: Mapping[str, Any]) -> None:
    """Refuse every key that nothing reads: a typo must not measure the default point."""
    top = {*AXES, *_RUNNER_KEYS, *SECTIONS}
    for key in values:
        if key not in top:
            raise unknown_key(key, known_keys())
    precision = values.get("precision")
    if isinstance(precision, Mapping):
        for key in precision:
            if key != "name":
                raise unknown_key(f"precision.{key}", known_keys())


def _node(value: Any) -> tuple[Any, dict[str, Any]]:
    """A config group's node -> (its name, its other keys); a plain value is the name."""
    if isinstance(value, Mapping):
        rest = dict(value)
        return rest.pop("name", None), rest
    return value, {}


def _point(values: Mapping[str, Any], d_model: int | None) -> Point:
    name, options = _node(values.get("backend"))
    problem = describe_name(name)  # a built-in, an installed plugin or a path module:function (a plugin)
    if problem:
        raise ValueError(problem)
    # Options at their defaults are spelled out (as the group `backend`'s option does), so a grid's
    # back end and a command line's hash to the same point; null means "tuned per device".
    given = check_fields(get_backend(name).options_type, options, prefix="backend.", fill_defaults=False)
    # a value the harness derives (FP8's format, from the precision: config=False) is not spelled out
    spelled = {f.name: default_of(f) for f in config_fields(get_backend(name).options_type)}
    options = {k: v for k, v in {**spelled, **given}.items() if v is not None}
    precision, _ = _node(values.get("precision"))
    axes = {key: values[key] for key in AXES if key in values and key not in NODES}
    functions = _functions(values, axes)
    if "device" in axes:
        if axes["device"] not in DEVICES:
            raise ValueError(f"device: expected one of {', '.join(DEVICES)}, got {axes['device']!r}")
        axes["device"] = resolve_device(axes["device"])
    if isinstance(axes.get("input_std"), int) and not isinstance(axes["input_std"], bool):
        axes["input_std"] = float(axes["input_std"])  # `input_std=8` means 8.0, and hashes the same
    if d_model is not None:
        heads = axes.get("heads", axis_default("heads"))
        if isinstance(heads, int) and not isinstance(heads, bool) and heads >= 1:
            if d_model % heads:
                raise ValueError(f"heads: {heads} does not divide d_model={d_model} (head_dim = d_model / heads)")
            axes["head_dim"] = d_model // heads
    point = Point(backend=name, backend_options=options, precision=precision, **axes, **functions)
    point.validate()
    return point


def _functions(values: Mapping[str, Any], axes: dict[str, Any]) -> dict[str, Any]:
    """The mask and score_mod nodes as Point fields; a built-in that today's axes say (`mask=causal`,
    `mask=sliding_window mask.window=64`, `score_mod=softcap`) sets those axes in `axes` instead, so it is the
    same point, with the same id, as `causal=true` (selfattn/mods/catalogue.py's fast paths)."""
    from selfattn.mods.discovery import fast_path

    fields_: dict[str, Any] = {}
    for kind in FUNCTION_NODES:
        name, options = _node(values.get(kind, "none"))
        name = "none" if name is None else name
        fast = fast_path(kind, name, options)
        if fast is None:
            fields_[kind], fields_[f"{kind}_options"] = name, options
            continue
        for key, value in fast.items():
            given = axes.get(key, axis_default(key))
            if given not in (axis_default(key), value):
                raise ValueError(f"{key}: {kind}={name} sets {key}={value!r}, and {key}={given!r} was given too")
            axes[key] = value
    return fields_


def typed_columns(values: Mapping[str, Any]) -> dict[str, Any]:
    """The point's columns from raw config values, each kept as it was typed.

    A refused row must show which point was refused: `seq_len=0` stays 0 and `seq_len=abc` stays
    "abc" (in row.json, results.csv and the progress line), even where the column is numeric; so a
    failed row's point columns may hold any scalar, and only a value no cell holds (a list, a
    mapping) becomes its JSON text. The analysis reads such text in an invalid row as missing
    (analysis/load.py). A key left unset is empty.
    """
    row_types = field_types(Row)
    columns: dict[str, Any] = {}
    for f in fields(Point):
        value = values.get(f.name)
        if f.name in NODES:  # a config group's node: {name: ..., options}
            value = value.get("name") if isinstance(value, Mapping) else value
        if f.name in ("backend_options", "mask_options", "score_mod_options"):
            node = values.get(f.name[: -len("_options")])
            options = {k: v for k, v in node.items() if k != "name"} if isinstance(node, Mapping) else {}
            columns[f.name] = json.dumps(options, sort_keys=True, default=str)
            continue
        if row_types[f.name] is str:
            columns[f.name] = None if value is None else str(value)
        else:
            columns[f.name] = _as_typed(value)
    columns["d_model"] = _as_typed(values.get("d_model"))
    return columns


def _as_typed(value: Any) -> Any:
    """A raw value as a cell holds it: a scalar itself, anything else its JSON text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def resolve_device(device: str) -> str:
    """auto -> cuda when torch sees a GPU, else cpu (the measurement's own rule)."""
    from selfattn.measure.device import resolve_device as measured_device

    return measured_device(device)


def raw_point_id(values: Mapping[str, Any]) -> str:
    """An id for a config that does not validate: a hash of every value that is not a runner
    setting, so resume skips it too and two different bad configs never share an id."""
    ignored = {"budget", "timing", "wandb", "grids", "grid_point", "name", "retry_failed", "prevalidate", "report", "metrics",
               "verbose", "report_timeout_s", "baseline"}
    key = {k: v for k, v in values.items() if k not in ignored}
    return "raw-" + hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:12]


def with_scope_defaults(values: Mapping[str, Any], given: Collection[str]) -> dict[str, Any]:
    """`values` with the defaults that follow its scope set on every key not in `given`."""
    follow = {k: v for k, v in scope_defaults(values.get("scope")).items() if k not in given}
    return {**values, **follow}


def grid_keys(cfg: Mapping[str, Any]) -> list[str]:
    """The keys the job's grid point sets (none without one); flat_config has checked the index."""
    index = cfg.get("grid_point")
    return list(grid_points(cfg.get("grids"))[index]) if index is not None else []


def grid_points(grids: Any) -> list[dict[str, Any]]:
    """The union of cartesian grids, in order: [{key: [values]}, ...] -> [{key: value}, ...]."""
    if grids is None:
        return []
    if isinstance(grids, Mapping):
        grids = list(grids.values())
    points: list[dict[str, Any]] = []
    for grid in grids:
        keys = list(grid)
        values = [list(v) if isinstance(v, Sequence) and not isinstance(v, str) else [v] for v in grid.values()]
        points.extend(dict(zip(keys, combo)) for combo in itertools.product(*values))
    return points


def flat_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The job's config as a plain dict, with its grid point (if any) applied on top.

    A grid that names a back end gets that back end's defaults (what the group `backend`'s
    option holds, from its `Options`), not the options of the back end the config started with.
    """
    flat = {k: cfg[k] for k in cfg}
    index = flat.get("grid_point")
    if index is not None:
        points = grid_points(flat.get("grids"))
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(points):
            raise ValueError(f"grid_point: expected an integer in [0, {len(points)}), got {index!r}")
        for key, value in points[index].items():
            if key == "backend" and isinstance(value, str):
                value = {"name": value}
            elif key == "precision" and isinstance(value, str):
                value = {"name": value}

            flat[key] = value
    return flat


def by_device(cpu: Any, cuda: Any, *, _root_: Any = None) -> Any:
    """OmegaConf resolver `${by_device:CPU_VALUE,CUDA_VALUE}`: pick by the config's device.

    Experiments use it so one file serves both families: small sizes on a CPU, long
    sequences on a GPU. The budget guard still skips what does not fit a given GPU.
    """
    device = _root_.get("device", "auto") if _root_ is not None else "auto"
    if device not in DEVICES:  # e.g. a sweep over devices: size for the machine we are on
        device = "auto"
    return cuda if resolve_device(device) == "cuda" else cpu


def grid_range(*, _root_: Any = None) -> str:
    """OmegaConf resolver `${grid_range:}`: the sweep over every point of `grids`."""
    return f"range(0,{len(grid_points(_root_.get('grids')))})"


POINT_NODE = "point"  # conf/config.yaml's defaults list entry: the flat axes at Point's defaults


def point_defaults() -> dict[str, Any]:
    """Every flat sweep axis at `Point`'s default: the config's point keys, generated rather than mirrored in
    conf/config.yaml (the groups `backend`, `precision`, `mask`, `score_mod` have their own options)."""
    return {axis: axis_default(axis) for axis in AXES if axis not in NODES}


def register_resolvers() -> None:
    """What composing conf/ needs besides its files: the resolvers of conf/experiment/*.yaml (`${by_device:...}`,
    `${grid_range:}`), the point's defaults (`point_defaults`, in Hydra's ConfigStore as `point`), the group
    `precision` (an option per name of selfattn/precision_names.py) and the built-ins of the group `backend` (each
    its name and its `Options` at their defaults, selfattn/backends/options/): no file restates them. Every
    process that composes calls it (runners/sweep.py on import; a SLURM job imports that too)."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    for name, fn in (("by_device", by_device), ("grid_range", grid_range)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
    store = ConfigStore.instance()
    store.store(name=POINT_NODE, node=point_defaults())
    for precision in PRECISIONS:  # the group `precision`: one option per precision of the one list
        store.store(group="precision", name=precision, node={"name": precision})
    for name in BACKEND_NAMES:  # a plugin's option comes from hydra_plugins/selfattn_backends/backend_source.py
        store.store(group="backend", name=name, node=builtin_node(name))
