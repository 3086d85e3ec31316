"""`python -m runners.rows DIR --table` counts each status and never stars a judged kernel's cell."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runners import rows as results_csv
from selfattn.results import Row

ROOT = Path(__file__).resolve().parents[2]


def _row(i: int, backend: str, seq_len: int, time_ms: float | None, status: str = "ok", error: str = "") -> dict:
    row = Row(status=status, error=error, backend=backend, backend_options="{}", precision="fp32", device="cpu",
              device_name="Fake CPU", mode="fwd", scope="core", batch=1, heads=2, q_len=seq_len, seq_len=seq_len,
              head_dim=16, causal=False, scale="auto", input_std=1.0, seed=0, time_ms=time_ms,
              timestamp="2026-12-04T01:00:00+00:00").to_dict()
    row["point_id"] = f"p{i}"
    return row


@pytest.mark.slow
def test_the_table_counts_every_status_and_marks_the_wrong_kernel(tmp_path):
    rows = [_row(0, "naive", 16, 0.02), _row(1, "naive", 32, 0.05), _row(2, "sdpa", 16, 0.01),
            _row(3, "sdpa", 32, 0.03), _row(4, "fastbad", 16, 0.001),
            _row(5, "fastbad", 32, 0.002, "incorrect", "max_abs_err 3.36 > bound 2.1e-06"),
            _row(6, "sdpa", 64, None, "unsupported", "sdpa: no kernel"),
            _row(7, "fastbad", 64, None, "timeout", "past the point's time limit of 2 s")]
    for i, row in enumerate(rows):
        results_csv.record_row(tmp_path, tmp_path / str(i), row)
    done = subprocess.run([sys.executable, "-m", "runners.rows", str(tmp_path), "--table"], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": "160"}, timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "8 rows: 5 ok, 1 unsupported, 1 incorrect, 1 timeout." in out
    assert "Not results (marked, never the fastest): fastbad (1 incorrect, 1 timeout of 3 points)." in " ".join(out.split())
    table = {line.split()[0]: line for line in out.splitlines() if line[:2] in ("16", "32", "64")}
    assert "*0.00100 ms" in table["16"]  # correct at 16: a result, and the fastest
    assert "0.00200 ms (incorrect)" in table["32"] and "*0.0300 ms" in table["32"]  # sdpa, not the wrong kernel
    assert "timeout" in table["64"] and "unsupported" in table["64"] and "*" not in table["64"]
