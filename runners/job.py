"""One job = one point: config -> Point -> measure -> row file -> results.csv -> wandb -> a line.

`run_job` takes a plain mapping and a `JobContext`, so tests drive it without Hydra;
runners/sweep.py only builds the context from HydraConfig (and the sweep's sweep.json) and calls it.
The config is parsed (validated, device resolved) once, by `config.parse_job`; the point's one
`Row` is then measured, or made for a point that does not validate, and gets the job's
bookkeeping before it is written.
"""

from __future__ import annotations

import errno
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from runners import config, curves, eta, interrupts, isolate, ledger, point_state, progress, quiet, row_store, rows
from runners.scheduler_signals import StoppedByScheduler, stops_from_scheduler
from runners.config import ParsedJob
from runners.wandb_log import SINK
from selfattn.metrics import ALL as ALL_METRICS, ran_metrics
from selfattn.results import Row

# When the previous job of this process wrote its row: the next job's wall time starts there,
# so everything between two rows (the CSV rebuild, wandb and the progress line of the last
# job, Hydra composing this job's config) counts as this job's harness overhead.
_last_row_written: float | None = None
# An isolated point's traceback (its `error` row's), from the worker: written beside the row as error.txt.
_isolated_traceback = ""


class InvalidPoint(ValueError):
    """A single run asked for a value that is never valid (the message is one line)."""


class RowNotWritten(OSError):
    """A single run measured its point but could not write its row (a full disk, no permission)."""


@dataclass
class JobContext:
    job_dir: Path  # this job's folder: row.json goes here
    sweep_dir: Path  # the sweep's folder: results.csv goes here (a single run: its own folder)
    multirun: bool = False
    index: int | None = None  # 0-based job number in the sweep
    varying: list[str] = field(default_factory=list)  # the keys this job's overrides set
    given: list[str] | None = None  # the keys typed or set by the experiment (runners/given.py); None: every key
    jobs_sharing_device: int = 1
    sweep_id: str = ""
    total: int | None = None  # jobs in the sweep, when the sweeper knows (sweep.json)
    started_unix: float | None = None  # when the sweep started (sweep.json): the ETA's clock


def failed_row(parsed: ParsedJob, status: str, error: str) -> Row:
    """The row of a point that was not measured: the values as typed that fit their columns, and why."""
    return Row(status=status, error=error, **parsed.typed_columns)


def measure(parsed: ParsedJob, metrics: tuple[str, ...] | None = None) -> Row:
    """The point's row: measure_point's (which never raises for a failure of the point), else why not.

    `metrics`: what it measures beyond its time; None: the config's `metrics`."""
    if parsed.point is None or parsed.budget is None:  # both or neither
        return failed_row(parsed, "invalid", parsed.problem)
    global _isolated_traceback
    _isolated_traceback = ""
    metrics = parsed.runner["metrics"] if metrics is None else metrics
    start = time.perf_counter()
    if isolate.isolated(parsed.point, parsed.runner.get("isolate", "plugins")):  # in the worker (runners/isolate.py)
        outcome = isolate.run_isolated(parsed.point, parsed.budget, metrics, parsed.runner.get("isolate_limit_s"),
                                       parsed.point_id, parsed.timing)
        row, _isolated_traceback = outcome.row or isolate.unfinished_row(parsed.point, outcome), outcome.traceback
    else:
        row = _measure_here(parsed, metrics)
    row.point_wall_s = time.perf_counter() - start  # so job_wall_s - point_wall_s = runner + Hydra
    if row.d_model is None:
        row.d_model = parsed.point.d_model
    return row


def _measure_here(parsed: ParsedJob, metrics: tuple[str, ...]) -> Row:
    """measure_point in this process, which later points share: what the back end changes of torch's global
    state, the RNGs, fds 0-2 and the signal handlers is put back after it (runners/point_state.py)."""
    from selfattn.backends.registry import get_backend
    from selfattn.measure import measure_point  # lazy: the back ends and the timers load here
    import torch

    assert parsed.point is not None, "only a valid job is measured"  # run_job returned the refusal's row before
    changes = point_state.Changes()
    threads = torch.get_num_threads()
    with point_state.kept(changes, signals=interrupts.SIGNALS):
        try:
            get_backend(str(parsed.point.backend), here=True)  # a plugin measured here is imported here, not before
            row = measure_point(parsed.point, parsed.budget, metrics, parsed.timing)
            if torch.get_num_threads() != threads and row.num_threads is not None:
                row.num_threads = torch.get_num_threads()  # the back end changed it: what its timed calls ran on
        except SystemExit as exc:  # sys.exit inside a back end ends the point, not the sweep
            row = isolate.unfinished_row(parsed.point, isolate.Outcome(status="crashed", error=isolate.exit_reason(exc.code)))
        except KeyboardInterrupt as exc:  # the back end's own: the user's Ctrl-C is interrupts.Interrupted
            first = str(exc).splitlines()[0] if str(exc) else ""
            row = isolate.unfinished_row(parsed.point, isolate.Outcome(
                status="error", error=f"the back end raised KeyboardInterrupt: {first}"))
        except Exception as exc:  # never by contract; a bug must still leave a row, not stop the sweep
            return failed_row(parsed, "error", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    if changes.restored or changes.unrestorable:
        row.note = "; ".join(filter(None, (row.note, changes.note())))
    return row


def run_job(cfg: Mapping[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Measure (or, on resume, skip) one point and record it everywhere; returns the row.

    Ctrl-C or SIGTERM (runners/interrupts.py) stops the point while it is measured (no row: the
    rerun measures it); once its row is being written, the job finishes first. A signal that arrived while
    the launcher composed this job (hydra_plugins/selfattn_launcher/compose_once.py holds it) is raised here."""
    interrupts.release()
    interrupts.raise_pending()
    try:
        written = _run_job(cfg, ctx)
    finally:
        interrupts.release()
    interrupts.job_done()
    interrupts.raise_pending()
    return written


def _run_job(cfg: Mapping[str, Any], ctx: JobContext) -> dict[str, Any]:
    global _last_row_written
    start = time.perf_counter() if _last_row_written is None else _last_row_written
    index = None if ctx.index is None else ctx.index + 1

    parsed = config.parse_job(cfg, ctx.given)  # the one step from config to Point; everything below reads `parsed`
    quiet.set_verbose(bool(parsed.runner.get("verbose")))
    if parsed.problem and not ctx.multirun:
        raise InvalidPoint(parsed.problem)  # a single run: say what is wrong, measure nothing
    if parsed.wandb_problem:
        if not ctx.multirun:
            raise InvalidPoint(parsed.wandb_problem)
        SINK.give_up(parsed.wandb_problem)  # a sweep still measures; only wandb is off

    varying = _varying(cfg, ctx.varying)
    stored = row_store.point_row(ctx.sweep_dir, parsed.point_id, ctx.job_dir)  # its own index entry: flat in the sweep's size
    for path, why in row_store.take_corrupt():  # a row file cut short (a copy, a hand edit) or invalid: said, measured again
        print(f"warning: {path} {why}; its point is measured again", file=sys.stderr, flush=True)
    ledger.LEDGER.ran(parsed.point_id)
    done = None if stored is None else str(stored.get("status"))
    metrics = tuple(parsed.runner["metrics"])
    if stored is not None and done == "ok":
        had = ran_metrics(stored.get("metrics"))
        if set(metrics) - had:  # measured before with fewer metrics: again, with what it had as well (nothing is lost)
            metrics = tuple(m for m in ALL_METRICS if m in had or m in metrics)
            done = None
    if done is not None and (done == "ok" or not parsed.runner["retry_failed"]):
        stub = {**parsed.columns, "status": done}  # enough of a row for the progress line
        if ctx.multirun and interrupts.STATE.sweep_dir is not None:
            # the launching process runs its jobs in order: one line for a run of them (progress.Skipped)
            progress.SKIPPED.add(done)
            eta.PREDICTED.skipped(cfg)
        else:  # a single run, or a job in a process of its own (SLURM, joblib): its own log says it
            print(progress.line(index, ctx.total, progress.describe(stub, varying), stub,
                                note=f"skipped: the sweep folder already has this point ({done})"), flush=True)
        _last_row_written = time.perf_counter()
        return stub

    if note := progress.SKIPPED.line(ctx.total):
        print(note, flush=True)
    in_order = ctx.multirun and interrupts.STATE.sweep_dir is not None  # the launching process's jobs, one by one
    if in_order:
        progress.SKIPPED.measuring()  # a point skipped after this one is no resumed sweep's first
        eta.PREDICTED.measuring(cfg, ctx.given, start)  # the grids' predictions, once, for the ETA
    try:
        with stops_from_scheduler():
            row = measure(parsed, metrics)
    except StoppedByScheduler as stop:  # a SLURM time limit: no row, so the rerun measures the point
        print(progress.line(index, ctx.total, progress.describe(parsed.columns, varying), {"status": "stopped"},
                            note=f"stopped by the scheduler ({stop}); no row: the same command measures it"),
              file=sys.stderr, flush=True)
        raise stop.original from None  # submitit records that the job did not complete
    if row.status == "invalid" and not ctx.multirun:
        raise InvalidPoint(row.error or "invalid point")  # e.g. a back end option it rejects
    interrupts.hold()  # from here the job ends whole (its row, results.csv, its line); a signal waits
    row.point_id, row.sweep_id, row.jobs_sharing_device = parsed.point_id, ctx.sweep_id, ctx.jobs_sharing_device
    row.timestamp = row.timestamp or datetime.now(timezone.utc).isoformat(timespec="seconds")
    _last_row_written = time.perf_counter()
    row.job_wall_s = _last_row_written - start
    written = row.to_dict()
    try:
        curves.write_curve(ctx.job_dir, written)  # scope=train: loss_curve.csv, before the row that marks the point done
        row_file = rows.record_row(ctx.sweep_dir, ctx.job_dir, written)  # row file, index entry; results.csv while the sweep is small
    except OSError as exc:  # a full disk, a folder made read-only: one line, and the sweep goes on
        # Every file is replaced whole (row_store.atomic_write_text), so nothing partial is left and
        # earlier rows stay; a point without its row file is simply measured again by the rerun.
        why = row_store.write_failure(exc)
        if not ctx.multirun:
            raise RowNotWritten(f"{why}; the point was measured but not recorded") from exc
        ledger.LEDGER.not_written(parsed.point_id, why)  # the sweep's end says how many points have no row, exit 1
        print(progress.line(index, ctx.total, progress.describe(written, varying), written,
                            note=f"not recorded: {why}; once "
                                 f"{'the link is removed' if exc.errno == errno.ELOOP else 'there is room'}, the "
                                 "same command measures the points left without a row"), file=sys.stderr, flush=True)
        if exc.errno == errno.EROFS:  # nothing more can be written: stop in one line rather than measure in vain
            print("error: the file system turned read-only, so the sweep stops here; the rows written are intact, "
                  "and the same command measures the rest once it is writable", file=sys.stderr, flush=True)
            sys.exit(1)
        return written
    if row.status == "error":  # the full traceback, which the one-line `error` column cannot hold
        from selfattn.measure.failures import write_traceback

        try:
            write_traceback(ctx.job_dir, _isolated_traceback or None)
        except OSError as exc:  # the row is recorded; only the traceback beside it is lost
            print(f"warning: traceback not kept: {row_store.write_failure(exc)}", file=sys.stderr)
    SINK.log_point(parsed.wandb, written, group=ctx.sweep_id or ctx.sweep_dir.name, out_dir=ctx.sweep_dir,
                   job=ctx.index)  # a curve too

    left_s = None
    if in_order:  # the time guard's predictions of the points left, scaled by the points measured (runners/eta.py)
        eta.PREDICTED.measured(cfg)
        left_s = eta.PREDICTED.eta_s(ctx.total)
    if left_s is None:
        skipped = progress.SKIPPED.said  # a resumed sweep's points already measured take no time: not in the average
        left_s = progress.eta_s(ctx.started_unix, (index or 0) - skipped, ctx.total - skipped if ctx.total else None)
    print(progress.line(index, ctx.total, progress.describe(written, varying), written, eta=left_s), flush=True)
    if not ctx.multirun:  # where the row went (a sweep says where results.csv is at its end)
        print(f"row: {row_file}; results: {ctx.sweep_dir / rows.CSV_NAME}", flush=True)
    return written


def _varying(cfg: Mapping[str, Any], overridden: list[str]) -> list[str]:
    """The keys worth showing: those the job's overrides set, and its grid point's keys."""
    keys = [k for k in overridden if k != "grid_point"]
    try:
        points = config.grid_points(cfg.get("grids")) if cfg.get("grid_point") is not None else []
        keys += list(points[cfg["grid_point"]]) if points else []
    except (IndexError, TypeError):
        pass
    return list(dict.fromkeys(keys))
