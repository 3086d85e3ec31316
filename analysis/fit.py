"""Power-law fits y = c * n^b: the Theil-Sen slope of log y on log n, with its 95% interval.

Theil-Sen takes the median of the slopes between every pair of sizes, and its interval comes
from ranks (Kendall's tau), not from residuals: one point slowed by a burst of load on a shared
machine moves the exponent by about one rank of those pairwise slopes, where least squares
would follow it and widen its interval until the fit decides nothing. With few sizes the
interval is the whole range of pairwise slopes, so sweeps fit over 6 or more sizes. Even so, a
point tripled by a burst drags its pairwise slopes into the interval's edge; so with 6 or more
sizes the fit also tries leaving each size out, and when one size alone carries more than half of
the interval's width it is left out and named (`left_out`): one noisy point cannot void a fit.

Only the larger sizes enter the fit: at small n fixed overheads (kernel launches, Python,
allocator pages) dominate and would pull the exponent towards 0, and a CPU's cache cliff bends
the curve. The rule: the sizes from n_max / 2^1.5 up (the top one and a half octaves) or the
upper half of the distinct sizes, whichever holds more, and at least `min_points` of them (all
of them when fewer exist).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import theilslopes


@dataclass(frozen=True)
class PowerFit:
    exponent: float
    ci_low: float  # 95% interval on the exponent; NaN with only two sizes
    ci_high: float
    prefactor: float  # c in y = c * n^b
    n_points: int  # distinct sizes used
    n_min: float  # smallest and largest size used
    n_max: float
    left_out: float | None = None  # the one size left out as an outlier, if any

    def predict(self, n: np.ndarray | float) -> np.ndarray | float:
        return self.prefactor * np.power(n, self.exponent)

    def ratio(self, n_from: float, n_to: float) -> tuple[float, float, float]:
        """y(n_to)/y(n_from) the fit predicts, with the ratio's 95% interval."""
        factor = math.log(n_to / n_from)
        return (math.exp(self.exponent * factor), math.exp(self.ci_low * factor),
                math.exp(self.ci_high * factor))

    def label(self) -> str:
        """'b=2.01 [1.95, 2.07]': exponent and its 95% interval, as legends and tables show it."""
        if math.isnan(self.ci_low):
            return f"b={self.exponent:.2f} (2 sizes, no CI)"
        text = f"b={self.exponent:.2f} [{self.ci_low:.2f}, {self.ci_high:.2f}]"
        return text + (f" (outlier n={self.left_out:.0f} left out)" if self.left_out is not None else "")


TOP_OCTAVES = 1.5  # sizes within this many octaves of the largest are fitted


def upper_sizes(sizes: np.ndarray, min_points: int = 3) -> np.ndarray:
    """The distinct sizes a fit uses: the top 1.5 octaves or the upper half, at least `min_points` (or all)."""
    distinct = np.unique(sizes)
    in_top = int(np.sum(distinct >= distinct[-1] / 2 ** TOP_OCTAVES)) if len(distinct) else 0
    keep = max(min_points, math.ceil(len(distinct) / 2), in_top)
    return distinct[-keep:]


def fit_power_law(n: np.ndarray, y: np.ndarray, *, min_points: int = 3) -> PowerFit | None:
    """Fit y = c * n^b over the larger sizes; None when fewer than two usable sizes remain, or when the law's
    prefactor c is no float (values so far apart, an absurd TFLOP/s, that c overflows: no law to draw or read).

    Several y values at one n (seeds, repeats) are reduced to their median first, so every
    size weighs the same and the interval counts sizes, not repeats.
    """
    n = np.asarray(n, dtype=float)
    y = np.asarray(y, dtype=float)
    good = np.isfinite(n) & np.isfinite(y) & (n > 0) & (y > 0)
    n, y = n[good], y[good]
    if len(np.unique(n)) < 2:
        return None
    sizes = upper_sizes(n, min_points)
    log_n = np.log(sizes)
    log_y = np.log([np.median(y[n == s]) for s in sizes])
    if len(sizes) == 2:
        slope = (log_y[1] - log_y[0]) / (log_n[1] - log_n[0])
        prefactor = _exp(log_y[0] - slope * log_n[0])
        if prefactor is None:
            return None
        return PowerFit(float(slope), math.nan, math.nan, prefactor, 2, float(sizes[0]), float(sizes[-1]))
    fit = _theil_sen(sizes, log_n, log_y)
    if fit is None:
        return None
    if len(sizes) >= MIN_SIZES_FOR_LEAVE_ONE_OUT:
        keep = np.ones(len(sizes), dtype=bool)
        trials = []
        for i in range(len(sizes)):
            keep[i] = False
            trial = _theil_sen(sizes[keep], log_n[keep], log_y[keep])
            if trial is not None:
                trials.append((trial, float(sizes[i])))
            keep[i] = True
        best, size = min(trials, key=lambda t: t[0].ci_high - t[0].ci_low) if trials else (fit, None)
        if size is not None and best.ci_high - best.ci_low < (fit.ci_high - fit.ci_low) / 2:
            fit = PowerFit(best.exponent, best.ci_low, best.ci_high, best.prefactor, best.n_points, best.n_min,
                           best.n_max, left_out=size)
    return fit


MIN_SIZES_FOR_LEAVE_ONE_OUT = 6  # five or more sizes must remain


def _exp(log_value: float) -> float | None:
    """exp(log_value), or None where it is no finite float."""
    try:
        value = math.exp(log_value)
    except OverflowError:
        return None
    return value if math.isfinite(value) else None


def _theil_sen(sizes: np.ndarray, log_n: np.ndarray, log_y: np.ndarray) -> PowerFit | None:
    slope, intercept, low, high = theilslopes(log_y, log_n, alpha=0.95, method="separate")
    prefactor = _exp(intercept)
    if prefactor is None:
        return None
    return PowerFit(float(slope), float(low), float(high), prefactor, len(sizes), float(sizes[0]), float(sizes[-1]))
