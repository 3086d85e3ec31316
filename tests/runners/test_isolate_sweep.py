"""End to end: back ends that exit, crash, hang or blow up memory cost one row each, and the sweep goes on.

The plugins are tests/runners/misbehaving.py, given by path. One multirun holds every case between ordinary
points (a built-in in the sweep's process, a correct plugin in the worker); a rerun of the same command
resumes past every one; sys.exit(0) in the sweep's own process (isolate=false) is a crashed row too; and
SIGTERM (to the sweep) or Ctrl-C (SIGINT to its process group) while a plugin spins in the worker ends the
sweep in one line and stops the worker.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from runner_helpers import ROOT, run_at_once, run_sweep, sweep_cmd

HERE = Path(__file__).resolve().parent
ENV = {"PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)])}
P = "misbehaving:"
# in job order, with the status and the reason each must get
CASES = [
    ("naive", "ok", ""),
    (P + "fine", "ok", ""),
    (P + "exits", "crashed", r"the back end called sys\.exit\(0\)"),
    (P + "os_exit", "crashed", r"ended with exit code 3"),
    (P + "aborts", "crashed", r"ended with SIGABRT"),
    (P + "segfaults", "crashed", r"ended with SIGSEGV"),
    (P + "sleeps", "timeout", r"past its limit of 4 s \(isolate_limit_s\)"),
    (P + "spins", "timeout", r"past its limit of 4 s"),
    (P + "hog", "oom", r"can't allocate memory.*memory limit of [\d.]+ GiB"),
    (P + "fine_too", "ok", ""),
    ("sdpa", "ok", ""),
]


def sweep_args(sweep: Path) -> list[str]:
    # mem_fraction=0.05: the worker's memory limit is a twentieth of the memory available, so the blow-up is small
    return ["-m", "backend=" + ",".join(name for name, _, _ in CASES), "experiment=smoke", "isolate_limit_s=4",
            "budget.mem_fraction=0.05", f"hydra.sweep.dir={sweep}"]


def in_process_exit(sweep: Path):
    return run_sweep("-m", f"backend=naive,{P}exits,sdpa", "experiment=smoke", "isolate=false",
                     f"hydra.sweep.dir={sweep}", env=ENV, timeout=300)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_misbehaving_back_end_is_a_row_and_the_sweep_goes_on(tmp_path):
    sweep, beside = tmp_path / "sweep", tmp_path / "in_process"
    started = time.monotonic()
    runs = run_at_once({"sweep": functools.partial(run_sweep, *sweep_args(sweep), env=ENV, timeout=600),
                        "in_process": functools.partial(in_process_exit, beside)})
    out = runs["sweep"]
    # exit statuses for failed points belong to the sweep's end (0 or 1); the process itself ended normally
    assert out.returncode in (0, 1), out.stderr[-3000:]
    rows = pd.read_csv(sweep / "results.csv").fillna({"error": ""})
    assert len(rows) == len(CASES), rows[["backend", "status"]]
    by_job = {int(Path(d).name): json.loads((Path(d) / "row.json").read_text())
              for d in sweep.iterdir() if (Path(d) / "row.json").is_file()}
    assert sorted(by_job) == list(range(len(CASES)))  # every job's row file, the earlier ones untouched
    for job, (name, status, reason) in enumerate(CASES):
        row = by_job[job]
        assert row["status"] == status, (name, row["status"], row["error"])
        assert pd.Series([row["error"]]).str.contains(reason).all(), (name, row["error"])
        assert row["backend"] == name.split(":")[-1] and row["device"] == "cpu", row
        if status == "ok":
            assert row["time_ms"] > 0 and row["max_abs_err"] < 1e-5, row
        else:
            assert row["device_name"], row  # the worker said where it ran before it failed
    assert set(rows["status"]) == {status for _, status, _ in CASES}
    assert f"results: {len(CASES)} rows" in out.stdout, out.stdout[-3000:]

    inproc = pd.read_csv(beside / "results.csv").fillna({"error": ""})
    assert list(inproc["status"]) == ["ok", "crashed", "ok"], inproc[["backend", "status", "error"]]
    assert inproc["error"][1] == "the back end called sys.exit(0)"
    assert runs["in_process"].returncode in (0, 1), runs["in_process"].stderr[-3000:]

    before = (sweep / "results.csv").read_text()
    again = run_sweep(*sweep_args(sweep), env=ENV, timeout=300)  # the rerun passes every point already measured
    assert again.returncode == out.returncode, again.stderr[-3000:]
    assert f"all {len(CASES)} points already measured" in again.stdout, again.stdout
    assert (sweep / "results.csv").read_text() == before
    assert time.monotonic() - started < 600


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("signum, to_group, status", [(signal.SIGTERM, False, 143), (signal.SIGINT, True, 130)],
                         ids=["sigterm-to-the-sweep", "ctrl-c-to-the-process-group"])
def test_a_signal_while_a_plugin_spins_in_the_worker_stops_it_and_ends_in_one_line(tmp_path, signum, to_group, status):
    sweep, pid_file = tmp_path / "sweep", tmp_path / "worker.pid"
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", **ENV, "MISBEHAVING_PID_FILE": str(pid_file)}
    # a session of its own: its process group holds the sweep and its worker alone, as a terminal's would
    proc = subprocess.Popen(sweep_cmd("-m", f"backend=naive,{P}spins,sdpa", "experiment=smoke",
                                      f"hydra.sweep.dir={sweep}"), cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not pid_file.is_file() or not pid_file.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        worker = int(pid_file.read_text())
        assert worker != proc.pid
        if to_group:  # Ctrl-C: the terminal signals every process of the group, the worker too (it ignores it)
            os.killpg(proc.pid, signum)
        else:  # to the sweep's process alone, by its PID
            proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == status, stderr[-3000:]
    assert "interrupted after 1 of 3 points; the same command resumes" in stderr, stderr
    assert "Traceback" not in stderr, stderr
    assert not Path(f"/proc/{worker}").exists()  # the worker was killed and reaped
    rows = pd.read_csv(sweep / "results.csv")
    assert list(rows["backend"]) == ["naive"] and list(rows["status"]) == ["ok"]  # the point in flight: no row
