"""Rows to wandb, imported lazily, never in the way of results.csv.

Two designs behind `wandb.run_per_point`:
- false (default): one wandb run per sweep process, opened at its first point, logging one
  step per point (the point's keys + metrics), closed at the end of the multirun or at exit.
  Opening and closing a run costs about a second (a service handshake, files, a flush);
  paid once per process instead of once per point, it keeps the harness overhead per point
  to milliseconds while every point is still in wandb (history = the tidy table).
- true: one run per point (`with wandb.init(...)`: config = the point, metrics in the run's
  summary, job_type = the back end), the layout wandb's UI groups and filters best, at about
  a second per point.
Either way group = the sweep (`<name>/<folder>`, runners.callbacks.sweep_id): every process of a
sweep, a SLURM array's jobs included, computes the same group from the sweep folder it writes
to, and names its own run after the first job it ran (`<group>-points-job<n>`). At the end of a
multirun the whole results.csv goes to wandb once more as a `wandb.Table` (in this process's
open run), and the written report as a run of its own (job_type `report`, analysis/wandb_report.py).
If wandb is missing or a run cannot start, one warning line is printed and wandb is off for the
rest of the process. mode=disabled imports nothing.
"""

from __future__ import annotations

import atexit
import os
import socket
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from analysis.wandb_report import SETTINGS as _SETTINGS  # no sampler: it would steal CPU from the timed calls
from selfattn.point import POINT_COLUMNS
from selfattn.results import decode_curve


class WandbSink:
    """Per-process state: at most one open run, and whether wandb is usable at all."""

    def __init__(self) -> None:
        self.run: Any = None
        self.run_key: tuple | None = None
        self.disabled = False
        self.step = 0

    def _wandb(self, mode: str) -> Any:
        if self.disabled or mode == "disabled":
            return None
        quiet_offline(mode)
        try:
            import wandb
        except ImportError:
            self.give_up("not installed")
            return None
        return wandb

    def give_up(self, why: str) -> None:
        if self.disabled:
            return  # one warning per process is enough
        self.disabled = True
        print(f"warning: wandb off for this process ({why}); results.csv is complete regardless", file=sys.stderr)

    def _init(self, wandb: Any, conf: Mapping[str, Any], **kwargs: Any) -> Any:
        args = dict(project=conf.get("project"), entity=conf.get("entity"), mode=conf.get("mode"), **kwargs)
        try:
            try:
                return wandb.init(settings=wandb.Settings(**_SETTINGS), reinit="create_new", **args)
            except (TypeError, ValueError):  # an older wandb without these settings / reinit modes
                return wandb.init(reinit=True, **args)
        except Exception as exc:  # wandb raises many kinds; none may stop the sweep
            self.give_up(f"init failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            return None

    def log_point(self, conf: Mapping[str, Any], row: Mapping[str, Any], *, group: str, out_dir: Path,
                  job: int | None = None) -> None:
        """Send one finished point: a step of the process's run, or a run of its own.

        `job`: the point's 0-based job number in the sweep; the process's run is named after its first."""
        wandb = self._wandb(str(conf.get("mode")))
        if wandb is None:
            return
        curve = decode_curve(row.get("loss_curve"))
        values = {k: v for k, v in row.items() if v is not None and v != "" and k != "loss_curve"}
        try:
            if conf.get("run_per_point"):
                point = {k: v for k, v in values.items() if k in _POINT_KEYS}
                run = self._init(wandb, conf, group=group, job_type=str(row.get("backend")), config=point,
                                 name=f"{group}-{row.get('point_id')}", dir=str(out_dir))
                if run is not None:
                    with run:
                        for step, loss, accuracy in curve:  # scope=train: the run's own history is the curve
                            run.log({"train/loss": loss, "train/accuracy": accuracy}, step=step)
                        run.summary.update(values)
                return
            key = (conf.get("project"), conf.get("mode"), group)
            if self.run is None or self.run_key != key:
                self.close()
                self.run = self._init(wandb, conf, group=group, job_type="sweep", name=points_run_name(group, job),
                                      dir=str(out_dir), config={"sweep": group, **process_config(job)})
                self.run_key = key
                self.step = 0
            if self.run is not None:
                if curve:  # one step per point here, so the curve is a line series of its own, keyed by the point
                    steps = [step for step, _, _ in curve]
                    values[f"loss_curve/{row.get('point_id')}"] = wandb.plot.line_series(
                        xs=steps, ys=[[loss for _, loss, _ in curve]], keys=["loss"],
                        title=f"loss {row.get('point_id')}", xname="step")
                self.run.log(values, step=self.step)
                self.step += 1
        except Exception as exc:
            self.give_up(f"log failed: {type(exc).__name__}")

    def log_table(self, conf: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], columns: list[str], *,
                  group: str, out_dir: Path, own_run: bool = True) -> None:
        """The whole results table once, in this process's open run, or in a run of its own when `own_run`
        (false when a report run follows: it holds the table, so no run is opened for it alone)."""
        if self.run is None and not own_run:
            return
        wandb = self._wandb(str(conf.get("mode")))
        if wandb is None or not rows:
            return
        try:
            data = [[_table_cell(r.get(c)) for c in columns] for r in rows]
            table = wandb.Table(columns=columns, data=data, allow_mixed_types=True)
            run = self.run
            if run is None:
                run = self._init(wandb, conf, group=group, job_type="results", name=f"{group}-results", dir=str(out_dir))
            if run is not None:
                run.log({"results": table})
                run.finish()
            self.run = None
        except Exception as exc:
            self.give_up(f"table failed: {type(exc).__name__}")

    def log_report(self, conf: Mapping[str, Any], report_md: Path, results: list[Path], *, group: str,
                   out_dir: Path) -> Path | None:
        """The written report as one run of the sweep's group (analysis/wandb_report.py); its folder or None.

        Nothing when wandb is disabled or this process already gave up on it (its one warning is printed)."""
        if self.disabled or conf.get("mode") == "disabled":
            return None
        quiet_offline(str(conf.get("mode")))
        from analysis.wandb_report import log_report

        folder = log_report(report_md, results, mode=str(conf.get("mode")), project=conf.get("project"),
                            entity=conf.get("entity"), group=group, run_dir=out_dir, config={"sweep": group})
        if folder is None:
            self.disabled = True  # log_report printed the one warning
        return folder

    def close(self) -> None:
        if self.run is not None:
            try:
                self.run.finish()
            except Exception:
                pass
            self.run = None


# mode=offline means no network attempt at all. wandb's service still reports its own errors over the network
# (a DNS lookup and an HTTPS POST from a thread of the sweep's process, seen in a loopback-only network
# namespace) unless WANDB_ERROR_REPORTING is false; set before the service starts, so every run of the
# process (the points' and the report's, and a report process started later) inherits it.
OFFLINE_ENV = {"WANDB_ERROR_REPORTING": "false", "WANDB_DISABLE_CODE": "true", "WANDB_DISABLE_GIT": "true"}


def quiet_offline(mode: str) -> None:
    """With mode=offline, turn off every path of wandb's that would reach the network on its own."""
    if mode == "offline":
        os.environ.update(OFFLINE_ENV)


def points_run_name(group: str, job: int | None) -> str:
    """A process's run: `<group>-points-job<n>` after the first job it ran (n 0-based), so the runs of a
    SLURM array or a joblib pool, one per process, keep apart in the group; `<group>-points` when unknown."""
    return f"{group}-points" if job is None else f"{group}-points-job{job}"


def process_config(job: int | None) -> dict[str, Any]:
    """What tells a process's run apart in wandb's table: its first job, host, and SLURM's ids when there."""
    config: dict[str, Any] = {"first_job": job, "hostname": socket.gethostname()}
    for key, env in (("slurm_job_id", "SLURM_JOB_ID"), ("slurm_array_job_id", "SLURM_ARRAY_JOB_ID"),
                     ("slurm_array_task_id", "SLURM_ARRAY_TASK_ID")):
        if os.environ.get(env):
            config[key] = os.environ[env]
    return config


def _table_cell(value: Any) -> Any:
    return str(value) if isinstance(value, (dict, list)) else value


# A run's config: the point's columns, the kernel that ran, and the ids that tie it to results.csv.
_POINT_KEYS = frozenset(POINT_COLUMNS) | {"kernel", "point_id", "sweep_id"}

SINK = WandbSink()
atexit.register(SINK.close)
