"""The points this process's jobs ran, so the sweep's end can say which have no row, and why.

A row can go missing after its job reported the point: its write failed (a full disk, a file system
made read-only: the job said so in its line and the sweep went on), or its job folder was deleted
while the sweep ran. The sweep's end (runners/callbacks.py) compares these points with the rows
results.csv was just built from, and a point without its row makes the multirun exit 1 with one
line: how many, why the first was lost, and that the same command measures them.

Per process, like runners/progress.py's SKIPPED: the jobs of the default launchers run in the
launching process; a parallel launcher's jobs (joblib, submitit, SLURM) say a lost row in their
own logs. Stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable


@dataclass
class Ledger:
    points: dict[str, None] = field(default_factory=dict)  # point ids the jobs ran (measured or already there)
    unwritten: dict[str, str] = field(default_factory=dict)  # point id -> why its row could not be written
    no_folder: list[str] = field(default_factory=list)  # why, for each job whose folder could not be made

    def ran(self, point_id: str) -> None:
        if point_id:
            self.points[point_id] = None

    def not_written(self, point_id: str, why: str) -> None:
        self.ran(point_id)
        self.unwritten[point_id] = why

    def missing_line(self, recorded: Iterable[str]) -> str:
        """'' when every point ran has a row among `recorded` (point ids), else the one line saying so."""
        have = set(recorded)
        missing = [p for p in self.points if p not in have]
        if self.no_folder:  # jobs that never ran: their points are unknown here, only their count
            n, why = len(self.no_folder), self.no_folder[0]
            return (f"{n + len(missing)} point{'s' if n + len(missing) > 1 else ''} of this sweep have no row: "
                    f"{n} job folder{'s' if n > 1 else ''} could not be made ({why}); the same command measures them")
        if not missing:
            return ""
        why = next((self.unwritten[p] for p in missing if p in self.unwritten), "")
        lost = sum(p in self.unwritten for p in missing)
        gone = len(missing) - lost
        if not gone:
            cause = why
        elif lost:
            cause = f"{lost} not written ({why}), {gone} removed since written"
        else:
            cause = f"{'their row files were' if gone > 1 else 'its row file was'} removed while the sweep ran"
        n = len(missing)
        return (f"{n} point{'s' if n > 1 else ''} of this sweep {'have' if n > 1 else 'has'} no row: {cause}; "
                "the same command measures them")


LEDGER = Ledger()


def job_folder_failed(exc: OSError, index: int, total: int) -> None:
    """A job whose folder Hydra could not make (runners' launcher, compose_once): one line, and the sweep goes on;
    on a read-only file system nothing more can be written, so the sweep stops there (exit 1), its rows intact."""
    import errno
    import sys

    from runners.row_store import write_failure

    why = write_failure(exc).replace("could not write", "could not make", 1)
    if exc.errno == errno.EROFS:
        print(f"error: {why}: the file system turned read-only, so the sweep stops after {index} of {total} jobs; "
              "the rows written are intact, and the same command measures the rest once it is writable",
              file=sys.stderr, flush=True)
        sys.exit(1)
    LEDGER.no_folder.append(why)
    print(f"[{index + 1}/{total}] not recorded: {why}; the same command measures it once there is room",
          file=sys.stderr, flush=True)
