"""Pick one value for each axis a figure does not vary, and say which in its title.

A merged results table mixes experiments: the cost sweep varies seq_len at one head_dim,
the stability sweep varies head_dim at one seq_len, and so on. A figure of time vs
seq_len must hold every other axis fixed, or it would average apples with pears. For
each such axis, in order, `fix_axes` keeps the value whose rows cover the most distinct
combinations of what the figure varies (so the slice is the richest one), breaking ties
with the conventional default (fp32, scale=auto, no mask, fwd, core, input_std=1). Every ablation axis
(selfattn.point.ABLATIONS: a field not marked plain=False) a study does not name stays at its plain value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from selfattn.point import ABLATIONS, AXES, NULL_MEANS, axis_default

# The conventional value of each axis, used to break ties between equally rich slices: the
# sweep's own defaults (fp32, scale=auto, no mask, fwd, core, input_std=1, ...).
PREFERRED: dict[str, Any] = {axis: axis_default(axis) for axis in AXES}


@dataclass
class Slice:
    rows: pd.DataFrame
    fixed: dict[str, Any]  # axis -> the value kept
    candidates: dict[str, int]  # axis -> how many values it had to choose from

    def describe(self, always: Iterable[str] = ()) -> str:
        """The fixed values worth telling a reader: those chosen among several, plus `always`."""
        keep = [a for a in self.fixed if self.candidates.get(a, 1) > 1 or a in set(always)]
        return ", ".join(axis_text(a, self.fixed[a]) for a in keep)


def matches(series: pd.Series, value: Any) -> pd.Series:
    """series == value, where NaN equals NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return series.isna()
    return series == value


# A scope=train row is a training run (analysis/training.py reads it), not a call of the attention: its time_ms
# is an optimizer step and its logit_std the learned model's, so no study of calls may slice into it.
RUN_SCOPES = ("train",)


def calls(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows that measure calls of the attention (every scope but the training runs)."""
    return rows[~rows["scope"].isin(RUN_SCOPES)] if "scope" in rows else rows


def plain(rows: pd.DataFrame, axis: str) -> pd.Series:
    """Rows whose `axis` is at its plain value, its default (older files without the column count as plain; a
    null that stands for another field, kv_heads for heads, is plain where the row holds that field's value)."""
    if axis not in rows:
        return pd.Series(True, index=rows.index)
    default = axis_default(axis)
    # on the column's numpy values: the same answers as pandas' comparisons (NaN equals nothing), in half the time
    values = rows[axis].to_numpy()
    keep = pd.isna(values)
    if default is not None:
        keep = keep | (values == default)
        if isinstance(default, str):  # a text axis: an empty cell (a row written before it existed) is its default
            keep = keep | (values == "")
    elif NULL_MEANS.get(axis) in rows:
        keep = keep | (values == rows[NULL_MEANS[axis]].to_numpy())
    return pd.Series(keep, index=rows.index)


def held(rows: pd.DataFrame, vary: Iterable[str] = ()) -> pd.Series:
    """Rows at the plain value of every ablation axis (selfattn.point.ABLATIONS) not in `vary`: a study names
    the axes it varies, and rows of the other studies' ablations (a window, GQA, additive scores, an encoding,
    a soft-cap, ...) and of any axis added later never mix into it. A window pair ("[63, 0]", analysis.load) is
    a window like any other."""
    named = set(vary)
    keep = pd.Series(True, index=rows.index)
    for axis in ABLATIONS:
        if axis not in named:
            keep &= plain(rows, axis)
    return keep


def plain_rows(rows: pd.DataFrame, vary: Iterable[str] = ()) -> pd.DataFrame:
    """`rows` less those off the plain value of an ablation axis not in `vary` (the same object when none is)."""
    keep = held(rows, vary)
    return rows if keep.all() else rows[keep]


def self_attention(rows: pd.DataFrame, vary: Iterable[str] = ()) -> pd.DataFrame:
    """Calls with q_len == seq_len (full self-attention), or all calls when there are none, at the plain value of
    every ablation axis not in `vary`."""
    rows = plain_rows(calls(rows), vary)
    full = rows[rows["q_len"] == rows["seq_len"]]
    return full if not full.empty else rows


def fix_axes(rows: pd.DataFrame, fixed: Sequence[str], vary: Sequence[str],
             prefer: Mapping[str, Any] | None = None) -> Slice:
    """Keep one value of each axis in `fixed` (in order), maximising the coverage of `vary`;
    ablation axes in neither stay at their plain value (`held`)."""
    prefer = {**PREFERRED, **(prefer or {})}
    rows = calls(rows)
    # The slice is narrowed on a boolean mask and only the columns that choose are read: the rows themselves
    # (a hundred-odd columns) are copied once, at the end, not at every step.
    keep = held(rows, (*fixed, *vary))
    ok = rows["status"] == "ok"
    chosen: dict[str, Any] = {}
    candidates: dict[str, int] = {}
    for axis in fixed:
        column = rows[axis][keep]
        values = column.drop_duplicates().tolist()
        candidates[axis] = len(values)
        if not values:
            continue
        if len(values) == 1:
            chosen[axis] = values[0]
            continue
        best_score, best_value = None, values[0]
        for value in values:
            group = keep & matches(rows[axis], value)
            if vary:
                coverage = len(rows.loc[group & ok, list(vary)].drop_duplicates())
            else:
                coverage = int((group & ok).sum())
            score = (coverage, _is(value, prefer.get(axis)), int(group.sum()))
            if best_score is None or score > best_score:
                best_score, best_value = score, value
        chosen[axis] = best_value
        keep &= matches(rows[axis], best_value)
    return Slice(rows=rows[keep], fixed=chosen, candidates=candidates)


def _is(value: Any, preferred: Any) -> bool:
    if preferred is None:
        return False
    try:
        return bool(value == preferred)
    except (TypeError, ValueError):
        return False


def axis_text(axis: str, value: Any) -> str:
    """How an axis value reads in a title: 'd_k=64', 'scale=1/√d_k', 'no mask', 'fp32'."""
    if axis == "scale":
        return scale_text(value)
    if axis == "causal":
        return "causal" if bool(value) else "no mask"
    if axis in ("mode", "scope", "precision", "device_label", "backend"):
        return str(value)
    names = {"head_dim": "d_k", "seq_len": "n", "heads": "heads", "batch": "batch",
             "d_model": "d_model", "input_std": "input std", "q_len": "q_len"}
    return f"{names.get(axis, axis)}={number_text(value)}"


def scale_text(value: Any) -> str:
    if value == "auto":
        return "scaled 1/√d_k"
    if value == "none":
        return "unscaled"
    return f"scale={value}"


def window_label(value: Any) -> str:
    """A window cell as a label's text: '256' (one width), '[63, 0]' (a pair, as analysis.load keeps it)."""
    return value if isinstance(value, str) else number_text(float(value))


def number_text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
