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


def unsure_mask(rows: pd.DataFrame) -> pd.Series:
    """The ok rows whose time a reader should not take at a glance: noisy, or (on a CPU) timed on fewer threads
    than the most its device used (selfattn/measure/threads.py falls back to fewer on a busy machine). The
    figures draw them hollow."""
    mask = noisy_mask(rows)
    if {"num_threads", "device_label", "device"} <= set(rows.columns):
        threads = pd.to_numeric(rows["num_threads"], errors="coerce")
        most = threads.groupby(rows["device_label"]).transform("max")
        mask = mask | ((rows["status"] == "ok") & (rows["device"] == "cpu") & (threads < most))
    return mask
