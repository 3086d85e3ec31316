"""End to end: real sweeps compared with `python -m analysis.compare`, and a row measured again by its repro command.

- the same command run twice on the same machine: no point is faster or slower (every quiet point `same`);
- a path plugin that does the work twice (sdpa called twice) beside sdpa in one sweep: `slower` at every point
  (a point whose timing was flagged noisy decides only when its whole interval clears the ratio);
- `python -m runners.rows DIR --repro ID` prints a command that, run, measures the same point (same point_id).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pandas as pd
import pytest

# Two sweeps of the same command on this project's shared 2-core CPU VM, one after the other and with no other test
# beside them, differed by 0.54x to 1.54x per point, every difference "significant" within each row's own samples:
# between-run drift that one process's samples cannot show. No factor calls that `same` and still calls a kernel
# doing 1.2-1.9x the work `slower`, so on a CPU these two tests say so and skip; on CUDA they assert.
CPU_DRIFT = ("on a CPU two runs of one command differ by up to 1.5x between sweeps (measured), more than the verdict's "
             "factor: see the comment above")


def _needs_cuda_timings() -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip(CPU_DRIFT)

from runner_helpers import ROOT, run_sweep

# 0.5 s of timed calls: even the largest same-code point (a 2-core CPU's sdpa at n=1536 takes tens of ms a call)
# keeps enough samples for the rank test to reach p < 0.002 (6 against 6 cannot: analysis/ranktest.py)
SMALL = ("heads=2", "head_dim=32", "budget.timing_s=0.5", "budget.measure_device_peak=false", "metrics=[accuracy]",
         "report=false", "wandb.mode=disabled")

TWICE_PLUGIN = '''
import torch.nn.functional as F
from selfattn.backends import backend

@backend(masks=("causal",), kernel_label="sdpa-twice")
def twice(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    """sdpa's work twice over: a back end measurably slower than sdpa, with the same output."""
    F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
'''


def compare(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "analysis.compare", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.slow
@pytest.mark.exclusive  # its verdicts read timings: no other test beside it (tests/conftest.py)
def test_two_runs_of_the_same_command_are_the_same(tmp_path):
    _needs_cuda_timings()
    runs = {name: (lambda name=name: run_sweep("-m", "backend=sdpa", "seq_len=384,768,1536", *SMALL,
                                               f"hydra.sweep.dir={tmp_path / name}", timeout=600))
            for name in ("first", "second")}
    for name, run in runs.items():  # one after the other, as a user runs a command twice
        out = run()
        assert out.returncode == 0, (name, out.stderr[-2000:])
    out = compare(str(tmp_path / "first"), str(tmp_path / "second"), "--out", str(tmp_path / "cmp"),
                  "--fail-on", "slower,faster")
    assert out.returncode == 0, out.stdout + out.stderr
    cmp = pd.read_csv(tmp_path / "cmp" / "comparison.csv", keep_default_na=False)
    assert len(cmp) == 3 and not {"slower", "faster"} & set(cmp["verdict"]), out.stdout
    quiet = cmp[(cmp["noise_a"] == "") & (cmp["noise_b"] == "")]
    assert (quiet["verdict"] == "same").all(), out.stdout
    assert (cmp["accuracy"] == "same").all()  # the same code, seeds and inputs: the same errors
    if quiet.empty:
        pytest.skip("every point was measured on a busy machine (noisy): nothing quiet to call the same")


@pytest.mark.slow
@pytest.mark.exclusive  # its verdicts read timings: no other test beside it (tests/conftest.py)
def test_a_back_end_doing_twice_the_work_is_slower_everywhere(tmp_path):
    _needs_cuda_timings()
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "twice_attn.py").write_text(TWICE_PLUGIN)
    sweep = tmp_path / "sweep"
    out = run_sweep("-m", "backend=sdpa,twice_attn:twice", "seq_len=256,512,1024", *SMALL, f"hydra.sweep.dir={sweep}",
                    env={"PYTHONPATH": os.pathsep.join([str(ROOT), str(plugins)])}, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    out = compare(str(sweep), "--backends", "sdpa", "twice", "--out", str(tmp_path / "cmp"), "--fail-on", "slower")
    assert out.returncode in (0, 1), out.stdout + out.stderr
    cmp = pd.read_csv(tmp_path / "cmp" / "comparison.csv", keep_default_na=False)
    assert len(cmp) == 3 and set(cmp["verdict"]) <= {"slower", "noisy"}, out.stdout
    assert (tmp_path / "cmp" / "comparison.png").is_file()
    quiet = cmp[(cmp["noise_a"] == "") & (cmp["noise_b"] == "")]
    if quiet.empty:
        pytest.skip("every point was measured on a busy machine (noisy): none to call slower")
    assert (quiet["verdict"] == "slower").all(), out.stdout
    assert (quiet["ratio"] > 1.3).all()  # twice the attention, less the harness's fixed costs per call
    assert out.returncode == 1 and "twice_attn:twice" in out.stdout  # CI's exit; the named points' commands (by path)


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
