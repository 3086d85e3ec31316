"""From a Hydra job's config to a validated `selfattn.Point`, its `Budget` and its point_id.

Validation happens here, in code, not in a Hydra schema: a bad value inside a grid must
become a row with status=invalid while the sweep goes on, and a single run with a bad value
must stop with ONE line naming the key and what is allowed. The dataclasses below are the
schema (types, defaults, allowed values); `check_section` checks a config node against one.
Nothing here imports Hydra, so tests call it with plain dicts.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping, Sequence

from selfattn.point import DEVICES, PRECISIONS, Point, scale_label

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
AXES = ("device", "batch", "heads", "seq_len", "q_len", "head_dim", "causal", "scale",
        "mode", "scope", "input_std", "seed")


@dataclass
class BudgetConf:
    """Maps one to one onto selfattn.measure.Budget."""

    mem_fraction: float = 0.8
    max_point_s: float = 60.0
    timing_s: float = 1.0
    accuracy_rows: int = 128
    measure_device_peak: bool = True


@dataclass
class WandbConf:
    mode: str = "offline"  # offline | online | disabled
    project: str = "selfattn-bench"
    entity: str | None = None
    run_per_point: bool = False


@dataclass
class NaiveOptions:
    upcast_softmax: bool = False


@dataclass
class SdpaOptions:
    kernel: str = "auto"


@dataclass
class ChunkedOptions:
    q_chunk: int | None = None  # None: the tuned default
    kv_chunk: int | None = None


BACKEND_OPTIONS: dict[str, type] = {"naive": NaiveOptions, "sdpa": SdpaOptions, "chunked": ChunkedOptions}
ALLOWED: dict[str, tuple[str, ...]] = {
    "wandb.mode": ("offline", "online", "disabled"),
    "backend.kernel": ("auto", "flash", "efficient", "math", "cudnn"),
}


def _check_value(key: str, value: Any, kind: Any) -> Any:
    """One field against its annotation; returns the value, raises a one-line ValueError."""
    optional = isinstance(kind, str) and kind.endswith("| None")
    base = kind.split("|")[0].strip() if isinstance(kind, str) else getattr(kind, "__name__", str(kind))
    if value is None:
        if optional:
            return None
        raise ValueError(f"{key}: expected {base}, got null")
    if key in ALLOWED:
        if value not in ALLOWED[key]:
            raise ValueError(f"{key}: expected one of {', '.join(ALLOWED[key])}, got {value!r}")
        return value
    if base == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"{key}: expected true or false, got {value!r}")
    elif base == "int":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{key}: expected {'null or ' if optional else ''}an integer >= 1, got {value!r}")
    elif base == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{key}: expected a positive number, got {value!r}")
        return float(value)
    elif base == "str" and not isinstance(value, str):
        raise ValueError(f"{key}: expected a string, got {value!r}")
    return value


def check_section(prefix: str, node: Mapping[str, Any] | None, schema: type) -> dict[str, Any]:
    """Check a config node against a dataclass schema: known keys, types, allowed values."""
    node = dict(node or {})
    known = {f.name: f for f in fields(schema)}
    for key in node:
        if key not in known:
            raise ValueError(f"{prefix}.{key}: unknown key; allowed: {', '.join(known)}")
    checked = {}
    for name, f in known.items():
        value = node.get(name, f.default)
        checked[name] = _check_value(f"{prefix}.{name}", value, f.type)
    return checked


@functools.lru_cache(maxsize=None)
def backend_defaults(name: str) -> dict[str, Any]:
    """The options a back end gets when a grid names it without options (conf/backend/NAME.yaml)."""
    from omegaconf import OmegaConf  # only needed for grids, keep config import light

    path = CONF_DIR / "backend" / f"{name}.yaml"
    return dict(OmegaConf.to_container(OmegaConf.load(path))) if path.exists() else {"name": name}


def grid_points(grids: Any) -> list[dict[str, Any]]:
    """The union of cartesian grids, in order: [{key: [values]}, ...] -> [{key: value}, ...]."""
    if grids is None:
        return []
    if isinstance(grids, Mapping):
        grids = list(grids.values())
    points = []
    for grid in grids:
        keys = list(grid)
        values = [list(v) if isinstance(v, Sequence) and not isinstance(v, str) else [v] for v in grid.values()]
        points.extend(dict(zip(keys, combo)) for combo in itertools.product(*values))
    return points


def flat_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The job's config as a plain dict, with its grid point (if any) applied on top."""
    flat = {k: cfg[k] for k in cfg}
    index = flat.get("grid_point")
    if index is not None:
        points = grid_points(flat.get("grids"))
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(points):
            raise ValueError(f"grid_point: expected an integer in [0, {len(points)}), got {index!r}")
        for key, value in points[index].items():
            if key == "backend" and isinstance(value, str):
                value = backend_defaults(value)
            elif key == "precision" and isinstance(value, str):
                value = {"name": value}
            flat[key] = value
    return flat


def resolve_device(device: Any) -> str:
    """auto -> cuda when torch sees a GPU, else cpu; cpu and cuda pass through."""
    if device not in DEVICES:
        raise ValueError(f"device: expected one of {', '.join(DEVICES)}, got {device!r}")
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def point_from_config(cfg: Mapping[str, Any]) -> Point:
    """Build and validate the job's Point; raises ValueError (one line) for any bad value."""
    flat = flat_config(cfg)
    backend = flat.get("backend")
    backend = dict(backend) if isinstance(backend, Mapping) else {"name": backend}
    name = backend.pop("name", None)
    if name not in BACKEND_OPTIONS:
        raise ValueError(f"backend: expected one of {', '.join(BACKEND_OPTIONS)}, got {name!r}")
    options = check_section("backend", backend, BACKEND_OPTIONS[name])
    options = {k: v for k, v in options.items() if v is not None}  # None = the back end's default
    precision = flat.get("precision")
    precision = precision.get("name") if isinstance(precision, Mapping) else precision
    if precision not in PRECISIONS:
        raise ValueError(f"precision: expected one of {', '.join(PRECISIONS)}, got {precision!r}")
    axes = {key: flat.get(key) for key in AXES}
    if isinstance(axes["input_std"], int) and not isinstance(axes["input_std"], bool):
        axes["input_std"] = float(axes["input_std"])
    d_model = flat.get("d_model")
    if d_model is not None:
        heads = axes["heads"]
        if isinstance(d_model, bool) or not isinstance(d_model, int) or d_model < 1:
            raise ValueError(f"d_model: expected null or an integer >= 1, got {d_model!r}")
        if isinstance(heads, int) and heads >= 1 and d_model % heads:
            raise ValueError(f"heads: {heads} does not divide d_model={d_model} (head_dim = d_model / heads)")
        if isinstance(heads, int) and heads >= 1:
            axes["head_dim"] = d_model // heads
    axes["device"] = resolve_device(axes["device"])
    point = Point(backend=name, backend_options=options, precision=precision, **axes)
    point.validate()
    return point


def budget_kwargs(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The `budget` node checked against BudgetConf: keyword arguments for measure.Budget."""
    budget = check_section("budget", cfg.get("budget"), BudgetConf)
    if budget["mem_fraction"] > 1:
        raise ValueError(f"budget.mem_fraction: expected a number in (0, 1], got {budget['mem_fraction']!r}")
    return budget


def point_id(point: Point) -> str:
    """A stable hash of everything that decides what is measured (not budget, not wandb)."""
    key = {
        "backend": point.backend,
        "backend_options": dict(sorted(point.backend_options.items())),
        "precision": point.precision,
        "device": point.device,
        **{name: getattr(point, name) for name in AXES if name not in ("device", "q_len", "scale")},
        "q_len": point.q_len_resolved,
        "scale": scale_label(point.scale),
    }
    return hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


def raw_point_id(cfg: Mapping[str, Any]) -> str:
    """point_id for a config that does not validate: a hash of its raw values, so resume skips it too."""
    try:
        flat = flat_config(cfg)
    except ValueError:
        flat = dict(cfg)
    key = {k: flat.get(k) for k in ("backend", "precision", "d_model", *AXES)}
    return "raw-" + hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:12]


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


def register_resolvers() -> None:
    from omegaconf import OmegaConf

    for name, fn in (("by_device", by_device), ("grid_range", grid_range)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
