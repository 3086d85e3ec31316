"""What a point measures beyond its time: the `metrics` config key's names and the columns each fills.

A point always measures its time (time_ms and what derives from it: tflops, the guard's
prediction, FLOPs, mask density, kv_cache_bytes). Everything else is a metric a sweep may leave
out, each one a group of `selfattn.measure.run.measure_point`'s work:

- memory: the memory call (peak RSS growth on a CPU, the allocator's peak on CUDA) and, on a CPU,
  one profiled call for the allocator's exact peak: two extra calls of the point's size;
- accuracy: the float64 reference of the sampled query rows (and their gradients) against the
  warm-up's output;
- stability: logit std, entropy, largest weight and gradient norms on the same rows;
- permutation: the permutation-equivariance check (a short sequence; a compiled back end's at the
  point's shape);
- traffic: the bytes a call moves, the bandwidth that implies, and the device's copy bandwidth;
- path_length: scope=layer, lstm, gru: how the output's gradient decays with the distance to an input
  (float64, at the point's n and d_model; selfattn/measure/path_length.py).

A row records which ran (`metrics`: the names in this order joined by commas, "none" for none); the
columns of a metric that did not run stay empty. A row written before the key existed (no `metrics`
value) measured all of them. Pure Python: the runner's config checks and the analysis read it.
"""

from __future__ import annotations

import difflib
from typing import Any, Iterable, Mapping

# metric -> the row columns it fills (all of them empty when it does not run)
METRICS: Mapping[str, tuple[str, ...]] = {
    "memory": ("peak_mem_bytes", "peak_alloc_bytes"),
    "accuracy": ("accuracy_rows", "max_abs_err", "rel_rms_err", "nonfinite_frac", "grad_max_abs_err",
                 "grad_rel_rms_err"),
    "stability": ("logit_std", "softmax_entropy", "max_weight", "saturated_frac", "grad_norm_q", "grad_norm_k",
                  "grad_norm_logits", "grad_nonfinite_frac"),
    "permutation": ("perm_max_abs_diff",),
    "traffic": ("bytes_moved", "gbps", "device_peak_gbps"),
    "path_length": ("grad_by_distance", "grad_far_near_ratio"),
}
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
