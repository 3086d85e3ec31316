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
            cause = f"their row file{'s were' if gone > 1 else ' was'} removed while the sweep ran"
        n = len(missing)
        return (f"{n} point{'s' if n > 1 else ''} of this sweep {'have' if n > 1 else 'has'} no row: {cause}; "
                "the same command measures them")


LEDGER = Ledger()
