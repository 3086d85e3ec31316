"""What was measured, as one small table: the swept axes against each back end's median time and memory peak.

One definition for every place that shows it: the report opens with `summary_markdown`, a finished sweep and
`python -m runners.rows DIR --table` print `summary_text`, and `summary_frame` is the tidy table both render.

An axis is swept when its `Point` field takes more than one value among the measured rows (seeds are repeats:
the median runs over them); several devices add a `device` axis. A back end is its variant as the figures
name it (`analysis.cost.variant_labels`: "naive+compile", or "chunked (q_chunk=256)" when one variant ran
with several option sets). Memory is the column the cost figures read (`analysis.cost.memory_metric`: the
allocator's exact peak where rows have it, else the process's peak RSS). Refused (`invalid`) rows never ran,
so they count in the status line only. A judged kernel's verdicts (`incorrect`, `timeout`, `crashed`:
analysis.judged) are never results: a cell holding one is marked ("12.3 ms (incorrect)", the time of the ok rows
or, when none is, of the incorrect rows that kept theirs) and never the fastest, and a line under the table names
each such back end with its count.

Rows that are not one simple grid (the default sweep is a union of small grids, each varying other axes) would make
a table of a dozen axis columns and hundreds of mostly empty cells. Their table leads with the slice that answers
"which back end is fastest at which n" (`leading_slice`): seq_len (with causal or precision) against every back end,
the other axes held at the values the most points share; one line names the held values and what the other rows vary.

"My kernel against theirs": each result cell carries its speed-up over a baseline back end (`baseline`: sdpa by
default when it ran, any other by name, `none` for none), the baseline's median time over the cell's, as
tritonbench's `speedup` is (2.00× = twice as fast). On a terminal no back end is ever left out for width: memory goes
first, then option names from the labels, and a table still too wide is split into parts, each repeating the axes.
"""

from __future__ import annotations

import math
import re
import textwrap
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import pandas as pd
from tabulate import tabulate

from analysis.cost import memory_metric, skipna, variant_names, variant_labels, variant_order
from analysis.judged import JUDGED, left_out_text, status_counts
from analysis.load import window_order
from analysis.noise import FEWER_THREADS_MARK, fewer_threads_mask, fewer_threads_note, noise_note
from selfattn.fields import nearest
from selfattn.point import FIELD_NAMES, NULL_MEANS

# Never an axis of the table: the back end and its options are its columns, seeds are repeats of one point.
NOT_AXES: tuple[str, ...] = ("backend", "backend_options", "seed", "device")
MEMORY_COLUMNS: tuple[str, ...] = ("peak_alloc_bytes", "peak_mem_bytes")
_FASTEST_MARK = "*"
# The axes that matter most for cost, in the order the leading slice takes them as its rows (seq_len first).
LEAD_AXES: tuple[str, ...] = ("seq_len", "causal", "precision")
_CELL_COLUMNS: tuple[str, ...] = ("backend", "rows", "ok", "time_ms", "status", "not_result", "fewer_threads",
                                  "speedup",
                                  *MEMORY_COLUMNS)
DEFAULT_BASELINE = "sdpa"  # the speed-ups' reference when it ran and no other is named (the field's usual one)
NO_BASELINE = "none"  # `--baseline none`: no speed-ups
_SPEEDUP_MARK = "×"


def swept_axes(rows: pd.DataFrame) -> list[str]:
    """The Point fields (and `device` across several devices) that take more than one value among `rows`."""
    axes: list[str] = []
    for name in FIELD_NAMES:
        if name in NOT_AXES or name not in rows:
            continue
        values = rows[name]
        if values.astype(str).nunique(dropna=False) <= 1:  # null is a value (window=null,8): pandas 3 keeps it NaN
            continue
        restated = NULL_MEANS.get(name)  # a field that only restates another on every row (q_len = seq_len) is no axis
        if restated in rows and (values.isna() | (values == rows[restated])).all():
            continue
        axes.append(name)
    if _device_column(rows) and rows[_device_column(rows)].nunique() > 1:
        axes.insert(0, "device")
    return axes


def _device_column(rows: pd.DataFrame) -> str | None:
    for name in ("device_label", "device_name", "device"):
        if name in rows:
            return name
    return None


def _measured(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[rows["status"] != "invalid"] if "status" in rows else rows


def baseline_label(labels: Iterable[str], name: str | None = None) -> str | None:
    """The back-end label (as `summary_frame` names them) the speed-ups are over, among `labels`.

    `name` None: sdpa when it ran, else none. `none`: none. A label ("chunked (q_chunk=256)"), or a back end's
    name when one option set of it ran ("chunked"). Anything else raises ValueError in one line naming the
    labels (the back ends of these rows)."""
    labels = list(dict.fromkeys(labels))
    if name is None:
        return DEFAULT_BASELINE if DEFAULT_BASELINE in labels else None
    if name == NO_BASELINE:
        return None
    if name in labels:
        return name
    sets = [label for label in labels if label.split(" (", 1)[0] == name]
    if len(sets) == 1:
        return sets[0]
    if sets:
        raise ValueError(f"baseline: {name} ran with {len(sets)} option sets; name one: {', '.join(sets)}")
    near = nearest(name, labels)
    raise ValueError(f"baseline: expected one of {', '.join(labels)} (the back ends of these rows) or "
                     f"{NO_BASELINE}, got {name!r}" + (f"; did you mean {near}?" if near else ""))


def check_baseline(rows: pd.DataFrame, baseline: str | None) -> None:
    """Raise `baseline_label`'s ValueError when `baseline` names no back end of `rows` (before a long job uses it)."""
    measured = _measured(rows)
    if baseline is not None and len(measured):
        if "backend_options" not in measured:
            measured = measured.assign(backend_options="")
        baseline_label(variant_labels(measured), baseline)


def _speedups(frame: pd.DataFrame, axes: Sequence[str], label: str | None) -> pd.Series:
    """Each result cell's speed-up over `label`'s cell at the same axes' values: its median time over the cell's.
    NaN where either is no result (no ok row, a judged row, no time) and for the baseline's own cells."""
    out = pd.Series(math.nan, index=frame.index, dtype=float)
    if label is None:
        return out
    result = (frame["ok"] > 0) & (frame["not_result"] == "") & frame["time_ms"].notna()
    keys = frame[list(axes)].astype(str).apply(tuple, axis=1) if axes else pd.Series([()] * len(frame), index=frame.index)
    base = {key: time for key, time, name, good in zip(keys, frame["time_ms"], frame["backend"], result)
            if name == label and good}
    for index, key, time, name, good in zip(frame.index, keys, frame["time_ms"], frame["backend"], result):
        if good and name != label and key in base and time > 0:
            out[index] = base[key] / time
    return out


def summary_frame(rows: pd.DataFrame, baseline: str | None = None) -> pd.DataFrame:
    """One row per swept-axes value and back end: `rows`, `ok`, median `time_ms` and memory of the ok rows, and
    `status` ("ok", or the failed rows' statuses, e.g. "oom" or "1 oom, 1 error", when none ran), and `speedup`
    over the `baseline` back end (`baseline_label`: sdpa by default when it ran; NaN where there is none).

    `not_result` names the cell's judged rows ("incorrect", or "1 incorrect, 1 timeout" in a cell of several rows;
    empty when it has none): such a cell is never a result. Its `time_ms` is then the median of the ok rows or,
    when none is ok, of the judged rows that kept a time (an incorrect row keeps its time, for inspection).

    Columns: the swept axes (`swept_axes`), `backend` (the variant's label), `rows`, `ok`, `time_ms`, the memory
    column (`peak_alloc_bytes` or `peak_mem_bytes`, named as measured), `status`, `not_result`, `fewer_threads` (an ok
    row of the cell was timed on fewer threads than the table's others: analysis.noise), `speedup`. Sorted by the
    axes, then the registry's back-end order (a variant's option sets in the rows' order). Empty (with those
    columns) when no row ran. A `baseline` that is no back end of these rows raises ValueError (`baseline_label`).
    """
    measured = _measured(rows).copy()
    axes = swept_axes(measured)
    memory = memory_metric(measured) if len(measured) else MEMORY_COLUMNS[-1]
    columns = [*axes, "backend", "rows", "ok", "time_ms", memory, "status", "not_result", "fewer_threads", "speedup"]
    if measured.empty:
        return pd.DataFrame(columns=columns)
    if "device" in axes:
        measured["device"] = measured[_device_column(measured)]
    if "backend_options" not in measured:
        measured["backend_options"] = ""
    measured["_name"] = variant_names(measured)
    measured["backend"] = variant_labels(measured)
    if memory not in measured:
        measured[memory] = math.nan
    records = []
    # Each group's cells from the columns' numpy values (a pandas frame per group cost most of the report's
    # summary): the medians skip NaN, as pandas' do.
    is_ok = (measured["status"] == "ok").to_numpy()
    is_judged = measured["status"].isin(JUDGED).to_numpy()
    times = measured["time_ms"].to_numpy(dtype=float)
    memories = measured[memory].to_numpy(dtype=float)
    fewer = fewer_threads_mask(measured).to_numpy()  # timed on fewer threads than the table's others (noise.py)
    keys = [*axes, "_name", "backend"]
    codes = measured.groupby(keys, sort=False, dropna=False).ngroup().to_numpy()  # numbered as first seen
    key_values = [measured[k].to_numpy() for k in keys]
    for code in range(codes.max() + 1):
        at = np.flatnonzero(codes == code)
        key = tuple(values[at[0]] for values in key_values)
        ok = at[is_ok[at]]
        judged = at[is_judged[at]]
        if len(ok):
            status = "ok"
        else:
            failed = measured["status"].iloc[at].value_counts()
            status = ", ".join(f"{n} {s}" if len(at) > 1 else str(s) for s, n in failed.items())
        not_result = ""
        if len(judged):
            counts = measured["status"].iloc[judged].value_counts()
            not_result = ", ".join(f"{n} {s}" if len(at) > 1 else str(s) for s, n in counts.items())
        shown = ok if len(ok) else judged  # a judged cell's time is shown marked, never ranked (_wide)
        records.append({**dict(zip(keys, key)), "rows": len(at), "ok": len(ok),
                        "time_ms": skipna(np.median, times[shown]), memory: skipna(np.median, memories[ok]),
                        "status": status, "not_result": not_result, "fewer_threads": bool(fewer[ok].any())})
    frame = pd.DataFrame.from_records(records)
    frame["_order"] = frame["_name"].map(variant_order)
    # option sets of one variant: as they came; window cells mix widths and pairs' texts (analysis.load)
    frame = frame.sort_values([*axes, "_order"], kind="stable",
                              key=lambda column: column.map(window_order) if column.name == "window" else column)
    frame["speedup"] = _speedups(frame, axes, baseline_label(frame["backend"], baseline))
    return frame[columns].reset_index(drop=True)


@dataclass(frozen=True)
class Slice:
    """The part of a summary frame that leads its table: `frame` holds only the axes that vary in it (its rows);
    `held` the other swept axes' values; `other_rows` the measured rows outside it and `other_axes` the held axes
    on which they differ."""

    frame: pd.DataFrame
    held: dict[str, object]
    other_rows: int
    other_axes: list[str]


def frame_axes(frame: pd.DataFrame) -> list[str]:
    """The axis columns of a `summary_frame`."""
    return [c for c in frame.columns if c not in _CELL_COLUMNS]


def _is_grid(frame: pd.DataFrame, axes: Sequence[str]) -> bool:
    """Whether the points are every combination of the axes' values (one grid), as text so NaN and bools compare."""
    if len(axes) <= 1:
        return True
    keys = frame[list(axes)].astype(str)
    return len(keys.drop_duplicates()) == math.prod(keys[a].nunique() for a in axes)


def _tuples(keys: pd.DataFrame, columns: Sequence[str]) -> pd.Series:
    """Each row's values of `columns` as one tuple (the empty tuple for no columns)."""
    if not columns:
        return pd.Series([()] * len(keys), index=keys.index, dtype=object)
    return keys[list(columns)].apply(tuple, axis=1)


def _plain(value: object) -> object:
    """A NumPy scalar as the Python value it holds (np.False_ -> False), so it prints as the table's cells do."""
    return value.item() if hasattr(value, "item") else value


def leading_slice(frame: pd.DataFrame) -> Slice | None:
    """The slice a table of `frame` (a `summary_frame`) leads with, or None when the points are one grid (the whole
    table is the answer).

    Rows: seq_len, then causal or precision (`LEAD_AXES`, whichever gives the larger slice), else the first axis.
    The other axes are held at the combination of values with the most ok cells among those where at least two back
    ends ran (any combination when none has two). Row axes with one value in the slice join the held ones."""
    axes = frame_axes(frame)
    if _is_grid(frame, axes):
        return None
    keys = frame[axes].astype(str)
    ok = frame["ok"] > 0
    lead = [a for a in LEAD_AXES if a in axes] or axes[:1]
    candidates = [[lead[0], second] for second in lead[1:]] + [[lead[0]]]
    best: tuple[tuple[int, int, int], list[str], tuple] | None = None
    for rank, row_axes in enumerate(candidates):
        held_axes = [a for a in axes if a not in row_axes]
        for key, group in frame[ok].groupby(_tuples(keys[ok], held_axes), sort=False):
            score = (int(group["backend"].nunique() >= 2), len(group), -rank)
            if best is None or score > best[0]:
                best = (score, held_axes, key)
    if best is None:  # no ok cell at all: the whole table says what failed
        return None
    _, held_axes, key = best
    if not held_axes:  # the lead axes are all the axes: the whole table is the slice
        return None
    inside = _tuples(keys, held_axes) == key
    part = frame[inside]
    single = [a for a in axes if a in held_axes or part[a].astype(str).nunique() <= 1]  # in the frame's axis order
    held = {a: _plain(part[a].iloc[0]) for a in single}
    outside = frame[~inside]
    other_axes = [a for a in held if (outside[a].astype(str) != str(held[a])).any()]
    part = part.drop(columns=list(held)).reset_index(drop=True)
    return Slice(part, held, int(outside["rows"].sum()), other_axes)


def held_text(piece: Slice) -> str:
    """'at precision fp32, heads 4, scope core' (no held axis: 'at every point')."""
    if not piece.held:
        return "at every point"
    return "at " + ", ".join(f"{a} {_axis_value(v)}" for a, v in piece.held.items())


def _others_text(piece: Slice, where: str) -> str:
    if not piece.other_rows:
        return ""
    vary = ", ".join(piece.other_axes)
    return f"{piece.other_rows} other rows vary {vary} ({where})"


def status_line(rows: pd.DataFrame) -> str:
    """'24 rows: 20 ok, 3 oom, 1 invalid', every row counted (refused ones too), in STATUSES' order."""
    return status_counts(rows)


def not_results_line(rows: pd.DataFrame) -> str:
    """'Not results (marked, never the fastest): triton_bad (3 incorrect of 12 points)', or empty."""
    text = left_out_text(_measured(rows)) if "status" in rows else ""
    return f"Not results (marked, never the fastest): {text}" if text else ""


def format_ms(value: float) -> str:
    """Three significant figures without an exponent: 0.0123, 1.23, 12.3, 1234."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1 or value == 0:
        return f"{value:.2f}"
    return f"{value:#.3g}"  # '#' keeps the trailing zero: 0.470, not 0.47


def format_bytes(value: float) -> str:
    """Binary units, three significant figures: 512 B, 1.50 KiB, 12.0 MiB, 3.20 GiB."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= size:
            scaled = value / size
            return f"{scaled:.0f} {unit}" if scaled >= 100 else f"{scaled:#.3g} {unit}"
    return f"{value:.0f} B"


def _axis_value(value: object) -> str:
    if isinstance(value, (bool, np.bool_)):  # pandas before 3 hands a bool column's cells over as numpy's bool
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "—"
        return f"{value:.0f}" if value.is_integer() else f"{value:g}"
    return str(value)


def _memory_column(frame: pd.DataFrame) -> str | None:
    """The memory column when any ok row measured it."""
    for name in MEMORY_COLUMNS:
        if name in frame and frame[name].notna().any():
            return name
    return None


def _wide(frame: pd.DataFrame, *, memory: bool, mark_fastest: str) -> tuple[list[str], list[str], list[list[str]]]:
    """(axis headers, back-end headers, cells per table row): back ends as columns, one cell per point and back end,
    the fastest back end of a row marked when more than one ran, and a result's speed-up over the baseline after
    its time ("1.23 ms · 1.85×", `summary_frame`'s `speedup`). A cell holding a judged row is no result: its time is
    shown with the statuses after it ("12.3 ms (incorrect)"), it is never the fastest and has no speed-up."""
    axes = frame_axes(frame)
    backends = list(dict.fromkeys(frame["backend"]))
    mem = _memory_column(frame) if memory else None
    speedups = frame["speedup"] if "speedup" in frame else pd.Series(math.nan, index=frame.index)
    cells_by_row: list[list[str]] = []
    groups = frame.groupby(axes, sort=False, dropna=False) if axes else [((), frame)]
    for key, group in groups:
        key = key if isinstance(key, tuple) else (key,)
        by_backend = {row.backend: (row, speedups[index]) for index, row in zip(group.index, group.itertuples(index=False))}
        results = group[(group["ok"] > 0) & (group["not_result"] == "")]
        times = results["time_ms"].dropna()
        fastest = results.loc[times.idxmin(), "backend"] if len(times) > 1 else None
        cells = [_axis_value(v) for v in key]
        for backend in backends:
            row, speedup = by_backend.get(backend, (None, math.nan))
            if row is None:
                cells.append("")
            elif row.not_result:
                cells.append(row.not_result if pd.isna(row.time_ms) else
                             f"{format_ms(row.time_ms)} ms ({row.not_result})")
            elif not row.ok:
                cells.append(row.status)
            else:
                text = format_ms(row.time_ms) + " ms"
                if getattr(row, "fewer_threads", False):
                    text += FEWER_THREADS_MARK
                if mem is not None:
                    text += " · " + format_bytes(getattr(row, mem))
                if backend == fastest and mark_fastest:
                    text = mark_fastest.format(text)
                if not pd.isna(speedup):
                    text += f" · {format_speedup(speedup)}"
                cells.append(text)
        cells_by_row.append(cells)
    return axes, backends, cells_by_row


def format_speedup(value: float) -> str:
    """Three significant figures and the sign ×: 0.512×, 1.85×, 12.3×, 123×."""
    if value >= 100:
        return f"{value:.0f}{_SPEEDUP_MARK}"
    return f"{value:#.3g}{_SPEEDUP_MARK}"


def _explain(frame: pd.DataFrame, memory: bool, baseline: str | None = None, pick: str = "") -> str:
    """The line under a table saying what its cells hold; `pick`: how to choose another baseline there."""
    mem = _memory_column(frame) if memory else None
    what = "median time of the ok rows of each point"
    if (frame["not_result"] != "").any():
        what += " (a cell marked incorrect, timeout or crashed is no result: never the fastest)"
    if mem is not None:
        what += (" · their memory peak (" + ("allocated through torch" if mem == "peak_alloc_bytes" else "peak RSS")
                 + f", {mem})")
    if baseline is not None and frame["speedup"].notna().any():
        what += (f" · speed-up over {baseline}: {baseline}'s time / the cell's (2.00{_SPEEDUP_MARK} = twice as fast"
                 + (f"; {pick} picks another" if pick else "") + ")")
    return what


def _markdown_table(frame: pd.DataFrame) -> list[str]:
    """A compact pipe table (cells unpadded: the rendered page aligns them, and a diff stays one cell wide)."""
    axes, backends, table = _wide(frame, memory=True, mark_fastest="**{}**")
    header = axes + backends
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")
    lines = ["| " + " | ".join(cell(h) for h in header) + " |",
             "|" + "|".join("---" if i < len(axes) else "---:" for i in range(len(header))) + "|"]
    return lines + ["| " + " | ".join(cell(c) for c in cells) + " |" for cells in table]


def summary_markdown(rows: pd.DataFrame, baseline: str | None = None) -> str:
    """A pipe table for report.md: the swept axes, then one column per back end ("1.23 ms · 4.00 MiB · 1.85×", the
    fastest of each row in bold, the speed-up over `baseline` (`baseline_label`: sdpa when it ran), a failed point's
    status, a judged one marked), and the status counts under it, then the line naming the back ends with judged
    rows (`not_results_line`). Rows that are not one grid get the leading slice's table first (`leading_slice`, its
    held values in the line above it), then every point's."""
    frame = summary_frame(rows, baseline)
    if frame.empty:
        return f"*No measured rows* ({status_line(rows)})."
    note = _explain(frame, memory=True, baseline=baseline_label(frame["backend"], baseline))
    note += "; bold: the fastest back end of the row."
    judged = not_results_line(rows)
    counts = f"{status_line(rows)}{noise_note(rows)}{fewer_threads_note(rows)}. Cells: {note}" + (f"\n\n{judged}." if judged else "")
    full = "\n".join(_markdown_table(frame))
    piece = leading_slice(frame)
    if piece is None:
        return full + f"\n\n{counts}"
    vary = f": the {piece.other_rows} other rows vary {', '.join(piece.other_axes)}" if piece.other_rows else ""
    return "\n".join([
        f"Back ends compared {held_text(piece)}:", "",
        *_markdown_table(piece.frame), "",
        counts, "",
        f"Every point{vary}.", "", full])


def _text_table(header: Sequence[str], table: Sequence[Sequence[str]], n_axes: int) -> list[str]:
    """A plain aligned table (tabulate's `plain`): the axes left-aligned, the cells right-aligned."""
    align = ["left" if i < n_axes else "right" for i in range(len(header))]
    # the header as the first row: tabulate pads a header row by two more columns than its cells need
    text = tabulate([list(header), *(list(row) for row in table)], tablefmt="plain", colalign=align,
                    disable_numparse=True)
    return [line.rstrip() for line in text.splitlines()]


def _short_labels(backends: Sequence[str]) -> list[str]:
    """The back-end labels with their option names left out ("chunked (q_chunk=256)" -> "chunked (256)"), or the
    labels as they are when leaving the names out would make two of them the same."""
    short = [re.sub(r"\b\w+=", "", label) for label in backends]
    return short if len(set(short)) == len(short) else list(backends)


def _parts(axes: Sequence[str], labels: Sequence[str], table: Sequence[Sequence[str]], width: int) -> list[list[int]]:
    """The back ends' column indices split into consecutive parts whose tables (axes repeated) fit `width`; a part
    holds at least one back end however wide it is."""
    n = len(axes)

    def widest(part: list[int]) -> int:
        header = [*axes, *(labels[c] for c in part)]
        return max(map(len, _text_table(header, [[*r[:n], *(r[n + c] for c in part)] for r in table], n)))

    parts: list[list[int]] = []
    for column in range(len(labels)):
        if parts and widest([*parts[-1], column]) <= width:
            parts[-1].append(column)
        else:
            parts.append([column])
    return parts


def _fit_text(frame: pd.DataFrame, width: int, max_rows: int) -> tuple[list[str], list[str], bool]:
    """(table lines, notes, whether memory is shown) for `frame` within `width`: memory goes first, then the
    back-end labels lose their option names, then the table is split into parts of back ends, each repeating the
    axes (a note says so). No back end is ever left out: a plugin named by path is the column its user ran for."""
    notes: list[str] = []
    for memory in (True, False):
        axes, backends, table = _wide(frame, memory=memory, mark_fastest=_FASTEST_MARK + "{}")
        lines = _text_table(axes + backends, table, len(axes))
        if max(map(len, lines)) <= width:
            break
    if memory and _memory_column(frame) is None:
        memory = False
    labels = backends
    if max(map(len, lines)) > width:
        labels = _short_labels(backends)
        lines = _text_table(axes + labels, table, len(axes))
        renamed = [f"{short} = {label}" for short, label in zip(labels, backends) if short != label]
        if renamed:
            notes.append("back ends named by their option values to fit: " + "; ".join(renamed))
    shown_rows = table[:max_rows]
    if len(table) > max_rows:
        notes.append(f"{len(table) - max_rows} more rows not shown")
    n = len(axes)
    if max(map(len, lines)) > width:  # split the back ends into parts that fit, each with the axes again
        parts = _parts(axes, labels, shown_rows, width)
        lines = []
        for number, part in enumerate(parts):
            lines += ([""] if number else []) + _text_table(
                [*axes, *(labels[c] for c in part)], [[*r[:n], *(r[n + c] for c in part)] for r in shown_rows], n)
        if len(parts) > 1:
            notes.append(f"split in {len(parts)} parts to fit {width} columns, every back end shown")
    else:
        lines = _text_table(axes + labels, shown_rows, n)
    if not memory and _memory_column(frame) is not None:
        notes.append("memory left out to fit")
    return lines, notes, memory


def summary_text(rows: pd.DataFrame, width: int = 100, max_rows: int = 60, baseline: str | None = None) -> str:
    """The same table for a terminal, within `width` columns: back ends as columns, each result's speed-up over
    `baseline` (`baseline_label`: sdpa when it ran) after its time; memory is dropped first, then the back-end labels
    lose their option names, then the table is split into parts (no back end is left out), and rows past `max_rows`
    go (a note counts them). Rows that are not one grid show their leading slice only (`leading_slice`: a line above
    it names the held values, a note under it what the other rows vary). An unknown `baseline` raises ValueError."""
    frame = summary_frame(rows, baseline)
    if frame.empty:
        return f"No measured rows ({status_line(rows)})."
    piece = leading_slice(frame)
    lines, notes, memory = _fit_text(frame if piece is None else piece.frame, width, max_rows)
    head: list[str] = []
    if piece is not None:
        head = [_fill(f"Back ends compared {held_text(piece)}:", width)]
        others = _others_text(piece, "report.md has them")
        if others:
            notes.append(others)
    explained = _explain(frame, memory=memory, baseline=baseline_label(frame["backend"], baseline),
                         pick="baseline=NAME on a sweep's command line, --baseline NAME with runners.rows --table,")
    what = status_line(rows) + noise_note(rows) + fewer_threads_note(rows) + ". Cells: " + explained + f"; {_FASTEST_MARK}: fastest of the row."
    judged = not_results_line(rows)
    notes_text = [_fill(f"({note})", width) for note in notes]
    return "\n".join([*head, *lines, "", _fill(what, width), *([_fill(judged + ".", width)] if judged else []),
                      *notes_text])


def _fill(text: str, width: int) -> str:
    """`text` wrapped to `width`, never at a word's hyphen ("speed-up", a back end's kernel label stay whole)."""
    return textwrap.fill(text, width, break_on_hyphens=False)
