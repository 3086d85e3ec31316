"""scripts/gpu_check.sh: its dry run works on any machine and shows the whole check; bad arguments fail early.

The real run needs a GPU (docs/gpu.md); on CPU the dry run is what CI can check: every stage
is there, with the sizes and overrides the issue asks for, and nothing is run or written.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=30)


def test_dry_run_prints_every_stage_and_runs_nothing(tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    done = _run(str(out_dir), "--wheels", str(tmp_path / "wheels"), "--pack", "--dry-run")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert not out_dir.exists(), "a dry run must write nothing"
    commands = [line for line in text.splitlines() if line.startswith("+ ")]
    assert any("pip install -q --no-index --no-deps --target" in c and str(tmp_path / "wheels") in c for c in commands)
    assert any("-m pytest -m gpu tests" in c and str(out_dir / "pytest.log") in c for c in commands)
    sweeps = [c for c in commands if "-m runners.sweep" in c]
    assert len(sweeps) == 3
    assert all("device=cuda" in c and "report=false" in c and "budget.max_point_s=" in c for c in sweeps)
    assert all("wandb.mode=disabled" in c for c in sweeps)  # the GPU image has no wandb
    joined = " ".join(sweeps)
    assert "experiment=quadratic_cost" in joined and "experiment=scaling_stability" in joined
    assert "backend.kernel=auto,flash,efficient,math,cudnn" in joined
    assert "precision=fp32,tf32,bf16,fp16" in joined
    assert any("-m analysis.report" in c and str(out_dir / "results.csv") in c for c in commands)
    assert any("report.tar.gz" in c for c in commands)
    # every long stage runs under a time limit (its cap; the run also cuts it to the time left),
    # and the whole check under a total that fits the 6 minutes
    limits = [int(c.split()[2]) for c in commands if c.startswith("+ timeout ")]
    assert len(limits) == 6 and all(0 < limit <= 150 for limit in limits)
    assert "total limit 330s" in text


@pytest.mark.parametrize("args, message", [
    ((), "OUT_DIR: missing"),
    (("out", "--frobnicate"), "unknown option --frobnicate"),
    (("out", "--total-s", "ten"), "--total-s: expected an integer"),
    (("a", "b"), "OUT_DIR given twice"),
], ids=["no-out-dir", "unknown-option", "bad-total", "two-out-dirs"])
def test_bad_arguments_fail_with_one_line(args: tuple[str, ...], message: str) -> None:
    done = _run(*args)
    assert done.returncode == 2
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_missing_wheels_folder_fails_before_running_anything(tmp_path: Path) -> None:
    done = _run(str(tmp_path / "out"), "--wheels", str(tmp_path / "nowhere"))
    assert done.returncode == 2 and "--wheels: no *.whl files" in done.stderr
    assert not (tmp_path / "out").exists()
