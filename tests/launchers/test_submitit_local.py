"""A sweep through hydra-submitit-launcher's `submitit_local` gives the same rows as the basic launcher.

submitit_local runs every job in its own process, all at once: the same points must come
out with the same statuses and the same deterministic columns (FLOPs, the memory model,
accuracy and stability against the float64 reference), and the rows must say how many jobs
shared the device. Timing and memory columns are left out: they are measurements, and here
four processes share two cores.
"""

from __future__ import annotations

import csv
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# naive x {fp32, tf32} x heads {2, 3} at d_model=16: ok, unsupported on CPU (tf32), invalid (3 does not divide 16)
SWEEP = ["-m", "experiment=smoke", "backend=naive", "precision=fp32,tf32", "heads=2,3", "d_model=16", "device=cpu"]
JOBS = 4
TEXT = ("status", "error", "backend", "kernel", "backend_options", "precision", "device", "device_name", "mode",
        "scope", "causal", "scale", "point_id", "schema_version")
NUMBERS = ("batch", "heads", "q_len", "seq_len", "head_dim", "d_model", "scale_value", "input_std", "seed",
           "predicted_mem_bytes", "flops", "accuracy_rows", "max_abs_err", "rel_rms_err", "nonfinite_frac",
           "logit_std", "softmax_entropy", "max_weight", "saturated_frac")


def _start(sweep_dir: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "HYDRA_FULL_ERROR": "1", "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-m", "runners.sweep", *SWEEP, *extra, f"hydra.sweep.dir={sweep_dir}"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _rows(sweep_dir: Path) -> dict[str, dict[str, str]]:
    with open(sweep_dir / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    by_point = {row["point_id"]: row for row in rows}
    assert len(by_point) == len(rows), "duplicate points in results.csv"
    return by_point


def _number(text: str) -> float | None:
    return None if text == "" else float(text)


@pytest.mark.slow
def test_submitit_local_gives_the_same_rows_as_the_basic_launcher(tmp_path: Path) -> None:
    basic_dir, local_dir = tmp_path / "basic", tmp_path / "submitit_local"
    # Both sweeps at once: the test's wall time is the slower one, not the sum.
    runs = {"basic": _start(basic_dir),
            "submitit_local": _start(local_dir, "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=5")}
    for name, proc in runs.items():
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{name} sweep failed:\n{out[-3000:]}"
        assert f"results: {JOBS} rows" in out, out[-3000:]
    assert any((local_dir / ".submitit").iterdir()), "submitit_local left no job folders: was it used?"

    basic, local = _rows(basic_dir), _rows(local_dir)
    assert len(basic) == JOBS and set(local) == set(basic)
    assert sorted(r["status"] for r in basic.values()) == ["invalid", "invalid", "ok", "unsupported"]
    for point_id, want in basic.items():
        got = local[point_id]
        for column in TEXT:
            assert got[column] == want[column], f"{column} of {point_id}: {got[column]!r} != {want[column]!r}"
        for column in NUMBERS:
            a, b = _number(got[column]), _number(want[column])
            assert (a is None) == (b is None), f"{column} of {point_id}: {got[column]!r} vs {want[column]!r}"
            if a is not None and not (math.isnan(a) and math.isnan(b)):
                assert a == pytest.approx(b, rel=1e-6), f"{column} of {point_id}: {a} vs {b}"
    ok = [r for r in basic.values() if r["status"] == "ok"]
    assert ok and float(ok[0]["rel_rms_err"]) < 1e-5 and float(ok[0]["flops"]) > 0  # the columns compared mean something
    # the launcher is recorded: every job of submitit_local ran beside the others
    assert {r["jobs_sharing_device"] for r in basic.values()} == {"1"}
    assert {r["jobs_sharing_device"] for r in local.values()} == {str(JOBS)}
