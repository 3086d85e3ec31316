"""Pick one value for each axis a figure does not vary, and say which in its title.

A merged results table mixes experiments: the cost sweep varies seq_len at one head_dim,
the stability sweep varies head_dim at one seq_len, and so on. A figure of time vs
seq_len must hold every other axis fixed, or it would average apples with pears. For
each such axis, in order, `fix_axes` keeps the value whose rows cover the most distinct
combinations of what the figure varies (so the slice is the richest one), breaking ties
with the conventional default (fp32, scale=auto, no mask, fwd, core, input_std=1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from selfattn.point import AXES, axis_default

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


# The score transforms (selfattn/variants.py): soft-capping, ALiBi and the sink logit change what every score
# is, so their rows answer the variants study's questions (analysis/variants.py) and no other study's.
SCORE_TRANSFORMS = ("softcap", "alibi", "sink")
# A scope=train row is a training run (analysis/training.py reads it), not a call of the attention: its time_ms
# is an optimizer step and its logit_std the learned model's, so no study of calls may slice into it.
RUN_SCOPES = ("train",)


def calls(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows that measure calls of the attention (every scope but the training runs)."""
    return rows[~rows["scope"].isin(RUN_SCOPES)] if "scope" in rows else rows


def plain_scores(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows whose scores are not soft-capped, biased by ALiBi or joined by a sink logit (older files: all)."""
    keep = pd.Series(True, index=rows.index)
    for axis in SCORE_TRANSFORMS:
        keep &= plain(rows, axis)
    return rows if keep.all() else rows[keep]


def self_attention(rows: pd.DataFrame) -> pd.DataFrame:
    """Calls with q_len == seq_len (full self-attention), or all calls when there are none; plain scores only
    (the variants study reads the transformed ones itself)."""
    rows = plain_scores(calls(rows))
    full = rows[rows["q_len"] == rows["seq_len"]]
    return full if not full.empty else rows


# Axes a figure that neither fixes nor varies them holds at their plain value (no window, no
# padding, one document, a K/V head per query head, dot-product scores, no positional encoding),
# so rows of the masks, GQA, additive and positions studies never mix into the figures of the
# chapter's cost and stability studies (nor the FP8 study's inputs with outliers, nor the variants study's
# soft-capped, ALiBi-biased or sink rows). A window pair ("[63, 0]", analysis.load) is a window like any other.
PLAIN_UNLESS_NAMED = ("window", "pad_frac", "documents", "kv_heads", "score", "pos_enc", "input_outliers",
                      *SCORE_TRANSFORMS)


def plain(rows: pd.DataFrame, axis: str) -> pd.Series:
    """Rows whose `axis` is at its plain value (older files without the column count as plain)."""
    if axis not in rows:
        return pd.Series(True, index=rows.index)
    if axis == "kv_heads":
        return rows[axis].isna() | (rows[axis] == rows["heads"])
    default = axis_default(axis)
    # on the column's numpy values: the same answers as pandas' comparisons (NaN equals nothing), in half the time
    values = rows[axis].to_numpy()
    keep = pd.isna(values)
    if default is not None:
        keep = keep | (values == default)
        if isinstance(default, str):  # a text axis: an empty cell (a row written before it existed) is its default
            keep = keep | (values == "")
    return pd.Series(keep, index=rows.index)


def dot_without_positions(rows: pd.DataFrame) -> pd.Series:
    """Rows of dot-product scores without a positional encoding: what the chapter's cost and stability
    studies measure (the additive and positions studies have claims of their own)."""
    return plain(rows, "score") & plain(rows, "pos_enc")


def fix_axes(rows: pd.DataFrame, fixed: Sequence[str], vary: Sequence[str],
             prefer: Mapping[str, Any] | None = None) -> Slice:
    """Keep one value of each axis in `fixed` (in order), maximising the coverage of `vary`;
    axes of PLAIN_UNLESS_NAMED not in either stay at their plain value."""
    prefer = {**PREFERRED, **(prefer or {})}
    rows = calls(rows)
    # The slice is narrowed on a boolean mask and only the columns that choose are read: the rows themselves
    # (a hundred-odd columns) are copied once, at the end, not at every step.
    keep = pd.Series(True, index=rows.index)
    for axis in PLAIN_UNLESS_NAMED:
        if axis not in fixed and axis not in vary:
            keep &= plain(rows, axis)
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
