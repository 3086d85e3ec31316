"""End to end: real sweeps compared by `python -m runners.ab` (A and B interleaved in rounds), and a row measured
again by its repro command.

- the same command run twice, each side from its checkout (`--checkouts ROOT ROOT`, the two-commits path): `same`
  at every point;
- a path plugin that does the work twice (sdpa called twice) against sdpa (`--backends`): `slower` at every point,
  at sizes where the attention's work dominates a call's fixed costs;
- `python -m runners.rows DIR --repro ID` prints a command that, run, measures the same point (same point_id).

Both verdicts hold on a CPU shared with other jobs (analysis/rounds.py: the rounds' variation, not one window's
samples, decides); a machine too busy to decide gives `not significant` or `noisy`, never the wrong word, and these
tests then fail rather than skip.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pandas as pd
import pytest

from runner_helpers import ROOT, run_sweep

# 0.5 s of timed calls per point; no device peak (a GEMM probe per process); accuracy, which the A/A test compares.
SMALL = ("heads=2", "head_dim=32", "budget.timing_s=0.5", "budget.measure_device_peak=false", "metrics=[accuracy]",
         "report=false", "wandb.mode=disabled")
# Calls of 10-100 ms on a 2-core CPU: the attention's work, not a call's fixed costs, sets their time, and a busy
# machine's scheduler slices (4 ms) are a small part of each.
SIZES = "seq_len=1024,1536,2048"
# Fewer than the command's 16: beside other jobs (one spinning process per core or not) the same command settled
# after 7 rounds or ran all 12, twice the work after 6-12; 12 rounds take 3-4 minutes here, so a point still
# undecided then fails the test rather than stretching the suite.
MAX_ROUNDS = "12"

TWICE_PLUGIN = '''
import torch.nn.functional as F
from selfattn.backends import backend

@backend(masks=("causal",), kernel_label="sdpa-twice")
def twice(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    """sdpa's work twice over: a back end measurably slower than sdpa, with the same output."""
    F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
'''


def ab_run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runners.ab", *args, "--max-rounds", MAX_ROUNDS], cwd=ROOT,
                          capture_output=True, text=True, timeout=900, env={**os.environ, **(env or {})})


@pytest.mark.slow
@pytest.mark.exclusive  # its verdicts read timings: no other test beside it (tests/conftest.py)
@pytest.mark.timeout(1200)  # the A/B's 900 s, and a wait for the other tests to end
def test_two_runs_of_the_same_command_are_the_same(tmp_path):
    out = ab_run("--checkouts", str(ROOT), str(ROOT), "--pythons", sys.executable, sys.executable, "backend=sdpa",
                 SIZES, *SMALL, "--out", str(tmp_path / "ab"), "--fail-on", "slower,faster")
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    cmp = pd.read_csv(tmp_path / "ab" / "comparison.csv", keep_default_na=False)
    assert len(cmp) == 3 and (cmp["verdict"] == "same").all(), out.stdout
    assert (cmp["accuracy"] == "same").all()  # the same code, seeds and inputs: the same errors
    assert (cmp["rounds"] >= 6).all() and "A = A: the same command" in out.stdout
    print(out.stdout)  # the ratios and their intervals, for the log (-s)


@pytest.mark.slow
@pytest.mark.exclusive  # its verdicts read timings: no other test beside it (tests/conftest.py)
@pytest.mark.timeout(1200)  # the A/B's 900 s, and a wait for the other tests to end
def test_a_back_end_doing_twice_the_work_is_slower_everywhere(tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "twice_attn.py").write_text(TWICE_PLUGIN)
    out = ab_run("--backends", "sdpa", "twice_attn:twice", SIZES, *SMALL, "--out", str(tmp_path / "ab"),
                 "--fail-on", "slower", env={"PYTHONPATH": os.pathsep.join([str(ROOT), str(plugins)])})
    assert out.returncode == 1, out.stdout + out.stderr[-3000:]  # CI's exit: a point is slower
    cmp = pd.read_csv(tmp_path / "ab" / "comparison.csv", keep_default_na=False)
    assert len(cmp) == 3 and (cmp["verdict"] == "slower").all(), out.stdout
    assert (cmp["ratio_lo"] >= 1.3).all() and (cmp["rounds"] >= 6).all()
    assert (tmp_path / "ab" / "comparison.png").is_file()
    assert "twice_attn:twice" in out.stdout  # the named points' commands (the back end by its path)
    print(out.stdout)


@pytest.mark.slow
def test_repro_measures_the_same_point_again(tmp_path):
    sweep = tmp_path / "sweep"
    out = run_sweep("-m", "backend=chunked", "seq_len=96", "causal=true", "backend.q_chunk=32", *SMALL,
                    f"hydra.sweep.dir={sweep}", timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    row = pd.read_csv(sweep / "results.csv").iloc[0]
    rows = subprocess.run([sys.executable, "-m", "runners.rows", str(sweep), "--repro", row["point_id"][:6]],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert rows.returncode == 0, rows.stderr
    line = rows.stdout.strip()
    assert len(line.splitlines()) == 1 and "python -m runners.sweep backend=chunked" in line
    assert "seq_len=96" in line and "causal=true" in line and "backend.q_chunk=32" in line
    assert "backend.kv_chunk" not in line  # options at their defaults are left out
    command = shlex.split(line.split("&&")[-1].split("  #")[0])  # the sweep's command, at this checkout
    assert command[:3] == ["python", "-m", "runners.sweep"]
    again = run_sweep(*command[3:], f"hydra.run.dir={tmp_path / 'again'}", "report=false", timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert pd.read_csv(tmp_path / "again" / "results.csv").iloc[0]["point_id"] == row["point_id"]
    bad = subprocess.run([sys.executable, "-m", "runners.rows", str(sweep), "--repro", "zzzz"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--repro: no row has a point_id starting with 'zzzz'" in bad.stderr
