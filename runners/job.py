"""One job = one point: config -> Point -> measure -> row file -> results.csv -> wandb -> a line.

`run_job` takes a plain mapping and a `JobContext`, so tests drive it without Hydra;
runners/sweep.py only builds the context from HydraConfig and calls it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from runners import config as C
from runners import progress, rows
from runners.wandb_log import SINK
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


def invalid_row(cfg: Mapping[str, Any], message: str) -> dict[str, Any]:
    """A row for a point that does not validate: the raw values that fit the columns, and why."""
    row = Row(status="invalid", error=message).to_dict()
    try:
        flat = C.flat_config(cfg)
    except ValueError:
        flat = dict(cfg)
    backend, precision = flat.get("backend"), flat.get("precision")
    row["backend"] = str(backend.get("name") if isinstance(backend, Mapping) else backend or "")
    row["precision"] = str(precision.get("name") if isinstance(precision, Mapping) else precision or "")
    if isinstance(backend, Mapping):
        row["backend_options"] = json.dumps({k: v for k, v in backend.items() if k != "name"}, sort_keys=True)
    for key in ("batch", "heads", "seq_len", "q_len", "head_dim", "d_model", "seed"):
        value = flat.get(key)
        row[key] = value if isinstance(value, int) and not isinstance(value, bool) else None
    for key in ("device", "mode", "scope", "scale"):
        row[key] = "" if flat.get(key) is None else str(flat.get(key))
    row["causal"] = flat.get("causal") if isinstance(flat.get("causal"), bool) else None
    std = flat.get("input_std")
    row["input_std"] = float(std) if isinstance(std, (int, float)) and not isinstance(std, bool) else None
    return row


def measure(point: Any, budget: Mapping[str, Any]) -> dict[str, Any]:
    """Measure one valid point (selfattn.measure never raises for a failure of the point)."""
    from selfattn.measure import Budget, measure_point  # lazy: torch and the back ends load here

    start = time.perf_counter()
    row = measure_point(point, Budget(**budget)).to_dict()
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

    try:
        point, budget = C.point_from_config(cfg), C.budget_kwargs(cfg)
        pid, problem = C.point_id(point), ""
    except ValueError as exc:
        point, budget, pid, problem = None, {}, C.raw_point_id(cfg), str(exc)
    if problem and not ctx.multirun:
        raise InvalidPoint(problem)  # a single run: say what is wrong, measure nothing

    try:
        wandb_conf = C.check_section("wandb", cfg.get("wandb"), C.WandbConf)
    except ValueError as exc:
        if not ctx.multirun:
            raise InvalidPoint(str(exc)) from None
        SINK.give_up(str(exc))  # a sweep still measures; only wandb is off
        wandb_conf = {"mode": "disabled"}

    varying = _varying(cfg, ctx.varying)
    done = rows.done_points(ctx.sweep_dir)
    if pid in done and (done[pid] == "ok" or not cfg.get("retry_failed")):
        stub = _stub(cfg, done[pid])
        print(progress.line(index, total, progress.describe(stub, varying), stub,
                            note=f"skipped: the sweep folder already has this point ({done[pid]})"), flush=True)
        _last_row_written = time.perf_counter()
        return stub

    if point is None:
        row = invalid_row(cfg, problem)
    else:
        try:
            row = measure(point, budget)
        except Exception as exc:  # never by contract; a bug must still leave a row, not stop the sweep
            row = invalid_row(cfg, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            row["status"] = "error"
    if row.get("status") == "invalid" and not ctx.multirun:
        raise InvalidPoint(row.get("error") or "invalid point")  # e.g. a back end option it rejects
    row.update(point_id=pid, sweep_id=ctx.sweep_id, jobs_sharing_device=ctx.jobs_sharing_device)
    if not row.get("timestamp"):
        row["timestamp"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    _last_row_written = time.perf_counter()
    row["job_wall_s"] = _last_row_written - start
    rows.write_row(ctx.job_dir, row)
    rows.rebuild_csv(ctx.sweep_dir)
    SINK.log_point(wandb_conf, row, group=ctx.sweep_id or ctx.sweep_dir.name, out_dir=ctx.sweep_dir)

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


def _stub(cfg: Mapping[str, Any], status: str) -> dict[str, Any]:
    """Enough of a row to print the progress line of a skipped point."""
    try:
        flat = C.flat_config(cfg)
    except ValueError:
        flat = dict(cfg)
    stub = {k: v for k, v in flat.items() if not isinstance(v, Mapping)}
    for key in ("backend", "precision"):
        node = flat.get(key)
        stub[key] = str(node.get("name") if isinstance(node, Mapping) else node or "")
    stub["status"] = status
    return stub
