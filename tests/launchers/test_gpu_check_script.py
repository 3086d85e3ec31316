"""scripts/gpu_check.sh: its dry run works on any machine and shows the whole check; bad arguments fail early.

The real run needs a GPU (docs/gpu.md); on CPU the dry run is what CI can check: every stage
is there, with the sizes and overrides the issue asks for, and nothing is run or written.
"""

from __future__ import annotations

import subprocess
import sys
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
    assert len(sweeps) == 5
    assert all("device=cuda" in c and "report=false" in c and "budget.max_point_s=" in c for c in sweeps)
    assert all("wandb.mode=disabled" in c for c in sweeps)  # the GPU image has no wandb
    joined = " ".join(sweeps)
    assert "experiment=quadratic_cost" in joined and "experiment=scaling_stability" in joined
    assert "backend.kernel=auto,flash,efficient,math,cudnn" in joined
    assert "precision=fp32,tf32,bf16,fp16" in joined
    assert "backend=flex" in joined and "backend=naive,chunked backend.compile=true" in joined  # compiled back ends
    assert any("-m analysis.report" in c and str(out_dir / "results.csv") in c for c in commands)
    assert any("report.tar.gz" in c for c in commands)
    # every stage runs under a limit computed from the time left; with each stage using all of
    # its limit the whole still fits the total (6 minutes on an H200, the wheels' install included)
    limits = _limits(commands)
    assert len(limits) == 9 and all(limit >= 5 for limit in limits.values())
    assert sum(limits.values()) + 15 <= 330 and "total 330s" in text
    assert f"deps {limits['deps']}s tests {limits['tests']}s" in text  # the computed limits are printed
    assert any("gpu_check_helper.py fit" in c and str(out_dir) in c for c in commands)


def _limits(commands: list[str]) -> dict[str, int]:
    """Stage name -> the limit its `+ timeout N` line shows (the stages in their order)."""
    names = ["deps", "tests", "quadratic_cost", "sdpa_kernels", "scaling_stability", "flex", "compile_option",
             "results", "report"]
    timed = [int(c.split()[2]) for c in commands if c.startswith("+ timeout ")]
    return dict(zip(names[len(names) - len(timed):], timed))


@pytest.mark.parametrize("total_s", [120, 330, 600])
def test_stage_limits_are_computed_from_the_time_left(tmp_path: Path, total_s: int) -> None:
    done = _run(str(tmp_path / "out"), "--wheels", str(tmp_path / "wheels"), "--total-s", str(total_s), "--dry-run")
    assert done.returncode == 0, done.stderr
    limits = _limits([line for line in done.stdout.splitlines() if line.startswith("+ ")])
    assert len(limits) == 9
    # shares of what is left: never more than the total, and nothing wasted beyond rounding
    assert total_s - 15 - len(limits) <= sum(limits.values()) <= total_s - 15
    assert limits["tests"] > limits["quadratic_cost"] > limits["sdpa_kernels"] > limits["results"]


def test_fit_leaves_what_the_device_tool_brings_back(tmp_path: Path) -> None:
    import io
    import tarfile

    out = tmp_path / "out"
    (out / "report" / "figures").mkdir(parents=True)
    (out / "report" / "figures" / "fig.png").write_bytes(b"x")
    for name in ("env.txt", "pytest.log", "results.csv", "summary.txt", "report.md", "extra1.txt", "extra2.txt"):
        (out / name).write_text(name)
    (out / "sweep.log").write_bytes(b"first line\n" + b"x" * (17 * 2**20) + b"\nthe last line\n")
    with tarfile.open(out / "report.tar.gz", "w:gz") as archive:  # incompressible figures, 18 MiB in all
        for i, size in enumerate((2 * 2**20, 16 * 2**20)):
            data = __import__("os").urandom(size)
            info = tarfile.TarInfo(f"report/figures/fig{i}.png")
            info.size = size
            archive.addfile(info, io.BytesIO(data))
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check_helper.py"), "fit", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    left = sorted(out.iterdir())
    assert len(left) <= 8 and all(p.is_file() and p.stat().st_size <= 16 * 2**20 for p in left)
    names = {p.name for p in left}
    assert {"results.csv", "report.md", "report.tar.gz", "summary.txt", "sweep.log"} <= names
    log = (out / "sweep.log").read_bytes()
    assert log.startswith(b"first line") and log.endswith(b"the last line\n") and b"bytes cut" in log
    with tarfile.open(out / "report.tar.gz") as archive:
        assert archive.getnames() == ["report/figures/fig0.png"]  # the largest figure left out, said in the output
    assert "fig1.png" in done.stdout


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
