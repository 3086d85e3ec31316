"""scripts/launch_diagnostic.py: the table of call vs kernel time, clocks and MFU from a sweep's rows."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd

from selfattn.results import Row

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "launch_diagnostic.py"


def _module():
    spec = importlib.util.spec_from_file_location("launch_diagnostic", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_table_shows_a_launch_bound_row_as_one(tmp_path, capsys):
    rows = [Row(status="ok", backend="triton", precision="bf16", seq_len=n, device="cuda", call_time_ms=call,
                kernel_time_ms=kernel, launch_overhead_ms=call - kernel, tflops=tf, device_peak_tflops=797.0,
                mfu_pct=100 * tf / 989.5, spec_gpu="H200 SXM", gpu_sm_clock_mhz=1980.0, gpu_power_w=400.0).to_dict()
            for n, call, kernel, tf in ((1024, 0.080, 0.016, 100.0), (4096, 0.9, 0.88, 600.0))]
    path = tmp_path / "results.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    assert _module().main([str(path), "--backend", "triton", "--seq-len", "1024,4096", "--precision", "bf16"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "kernel_share_pct" in lines[0] and "mfu_pct" in lines[0]
    assert " 20 " in lines[1] and "97.78" in lines[2]  # 0.016 / 0.080: launch-bound; 0.88 / 0.9: the kernel's


def test_no_matching_rows_is_said(tmp_path, capsys):
    path = tmp_path / "results.csv"
    pd.DataFrame([Row(status="ok", backend="sdpa", seq_len=128).to_dict()]).to_csv(path, index=False)
    assert _module().main([str(path), "--seq-len", "1024"]) == 1
    assert "no rows" in capsys.readouterr().err
