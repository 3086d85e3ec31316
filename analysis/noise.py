"""Noisy rows in the analysis: counted, said, and kept from deciding a timing claim.

A row is noisy when its timing passed a limit of selfattn/measure/noise.py (its samples' spread, or
other processes' share of the CPU during its timed calls): the `noisy` column, the reason in `noise`.
An older file without the column has no noisy rows (nothing was measured to say so).
"""

from __future__ import annotations

import pandas as pd


def noisy_mask(rows: pd.DataFrame) -> pd.Series:
    """The ok rows whose timing was flagged noisy."""
    if "noisy" not in rows or "status" not in rows:
        return pd.Series(False, index=rows.index)
    return (rows["status"] == "ok") & rows["noisy"].fillna(False).astype(bool)


def noisy_counts(rows: pd.DataFrame) -> tuple[int, int]:
    """(noisy ok rows, ok rows)."""
    ok = int((rows["status"] == "ok").sum()) if "status" in rows else 0
    return int(noisy_mask(rows).sum()), ok


def busy_text(noisy: int, points: int) -> str:
    """"3 of 48 points measured on a busy machine" (the words a withheld verdict uses)."""
    return f"{noisy} of {points} point{'s' if points != 1 else ''} measured on a busy machine"


def noise_note(rows: pd.DataFrame) -> str:
    """'; 3 of 48 ok points noisy (...)' for a status line, or '' when none is."""
    noisy, ok = noisy_counts(rows)
    if not noisy:
        return ""
    return (f"; {noisy} of {ok} ok points noisy (their samples' spread or other processes' CPU share passed "
            "a limit: the `noise` column says which)")


# The end table's mark on a cell timed on fewer threads than the table's other rows.
FEWER_THREADS_MARK = "†"


def fewer_threads_mask(rows: pd.DataFrame) -> pd.Series:
    """The ok rows timed on fewer threads (`num_threads`, the count the timed calls ran on) than the most any ok row
    of the same device has in `rows`: a CPU row whose threads collapsed on a busy machine ran on one
    (selfattn/measure/threads.py), and its time is not comparable with its neighbours'. False where the column is
    missing (older files) or empty."""
    if "num_threads" not in rows or "status" not in rows or rows.empty:
        return pd.Series(False, index=rows.index)
    threads = pd.to_numeric(rows["num_threads"], errors="coerce")
    ok = rows["status"] == "ok"
    device = rows["device_name"].fillna("").astype(str) if "device_name" in rows else pd.Series("", index=rows.index)
    most = threads.where(ok).groupby(device).transform("max")
    return (ok & (threads < most)).fillna(False).astype(bool)


def fewer_threads_note(rows: pd.DataFrame) -> str:
    """'; †: 3 of 48 ok rows timed on fewer threads than the others (...)' for a table's legend, or ''."""
    fewer = int(fewer_threads_mask(rows).sum())
    if not fewer:
        return ""
    ok = int((rows["status"] == "ok").sum())
    return (f"; {FEWER_THREADS_MARK}: {fewer} of {ok} ok rows timed on fewer threads than the table's others "
            "(num_threads; their threads collapsed on a busy machine: not comparable with their neighbours)")


def unsure_mask(rows: pd.DataFrame) -> pd.Series:
    """The ok rows whose time a reader should not take at a glance: noisy, or timed on fewer threads than the
    others of their device (fewer_threads_mask: selfattn/measure/threads.py falls back to fewer on a busy
    machine). The figures draw them hollow."""
    return noisy_mask(rows) | fewer_threads_mask(rows)
