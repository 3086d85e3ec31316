"""Through the real command line: a row timed on fewer threads than the others of its table is marked in the end
table (analysis/noise.py's FEWER_THREADS_MARK), and its num_threads is the count its timed calls ran on."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pandas as pd
import pytest

from analysis.noise import FEWER_THREADS_MARK

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runners"))
from runner_helpers import ROOT, end_cells_of, run_sweep  # noqa: E402


@pytest.mark.slow
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs 2 CPU threads to time a point on fewer")
def test_the_end_table_marks_a_row_timed_on_fewer_threads(tmp_path):
    sweep = tmp_path / "sweep"
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]), "OMP_NUM_THREADS": "2"}
    out = run_sweep("-m", "backend=sdpa,plugins_for_tests.thread_changer:one_thread", "experiment=smoke",
                    "seq_len=256", "heads=2", "head_dim=32", "budget.timing_s=0.1", "budget.accuracy_rows=16",
                    "metrics=[]", f"hydra.sweep.dir={sweep}", env=env, timeout=600)
    rows = pd.read_csv(sweep / "results.csv", keep_default_na=False).set_index("backend")
    assert list(rows["status"]) == ["ok", "ok"], (out.stdout[-2000:], out.stderr[-2000:])
    assert int(rows.loc["one_thread", "num_threads"]) == 1
    cells = end_cells_of(out.stdout, {"sdpa", "one_thread"})
    assert set(cells) == {"sdpa", "one_thread"}, out.stdout[-2000:]
    if int(rows.loc["sdpa", "num_threads"]) == 1:  # a busy machine collapsed sdpa's threads too (measure/threads.py)
        assert FEWER_THREADS_MARK not in cells["one_thread"] + cells["sdpa"], out.stdout[-2000:]
        pytest.skip("other processes loaded the machine so that sdpa ran on one thread too: no row ran on fewer")
    assert int(rows.loc["sdpa", "num_threads"]) == 2
    assert FEWER_THREADS_MARK in cells["one_thread"] and FEWER_THREADS_MARK not in cells["sdpa"], out.stdout[-2000:]
