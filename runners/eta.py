"""The progress line's ETA: the time guard's predictions of the points left, scaled by how long the measured ones took.

The average of the finished jobs (progress.eta_s) makes a poor first guess: the first point pays one-off costs (the
device's matmul peak measured once, the back ends imported, Python and Hydra started) and an experiment's grid may
start with its largest point; the default sweep's first line said "ETA 54m12s" for a sweep that took 11 minutes.
So where the sweep's points are an experiment's `grids` (the default sweep's are), every grid point is predicted
once, before the first point is measured, by the prediction the time guard skips points by
(selfattn.measure.predict.predict_point_s, at the device's nominal peak: only the points' relative cost matters
here), and the ETA is the predicted seconds of the points left times the ratio measured so far: seconds since the
first measured point started over the predicted seconds of the points measured since. A point a resumed sweep
skips costs nothing and counts as done.

Without grids (a plain `-m backend=a,b` sweep, whose jobs only the sweeper holds), a grid too large to predict in a
moment, a point that cannot be predicted, or a job in a process of its own (joblib, SLURM), the average answers as
before.
"""

from __future__ import annotations

import time
from typing import Any, Collection, Mapping

MAX_GRID_POINTS = 5000  # predicting costs ~3 ms a point: past this the first point would wait seconds for its ETA


class Predicted:
    """One sweep's predictions and the measured ratio, in the launching process (its jobs run one after another)."""

    def __init__(self) -> None:
        self.seconds: list[float] | None = None  # grid point -> predicted seconds; None: not predicted (yet)
        self.tried = False
        self.done: dict[int, int] = {}  # grid point -> jobs of it finished (measured or skipped)
        self.measured_s = 0.0  # predicted seconds of the points measured
        self.clock: float | None = None  # perf_counter when the first measured point started

    def skipped(self, cfg: Mapping[str, Any]) -> None:
        """A point the sweep folder already holds: done, at no cost."""
        point = _grid_point(cfg)
        if point is not None:
            self.done[point] = self.done.get(point, 0) + 1

    def measuring(self, cfg: Mapping[str, Any], given: Collection[str] | None, started: float) -> None:
        """Before a point is measured: predict the grids once (the first time), start the clock."""
        if not self.tried:
            self.tried = True
            self.seconds = predict_grid(cfg, given)
        if self.clock is None:
            self.clock = started

    def measured(self, cfg: Mapping[str, Any]) -> None:
        point = _grid_point(cfg)
        if point is None:
            self.seconds = None  # not a grid's job: the predictions say nothing of it
            return
        self.done[point] = self.done.get(point, 0) + 1
        if self.seconds is not None and point < len(self.seconds):
            self.measured_s += self.seconds[point]

    def eta_s(self, total: int | None, now: float | None = None) -> float | None:
        """Seconds left, or None where the predictions cannot say (the caller falls back to the average)."""
        if self.seconds is None or not total or self.clock is None or self.measured_s <= 0:
            return None
        repeats, extra = divmod(total, len(self.seconds))  # the grids times other swept keys (seed=0,1)
        if extra or not repeats:
            return None
        left_s = sum(s * max(0, repeats - self.done.get(g, 0)) for g, s in enumerate(self.seconds))
        elapsed = (time.perf_counter() if now is None else now) - self.clock
        return left_s * elapsed / self.measured_s


def _grid_point(cfg: Mapping[str, Any]) -> int | None:
    point = cfg.get("grid_point") if hasattr(cfg, "get") else None
    return point if isinstance(point, int) and not isinstance(point, bool) else None


def predict_grid(cfg: Mapping[str, Any], given: Collection[str] | None) -> list[float] | None:
    """Predicted seconds of each point of the job's `grids` (runners.config.grid_points' order), or None where
    there are none, too many, or one cannot be predicted (an invalid point, a back end that does not load)."""
    from omegaconf import DictConfig, OmegaConf

    from runners import config

    if _grid_point(cfg) is None:
        return None
    try:
        raw = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
        if not isinstance(raw, dict):
            return None
        base: dict[str, Any] = {str(key): value for key, value in raw.items()}
        count = len(config.grid_points(base.get("grids")))
        if not 0 < count <= MAX_GRID_POINTS:
            return None
        from selfattn.backends.resolved import resolve_point
        from selfattn.measure.device import resolve_device
        from selfattn.measure.predict import nominal_peak_tflops, predict_point_s

        seconds = []
        for index in range(count):
            job = config.parse_job({**base, "grid_point": index}, given)
            if job.point is None or job.budget is None:
                return None
            device = resolve_device(job.point.device)
            seconds.append(predict_point_s(job.point, nominal_peak_tflops(device, job.point.precision),
                                           job.budget.timing_s, job.budget.accuracy_rows,
                                           resolve_point(job.point, device)))
        return seconds if all(s > 0 for s in seconds) else None
    except Exception:  # noqa: BLE001 - an ETA is a courtesy: any failure leaves the average to answer
        return None


PREDICTED = Predicted()  # the launching process's sweep
