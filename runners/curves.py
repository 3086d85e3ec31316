"""A training point's loss curve beside its row: <job dir>/loss_curve.csv (step, loss, accuracy).

The curve travels in the row's `loss_curve` cell (selfattn.results.encode_curve), so results.csv
alone draws the figures and merges across machines; this file is the same curve as a table a user
opens or plots without the harness. Written before the row file, so a point whose row is recorded
(and so skipped on resume) has its curve too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from runners.row_store import atomic_write_text
from selfattn.results import decode_curve

CURVE_FILE = "loss_curve.csv"


def write_curve(job_dir: Path, row: Mapping[str, Any]) -> Path | None:
    """Write the row's curve to job_dir/CURVE_FILE; None for a row without one (other scopes, failures)."""
    curve = decode_curve(row.get("loss_curve"))
    if not curve:
        return None
    path = Path(job_dir) / CURVE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["step,loss,accuracy", *(f"{step},{loss!r},{acc!r}" for step, loss, acc in curve)]
    atomic_write_text(path, "\n".join(lines) + "\n", durable=False)
    return path
