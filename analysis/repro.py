"""The one command that measures a row's point again, from the row alone.

    git checkout 1a2b3c4 && python -m runners.sweep backend=chunked seq_len=4096 causal=true device=cpu ...

Every point field whose value is not its default (q_len and kv_heads only where they differ from seq_len and
heads, which their null default means), the device that measured it (auto could resolve to another), the back
end by its path (module:function) or its name (a built-in or an entry point: installed the same way), its
options (all of them as the row recorded them, or only those off their defaults when the caller knows the
defaults: `python -m runners.rows DIR --repro ID` does), the metrics when not all ran, and the commit that
measured it (`git_sha`; a "-dirty" one says that the tree had changes the commit does not hold). Pure Python
and selfattn's pure-Python point fields: the analysis (compare's output) and the runner share it.
"""

from __future__ import annotations

import json
import math
import shlex
from typing import Any, Mapping

from selfattn.fields import field_types
from selfattn.metrics import ALL as ALL_METRICS, ran_metrics
from selfattn.point import AXES, NULL_MEANS, Point, axis_default

_TYPES = field_types(Point)
_ALWAYS = ("device",)  # auto resolves to whatever the next machine has


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value == ""


def _plain(name: str, value: Any) -> Any:
    """A loaded cell as the field's own type: 4096.0 -> 4096 for an int field, numpy scalars -> Python."""
    if hasattr(value, "item"):
        value = value.item()
    kind = str(_TYPES.get(name, ""))
    if isinstance(value, float) and value.is_integer() and "int" in kind and "float" not in kind:
        return int(value)
    return value


def _text(value: Any) -> str:
    """A value as Hydra reads it back: true/false, null, numbers as Python prints them, a list as [a,b]."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_text(v) for v in value) + "]"
    return str(value).replace(" ", "")


def _differs(name: str, value: Any, row: Mapping[str, Any]) -> bool:
    if name in _ALWAYS:
        return True
    if name in NULL_MEANS:  # q_len, kv_heads: null stands for seq_len, heads
        return value != _plain(NULL_MEANS[name], row.get(NULL_MEANS[name]))
    default = axis_default(name)
    if isinstance(default, float) and isinstance(value, (int, float)) and not isinstance(value, bool):
        return not math.isclose(float(value), default)
    return value != default


def repro_args(row: Mapping[str, Any], option_defaults: Mapping[str, Any] | None = None) -> list[str]:
    """The `key=value` arguments of the row's point (see the module docstring), back end first."""
    backend = str(row.get("backend_path") or row.get("backend") or "")
    args = [f"backend={backend}"]
    for name in AXES:
        if name == "backend":
            continue
        value = row.get(name)
        if _missing(value):
            continue  # a column this row lacks (an older file): its default measured it
        value = _plain(name, value)
        if name == "window" and isinstance(value, str) and value.startswith("["):
            value = json.loads(value)
        if _differs(name, value, row):
            args.append(f"{name}={_text(value)}")
    try:
        options = json.loads(row.get("backend_options") or "{}")
    except (TypeError, ValueError):
        options = {}
    for key, value in sorted(options.items()):
        if option_defaults is not None and key in option_defaults and option_defaults[key] == value:
            continue
        args.append(f"backend.{key}={_text(value)}")
    ran = ran_metrics(None if _missing(row.get("metrics")) else row.get("metrics"))
    if set(ran) != set(ALL_METRICS):
        args.append(f"metrics={_text([m for m in ALL_METRICS if m in ran])}")
    return args


def repro_command(row: Mapping[str, Any], option_defaults: Mapping[str, Any] | None = None) -> str:
    """The shell line that measures the row's point again at the commit that measured it."""
    command = "python -m runners.sweep " + " ".join(shlex.quote(a) for a in repro_args(row, option_defaults))
    sha = str(row.get("git_sha") or "")
    if not sha or _missing(sha):
        return command
    clean = sha.removesuffix("-dirty")
    note = "  # measured with uncommitted changes in the tree" if sha.endswith("-dirty") else ""
    return f"git checkout {clean[:12]} && {command}{note}"
