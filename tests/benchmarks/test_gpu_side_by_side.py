"""benchmarks/gpu_side_by_side.py's table and its two checks (the gpu_check side_by_side stage), on rows made here.

The figures are a GPU's; these tests check that the checks fail where they must (chunked below half of naive's
TFLOP/s at n >= 4096, its memory growing faster than linearly) and pass otherwise, and that the stage's
--csv folder form reads a sweep's results.csv.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pandas as pd
import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

SIZES = (1024, 4096, 16384)


def rows(chunked_tflops: float = 40.0, chunked_peak=lambda n: 1000 * n, naive_status: str = "ok") -> pd.DataFrame:
    out = []
    for mode in ("fwd", "fwd_bwd"):
        for causal in (False, True):
            for n in SIZES:
                for backend, tflops, peak in (("naive", 60.0, n * n), ("chunked", chunked_tflops, chunked_peak(n)),
                                              ("triton", 300.0, 100 * n), ("sdpa", 400.0, 100 * n)):
                    status = naive_status if backend == "naive" and n == 16384 else "ok"
                    out.append(dict(backend=backend, mode=mode, causal=causal, seq_len=n, status=status, scope="core",
                                    time_ms=1.0 if status == "ok" else None, tflops=tflops if status == "ok" else None,
                                    peak_mem_bytes=peak if status == "ok" else None))
    return pd.DataFrame(out)


@pytest.fixture(scope="module")
def side():
    spec = importlib.util.spec_from_file_location("benchmark_gpu_side_by_side", BENCHMARKS / "gpu_side_by_side.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_rows_that_keep_both_promises_pass(side, capsys):
    assert side.report(rows()) == 0
    out = capsys.readouterr().out
    assert "fwd_bwd  true    16384" in out and "TF" in out and "MiB" in out and ": ok" in out


def test_chunked_below_half_of_naive_fails_only_from_4096(side, capsys):
    slow = rows(chunked_tflops=25.0)
    problems = side.failures(slow)
    assert len(problems) == 8 and all("n=1024" not in p for p in problems)  # 2 modes x 2 masks x n 4096, 16384
    assert side.report(slow) == 1 and "FAIL fwd causal=false n=4096: chunked 25.0 TFLOP/s < 0.5 x naive's 60.0" \
        in capsys.readouterr().out
    # naive's skipped_budget row is shown and not compared
    assert len(side.failures(rows(chunked_tflops=25.0, naive_status="skipped_budget"))) == 4


def test_memory_growing_faster_than_linearly_fails(side):
    quadratic = rows(chunked_peak=lambda n: n * n)
    problems = side.failures(quadratic)
    assert len(problems) == 8 and all("grew 16.00x" in p and "(linear: 4x)" in p for p in problems)
    assert side.failures(rows(chunked_peak=lambda n: 1000 * n + 5_000_000)) == []  # linear plus a constant


def test_the_stage_reads_a_sweep_folder(side, tmp_path, capsys):
    (tmp_path / "sweep" / "a").mkdir(parents=True)
    rows().to_csv(tmp_path / "sweep" / "a" / "results.csv", index=False)
    assert side.main(["--csv", str(tmp_path / "sweep")]) == 0
    assert side.main(["--csv", str(tmp_path / "nothing")]) == 1
    assert "no results.csv" in capsys.readouterr().out


def test_print_only_shows_the_table_of_a_cpus_sizes_without_judging(side, capsys):
    small = rows(chunked_tflops=1.0, chunked_peak=lambda n: n * n).assign(seq_len=lambda df: df["seq_len"] // 8)
    assert side.report(small, sizes=(128, 512, 2048), checks=False) == 0
    assert "FAIL" not in capsys.readouterr().out
    assert side.report(small, sizes=(128, 512, 2048)) == 1  # judged, the same rows fail


def test_naive_causal_against_plain_is_printed_beside_its_target(side):
    table = rows()
    table.loc[(table["backend"] == "naive") & table["causal"], "time_ms"] = 1.5  # causal 1.5x plain
    lines = side.naive_causal_ratios(table)
    assert len(lines) == 6 and all("1.50x (target <= 1.2x: MISS)" in line for line in lines)
    assert side.report(table) == 0  # printed, not a failure of the stage
