"""Whether a mapping read from outside is a row: the schema's columns, types and possible values.

A row reaches the harness as data from places it does not control: the isolated worker's channel (where a
plugin runs, runners/isolate.py) and the row files of a sweep folder others can write (runners/row_store.py).
Both are checked here against `Row` itself (its fields and their annotations), so the check cannot drift
from the schema: a known status, a value of its column's kind, and no impossible value (a negative time,
size or count). Stdlib only: the row store reads rows without torch.
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any, Mapping

from selfattn.results import STATUSES, Row

# column -> its annotation as written in Row ("str", "int | None", "float | None", "bool | None", "int")
_KINDS: dict[str, str] = {f.name: str(f.type) for f in fields(Row)}
# Columns that count or measure something: never below zero. Units are in the names (docs/architecture.md).
_NON_NEGATIVE_SUFFIXES = ("_ms", "_s", "_bytes", "_frac", "_rows", "_samples", "flops", "gbps", "_steps")
_NON_NEGATIVE = frozenset(
    name for name, kind in _KINDS.items()
    if kind != "str" and (name.endswith(_NON_NEGATIVE_SUFFIXES) or name in {
        "time_samples", "num_threads", "jobs_sharing_device", "tokens_per_s", "schema_version"}))
# A timed call's time and a measured size: a number, never NaN or infinite
_FINITE = frozenset({"time_ms", "time_ms_p20", "time_ms_p80", "peak_mem_bytes", "peak_alloc_bytes", "flops"})
MAX_TEXT_CHARS = 1 << 20  # a cell longer than this (a MiB) is no measurement's


def row_problem(row: Any, strict: bool = False) -> str | None:
    """The first way `row` is not a row of the schema (one line naming the column), or None.

    strict=True (the worker's channel, which sends Row.to_dict()): every column present and no other key.
    Otherwise (a row file, perhaps from an older harness): extra keys are allowed, missing ones are empty.
    """
    if not isinstance(row, Mapping):
        return f"not a mapping of columns but {type(row).__name__}"
    if strict:
        unknown = sorted(set(row) - set(_KINDS))
        if unknown:
            return f"unknown column {unknown[0]!r}"
        missing = sorted(set(_KINDS) - set(row))
        if missing:
            return f"column {missing[0]!r} missing"
    status = row.get("status")
    if status not in STATUSES:
        return f"status {status!r} is not one of {', '.join(STATUSES)}"
    typed = status == "invalid"  # a refused point's row keeps its values as typed (seq_len=-1, causal=2)
    for name, value in row.items():
        kind = _KINDS.get(name)
        if kind is None or typed:
            if not _plain(value):
                return f"column {name!r} holds a {type(value).__name__}, not a plain value"
            continue
        problem = _value_problem(name, kind, value)
        if problem:
            return problem
    return None


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool)) and not (
        isinstance(value, str) and len(value) > MAX_TEXT_CHARS)


def _value_problem(name: str, kind: str, value: Any) -> str | None:
    if value is None:
        return None if kind.endswith("| None") or kind == "str" else f"column {name!r} is empty"
    if isinstance(value, str):
        # A text cell: every column's empty value is "" in an older file, and a window pair is its text
        return None if len(value) <= MAX_TEXT_CHARS else f"column {name!r} holds {len(value)} characters"
    if kind == "str":
        return f"column {name!r} holds a {type(value).__name__}, not text"
    if kind.startswith("bool"):
        return None if isinstance(value, bool) else f"column {name!r} holds {value!r}, not true or false"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"column {name!r} holds a {type(value).__name__}, not a number"
    if name in _NON_NEGATIVE and value < 0:  # (NaN is an honest "not finite" of a measured statistic)
        return f"column {name!r} is {value!r}: it cannot be negative"
    if name in _FINITE and not math.isfinite(value):
        return f"column {name!r} is {value!r}: a time or size is finite"
    return None


def checked_row(values: Mapping[str, Any]) -> Row:
    """A Row from the worker's strict mapping (row_problem(values, strict=True) said None)."""
    return Row(**{name: values[name] for name in _KINDS})
