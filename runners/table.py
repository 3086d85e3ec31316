"""The answer a sweep was run for, on the terminal: analysis/summary.py's table of results.csv.

Printed at the end of a multirun (runners/callbacks.py) and by `python -m runners.rows DIR --table`:
the swept axes against each back end's median time (and memory peak where measured), the status
counts, each result's speed-up over a baseline back end (sdpa when it ran; `--baseline NAME` of runners.rows picks
another), fitted to the terminal's width (summary_text drops memory, then option names from the back-end labels,
then splits the table into parts: no back end is left out, and says so). Rows that are not one grid (the default
sweep) show the slice of seq_len against every back end at the other axes' most shared values, with a line naming
those values.
"""

from __future__ import annotations

import shutil
from pathlib import Path


def table_text(csv_path: Path, width: int | None = None, baseline: str | None = None) -> str | None:
    """The summary table of `csv_path`, or None when there is nothing to show (no usable row, no pandas). A
    `baseline` that is no back end of its rows raises ValueError (analysis.summary.baseline_label's line)."""
    try:
        from analysis.load import NoUsableResults, load
        from analysis.summary import summary_text
    except ImportError:  # an install without the analysis extras: results.csv is still there
        return None
    try:
        rows = load([csv_path], warn=False).rows
    except NoUsableResults:
        return None
    return summary_text(rows, width=width or shutil.get_terminal_size().columns, baseline=baseline)
