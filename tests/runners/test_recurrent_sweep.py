"""scope=lstm and scope=gru through the real runner: a single run, a multirun beside the layer with its
report, and the attention-only axes refused (one line for a single run, invalid rows in a multirun)."""

from __future__ import annotations

import csv
import functools

import pytest
from runner_helpers import run_at_once, run_sweep

pytestmark = pytest.mark.slow  # real sweeps in subprocesses (~90 s on the 2-core VM), like test_sweep_cli.py


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_a_single_lstm_run_measures_one_row(tmp_path):
    out = run_sweep("scope=lstm", "seq_len=32", "d_model=16", "heads=2", "experiment=smoke", f"hydra.run.dir={tmp_path}")
    assert out.returncode == 0, out.stderr[-2000:]
    (row,) = read_csv(tmp_path / "results.csv")
    assert row["status"] == "ok" and row["scope"] == "lstm" and row["kernel"] == "torch.nn.LSTM"
    assert float(row["grad_far_near_ratio"]) < 1e-3 and row["grad_by_distance"].startswith("[[0, ")


def test_a_multirun_of_the_recurrent_scopes_and_the_layer_reports_the_study(tmp_path):
    out = run_sweep("-m", "scope=lstm,gru,layer", "seq_len=16,64", "d_model=16", "heads=2", "mode=fwd,fwd_bwd",
                    "experiment=smoke", "report=true", f"hydra.sweep.dir={tmp_path}", timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    table = read_csv(tmp_path / "results.csv")
    assert len(table) == 12 and {r["status"] for r in table} == {"ok"}, [r["error"] for r in table]
    assert {r["scope"] for r in table} == {"lstm", "gru", "layer"}
    report = (tmp_path / "report" / "report.md").read_text()
    assert "Attention against recurrence" in report and "An RNN's sensitivity to a token decays" in report


def test_an_lstm_with_fewer_kv_heads_is_refused_naming_the_key(tmp_path):
    runs = run_at_once({  # two processes, two folders: side by side
        "single": functools.partial(run_sweep, "scope=lstm", "heads=4", "kv_heads=2", "experiment=smoke",
                                    f"hydra.run.dir={tmp_path / 's'}"),
        "multi": functools.partial(run_sweep, "-m", "scope=lstm", "heads=4", "kv_heads=2,4", "seq_len=16", "d_model=16",
                                   "experiment=smoke", f"hydra.sweep.dir={tmp_path / 'm'}")})
    single, multi = runs["single"], runs["multi"]
    assert single.returncode != 0
    assert "kv_heads: scope=lstm is torch.nn.LSTM with no attention" in single.stderr
    assert multi.returncode == 0, multi.stderr[-2000:]
    statuses = sorted((r["kv_heads"], r["status"]) for r in read_csv(tmp_path / "m" / "results.csv"))
    assert statuses == [("2", "invalid"), ("4", "ok")], statuses
