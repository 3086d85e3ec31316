"""Following a sweep's SLURM jobs on a cluster without accounting storage (no slurmdbd).

submitit learns whether a job ended from `sacct`. Without accounting storage every poll fails,
and submitit logs a warning per poll (a small cluster's sweep printed more warnings than
progress lines). Worse, a job that ends without a result (cancelled, killed at its time limit)
then never looks finished, and the submitting process waits for it forever. squeue knows the
same states for as long as slurmctld keeps a finished job (MinJobAge, 300 s by default), and a
job it no longer knows has ended: slurmctld forgets only finished jobs.

So, in the launching process only (the callback's start), when `sacct` fails: one line says so,
and submitit's SLURM jobs are followed through squeue instead. That watcher subclasses submitit's
SlurmInfoWatcher through its private fields (`_registered`, `_finished`, `_info_dict`, ...), as submitit
1.3.3 (pyproject.toml's floor), 1.4 and 1.5 have them (`WRITTEN_FOR`; 1.3.3's InfoWatcher and SlurmInfoWatcher
are the same code as 1.4.0's): with another submitit, or one whose watcher lacks them, the line says that the
jobs are followed by submitit's own sacct polling, and nothing is replaced.
"""

from __future__ import annotations

import logging
import re
import subprocess
import time
from typing import Any

SACCT_PROBE = ["sacct", "--noheader", "-X", "-o", "JobID", "--starttime", "now"]
GONE = "ENDED_NOT_IN_SQUEUE"  # not one of submitit's incomplete states: the job counts as done
WRITTEN_FOR = ((1, 3), (1, 4), (1, 5))  # submitit's releases whose SlurmInfoWatcher has the fields below
WATCHER_FIELDS = ("_registered", "_finished", "_info_dict", "_num_calls", "_last_status_check")
WATCHER_METHODS = ("_make_command", "update", "read_info", "is_done")


def watcher_fits() -> str | None:
    """None when this submitit's SlurmInfoWatcher has what SqueueInfoWatcher builds on, else why not."""
    import submitit
    from submitit.slurm.slurm import SlurmInfoWatcher

    found = re.match(r"(\d+)\.(\d+)", str(getattr(submitit, "__version__", "")))
    version = (int(found.group(1)), int(found.group(2))) if found else None
    if version not in WRITTEN_FOR:
        return f"written for submitit 1.3-1.5, this is {getattr(submitit, '__version__', 'unknown')}"
    watcher = SlurmInfoWatcher(delay_s=600)
    missing = [n for n in WATCHER_FIELDS if not hasattr(watcher, n)] + [
        n for n in WATCHER_METHODS if not callable(getattr(watcher, n, None))]
    return f"submitit's SlurmInfoWatcher has no {', '.join(missing)}" if missing else None


def sacct_problem() -> str | None:
    """Why sacct cannot tell job states here (its first line of error), or None when it can."""
    try:
        proc = subprocess.run(SACCT_PROBE, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"
    if proc.returncode == 0:
        return None
    return (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[0]


def squeue_watcher(delay_s: int = 600) -> Any:
    """A submitit SlurmInfoWatcher that reads job states from squeue (class built lazily: submitit
    is only there when the submitit launcher is)."""
    from submitit.slurm.slurm import SlurmInfoWatcher

    class SqueueInfoWatcher(SlurmInfoWatcher):
        _logged: set[str] = set()

        def _make_command(self) -> list[str] | None:
            arrays = sorted({x.split("_")[0] for x in self._registered - self._finished})
            if not arrays:
                return None
            # -r: one line per array task; --states=all: finished jobs too, while slurmctld keeps them
            return ["squeue", "-h", "-r", "--states=all", "-o", "%i|%T|%N", "-j", ",".join(arrays)]

        def update(self) -> None:
            command = self._make_command()
            if command is None:
                return
            self._num_calls += 1
            try:
                proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
            except (OSError, subprocess.TimeoutExpired) as exc:
                self._warn_once(f"squeue failed ({type(exc).__name__}); job states may lag")
                return
            # squeue exits 1 with "Invalid job id specified" when it knows none of the ids: all ended
            if proc.returncode != 0 and "Invalid job id" not in proc.stderr:
                self._warn_once(f"squeue failed: {proc.stderr.strip()[:200]}; job states may lag")
                return
            info = self.read_info("JobID|State|NodeList\n" + proc.stdout)
            for job_id in self._registered - self._finished:
                if job_id not in info:  # pending tasks are listed one by one (-r): a missing one ended
                    info[job_id] = {"JobID": job_id, "State": GONE}
            self._info_dict.update(info)
            self._last_status_check = time.time()
            for job_id in self._registered - self._finished:
                if self.is_done(job_id, mode="cache"):
                    self._finished.add(job_id)

        def _warn_once(self, message: str) -> None:
            if message not in self._logged:
                self._logged.add(message)
                logging.getLogger("submitit").warning(message)

    return SqueueInfoWatcher(delay_s=delay_s)


def follow_jobs_without_sacct() -> str | None:
    """On a cluster where sacct fails, make submitit follow SLURM jobs through squeue; returns the
    one line that says so (None where sacct works, or submitit is not installed)."""
    try:
        from submitit.slurm import slurm
    except ImportError:
        return None
    problem = sacct_problem()
    if problem is None:
        return None
    if why_not := watcher_fits():
        return (f"slurm: sacct cannot tell job states here ({problem}); the squeue watcher does not fit this "
                f"submitit ({why_not}): submitit polls sacct, and a job that ends without a result may look unfinished")
    slurm.SlurmJob.watcher = squeue_watcher()
    return f"slurm: sacct cannot tell job states here ({problem}); following the jobs with squeue"
