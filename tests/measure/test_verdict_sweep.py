"""End to end: kernels with the usual bugs and cheats get `incorrect` rows through the real command line.

One multirun carries a built-in and the six plugins of tests/plugins_for_tests/bad_kernels.py at a point
where each bug shows (q_len < seq_len, batch 2, a window), with metrics=[]: the verdict runs with the
accuracy columns off."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runners"))
from runner_helpers import ROOT, run_sweep  # noqa: E402

PLUGINS = "plugins_for_tests.bad_kernels"
EXPECTED = {  # back end -> (window -> the reason's words); None: ok
    "top_left_causal": {"none": "output error", "8": "output error"},
    "blocked_window": {"none": None, "8": "output error"},
    "batch_offset": {"none": "output error", "8": "output error"},
    "writes_input": {"none": "modified its input q", "8": "modified its input q"},
    # fresh values before every timed call (selfattn/measure/fresh.py): a cached answer is stale at the first one
    "cached": {"none": "output of the last timed call", "8": "output of the last timed call"},
    "wrong_when_timed": {"none": "timed call (on its own fresh inputs)", "8": "timed call (on its own fresh inputs)"},
}


@pytest.mark.slow
def test_wrong_and_cheating_kernels_are_incorrect_beside_an_ok_builtin(tmp_path):
    backends = ",".join(["sdpa", *(f"{PLUGINS}:{name}" for name in EXPECTED)])
    sweep = tmp_path / "sweep"
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    out = run_sweep("-m", f"backend={backends}", "experiment=smoke", "batch=2", "heads=2", "causal=true", "q_len=16",
                    "window=null,8", "metrics=[]", f"hydra.sweep.dir={sweep}", env=env, timeout=600)
    rows = pd.read_csv(sweep / "results.csv", keep_default_na=False)
    assert len(rows) == 14, (out.stdout[-3000:], out.stderr[-3000:])
    for _, row in rows.iterrows():
        window = "none" if row["window"] == "" else str(int(float(row["window"])))
        if row["backend"] == "sdpa":
            assert row["status"] == "ok", row["error"]
            continue
        words = EXPECTED[row["backend"]][window]
        if words is None:  # blocked windows are right without a window: the rows beside stay ok
            assert row["status"] == "ok", row["error"]
        else:
            assert row["status"] == "incorrect", (row["backend"], window, row["status"], row["error"])
            assert words in row["error"], row["error"]
            assert "\n" not in row["error"]
            assert row["time_ms"] != "", "an incorrect row keeps its time"
        assert float(row["err_bound"]) > 0  # the verdict ran with metrics=[]; its bound is in the row
        assert row["max_abs_err"] == ""  # while the accuracy columns stay off
    assert "rule: err <= 8 x err of the plain fp32 reference" in rows.set_index("backend").loc["batch_offset", "error"].iloc[0]
    # the progress lines say it, and no incorrect row is the fastest of its point in the end table
    assert "-> incorrect: backend writes_input modified its input q" in out.stdout
    assert "11 incorrect, 3 ok" in out.stdout
