"""The multirun's report in its own process (runners/report_process.py): the normal path writes report.md and the
figures; a report that hangs is stopped at its limit, its figure workers with it, with one line naming the command
that writes it, results.csv intact, and the sweep ending normally."""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from runner_helpers import run_sweep
from runners import job, report_process
from runners.callbacks import SweepCallback

POINT = {"name": "t", "backend": {"name": "naive"}, "precision": {"name": "fp32"}, "device": "cpu", "batch": 1,
         "heads": 2, "seq_len": 64, "q_len": None, "head_dim": 16, "d_model": None, "causal": False, "scale": "auto",
         "mode": "fwd", "scope": "core", "input_std": 1.0, "seed": 0, "budget": {"timing_s": 0.1},
         "retry_failed": False, "grids": None, "grid_point": None, "wandb": {"mode": "disabled"}}

# A sitecustomize for the report's child only (PYTHONPATH carries it into every process started with it; only the
# one running `-m analysis.report` acts on it): the first figure notes the report's PID in HANG_DIR and then sleeps
# for good, as a figure stuck on a lock would.
HANG = '''
import os, sys
if "analysis.report" in sys.orig_argv and os.environ.get("HANG_DIR"):
    import time
    import analysis.figures as figures

    def hang(self, rows, ctx):
        open(os.path.join(os.environ["HANG_DIR"], str(os.getpid())), "w").close()
        time.sleep(3600)

    figures.Figure.__call__ = hang
'''


@pytest.fixture
def sweep(tmp_path, fake_measure):
    """Six measured points (fake measurement) in a sweep folder, as a multirun's jobs leave them."""
    folder = tmp_path / "sweep"
    for index, (backend, n) in enumerate((b, n) for b in ("naive", "sdpa") for n in (16, 32, 64)):
        ctx = job.JobContext(job_dir=folder / str(index), sweep_dir=folder, multirun=True, index=index,
                             sweep_id=f"t/{folder.name}")
        job.run_job({**POINT, "backend": {"name": backend}, "seq_len": n}, ctx)
    return folder


@pytest.fixture
def hanging_report(tmp_path, monkeypatch):
    """The report's child hangs in its figures; returns the folder where each hanging process notes its PID."""
    site, pids = tmp_path / "site", tmp_path / "pids"
    site.mkdir()
    pids.mkdir()
    (site / "sitecustomize.py").write_text(HANG)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("HANG_DIR", str(pids))
    return pids


def end_sweep(folder: Path, **keys) -> None:
    cfg = OmegaConf.create({"name": "t", "report": True, "wandb": {"mode": "disabled"},
                            "hydra": {"sweep": {"dir": str(folder)}}, **keys})
    SweepCallback().on_multirun_end(cfg)


def gone(pid: int) -> bool:
    """The process is no more (or a zombie waiting for init to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_the_limit_follows_the_rows_unless_set():
    assert report_process.timeout_s(None, 0) == report_process.TIMEOUT_BASE_S
    assert report_process.timeout_s(None, 200) == report_process.TIMEOUT_BASE_S + 200 * report_process.TIMEOUT_PER_ROW_S
    assert report_process.timeout_s(7, 10_000) == 7.0
    csv, out = Path("/tmp/a b/results.csv"), Path("/tmp/a b/report")
    assert report_process.rerun_command(csv, out) == "python -m analysis.report '/tmp/a b/results.csv' --out '/tmp/a b/report'"
    assert shlex.split(report_process.rerun_command(csv, out))[-1] == str(out)


def test_the_sweep_end_writes_the_report_in_another_process(sweep, capfd):
    end_sweep(sweep)
    out = capfd.readouterr().out
    assert (sweep / "report" / "report.md").is_file()
    assert list((sweep / "report" / "figures").glob("*.png"))
    assert f"report: {sweep / 'report' / 'report.md'} (" in out  # the child's own line, on the same terminal


def test_a_report_that_hangs_is_stopped_at_its_limit(sweep, hanging_report, capfd):
    csv_before = (sweep / "results.csv").read_bytes() if (sweep / "results.csv").exists() else None
    began = time.monotonic()
    end_sweep(sweep, report_timeout_s=4)  # returns: the sweep ends normally (it measured points)
    took_s = time.monotonic() - began
    err = capfd.readouterr().err
    command = report_process.rerun_command(sweep / "results.csv", sweep / "report")
    assert (f"warning: the report did not finish within report_timeout_s=4 s and was stopped; results.csv is "
            f"complete: `{command}` writes it") in err.splitlines()
    assert took_s < 4 + 15, took_s
    lines = (sweep / "results.csv").read_text().splitlines()
    assert len(lines) == 1 + 6  # header + every point's row
    if csv_before is not None:
        assert (sweep / "results.csv").read_bytes() == csv_before
    hung = [int(p.name) for p in hanging_report.iterdir()]
    assert len(hung) == 1  # the report's process hung in its first figure ...
    deadline = time.monotonic() + 10
    while not all(gone(pid) for pid in hung) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(gone(pid) for pid in hung)  # ... and none of them outlives the limit
    assert not (sweep / "report" / "report.md").exists()


def test_a_report_that_fails_says_how_to_rerun_it(sweep, monkeypatch, capfd):
    monkeypatch.setattr(report_process, "REPORT_MODULE", "analysis.no_such_module")
    end_sweep(sweep)
    err = capfd.readouterr().err
    assert "warning: no report (`python -m analysis.no_such_module` exited with status 1); results.csv is complete" in err


@pytest.mark.slow
def test_a_sweep_whose_report_hangs_exits_normally_within_the_limit(tmp_path, hanging_report):
    folder = tmp_path / "cli"
    began = time.monotonic()
    out = run_sweep("-m", "seq_len=16,32", "experiment=smoke", f"hydra.sweep.dir={folder}", "report=true", "report_timeout_s=5",
                    fake=True, timeout=120)
    took_s = time.monotonic() - began
    assert out.returncode == 0, out.stderr
    assert "warning: the report did not finish within report_timeout_s=5 s and was stopped" in out.stderr
    assert f"`python -m analysis.report {folder / 'results.csv'} --out {folder / 'report'}` writes it" in out.stderr
    assert len((folder / "results.csv").read_text().splitlines()) == 1 + 2
    assert took_s < 90
