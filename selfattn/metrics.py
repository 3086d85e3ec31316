"""What a point measures beyond its time: the `metrics` config key's names and the columns each fills.

A point always measures its time (time_ms and what derives from it: tflops, the guard's prediction, FLOPs,
mask density, kv_cache_bytes). Everything else is a metric a sweep may leave out: memory, accuracy,
stability, permutation, traffic, path_length, each one function of selfattn/measure/metric_steps.py that
declares its columns, their types and place, when it applies and at which step of measure_point it runs
(its docstring says what it measures); rope_shift and fp8 are never chosen, they run wherever they apply.
results.csv's metric columns are derived from those declarations (selfattn/results.py).

A row records which ran (`metrics`: the names in declaration order joined by commas, "none" for none); the
columns of a metric that did not run stay empty. A row written before the key existed (no `metrics` value)
measured all of them. This module reads the registry for those who must not import torch: the runner's
config checks, the analysis and benchmarks/compare_rows.py.
"""

from __future__ import annotations

import difflib
from typing import Any, Iterable, Mapping

# The registry's module imports torch only inside its measurements: importing it here loads no torch
from selfattn.measure.metric_steps import DECLARED as _REGISTRY, Metric

DECLARED: tuple[Metric, ...] = tuple(_REGISTRY.values())
BY_NAME: Mapping[str, Metric] = {metric.name: metric for metric in DECLARED}
# metric -> the row columns it fills, of the metrics `metrics` chooses
METRICS: Mapping[str, tuple[str, ...]] = {m.name: tuple(m.columns) for m in DECLARED if m.chosen}
ALL: tuple[str, ...] = tuple(METRICS)
NONE_LABEL = "none"  # the `metrics` cell of a row that measured its time only


def parse_metrics(value: Any) -> tuple[str, ...]:
    """A config's `metrics` (a list of names; "all") -> the names in canonical order, each once.

    Raises a one-line ValueError naming the key: an unknown name gets the nearest known one."""
    if isinstance(value, str) and value.strip().lower() == "all":
        return ALL
    if value is None or isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise ValueError(f"metrics: expected a list of metric names (some of {', '.join(ALL)}; [] for time only), "
                         f"got {value!r}")
    names = list(value)
    for name in names:
        if name not in METRICS:
            near = difflib.get_close_matches(str(name), ALL, n=1, cutoff=0.6)
            hint = f"did you mean {near[0]}?" if near else f"allowed: {', '.join(ALL)}"
            raise ValueError(f"metrics: unknown metric {name!r}; {hint}")
    return tuple(m for m in ALL if m in names)


def metrics_label(metrics: Iterable[str]) -> str:
    """The row's `metrics` cell: "memory,accuracy" (canonical order), "none" for time only."""
    chosen = set(metrics)
    return ",".join(m for m in ALL if m in chosen) or NONE_LABEL


def ran_metrics(cell: Any) -> frozenset[str]:
    """Which metrics a row's `metrics` cell says ran; an empty or missing cell (a row written before
    the key existed) measured all of them."""
    if cell is None or (isinstance(cell, float) and cell != cell) or str(cell).strip() == "":
        return frozenset(ALL)
    text = str(cell).strip()
    if text == NONE_LABEL:
        return frozenset()
    return frozenset(name.strip() for name in text.split(",") if name.strip())


def metric_of(column: str) -> str | None:
    """The metric that fills `column`, or None for a column every measured row has."""
    return next((name for name, columns in METRICS.items() if column in columns), None)
