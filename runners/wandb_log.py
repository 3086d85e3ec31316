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
Either way group = the sweep (its folder name), and at the end of a multirun the whole
results.csv goes to wandb once more as a `wandb.Table`. If wandb is missing or a run cannot
start, one warning line is printed and wandb is off for the rest of the process.
"""

from __future__ import annotations

import atexit
import sys
from pathlib import Path
from typing import Any, Mapping

from selfattn.point import POINT_COLUMNS
from selfattn.results import decode_curve

# System metrics sampling would steal CPU from the timed calls on a small machine.
_SETTINGS = {"silent": True, "console": "off", "x_disable_stats": True, "disable_git": True, "save_code": False}


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

    def log_point(self, conf: Mapping[str, Any], row: Mapping[str, Any], *, group: str, out_dir: Path) -> None:
        """Send one finished point: a step of the process's run, or a run of its own."""
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
                self.run = self._init(wandb, conf, group=group, job_type="sweep", name=f"{group}-points",
                                      dir=str(out_dir), config={"sweep": group})
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

    def log_table(self, conf: Mapping[str, Any], rows: list[Mapping[str, Any]], columns: list[str], *,
                  group: str, out_dir: Path) -> None:
        """The whole results table once, in this process's open run or in a run of its own."""
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

    def close(self) -> None:
        if self.run is not None:
            try:
                self.run.finish()
            except Exception:
                pass
            self.run = None


def _table_cell(value: Any) -> Any:
    return str(value) if isinstance(value, (dict, list)) else value


# A run's config: the point's columns, the kernel that ran, and the ids that tie it to results.csv.
_POINT_KEYS = frozenset(POINT_COLUMNS) | {"kernel", "point_id", "sweep_id"}

SINK = WandbSink()
atexit.register(SINK.close)
