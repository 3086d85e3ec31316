"""A job that SLURM stops at its time limit leaves no row, so the rerun measures its point.

submitit (hydra/launcher=slurm_cpu, slurm_gpu) asks SLURM for a signal (USR2) some seconds
before a job's time limit, and on a preemption. Its handler requeues a preempted job (exiting
the process: nothing is written, the requeued job measures the point) but, for a job past its
last allowed timeout, raises submitit's UncompletedJobError from wherever the point's code is
running. measure_point turns every Exception into a row's status, so that error would become
an `error` row, and a resumed sweep would skip the point instead of measuring it.

`stops_from_scheduler` wraps submitit's handler for the time of one measurement: the same
decision, but raised as `StoppedByScheduler` (a BaseException, which no measuring code
catches); `run_job` lets submitit see the original error (its result file says the job did not
complete) and writes no row.
"""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Any, Iterator


class StoppedByScheduler(BaseException):
    """The scheduler stopped this job mid-point (a time limit): no row; `original` for submitit."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(str(original))
        self.original = original


def _submitit_handler() -> tuple[signal.Signals, Any] | None:
    """submitit's preemption/timeout handler in this process, when the job runs under submitit."""
    for sig in (signal.SIGUSR2, signal.SIGUSR1):  # USR2 unless SUBMITIT_PREEMPT_SIGNAL says otherwise
        handler = signal.getsignal(sig)
        owner = getattr(handler, "__self__", None)
        if type(owner).__name__ == "SignalHandler" and type(owner).__module__.startswith("submitit"):
            return sig, handler
    return None


@contextmanager
def stops_from_scheduler() -> Iterator[None]:
    """While measuring: submitit's timeout error is raised as StoppedByScheduler (nothing else changes)."""
    found = _submitit_handler()
    if found is None:
        yield
        return
    sig, handler = found

    def on_signal(signum: int, frame: Any) -> None:
        try:
            handler(signum, frame)  # preempted: requeues and exits (SystemExit passes through)
        except Exception as exc:  # timed out: submitit's UncompletedJobError
            raise StoppedByScheduler(exc) from exc

    signal.signal(sig, on_signal)
    try:
        yield
    finally:
        signal.signal(sig, handler)
