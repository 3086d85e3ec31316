"""Drawing the report's figures: in worker processes where the platform forks, else one after the other.

Each figure is drawn from the rows alone and written to its own files, so figures can be drawn at the same time;
most of a report's time is spent drawing them (a grid of panels, a constrained layout and a render each, all Python
and all holding one core). The workers are forked from the report's process after its rows are loaded: they
inherit the rows and matplotlib, imported just before (nothing is pickled but a figure's index and
its Made or Skipped), and draw while the report's process checks the claims. A figure is the same picture in a
worker as in the report's process: it reads nothing another figure wrote, and the workers are forked after the
report has fitted the cost lines figures 1-4 read (analysis.report.write_report).

Forking is what makes this cheap (a spawned worker would import pandas and load the rows again), so it is used
only on Linux, where it is the one start method with no surprises; elsewhere, with one usable CPU, or with
`workers=1`, the figures are drawn in the report's process, in order. A worker that dies (killed, out of
memory) costs nothing but time: every figure it did not hand back is drawn in the report's process, as every
figure is where no worker can be started. So does a worker that hangs (a lock it inherited locked, held by a
thread of the report's process that the fork did not copy): when no figure has come back for WORKER_IDLE_S
seconds while the report's process waits, the workers are killed by their PIDs, one line says so, and the
figures they held are drawn in the report's process.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import sys
import traceback
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Callable, Sequence

import pandas as pd

from analysis.figures.made import Context, Made, Skipped

MAX_WORKERS = 4  # a report draws ten-odd figures: more workers would each draw one or two, every one of them
# first filling its own caches (fonts, text layouts), as the first figure of each worker does
# Seconds the report's process waits for the next figure from its workers before it takes them for stuck: a
# figure takes well under 5 s on the project's 2-core CPU (a 24-row report's slowest ~1 s), so this only ever
# catches a worker that will never answer.
WORKER_IDLE_S = 60.0

FigureFunction = Callable[[pd.DataFrame, Context], "Made | Skipped"]
Drawn = tuple["Made | Skipped", str]  # the figure, and what drawing it has to say on stderr ('' when nothing)


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity where the platform tells it, else every CPU)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def default_workers() -> int:
    """Worker processes for the figures: one per usable CPU, at most MAX_WORKERS; 1 (no worker) where the
    platform does not fork."""
    if not sys.platform.startswith("linux") or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, min(usable_cpus(), MAX_WORKERS))


def draw_one(make: FigureFunction, rows: pd.DataFrame, ctx: Context, warn: bool) -> Drawn:
    """One figure, or a Skipped saying why it failed: one broken figure must not cost the user the rest of the
    report. What the failure has to say comes back as text, printed by the report's process."""
    try:
        return make(rows, ctx), ""
    except Exception as exc:
        line = f"{make.__name__}: failed ({type(exc).__name__}: {exc})"
        said = f"analysis: {line}\n" + (traceback.format_exc() if warn else "")
        return Skipped(make.__name__, make.__name__, f"failed: {type(exc).__name__}: {exc}", "—"), said


# What a worker draws from: set in the report's process just before the workers are forked, so they inherit it.
_JOB: tuple[Sequence[FigureFunction], pd.DataFrame, Context, bool] | None = None


def _draw_in_worker(index: int) -> Drawn:
    assert _JOB is not None, "a figure worker must be forked from the process that set _JOB"
    figures, rows, ctx, warn = _JOB
    return draw_one(figures[index], rows, ctx, warn)


class Drawing:
    """Figures being drawn: `start` hands them to the workers and returns at once; `result` waits for them."""

    def __init__(self, figures: Sequence[FigureFunction], rows: pd.DataFrame, ctx: Context, *, warn: bool,
                 workers: int):
        global _JOB
        self.figures, self.rows, self.ctx, self.warn = list(figures), rows, ctx, warn
        self.pool: ProcessPoolExecutor | None = None
        self.futures: list[Future] = []
        self.workers: list[multiprocessing.process.BaseProcess] = []  # the pool's processes, to kill if stuck
        self.idle_s = WORKER_IDLE_S
        workers = min(workers, len(self.figures))
        if workers > 1:
            # matplotlib once, here, rather than once per worker: the workers inherit it
            import analysis.figures.common  # noqa: F401

            _JOB = (self.figures, rows, ctx, warn)
            # Objects made so far are never collected in a worker: a collection there would write to every one
            # of them (their GC headers) and so copy each memory page the worker shares with this process.
            gc.freeze()
            others = {p.pid for p in multiprocessing.active_children()}
            try:
                self.pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
                self.futures = [self.pool.submit(_draw_in_worker, i) for i in range(len(self.figures))]
                # a forking pool starts all its workers at the first submit: the children that are new now
                self.workers = [p for p in multiprocessing.active_children() if p.pid not in others]
            except OSError:  # no process could be started (a limit on processes or memory): draw them here
                if self.pool is not None:
                    self.pool.shutdown(cancel_futures=True)
                self.pool, self.futures, _JOB = None, [], None
                gc.unfreeze()

    def result(self) -> list[Made | Skipped]:
        """Every figure in the order given, after printing what each failure had to say (in that order too).

        This process draws too, once it has nothing else to do: the figures no worker has started yet, taken from
        the back of the queue while the workers take them from the front. The last figure handed to a worker is
        then a small share of what is left, not a large one drawn alone while the other cores wait."""
        global _JOB
        drawn_here: dict[int, Drawn] = {}
        if self.pool is not None:
            for index in reversed(range(len(self.figures))):
                if self.futures[index].cancel():  # no worker has it: this process draws it
                    drawn_here[index] = draw_one(self.figures[index], self.rows, self.ctx, self.warn)
        stopped = self.pool is not None and not self._wait_for_workers(drawn_here)
        made: list[Made | Skipped] = []
        for index, make in enumerate(self.figures):
            drawn = drawn_here.get(index)
            future = self.futures[index] if self.pool is not None else None
            if drawn is None and future is not None and future.done() and not future.cancelled():
                try:
                    drawn = future.result()
                except Exception:  # a worker died, or its figure could not be sent back: draw it here
                    drawn = None
            if drawn is None:
                drawn = draw_one(make, self.rows, self.ctx, self.warn)
            figure, said = drawn
            if said:
                print(said, end="", file=sys.stderr)
            made.append(figure)
        if self.pool is not None:
            self.pool.shutdown(wait=not stopped, cancel_futures=stopped)
            _JOB = None
            gc.unfreeze()
        return made

    def _wait_for_workers(self, drawn_here: dict[int, Drawn]) -> bool:
        """Wait until every figure handed to a worker is back; False when none came back for `idle_s` seconds,
        after killing the workers (by PID): the figures they held are then drawn in this process."""
        waiting = {f for i, f in enumerate(self.futures) if i not in drawn_here}
        while waiting:
            done, waiting = wait(waiting, timeout=self.idle_s, return_when=FIRST_COMPLETED)
            if not done:
                for worker in self.workers:
                    if worker.is_alive():
                        worker.kill()
                for worker in self.workers:
                    worker.join(timeout=5)
                print(f"analysis: no figure came back from the figure workers for {self.idle_s:g} s; they were "
                      f"stopped and the {len(waiting)} figures they held are drawn here", file=sys.stderr, flush=True)
                return False
        return True


def start(figures: Sequence[FigureFunction], rows: pd.DataFrame, ctx: Context, *, warn: bool = True,
          workers: int | None = None) -> Drawing:
    """Start drawing `figures` of `rows` into ctx (in `workers` processes; None: default_workers())."""
    return Drawing(figures, rows, ctx, warn=warn, workers=default_workers() if workers is None else workers)
