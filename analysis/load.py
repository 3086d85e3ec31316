"""Read results.csv files into one tidy DataFrame: validated, typed, merged, one row per point.

Every problem with an input is one line naming the file and the column; the other
inputs are still used. `load` raises `NoUsableResults` only when nothing is left.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, get_args

import numpy as np
import pandas as pd

from selfattn.fields import field_types
from selfattn.point import AXES, FIELD_NAMES, NULL_MEANS, axis_default, scale_label
from selfattn.results import COLUMNS, SCHEMA_VERSION, STATUSES, Row, rank
from selfattn.variants import parse_window, window_text

# Without these a row cannot be placed in any figure or merged with another file.
REQUIRED_COLUMNS: tuple[str, ...] = (
    "status", "backend", "precision", "device", "device_name", "mode", "scope",
    "heads", "seq_len", "head_dim", "causal", "scale", "schema_version",
)
# The row's text columns, from its schema: a text column added to Row (timer, note, ...) must
# never be parsed as a number, which would turn every value into NaN.
TEXT_COLUMNS: tuple[str, ...] = tuple(name for name, kind in field_types(Row).items() if kind is str)
# Booleans besides `causal` (which must be present) are parsed like it; an empty cell (an older file, or a
# back end the column does not apply to) reads as the default: the axis's for an axis (kv_cache, alibi), else
# False (`recompiled`: whether a compiling back end's first call of the point compiled new code; `noisy`: the
# row's timing passed a noise limit, selfattn/measure/noise.py; an older file's rows: not flagged).
BOOL_COLUMNS: tuple[str, ...] = tuple(name for name, kind in field_types(Row).items()
                                      if name != "causal" and (kind is bool or bool in get_args(kind)))
# `window` holds a number (one width) or a pair's text ("[63, 0]", selfattn.variants.window_text): read by
# window_cells, never as a plain number (a pair would turn into NaN, "no window", and join the plain rows).
WINDOW = "window"
NUMERIC_COLUMNS: tuple[str, ...] = tuple(c for c in COLUMNS if c not in TEXT_COLUMNS and c != "causal"
                                         and c not in BOOL_COLUMNS and c != WINDOW)
# A point is these sweep axes; the same point on the same device measured twice keeps one row.
POINT_AXES: tuple[str, ...] = tuple(name for name in FIELD_NAMES if name != "device")
# Axes an older file may lack (not required; a number or a text for a default): its rows measured the default.
DEFAULTED_AXES: tuple[str, ...] = tuple(
    name for name in AXES if name not in REQUIRED_COLUMNS and name not in BOOL_COLUMNS
    and isinstance(axis_default(name), (int, float, str)))
DEVICE_ID: tuple[str, ...] = ("device", "device_name", "device_capability", "hostname")


class NoUsableResults(ValueError):
    """None of the given paths held a usable row."""


@dataclass
class Loaded:
    rows: pd.DataFrame  # one row per (point, device), typed, plus derived columns (see _derive)
    problems: list[str] = field(default_factory=list)  # one line each: "<file>: <column>: <what>"
    files: list[Path] = field(default_factory=list)  # the CSV files that contributed rows
    rows_read: int = 0
    duplicates_dropped: int = 0


def find_csvs(path: Path) -> list[Path]:
    """A results CSV itself, or every results.csv below a folder (sorted, so merges are repeatable)."""
    if path.is_dir():
        return sorted(path.rglob("results.csv"))
    if path.is_file():
        return [path]
    return []


def read_csv(path: Path) -> tuple[pd.DataFrame | None, list[str]]:
    """One file -> typed rows (or None) and its problems, each one line naming the file and column."""
    problems: list[str] = []
    try:
        # Read everything as text first: the schema, not pandas' guess, decides the types.
        raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError, OSError) as exc:
        return None, [f"{path}: not a readable CSV ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"]
    missing = [c for c in REQUIRED_COLUMNS if c not in raw.columns]
    if missing:
        return None, [f"{path}: missing required column {missing[0]!r}"
                      + (f" (and {', '.join(map(repr, missing[1:]))})" if len(missing) > 1 else "")
                      + "; file skipped"]
    if raw.empty:
        return None, [f"{path}: no result rows (header only); file skipped"]
    df = raw.copy()
    for col in COLUMNS:
        if col not in df.columns:  # older files lack newer optional columns
            df[col] = "" if col in TEXT_COLUMNS else np.nan
    for col in TEXT_COLUMNS:
        df[col] = df[col].fillna("").astype(str).str.strip()
    for col in NUMERIC_COLUMNS:
        df[col] = pd.to_numeric(df[col].replace("", np.nan), errors="coerce")
    df[WINDOW] = window_cells(df[WINDOW])
    df["causal"] = df["causal"].map(_parse_bool)
    for col in BOOL_COLUMNS:
        default = axis_default(col) if col in FIELD_NAMES else False
        df[col] = df[col].map(_parse_bool).astype(object).fillna(default).astype(bool)  # object: a bool fill on floats is deprecated

    keep = pd.Series(True, index=df.index)
    newer = df["schema_version"] > SCHEMA_VERSION
    if newer.any():
        problems.append(f"{path}: column 'schema_version': {int(newer.sum())} rows of schema "
                        f"{int(df.loc[newer, 'schema_version'].max())} are newer than this reader's {SCHEMA_VERSION}; rows skipped")
        keep &= ~newer
    # An invalid row is a config the runner refused, its values kept as typed (`seq_len=0`, `seq_len=abc`):
    # a bad value is what it records, not a problem of the file, so it is never warned about. Such a row
    # stays (the report counts it) when its axes read as numbers (seq_len 0); one whose axis is text
    # (seq_len abc: NaN here) is left out quietly, so every column keeps its type (seq_len stays integer).
    refused = df["status"] == "invalid"
    unreadable = refused & df[["causal", "seq_len", "head_dim", "heads"]].isna().any(axis=1)
    keep &= ~unreadable
    checks = {
        "schema_version": df["schema_version"].isna(),
        "status": ~df["status"].isin(STATUSES),
        "causal": df["causal"].isna(),
        "seq_len": (df["seq_len"].isna() | (df["seq_len"] < 1)) & ~refused,
        "head_dim": (df["head_dim"].isna() | (df["head_dim"] < 1)) & ~refused,
        "heads": (df["heads"].isna() | (df["heads"] < 1)) & ~refused,
    }
    for col, bad in checks.items():
        bad = bad & keep
        if bad.any():
            example = raw.loc[bad.idxmax(), col]
            problems.append(f"{path}: column {col!r}: {int(bad.sum())} rows with invalid value "
                            f"{example!r}; rows skipped")
            keep &= ~bad
    dropped = not keep.all()
    df = df[keep].copy()
    if df.empty:
        return None, problems + [f"{path}: no usable rows; file skipped"]
    if dropped:  # a skipped row's text or empty cell made its columns float: the kept rows' text decides
        for col in NUMERIC_COLUMNS:
            if col in raw.columns and df[col].dtype == float and not df[col].isna().any():
                df[col] = pd.to_numeric(raw.loc[df.index, col], errors="coerce")
    df["causal"] = df["causal"].astype(bool)
    df["source_file"] = str(path)
    return df, problems


def load(paths: Iterable[str | Path], *, warn: bool = True) -> Loaded:
    """Read, validate and merge every results CSV under `paths`; problems go to stderr when `warn`."""
    problems: list[str] = []
    frames: list[pd.DataFrame] = []
    files: list[Path] = []
    for given in paths:
        path = Path(given)
        csvs = find_csvs(path)
        if not csvs:
            problems.append(f"{path}: no results.csv found (expected a results CSV or a folder holding one)")
        for csv in csvs:
            df, file_problems = read_csv(csv)
            problems.extend(file_problems)
            if df is not None:
                frames.append(df)
                files.append(csv)
    if warn:
        for line in problems:
            print(f"analysis: {line}", file=sys.stderr)
    if not frames:
        raise NoUsableResults("no usable result rows in " + ", ".join(str(p) for p in paths))
    rows = pd.concat(frames, ignore_index=True)
    rows_read = len(rows)
    rows = _derive(rows)
    rows = _keep_best(rows)
    rows = _label_devices(rows)
    return Loaded(rows=rows.reset_index(drop=True), problems=problems, files=files,
                  rows_read=rows_read, duplicates_dropped=rows_read - len(rows))


def window_cells(cells: pd.Series) -> pd.Series:
    """The `window` column: NaN (no window), a float (one width w), or a pair's canonical text "[63, 0]".

    Floats only (as every file before window pairs) unless some cell is a pair; then an object column mixing
    floats and texts, which compares, groups and deduplicates as it should but does not sort (sort by
    `window_order`). A cell that is neither (a refused row's value as typed) is kept as its text."""
    text = cells.fillna("").astype(str).str.strip()
    numbers = pd.to_numeric(text.replace("", np.nan), errors="coerce")
    other = numbers.isna() & (text != "")
    if not other.any():
        return numbers
    out = numbers.astype(object)
    for index, cell in text[other].items():
        try:
            window = parse_window(cell)
        except ValueError:
            out[index] = cell
            continue
        out[index] = window_text(window) if isinstance(window, tuple) else float(window)
    return out


def window_order(value: object) -> tuple[int, float, str]:
    """A sort key for window cells: none, then one width by size, then pairs by their text."""
    if isinstance(value, str):
        return (2, 0.0, value)
    if value is None or pd.isna(value):
        return (0, 0.0, "")
    return (1, float(value), "")


def _parse_bool(value: str) -> bool | float:
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "1.0"):
        return True
    if text in ("false", "0", "no", "0.0"):
        return False
    return np.nan


def _scale_label(text: str) -> str:
    """The spelling the runner stores (selfattn.point.scale_label); empty or null = the default."""
    lowered = text.strip().lower()
    if lowered in ("", "null"):
        return scale_label(None)
    try:
        return scale_label(lowered)
    except ValueError:
        return lowered  # not a scale at all: kept as written, so the row stays visible


def _derive(rows: pd.DataFrame) -> pd.DataFrame:
    """Columns every figure uses: canonical scale label, q_len resolved, d_model, parsed time."""
    rows = rows.copy()
    rows["scale"] = rows["scale"].map(_scale_label)
    for axis, other in NULL_MEANS.items():  # a null stands for another field's value (q_len: seq_len, kv_heads: heads)
        rows[axis] = rows[axis].fillna(rows[other])
    rows["d_model"] = rows["d_model"].fillna(rows["heads"] * rows["head_dim"])
    for axis in DEFAULTED_AXES:  # older files lack these: they measured the default (a text axis: an empty cell)
        default = axis_default(axis)
        column = rows[axis]
        rows[axis] = column.where(column != "", default) if isinstance(default, str) else column.fillna(default)
    # The factor applied to the logits: recorded, or implied by the scale label.
    implied = np.where(rows["scale"] == "auto", 1.0 / np.sqrt(rows["head_dim"]),
                       np.where(rows["scale"] == "none", 1.0, pd.to_numeric(rows["scale"], errors="coerce")))
    rows["scale_value"] = rows["scale_value"].fillna(pd.Series(implied, index=rows.index))
    # A tf32 row whose kernel ignored the TF32 flag computed exactly what fp32 computes
    # (`computed_as`): it is an fp32 measurement, never a tf32 one beside it.
    rows["precision"] = rows["computed_as"].where(rows["computed_as"] != "", rows["precision"])
    rows["time"] = pd.to_datetime(rows["timestamp"].replace("", None), utc=True, errors="coerce", format="ISO8601")
    if "tflops" in rows:
        computed = rows["flops"] / (rows["time_ms"] * 1e-3) / 1e12
        rows["tflops"] = rows["tflops"].fillna(computed)
    return rows


def _keep_best(rows: pd.DataFrame) -> pd.DataFrame:
    key_cols = list(POINT_AXES + DEVICE_ID)
    key = rows[key_cols].apply(lambda column: column.map(str)).agg("|".join, axis=1)  # NaN reads "nan"
    # Two refused configs may differ only in text a number column reads as NaN: their id (a hash of
    # every value as typed) tells them apart.
    key = key.where(rows["status"] != "invalid", key + "|" + rows["point_id"])
    # The runner's rule (selfattn.results.rank): ok beats failed, then newest; among equals the
    # later file/row wins.
    ok, newest = zip(*(rank(r) for r in rows[["status", "timestamp"]].to_dict("records"))) if len(rows) else ((), ())
    ranked = rows.assign(_key=key, _ok=list(ok), _newest=list(newest), _pos=np.arange(len(rows)))
    ranked = ranked.sort_values(["_ok", "_newest", "_pos"]).drop_duplicates("_key", keep="last")
    return ranked.sort_values("_pos").drop(columns=["_key", "_ok", "_newest", "_pos"])


def short_device_name(name: str) -> str:
    """A device model short enough for a legend: drops trademarks and CPU clock suffixes."""
    text = name.replace("(R)", "").replace("(TM)", "").replace("(tm)", "")
    text = text.split(" CPU @")[0].split(" @ ")[0]
    text = " ".join(text.split())
    return text if len(text) <= 32 else text[:31] + "…"


def _label_devices(rows: pd.DataFrame) -> pd.DataFrame:
    """`device_label`: the model name, plus host/capability where one name covers several devices."""
    rows = rows.copy()
    name = rows["device_name"].where(rows["device_name"] != "", rows["device"])
    base = name.map(short_device_name)
    ident = rows[list(DEVICE_ID)].apply(lambda column: column.map(str)).agg("|".join, axis=1)
    label = base.copy()
    for value in base.unique():
        mask = base == value
        idents = ident[mask].unique()
        if len(idents) > 1:
            extra = rows.loc[mask, "hostname"].where(rows.loc[mask, "hostname"] != "", rows.loc[mask, "device_capability"])
            label[mask] = value + " @" + extra.astype(str)
            if label[mask].nunique() < len(idents):  # still ambiguous: number them
                codes = pd.factorize(ident[mask])[0]
                label[mask] = [f"{value} #{c + 1}" for c in codes]
    rows["device_label"] = label
    return rows


def describe_devices(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per device: what identifies it and how many rows it contributed.

    Rows with status `invalid` never reached a device (their device may still read "auto"), so
    they are left out here; the report's header counts them.
    """
    rows = rows[rows["status"] != "invalid"]
    cols = ["device_label", "device", "device_name", "device_capability", "device_mem_bytes",
            "hostname", "torch_version", "cuda_version", "num_threads"]
    present = [c for c in cols if c in rows]
    agg = rows.groupby("device_label", sort=True).agg(
        **{c: (c, "first") for c in present if c != "device_label"},
        rows=("status", "size"), ok=("status", lambda s: int((s == "ok").sum())))
    return agg.reset_index()
