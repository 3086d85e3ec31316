"""The SLURM glue without a cluster: job states from squeue, and a time limit's signal that leaves no row.

Fake `sacct` and `squeue` scripts on PATH stand in for a cluster without accounting storage;
test_slurm.py runs the same code against a real slurmctld.
"""

from __future__ import annotations

import os
import signal
import stat
from pathlib import Path

import pytest

pytest.importorskip("submitit")

from runners import slurm_status  # noqa: E402
from runners.scheduler_signals import StoppedByScheduler, stops_from_scheduler  # noqa: E402


def _fake(bin_dir: Path, name: str, stdout: str, stderr: str = "", status: int = 0) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\nprintf '%s' '{stdout}'\nprintf '%s' '{stderr}' >&2\nexit {status}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


def test_sacct_problem_is_its_first_error_line_or_none(bin_dir: Path) -> None:
    _fake(bin_dir, "sacct", "", "Slurm accounting storage is disabled\nmore\n", status=1)
    assert slurm_status.sacct_problem() == "Slurm accounting storage is disabled"
    _fake(bin_dir, "sacct", "")
    assert slurm_status.sacct_problem() is None


def test_squeue_states_and_a_job_it_no_longer_lists_has_ended(bin_dir: Path) -> None:
    _fake(bin_dir, "squeue", "7_0|RUNNING|vm\n7_2|PENDING|\n")
    watcher = slurm_status.squeue_watcher()
    for job_id in ("7_0", "7_1", "7_2"):
        watcher.register_job(job_id)
    watcher.update()
    assert watcher.get_state("7_0", mode="cache") == "RUNNING"
    assert watcher.get_state("7_2", mode="cache") == "PENDING"
    assert watcher.get_state("7_1", mode="cache") == slurm_status.GONE  # finished and forgotten
    assert watcher.is_done("7_1", mode="cache") and not watcher.is_done("7_0", mode="cache")

    _fake(bin_dir, "squeue", "", "slurm_load_jobs error: Invalid job id specified\n", status=1)
    watcher.update()  # none of the ids is known any more: every job has ended
    assert all(watcher.is_done(job_id, mode="cache") for job_id in ("7_0", "7_2"))


def test_squeue_failing_otherwise_keeps_the_states_and_warns_once(bin_dir: Path, caplog) -> None:
    _fake(bin_dir, "squeue", "7_0|RUNNING|vm\n")
    watcher = slurm_status.squeue_watcher()
    watcher.register_job("7_0")
    watcher.update()
    _fake(bin_dir, "squeue", "", "slurm_load_jobs error: Unable to contact slurm controller\n", status=1)
    for _ in range(3):
        watcher.update()
    assert watcher.get_state("7_0", mode="cache") == "RUNNING"  # not "ended": the controller is only away
    assert sum("squeue failed" in r.getMessage() for r in caplog.records) == 1


def test_follow_jobs_without_sacct_swaps_the_watcher_only_where_sacct_fails(bin_dir: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from submitit.slurm import slurm

    monkeypatch.setattr(slurm.SlurmJob, "watcher", slurm.SlurmJob.watcher)  # restored after the test
    _fake(bin_dir, "sacct", "")
    assert slurm_status.follow_jobs_without_sacct() is None
    assert type(slurm.SlurmJob.watcher) is slurm.SlurmInfoWatcher
    _fake(bin_dir, "sacct", "", "Slurm accounting storage is disabled\n", status=1)
    note = slurm_status.follow_jobs_without_sacct()
    assert note and "squeue" in note and "accounting storage is disabled" in note
    assert type(slurm.SlurmJob.watcher).__name__ == "SqueueInfoWatcher"


@pytest.mark.parametrize("change", ["version", "field"])
def test_on_a_submitit_the_watcher_does_not_fit_nothing_is_swapped(bin_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   change: str) -> None:
    import submitit
    from submitit.slurm import slurm

    monkeypatch.setattr(slurm.SlurmJob, "watcher", slurm.SlurmJob.watcher)  # restored after the test
    assert slurm_status.watcher_fits() is None  # the installed submitit: the watcher fits
    if change == "version":
        monkeypatch.setattr(submitit, "__version__", "2.0.0")
        why = "written for submitit 1.3-1.5, this is 2.0.0"
    else:  # a submitit whose watcher keeps its state elsewhere
        monkeypatch.setattr(slurm_status, "WATCHER_FIELDS", (*slurm_status.WATCHER_FIELDS, "_job_states"))
        why = "submitit's SlurmInfoWatcher has no _job_states"
    assert slurm_status.watcher_fits() == why
    _fake(bin_dir, "sacct", "", "Slurm accounting storage is disabled\n", status=1)
    note = slurm_status.follow_jobs_without_sacct()
    assert note and why in note and "submitit polls sacct" in note
    assert type(slurm.SlurmJob.watcher) is slurm.SlurmInfoWatcher  # submitit's own, untouched


def _install_submitit_handler(behaviour) -> object:
    """submitit's SignalHandler on USR2 (as in a SLURM job), its decision replaced by `behaviour`."""
    from submitit.core.job_environment import SignalHandler

    handler = SignalHandler.__new__(SignalHandler)
    handler.checkpoint_and_try_requeue = behaviour.__get__(handler)  # a bound method, as submitit registers it
    signal.signal(signal.SIGUSR2, handler.checkpoint_and_try_requeue)
    return handler


def test_a_timed_out_signal_is_raised_past_the_measuring_code_and_the_handler_is_restored() -> None:
    from submitit.core.utils import UncompletedJobError

    def timed_out(self, signum, frame):
        raise UncompletedJobError("Job not requeued because: timed-out too many times.")

    previous = signal.getsignal(signal.SIGUSR2)
    try:
        _install_submitit_handler(timed_out)
        installed = signal.getsignal(signal.SIGUSR2)

        def measuring_code() -> bool:  # what measure_point does with every Exception: True if it caught one
            try:
                os.kill(os.getpid(), signal.SIGUSR2)  # delivered to this thread before os.kill returns
            except Exception:
                return True
            return False

        assert measuring_code()  # the control: without the guard the error would become a row's status
        with pytest.raises(StoppedByScheduler) as stop:
            with stops_from_scheduler():
                measuring_code()
        assert isinstance(stop.value.original, UncompletedJobError)
        assert signal.getsignal(signal.SIGUSR2) == installed  # submitit's own handler again
    finally:
        signal.signal(signal.SIGUSR2, previous)


def test_outside_submitit_nothing_changes() -> None:
    previous = signal.getsignal(signal.SIGUSR2)
    with stops_from_scheduler():
        assert signal.getsignal(signal.SIGUSR2) == previous
