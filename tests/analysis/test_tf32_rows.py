"""A tf32 row whose kernel ignored TF32 is read as the fp32 measurement it is; new text columns stay text."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis.load import load
from selfattn.results import COLUMNS, Row


def _row(backend: str, precision: str, computed_as: str, time_ms: float, timestamp: str) -> dict:
    row = Row(status="ok", backend=backend, kernel="auto", precision=precision, computed_as=computed_as,
              device="cuda", device_name="NVIDIA H200", device_capability="9.0", hostname="gpu-1", mode="fwd",
              scope="core", batch=1, heads=8, q_len=4096, seq_len=4096, head_dim=64, causal=False, scale="auto",
              input_std=1.0, seed=0, time_ms=time_ms, time_samples=50, timer="do_bench", flops=1e12,
              note="tf32 ignored: ..." if computed_as != precision else "", timestamp=timestamp)
    return row.to_dict()


def test_tf32_rows_that_computed_fp32_merge_with_fp32_and_honoured_tf32_stays(tmp_path: Path) -> None:
    rows = [
        _row("sdpa", "fp32", "fp32", 1.00, "2030-01-01T00:00:00+00:00"),
        _row("sdpa", "tf32", "fp32", 1.01, "2030-01-01T00:00:01+00:00"),  # the efficient kernel ignored TF32
        _row("naive", "fp32", "fp32", 3.0, "2030-01-01T00:00:02+00:00"),
        _row("naive", "tf32", "tf32", 1.5, "2030-01-01T00:00:03+00:00"),  # cuBLAS honoured it
    ]
    csv = tmp_path / "results.csv"
    pd.DataFrame(rows, columns=list(COLUMNS)).to_csv(csv, index=False)
    loaded = load([csv], warn=False).rows
    by = {(r.backend, r.precision): r for r in loaded.itertuples()}
    assert sorted(by) == [("naive", "fp32"), ("naive", "tf32"), ("sdpa", "fp32")]  # no "sdpa tf32" to draw
    assert by[("sdpa", "fp32")].time_ms == 1.01  # the same computation: one row (the newer)
    assert set(loaded["timer"]) == {"do_bench"} and set(loaded["computed_as"]) == {"fp32", "tf32"}
