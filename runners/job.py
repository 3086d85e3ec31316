"""One job = one point: config -> Point -> measure -> row file -> results.csv -> wandb -> a line.

`run_job` takes a plain mapping and a `JobContext`, so tests drive it without Hydra;
runners/sweep.py only builds the context from HydraConfig and calls it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from runners import config as C
from runners import progress, row_store, rows
from runners.wandb_log import SINK
from selfattn.fields import check_value, field_types
from selfattn.measure.budget import Budget
from selfattn.point import Point
from selfattn.results import Row

# When the previous job of this process wrote its row: the next job's wall time starts there,
# so everything between two rows (the CSV rebuild, wandb and the progress line of the last
# job, Hydra composing this job's config) counts as this job's harness overhead.
_last_row_written: float | None = None


class InvalidPoint(ValueError):
    """A single run asked for a value that is never valid (the message is one line)."""


@dataclass
class JobContext:
    job_dir: Path  # this job's folder: row.json goes here
    sweep_dir: Path  # the sweep's folder: results.csv goes here (a single run: its own folder)
    multirun: bool = False
    index: int | None = None  # 0-based job number in the sweep
    varying: list[str] = field(default_factory=list)  # the keys this job's overrides set
    jobs_sharing_device: int = 1
    sweep_id: str = ""


def sweep_meta(sweep_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((sweep_dir / "sweep.json").read_text())
    except (OSError, ValueError):
        return {}


def invalid_row(parsed: C.Job, status: str = "invalid") -> dict[str, Any]:
    """A row for a point that does not validate: the raw values that fit their columns, and why."""
    row = Row(status=status, error=parsed.problem).to_dict()
    row.update(point_columns_of(parsed.values))
    return row


def point_columns_of(values: Mapping[str, Any]) -> dict[str, Any]:
    """The point's columns from raw config values: each value its field accepts, else text or empty."""
    hints, row_types = field_types(Point), field_types(Row)
    columns: dict[str, Any] = {}
    for f in fields(Point):
        value = values.get(f.name)
        if f.name in C.NODES:  # a config group's node: {name: ..., options}
            value = value.get("name") if isinstance(value, Mapping) else value
        if f.name == "backend_options":
            backend = values.get("backend")
            options = {k: v for k, v in backend.items() if k != "name"} if isinstance(backend, Mapping) else {}
            columns[f.name] = json.dumps(options, sort_keys=True, default=str)
            continue
        text_column = row_types[f.name] is str
        try:
            check_value(f.name, value, f, hints[f.name])
        except ValueError:  # a value its column cannot hold as typed: text keeps it, numbers stay empty
            columns[f.name] = str(value) if text_column and value is not None else None
            continue
        columns[f.name] = str(value) if text_column and value is not None else value
    d_model = values.get("d_model")
    columns["d_model"] = d_model if isinstance(d_model, int) and not isinstance(d_model, bool) else None
    return columns


def measure(point: Point, budget: Budget) -> dict[str, Any]:
    """Measure one valid point (selfattn.measure never raises for a failure of the point)."""
    from selfattn.measure import measure_point  # lazy: the back ends and the timers load here

    start = time.perf_counter()
    row = measure_point(point, budget).to_dict()
    row["point_wall_s"] = time.perf_counter() - start  # so job_wall_s - point_wall_s = runner + Hydra
    if row.get("d_model") is None:
        row["d_model"] = point.d_model
    return row


def run_job(cfg: Mapping[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Measure (or, on resume, skip) one point and record it everywhere; returns the row."""
    global _last_row_written
    start = time.perf_counter() if _last_row_written is None else _last_row_written
    meta = sweep_meta(ctx.sweep_dir) if ctx.multirun else {}
    total = meta.get("total")
    index = None if ctx.index is None else ctx.index + 1

    parsed = C.parse_job(cfg)  # the one step from config to Point; everything below reads `parsed`
    if parsed.problem and not ctx.multirun:
        raise InvalidPoint(parsed.problem)  # a single run: say what is wrong, measure nothing
    if parsed.wandb_problem:
        if not ctx.multirun:
            raise InvalidPoint(parsed.wandb_problem)
        SINK.give_up(parsed.wandb_problem)  # a sweep still measures; only wandb is off
    pid = parsed.point_id

    varying = _varying(cfg, ctx.varying)
    status = row_store.point_status(ctx.sweep_dir, pid, ctx.job_dir)  # this point's own index entry: flat in the sweep's size
    done = {pid: status} if status is not None else {}
    if pid in done and (done[pid] == "ok" or not parsed.runner["retry_failed"]):
        stub = _stub(parsed, done[pid])
        print(progress.line(index, total, progress.describe(stub, varying), stub,
                            note=f"skipped: the sweep folder already has this point ({done[pid]})"), flush=True)
        _last_row_written = time.perf_counter()
        return stub

    if parsed.point is None:
        row = invalid_row(parsed)
    else:
        try:
            row = measure(parsed.point, parsed.budget)
        except Exception as exc:  # never by contract; a bug must still leave a row, not stop the sweep
            row = invalid_row(parsed, status="error")
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    if row.get("status") == "invalid" and not ctx.multirun:
        raise InvalidPoint(row.get("error") or "invalid point")  # e.g. a back end option it rejects
    row.update(point_id=pid, sweep_id=ctx.sweep_id, jobs_sharing_device=ctx.jobs_sharing_device)
    if not row.get("timestamp"):
        row["timestamp"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    _last_row_written = time.perf_counter()
    row["job_wall_s"] = _last_row_written - start
    rows.record_row(ctx.sweep_dir, ctx.job_dir, row)  # row file, index entry; results.csv while the sweep is small
    if row.get("status") == "error":  # the full traceback, which the one-line `error` column cannot hold
        from selfattn.measure.failures import write_traceback

        write_traceback(ctx.job_dir)
    SINK.log_point(parsed.wandb, row, group=ctx.sweep_id or ctx.sweep_dir.name, out_dir=ctx.sweep_dir)

    eta = progress.eta_s(meta.get("started_unix"), index or 0, total)
    print(progress.line(index, total, progress.describe(row, varying), row, eta=eta), flush=True)
    return row


def _varying(cfg: Mapping[str, Any], overridden: list[str]) -> list[str]:
    """The keys worth showing: those the job's overrides set, and its grid point's keys."""
    keys = [k for k in overridden if k != "grid_point"]
    try:
        points = C.grid_points(cfg.get("grids")) if cfg.get("grid_point") is not None else []
        keys += list(points[cfg["grid_point"]]) if points else []
    except (IndexError, TypeError):
        pass
    return list(dict.fromkeys(keys))


def _stub(parsed: C.Job, status: str) -> dict[str, Any]:
    """Enough of a row to print the progress line of a skipped point."""
    columns = parsed.point.columns() if parsed.point is not None else point_columns_of(parsed.values)
    return {**columns, "status": status}
